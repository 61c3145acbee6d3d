// Result-shape inference and checking for every op (the builder's and the
// verifier's single source of truth). Errors are InvalidArgument naming the
// op, its operand shapes and what was expected.
#include <algorithm>
#include <set>
#include <sstream>

#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"

namespace ember {
namespace {

class Checker {
 public:
  Checker(OpKind op, const std::vector<Shape>& operands, const Attrs& attrs)
      : op_(op), operands_(operands), attrs_(attrs) {}

  template <typename... Args>
  Status Error(Args&&... args) const {
    std::ostringstream os;
    os << OpName(op_) << ": operand shapes ";
    if (operands_.empty()) os << "(none)";
    for (size_t i = 0; i < operands_.size(); ++i) os << (i ? ", " : "") << operands_[i].ToString();
    os << ": ";
    (os << ... << std::forward<Args>(args));
    return InvalidArgument(os.str());
  }

  // The operand count the op's properties give (ember/ir/opcode.h).
  Status OperandCount() const {
    const size_t lo = static_cast<size_t>(MinOperands(op_));
    const int hi = MaxOperands(op_);
    if (hi != kVariadic && operands_.size() != static_cast<size_t>(hi))
      return Error("expected ", hi, " operand(s), got ", operands_.size());
    if (operands_.size() < lo)
      return Error("expected at least ", lo, " operand(s), got ", operands_.size());
    return OkStatus();
  }
  Status AllArrays() const {
    for (size_t i = 0; i < operands_.size(); ++i)
      if (operands_[i].is_tuple()) return Error("operand ", i, " must be an array, not a tuple");
    return OkStatus();
  }
  Status Int(const attr::Base& a, int64_t* out, std::optional<int64_t> def = std::nullopt) const {
    const AttrValue* v = a.Raw(attrs_);
    if (!v) {
      if (def) {
        *out = *def;
        return OkStatus();
      }
      return Error("missing integer attribute '", a.key, "'");
    }
    if (!std::holds_alternative<int64_t>(*v))
      return Error("attribute '", a.key, "' must be an integer");
    *out = std::get<int64_t>(*v);
    return OkStatus();
  }
  // A list attribute of `size` entries (size < 0: any); absent -> `fill` repeated (if given).
  Status Ints(const attr::Base& a, std::vector<int64_t>* out, int64_t size,
              std::optional<int64_t> fill = std::nullopt) const {
    const AttrValue* v = a.Raw(attrs_);
    if (!v) {
      if (fill && size >= 0) {
        out->assign(size, *fill);
        return OkStatus();
      }
      return Error("missing integer-list attribute '", a.key, "'");
    }
    if (!std::holds_alternative<std::vector<int64_t>>(*v))
      return Error("attribute '", a.key, "' must be an integer list like {0,1}");
    *out = std::get<std::vector<int64_t>>(*v);
    if (size >= 0 && static_cast<int64_t>(out->size()) != size)
      return Error("attribute '", a.key, "' has ", out->size(), " entries, expected ", size);
    return OkStatus();
  }
  Status Str(const attr::Base& a, std::string* out) const {
    const AttrValue* v = a.Raw(attrs_);
    if (!v || !std::holds_alternative<std::string>(*v))
      return Error("missing string attribute '", a.key, "'");
    *out = std::get<std::string>(*v);
    return OkStatus();
  }
  // Distinct dims in [0, rank).
  Status DimList(const std::string& what, const std::vector<int64_t>& dims, int rank) const {
    std::set<int64_t> seen;
    for (int64_t d : dims) {
      if (d < 0 || d >= rank)
        return Error(what, " ", DimsToString(dims), ": dimension ", d, " out of range [0, ", rank,
                     ")");
      if (!seen.insert(d).second)
        return Error(what, " ", DimsToString(dims), ": dimension ", d, " repeated");
    }
    return OkStatus();
  }

  const Shape& operand(size_t i) const { return operands_[i]; }
  int64_t num_operands() const { return static_cast<int64_t>(operands_.size()); }
  const Attrs& attrs() const { return attrs_; }
  OpKind op() const { return op_; }

