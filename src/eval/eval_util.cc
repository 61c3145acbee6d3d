#include "eval/eval_util.h"

namespace ember::eval {

StatusOr<ReduceKind> GetReduceKind(const Node& n) {
  const AttrValue* v = attr::ToApply.Raw(n.attrs);
  if (v == nullptr) return NodeInvalid(n, "missing attribute to_apply");
  if (const auto* s = std::get_if<std::string>(v)) {
    if (auto k = ParseReduceKind(*s)) return *k;
    return NodeInvalid(n, "unknown to_apply '", *s, "'");
  }
  if (const auto* i = std::get_if<int64_t>(v)) {
    if (*i >= 0 && *i <= static_cast<int64_t>(ReduceKind::kAssign)) {
      return static_cast<ReduceKind>(*i);
    }
  }
  return NodeInvalid(n, "bad to_apply attribute ", AttrValueToString(*v));
}

StatusOr<std::vector<int64_t>> GetIntsOr(const Node& n, const attr::IntsAttr& a, size_t size,
                                         int64_t def) {
  const char* key = a.key;
  if (!a.In(n.attrs)) return std::vector<int64_t>(size, def);
  const auto* v = std::get_if<std::vector<int64_t>>(a.Raw(n.attrs));
  if (v == nullptr) return NodeInvalid(n, "attribute ", key, " must be a list of integers");
  if (v->empty() && size != 0) return std::vector<int64_t>(size, def);
  if (v->size() != size) {
    return NodeInvalid(n, "attribute ", key, " has ", v->size(), " entries, expected ", size);
  }
  return *v;
}

double LoadDouble(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kPred:
      return static_cast<const uint8_t*>(base)[i] != 0 ? 1.0 : 0.0;
    case DType::kS8:
      return static_cast<const int8_t*>(base)[i];
    case DType::kS16:
      return static_cast<const int16_t*>(base)[i];
    case DType::kS32:
      return static_cast<const int32_t*>(base)[i];
    case DType::kS64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::kU8:
      return static_cast<const uint8_t*>(base)[i];
    case DType::kU16:
      return static_cast<const uint16_t*>(base)[i];
    case DType::kU32:
      return static_cast<const uint32_t*>(base)[i];
    case DType::kU64:
      return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case DType::kF16:
      return F16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kBF16:
      return BF16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kF64:
      return static_cast<const double*>(base)[i];
    case DType::kC64:
      return static_cast<const float*>(base)[2 * i];
    case DType::kC128:
      return static_cast<const double*>(base)[2 * i];
  }
  return 0;
}

float LoadFloat(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kF16:
      return F16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kBF16:
      return BF16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    default:
      return static_cast<float>(LoadDouble(t, base, i));
  }
}

uint64_t LoadBits(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kPred:
      return static_cast<const uint8_t*>(base)[i] != 0 ? 1 : 0;
    case DType::kS8:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int8_t*>(base)[i]));
    case DType::kS16:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int16_t*>(base)[i]));
    case DType::kS32:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int32_t*>(base)[i]));
    case DType::kS64:
      return static_cast<uint64_t>(static_cast<const int64_t*>(base)[i]);
    case DType::kU8:
      return static_cast<const uint8_t*>(base)[i];
    case DType::kU16:
      return static_cast<const uint16_t*>(base)[i];
    case DType::kU32:
      return static_cast<const uint32_t*>(base)[i];
    case DType::kU64:
      return static_cast<const uint64_t*>(base)[i];
    default:
      return 0;  // floats and complex are not integer data
  }
}

