// On-disk kernel cache (disk_cache.h).
#include "codegen/cpu/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "codegen/cpu/sha256.h"

namespace ember::codegen {
namespace {

std::string UniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  std::ostringstream os;
  os << getpid() << "." << (std::hash<std::thread::id>()(std::this_thread::get_id()) & 0xffffff)
     << "." << counter.fetch_add(1);
  return os.str();
}

std::string Parent(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

Status FsyncPath(const std::string& path, bool directory) {
  int fd = open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return Status(StatusCode::kInternal, "open " + path + ": " + std::strerror(errno));
  int rc = fsync(fd);
  close(fd);
  if (rc != 0 && !directory) {
    return Status(StatusCode::kInternal, "fsync " + path + ": " + std::strerror(errno));
  }
  return OkStatus();
}

}  // namespace

std::string DefaultCacheDir() {
  if (const char* d = std::getenv("EMBER_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/ember";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/ember";
  return "/tmp/ember-cache-" + std::to_string(getuid());
}

Status MakeDirs(const std::string& path) {
  if (path.empty()) return OkStatus();
  std::string cur;
  std::stringstream ss(path);
  if (path[0] == '/') cur = "";
  for (std::string part; std::getline(ss, part, '/');) {
    if (part.empty()) continue;
    cur += (cur.empty() && path[0] != '/') ? part : "/" + part;
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status(StatusCode::kInternal, "mkdir " + cur + ": " + std::strerror(errno));
    }
  }
  return OkStatus();
}

Status ReadFile(const std::string& path, std::string* contents) {
  contents->clear();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(path, ": ", std::strerror(errno));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      contents->append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      int e = errno;
      close(fd);
      if (n < 0) return Status(StatusCode::kInternal, "read " + path + ": " + std::strerror(e));
      return OkStatus();
    }
  }
}

Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  EMBER_RETURN_IF_ERROR(MakeDirs(Parent(path)));
  const std::string tmp = path + ".tmp." + UniqueSuffix();
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status(StatusCode::kInternal, "create " + tmp + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < contents.size()) {
    ssize_t n = write(fd, contents.data() + off, contents.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return Status(StatusCode::kInternal, "write " + tmp + ": " + std::strerror(e));
    }
    off += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    unlink(tmp.c_str());
    return Status(StatusCode::kInternal, "fsync " + tmp + ": " + std::strerror(e));
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return Status(StatusCode::kInternal, "rename " + tmp + ": " + std::strerror(e));
  }
  (void)FsyncPath(Parent(path), /*directory=*/true);
  return OkStatus();
}

void RemoveTree(const std::string& path) {
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string p = path + "/" + name;
      struct stat st;
      if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        RemoveTree(p);
      } else {
        unlink(p.c_str());
      }
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

std::string DiskCache::EntryDir(const std::string& key) const {
  return dir_ + "/kernels/" + key.substr(0, 2);
}
std::string DiskCache::MetaPath(const std::string& key) const {
  return EntryDir(key) + "/" + key + ".meta";
}
std::string DiskCache::SourcePath(const std::string& key) const {
  return EntryDir(key) + "/" + key + ".cc";
}

namespace {

// Parses "ember-kernel-cache 1\nkey K\nso NAME\nsize N\nsha256 H\n".
bool ParseMeta(const std::string& text, const std::string& key, std::string* so_name,
               uint64_t* size, std::string* sha) {
  std::istringstream in(text);
  std::string magic, version, k, kv, s, sv, z, h;
  if (!(in >> magic >> version >> k >> kv >> s >> sv >> z >> *size >> h >> *sha)) return false;
  if (magic != "ember-kernel-cache" || version != "1" || k != "key" || kv != key || s != "so" ||
      z != "size" || h != "sha256" || sha->size() != 64) {
    return false;
  }
  // The object must be this key's and in the entry's directory.
  if (sv.find('/') != std::string::npos || sv.rfind(key + "-", 0) != 0) return false;
  *so_name = sv;
  return true;
}

}  // namespace

DiskCache::LookupKind DiskCache::Lookup(const std::string& key, std::string* so_path,
                                        std::string* why) const {
  std::string meta;
  if (!ReadFile(MetaPath(key), &meta).ok()) return LookupKind::kMiss;
  std::string so_name, sha;
  uint64_t size = 0;
  if (!ParseMeta(meta, key, &so_name, &size, &sha)) {
    *why = "malformed " + MetaPath(key);
    Remove(key);
    return LookupKind::kCorrupt;
  }
  const std::string path = EntryDir(key) + "/" + so_name;
  std::string bytes;
  if (!ReadFile(path, &bytes).ok()) {
    *why = "missing " + path;
  } else if (bytes.size() != size) {
    *why =
        path + " has " + std::to_string(bytes.size()) + " bytes, expected " + std::to_string(size);
  } else if (Sha256Hex(bytes) != sha) {
    *why = path + " fails its checksum";
  } else {
    *so_path = path;
    return LookupKind::kHit;
  }
  Remove(key);
  return LookupKind::kCorrupt;
}

