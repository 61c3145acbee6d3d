// Per-element expression emission (expr_emitter.h). Each op's C++ mirrors the
// interpreter's formula (src/eval/elementwise.cc) through the prelude's
// helpers, so values agree bit for bit; bf16/f16 results are rounded after
// every elementwise node, as the interpreter stores each node's value.
#include "codegen/cpu/expr_emitter.h"

#include <algorithm>

#include "codegen/cpu/c_types.h"
#include "ember/ir/attributes.h"

namespace ember::codegen {
namespace {

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += v[i];
  }
  return s;
}

bool IsFloatType(DType t) { return IsFloat(t); }

// libm function name for the compute type of `t` (float or double).
std::string MathFn(const char* base, DType t) {
  std::string s = std::string("__builtin_") + base;
  if (t != DType::kF64) s += "f";
  return s;
}

std::string Paren(const std::string& s) { return "(" + s + ")"; }

// "(e - k)" with k possibly negative, simplified for k == 0.
std::string Minus(const std::string& e, int64_t k) {
  if (k == 0) return e;
  if (k < 0) return "(" + e + " + " + IntLiteral(-k) + ")";
  return "(" + e + " - " + IntLiteral(k) + ")";
}

}  // namespace

ExprEmitter::ExprEmitter(const KernelPlan& plan, int* var_counter, int indent)
    : plan_(plan), g_(*plan.graph), var_counter_(var_counter), indent_(indent) {
  scopes_.emplace_back();
}

void ExprEmitter::Line(const std::string& s) {
  code_ += std::string(static_cast<size_t>(indent_) * 2, ' ');
  code_ += s;
  code_ += '\n';
}

std::string ExprEmitter::NewVar() { return "v" + std::to_string((*var_counter_)++); }

std::string ExprEmitter::Bind(DType t, const std::string& expr) {
  std::string v = NewVar();
  Line("const " + ComputeType(t) + " " + v + " = " + expr + ";");
  return v;
}

std::string ExprEmitter::Key(NodeId id, const Index& idx) const {
  std::string k = std::to_string(id) + "|";
  if (idx.has_multi) k += Join(idx.ix, ",");
  k += "|" + idx.lin;
  return k;
}

const ExprEmitter::Val* ExprEmitter::Lookup(const std::string& key) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(key);
    if (f != it->end()) return &f->second;
  }
  return nullptr;
}

std::string ExprEmitter::LinOf(const Shape& s, const Index& idx) {
  if (!idx.lin.empty()) return idx.lin;
  const auto strides = s.strides();
  std::vector<std::string> terms;
  for (int d = 0; d < s.rank(); ++d) {
    if (s.dim(d) == 1) continue;  // the index is 0 there
    if (strides[d] == 1) {
      terms.push_back(idx.ix[d]);
    } else {
      terms.push_back(idx.ix[d] + " * " + IntLiteral(strides[d]));
    }
  }
  if (terms.empty()) return "0";
  if (terms.size() == 1) return terms[0];
  return Paren(Join(terms, " + "));
}

std::vector<std::string> ExprEmitter::MultiOf(const Shape& s, const Index& idx) {
  if (idx.has_multi) return idx.ix;
  const auto strides = s.strides();
  std::vector<std::string> ix(s.rank());
  bool outer_nontrivial = false;  // a dim of size > 1 before d
  int nontrivial = 0;
  for (int d = 0; d < s.rank(); ++d) nontrivial += s.dim(d) != 1;
  for (int d = 0; d < s.rank(); ++d) {
    if (s.dim(d) == 1) {
      ix[d] = "0";
      continue;
    }
    std::string e = idx.lin;
    if (strides[d] != 1) e = "(" + e + " / " + IntLiteral(strides[d]) + ")";
    if (outer_nontrivial) e = "(" + e + " % " + IntLiteral(s.dim(d)) + ")";
    ix[d] = e;
    outer_nontrivial = true;
  }
  if (nontrivial > 1) derived_multi_ = true;
  return ix;
}

