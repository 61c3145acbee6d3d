// AlignedBytes: an owned, 64-byte aligned byte array — the storage of every
// owning Literal, so every runtime buffer starts on a cache line (what a GEMM
// and the vector kernels want, and what makes a GEMM call independent of where
// its operands happen to lie: docs/architecture.md, "Same program, same bits").
//
// Value semantics: copying copies the bytes. `Zeroed(n)` zero-fills;
// `Uninitialized(n)` leaves the bytes unspecified (a buffer that a kernel
// overwrites entirely pays no zero-fill pass and touches its pages once).
// Allocation failure throws std::bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace ember {

class AlignedBytes {
 public:
  static constexpr size_t kAlignment = 64;

  AlignedBytes() = default;
  static AlignedBytes Uninitialized(size_t n) {
    AlignedBytes b;
    b.Allocate(n);
    return b;
  }
  static AlignedBytes Zeroed(size_t n) {
    AlignedBytes b = Uninitialized(n);
    if (n) std::memset(b.data_, 0, n);
    return b;
  }
  static AlignedBytes CopyOf(const void* src, size_t n) {
    AlignedBytes b = Uninitialized(n);
    if (n) std::memcpy(b.data_, src, n);
    return b;
  }

  AlignedBytes(const AlignedBytes& o) : AlignedBytes(CopyOf(o.data_, o.size_)) {}
  AlignedBytes& operator=(const AlignedBytes& o) {
    if (this != &o) *this = CopyOf(o.data_, o.size_);
    return *this;
  }
  AlignedBytes(AlignedBytes&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBytes& operator=(AlignedBytes&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~AlignedBytes() { std::free(data_); }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Allocate(size_t n) {
    size_ = n;
    if (n == 0) return;
    // aligned_alloc needs a size that is a multiple of the alignment.
    const size_t rounded = (n + kAlignment - 1) / kAlignment * kAlignment;
    data_ = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, rounded));
    if (!data_) throw std::bad_alloc();
  }

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ember