 private:
  OpKind op_;
  const std::vector<Shape>& operands_;
  const Attrs& attrs_;
};

bool IsNumeric(DType t) { return IsFloat(t) || IsInteger(t); }
bool IsIntOrPred(DType t) { return IsInteger(t) || IsPred(t); }

Status CheckUnaryDType(const Checker& c, DType t) {
  switch (c.op()) {
    case OpKind::kNegate:
    case OpKind::kAbs:
    case OpKind::kSign:
      if (!IsNumeric(t)) return c.Error("expected an integer or floating-point operand");
      return OkStatus();
    case OpKind::kNot:
      if (!IsIntOrPred(t)) return c.Error("expected a pred or integer operand");
      return OkStatus();
    default:  // transcendental and rounding
      if (!IsFloat(t)) return c.Error("expected a floating-point operand (f16, bf16, f32, f64)");
      return OkStatus();
  }
}

Status CheckBinaryDType(const Checker& c, DType t) {
  switch (c.op()) {
    case OpKind::kAtan2:
      if (!IsFloat(t)) return c.Error("expected floating-point operands");
      return OkStatus();
    case OpKind::kAnd:
    case OpKind::kOr:
    case OpKind::kXor:
      if (!IsIntOrPred(t)) return c.Error("expected pred or integer operands");
      return OkStatus();
    case OpKind::kShiftLeft:
    case OpKind::kShiftRightArithmetic:
    case OpKind::kShiftRightLogical:
      if (!IsInteger(t)) return c.Error("expected integer operands");
      return OkStatus();
    case OpKind::kCompare:
      if (IsComplex(t)) return c.Error("complex operands cannot be compared");
      return OkStatus();
    default:
      if (!IsNumeric(t)) return c.Error("expected integer or floating-point operands");
      return OkStatus();
  }
}

StatusOr<Shape> RequireDeclared(const Checker& c, const std::optional<Shape>& declared) {
  if (!declared) return c.Error("the result shape must be given");
  return *declared;
}

StatusOr<Shape> InferGather(const Checker& c) {
  EMBER_RETURN_IF_ERROR(c.AllArrays());
  const Shape& operand = c.operand(0);
  const Shape& indices = c.operand(1);
  if (!IsInteger(indices.dtype())) return c.Error("indices must have an integer type");
  std::vector<int64_t> offset_dims, collapsed, start_map, slice_sizes;
  int64_t ivd = 0;
  EMBER_RETURN_IF_ERROR(c.Ints(attr::OffsetDims, &offset_dims, -1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::CollapsedSliceDims, &collapsed, -1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::StartIndexMap, &start_map, -1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::SliceSizes, &slice_sizes, operand.rank()));
  EMBER_RETURN_IF_ERROR(c.Int(attr::IndexVectorDim, &ivd));
  if (ivd < 0 || ivd > indices.rank())
    return c.Error("index_vector_dim ", ivd, " out of range [0, ", indices.rank(), "]");
  int64_t index_vector_size = ivd == indices.rank() ? 1 : indices.dim(ivd);
  if (static_cast<int64_t>(start_map.size()) != index_vector_size)
    return c.Error("start_index_map has ", start_map.size(), " entries but the index vector has ",
                   index_vector_size);
  EMBER_RETURN_IF_ERROR(c.DimList("start_index_map", start_map, operand.rank()));
  EMBER_RETURN_IF_ERROR(c.DimList("collapsed_slice_dims", collapsed, operand.rank()));
  if (!std::is_sorted(collapsed.begin(), collapsed.end()))
    return c.Error("collapsed_slice_dims must be sorted");
  for (int i = 0; i < operand.rank(); ++i)
    if (slice_sizes[i] < 0 || slice_sizes[i] > operand.dim(i))
      return c.Error("slice_sizes ", DimsToString(slice_sizes), ": entry ", i, " out of range [0, ",
                     operand.dim(i), "]");
  for (int64_t d : collapsed)
    if (slice_sizes[d] != 1) return c.Error("collapsed dimension ", d, " must have slice size 1");
  std::vector<int64_t> batch_dims;
  for (int i = 0; i < indices.rank(); ++i)
    if (i != ivd) batch_dims.push_back(indices.dim(i));
  int64_t out_rank = static_cast<int64_t>(batch_dims.size()) + operand.rank() -
                     static_cast<int64_t>(collapsed.size());
  if (static_cast<int64_t>(offset_dims.size()) !=
      operand.rank() - static_cast<int64_t>(collapsed.size()))
    return c.Error("offset_dims must have operand rank - |collapsed_slice_dims| = ",
                   operand.rank() - static_cast<int64_t>(collapsed.size()), " entries");
  EMBER_RETURN_IF_ERROR(c.DimList("offset_dims", offset_dims, static_cast<int>(out_rank)));
  if (!std::is_sorted(offset_dims.begin(), offset_dims.end()))
    return c.Error("offset_dims must be sorted");
  std::vector<int64_t> window;
  for (int i = 0; i < operand.rank(); ++i)
    if (!std::binary_search(collapsed.begin(), collapsed.end(), i))
      window.push_back(slice_sizes[i]);
  std::vector<int64_t> out(out_rank);
  size_t wi = 0, bi = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    if (std::binary_search(offset_dims.begin(), offset_dims.end(), i))
      out[i] = window[wi++];
    else
      out[i] = batch_dims[bi++];
  }
  return Shape(operand.dtype(), out);
}

StatusOr<Shape> InferScatter(const Checker& c) {
  EMBER_RETURN_IF_ERROR(c.AllArrays());
  const Shape& operand = c.operand(0);
  const Shape& indices = c.operand(1);
  const Shape& updates = c.operand(2);
  if (!IsInteger(indices.dtype())) return c.Error("indices must have an integer type");
  if (updates.dtype() != operand.dtype()) return c.Error("updates must have the operand's dtype");
  std::vector<int64_t> window_dims, inserted, to_operand;
  int64_t ivd = 0;
  std::string to_apply;
  EMBER_RETURN_IF_ERROR(c.Ints(attr::UpdateWindowDims, &window_dims, -1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::InsertedWindowDims, &inserted, -1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::ScatterDimsToOperandDims, &to_operand, -1));
  EMBER_RETURN_IF_ERROR(c.Int(attr::IndexVectorDim, &ivd));
  EMBER_RETURN_IF_ERROR(c.Str(attr::ToApply, &to_apply));
  auto kind = ParseReduceKind(to_apply);
  if (!kind)
    return c.Error("to_apply '", to_apply,
                   "' is not one of assign, add, multiply, maximum, minimum, and, or");
  if ((*kind == ReduceKind::kAnd || *kind == ReduceKind::kOr) && !IsIntOrPred(operand.dtype()))
    return c.Error("to_apply=", to_apply, " needs pred or integer values");
  if (IsComplex(operand.dtype()) && *kind != ReduceKind::kAssign)
    return c.Error("complex scatter supports only to_apply=assign");
  if (ivd < 0 || ivd > indices.rank())
    return c.Error("index_vector_dim ", ivd, " out of range [0, ", indices.rank(), "]");
  int64_t index_vector_size = ivd == indices.rank() ? 1 : indices.dim(ivd);
  if (static_cast<int64_t>(to_operand.size()) != index_vector_size)
    return c.Error("scatter_dims_to_operand_dims has ", to_operand.size(),
                   " entries but the index vector has ", index_vector_size);
  EMBER_RETURN_IF_ERROR(c.DimList("scatter_dims_to_operand_dims", to_operand, operand.rank()));
  EMBER_RETURN_IF_ERROR(c.DimList("inserted_window_dims", inserted, operand.rank()));
  if (!std::is_sorted(inserted.begin(), inserted.end()))
    return c.Error("inserted_window_dims must be sorted");
  if (static_cast<int64_t>(window_dims.size()) + static_cast<int64_t>(inserted.size()) !=
      operand.rank())
    return c.Error("|update_window_dims| + |inserted_window_dims| must equal the operand rank ",
                   operand.rank());
  EMBER_RETURN_IF_ERROR(c.DimList("update_window_dims", window_dims, updates.rank()));
  if (!std::is_sorted(window_dims.begin(), window_dims.end()))
    return c.Error("update_window_dims must be sorted");
  std::vector<int64_t> batch_dims;
  for (int i = 0; i < indices.rank(); ++i)
    if (i != ivd) batch_dims.push_back(indices.dim(i));
  if (updates.rank() != static_cast<int>(batch_dims.size() + window_dims.size()))
    return c.Error("updates rank ", updates.rank(), " must be ",
                   batch_dims.size() + window_dims.size(), " (scatter dims + window dims)");
  std::vector<int64_t> operand_window;
  for (int i = 0; i < operand.rank(); ++i)
    if (!std::binary_search(inserted.begin(), inserted.end(), i))
      operand_window.push_back(operand.dim(i));
  size_t wi = 0, bi = 0;
  for (int i = 0; i < updates.rank(); ++i) {
    if (std::binary_search(window_dims.begin(), window_dims.end(), i)) {
      if (updates.dim(i) > operand_window[wi])
        return c.Error("updates window dimension ", i, " has size ", updates.dim(i),
                       ", larger than the operand's ", operand_window[wi]);
      ++wi;
    } else {
      if (updates.dim(i) != batch_dims[bi])
        return c.Error("updates scatter dimension ", i, " has size ", updates.dim(i), ", expected ",
                       batch_dims[bi], " (from indices)");
      ++bi;
    }
  }
  return operand;
}

StatusOr<Shape> InferReduceWindow(const Checker& c) {
  EMBER_RETURN_IF_ERROR(c.AllArrays());
  const Shape& x = c.operand(0);
  const int r = x.rank();
  std::vector<int64_t> window, strides, lo, hi, dil;
  std::string to_apply;
  EMBER_RETURN_IF_ERROR(c.Ints(attr::WindowDimensions, &window, r));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::WindowStrides, &strides, r, 1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::PaddingLow, &lo, r, 0));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::PaddingHigh, &hi, r, 0));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::WindowDilations, &dil, r, 1));
  EMBER_RETURN_IF_ERROR(c.Str(attr::ToApply, &to_apply));
  auto kind = ParseReduceKind(to_apply);
  if (!kind || *kind == ReduceKind::kAssign)
    return c.Error("to_apply '", to_apply,
                   "' is not one of add, multiply, maximum, minimum, and, or");
  if ((*kind == ReduceKind::kAnd || *kind == ReduceKind::kOr) ? !IsIntOrPred(x.dtype())
                                                              : !IsNumeric(x.dtype()))
    return c.Error("to_apply=", to_apply, " does not accept ", DTypeName(x.dtype()));
  std::vector<int64_t> out(r);
  for (int i = 0; i < r; ++i) {
    if (window[i] < 1 || strides[i] < 1 || dil[i] < 1 || lo[i] < 0 || hi[i] < 0)
      return c.Error("dimension ", i,
                     ": window sizes, strides and dilations must be >= 1 and padding >= 0");
    int64_t padded = x.dim(i) + lo[i] + hi[i];
    int64_t span = (window[i] - 1) * dil[i] + 1;
    out[i] = padded < span ? 0 : (padded - span) / strides[i] + 1;
  }
  return Shape(x.dtype(), out);
}