std::string ExprEmitter::Value(NodeId id, const Index& idx) { return Emit(id, idx).expr; }

ExprEmitter::Val ExprEmitter::Emit(NodeId id, const Index& idx) {
  const std::string key = Key(id, idx);
  if (const Val* v = Lookup(key)) return *v;
  Val v = EmitUncached(g_.node(id), idx);
  scopes_.back()[key] = v;
  return v;
}

Index ExprEmitter::OperandIndex(const Node& n, const Index& idx) {
  const Shape& os = g_.node(n.operands[0]).shape;
  const Shape& rs = n.shape;
  switch (n.op) {
    case OpKind::kBroadcastInDim: {
      const auto& map = attr::Dimensions(n);
      if (os.rank() == 0) return Index::Scalar();
      bool identity = os.dims() == rs.dims();
      for (size_t i = 0; i < map.size(); ++i) identity &= map[i] == static_cast<int64_t>(i);
      if (identity) return idx;
      auto rix = MultiOf(rs, idx);
      std::vector<std::string> ix(os.rank());
      for (int i = 0; i < os.rank(); ++i) ix[i] = os.dim(i) == 1 ? "0" : rix[map[i]];
      return Index::Multi(ix);
    }
    case OpKind::kReshape: {
      // Same sequence of non-1 dims: map the multi-index directly.
      if (idx.has_multi) {
        std::vector<int> rnz, onz;
        for (int d = 0; d < rs.rank(); ++d)
          if (rs.dim(d) != 1) rnz.push_back(d);
        for (int d = 0; d < os.rank(); ++d)
          if (os.dim(d) != 1) onz.push_back(d);
        bool same = rnz.size() == onz.size();
        for (size_t k = 0; same && k < rnz.size(); ++k) same = rs.dim(rnz[k]) == os.dim(onz[k]);
        if (same) {
          std::vector<std::string> ix(os.rank(), "0");
          for (size_t k = 0; k < rnz.size(); ++k) ix[onz[k]] = idx.ix[rnz[k]];
          Index r = Index::Multi(ix);
          r.lin = idx.lin;
          return r;
        }
      }
      return Index::Linear(LinOf(rs, idx));
    }
    case OpKind::kTranspose: {
      const auto& perm = attr::Dimensions(n);
      auto rix = MultiOf(rs, idx);
      std::vector<std::string> ix(os.rank());
      for (size_t i = 0; i < perm.size(); ++i) ix[perm[i]] = rix[i];
      return Index::Multi(ix);
    }
    case OpKind::kSlice: {
      const auto& start = attr::Start(n);
      auto stride = attr::Stride(n);
      if (stride.empty()) stride.assign(os.rank(), 1);
      if (os.dims() == rs.dims()) return idx;  // full slice
      auto rix = MultiOf(rs, idx);
      std::vector<std::string> ix(os.rank());
      for (int d = 0; d < os.rank(); ++d) {
        std::string e = rix[d];
        if (stride[d] != 1) e = "(" + e + " * " + IntLiteral(stride[d]) + ")";
        if (start[d] != 0) e = "(" + e + " + " + IntLiteral(start[d]) + ")";
        ix[d] = e;
      }
      return Index::Multi(ix);
    }
    case OpKind::kReverse: {
      std::vector<bool> rev(os.rank(), false);
      for (int64_t d : attr::Dimensions(n)) rev[d] = !rev[d];
      auto rix = MultiOf(rs, idx);
      std::vector<std::string> ix(os.rank());
      for (int d = 0; d < os.rank(); ++d) {
        ix[d] = (rev[d] && os.dim(d) > 1) ? "(" + IntLiteral(os.dim(d) - 1) + " - " + rix[d] + ")"
                                          : rix[d];
      }
      return Index::Multi(ix);
    }
    default:
      return idx;  // elementwise
  }
}

