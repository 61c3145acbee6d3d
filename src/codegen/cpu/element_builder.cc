// Per-element value construction (element_builder.h). Each op's value is
// the loop IR's elementwise op of the same name (printed through the
// printer's table, which mirrors the interpreter's formulas); data movement
// composes IndexExprs.
#include "codegen/cpu/element_builder.h"

#include <algorithm>

#include "codegen/cpu/c_types.h"
#include "ember/ir/attributes.h"

namespace ember::codegen {
namespace {

// Index expressions larger than this (IndexExpr::size) are bound to a
// variable before they are composed further: permutations that are not
// affine (a transpose of a reshape that splits a dim) would otherwise
// double the expression at every level of a chain of them.
constexpr int kMaxIndexSize = 24;

}  // namespace

ElemIndex ElemIndex::Multi(std::vector<IndexExpr> ix) {
  ElemIndex e;
  e.has_multi = true;
  e.multi = std::move(ix);
  return e;
}

ElemIndex ElemIndex::Linear(IndexExpr lin) {
  ElemIndex e;
  e.has_lin = true;
  e.lin = std::move(lin);
  return e;
}

ElemIndex ElemIndex::Scalar() {
  ElemIndex e;
  e.has_multi = true;
  e.has_lin = true;
  return e;
}

IndexExpr LinOf(const Shape& s, const ElemIndex& idx) {
  if (idx.has_lin) return idx.lin;
  return Linearize(idx.multi, s.dims());
}

std::vector<IndexExpr> MultiOf(const Shape& s, const ElemIndex& idx) {
  if (idx.has_multi) return idx.multi;
  return Delinearize(idx.lin, s.dims());
}

int KernelContext::Site(NodeId id) const {
  auto it = std::find(error_sites.begin(), error_sites.end(), id);
  return static_cast<int>(it - error_sites.begin());
}

struct ElementBuilder::Frame {
  NodeId id = kInvalidNode;
  ElemIndex idx;
  std::string key;
  int stage = 0;
  std::vector<LValue> vals;  // values of the operands asked for so far
  // concatenate / pad / gather
  LValue result;
  std::vector<IndexExpr> ix;
  std::vector<NodeId> parts;
  std::vector<int64_t> offsets;
  IndexExpr d;
  std::vector<LValue> conds;
  std::vector<std::pair<int, std::pair<int64_t, int64_t>>> refine;  // dim, range inside the branch
  std::vector<IndexExpr> batch_ix;
  std::map<int64_t, IndexExpr> starts;
};

struct ElementBuilder::Step {
  bool done = false;
  LValue value;
  NodeId child = kInvalidNode;
  ElemIndex child_idx;

  static Step Done(LValue v) {
    Step s;
    s.done = true;
    s.value = std::move(v);
    return s;
  }
  static Step Ask(NodeId id, ElemIndex idx) {
    Step s;
    s.child = id;
    s.child_idx = std::move(idx);
    return s;
  }
};

ElementBuilder::ElementBuilder(const KernelContext& ctx, LBuilder* b)
    : ctx_(ctx), g_(*ctx.graph), b_(b) {
  scopes_.emplace_back();
}

void ElementBuilder::NoteDigits(const IndexExpr& e) {
  if (!e.HasDivMod()) return;
  used_digits_ |= digit_var_.empty() || !e.Coefficient(digit_var_).has_value();
}

IndexExpr ElementBuilder::Lin(const Shape& s, const ElemIndex& idx) {
  IndexExpr e = LinOf(s, idx);
  NoteDigits(e);
  return e;
}

std::vector<IndexExpr> ElementBuilder::Multi(const Shape& s, const ElemIndex& idx) {
  std::vector<IndexExpr> m = MultiOf(s, idx);
  for (const IndexExpr& e : m) NoteDigits(e);
  return m;
}

std::string ValueKey(const Graph& g, NodeId id, const ElemIndex& idx) {
  return std::to_string(id) + "|" + LinOf(g.node(id).shape, idx).key();
}

std::string ElementBuilder::Key(NodeId id, const ElemIndex& idx) const {
  return ValueKey(g_, id, idx);
}

const LValue* ElementBuilder::Lookup(const std::string& key) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(key);
    if (f != it->end()) return &f->second;
  }
  return nullptr;
}

