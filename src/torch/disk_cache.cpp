// The graph cache's disk half (disk_cache.h).
#include "disk_cache.h"

#include <sys/stat.h>
#include <torch/headeronly/version.h>  // macros only
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ember/version.h"

namespace ember_torch {
namespace {

std::string cache_dir() {
  const char* d = std::getenv("EMBER_CACHE_DIR");
  std::string base;
  if (d && *d) {
    base = d;
  } else {
    const char* home = std::getenv("HOME");
    if (!home || !*home) return "";
    base = std::string(home) + "/.cache/ember";
  }
  // One folder per Ember version and torch minor version: an entry written by another
  // version is never read.
  return base + "/lazy-v1-ember" + ember::Version() + "-torch" +
         std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

std::string cache_path(uint64_t hash, const char* backend) {
  std::string dir = cache_dir();
  if (dir.empty()) return "";
  std::ostringstream os;
  os << dir << "/" << std::hex << hash << "." << backend << ".graph";
  return os.str();
}

}  // namespace

bool disk_cache_lookup(uint64_t hash, const char* backend, const std::vector<int64_t>& want) {
  std::string p = cache_path(hash, backend);
  if (p.empty()) return false;
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  std::vector<int64_t> tokens;
  int64_t n = 0;
  if (!f.read(reinterpret_cast<char*>(&n), sizeof(n)) || n != static_cast<int64_t>(want.size())) {
    return false;
  }
  tokens.resize(n);
  if (!f.read(reinterpret_cast<char*>(tokens.data()), n * sizeof(int64_t))) return false;
  return tokens == want;
}

void disk_cache_store(uint64_t hash, const char* backend, const std::vector<int64_t>& tokens) {
  std::string p = cache_path(hash, backend);
  if (p.empty()) return;
  std::string dir = p.substr(0, p.rfind('/'));
  // mkdir -p
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      std::string sub = dir.substr(0, i);
      ::mkdir(sub.c_str(), 0755);
    }
  }
  std::string tmp = p + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    int64_t n = static_cast<int64_t>(tokens.size());
    f.write(reinterpret_cast<const char*>(&n), sizeof(n));
    f.write(reinterpret_cast<const char*>(tokens.data()), n * sizeof(int64_t));
    if (!f) {
      std::remove(tmp.c_str());
      return;
    }
  }
  std::rename(tmp.c_str(), p.c_str());  // atomic: readers never see a partial entry
}

}  // namespace ember_torch
