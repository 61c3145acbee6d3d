// Private helpers shared by the interpreter's evaluators (data movement,
// indexing, reductions, contractions): error messages that name the node,
// attribute accessors, typed element access by dtype, row-major index
// iteration and a dtype-generic strided byte copy.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ember/ir/attributes.h"
#include "ember/ir/graph.h"

namespace ember::eval {

// "gather %7"
inline std::string NodeLabel(const Node& n) { return internal::StrCat(OpName(n.op), " %", n.id); }

// Errors that name the op and node: "gather %7: index 12 out of range [0, 10)".
template <typename... Args>
Status NodeInvalid(const Node& n, Args&&... args) {
  return InvalidArgument(NodeLabel(n), ": ", std::forward<Args>(args)...);
}
template <typename... Args>
Status NodeOutOfRange(const Node& n, Args&&... args) {
  return OutOfRange(NodeLabel(n), ": ", std::forward<Args>(args)...);
}

// ---- attributes ----------------------------------------------------------

// The `to_apply` attribute (a name such as "add"; an integer ReduceKind is
// also accepted).
StatusOr<ReduceKind> GetReduceKind(const Node& n);

// An integer-list attribute that must have exactly `size` entries; an absent
// attribute gives `size` copies of `def`.
StatusOr<std::vector<int64_t>> GetIntsOr(const Node& n, const attr::IntsAttr& a, size_t size,
                                         int64_t def);

// ---- element access --------------------------------------------------------

inline const uint8_t* Bytes(const Literal& l) { return static_cast<const uint8_t*>(l.data()); }
inline uint8_t* Bytes(Literal& l) { return static_cast<uint8_t*>(l.data()); }

// Element i of a real (non-complex) array, decoded to double.
double LoadDouble(DType t, const void* base, int64_t i);
// Element i decoded to float (f16, bf16, f32; other types through double).
float LoadFloat(DType t, const void* base, int64_t i);
// Element i of an integer or pred array as its two's-complement bits,
// sign-extended for signed types (so wrapping arithmetic in uint64 and a
// truncating store give the right result for any width).
uint64_t LoadBits(DType t, const void* base, int64_t i);
// An index value (any integer dtype): exact for all but u64 >= 2^63, which is
// reported through `huge` (such an index is always out of range).
int64_t LoadIndex(DType t, const void* base, int64_t i, bool* huge);

// Stores, rounding f16/bf16 to nearest even; pred stores v != 0.
void StoreFloat(DType t, void* base, int64_t i, float v);
void StoreDouble(DType t, void* base, int64_t i, double v);
// Integer/pred store: truncates to the width (wraps); pred stores bits != 0.
void StoreBits(DType t, void* base, int64_t i, uint64_t bits);

// ---- typed views: one struct per storage kind -------------------------------
//
// Each has `Acc` (the computation type), Load(base, i) -> Acc and
// Store(base, i, Acc). Floats of 16 bits compute in f32.

struct F32Access {
  using Acc = float;
  static Acc Load(const void* b, int64_t i) { return static_cast<const float*>(b)[i]; }
  static void Store(void* b, int64_t i, Acc v) { static_cast<float*>(b)[i] = v; }
};
struct F64Access {
  using Acc = double;
  static Acc Load(const void* b, int64_t i) { return static_cast<const double*>(b)[i]; }
  static void Store(void* b, int64_t i, Acc v) { static_cast<double*>(b)[i] = v; }
};
struct BF16Access {
  using Acc = float;
  static Acc Load(const void* b, int64_t i) {
    return BF16ToFloat(static_cast<const uint16_t*>(b)[i]);
  }
  static void Store(void* b, int64_t i, Acc v) { static_cast<uint16_t*>(b)[i] = FloatToBF16(v); }
};
struct F16Access {
  using Acc = float;
  static Acc Load(const void* b, int64_t i) {
    return F16ToFloat(static_cast<const uint16_t*>(b)[i]);
  }
  static void Store(void* b, int64_t i, Acc v) { static_cast<uint16_t*>(b)[i] = FloatToF16(v); }
};
template <typename T>
struct IntAccess {
  using Acc = T;
  static Acc Load(const void* b, int64_t i) { return static_cast<const T*>(b)[i]; }
  static void Store(void* b, int64_t i, Acc v) { static_cast<T*>(b)[i] = v; }
};
struct PredAccess {
  using Acc = bool;
  static Acc Load(const void* b, int64_t i) { return static_cast<const uint8_t*>(b)[i] != 0; }
  static void Store(void* b, int64_t i, Acc v) { static_cast<uint8_t*>(b)[i] = v ? 1 : 0; }
};

// Calls f(Access{}) for a real dtype; returns false (f not called) for complex.
template <typename F>
bool VisitRealDType(DType t, F&& f) {
  switch (t) {
    case DType::kPred:
      f(PredAccess{});
      return true;
    case DType::kS8:
      f(IntAccess<int8_t>{});
      return true;
    case DType::kS16:
      f(IntAccess<int16_t>{});
      return true;
    case DType::kS32:
      f(IntAccess<int32_t>{});
      return true;
    case DType::kS64:
      f(IntAccess<int64_t>{});
      return true;
    case DType::kU8:
      f(IntAccess<uint8_t>{});
      return true;
    case DType::kU16:
      f(IntAccess<uint16_t>{});
      return true;
    case DType::kU32:
      f(IntAccess<uint32_t>{});
      return true;
    case DType::kU64:
      f(IntAccess<uint64_t>{});
      return true;
    case DType::kF16:
      f(F16Access{});
      return true;
    case DType::kBF16:
      f(BF16Access{});
      return true;
    case DType::kF32:
      f(F32Access{});
      return true;
    case DType::kF64:
      f(F64Access{});
      return true;
    case DType::kC64:
    case DType::kC128:
      return false;
  }
  return false;
}

// ---- combiners (reduce, reduce-window, scatter) -------------------------------
//
// PyTorch semantics: integer add/multiply wrap; maximum/minimum propagate NaN;
// on pred, add/maximum/or are logical or, multiply/minimum/and logical and.

// Whether `k` is defined on elements of type T (and/or: integers and pred only).
template <typename T>
bool CombinerSupports(ReduceKind k) {
  if (k == ReduceKind::kAnd || k == ReduceKind::kOr) return !std::is_floating_point_v<T>;
  return true;
}

template <typename T>
T Combine(ReduceKind k, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (k) {
      case ReduceKind::kAdd:
      case ReduceKind::kMaximum:
      case ReduceKind::kOr:
        return a || b;
      case ReduceKind::kMultiply:
      case ReduceKind::kMinimum:
      case ReduceKind::kAnd:
        return a && b;
      case ReduceKind::kAssign:
        return b;
    }
    return b;
  } else if constexpr (std::is_floating_point_v<T>) {
    switch (k) {
      case ReduceKind::kAdd:
        return a + b;
      case ReduceKind::kMultiply:
        return a * b;
      case ReduceKind::kMaximum:
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        return a < b ? b : a;
      case ReduceKind::kMinimum:
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        return b < a ? b : a;
      case ReduceKind::kAssign:
        return b;
      case ReduceKind::kAnd:
      case ReduceKind::kOr:
        return b;  // rejected earlier
    }
    return b;
  } else {
    using U = uint64_t;
    switch (k) {
      case ReduceKind::kAdd:
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case ReduceKind::kMultiply:
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case ReduceKind::kMaximum:
        return a < b ? b : a;
      case ReduceKind::kMinimum:
        return b < a ? b : a;
      case ReduceKind::kAnd:
        return static_cast<T>(a & b);
      case ReduceKind::kOr:
        return static_cast<T>(a | b);
      case ReduceKind::kAssign:
        return b;
    }
    return b;
  }
}