// `const int64_t v = e;` as a variable known to lie in [lo, hi] (the caller's
// knowledge: inside a branch that tested it).
IndexExpr ElementBuilder::LetRanged(const IndexExpr& e, int64_t lo, int64_t hi) {
  if (e.IsConstant()) return e;
  const std::string name = b_->NewName();
  b_->LetNamed(name, DType::kS64, LIndex(e));
  return IndexExpr::Variable(name, lo, hi);
}

ElemIndex ElementBuilder::Bound(ElemIndex idx) {
  auto bind = [&](IndexExpr* e) {
    if (e->size() <= kMaxIndexSize) return;
    NoteDigits(*e);
    *e = b_->LetIndex(b_->NewName(), *e);
  };
  if (idx.has_lin) bind(&idx.lin);
  for (IndexExpr& e : idx.multi) bind(&e);
  return idx;
}

LValue ElementBuilder::Value(NodeId root, const ElemIndex& idx) {
  std::vector<Frame> stack(1);
  stack[0].id = root;
  stack[0].idx = idx;
  stack[0].key = Key(root, idx);
  LValue child;
  for (;;) {
    Step s = Advance(stack.back(), std::move(child));
    child = nullptr;
    if (!s.done) {
      Frame f;
      f.id = s.child;
      f.idx = Bound(std::move(s.child_idx));
      f.key = Key(f.id, f.idx);
      stack.push_back(std::move(f));
      continue;
    }
    scopes_.back()[stack.back().key] = s.value;
    stack.pop_back();
    if (stack.empty()) return s.value;
    child = std::move(s.value);
  }
}

ElemIndex ElementBuilder::OperandIndex(const Node& n, const ElemIndex& idx) {
  const Shape& os = g_.node(n.operands[0]).shape;
  const Shape& rs = n.shape;
  switch (n.op) {
    case OpKind::kBroadcastInDim: {
      const auto& map = attr::Dimensions(n);
      if (os.rank() == 0) return ElemIndex::Scalar();
      bool identity = os.dims() == rs.dims();
      for (size_t i = 0; i < map.size(); ++i) identity &= map[i] == static_cast<int64_t>(i);
      if (identity) return idx;
      const auto rix = Multi(rs, idx);
      std::vector<IndexExpr> ix(os.rank());
      for (int i = 0; i < os.rank(); ++i) {
        if (os.dim(i) != 1) ix[i] = rix[map[i]];
      }
      return ElemIndex::Multi(std::move(ix));
    }
    case OpKind::kReshape: {
      // Same sequence of non-1 dims: the multi-index maps over directly.
      if (idx.has_multi) {
        std::vector<int> rnz, onz;
        for (int d = 0; d < rs.rank(); ++d) {
          if (rs.dim(d) != 1) rnz.push_back(d);
        }
        for (int d = 0; d < os.rank(); ++d) {
          if (os.dim(d) != 1) onz.push_back(d);
        }
        bool same = rnz.size() == onz.size();
        for (size_t k = 0; same && k < rnz.size(); ++k) same = rs.dim(rnz[k]) == os.dim(onz[k]);
        if (same) {
          std::vector<IndexExpr> ix(os.rank());
          for (size_t k = 0; k < rnz.size(); ++k) ix[onz[k]] = idx.multi[rnz[k]];
          ElemIndex r = ElemIndex::Multi(std::move(ix));
          r.has_lin = idx.has_lin;
          r.lin = idx.lin;
          return r;
        }
      }
      return ElemIndex::Linear(LinOf(rs, idx));
    }
    case OpKind::kTranspose: {
      const auto& perm = attr::Dimensions(n);
      const auto rix = Multi(rs, idx);
      std::vector<IndexExpr> ix(os.rank());
      for (size_t i = 0; i < perm.size(); ++i) ix[perm[i]] = rix[i];
      return ElemIndex::Multi(std::move(ix));
    }
    case OpKind::kSlice: {
      const auto& start = attr::Start(n);
      auto stride = attr::Stride(n);
      if (stride.empty()) stride.assign(os.rank(), 1);
      if (os.dims() == rs.dims()) return idx;  // full slice
      const auto rix = Multi(rs, idx);
      std::vector<IndexExpr> ix(os.rank());
      for (int d = 0; d < os.rank(); ++d) ix[d] = rix[d] * stride[d] + start[d];
      return ElemIndex::Multi(std::move(ix));
    }
    case OpKind::kReverse: {
      std::vector<bool> rev(os.rank(), false);
      for (int64_t d : attr::Dimensions(n)) rev[d] = !rev[d];
      const auto rix = Multi(rs, idx);
      std::vector<IndexExpr> ix(os.rank());
      for (int d = 0; d < os.rank(); ++d) {
        ix[d] = rev[d] ? IndexExpr::Constant(os.dim(d) - 1) - rix[d] : rix[d];
      }
      return ElemIndex::Multi(std::move(ix));
    }
    default:
      return idx;  // elementwise
  }
}