ExprEmitter::Val ExprEmitter::EmitUncached(const Node& n, const Index& idx) {
  const DType t = n.shape.dtype();
  auto sc = plan_.scalars.find(n.id);
  auto si = plan_.scalar_index.find(n.id);
  if (sc != plan_.scalars.end() &&
      (si == plan_.scalar_index.end() || (idx.has_multi && idx.ix == si->second))) {
    return {sc->second, false};
  }
  auto rb = plan_.row_buffers.find(n.id);
  if (rb != plan_.row_buffers.end()) {
    return {Bind(t, rb->second + "[" + LinOf(n.shape, idx) + " - " + plan_.row_base + "]"), false};
  }
  auto mat = plan_.materialized.find(n.id);
  if (mat != plan_.materialized.end()) {
    used_buffers_.insert(n.id);
    return {Bind(t, LoadExpr(t, mat->second + "[" + LinOf(n.shape, idx) + "]")), false};
  }
  auto fm = plan_.f32_muladds.find(n.id);
  if (fm != plan_.f32_muladds.end()) return EmitF32MulAdd(fm->second, idx);
  switch (n.op) {
    case OpKind::kParameter: {
      used_buffers_.insert(n.id);
      const std::string p = "p" + std::to_string(plan_.parameter_index.at(n.id));
      return {Bind(t, LoadExpr(t, p + "[" + LinOf(n.shape, idx) + "]")), false};
    }
    case OpKind::kConstant: {
      auto tab = plan_.constant_tables.find(n.id);
      if (tab == plan_.constant_tables.end()) return {ElementExpr(*n.literal, 0), true};
      return {Bind(t, LoadExpr(t, tab->second + "[" + LinOf(n.shape, idx) + "]")), false};
    }
    case OpKind::kIota: {
      const int64_t dim = attr::IotaDimension(n);
      const std::string i = "((int64_t)" + MultiOf(n.shape, idx)[dim] + ")";
      Val v = EmitConvert(DType::kS64, t, Val{i, false});
      return {Bind(t, v.expr), false};
    }
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kReverse:
      return Emit(n.operands[0], OperandIndex(n, idx));
    case OpKind::kGetTupleElement: {
      const Node& t = g_.node(n.operands[0]);  // a tuple (CheckKernelSupported)
      return Emit(t.operands[attr::Index(n)], idx);
    }
    case OpKind::kConcatenate:
      return EmitConcatenate(n, idx);
    case OpKind::kPad:
      return EmitPad(n, idx);
    case OpKind::kGather:
      return EmitGather(n, idx);
    default:
      return EmitElementwise(n, idx);
  }
}

// (x * s) + z in f32, operand orders as in the f64 form (f32_muladd.h), so a
// NaN operand propagates as there.
ExprEmitter::Val ExprEmitter::EmitF32MulAdd(const F32MulAdd& m, const Index& idx) {
  const Val x = Emit(m.x, idx), s = Emit(m.s, idx), z = Emit(m.z, idx);
  const std::string p =
      m.s_first ? "(" + s.expr + " * " + x.expr + ")" : "(" + x.expr + " * " + s.expr + ")";
  const std::string r =
      m.product_first ? "(" + p + " + " + z.expr + ")" : "(" + z.expr + " + " + p + ")";
  return {Bind(DType::kF32, r), x.is_const && s.is_const && z.is_const};
}

