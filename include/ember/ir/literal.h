// Literal: a host value of a given Shape (dense row-major bytes, 64-byte
// aligned when owned: AlignedBytes), or a tuple of Literals. Used for constants in the IR, for
// interpreter inputs and results, and as the payload of runtime buffers. Copying a Literal copies
// its bytes (value semantics); the runtime shares them through
// std::shared_ptr<Literal>.
//
// bf16/f16 elements are stored as their 16-bit patterns, pred as one byte
// (0 or 1), complex as interleaved (re, im) pairs.
//
// Borrowed literals (Literal::Borrow): an array literal may view external
// memory (e.g. a PyTorch tensor's storage) instead of owning its bytes; an
// `owner` handle keeps that memory alive for as long as the literal (or a
// Buffer holding it) lives. Reads and writes go to the external bytes
// (zero-copy); copying a borrowed literal makes an owning deep copy, moving
// it moves the borrow.
#pragma once

#include <complex>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ember/ir/aligned_bytes.h"
#include "ember/ir/shape.h"
#include "ember/status.h"

namespace ember {

class Literal {
 public:
  Literal() : Literal(Shape(DType::kF32, {})) {}
  // Zero-filled value of `shape` (a tuple shape gets zero-filled elements).
  explicit Literal(Shape shape);
  // A value of array `shape` whose bytes are unspecified, for a result that
  // is overwritten entirely (no zero-fill pass). Tuple shapes: zero-filled
  // elements, as Literal(shape).
  static Literal Uninitialized(const Shape& shape);
  // A value of array `shape` over `bytes` (contents unspecified to the caller), taking
  // them without a copy when bytes.size() == shape.byte_size(); otherwise the bytes
  // are dropped and the result is Uninitialized(shape). Tuple shapes: Literal(shape).
  static Literal Adopt(const Shape& shape, AlignedBytes bytes);
  // Moves out the owned bytes of an array literal (empty for a tuple or a borrowed
  // literal); the literal keeps its shape but no longer owns storage.
  AlignedBytes TakeBytes() &&;

  static Literal Tuple(std::vector<Literal> elements);
  // Elements given as doubles, converted to the element type (ints truncate
  // toward zero, floats round to nearest even). Size must match.
  static Literal FromDoubles(const Shape& shape, const std::vector<double>& values);
  // Same from int64 values (exact for every integer type).
  static Literal FromInts(const Shape& shape, const std::vector<int64_t>& values);
  static Literal ScalarDouble(DType t, double v) { return FromDoubles(Shape(t, {}), {v}); }
  static Literal ScalarInt(DType t, int64_t v) { return FromInts(Shape(t, {}), {v}); }
  // An array literal over `data`: shape.byte_size() bytes, dense row-major,
  // suitably aligned for the element type, valid while `owner` lives (the
  // literal holds `owner`). The caller must not free or resize the memory.
  // Tuple shapes: InvalidArgument.
  static StatusOr<Literal> Borrow(Shape shape, void* data, std::shared_ptr<void> owner);

  Literal(const Literal& o);
  Literal& operator=(const Literal& o);
  Literal(Literal&& o) noexcept;
  Literal& operator=(Literal&& o) noexcept;

  // True for a literal made by Borrow (its bytes are external).
  bool is_borrowed() const { return external_ != nullptr; }
  // The keep-alive handle of a borrowed literal (null for one that owns its bytes).
  const std::shared_ptr<void>& owner() const { return owner_; }

  const Shape& shape() const { return shape_; }
  DType dtype() const { return shape_.dtype(); }
  int64_t num_elements() const { return shape_.num_elements(); }
  int64_t size_bytes() const {
    return external_ ? external_size_ : static_cast<int64_t>(bytes_.size());
  }
  void* data() { return external_ ? external_ : bytes_.data(); }
  const void* data() const { return external_ ? external_ : bytes_.data(); }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data());
  }

  std::vector<Literal>& tuple_elements() { return tuple_; }
  const std::vector<Literal>& tuple_elements() const { return tuple_; }

  // Element i (row-major) as a double / int64 (complex: the real part;
  // bf16/f16 decoded; u64 above 2^63 wraps in GetInt).
  double GetDouble(int64_t i) const;
  int64_t GetInt(int64_t i) const;
  std::complex<double> GetComplex(int64_t i) const;
  void SetDouble(int64_t i, double v);
  void SetInt(int64_t i, int64_t v);

  // Same shape and identical bytes (NaNs with equal bits compare equal).
  bool BitwiseEquals(const Literal& o) const;
  // `f32[3] {1, 2.5, nan}`: values print so that parsing them back is exact.
  std::string ToString() const;
  // Just the values, as in the text IR: `{1, 2.5, nan}` (nested by rank is
  // not used: values are flat, row-major).
  std::string ValuesToString() const;

 private:
  Shape shape_;
  AlignedBytes bytes_;
  std::vector<Literal> tuple_;
  // Borrowed bytes (Borrow): external_ points at external_size_ bytes kept
  // alive by owner_; bytes_ is then empty.
  uint8_t* external_ = nullptr;
  int64_t external_size_ = 0;
  std::shared_ptr<void> owner_;
};

// One element formatted for the text form: shortest decimal that round-trips
// for floats (`nan`, `inf`, `-inf`), `true`/`false` for pred, `(re,im)` for complex.
std::string FormatElement(const Literal& lit, int64_t i);

}  // namespace ember