ElementBuilder::Step ElementBuilder::Advance(Frame& f, LValue child) {
  if (child) f.vals.push_back(std::move(child));
  const Node& n = g_.node(f.id);
  if (f.stage == 0) {
    if (const LValue* v = Lookup(f.key)) return Step::Done(*v);
    auto sc = ctx_.scalars.find(f.key);
    if (sc != ctx_.scalars.end()) return Step::Done(sc->second);
    const DType t = n.shape.dtype();
    auto rb = ctx_.row_buffers.find(n.id);
    if (rb != ctx_.row_buffers.end()) {
      return Step::Done(b_->Let(t, LArray(rb->second, Lin(n.shape, f.idx) - ctx_.row_base, t)));
    }
    auto mat = ctx_.materialized.find(n.id);
    if (mat != ctx_.materialized.end()) {
      return Step::Done(b_->Let(t, LLoad(mat->second, Lin(n.shape, f.idx), t)));
    }
  }
  auto fm = ctx_.f32_muladds.find(n.id);
  if (fm != ctx_.f32_muladds.end()) {
    // (x * s) + z in f32, operand orders as in the f64 form (f32_muladd.h).
    const F32MulAdd& m = fm->second;
    const NodeId ask[] = {m.x, m.s, m.z};
    if (f.stage < 3) return Step::Ask(ask[f.stage++], f.idx);
    const LValue& x = f.vals[0];
    const LValue& s = f.vals[1];
    const LValue& z = f.vals[2];
    LValue p = LOpExpr(OpKind::kMultiply, DType::kF32, DType::kF32,
                       m.s_first ? std::vector{s, x} : std::vector{x, s});
    return Step::Done(
        b_->Let(DType::kF32, LOpExpr(OpKind::kAdd, DType::kF32, DType::kF32,
                                     m.product_first ? std::vector{p, z} : std::vector{z, p})));
  }
  switch (n.op) {
    case OpKind::kParameter:
    case OpKind::kConstant:
    case OpKind::kIota:
      return Leaf(f);
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kReverse:
      if (f.stage++ == 0) return Step::Ask(n.operands[0], OperandIndex(n, f.idx));
      return Step::Done(f.vals[0]);
    case OpKind::kGetTupleElement:
      if (f.stage++ == 0) {
        const Node& tuple = g_.node(n.operands[0]);  // a tuple (CheckKernelSupported)
        return Step::Ask(tuple.operands[attr::Index(n)], f.idx);
      }
      return Step::Done(f.vals[0]);
    case OpKind::kConcatenate:
      return Concatenate(f);
    case OpKind::kPad:
      return Pad(f);
    case OpKind::kGather:
      return Gather(f);
    default:
      return Elementwise(f);
  }
}

