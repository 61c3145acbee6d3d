// The artifact container (docs/architecture.md, "Export artifacts"): one file holding
// named entries, each checked by size and SHA-256. Written by python/ember/export.py
// (to a temporary name, fsync'ed and renamed into place), read here. Layout:
//
//   EMBER-ARTIFACT\n
//   format <kArtifactFormatVersion>\n
//   header <H> <sha256 of the H header bytes>\n
//   <H bytes: one line per entry: `entry <offset> <size> <sha256> <name>\n`>
//   <data: entry bytes at data start + offset; entries with equal bytes may share them>
//
// Torch-free.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ember/status.h"

namespace ember::exporting {

// Bumped whenever a reader of the previous version could misread a new file.
inline constexpr int kArtifactFormatVersion = 1;

class ArtifactFile {
 public:
  // Reads and verifies the whole file: magic, format version (InvalidArgument
  // naming both versions on a mismatch), header checksum, every entry inside the file
  // (a truncated file says how many bytes are missing) and its SHA-256 (InvalidArgument naming
  // the entry). NotFound if the file cannot be opened.
  static StatusOr<ArtifactFile> Open(const std::string& path);

  bool Has(const std::string& name) const { return entries_.count(name) > 0; }
  // The entry's bytes; NotFound naming it.
  StatusOr<std::string> Read(const std::string& name) const;
  // Entry names, sorted.
  std::vector<std::string> Names() const;

 private:
  std::string path_;
  std::map<std::string, std::string> entries_;
};

}  // namespace ember::exporting