StatusOr<Shape> InferDot(const Checker& c, const std::optional<Shape>& declared) {
  EMBER_RETURN_IF_ERROR(c.AllArrays());
  const Shape& l = c.operand(0);
  const Shape& r = c.operand(1);
  if (l.dtype() != r.dtype()) return c.Error("operands must have the same dtype");
  if (!IsNumeric(l.dtype())) return c.Error("expected integer or floating-point operands");
  std::vector<int64_t> lb, rb, lc, rc;
  EMBER_RETURN_IF_ERROR(c.Ints(attr::LhsBatchDims, &lb, -1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::RhsBatchDims, &rb, -1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::LhsContractingDims, &lc, -1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::RhsContractingDims, &rc, -1));
  if (lb.size() != rb.size()) return c.Error("lhs and rhs must have as many batch dims");
  if (lc.size() != rc.size()) return c.Error("lhs and rhs must have as many contracting dims");
  std::vector<int64_t> lall = lb, rall = rb;
  lall.insert(lall.end(), lc.begin(), lc.end());
  rall.insert(rall.end(), rc.begin(), rc.end());
  EMBER_RETURN_IF_ERROR(c.DimList("lhs batch+contracting dims", lall, l.rank()));
  EMBER_RETURN_IF_ERROR(c.DimList("rhs batch+contracting dims", rall, r.rank()));
  for (size_t i = 0; i < lall.size(); ++i)
    if (l.dim(lall[i]) != r.dim(rall[i]))
      return c.Error("lhs dim ", lall[i], " (size ", l.dim(lall[i]), ") and rhs dim ", rall[i],
                     " (size ", r.dim(rall[i]), ") must match");
  std::vector<int64_t> out;
  for (int64_t d : lb) out.push_back(l.dim(d));
  for (int i = 0; i < l.rank(); ++i)
    if (std::find(lall.begin(), lall.end(), i) == lall.end()) out.push_back(l.dim(i));
  for (int i = 0; i < r.rank(); ++i)
    if (std::find(rall.begin(), rall.end(), i) == rall.end()) out.push_back(r.dim(i));
  DType result = l.dtype();
  if (declared && !declared->is_tuple()) {
    if (!IsNumeric(declared->dtype())) return c.Error("result dtype must be numeric");
    result = declared->dtype();
  }
  return Shape(result, out);
}

