// Private: the on-disk kernel cache (DESIGN §5).
//
// Layout under the cache directory ($EMBER_CACHE_DIR, default
// $XDG_CACHE_HOME/ember or ~/.cache/ember):
//   kernels/<k0k1>/<key>.meta            entry: names the .so and its checksum
//   kernels/<k0k1>/<key>-<sha16>.so      the shared object (content-addressed)
//   kernels/<k0k1>/<key>.cc              the generated source (for reading)
//   toolchain/<hash>.version             memoized `c++ --version` output
//   tmp/<key16>.<pid>.<tid>.<n>/         private compile directories (removed
//                                        after use; ones older than a day, left
//                                        by killed processes, are swept)
// `key` is the SHA-256 of everything the object depends on (source,
// compiler path and version, flags, CPU features, Ember version, ABI).
// Every file is written to a unique temporary name in the same directory,
// fsync'ed and renamed into place, so readers see whole files only and
// concurrent writers of one key both succeed (the .so name includes its own
// checksum, so a .meta always names bytes it matches). Before a .so is
// loaded its size and SHA-256 are checked against the .meta; an entry that
// fails is deleted and rebuilt, never loaded.
#pragma once

#include <string>

#include "ember/status.h"

namespace ember::codegen {

std::string DefaultCacheDir();

Status ReadFile(const std::string& path, std::string* contents);
// Writes via a unique temp file in the same directory + fsync + rename;
// creates missing parent directories.
Status WriteFileAtomic(const std::string& path, const std::string& contents);
Status MakeDirs(const std::string& path);

class DiskCache {
 public:
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  std::string MetaPath(const std::string& key) const;
  std::string SourcePath(const std::string& key) const;

  enum class LookupKind { kHit, kMiss, kCorrupt };
  // kHit: *so_path is a verified object for `key`. kCorrupt: the entry was
  // present but failed verification and has been deleted.
  LookupKind Lookup(const std::string& key, std::string* so_path, std::string* why) const;

  // A new private directory for one compile.
  StatusOr<std::string> MakeTempDir(const std::string& key) const;
  // Moves the object at `built_so` (inside a temp dir of this cache) into
  // the entry for `key`, writes the source and the .meta; returns the
  // installed .so path.
  StatusOr<std::string> Install(const std::string& key, const std::string& built_so,
                                const std::string& source) const;
  // As Install, for an object that holds several kernels (a batch built by
  // CompileKernels): `built_so` stays where it is and the entry's
  // `<key>-<sha16>.so` becomes a hard link to it (a copy where the file
  // system has no hard links), so one object on disk serves every kernel of
  // the batch while each key keeps an ordinary, independently verified and
  // removable entry.
  StatusOr<std::string> InstallShared(const std::string& key, const std::string& built_so,
                                      const std::string& source) const;
  // Deletes the entry's .meta and the .so it names.
  void Remove(const std::string& key) const;

 private:
  StatusOr<std::string> InstallImpl(const std::string& key, const std::string& built_so,
                                    const std::string& source, bool shared) const;
  std::string EntryDir(const std::string& key) const;
  std::string dir_;
};

// Removes a directory tree made by MakeTempDir (best effort).
void RemoveTree(const std::string& path);

}  // namespace ember::codegen