void DiskCache::Remove(const std::string& key) const {
  std::string meta;
  if (ReadFile(MetaPath(key), &meta).ok()) {
    std::string so_name, sha;
    uint64_t size = 0;
    std::istringstream in(meta);
    std::string a, b, c, d, e;
    if (in >> a >> b >> c >> d >> e >> so_name && so_name.find('/') == std::string::npos &&
        so_name.rfind(key + "-", 0) == 0) {
      unlink((EntryDir(key) + "/" + so_name).c_str());
    }
    (void)size;
  }
  unlink(MetaPath(key).c_str());
}

namespace {

// Removes compile directories older than a day under `base` (left by killed
// processes; a live compile takes seconds). Best effort, once per process
// and cache directory.
void SweepStaleTempDirs(const std::string& base) {
  static std::mutex mu;
  static std::set<std::string> swept;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!swept.insert(base).second) return;
  }
  DIR* d = opendir(base.c_str());
  if (d == nullptr) return;
  const time_t cutoff = time(nullptr) - 24 * 3600;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    const std::string p = base + "/" + name;
    if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_mtime < cutoff) {
      stale.push_back(p);
    }
  }
  closedir(d);
  for (const auto& p : stale) RemoveTree(p);
}

}  // namespace

StatusOr<std::string> DiskCache::MakeTempDir(const std::string& key) const {
  const std::string base = dir_ + "/tmp";
  EMBER_RETURN_IF_ERROR(MakeDirs(base));
  SweepStaleTempDirs(base);
  const std::string path = base + "/" + key.substr(0, 16) + "." + UniqueSuffix();
  if (mkdir(path.c_str(), 0755) != 0) {
    return Status(StatusCode::kInternal, "mkdir " + path + ": " + std::strerror(errno));
  }
  return path;
}

StatusOr<std::string> DiskCache::Install(const std::string& key, const std::string& built_so,
                                         const std::string& source) const {
  return InstallImpl(key, built_so, source, /*shared=*/false);
}

StatusOr<std::string> DiskCache::InstallShared(const std::string& key, const std::string& built_so,
                                               const std::string& source) const {
  return InstallImpl(key, built_so, source, /*shared=*/true);
}

StatusOr<std::string> DiskCache::InstallImpl(const std::string& key, const std::string& built_so,
                                             const std::string& source, bool shared) const {
  EMBER_RETURN_IF_ERROR(MakeDirs(EntryDir(key)));
  std::string bytes;
  EMBER_RETURN_IF_ERROR(ReadFile(built_so, &bytes));
  EMBER_RETURN_IF_ERROR(FsyncPath(built_so, /*directory=*/false));
  const std::string sha = Sha256Hex(bytes);
  const std::string so_name = key + "-" + sha.substr(0, 16) + ".so";
  const std::string so_path = EntryDir(key) + "/" + so_name;
  if (shared) {
    // A hard link under a unique name, renamed into place (atomic, like the
    // rename below); a copy if links are not supported.
    const std::string tmp = so_path + ".tmp." + UniqueSuffix();
    if (link(built_so.c_str(), tmp.c_str()) != 0) {
      EMBER_RETURN_IF_ERROR(WriteFileAtomic(so_path, bytes));
    } else if (rename(tmp.c_str(), so_path.c_str()) != 0) {
      const int e = errno;
      unlink(tmp.c_str());
      return Status(StatusCode::kInternal,
                    "rename " + tmp + " -> " + so_path + ": " + std::strerror(e));
    }
  } else if (rename(built_so.c_str(), so_path.c_str()) != 0) {
    return Status(StatusCode::kInternal,
                  "rename " + built_so + " -> " + so_path + ": " + std::strerror(errno));
  }
  (void)WriteFileAtomic(SourcePath(key), source);  // for reading only
  std::ostringstream meta;
  meta << "ember-kernel-cache 1\nkey " << key << "\nso " << so_name << "\nsize " << bytes.size()
       << "\nsha256 " << sha << "\n";
  EMBER_RETURN_IF_ERROR(WriteFileAtomic(MetaPath(key), meta.str()));
  return so_path;
}

}  // namespace ember::codegen