// The identity of `k` on T: 0, 1, -inf/lowest, +inf/max, all ones, 0.
template <typename T>
T CombinerIdentity(ReduceKind k) {
  if constexpr (std::is_same_v<T, bool>) {
    return k == ReduceKind::kMultiply || k == ReduceKind::kMinimum || k == ReduceKind::kAnd;
  } else {
    switch (k) {
      case ReduceKind::kAdd:
      case ReduceKind::kOr:
      case ReduceKind::kAssign:
        return T(0);
      case ReduceKind::kMultiply:
        return T(1);
      case ReduceKind::kMaximum:
        if constexpr (std::is_floating_point_v<T>)
          return -std::numeric_limits<T>::infinity();
        else
          return std::numeric_limits<T>::lowest();
      case ReduceKind::kMinimum:
        if constexpr (std::is_floating_point_v<T>)
          return std::numeric_limits<T>::infinity();
        else
          return std::numeric_limits<T>::max();
      case ReduceKind::kAnd:
        if constexpr (std::is_floating_point_v<T>)
          return T(0);
        else
          return static_cast<T>(~static_cast<uint64_t>(0));
    }
    return T(0);
  }
}

// Reduces v[0..n) with `k`: pairwise over blocks of 8 (so float sums have
// O(log n) error growth and 2^25 f32 ones sum exactly); the identity for n == 0.
template <typename T>
T PairwiseReduce(ReduceKind k, const T* v, int64_t n) {
  if (n == 0) return CombinerIdentity<T>(k);
  if (n <= 8) {
    T acc = v[0];
    for (int64_t i = 1; i < n; ++i) acc = Combine(k, acc, v[i]);
    return acc;
  }
  int64_t half = n / 2;
  return Combine(k, PairwiseReduce(k, v, half), PairwiseReduce(k, v + half, n - half));
}

// A reduction as PyTorch defines it: the identity combined with the pairwise
// result. Only observable for float sums of zeros: sum({-0.0}) is +0.0, as
// torch.sum gives (-0.0 + +0.0 == +0.0); every other value is unchanged.
template <typename T>
T ReduceFromIdentity(ReduceKind k, const T* v, int64_t n) {
  if (n == 0) return CombinerIdentity<T>(k);
  return Combine(k, CombinerIdentity<T>(k), PairwiseReduce(k, v, n));
}

// ---- index iteration ---------------------------------------------------------

// Advances a row-major multi-index over `dims`; returns false after the last.
inline bool NextIndex(const std::vector<int64_t>& dims, std::vector<int64_t>& idx) {
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

inline int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

inline std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * dims[d + 1];
  return s;
}

// Copies a strided box of elements of `elem_size` bytes: for every
// multi-index i over `dims`, element (dst_base + sum i[d]*dst_strides[d]) of
// dst gets element (src_base + sum i[d]*src_strides[d]) of src. Strides are in
// elements and may be zero or negative. The caller guarantees all offsets
// are in bounds.
void StridedCopy(int elem_size, const std::vector<int64_t>& dims, const uint8_t* src,
                 int64_t src_base, const std::vector<int64_t>& src_strides, uint8_t* dst,
                 int64_t dst_base, const std::vector<int64_t>& dst_strides);

}  // namespace ember::eval
