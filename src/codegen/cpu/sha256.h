// Private: SHA-256 (FIPS 180-4), for disk-cache keys and entry checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember::codegen {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  std::string HexDigest();  // 64 lowercase hex digits; the object is spent

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string Sha256Hex(std::string_view data);

}  // namespace ember::codegen
