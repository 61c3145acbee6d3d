// ember::Version() against its one source, pyproject.toml's [project] version line
// (read here independently of CMakeLists.txt's parse of it).
#include "ember/version.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>

namespace ember {
namespace {

TEST(Version, IsPyprojectVersion) {
  const char* src = std::getenv("EMBER_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "EMBER_SOURCE_DIR is set by CMakeLists.txt for every test";
  std::ifstream in(std::string(src) + "/pyproject.toml");
  ASSERT_TRUE(in) << src << "/pyproject.toml";
  std::string line, in_section, want;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '[') in_section = line;
    const std::string prefix = "version = \"";
    if (in_section == "[project]" && line.rfind(prefix, 0) == 0 && line.back() == '"') {
      want = line.substr(prefix.size(), line.size() - prefix.size() - 1);
      break;
    }
  }
  ASSERT_FALSE(want.empty()) << "no version line in [project] of pyproject.toml";
  EXPECT_EQ(std::string(Version()), want);
}

TEST(Version, IsSemanticVersion) {
  const std::string v = Version();
  int dots = 0;
  size_t i = 0;
  for (; i < v.size() && (std::isdigit(static_cast<unsigned char>(v[i])) || v[i] == '.'); ++i) {
    dots += v[i] == '.';
  }
  EXPECT_EQ(dots, 2) << v;
  EXPECT_TRUE(i > 0 && std::isdigit(static_cast<unsigned char>(v[i - 1]))) << v;
}

}  // namespace
}  // namespace ember