std::map<int64_t, std::string> ExprEmitter::IndexStarts(
    const Node& n, int64_t index_vector_dim, const std::vector<int64_t>& index_to_operand,
    const std::vector<int64_t>& window, const std::vector<std::string>& batch_ix) {
  const NodeId ind = n.operands[1];
  const int irank = g_.node(ind).shape.rank();
  const Shape& os = g_.node(n.operands[0]).shape;
  auto it = std::find(plan_.error_sites.begin(), plan_.error_sites.end(), n.id);
  const int site = static_cast<int>(it - plan_.error_sites.begin());
  used_sites_.insert(site);
  const std::string zd = "zd" + std::to_string(site);
  std::map<int64_t, std::string> starts;
  for (size_t k = 0; k < index_to_operand.size(); ++k) {
    std::vector<std::string> iix;
    size_t b = 0;
    for (int d = 0; d < irank; ++d) {
      iix.push_back(d == index_vector_dim ? IntLiteral(static_cast<int64_t>(k)) : batch_ix.at(b++));
    }
    // Any integer dtype; a u64 index above INT64_MAX turns negative: out of range.
    const std::string raw = Bind(DType::kS64, "(int64_t)" + Value(ind, Index::Multi(iix)));
    const int64_t d = index_to_operand[k];
    const int64_t limit = os.dim(static_cast<int>(d)) - window[d] + 1;  // valid: [0, limit)
    const std::string ok = NewVar();
    Line("const bool " + ok + " = " + raw + " >= 0 && " + raw + " < " + IntLiteral(limit) + ";");
    Line(zd + " |= !" + ok + ";");
    starts[d] = Bind(DType::kS64, "(" + ok + " ? " + raw + " : (int64_t)0)");
  }
  return starts;
}

// Gather (XLA's dimension numbers, as src/eval/indexing.cc): result dims not
// in offset_dims walk the indices' batch positions, offset_dims walk the
// operand's non-collapsed dims in order.
ExprEmitter::Val ExprEmitter::EmitGather(const Node& n, const Index& idx) {
  const auto& offset_dims = attr::OffsetDims(n);
  const auto& collapsed = attr::CollapsedSliceDims(n);
  const auto& slice_sizes = attr::SliceSizes(n);
  const Shape& os = g_.node(n.operands[0]).shape;
  auto has = [](const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  const std::vector<std::string> rix = MultiOf(n.shape, idx);
  std::vector<std::string> batch_ix;
  for (int d = 0; d < n.shape.rank(); ++d) {
    if (!has(offset_dims, d)) batch_ix.push_back(rix[d]);
  }
  const std::map<int64_t, std::string> starts =
      IndexStarts(n, attr::IndexVectorDim(n), attr::StartIndexMap(n),
                  std::vector<int64_t>(slice_sizes.begin(), slice_sizes.end()), batch_ix);
  std::vector<std::string> oix(os.rank());
  size_t k = 0;  // position among offset_dims
  for (int d = 0; d < os.rank(); ++d) {
    std::string off = "0";
    if (!has(collapsed, d)) off = rix[offset_dims[k++]];
    auto st = starts.find(d);
    oix[d] = st == starts.end() ? off
             : off == "0"       ? st->second
                                : "(" + st->second + " + " + off + ")";
  }
  return Emit(n.operands[0], Index::Multi(oix));
}

ExprEmitter::Val ExprEmitter::EmitConcatenate(const Node& n, const Index& idx) {
  const DType t = n.shape.dtype();
  const int64_t dim = attr::Dimension(n);
  auto rix = MultiOf(n.shape, idx);
  std::vector<NodeId> parts;
  std::vector<int64_t> offsets;
  int64_t off = 0;
  for (NodeId o : n.operands) {
    int64_t size = g_.node(o).shape.dim(static_cast<int>(dim));
    if (size == 0) continue;
    parts.push_back(o);
    offsets.push_back(off);
    off += size;
  }
  if (parts.size() == 1) {
    auto ix = rix;
    ix[dim] = Minus(rix[dim], offsets[0]);
    return Emit(parts[0], Index::Multi(ix));
  }
  const std::string v = NewVar();
  Line(ComputeType(t) + " " + v + ";");
  const std::string d = NewVar();
  Line("const int64_t " + d + " = " + rix[dim] + ";");
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k == 0) {
      Line("if (" + d + " < " + IntLiteral(offsets[1]) + ") {");
    } else if (k + 1 < parts.size()) {
      Line("} else if (" + d + " < " + IntLiteral(offsets[k + 1]) + ") {");
    } else {
      Line("} else {");
    }
    ++indent_;
    scopes_.emplace_back();
    auto ix = rix;
    ix[dim] = Minus(d, offsets[k]);
    Val pv = Emit(parts[k], Index::Multi(ix));
    Line(v + " = " + pv.expr + ";");
    scopes_.pop_back();
    --indent_;
  }
  Line("}");
  return {v, false};
}