ElementBuilder::Step ElementBuilder::Leaf(Frame& f) {
  const Node& n = g_.node(f.id);
  const DType t = n.shape.dtype();
  switch (n.op) {
    case OpKind::kParameter:
      return Step::Done(b_->Let(t, LLoad(ctx_.parameter_buffer.at(n.id), Lin(n.shape, f.idx), t)));
    case OpKind::kConstant: {
      auto tab = ctx_.constant_tables.find(n.id);
      if (tab == ctx_.constant_tables.end()) return Step::Done(LLit(ElementExpr(*n.literal, 0), t));
      return Step::Done(b_->Let(t, LLoad(tab->second, Lin(n.shape, f.idx), t)));
    }
    default: {  // iota
      const int64_t dim = attr::IotaDimension(n);
      const IndexExpr i = Multi(n.shape, f.idx)[dim];
      NoteDigits(i);
      return Step::Done(b_->Let(t, LConvert(DType::kS64, t, LIndex(i))));
    }
  }
}

ElementBuilder::Step ElementBuilder::Elementwise(Frame& f) {
  const Node& n = g_.node(f.id);
  const DType t = n.shape.dtype();
  const int arity = static_cast<int>(n.operands.size());
  if (f.stage < arity) {
    const int i = f.stage++;
    // select's predicate and clamp's bounds may be scalars.
    const bool scalar_ok = n.op == OpKind::kClamp || (n.op == OpKind::kSelect && i == 0);
    const Shape& s = g_.node(n.operands[i]).shape;
    return Step::Ask(n.operands[i], scalar_ok && s.is_scalar() ? ElemIndex::Scalar() : f.idx);
  }
  std::vector<LValue>& v = f.vals;
  if (n.op == OpKind::kSelect) return Step::Done(b_->Let(t, LSelect(v[0], v[1], v[2], t)));
  const DType from = g_.node(n.operands[0]).shape.dtype();
  if (n.op == OpKind::kConvert) return Step::Done(b_->Let(t, LConvert(from, t, v[0])));
  if ((n.op == OpKind::kDivide || n.op == OpKind::kRemainder) && !IsFloat(from)) {
    // Integer divide/remainder: flag a zero divisor, divide by 1 instead.
    const int site = ctx_.Site(n.id);
    used_sites_.insert(site);
    const LValue zero = LCmpExpr(LCmp::kEq, v[1], LLit("0", from));
    b_->Assign(LVar("zd" + std::to_string(site), DType::kS32), zero, /*or_assign=*/true);
    v[1] = LSelect(zero, LLit("(" + ComputeType(from) + ")1", from), v[1], from);
  }
  ComparisonKind dir = ComparisonKind::kEq;
  if (n.op == OpKind::kCompare) {
    if (auto d = attr::Direction.Find(n.attrs)) dir = *d;
  }
  const DType operand = n.op == OpKind::kClamp ? g_.node(n.operands[1]).shape.dtype() : from;
  return Step::Done(
      b_->Let(n.op == OpKind::kCompare ? DType::kPred : t, LOpExpr(n.op, t, operand, v, dir)));
}

