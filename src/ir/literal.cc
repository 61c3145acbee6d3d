#include "ember/ir/literal.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <utility>

namespace ember {

Literal::Literal(Shape shape) : shape_(std::move(shape)) {
  if (shape_.is_tuple()) {
    for (const Shape& s : shape_.tuple_shapes()) tuple_.emplace_back(s);
  } else {
    bytes_ = AlignedBytes::Zeroed(static_cast<size_t>(shape_.byte_size()));
  }
}

Literal Literal::Uninitialized(const Shape& shape) {
  if (shape.is_tuple()) return Literal(shape);
  Literal lit(Shape::Tuple({}));  // no bytes allocated
  lit.shape_ = shape;
  lit.tuple_.clear();
  lit.bytes_ = AlignedBytes::Uninitialized(static_cast<size_t>(shape.byte_size()));
  return lit;
}

Literal Literal::Adopt(const Shape& shape, AlignedBytes bytes) {
  if (shape.is_tuple()) return Literal(shape);
  if (bytes.size() != static_cast<size_t>(shape.byte_size())) return Uninitialized(shape);
  Literal lit(Shape::Tuple({}));  // no bytes allocated
  lit.shape_ = shape;
  lit.tuple_.clear();
  lit.bytes_ = std::move(bytes);
  return lit;
}

AlignedBytes Literal::TakeBytes() && { return std::move(bytes_); }

Literal::Literal(const Literal& o) : shape_(o.shape_), tuple_(o.tuple_) {
  if (o.external_) {
    bytes_ = AlignedBytes::CopyOf(o.data(), static_cast<size_t>(o.external_size_));
  } else {
    bytes_ = o.bytes_;
  }
}

Literal& Literal::operator=(const Literal& o) {
  if (this == &o) return *this;
  Literal copy(o);
  *this = std::move(copy);
  return *this;
}

Literal::Literal(Literal&& o) noexcept
    : shape_(std::move(o.shape_)),
      bytes_(std::move(o.bytes_)),
      tuple_(std::move(o.tuple_)),
      external_(std::exchange(o.external_, nullptr)),
      external_size_(std::exchange(o.external_size_, 0)),
      owner_(std::move(o.owner_)) {}

Literal& Literal::operator=(Literal&& o) noexcept {
  if (this == &o) return *this;
  shape_ = std::move(o.shape_);
  bytes_ = std::move(o.bytes_);
  tuple_ = std::move(o.tuple_);
  external_ = std::exchange(o.external_, nullptr);
  external_size_ = std::exchange(o.external_size_, 0);
  owner_ = std::move(o.owner_);
  return *this;
}

StatusOr<Literal> Literal::Borrow(Shape shape, void* data, std::shared_ptr<void> owner) {
  if (shape.is_tuple()) {
    return InvalidArgument("Literal::Borrow: tuple shape ", shape.ToString(),
                           " (only arrays may borrow memory)");
  }
  if (data == nullptr && shape.byte_size() > 0) {
    return InvalidArgument("Literal::Borrow: null data for ", shape.ToString());
  }
  Literal lit(Shape::Tuple({}));  // no bytes allocated
  lit.shape_ = std::move(shape);
  lit.tuple_.clear();
  lit.external_size_ = lit.shape_.byte_size();
  // A zero-byte borrow still needs a non-null marker.
  static uint8_t empty_marker = 0;
  lit.external_ = data ? static_cast<uint8_t*>(data) : &empty_marker;
  lit.owner_ = std::move(owner);
  return lit;
}

Literal Literal::Tuple(std::vector<Literal> elements) {
  std::vector<Shape> shapes;
  for (const Literal& e : elements) shapes.push_back(e.shape());
  Literal lit(Shape::Tuple({}));
  lit.shape_ = Shape::Tuple(std::move(shapes));
  lit.tuple_ = std::move(elements);
  return lit;
}

Literal Literal::FromDoubles(const Shape& shape, const std::vector<double>& values) {
  Literal lit(shape);
  const int64_t n = std::min<int64_t>(lit.num_elements(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < n; ++i) lit.SetDouble(i, values[i]);
  return lit;
}

Literal Literal::FromInts(const Shape& shape, const std::vector<int64_t>& values) {
  Literal lit(shape);
  const int64_t n = std::min<int64_t>(lit.num_elements(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < n; ++i) lit.SetInt(i, values[i]);
  return lit;
}

namespace {
template <typename T>
T Load(const uint8_t* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void Store(uint8_t* p, int64_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}
// Double -> integer type: truncation toward zero, NaN -> 0, saturating.
template <typename T>
T SaturatingCast(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest()))
    return std::numeric_limits<T>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}
}  // namespace

double Literal::GetDouble(int64_t i) const {
  const uint8_t* p = static_cast<const uint8_t*>(data());
  switch (dtype()) {
    case DType::kPred:
      return Load<uint8_t>(p, i) ? 1.0 : 0.0;
    case DType::kS8:
      return Load<int8_t>(p, i);
    case DType::kS16:
      return Load<int16_t>(p, i);
    case DType::kS32:
      return Load<int32_t>(p, i);
    case DType::kS64:
      return static_cast<double>(Load<int64_t>(p, i));
    case DType::kU8:
      return Load<uint8_t>(p, i);
    case DType::kU16:
      return Load<uint16_t>(p, i);
    case DType::kU32:
      return Load<uint32_t>(p, i);
    case DType::kU64:
      return static_cast<double>(Load<uint64_t>(p, i));
    case DType::kF16:
      return F16ToFloat(Load<uint16_t>(p, i));
    case DType::kBF16:
      return BF16ToFloat(Load<uint16_t>(p, i));
    case DType::kF32:
      return Load<float>(p, i);
    case DType::kF64:
      return Load<double>(p, i);
    case DType::kC64:
      return Load<float>(p, 2 * i);
    case DType::kC128:
      return Load<double>(p, 2 * i);
  }
  return 0;
}

std::complex<double> Literal::GetComplex(int64_t i) const {
  const uint8_t* p = static_cast<const uint8_t*>(data());
  if (dtype() == DType::kC64) return {Load<float>(p, 2 * i), Load<float>(p, 2 * i + 1)};
  if (dtype() == DType::kC128) return {Load<double>(p, 2 * i), Load<double>(p, 2 * i + 1)};
  return {GetDouble(i), 0.0};
}

int64_t Literal::GetInt(int64_t i) const {
  const uint8_t* p = static_cast<const uint8_t*>(data());
  switch (dtype()) {
    case DType::kPred:
      return Load<uint8_t>(p, i) ? 1 : 0;
    case DType::kS8:
      return Load<int8_t>(p, i);
    case DType::kS16:
      return Load<int16_t>(p, i);
    case DType::kS32:
      return Load<int32_t>(p, i);
    case DType::kS64:
      return Load<int64_t>(p, i);
    case DType::kU8:
      return Load<uint8_t>(p, i);
    case DType::kU16:
      return Load<uint16_t>(p, i);
    case DType::kU32:
      return Load<uint32_t>(p, i);
    case DType::kU64:
      return static_cast<int64_t>(Load<uint64_t>(p, i));
    default:
      return SaturatingCast<int64_t>(GetDouble(i));
  }
}

void Literal::SetDouble(int64_t i, double v) {
  uint8_t* p = static_cast<uint8_t*>(data());
  switch (dtype()) {
    case DType::kPred:
      Store<uint8_t>(p, i, v != 0 ? 1 : 0);
      return;
    case DType::kS8:
      Store<int8_t>(p, i, SaturatingCast<int8_t>(v));
      return;
    case DType::kS16:
      Store<int16_t>(p, i, SaturatingCast<int16_t>(v));
      return;
    case DType::kS32:
      Store<int32_t>(p, i, SaturatingCast<int32_t>(v));
      return;
    case DType::kS64:
      Store<int64_t>(p, i, SaturatingCast<int64_t>(v));
      return;
    case DType::kU8:
      Store<uint8_t>(p, i, SaturatingCast<uint8_t>(v));
      return;
    case DType::kU16:
      Store<uint16_t>(p, i, SaturatingCast<uint16_t>(v));
      return;
    case DType::kU32:
      Store<uint32_t>(p, i, SaturatingCast<uint32_t>(v));
      return;
    case DType::kU64:
      Store<uint64_t>(p, i, SaturatingCast<uint64_t>(v));
      return;
    case DType::kF16:
      Store<uint16_t>(p, i, FloatToF16(static_cast<float>(v)));
      return;
    case DType::kBF16:
      Store<uint16_t>(p, i, FloatToBF16(static_cast<float>(v)));
      return;
    case DType::kF32:
      Store<float>(p, i, static_cast<float>(v));
      return;
    case DType::kF64:
      Store<double>(p, i, v);
      return;
    case DType::kC64:
      Store<float>(p, 2 * i, static_cast<float>(v));
      Store<float>(p, 2 * i + 1, 0.f);
      return;
    case DType::kC128:
      Store<double>(p, 2 * i, v);
      Store<double>(p, 2 * i + 1, 0.0);
      return;
  }
}

void Literal::SetInt(int64_t i, int64_t v) {
  uint8_t* p = static_cast<uint8_t*>(data());
  switch (dtype()) {
    case DType::kPred:
      Store<uint8_t>(p, i, v != 0 ? 1 : 0);
      return;
    case DType::kS8:
      Store<int8_t>(p, i, static_cast<int8_t>(v));
      return;
    case DType::kS16:
      Store<int16_t>(p, i, static_cast<int16_t>(v));
      return;
    case DType::kS32:
      Store<int32_t>(p, i, static_cast<int32_t>(v));
      return;
    case DType::kS64:
      Store<int64_t>(p, i, v);
      return;
    case DType::kU8:
      Store<uint8_t>(p, i, static_cast<uint8_t>(v));
      return;
    case DType::kU16:
      Store<uint16_t>(p, i, static_cast<uint16_t>(v));
      return;
    case DType::kU32:
      Store<uint32_t>(p, i, static_cast<uint32_t>(v));
      return;
    case DType::kU64:
      Store<uint64_t>(p, i, static_cast<uint64_t>(v));
      return;
    default:
      SetDouble(i, static_cast<double>(v));
      return;
  }
}

bool Literal::BitwiseEquals(const Literal& o) const {
  if (shape_ != o.shape_) return false;
  if (shape_.is_tuple()) {
    for (size_t i = 0; i < tuple_.size(); ++i)
      if (!tuple_[i].BitwiseEquals(o.tuple_[i])) return false;
    return true;
  }
  return size_bytes() == o.size_bytes() &&
         (size_bytes() == 0 ||
          std::memcmp(data(), o.data(), static_cast<size_t>(size_bytes())) == 0);
}

namespace {
// Shortest decimal that parses back to exactly `v` at the element's precision
// (std::to_chars picks the shortest of fixed and scientific forms).
std::string FormatFloat(double v, bool single) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return std::signbit(v) ? "-0" : "0";
  char buf[64];
  auto res = single ? std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v))
                    : std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}
}  // namespace

