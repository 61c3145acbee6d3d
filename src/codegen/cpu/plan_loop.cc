// Elementwise phases (kernel_planner.h): one loop computes the phase's output and
// its siblings, the other outputs of its dims (each element's values memoized across
// them, so a value two outputs read is computed once): a flat simd loop over the elements
// when every index it reads is affine in the element number or the rows would be
// shorter than kMinRowLength (the digits of the element number are then
// computed per element), else a loop
// over rows (the multi-index's outer part is the row number's digits,
// loop-invariant) with a simd loop along the row and the row-broadcast
// operands hoisted before it. A row is the innermost dim, or the longest
// divisor of it (RowLength) along which every index is affine: a transpose
// that keeps a run of the innermost dim contiguous, as an attention head
// merge ([B,H,T,hd] -> [B,T,H*hd]) does, reads each run with unit stride. When the phase evaluates
// f32 multiply-adds with a loop-invariant factor (f32_muladd.h), the loop is built twice: a copy
// computing them in f32, run when every such factor is
// +-1 (checked once per call from the element at index 0, the same at every
// index), and the loop as written otherwise.
#include <algorithm>
#include <set>

#include "codegen/cpu/kernel_planner.h"
#include "ember/ir/attributes.h"

namespace ember::codegen {

namespace {
// Outputs one elementwise loop computes at most (OutputLoops): each is a stream of
// stores, and the loop's values live in vector registers across them.
constexpr int kMaxLoopOutputs = 8;
}  // namespace

bool OneLoopShapes(const Shape& a, const Shape& b) {
  if (a.is_tuple() || b.is_tuple()) return false;
  if (a.dims() == b.dims()) return true;
  return a.rank() > 0 && b.rank() > 0 && a.num_elements() == b.num_elements() &&
         a.dim(a.rank() - 1) == b.dim(b.rank() - 1);
}

std::vector<int> OutputLoops(const Graph& g) {
  // Bit 1: the value reads a sine, bit 2: a cosine.
  std::vector<int> trig(static_cast<size_t>(g.num_nodes()), 0);
  for (const Node& x : g.nodes()) {
    int m = x.op == OpKind::kSin ? 1 : x.op == OpKind::kCos ? 2 : 0;
    for (NodeId o : x.operands) m |= trig[o];
    trig[x.id] = m;
  }
  struct Loop {
    Shape shape;  // its first output's
    int outputs = 0;
    int trig = 0;
  };
  std::vector<Loop> loops;
  std::vector<int> of;
  for (NodeId o : g.outputs()) {
    const Node& n = g.node(o);
    if (Materialized(n.op) || n.shape.is_tuple() || n.shape.num_elements() == 0) {
      of.push_back(-1);
      continue;
    }
    int id = -1;
    for (size_t l = 0; l < loops.size() && id < 0; ++l) {
      if (OneLoopShapes(loops[l].shape, n.shape) && loops[l].outputs < kMaxLoopOutputs &&
          (loops[l].trig | trig[o]) != 3) {
        id = static_cast<int>(l);
      }
    }
    if (id < 0) {
      id = static_cast<int>(loops.size());
      loops.push_back({n.shape, 0, 0});
    }
    loops[id].outputs++;
    loops[id].trig |= trig[o];
    of.push_back(id);
  }
  return of;
}

std::vector<NodeId> KernelPlanner::LoopRoots(const Phase& ph) {
  std::vector<NodeId> roots = {ph.node};
  roots.insert(roots.end(), ph.siblings.begin(), ph.siblings.end());
  return roots;
}

void KernelPlanner::LoopPhase(Phase* ph, LFunction* f) {
  const Node& n = g_.node(ph->node);
  // The flat loop, tried on a detached block: kept unless an index would
  // need a division of the element number; else rows (RowLength).
  int64_t row_len = 0;
  if (n.shape.rank() > 1) {
    bool digits = false;
    TrialLoopNest(*ph, f, 0, &digits);
    // Rows shorter than kMinRowLength spend more on the row loop's bookkeeping (its
    // bounds, a vector loop of one or two iterations) than the flat loop spends on the
    // digits of the element number: a max-pool index kernel over [64,32,4,4] ran 3.4x
    // faster flat.
    if (digits && n.shape.dim(n.shape.rank() - 1) >= kMinRowLength) row_len = RowLength(*ph, f);
  }
  const int64_t tile = ColumnTile(*ph, row_len);
  LBuilder b(f, &var_counter_);
  bool unused;
  const std::vector<F32MulAdd> mas = FindF32MulAdds(g_, LoopRoots(*ph));
  if (mas.empty()) {
    LoopNest(*ph, &b, row_len, tile, &unused);
    return;
  }
  b.Comment("f32 multiply-adds with factors of +-1 in f32 (f32_muladd.h)");
  ElementBuilder ge(ctx_, &b);
  LValue cond;
  for (const F32MulAdd& m : mas) {
    const LValue v = ge.Value(m.s, ElemIndex::Linear(IndexExpr()));
    const LValue c = LOr(LCmpExpr(LCmp::kEq, v, LLit("1.0f", DType::kF32)),
                         LCmpExpr(LCmp::kEq, v, LLit("-1.0f", DType::kF32)));
    cond = cond ? LAnd(cond, c) : c;
  }
  UseSites(ge);
  b.If(cond);
  for (const F32MulAdd& m : mas) ctx_.f32_muladds[m.root] = m;
  LoopNest(*ph, &b, row_len, tile, &unused);
  ctx_.f32_muladds.clear();
  b.Else();
  LoopNest(*ph, &b, row_len, tile, &unused);
  b.Close();
}

void KernelPlanner::TrialLoopNest(const Phase& ph, LFunction* f, int64_t row_len, bool* digits) {
  int vc = var_counter_;
  LBuilder trial(f, &vc, f->NewBlock());
  const std::set<int> sites = phase_sites_;
  LoopNest(ph, &trial, row_len, 0, digits);
  phase_sites_ = sites;
}

int64_t KernelPlanner::RowLength(const Phase& ph, LFunction* f) {
  const Shape& s = g_.node(ph.node).shape;
  const int64_t inner = s.dim(s.rank() - 1);
  std::vector<int64_t> lens = {inner};
  for (int64_t l = inner / 2; l >= kMinRowLength && lens.size() < kMaxRowLengthTrials; --l) {
    if (inner % l == 0) lens.push_back(l);
  }
  for (int64_t l : lens) {
    bool digits = false;
    TrialLoopNest(ph, f, l, &digits);
    if (!digits) return l;
  }
  return inner;
}

void KernelPlanner::StoreLoopRoots(const Phase& ph, ElementBuilder* e, LBuilder* b,
                                   const ElemIndex& idx, const IndexExpr& lin) {
  const std::vector<NodeId> roots = LoopRoots(ph);
  const std::vector<int64_t>& dims = g_.node(ph.node).shape.dims();
  std::vector<LValue> vals;
  for (NodeId r : roots)
    vals.push_back(e->Value(r, g_.node(r).shape.dims() == dims ? idx : ElemIndex::Linear(lin)));
  for (size_t k = 0; k < roots.size(); ++k)
    b->Store(k == 0 ? ph.dest : ph.sibling_dests[k - 1], lin, g_.node(roots[k]).shape.dtype(),
             vals[k]);
}

void KernelPlanner::LoopNest(const Phase& ph, LBuilder* b, int64_t row_len, int64_t tile,
                             bool* used_digits) {
  const Node& n = g_.node(ph.node);
  const int64_t count = n.shape.num_elements();
  LFunction* f = b->function();
  if (row_len == 0) {
    const IndexExpr i = b->For("i", LVar("begin", DType::kS64), LVar("end", DType::kS64), 0,
                               count - 1, 1, /*simd=*/true);
    const int loop = b->current();
    ElementBuilder e(ctx_, b);
    StoreLoopRoots(ph, &e, b, ElemIndex::Linear(i), i);
    SimdFlags(f, loop, e);
    UseSites(e);
    *used_digits = e.used_digits();
    b->Close();
    return;
  }
  // Rows of `row_len` elements (the innermost dim or a divisor of it): for
  // each row the chunk [begin, end) touches, the part of it inside the chunk.
  const int r = n.shape.rank();
  const int64_t inner = n.shape.dim(r - 1);
  const int64_t len = row_len;
  const std::vector<int64_t> outer_dims(n.shape.dims().begin(), n.shape.dims().end() - 1);
  const IndexExpr begin = IndexExpr::Variable("begin", 0, count);
  const IndexExpr end = IndexExpr::Variable("end", 0, count);
  IndexExpr jb;
  if (tile) jb = b->For("jb", LInt(0), LInt(len), 0, len - 1, tile);
  const IndexExpr row = b->For("row", LIndex(begin.FloorDiv(len)),
                               LIndex((end + (len - 1)).FloorDiv(len)), 0, count / len - 1);
  const IndexExpr base = row * len;
  LValue j0 = b->Let(DType::kS64, LSelect(LCmpExpr(LCmp::kGt, LIndex(begin - base), LInt(0)),
                                          LIndex(begin - base), LInt(0), DType::kS64));
  LValue j1 = b->Let(DType::kS64, LSelect(LCmpExpr(LCmp::kLt, LIndex(end - base), LInt(len)),
                                          LIndex(end - base), LInt(len), DType::kS64));
  if (tile) {
    j0 = b->Let(DType::kS64,
                LSelect(LCmpExpr(LCmp::kGt, j0, LIndex(jb)), j0, LIndex(jb), DType::kS64));
    j1 = b->Let(DType::kS64, LSelect(LCmpExpr(LCmp::kLt, j1, LIndex(jb + tile)), j1,
                                     LIndex(jb + tile), DType::kS64));
  }
  // The multi-index: the row's digits, the innermost one completed by j.
  std::vector<IndexExpr> ix;
  if (len == inner) {
    ix = Delinearize(row, outer_dims);
  } else {
    std::vector<int64_t> dims = outer_dims;
    dims.push_back(inner / len);
    ix = Delinearize(row, dims);
  }
  ctx_.scalars.clear();
  HoistRowInvariants(LoopRoots(ph), n.shape.dims(),
                     std::vector<IndexExpr>(ix.begin(), ix.begin() + (r - 1)), b);
  // A tile's row reads its transposed operand a row apart: no simd clause there, which
  // would make GCC gather each vector from as many lines.
  const IndexExpr j = b->For("j", j0, j1, 0, len - 1, 1, /*simd=*/tile == 0);
  const int loop = b->current();
  if (len == inner) {
    ix.push_back(j);
  } else {
    ix.back() = ix.back() * len + j;
  }
  ElemIndex idx = ElemIndex::Multi(ix);
  idx.has_lin = true;
  idx.lin = base + j;
  ElementBuilder e(ctx_, b);
  e.set_digit_var("j");
  StoreLoopRoots(ph, &e, b, idx, base + j);
  SimdFlags(f, loop, e);
  UseSites(e);
  *used_digits = e.used_digits();
  b->Close();
  b->Close();
  if (tile) b->Close();
  ctx_.scalars.clear();
}

void KernelPlanner::WalkRowNodes(const std::vector<NodeId>& roots, const std::vector<int64_t>& full,
                                 const std::function<bool(const Node&)>& visit) const {
  std::vector<NodeId> stack(roots.begin(), roots.end());
  std::set<NodeId> seen;
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (!seen.insert(id).second) continue;
    const Node& n = g_.node(id);
    if (n.shape.is_tuple() || n.shape.dims() != full) continue;
    if (ctx_.materialized.count(id) || ctx_.row_buffers.count(id)) continue;
    if (!visit(n) || !IsElementwise(n.op)) continue;
    for (NodeId o : n.operands) stack.push_back(o);
  }
}