ElementBuilder::Step ElementBuilder::Concatenate(Frame& f) {
  const Node& n = g_.node(f.id);
  const DType t = n.shape.dtype();
  const int64_t dim = attr::Dimension(n);
  if (f.stage == 0) {
    f.ix = Multi(n.shape, f.idx);
    int64_t off = 0;
    for (NodeId o : n.operands) {
      const int64_t size = g_.node(o).shape.dim(static_cast<int>(dim));
      if (size == 0) continue;
      f.parts.push_back(o);
      f.offsets.push_back(off);
      off += size;
    }
    f.offsets.push_back(off);
    if (f.parts.size() == 1) {
      f.stage = -1;
      return Step::Ask(f.parts[0], ElemIndex::Multi(f.ix));
    }
    f.result = b_->Decl(b_->NewName(), t);
    NoteDigits(f.ix[dim]);
    f.d = b_->LetIndex(b_->NewName(), f.ix[dim]);
  }
  if (f.stage == -1) return Step::Done(f.vals[0]);
  const int k = f.stage;  // parts [0, k) are done
  if (k > 0) {
    b_->Assign(f.result, f.vals.back());
    scopes_.pop_back();
  }
  const int nparts = static_cast<int>(f.parts.size());
  if (k == nparts) {
    for (int i = 0; i + 1 < nparts; ++i) b_->Close();
    return Step::Done(f.result);
  }
  if (k == 0) {
    b_->If(LCmpExpr(LCmp::kLt, LIndex(f.d), LInt(f.offsets[1])));
  } else if (k + 1 < nparts) {
    b_->Else();
    b_->If(LCmpExpr(LCmp::kLt, LIndex(f.d), LInt(f.offsets[k + 1])));
  } else {
    b_->Else();
  }
  scopes_.emplace_back();
  std::vector<IndexExpr> ix = f.ix;
  ix[dim] = f.ix[dim] - f.offsets[k];
  ++f.stage;
  return Step::Ask(f.parts[k], ElemIndex::Multi(std::move(ix)));
}

ElementBuilder::Step ElementBuilder::Pad(Frame& f) {
  const Node& n = g_.node(f.id);
  const DType t = n.shape.dtype();
  const Shape& os = g_.node(n.operands[0]).shape;
  switch (f.stage++) {
    case 0:
      return Step::Ask(n.operands[1], ElemIndex::Scalar());
    case 1: {
      const LValue pad = f.vals[0];
      if (os.num_elements() == 0) return Step::Done(pad);
      const auto& low = attr::Low(n);
      const auto& high = attr::High(n);
      auto interior = attr::Interior(n);
      if (interior.empty()) interior.assign(os.rank(), 0);
      const auto rix = Multi(n.shape, f.idx);
      f.ix.assign(os.rank(), IndexExpr());
      LValue cond;
      auto both = [&](LValue c) { cond = cond ? LAnd(cond, c) : c; };
      for (int d = 0; d < os.rank(); ++d) {
        const int64_t step = interior[d] + 1;
        if (low[d] == 0 && high[d] == 0 && interior[d] == 0) {
          f.ix[d] = rix[d];
          continue;
        }
        const IndexExpr p = rix[d] - low[d];
        NoteDigits(p);
        const IndexRange r = p.Range();
        // Tests the index range makes redundant are left out.
        if (r.lo < 0) both(LCmpExpr(LCmp::kGe, LIndex(p), LInt(0)));
        if (step == 1) {
          if (r.hi >= os.dim(d)) both(LCmpExpr(LCmp::kLt, LIndex(p), LInt(os.dim(d))));
          f.ix[d] = p;
        } else {
          both(LCmpExpr(LCmp::kEq, LIndex(p.Mod(step)), LInt(0)));
          if (r.hi >= step * os.dim(d)) {
            both(LCmpExpr(LCmp::kLt, LIndex(p.FloorDiv(step)), LInt(os.dim(d))));
          }
          f.ix[d] = p.FloorDiv(step);
        }
        f.refine.push_back({d, {0, os.dim(d) - 1}});
      }
      if (!cond) {
        f.stage = 3;
        return Step::Ask(n.operands[0], ElemIndex::Multi(f.ix));
      }
      f.result = b_->Decl(b_->NewName(), t, pad);
      b_->If(cond);
      scopes_.emplace_back();
      std::vector<IndexExpr> ix = f.ix;
      for (const auto& [d, r] : f.refine) ix[d] = LetRanged(ix[d], r.first, r.second);
      return Step::Ask(n.operands[0], ElemIndex::Multi(std::move(ix)));
    }
    case 2:
      b_->Assign(f.result, f.vals[1]);
      scopes_.pop_back();
      b_->Close();
      return Step::Done(f.result);
    default:  // no test needed
      return Step::Done(f.vals[1]);
  }
}

