#include "ir/debug_dump.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "ir/log.h"

namespace ember {

std::string DebugDir() {
  const char* d = std::getenv("EMBER_DEBUG_DIR");
  if (d == nullptr || *d == '\0') return std::string();
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec) {
    LogLine("runtime", std::string("EMBER_DEBUG_DIR: cannot create ") + d + ": " + ec.message());
    return std::string();
  }
  return std::string(d);
}

void WriteDebugFile(const std::string& dir, const std::string& name, const std::string& text) {
  if (dir.empty()) return;
  const std::string final_path = dir + "/" + name;
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      final_path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      LogLine("runtime", "EMBER_DEBUG_DIR: cannot write " + tmp);
      return;
    }
    out << text;
    if (!out.flush()) {
      out.close();
      std::remove(tmp.c_str());
      LogLine("runtime", "EMBER_DEBUG_DIR: cannot write " + tmp);
      return;
    }
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace ember
