#include "ir/log.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ember {

bool LogEnabled(std::string_view topic) {
  const char* env = std::getenv("EMBER_LOG");
  if (env == nullptr) return false;
  std::string_view list(env);
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty() && (item == topic || item == "all")) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

void LogLine(std::string_view topic, std::string_view message) {
  if (!LogEnabled(topic)) return;
  std::string line;
  line.reserve(topic.size() + message.size() + 3);
  line.append(topic).append(": ").append(message).push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ember
