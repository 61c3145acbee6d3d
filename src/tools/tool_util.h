// Shared by ember-opt and ember-run: reading the text IR input.
#pragma once

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

namespace ember::tools {

// Reads the whole file at `path` ("-" = standard input) into `text`; on
// failure sets `error` ("cannot open 'PATH'") and returns false.
inline bool ReadInput(const std::string& path, std::string* text, std::string* error) {
  if (path == "-") {
    text->assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return true;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open '" + path + "'";
    return false;
  }
  text->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

inline bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace ember::tools
