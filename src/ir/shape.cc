#include "ember/ir/shape.h"

#include <sstream>

namespace ember {

Shape Shape::Tuple(std::vector<Shape> elements) {
  Shape s;
  s.is_tuple_ = true;
  s.tuple_shapes_ = std::move(elements);
  return s;
}

int64_t Shape::num_elements() const {
  if (is_tuple_) return 0;
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t Shape::byte_size() const {
  if (!is_tuple_) return num_elements() * DTypeSize(dtype_);
  int64_t total = 0;
  for (const Shape& s : tuple_shapes_) total += s.byte_size();
  return total;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> st(dims_.size(), 1);
  for (int i = rank() - 2; i >= 0; --i) st[i] = st[i + 1] * dims_[i + 1];
  return st;
}

std::string Shape::ToString() const {
  std::ostringstream os;
  if (is_tuple_) {
    os << "(";
    for (size_t i = 0; i < tuple_shapes_.size(); ++i) {
      if (i) os << ", ";
      os << tuple_shapes_[i].ToString();
    }
    os << ")";
    return os.str();
  }
  os << DTypeName(dtype_) << "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) os << ",";
    os << dims_[i];
  }
  os << "]";
  return os.str();
}

bool Shape::operator==(const Shape& o) const {
  if (is_tuple_ != o.is_tuple_) return false;
  if (is_tuple_) return tuple_shapes_ == o.tuple_shapes_;
  return dtype_ == o.dtype_ && dims_ == o.dims_;
}

std::string DimsToString(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) os << ",";
    os << dims[i];
  }
  os << "}";
  return os.str();
}

}  // namespace ember
