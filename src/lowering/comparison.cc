// Comparison, logical and bitwise ops. Comparisons promote both operands to
// their result_type and compare there (NaN compares false except ne);
// logical ops test `!= 0` (NaN is true); bitwise ops act on integers and
// bools; shifts follow eager: an amount < 0 or >= the bit width gives 0
// (left, and right on unsigned) or the sign fill (right on signed).
#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

template <ComparisonKind K>
LowerResult LowerCompare(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 1));
  auto common = ResultType({x, y});
  if (!common) return Declined("no common dtype");
  const OutputMeta& out = c.outputs.at(0);
  Ew e(b, *common, out.sizes);
  return CheckOutputs(b, c, {Finish(b, b.Compare(e(x), e(y), K), out)});
}

enum class Logic { kAnd, kOr, kXor };

OpKind LogicOp(Logic k) {
  return k == Logic::kAnd ? OpKind::kAnd : k == Logic::kOr ? OpKind::kOr : OpKind::kXor;
}

template <Logic K>
LowerResult LowerLogical(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg y, TensorAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  auto truth = [&](const TensorArg& t) {
    NodeId v = t.value;
    if (t.dtype != DType::kPred)
      v = b.Compare(v, Splat(b, t.dtype, 0, t.sizes), ComparisonKind::kNe);
    return BroadcastTo(b, v, t.sizes, out.sizes);
  };
  NodeId r = b.Binary(LogicOp(K), truth(x), truth(y));
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

template <Logic K>
LowerResult LowerBitwise(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsInteger(out.dtype) && out.dtype != DType::kPred) return Declined("bitwise op on floats");
  if (!ResultType({x, y})) return Declined("no common dtype");
  Ew e(b, out.dtype, out.sizes);
  e.compute = out.dtype;  // pred is its own bitwise type
  return CheckOutputs(b, c, {b.Binary(LogicOp(K), e(x), e(y))});
}

template <bool kLeft>
LowerResult LowerShift(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsInteger(out.dtype)) return Declined("shift of non-integers");
  if (!ResultType({x, y})) return Declined("no common dtype");
  Ew e(b, out.dtype, out.sizes);
  OpKind op =
      kLeft ? OpKind::kShiftLeft
            : (IsSignedInt(out.dtype) ? OpKind::kShiftRightArithmetic : OpKind::kShiftRightLogical);
  return CheckOutputs(b, c, {b.Binary(op, e(x), e(y))});
}

}  // namespace

void RegisterComparison(LoweringTable& t) {
  const std::pair<const char*, LowerFn> cmps[] = {
      {"eq", LowerCompare<ComparisonKind::kEq>}, {"ne", LowerCompare<ComparisonKind::kNe>},
      {"lt", LowerCompare<ComparisonKind::kLt>}, {"le", LowerCompare<ComparisonKind::kLe>},
      {"gt", LowerCompare<ComparisonKind::kGt>}, {"ge", LowerCompare<ComparisonKind::kGe>}};
  for (const auto& [name, fn] : cmps) {
    t.Add(std::string("aten::") + name + ".Tensor", fn);
    t.Add(std::string("aten::") + name + ".Scalar", fn);
  }
  t.Add("aten::logical_and", LowerLogical<Logic::kAnd>);
  t.Add("aten::logical_or", LowerLogical<Logic::kOr>);
  t.Add("aten::logical_xor", LowerLogical<Logic::kXor>);
  for (const char* s : {".Tensor", ".Scalar"}) {
    t.Add(std::string("aten::bitwise_and") + s, LowerBitwise<Logic::kAnd>);
    t.Add(std::string("aten::bitwise_or") + s, LowerBitwise<Logic::kOr>);
    t.Add(std::string("aten::bitwise_xor") + s, LowerBitwise<Logic::kXor>);
  }
  for (const char* s : {".Tensor", ".Tensor_Scalar", ".Scalar_Tensor"}) {
    t.Add(std::string("aten::bitwise_left_shift") + s, LowerShift<true>);
    t.Add(std::string("aten::bitwise_right_shift") + s, LowerShift<false>);
  }
  for (const char* s : {".Tensor", ".Scalar"}) {
    t.Add(std::string("aten::__lshift__") + s, LowerShift<true>);
    t.Add(std::string("aten::__rshift__") + s, LowerShift<false>);
  }
}

}  // namespace ember::lowering