std::string FormatElement(const Literal& lit, int64_t i) {
  DType t = lit.dtype();
  if (t == DType::kPred) return lit.GetInt(i) ? "true" : "false";
  if (IsSignedInt(t)) return std::to_string(lit.GetInt(i));
  if (IsUnsignedInt(t)) return std::to_string(static_cast<uint64_t>(lit.GetInt(i)));
  if (IsComplex(t)) {
    std::complex<double> c = lit.GetComplex(i);
    bool single = t == DType::kC64;
    return "(" + FormatFloat(c.real(), single) + "," + FormatFloat(c.imag(), single) + ")";
  }
  return FormatFloat(lit.GetDouble(i), t != DType::kF64);
}

std::string Literal::ValuesToString() const {
  std::ostringstream os;
  if (shape_.is_tuple()) {
    os << "(";
    for (size_t i = 0; i < tuple_.size(); ++i) os << (i ? ", " : "") << tuple_[i].ValuesToString();
    os << ")";
    return os.str();
  }
  os << "{";
  for (int64_t i = 0; i < num_elements(); ++i) os << (i ? ", " : "") << FormatElement(*this, i);
  os << "}";
  return os.str();
}

std::string Literal::ToString() const {
  if (shape_.is_tuple()) {
    std::ostringstream os;
    os << "(";
    for (size_t i = 0; i < tuple_.size(); ++i) os << (i ? ", " : "") << tuple_[i].ToString();
    os << ")";
    return os.str();
  }
  return shape_.ToString() + " " + ValuesToString();
}

}  // namespace ember
