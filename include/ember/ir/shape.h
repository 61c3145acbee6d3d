// Shape: an element type plus dense row-major dims, or a tuple of shapes.
//
// Array shapes print as `f32[8,16]` (a scalar is `f32[]`); tuples as
// `(f32[2], s32[])`. Tuples appear only as the result of custom-call with
// several outputs, optimization-barrier and tuple; get-tuple-element reads one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/ir/dtype.h"

namespace ember {

class Shape {
 public:
  Shape() = default;  // f32[] scalar
  Shape(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {}
  static Shape Tuple(std::vector<Shape> elements);

  bool is_tuple() const { return is_tuple_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(int i) const { return dims_[i]; }
  int rank() const { return static_cast<int>(dims_.size()); }
  bool is_scalar() const { return !is_tuple_ && dims_.empty(); }
  const std::vector<Shape>& tuple_shapes() const { return tuple_shapes_; }

  int64_t num_elements() const;  // 1 for a scalar; 0 for a tuple
  int64_t byte_size() const;     // num_elements * DTypeSize; sum over elements for a tuple
  // Row-major strides in elements.
  std::vector<int64_t> strides() const;

  Shape with_dtype(DType t) const { return Shape(t, dims_); }
  bool SameDims(const Shape& o) const { return !is_tuple_ && !o.is_tuple_ && dims_ == o.dims_; }

  std::string ToString() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> dims_;
  bool is_tuple_ = false;
  std::vector<Shape> tuple_shapes_;
};

std::string DimsToString(const std::vector<int64_t>& dims);  // "{1,0}"

}  // namespace ember