std::map<int64_t, IndexExpr> ElementBuilder::IndexStarts(
    const Node& n, int64_t index_vector_dim, const std::vector<int64_t>& index_to_operand,
    const std::vector<int64_t>& window, const std::vector<IndexExpr>& batch_ix) {
  const NodeId ind = n.operands[1];
  const int irank = g_.node(ind).shape.rank();
  const DType it = g_.node(ind).shape.dtype();
  const Shape& os = g_.node(n.operands[0]).shape;
  const int site = ctx_.Site(n.id);
  used_sites_.insert(site);
  const LValue zd = LVar("zd" + std::to_string(site), DType::kS32);
  std::map<int64_t, IndexExpr> starts;
  for (size_t k = 0; k < index_to_operand.size(); ++k) {
    std::vector<IndexExpr> iix;
    size_t b = 0;
    for (int d = 0; d < irank; ++d) {
      iix.push_back(d == index_vector_dim ? IndexExpr::Constant(static_cast<int64_t>(k))
                                          : batch_ix.at(b++));
    }
    // Any integer dtype; a u64 index above INT64_MAX turns negative: out of range.
    const LValue raw =
        b_->Let(DType::kS64, LConvert(it, DType::kS64, Value(ind, ElemIndex::Multi(iix))));
    const int64_t d = index_to_operand[k];
    const int64_t limit = os.dim(static_cast<int>(d)) - window[d] + 1;  // valid: [0, limit)
    const LValue ok = b_->Let(DType::kPred, LAnd(LCmpExpr(LCmp::kGe, raw, LInt(0)),
                                                 LCmpExpr(LCmp::kLt, raw, LInt(limit))));
    b_->Assign(zd, LNot(ok), /*or_assign=*/true);
    const std::string name = b_->NewName();
    b_->LetNamed(name, DType::kS64, LSelect(ok, raw, LInt(0), DType::kS64));
    starts[d] = IndexExpr::Variable(name, 0, std::max<int64_t>(0, limit - 1));
  }
  return starts;
}

// Gather (XLA's dimension numbers, as src/eval/indexing.cc): result dims not
// in offset_dims walk the indices' batch positions, offset_dims walk the
// operand's non-collapsed dims in order.
ElementBuilder::Step ElementBuilder::Gather(Frame& f) {
  const Node& n = g_.node(f.id);
  if (f.stage++ > 0) return Step::Done(f.vals[0]);
  const auto& offset_dims = attr::OffsetDims(n);
  const auto& collapsed = attr::CollapsedSliceDims(n);
  const auto& slice_sizes = attr::SliceSizes(n);
  const Shape& os = g_.node(n.operands[0]).shape;
  auto has = [](const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  const std::vector<IndexExpr> rix = Multi(n.shape, f.idx);
  std::vector<IndexExpr> batch_ix;
  for (int d = 0; d < n.shape.rank(); ++d) {
    if (!has(offset_dims, d)) batch_ix.push_back(rix[d]);
  }
  const std::map<int64_t, IndexExpr> starts =
      IndexStarts(n, attr::IndexVectorDim(n), attr::StartIndexMap(n),
                  std::vector<int64_t>(slice_sizes.begin(), slice_sizes.end()), batch_ix);
  std::vector<IndexExpr> oix(os.rank());
  size_t k = 0;  // position among offset_dims
  for (int d = 0; d < os.rank(); ++d) {
    IndexExpr off;
    if (!has(collapsed, d)) off = rix[offset_dims[k++]];
    auto st = starts.find(d);
    oix[d] = st == starts.end() ? off : st->second + off;
  }
  return Step::Ask(n.operands[0], ElemIndex::Multi(std::move(oix)));
}

}  // namespace ember::codegen