StatusOr<Shape> InferConvolution(const Checker& c) {
  EMBER_RETURN_IF_ERROR(c.AllArrays());
  const Shape& l = c.operand(0);
  const Shape& r = c.operand(1);
  if (l.dtype() != r.dtype()) return c.Error("input and kernel must have the same dtype");
  if (!IsNumeric(l.dtype())) return c.Error("expected integer or floating-point operands");
  if (l.rank() < 3 || r.rank() != l.rank())
    return c.Error(
        "expected input [N, C, spatial...] and kernel [O, C/groups, spatial...] of equal rank >= "
        "3");
  const int s = l.rank() - 2;
  std::vector<int64_t> strides, lo, hi, ldil, rdil;
  int64_t groups;
  EMBER_RETURN_IF_ERROR(c.Ints(attr::WindowStrides, &strides, s, 1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::PaddingLow, &lo, s, 0));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::PaddingHigh, &hi, s, 0));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::LhsDilation, &ldil, s, 1));
  EMBER_RETURN_IF_ERROR(c.Ints(attr::RhsDilation, &rdil, s, 1));
  EMBER_RETURN_IF_ERROR(c.Int(attr::FeatureGroupCount, &groups, 1));
  if (groups < 1) return c.Error("feature_group_count must be >= 1");
  if (l.dim(1) != r.dim(1) * groups)
    return c.Error("input channels ", l.dim(1), " must equal kernel input channels ", r.dim(1),
                   " x feature_group_count ", groups);
  if (r.dim(0) % groups != 0)
    return c.Error("output channels ", r.dim(0), " must be divisible by feature_group_count ",
                   groups);
  std::vector<int64_t> out = {l.dim(0), r.dim(0)};
  for (int i = 0; i < s; ++i) {
    if (strides[i] < 1 || ldil[i] < 1 || rdil[i] < 1)
      return c.Error("strides and dilations must be >= 1");
    int64_t in = l.dim(i + 2) == 0 ? 0 : (l.dim(i + 2) - 1) * ldil[i] + 1;
    int64_t k = r.dim(i + 2) == 0 ? 0 : (r.dim(i + 2) - 1) * rdil[i] + 1;
    int64_t padded = in + lo[i] + hi[i];
    out.push_back(padded < k ? 0 : (padded - k) / strides[i] + 1);
  }
  return Shape(l.dtype(), out);
}