ExprEmitter::Val ExprEmitter::EmitPad(const Node& n, const Index& idx) {
  const DType t = n.shape.dtype();
  const Shape& os = g_.node(n.operands[0]).shape;
  const auto& low = attr::Low(n);
  const auto& high = attr::High(n);
  auto interior = attr::Interior(n);
  if (interior.empty()) interior.assign(os.rank(), 0);
  auto rix = MultiOf(n.shape, idx);
  std::vector<std::string> conds, oix(os.rank());
  bool empty_operand = os.num_elements() == 0;
  for (int d = 0; d < os.rank(); ++d) {
    const int64_t step = interior[d] + 1;
    if (low[d] == 0 && high[d] == 0 && interior[d] == 0) {
      oix[d] = rix[d];
      continue;
    }
    const std::string p = NewVar();
    Line("const int64_t " + p + " = " + Minus(rix[d], low[d]) + ";");
    if (step == 1) {
      conds.push_back(p + " >= 0 && " + p + " < " + IntLiteral(os.dim(d)));
      oix[d] = p;
    } else {
      conds.push_back(p + " >= 0 && " + p + " % " + IntLiteral(step) + " == 0 && " + p + " / " +
                      IntLiteral(step) + " < " + IntLiteral(os.dim(d)));
      oix[d] = "(" + p + " / " + IntLiteral(step) + ")";
    }
  }
  Val pad = Emit(n.operands[1], Index::Scalar());
  if (empty_operand) return pad;
  if (conds.empty()) return Emit(n.operands[0], Index::Multi(oix));
  const std::string v = NewVar();
  Line(ComputeType(t) + " " + v + " = " + pad.expr + ";");
  Line("if (" + Join(conds, " && ") + ") {");
  ++indent_;
  scopes_.emplace_back();
  Val x = Emit(n.operands[0], Index::Multi(oix));
  Line(v + " = " + x.expr + ";");
  scopes_.pop_back();
  --indent_;
  Line("}");
  return {v, false};
}

ExprEmitter::Val ExprEmitter::EmitElementwise(const Node& n, const Index& idx) {
  const DType t = n.shape.dtype();
  if (n.op == OpKind::kSelect) {
    const Shape& ps = g_.node(n.operands[0]).shape;
    Val p = Emit(n.operands[0], ps.is_scalar() ? Index::Scalar() : idx);
    Val a = Emit(n.operands[1], idx);
    Val b = Emit(n.operands[2], idx);
    return {Bind(t, SelectExpr(t, p.expr, a.expr, b.expr)), p.is_const && a.is_const && b.is_const};
  }
  if (n.op == OpKind::kClamp) {
    auto at = [&](int i) {
      const Shape& s = g_.node(n.operands[i]).shape;
      return Emit(n.operands[i], s.is_scalar() ? Index::Scalar() : idx);
    };
    Val lo = at(0), x = at(1), hi = at(2);
    std::string e =
        IsFloatType(t) ? RoundExpr(t, "ember_fmin(ember_fmax(" + x.expr + ", " + lo.expr + "), " +
                                          hi.expr + ")")
                       : "ember_imin(ember_imax(" + x.expr + ", " + lo.expr + "), " + hi.expr + ")";
    return {Bind(t, e), lo.is_const && x.is_const && hi.is_const};
  }
  if (n.op == OpKind::kFma) {  // one rounding: the FMA instruction under -march=native
    Val x = Emit(n.operands[0], idx), y = Emit(n.operands[1], idx), z = Emit(n.operands[2], idx);
    std::string e = MathFn("fma", t) + "(" + x.expr + ", " + y.expr + ", " + z.expr + ")";
    return {Bind(t, e), x.is_const && y.is_const && z.is_const};
  }
  if (n.op == OpKind::kConvert) {
    const DType from = g_.node(n.operands[0]).shape.dtype();
    Val x = Emit(n.operands[0], idx);
    Val r = EmitConvert(from, t, x);
    return {Bind(t, r.expr), x.is_const};
  }
  if (IsUnary(n.op)) {
    Val x = Emit(n.operands[0], idx);
    if (x.is_const && CallsLibm(n.op)) x.expr = "ember_opaque(" + x.expr + ")";
    Val r = EmitUnary(n, x);
    return {Bind(t, r.expr), x.is_const};
  }
  Val a = Emit(n.operands[0], idx);
  Val b = Emit(n.operands[1], idx);
  if (CallsLibm(n.op) && IsFloatType(t)) {
    if (a.is_const) a.expr = "ember_opaque(" + a.expr + ")";
    if (b.is_const) b.expr = "ember_opaque(" + b.expr + ")";
  }
  Val r = EmitBinary(n, a, b);
  return {Bind(n.op == OpKind::kCompare ? DType::kPred : t, r.expr), a.is_const && b.is_const};
}