int64_t KernelPlanner::ColumnTile(const Phase& ph, int64_t row_len) const {
  const std::vector<int64_t>& dims = g_.node(ph.node).shape.dims();
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (rank < 2 || row_len != dims.back() || row_len < 2 * kTransposeTile ||
      g_.node(ph.node).shape.num_elements() / row_len < kTransposeTile)
    return 0;
  bool found = false;
  WalkRowNodes(LoopRoots(ph), dims, [&](const Node& n) {
    found = found || (n.op == OpKind::kTranspose && attr::Dimensions(n).back() != rank - 1);
    return !found && n.op != OpKind::kTranspose;
  });
  return found ? kTransposeTile : 0;
}

// Operands of row broadcasts (broadcast-in-dim repeating its operand along
// the innermost dims: operand = the leading k dims of the result, mapped to
// dims {0..k-1}) reached from `roots` through elementwise ops of shape
// `full` are the same along a row: they are computed once per row, before
// the loop over the row, into locals that the loop reads (ctx_.scalars).
void KernelPlanner::HoistRowInvariants(const std::vector<NodeId>& roots,
                                       const std::vector<int64_t>& full,
                                       const std::vector<IndexExpr>& outer, LBuilder* b) {
  std::vector<NodeId> hoist;
  WalkRowNodes(roots, full, [&](const Node& n) {
    if (n.op != OpKind::kBroadcastInDim) return true;
    const Node& op = g_.node(n.operands[0]);
    const auto& map = attr::Dimensions(n);
    const int k = op.shape.rank();
    bool row = k >= 1 && k < static_cast<int>(full.size()) && k <= static_cast<int>(outer.size());
    for (int i = 0; row && i < k; ++i) row = map[i] == i && op.shape.dim(i) == full[i];
    if (row && op.op != OpKind::kConstant) hoist.push_back(op.id);
    return false;
  });
  if (hoist.empty()) return;
  std::sort(hoist.begin(), hoist.end());
  hoist.erase(std::unique(hoist.begin(), hoist.end()), hoist.end());
  ElementBuilder e(ctx_, b);
  std::vector<std::pair<std::string, LValue>> vals;
  for (NodeId id : hoist) {
    const int k = g_.node(id).shape.rank();
    const ElemIndex idx =
        ElemIndex::Multi(std::vector<IndexExpr>(outer.begin(), outer.begin() + k));
    const std::string key = ValueKey(g_, id, idx);
    if (ctx_.scalars.count(key)) continue;
    vals.push_back({key, e.Value(id, idx)});
  }
  for (const auto& [key, v] : vals) ctx_.scalars[key] = v;
  UseSites(e);
}

}  // namespace ember::codegen