StatusOr<Shape> Infer(OpKind op, const std::vector<Shape>& ops, const Attrs& attrs,
                      const std::optional<Shape>& declared, const Literal* literal) {
  Checker c(op, ops, attrs);
  EMBER_RETURN_IF_ERROR(c.OperandCount());
  switch (OpCategory(op)) {
    case OpCategoryKind::kLeaf: {
      if (op == OpKind::kConstant) {
        if (!literal) return c.Error("a constant needs a value");
        if (literal->shape().is_tuple()) return c.Error("a constant must be an array");
        return literal->shape();
      }
      EMBER_ASSIGN_OR_RETURN(Shape s, RequireDeclared(c, declared));
      if (s.is_tuple()) return c.Error("result must be an array");
      if (op == OpKind::kParameter) {
        int64_t index;
        EMBER_RETURN_IF_ERROR(c.Int(attr::Index, &index));
        if (index < 0) return c.Error("parameter index must be >= 0");
        return s;
      }
      int64_t dim;  // iota
      EMBER_RETURN_IF_ERROR(c.Int(attr::IotaDimension, &dim));
      if (dim < 0 || dim >= s.rank())
        return c.Error("iota_dimension ", dim, " out of range [0, ", s.rank(), ") for ",
                       s.ToString());
      if (IsComplex(s.dtype())) return c.Error("iota cannot produce complex values");
      return s;
    }
    case OpCategoryKind::kRng: {
      EMBER_RETURN_IF_ERROR(c.AllArrays());
      for (int i = 0; i < 2; ++i)
        if (ops[i] != Shape(DType::kU64, {}))
          return c.Error("seed and offset must be u64[] scalars");
      int64_t stream;
      EMBER_RETURN_IF_ERROR(c.Int(attr::Stream, &stream));
      EMBER_ASSIGN_OR_RETURN(Shape s, RequireDeclared(c, declared));
      if (s.is_tuple() || !IsFloat(s.dtype()))
        return c.Error("result must be a floating-point array");
      return s;
    }
    case OpCategoryKind::kUnary: {
      EMBER_RETURN_IF_ERROR(c.AllArrays());
      const Shape& x = ops[0];
      if (op == OpKind::kConvert) {
        EMBER_ASSIGN_OR_RETURN(Shape s, RequireDeclared(c, declared));
        if (s.is_tuple() || s.dims() != x.dims())
          return c.Error("convert keeps the dims ", DimsToString(x.dims()), "; got result ",
                         s.ToString());
        if (IsComplex(x.dtype()) && !IsComplex(s.dtype()))
          return c.Error("complex to real conversion would discard the imaginary part");
        return s;
      }
      EMBER_RETURN_IF_ERROR(CheckUnaryDType(c, x.dtype()));
      return x;
    }
    case OpCategoryKind::kBinary: {
      EMBER_RETURN_IF_ERROR(c.AllArrays());
      if (ops[0] != ops[1])
        return c.Error(
            "expected operands of one shape and dtype (broadcast with broadcast-in-dim, cast with "
            "convert)");
      EMBER_RETURN_IF_ERROR(CheckBinaryDType(c, ops[0].dtype()));
      if (op == OpKind::kCompare) {
        std::string dir;
        EMBER_RETURN_IF_ERROR(c.Str(attr::Direction, &dir));
        if (!ParseComparisonKind(dir))
          return c.Error("direction '", dir, "' is not one of EQ, NE, LT, LE, GT, GE");
        return ops[0].with_dtype(DType::kPred);
      }
      return ops[0];
    }
    case OpCategoryKind::kElementwiseOther: {
      EMBER_RETURN_IF_ERROR(c.AllArrays());
      if (op == OpKind::kSelect) {
        if (ops[0].dtype() != DType::kPred) return c.Error("the predicate must be pred");
        if (ops[1] != ops[2]) return c.Error("on_true and on_false must have one shape and dtype");
        if (!ops[0].is_scalar() && ops[0].dims() != ops[1].dims())
          return c.Error("the predicate must be a scalar or have the dims of on_true");
        return ops[1];
      }
      if (op == OpKind::kFma) {
        if (ops[0] != ops[1] || ops[0] != ops[2])
          return c.Error("expected operands of one shape and dtype");
        if (ops[0].dtype() != DType::kF32 && ops[0].dtype() != DType::kF64)
          return c.Error("expected f32 or f64 operands");
        return ops[0];
      }
      const Shape& x = ops[1];  // clamp(min, x, max)
      if (!IsNumeric(x.dtype())) return c.Error("expected integer or floating-point operands");
      for (int i : {0, 2})
        if (ops[i].dtype() != x.dtype() || (!ops[i].is_scalar() && ops[i].dims() != x.dims()))
          return c.Error("min and max must be scalars or match the operand, with its dtype");
      return x;
    }
    case OpCategoryKind::kDataMovement:
      break;
    case OpCategoryKind::kIndexing:
      return op == OpKind::kGather ? InferGather(c) : InferScatter(c);
    case OpCategoryKind::kReduction: {
      if (op == OpKind::kReduceWindow) return InferReduceWindow(c);
      EMBER_RETURN_IF_ERROR(c.AllArrays());
      const Shape& x = ops[0];
      if (op == OpKind::kReduce) {
        std::vector<int64_t> dims;
        std::string to_apply;
        EMBER_RETURN_IF_ERROR(c.Ints(attr::Dimensions, &dims, -1));
        EMBER_RETURN_IF_ERROR(c.DimList("dimensions", dims, x.rank()));
        EMBER_RETURN_IF_ERROR(c.Str(attr::ToApply, &to_apply));
        auto kind = ParseReduceKind(to_apply);
        if (!kind || *kind == ReduceKind::kAssign)
          return c.Error("to_apply '", to_apply,
                         "' is not one of add, multiply, maximum, minimum, and, or");
        bool logical = *kind == ReduceKind::kAnd || *kind == ReduceKind::kOr;
        if (logical ? !IsIntOrPred(x.dtype()) : !IsNumeric(x.dtype()))
          return c.Error("to_apply=", to_apply, " does not accept ", DTypeName(x.dtype()));
        std::vector<int64_t> out;
        for (int i = 0; i < x.rank(); ++i)
          if (std::find(dims.begin(), dims.end(), i) == dims.end()) out.push_back(x.dim(i));
        return Shape(x.dtype(), out);
      }
      int64_t dim;  // argmax / argmin
      EMBER_RETURN_IF_ERROR(c.Int(attr::Dimension, &dim));
      if (dim < 0 || dim >= x.rank())
        return c.Error("dimension ", dim, " out of range [0, ", x.rank(), ")");
      if (!IsNumeric(x.dtype()) && !IsPred(x.dtype())) return c.Error("expected a real operand");
      if (x.dim(dim) == 0) return c.Error("cannot take ", OpName(op), " over an empty dimension");
      DType index_type = DType::kS64;
      if (declared && !declared->is_tuple()) index_type = declared->dtype();
      if (index_type != DType::kS32 && index_type != DType::kS64)
        return c.Error("the index type must be s32 or s64");
      std::vector<int64_t> out = x.dims();
      out.erase(out.begin() + dim);
      return Shape(index_type, out);
    }
    case OpCategoryKind::kContraction:
      return op == OpKind::kDotGeneral ? InferDot(c, declared) : InferConvolution(c);
    case OpCategoryKind::kOpaque: {
      if (op == OpKind::kCustomCall) {
        std::string target;
        EMBER_RETURN_IF_ERROR(c.Str(attr::CallTargetName, &target));
        if (target.empty()) return c.Error("call_target_name must not be empty");
        EMBER_ASSIGN_OR_RETURN(Shape result, RequireDeclared(c, declared));
        if (attr::OutputToOperandAliasing.In(c.attrs())) {
          // Each {tuple index, operand index} pair: an element of the tuple result with
          // exactly its operand's shape.
          std::vector<int64_t> pairs;
          EMBER_RETURN_IF_ERROR(c.Ints(attr::OutputToOperandAliasing, &pairs, -1));
          if (pairs.size() % 2 != 0 || !result.is_tuple())
            return c.Error("output_to_operand_aliasing must pair tuple elements with operands");
          for (size_t i = 0; i < pairs.size(); i += 2) {
            const int64_t e = pairs[i], o = pairs[i + 1];
            if (e < 0 || e >= static_cast<int64_t>(result.tuple_shapes().size()) || o < 0 ||
                o >= c.num_operands() || result.tuple_shapes()[e] != c.operand(o))
              return c.Error("output_to_operand_aliasing pair {", e, ",", o,
                             "}: the element and the operand must exist and have one shape");
          }
        }
        return result;
      }
      EMBER_RETURN_IF_ERROR(c.AllArrays());
      return Shape::Tuple(ops);
    }
    case OpCategoryKind::kFusion: {
      // The body carries the rule (CheckFusionBody, run by the builder and
      // Verify); here only the attributes and the declared result.
      EMBER_RETURN_IF_ERROR(c.AllArrays());
      std::string kind;
      EMBER_RETURN_IF_ERROR(c.Str(attr::Kind, &kind));
      if (!ParseFusionKind(kind))
        return c.Error("kind '", kind, "' is not loop, input, row or scatter");
      for (const auto& [key, value] : attrs.map())
        if (key != "kind") return c.Error("unexpected attribute '", key, "'");
      if (!declared) return c.Error("a fusion's result shape comes from its body");
      if (declared->is_tuple()) return c.Error("a fusion has one array result");
      return *declared;
    }
    case OpCategoryKind::kTuple: {
      if (op == OpKind::kTuple) {
        EMBER_RETURN_IF_ERROR(c.AllArrays());
        return Shape::Tuple(ops);
      }
      if (!ops[0].is_tuple()) return c.Error("operand must be a tuple");
      int64_t index;
      EMBER_RETURN_IF_ERROR(c.Int(attr::Index, &index));
      if (index < 0 || index >= static_cast<int64_t>(ops[0].tuple_shapes().size()))
        return c.Error("index ", index, " out of range [0, ", ops[0].tuple_shapes().size(), ")");
      return ops[0].tuple_shapes()[index];
    }
  }

  // ---- data movement ----
  EMBER_RETURN_IF_ERROR(c.AllArrays());
  const Shape& x = ops[0];
  const int r = x.rank();
  switch (op) {
    case OpKind::kBroadcastInDim: {
      EMBER_ASSIGN_OR_RETURN(Shape s, RequireDeclared(c, declared));
      if (s.is_tuple() || s.dtype() != x.dtype())
        return c.Error("result must be an array of the operand's dtype");
      std::vector<int64_t> dims;
      EMBER_RETURN_IF_ERROR(c.Ints(attr::Dimensions, &dims, r));
      EMBER_RETURN_IF_ERROR(c.DimList("dimensions", dims, s.rank()));
      for (int i = 0; i < r; ++i)
        if (x.dim(i) != 1 && x.dim(i) != s.dim(dims[i]))
          return c.Error("operand dim ", i, " (size ", x.dim(i),
                         ") cannot broadcast to result dim ", dims[i], " (size ", s.dim(dims[i]),
                         ") of ", s.ToString());
      return s;
    }
    case OpKind::kReshape: {
      EMBER_ASSIGN_OR_RETURN(Shape s, RequireDeclared(c, declared));
      if (s.is_tuple() || s.dtype() != x.dtype() || s.num_elements() != x.num_elements())
        return c.Error("cannot reshape to ", s.ToString(), ": element count or dtype differs");
      for (int64_t d : s.dims())
        if (d < 0) return c.Error("negative dimension in ", s.ToString());
      return s;
    }
    case OpKind::kTranspose: {
      std::vector<int64_t> perm;
      EMBER_RETURN_IF_ERROR(c.Ints(attr::Dimensions, &perm, r));
      EMBER_RETURN_IF_ERROR(c.DimList("dimensions", perm, r));
      std::vector<int64_t> out(r);
      for (int i = 0; i < r; ++i) out[i] = x.dim(perm[i]);
      return Shape(x.dtype(), out);
    }
    case OpKind::kSlice: {
      std::vector<int64_t> start, limit, stride;
      EMBER_RETURN_IF_ERROR(c.Ints(attr::Start, &start, r));
      EMBER_RETURN_IF_ERROR(c.Ints(attr::Limit, &limit, r));
      EMBER_RETURN_IF_ERROR(c.Ints(attr::Stride, &stride, r, 1));
      std::vector<int64_t> out(r);
      for (int i = 0; i < r; ++i) {
        if (start[i] < 0 || start[i] > limit[i] || limit[i] > x.dim(i) || stride[i] < 1)
          return c.Error("dimension ", i, ": need 0 <= start (", start[i], ") <= limit (", limit[i],
                         ") <= ", x.dim(i), " and stride (", stride[i], ") >= 1");
        out[i] = (limit[i] - start[i] + stride[i] - 1) / stride[i];
      }
      return Shape(x.dtype(), out);
    }
    case OpKind::kDynamicSlice:
    case OpKind::kDynamicUpdateSlice: {
      size_t first_index = op == OpKind::kDynamicSlice ? 1 : 2;
      if (ops.size() != first_index + r)
        return c.Error("expected one start index per operand dimension (", r, "), got ",
                       ops.size() - first_index);
      for (size_t i = first_index; i < ops.size(); ++i)
        if (!ops[i].is_scalar() || !IsInteger(ops[i].dtype()))
          return c.Error("start index operand ", i, " must be an integer scalar");
      if (op == OpKind::kDynamicSlice) {
        std::vector<int64_t> sizes;
        EMBER_RETURN_IF_ERROR(c.Ints(attr::SliceSizes, &sizes, r));
        for (int i = 0; i < r; ++i)
          if (sizes[i] < 0 || sizes[i] > x.dim(i))
            return c.Error("slice_sizes ", DimsToString(sizes), ": entry ", i, " out of range [0, ",
                           x.dim(i), "]");
        return Shape(x.dtype(), sizes);
      }
      const Shape& u = ops[1];
      if (u.dtype() != x.dtype() || u.rank() != r)
        return c.Error("update must have the operand's dtype and rank");
      for (int i = 0; i < r; ++i)
        if (u.dim(i) > x.dim(i)) return c.Error("update dim ", i, " is larger than the operand's");
      return x;
    }
    case OpKind::kConcatenate: {
      int64_t dim;
      EMBER_RETURN_IF_ERROR(c.Int(attr::Dimension, &dim));
      if (dim < 0 || dim >= r) return c.Error("dimension ", dim, " out of range [0, ", r, ")");
      std::vector<int64_t> out = x.dims();
      for (size_t i = 1; i < ops.size(); ++i) {
        if (ops[i].dtype() != x.dtype() || ops[i].rank() != r)
          return c.Error("all operands must have one dtype and rank");
        for (int d = 0; d < r; ++d)
          if (d != dim && ops[i].dim(d) != x.dim(d))
            return c.Error("operand ", i, " differs in dimension ", d, " (only dimension ", dim,
                           " may differ)");
        out[dim] += ops[i].dim(dim);
      }
      return Shape(x.dtype(), out);
    }
    case OpKind::kPad: {
      if (ops[1] != Shape(x.dtype(), {}))
        return c.Error("padding value must be a scalar of the operand's dtype");
      std::vector<int64_t> lo, hi, interior;
      EMBER_RETURN_IF_ERROR(c.Ints(attr::Low, &lo, r));
      EMBER_RETURN_IF_ERROR(c.Ints(attr::High, &hi, r));
      EMBER_RETURN_IF_ERROR(c.Ints(attr::Interior, &interior, r, 0));
      std::vector<int64_t> out(r);
      for (int i = 0; i < r; ++i) {
        if (interior[i] < 0) return c.Error("interior padding must be >= 0");
        int64_t core = x.dim(i) == 0 ? 0 : x.dim(i) + (x.dim(i) - 1) * interior[i];
        out[i] = core + lo[i] + hi[i];
        if (out[i] < 0)
          return c.Error("dimension ", i, ": padding crops more than the operand holds");
      }
      return Shape(x.dtype(), out);
    }
    case OpKind::kReverse: {
      std::vector<int64_t> dims;
      EMBER_RETURN_IF_ERROR(c.Ints(attr::Dimensions, &dims, -1));
      EMBER_RETURN_IF_ERROR(c.DimList("dimensions", dims, r));
      return x;
    }
    default:
      return EMBER_INTERNAL_ERROR("no shape rule for ", OpName(op));
  }
}

}  // namespace

StatusOr<Shape> InferShape(OpKind op, const std::vector<Shape>& operands, const Attrs& attrs,
                           const std::optional<Shape>& declared, const Literal* literal) {
  EMBER_ASSIGN_OR_RETURN(Shape s, Infer(op, operands, attrs, declared, literal));
  if (declared && !ResultIsDeclared(op) && *declared != s)
    return InvalidArgument(OpName(op), ": declared result ", declared->ToString(),
                           " differs from the inferred ", s.ToString());
  return s;
}

}  // namespace ember