ExprEmitter::Val ExprEmitter::EmitConvert(DType from, DType to, const Val& x) {
  const std::string v = x.expr;
  const std::string ct = ComputeType(to);
  std::string e;
  if (to == DType::kPred) {
    e = "(uint8_t)(" + v + " != 0)";
  } else if (IsFloat(from) && IsInteger(to)) {
    if (to == DType::kS32) {
      e = "ember_f2s32((double)" + v + ")";
    } else if (to == DType::kU64) {
      e = "ember_f2u64((double)" + v + ")";
    } else if (to == DType::kS64) {
      e = "ember_f2s64((double)" + v + ")";
    } else if (DTypeSize(to) <= 2) {  // s8/s16/u8/u16: through int32, as torch
      e = "(" + ct + ")(uint32_t)ember_f2s32((double)" + v + ")";
    } else {
      e = "(" + ct + ")(uint64_t)ember_f2s64((double)" + v + ")";
    }
  } else if (to == DType::kF16 || to == DType::kBF16) {
    e = RoundExpr(to, "(float)" + v);
  } else {
    e = "(" + ct + ")" + v;
  }
  return {e, x.is_const};
}

ExprEmitter::Val ExprEmitter::EmitUnary(const Node& n, const Val& xv) {
  const DType t = n.shape.dtype();
  const bool fl = IsFloatType(t);
  const std::string x = xv.expr;
  const std::string ct = ComputeType(t);
  std::string e;
  switch (n.op) {
    case OpKind::kNegate:
      e = fl ? "-" + x : "ember_neg(" + x + ")";
      break;
    case OpKind::kAbs:
      e = fl ? MathFn("fabs", t) + "(" + x + ")" : "ember_iabs(" + x + ")";
      break;
    case OpKind::kSign:
      e = fl ? "ember_fsign(" + x + ")" : "ember_isign(" + x + ")";
      break;
    case OpKind::kFloor:
      e = fl ? MathFn("floor", t) + "(" + x + ")" : x;
      break;
    case OpKind::kCeil:
      e = fl ? MathFn("ceil", t) + "(" + x + ")" : x;
      break;
    case OpKind::kRoundNearestEven:
      e = fl ? MathFn("nearbyint", t) + "(" + x + ")" : x;
      break;
    case OpKind::kNot:
      e = t == DType::kPred ? "(uint8_t)(" + x + " == 0)" : "(" + ct + ")(~" + x + ")";
      break;
    case OpKind::kExp:
      e = MathFn("exp", t) + "(" + x + ")";
      break;
    case OpKind::kLog:
      e = MathFn("log", t) + "(" + x + ")";
      break;
    case OpKind::kLog1p:
      e = MathFn("log1p", t) + "(" + x + ")";
      break;
    case OpKind::kExpm1:
      e = MathFn("expm1", t) + "(" + x + ")";
      break;
    case OpKind::kSqrt:
      e = MathFn("sqrt", t) + "(" + x + ")";
      break;
    case OpKind::kRsqrt:
      e = "((" + ct + ")1 / " + MathFn("sqrt", t) + "(" + x + "))";
      break;
    case OpKind::kTanh:
      e = MathFn("tanh", t) + "(" + x + ")";
      break;
    case OpKind::kLogistic:
      e = "ember_logistic(" + x + ")";
      break;
    case OpKind::kSin:
      e = MathFn("sin", t) + "(" + x + ")";
      break;
    case OpKind::kCos:
      e = MathFn("cos", t) + "(" + x + ")";
      break;
    case OpKind::kErf:
      e = MathFn("erf", t) + "(" + x + ")";
      break;
    default:
      e = x;
      break;  // rejected by CheckKernelSupported
  }
  return {fl ? RoundExpr(t, e) : e, xv.is_const};
}

