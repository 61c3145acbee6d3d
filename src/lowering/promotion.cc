#include "lowering/promotion.h"

#include <algorithm>

namespace ember::lowering {

Val ValOf(const TensorArg& t) {
  Val v;
  v.id = t.value;
  v.dtype = t.dtype;
  v.sizes = t.sizes;
  v.tier = t.wrapped_number ? PromoTier::kWrapped
                            : (t.sizes.empty() ? PromoTier::kZeroDim : PromoTier::kDimensioned);
  return v;
}

Val ValOf(const ScalarArg& s) {
  Val v;
  v.id = s.value;
  v.dtype = s.kind == ScalarArg::Kind::kBool  ? DType::kPred
            : s.kind == ScalarArg::Kind::kInt ? DType::kS64
                                              : DType::kF64;
  v.tier = PromoTier::kWrapped;
  return v;
}

StatusOr<Val> ValOfArg(const Arg& a, const char* op, size_t index) {
  if (a.kind == Arg::Kind::kTensor) return ValOf(a.tensor);
  if (a.kind == Arg::Kind::kScalar) return ValOf(a.scalar);
  return InvalidArgument(op, ": argument ", index, " must be a Tensor or a Scalar");
}

namespace {

enum class Category { kBool, kInt, kFloat, kComplex };

Category CategoryOf(DType t) {
  if (t == DType::kPred) return Category::kBool;
  if (IsFloat(t)) return Category::kFloat;
  if (IsComplex(t)) return Category::kComplex;
  return Category::kInt;
}

bool IsBarebonesUnsigned(DType t) {
  return t == DType::kU16 || t == DType::kU32 || t == DType::kU64;
}

int SignedRank(DType t) {  // s8 < s16 < s32 < s64
  switch (t) {
    case DType::kS8:
      return 0;
    case DType::kS16:
      return 1;
    case DType::kS32:
      return 2;
    default:
      return 3;
  }
}

int FloatRank(DType t) {  // f16, bf16 < f32 < f64
  switch (t) {
    case DType::kF16:
    case DType::kBF16:
      return 0;
    case DType::kF32:
      return 1;
    default:
      return 2;
  }
}

// ATen's combine_categories: `higher` is the result of a higher-priority tier.
std::optional<DType> CombineCategories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  Category h = CategoryOf(*higher), l = CategoryOf(*lower);
  if (h == Category::kComplex) return higher;
  if (l == Category::kComplex) return std::nullopt;  // complex results are declined
  if (h == Category::kFloat) return higher;
  if (h == Category::kBool || l == Category::kFloat) return PromoteTypes(*higher, *lower);
  return higher;
}

}  // namespace

std::optional<DType> PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (IsComplex(a) || IsComplex(b)) return std::nullopt;
  if (a == DType::kPred) return b;
  if (b == DType::kPred) return a;
  if (IsBarebonesUnsigned(a) || IsBarebonesUnsigned(b)) {
    if (IsFloat(a)) return a;
    if (IsFloat(b)) return b;
    return std::nullopt;  // eager: "Promotion for uint16, uint32, uint64 types is not supported"
  }
  Category ca = CategoryOf(a), cb = CategoryOf(b);
  if (ca == Category::kFloat && cb == Category::kFloat) {
    int ra = FloatRank(a), rb = FloatRank(b);
    if (ra == 0 && rb == 0) return DType::kF32;  // f16 with bf16
    return ra > rb ? a : b;
  }
  if (ca == Category::kFloat) return a;
  if (cb == Category::kFloat) return b;
  // Both integral, at most one of them u8.
  if (a == DType::kU8) return SignedRank(b) == 0 ? DType::kS16 : b;
  if (b == DType::kU8) return SignedRank(a) == 0 ? DType::kS16 : a;
  return SignedRank(a) > SignedRank(b) ? a : b;
}

std::optional<DType> ResultType(const std::vector<Val>& operands) {
  std::optional<DType> tiers[3];
  for (const Val& v : operands) {
    DType t = v.dtype;
    if (v.tier == PromoTier::kWrapped) {
      // A wrapped number takes part as the default dtype of its category.
      if (IsFloat(t))
        t = DType::kF32;
      else if (IsInteger(t))
        t = DType::kS64;
    }
    auto& slot = tiers[static_cast<int>(v.tier)];
    if (!slot) {
      slot = t;
    } else {
      slot = PromoteTypes(*slot, t);
      if (!slot) return std::nullopt;
    }
  }
  auto low = CombineCategories(tiers[1], tiers[2]);
  if (tiers[1] && tiers[2] && !low) return std::nullopt;
  auto r = CombineCategories(tiers[0], low);
  if (!r || IsComplex(*r)) return std::nullopt;
  return r;
}

DType ComputeType(DType t) { return (t == DType::kBF16 || t == DType::kF16) ? DType::kF32 : t; }

std::optional<std::vector<int64_t>> BroadcastShapes(const std::vector<int64_t>& a,
                                                    const std::vector<int64_t>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    r[i] = da == 1 ? db : da;
  }
  return r;
}

NodeId BroadcastTo(GraphBuilder& b, NodeId x, const std::vector<int64_t>& from,
                   const std::vector<int64_t>& to) {
  if (from == to) return x;
  std::vector<int64_t> dims(from.size());
  size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) dims[i] = static_cast<int64_t>(lead + i);
  return b.BroadcastInDim(x, to, dims);
}

NodeId ConvertTo(GraphBuilder& b, NodeId x, DType to) {
  if (x == kInvalidNode) return x;
  if (b.shape(x).dtype() == to) return x;
  return b.Convert(x, to);
}

NodeId Prepare(GraphBuilder& b, const Val& v, DType common, DType compute,
               const std::vector<int64_t>& sizes) {
  NodeId x = v.id;
  if (v.tier != PromoTier::kWrapped) x = ConvertTo(b, x, common);
  x = ConvertTo(b, x, compute);
  return BroadcastTo(b, x, v.sizes, sizes);
}

NodeId Finish(GraphBuilder& b, NodeId x, const OutputMeta& out) {
  return ConvertTo(b, x, out.dtype);
}

NodeId Splat(GraphBuilder& b, DType t, double v, const std::vector<int64_t>& sizes) {
  NodeId c = b.ConstantScalar(t, v);
  if (sizes.empty()) return c;
  return b.BroadcastInDim(c, sizes, {});
}

}  // namespace ember::lowering
