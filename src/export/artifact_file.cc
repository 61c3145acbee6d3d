// The artifact container (artifact_file.h).
#include "artifact_file.h"

#include <fstream>
#include <sstream>

#include "codegen/cpu/sha256.h"

namespace ember::exporting {
namespace {

constexpr char kMagic[] = "EMBER-ARTIFACT\n";

Status Bad(const std::string& path, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "ember artifact " + path + ": " + why);
}

}  // namespace

StatusOr<ArtifactFile> ArtifactFile::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("ember artifact ", path, ": cannot open the file");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string magic = kMagic;
  if (bytes.compare(0, magic.size(), magic) != 0) {
    return Bad(path, "not an ember artifact (the file does not start with \"EMBER-ARTIFACT\")");
  }
  size_t pos = magic.size();
  auto line = [&](std::string* out) {
    size_t nl = bytes.find('\n', pos);
    if (nl == std::string::npos || nl - pos > 256) return false;
    *out = bytes.substr(pos, nl - pos);
    pos = nl + 1;
    return true;
  };
  std::string l;
  if (!line(&l) || l.rfind("format ", 0) != 0) {
    return Bad(path, "truncated or corrupt preamble (no `format` line)");
  }
  int format = -1;
  try {
    format = std::stoi(l.substr(7));
  } catch (...) {
    return Bad(path, "corrupt `format` line: '" + l + "'");
  }
  if (format != kArtifactFormatVersion) {
    return Status(StatusCode::kInvalidArgument,
                  "ember artifact " + path + ": format version " + std::to_string(format) +
                      ", but this ember reads format version " +
                      std::to_string(kArtifactFormatVersion) +
                      " only: export the model again with this ember");
  }
  if (!line(&l) || l.rfind("header ", 0) != 0) {
    return Bad(path, "truncated or corrupt preamble (no `header` line)");
  }
  std::istringstream hs(l.substr(7));
  size_t header_bytes = 0;
  std::string header_sha;
  if (!(hs >> header_bytes >> header_sha)) return Bad(path, "corrupt `header` line: '" + l + "'");
  if (bytes.size() < pos + header_bytes) {
    return Bad(path, "truncated: the header needs " + std::to_string(pos + header_bytes) +
                         " bytes, the file has " + std::to_string(bytes.size()));
  }
  const std::string header = bytes.substr(pos, header_bytes);
  if (codegen::Sha256Hex(header) != header_sha) {
    return Bad(path, "corrupt: the header's SHA-256 does not match");
  }
  const size_t data = pos + header_bytes;
  ArtifactFile f;
  f.path_ = path;
  std::istringstream es(header);
  for (std::string e; std::getline(es, e);) {
    std::istringstream ls(e);
    std::string tag, sha, name;
    size_t off = 0, size = 0;
    if (!(ls >> tag >> off >> size >> sha >> name) || tag != "entry") {
      return Bad(path, "corrupt header line '" + e + "'");
    }
    if (data + off + size > bytes.size()) {
      return Bad(path, "truncated: entry " + name + " ends at byte " +
                           std::to_string(data + off + size) + ", the file has " +
                           std::to_string(bytes.size()) + " bytes (" +
                           std::to_string(data + off + size - bytes.size()) + " missing)");
    }
    std::string content = bytes.substr(data + off, size);
    if (codegen::Sha256Hex(content) != sha) {
      return Bad(path, "corrupt: entry " + name + " does not match its SHA-256");
    }
    f.entries_[name] = std::move(content);
  }
  return f;
}

StatusOr<std::string> ArtifactFile::Read(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return NotFound("ember artifact ", path_, ": no entry ", name);
  return it->second;
}

std::vector<std::string> ArtifactFile::Names() const {
  std::vector<std::string> out;
  for (const auto& kv : entries_) out.push_back(kv.first);
  return out;
}

}  // namespace ember::exporting