ExprEmitter::Val ExprEmitter::EmitBinary(const Node& n, const Val& av, const Val& bv) {
  const DType t = g_.node(n.operands[0]).shape.dtype();
  const bool fl = IsFloatType(t);
  const std::string a = av.expr, b = bv.expr;
  const std::string ct = ComputeType(t);
  auto call = [&](const std::string& f) { return f + "(" + a + ", " + b + ")"; };
  // Integer divide/remainder: flag a zero divisor, divide by 1 instead.
  auto guarded = [&](const char* f) {
    auto it = std::find(plan_.error_sites.begin(), plan_.error_sites.end(), n.id);
    const int site = static_cast<int>(it - plan_.error_sites.begin());
    used_sites_.insert(site);
    const std::string zd = "zd" + std::to_string(site);
    Line(zd + " |= (" + b + " == 0);");
    return std::string(f) + "(" + a + ", (" + b + " == 0 ? (" + ct + ")1 : " + b + "))";
  };
  std::string e;
  switch (n.op) {
    case OpKind::kAdd:
      e = fl ? "(" + a + " + " + b + ")" : call("ember_add");
      break;
    case OpKind::kSubtract:
      e = fl ? "(" + a + " - " + b + ")" : call("ember_sub");
      break;
    case OpKind::kMultiply:
      e = fl ? "(" + a + " * " + b + ")" : call("ember_mul");
      break;
    case OpKind::kDivide:
      e = fl ? "(" + a + " / " + b + ")" : guarded("ember_idiv");
      break;
    case OpKind::kRemainder:
      e = fl ? call("ember_frem") : guarded("ember_irem");
      break;
    case OpKind::kPower:  // ember_pow(f): vector_math.h
      e = fl ? call(t == DType::kF64 ? "ember_pow" : "ember_powf") : call("ember_ipow");
      break;
    case OpKind::kMaximum:
      e = fl ? call("ember_fmax") : call("ember_imax");
      break;
    case OpKind::kMinimum:
      e = fl ? call("ember_fmin") : call("ember_imin");
      break;
    case OpKind::kAtan2:
      e = call(MathFn("atan2", t));
      break;
    case OpKind::kAnd:
      e = "(" + ct + ")(" + a + " & " + b + ")";
      break;
    case OpKind::kOr:
      e = "(" + ct + ")(" + a + " | " + b + ")";
      break;
    case OpKind::kXor:
      e = "(" + ct + ")(" + a + " ^ " + b + ")";
      break;
    case OpKind::kShiftLeft:
      e = call("ember_shl");
      break;
    case OpKind::kShiftRightLogical:
      e = call("ember_shrl");
      break;
    case OpKind::kShiftRightArithmetic:
      e = call("ember_shra");
      break;
    case OpKind::kCompare: {
      static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">="};
      auto dir = attr::Direction.Find(n.attrs);
      const char* op = dir ? kOps[static_cast<int>(*dir)] : "==";
      return {"(uint8_t)(" + a + " " + op + " " + b + ")", av.is_const && bv.is_const};
    }
    default:
      e = a;
      break;  // rejected by CheckKernelSupported
  }
  return {fl ? RoundExpr(t, e) : e, av.is_const && bv.is_const};
}

}  // namespace ember::codegen