int64_t LoadIndex(DType t, const void* base, int64_t i, bool* huge) {
  uint64_t bits = LoadBits(t, base, i);
  *huge = (t == DType::kU64 && bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  return static_cast<int64_t>(bits);
}

void StoreFloat(DType t, void* base, int64_t i, float v) {
  switch (t) {
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = FloatToF16(v);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = FloatToBF16(v);
      return;
    case DType::kF32:
      static_cast<float*>(base)[i] = v;
      return;
    default:
      StoreDouble(t, base, i, v);
      return;
  }
}

void StoreDouble(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = FloatToF16(static_cast<float>(v));
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = FloatToBF16(static_cast<float>(v));
      return;
    case DType::kF32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DType::kF64:
      static_cast<double*>(base)[i] = v;
      return;
    case DType::kPred:
      static_cast<uint8_t*>(base)[i] = v != 0 ? 1 : 0;
      return;
    default: {
      // Integer destinations: truncate toward zero when representable, else
      // 0 (contractions never produce this mix; kept defined, never UB).
      uint64_t bits = 0;
      if (std::isfinite(v) && std::fabs(v) < 9.2e18)
        bits = static_cast<uint64_t>(static_cast<int64_t>(v));
      StoreBits(t, base, i, bits);
      return;
    }
  }
}

void StoreBits(DType t, void* base, int64_t i, uint64_t bits) {
  switch (t) {
    case DType::kPred:
      static_cast<uint8_t*>(base)[i] = bits != 0 ? 1 : 0;
      return;
    case DType::kS8:
    case DType::kU8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(bits);
      return;
    case DType::kS16:
    case DType::kU16:
      static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(bits);
      return;
    case DType::kS32:
    case DType::kU32:
      static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(bits);
      return;
    case DType::kS64:
    case DType::kU64:
      static_cast<uint64_t*>(base)[i] = bits;
      return;
    default:
      StoreDouble(t, base, i, static_cast<double>(static_cast<int64_t>(bits)));
      return;
  }
}

namespace {

template <int kSize>
void StridedCopyFixed(const std::vector<int64_t>& dims, const uint8_t* src, int64_t src_base,
                      const std::vector<int64_t>& src_strides, uint8_t* dst, int64_t dst_base,
                      const std::vector<int64_t>& dst_strides) {
  const int rank = static_cast<int>(dims.size());
  if (rank == 0) {
    std::memcpy(dst + dst_base * kSize, src + src_base * kSize, kSize);
    return;
  }
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  const int inner = rank - 1;
  const int64_t n_inner = dims[inner];
  const int64_t ss = src_strides[inner], ds = dst_strides[inner];
  std::vector<int64_t> idx(rank, 0);
  while (true) {
    int64_t so = src_base, dof = dst_base;
    for (int d = 0; d < inner; ++d) {
      so += idx[d] * src_strides[d];
      dof += idx[d] * dst_strides[d];
    }
    if (ss == 1 && ds == 1) {
      std::memcpy(dst + dof * kSize, src + so * kSize, static_cast<size_t>(n_inner) * kSize);
    } else {
      for (int64_t j = 0; j < n_inner; ++j) {
        std::memcpy(dst + (dof + j * ds) * kSize, src + (so + j * ss) * kSize, kSize);
      }
    }
    // advance the outer dims
    int d = inner - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void StridedCopy(int elem_size, const std::vector<int64_t>& dims, const uint8_t* src,
                 int64_t src_base, const std::vector<int64_t>& src_strides, uint8_t* dst,
                 int64_t dst_base, const std::vector<int64_t>& dst_strides) {
  switch (elem_size) {
    case 1:
      return StridedCopyFixed<1>(dims, src, src_base, src_strides, dst, dst_base, dst_strides);
    case 2:
      return StridedCopyFixed<2>(dims, src, src_base, src_strides, dst, dst_base, dst_strides);
    case 4:
      return StridedCopyFixed<4>(dims, src, src_base, src_strides, dst, dst_base, dst_strides);
    case 8:
      return StridedCopyFixed<8>(dims, src, src_base, src_strides, dst, dst_base, dst_strides);
    case 16:
      return StridedCopyFixed<16>(dims, src, src_base, src_strides, dst, dst_base, dst_strides);
    default:
      return;
  }
}

}  // namespace ember::eval
