// Buffer: a reference-counted handle to device data (DESIGN §6).
//
// In the compiler core the "device" is host memory: a Buffer owns one
// Literal (dense row-major bytes of its Shape, or a tuple of Literals) and
// lives as long as any BufferRef to it. A runtime step writes its result
// straight into a buffer's bytes (literal().data()), so a later native
// backend can fill preplanned buffers without copying. Owned bytes are
// 64-byte aligned (AlignedBytes: a GEMM's operands and the vector kernels'
// rows start on a cache line).
//
// A buffer's shape never changes after creation; steps may overwrite its
// bytes (a donated input, DESIGN §6) but never resize it.
//
// Every Buffer is counted in process-wide atomic counters (bytes in use,
// peak bytes, live buffers), which back `ember.memory_allocated()`.
//
// Borrowed buffers (Buffer::Borrow): a buffer may view memory it does not
// own (a PyTorch tensor's storage handed to an executable zero-copy); a
// keep-alive `owner` handle holds that memory until the buffer dies. Such a
// buffer accounts 0 bytes (its owner counts them, see NoteExternalBytes).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ember/ir/literal.h"

namespace ember {

class Buffer;
using BufferRef = std::shared_ptr<Buffer>;

class Buffer {
 public:
  // Takes ownership of `value`'s bytes (no copy).
  static BufferRef FromLiteral(Literal value);
  // A zero-filled buffer of `shape` (array or tuple).
  static BufferRef Zeros(const Shape& shape);
  // A new buffer holding a copy of `other`'s value.
  static BufferRef CopyOf(const Buffer& other);
  // A buffer of array `shape` whose bytes are unspecified (for a kernel
  // output that is fully overwritten). Large ones (>= 64 KiB) are recycled:
  // when such a buffer dies its storage goes to a process-wide cache
  // (EMBER_BUFFER_CACHE_BYTES, default 512 MiB; 0 disables) and the next
  // Uninitialized() of any array shape of the same byte size takes the most
  // recently released block, with no allocation, zero fill or page faults. A
  // release that does not fit under the bound evicts the least recently
  // released blocks. Tuple shapes: zero-filled, not recycled.
  static BufferRef Uninitialized(const Shape& shape);
  // A buffer over external memory: `data` holds shape.byte_size() bytes,
  // dense row-major, aligned for the element type, and stays valid while
  // `owner` lives (the buffer keeps `owner`). Steps may write into it (a
  // donated argument). Accounts 0 bytes. Tuple shapes: InvalidArgument.
  static StatusOr<BufferRef> Borrow(const Shape& shape, void* data, std::shared_ptr<void> owner);
  // As Borrow, for bytes that are this buffer's alone: an extern's result handed over
  // (ExternCall::adopted), held by `owner` and read through no other buffer, so a caller
  // may keep them as a result's storage (adopted() is true). Accounts 0 bytes (the
  // owner accounts them).
  static StatusOr<BufferRef> Adopt(const Shape& shape, void* data, std::shared_ptr<void> owner);

  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const Shape& shape() const { return value_.shape(); }
  // The value. Writers may change the bytes, never the shape.
  Literal& literal() { return value_; }
  const Literal& literal() const { return value_; }
  void* data() { return value_.data(); }
  const void* data() const { return value_.data(); }
  // Bytes this buffer accounts for (all tuple elements included).
  int64_t size_bytes() const { return accounted_bytes_; }

  // Moves tuple element `i`'s own bytes, without a copy, into a buffer of their own,
  // which it returns, and leaves the element borrowing them from that buffer: a result
  // read out of a tuple then keeps its own bytes alive, not every element's. The bytes
  // are accounted to the new buffer. Null (nothing moved) when this buffer is not a
  // tuple or the element owns no bytes (borrowed, a tuple, or empty).
  BufferRef TakeElement(size_t i);

  // Makes tuple element `i` borrow `data` (its shape's dense row-major bytes, kept alive
  // by `owner`, which accounts them) instead of its own bytes, which are freed and no
  // longer accounted: an extern's result handed over (ExternCall::adopted). TakeElement
  // then returns an adopted() buffer over them. InvalidArgument when this buffer is not
  // a tuple, `i` is out of range or the element is a tuple.
  Status AdoptElement(size_t i, void* data, std::shared_ptr<void> owner);

  // Made by Adopt: external bytes of this buffer's own (see Adopt).
  bool adopted() const { return adopted_; }

  // Overwrites this buffer's bytes with `src`'s (same shape required:
  // InvalidArgument otherwise). Tuple elements are copied element by element.
  Status CopyFrom(const Literal& src);

 private:
  explicit Buffer(Literal value);
  Literal value_;
  int64_t accounted_bytes_ = 0;
  bool recyclable_ = false;             // created by Uninitialized()
  bool adopted_ = false;                // created by Adopt()
  std::vector<bool> adopted_elements_;  // tuple elements made by AdoptElement
};

// Bytes held by the Uninitialized() cache (not counted as in use).
int64_t CachedBufferBytes();
// Frees the cached storage.
void ClearBufferCache();

// Process-wide buffer accounting (all threads; atomics).
struct BufferStats {
  int64_t bytes_in_use = 0;       // bytes of live buffers
  int64_t peak_bytes_in_use = 0;  // max of bytes_in_use since start or last ResetPeak
  int64_t live_buffers = 0;       // number of live Buffer objects
  int64_t total_allocations = 0;  // Buffers ever created
};
BufferStats GetBufferStats();
// Adds `delta` bytes (negative to release) of device data held outside
// Buffers — the torch bridge's device allocator — to bytes_in_use and the
// peak, so one counter covers all device data.
void NoteExternalBytes(int64_t delta);
// Sets peak_bytes_in_use to the current bytes_in_use.
void ResetPeakBufferBytes();

// Bytes held by a Literal: its own bytes plus those of its tuple elements.
int64_t LiteralBytes(const Literal& lit);

}  // namespace ember
