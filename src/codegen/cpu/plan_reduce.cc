// Reductions (kernel_planner.h). A reduce phase loops over its output
// elements; for each, over the outer reduced dims and over the innermost
// reduced dim in blocks of L lanes (a simd loop over the lanes into explicit
// accumulators acc[L]), then a scalar tail. Float add/multiply fold each
// chunk of kBlocksPerChunk blocks pairwise into a binary counter of partial
// results (EmberPairwise in the prelude); reductions of at most kExactTreeMax
// float elements replicate the interpreter's order instead (ExactTreeReduce).
// docs/codegen.md states the error bound.
//
// Column reductions (the operand's innermost dim is not reduced: a sum over
// dim 0 of [M, N], a bias or LayerNorm weight gradient) would read strided
// in that loop. Their phase instead loops over blocks of W consecutive
// output columns and keeps W accumulators per lane (acc[l * W + c]), so every
// load is a contiguous run of W elements of a row and the combines are simd
// across the columns. Each column still sees exactly the per-output loop's
// arithmetic (the same lanes, chunks, lane fold and binary counter, or the
// same exact tree), so the two loops give the same bits and W (chosen from
// the shape only) changes no value.
//
// Reductions over dims on both sides of a kept one (BatchNorm's channel sums
// over (0, 2, 3)) would read one short run per outer index in that loop;
// when the reduced dims after the last kept dim are a power of two of whole
// chunks (one aligned subtree of the binary counter), a first phase reduces
// each of their runs contiguously and the reduce phase pushes the runs'
// values at their level: the same counter, the same bits (InnerSplit).
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>

#include "codegen/cpu/c_types.h"
#include "codegen/cpu/kernel_planner.h"
#include "ember/ir/attributes.h"

namespace ember::codegen {
namespace {

// Reduction lanes (vector accumulators) and lane blocks per pairwise chunk.
constexpr int kLanes32 = 16;
constexpr int kLanes64 = 8;
constexpr int kBlocksPerChunk = 16;
// Float reductions of at most this many elements replicate the interpreter's
// pairwise order exactly (see ExactTreeReduce).
constexpr int64_t kExactTreeMax = 128;
// Column reductions: at least this many columns (a single column is read
// contiguously by the per-output loop; the random graphs of the fuzzers, at
// most 4 wide, reach the column phase from 2); a work item's width W starts
// at 256 bytes of accumulators per lane and halves (to 64 bytes) while there
// would be fewer than kMinColumnItems.
constexpr int64_t kMinColumns = 2;
constexpr int64_t kMinColumnItems = 8;
// A column reduce split into runs of rows reads rows of at most this many
// bytes whole (one column block).
constexpr int64_t kMaxSplitRowBytes = 512;

// The identity of a reduction in the accumulator type, as a literal.
LValue ReduceIdentity(ReduceKind k, DType t, bool empty) {
  const std::string ct = ComputeType(t);
  const bool fl = IsFloat(t);
  std::string s = "(" + ct + ")0";
  switch (k) {
    case ReduceKind::kAdd:
      // -0 is the exact identity of IEEE addition (x + -0 == x for every x,
      // -0 included); an empty sum is +0 as in the interpreter.
      if (fl && !empty) s = "(" + ct + ")-0.0";
      break;
    case ReduceKind::kMultiply:
      s = "(" + ct + ")1";
      break;
    case ReduceKind::kMaximum:
      if (fl) {
        s = "-__builtin_inf" + std::string(t == DType::kF64 ? "" : "f") + "()";
      } else if (!IsUnsignedInt(t)) {
        s = "(" + ct + ")((" + ct + ")1 << (sizeof(" + ct + ") * 8 - 1))";
      }
      break;
    case ReduceKind::kMinimum:
      if (fl) {
        s = "__builtin_inf" + std::string(t == DType::kF64 ? "" : "f") + "()";
      } else if (IsUnsignedInt(t)) {
        s = "(" + ct + ")~(" + ct + ")0";
      } else {
        s = "(" + ct + ")~((" + ct + ")1 << (sizeof(" + ct + ") * 8 - 1))";
      }
      break;
    case ReduceKind::kAnd:
      s = t == DType::kPred ? "(uint8_t)1" : "(" + ct + ")~(" + ct + ")0";
      break;
    case ReduceKind::kOr:
    case ReduceKind::kAssign:
      break;
  }
  return LLit(s, t);
}

// The finished value of a non-empty float sum combined with +0.0, as the
// interpreter (ReduceFromIdentity) and torch.sum do: turns a sum of -0.0s
// into +0.0 and leaves every other value unchanged.
LValue FromIdentity(ReduceKind k, DType t, LValue v) {
  if (!IsFloat(t) || k != ReduceKind::kAdd) return v;
  return LCombine(ReduceKind::kAdd, t, LLit("(" + ComputeType(t) + ")0", t), std::move(v));
}

ReduceKind KindOf(const Node& n) { return attr::ToApply(n); }

// The number of bits of p (the levels a binary counter of p pushes needs).
int64_t BitWidth(int64_t p) {
  int64_t w = 0;
  while (p > 0) {
    ++w;
    p >>= 1;
  }
  return w;
}

// The loops of a blocked reduce over dims `red_dims` of `xs`: each reduced
// dim but the last as a loop (its counter into `xix`), then the last one's K
// elements in blocks of `lanes`, a loop over the full blocks and the tail:
// block(start, count, full) emits one block of `count` lanes from element
// `start` (`full`: a block of the loop, `lanes` wide).
void ForReduceBlocks(LBuilder* b, const Shape& xs, const std::vector<int>& red_dims, int lanes,
                     std::vector<IndexExpr>& xix,
                     const std::function<void(const IndexExpr&, int64_t, bool)>& block) {
  for (size_t i = 0; i + 1 < red_dims.size(); ++i) {
    const int d = red_dims[i];
    xix[d] = b->For("r" + std::to_string(d), LInt(0), LInt(xs.dim(d)), 0, xs.dim(d) - 1);
  }
  const int64_t K = xs.dim(red_dims.back());
  const int64_t nfull = K / lanes;
  if (nfull > 0) {
    const IndexExpr kb = b->For("kb", LInt(0), LInt(nfull), 0, nfull - 1);
    block(kb * lanes, lanes, /*full=*/true);
    b->Close();
  }
  if (K % lanes != 0) block(IndexExpr::Constant(nfull * lanes), K % lanes, /*full=*/false);
  for (size_t i = 0; i + 1 < red_dims.size(); ++i) b->Close();
}

}  // namespace

void KernelPlanner::ReducePhase(const Phase& ph, LFunction* f) {
  const Node& n = g_.node(ph.node);
  LBuilder b(f, &var_counter_);
  const IndexExpr o = b.For("o", LVar("begin", DType::kS64), LVar("end", DType::kS64), 0,
                            n.shape.num_elements() - 1);
  if (ph.inner_dims.empty()) {
    const LValue v = ReduceOneOutput(n, Delinearize(o, n.shape.dims()), &b);
    b.Store(ph.dest, o, n.shape.dtype(), v);
    b.Close();
    return;
  }
  // Split at the last kept dim (InnerSplit): the inner subtrees' values in
  // the per-output loop's order (the outer reduced dims, row-major), each
  // pushed at its level, give the counter that loop ends with.
  const DType t = n.shape.dtype();
  const ReduceKind kind = KindOf(n);
  const Shape& xs = g_.node(n.operands[0]).shape;
  std::vector<bool> reduced(xs.rank(), false), inner(xs.rank(), false);
  for (int64_t d : attr::Dimensions(n)) reduced[d] = true;
  for (int d : ph.inner_dims) inner[d] = true;
  std::vector<int64_t> tdims;  // inner_temp's dims: the operand's, inner ones left out
  for (int d = 0; d < xs.rank(); ++d) {
    if (!inner[d]) tdims.push_back(xs.dim(d));
  }
  const std::vector<IndexExpr> kept = Delinearize(o, n.shape.dims());
  std::vector<IndexExpr> tix;
  const std::string pw = "pw" + std::to_string(n.id);
  b.Decl(pw, t, nullptr, LDeclKind::kPairwise);
  int kd = 0, loops = 0;
  for (int d = 0; d < xs.rank(); ++d) {
    if (inner[d]) continue;
    if (!reduced[d]) {
      tix.push_back(kept[kd++]);
    } else {
      tix.push_back(b.For("r" + std::to_string(d), LInt(0), LInt(xs.dim(d)), 0, xs.dim(d) - 1));
      ++loops;
    }
  }
  b.Push(pw, kind, t, LLoad(ph.inner_temp, Linearize(tix, tdims), t), nullptr, ph.inner_level);
  for (int i = 0; i < loops; ++i) b.Close();
  const LValue id = ReduceIdentity(kind, t, false);
  b.Store(
      ph.dest, o, t,
      FromIdentity(kind, t, b.LetNamed("red" + std::to_string(n.id), t, LFinish(pw, kind, t, id))));
  b.Close();
}

void KernelPlanner::InnerSplit(const Node& n, Phase* ph) const {
  ph->inner_dims.clear();
  if (n.op != OpKind::kReduce || n.shape.num_elements() == 0) return;
  // EMBER_CODEGEN_INNER_SPLIT=0: the per-output loop unsplit (A/B; the same values).
  const char* env = std::getenv("EMBER_CODEGEN_INNER_SPLIT");
  if (env && std::string(env) == "0") return;
  const DType t = n.shape.dtype();
  const ReduceKind kind = KindOf(n);
  if ((t != DType::kF32 && t != DType::kF64) ||
      (kind != ReduceKind::kAdd && kind != ReduceKind::kMultiply)) {
    return;
  }
  const Shape& xs = g_.node(n.operands[0]).shape;
  if (xs.num_elements() == 0) return;
  std::vector<bool> reduced(xs.rank(), false);
  for (int64_t d : attr::Dimensions(n)) reduced[d] = true;
  int last_kept = -1;
  for (int d = 0; d < xs.rank(); ++d) {
    if (!reduced[d] && xs.dim(d) > 1) last_kept = d;
  }
  if (last_kept < 0 || reduced[xs.rank() - 1] == false) return;  // a column reduce
  std::vector<int> in;
  bool outer = false;  // a reduced dim of more than one element before the last kept one
  int64_t nin = 1, nred = 1;
  for (int d = 0; d < xs.rank(); ++d) {
    if (!reduced[d]) continue;
    nred *= xs.dim(d);
    if (d > last_kept) {
      in.push_back(d);
      nin *= xs.dim(d);
    } else if (xs.dim(d) > 1) {
      outer = true;
    }
  }
  if (!outer || in.empty() || nred <= kExactTreeMax) return;
  const int lanes = DTypeSize(t) == 8 ? kLanes64 : kLanes32;
  const int64_t K = xs.dim(in.back());
  const int64_t blocks = nin / K * ((K + lanes - 1) / lanes);
  if (blocks % kBlocksPerChunk != 0) return;
  const int64_t chunks = blocks / kBlocksPerChunk;
  if ((chunks & (chunks - 1)) != 0) return;  // a power of two: one aligned subtree
  ph->inner_dims = in;
  ph->inner_level = static_cast<int>(BitWidth(chunks) - 1);
}

void KernelPlanner::InnerReducePhase(const Phase& ph, LFunction* f) {
  const Node& n = g_.node(ph.node);
  const Shape& xs = g_.node(n.operands[0]).shape;
  std::vector<bool> inner(xs.rank(), false);
  for (int d : ph.inner_dims) inner[d] = true;
  std::vector<int64_t> tdims;
  for (int d = 0; d < xs.rank(); ++d) {
    if (!inner[d]) tdims.push_back(xs.dim(d));
  }
  int64_t items = 1;
  for (int64_t d : tdims) items *= d;
  LBuilder b(f, &var_counter_);
  const IndexExpr o =
      b.For("o", LVar("begin", DType::kS64), LVar("end", DType::kS64), 0, items - 1);
  const LValue v = ReduceOneOutput(n, Delinearize(o, tdims), &b, {}, &ph.inner_dims, true);
  b.Store(ph.inner_temp, o, n.shape.dtype(), v);
  b.Close();
}

KernelPlanner::ColumnPlanInfo KernelPlanner::ColumnPlan(const Node& n) const {
  ColumnPlanInfo plan;
  if (n.op != OpKind::kReduce || n.shape.num_elements() == 0) return plan;
  // EMBER_CODEGEN_COLUMN_REDUCE=0: the per-output loop (A/B measurements;
  // the same values, only the loop order differs).
  const char* env = std::getenv("EMBER_CODEGEN_COLUMN_REDUCE");
  if (env && std::string(env) == "0") return plan;
  const Shape& xs = g_.node(n.operands[0]).shape;
  const int last = xs.rank() - 1;
  if (last < 1 || xs.num_elements() == 0) return plan;
  bool any = false;
  for (int64_t d : attr::Dimensions(n)) {
    if (d == last) return plan;
    any = any || xs.dim(d) > 0;
  }
  if (!any) return plan;
  const int64_t cols = xs.dim(last);
  if (cols < kMinColumns) return plan;
  const DType t = n.shape.dtype();
  int64_t nred = 1;
  for (int64_t d : attr::Dimensions(n)) nred *= xs.dim(d);
  // Accumulators per lane: 256 bytes (64 bytes per exact-tree value row).
  const int64_t per = DTypeSize(t) == 8 ? 8 : 4;
  int64_t w = (IsFloat(t) && nred <= kExactTreeMax ? 128 : 256) / per;
  const int64_t min_w = 64 / per;
  const int64_t rows = n.shape.num_elements() / cols;
  auto items = [&](int64_t width) { return rows * ((cols + width - 1) / width); };
  // A float sum or product over one dim, in f32/f64 (partials keep the
  // accumulator's type), with fewer column blocks than kMinColumnItems: its
  // rows split into aligned runs of 2^level chunks (each a subtree of the
  // binary counter: its finished value pushed at `level` gives the counter
  // the whole run would), so work items stay wide and read whole lines.
  const ReduceKind kind = KindOf(n);
  const bool pairwise = (t == DType::kF32 || t == DType::kF64) &&
                        (kind == ReduceKind::kAdd || kind == ReduceKind::kMultiply);
  if (pairwise && nred > kExactTreeMax && attr::Dimensions(n).size() == 1 &&
      items(std::min(w, cols)) < kMinColumnItems) {
    // Rows of at most kMaxSplitRowBytes are one block: a work item reads whole
    // rows (half rows would leave the lines the hardware prefetcher fetches
    // ahead to another item).
    const int64_t sw = cols * per <= kMaxSplitRowBytes ? cols : std::min(w, cols);
    const int lanes = DTypeSize(t) == 8 ? kLanes64 : kLanes32;
    const int64_t chunks = nred / (lanes * kBlocksPerChunk);
    const int64_t want = (kMinColumnItems + items(sw) - 1) / items(sw);
    int level = 0;
    while ((int64_t{2} << level) * want <= chunks) ++level;
    if ((int64_t{1} << level) * want <= chunks) {
      plan.width = sw;
      plan.parts = chunks >> level;
      plan.part_level = level;
      return plan;
    }
  }
  while (w > min_w && items(w) < kMinColumnItems) w /= 2;
  plan.width = std::min(w, cols);
  return plan;
}

bool KernelPlanner::ColumnSiblings(const Phase& ph, const Node& n) const {
  if (ph.col_width <= 0 || ph.siblings.size() >= kMaxColumnSiblings) return false;
  const Node& h = g_.node(ph.node);
  if (g_.node(h.operands[0]).shape.dims() != g_.node(n.operands[0]).shape.dims() ||
      attr::Dimensions(h) != attr::Dimensions(n)) {
    return false;
  }
  auto exact = [&](const Node& r) {
    return IsFloat(r.shape.dtype()) &&
           g_.node(r.operands[0]).shape.num_elements() / r.shape.num_elements() <= kExactTreeMax;
  };
  auto wide = [](const Node& r) { return DTypeSize(r.shape.dtype()) == 8; };
  const ColumnPlanInfo np = ColumnPlan(n);
  if (exact(h) != exact(n) || wide(h) != wide(n) || np.width != ph.col_width ||
      np.parts != ph.parts || np.part_level != ph.part_level) {
    return false;
  }
  // n must not read a member (they are computed in the same pass).
  std::set<NodeId> members(ph.siblings.begin(), ph.siblings.end());
  members.insert(ph.node);
  std::vector<NodeId> stack = {n.operands[0]};
  std::set<NodeId> seen;
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (!seen.insert(id).second) continue;
    if (members.count(id)) return false;
    for (NodeId op : g_.node(id).operands) stack.push_back(op);
  }
  return true;
}

void KernelPlanner::ColumnReducePhase(const Phase& ph, LFunction* f, bool runs_phase) {
  // The phase's reduces: ph.node and its siblings (same operand shape,
  // reduced dims, lanes and loop kind: PlanPhases), one pass over the
  // operands for all of them. Their producers share one element walk per
  // loop body, so an operand they have in common is loaded once.
  struct Member {
    const Node* n;
    int dest;
    DType t;
    ReduceKind kind;
    bool pairwise;
    LValue id;
    std::string acc, pw, vals;
    int partial = -1;  // a split reduce: its runs' partial results (Phase::partials)
  };
  std::vector<Member> ms;
  for (size_t i = 0; i <= ph.siblings.size(); ++i) {
    Member m;
    m.n = &g_.node(i == 0 ? ph.node : ph.siblings[i - 1]);
    m.dest = i == 0 ? ph.dest : ph.sibling_dests[i - 1];
    m.t = m.n->shape.dtype();
    m.kind = KindOf(*m.n);
    m.pairwise = IsFloat(m.t) && (m.kind == ReduceKind::kAdd || m.kind == ReduceKind::kMultiply);
    m.id = ReduceIdentity(m.kind, m.t, false);
    const std::string sfx = std::to_string(m.n->id);
    m.acc = "acc" + sfx;
    m.pw = "pw" + sfx;
    m.vals = "vals" + sfx;
    if (ph.parts > 0) m.partial = ph.partials[i];
    ms.push_back(m);
  }
  const Node& n = *ms[0].n;
  const Shape& xs = g_.node(n.operands[0]).shape;
  const int last = xs.rank() - 1;
  const int64_t cols = xs.dim(last);
  const int64_t W = ph.col_width;
  const int64_t nblk = (cols + W - 1) / W;
  std::vector<bool> reduced(xs.rank(), false);
  for (int64_t d : attr::Dimensions(n)) reduced[d] = true;
  std::vector<int> red_dims;
  std::vector<int64_t> red_sizes;
  int64_t nred = 1;
  for (int d = 0; d < xs.rank(); ++d) {
    if (reduced[d]) {
      red_dims.push_back(d);
      red_sizes.push_back(xs.dim(d));
      nred *= xs.dim(d);
    }
  }
  LBuilder bb(f, &var_counter_);
  LBuilder* b = &bb;
  // Work items: the column blocks (ph.count); in the first phase of a split
  // reduce, each run of each block (blocks inner: items reading the same rows
  // run together).
  const int64_t items = ph.count;
  const int64_t E = n.shape.num_elements();
  const IndexExpr o = b->For("o", LVar("begin", DType::kS64), LVar("end", DType::kS64), 0,
                             (runs_phase ? ph.parts * items : items) - 1);
  const IndexExpr ob = runs_phase ? o.Mod(items) : o;
  const IndexExpr run = runs_phase ? o.FloorDiv(items) : IndexExpr();
  // Column block ob: columns [col0, col0 + wc) of output row q.
  const IndexExpr q = ob.FloorDiv(nblk);
  const IndexExpr col0 = ob.Mod(nblk) * W;
  LValue wc = LInt(W);
  if (cols % W != 0) {
    wc = b->Let(DType::kS64, LSelect(LCmpExpr(LCmp::kEq, LIndex(ob.Mod(nblk)), LInt(nblk - 1)),
                                     LInt(cols % W), LInt(W), DType::kS64));
  }
  std::vector<int64_t> outer(n.shape.dims().begin(), n.shape.dims().end() - 1);
  std::vector<IndexExpr> xix(xs.rank());
  {
    const std::vector<IndexExpr> qix = Delinearize(q, outer);
    int kd = 0;
    for (int d = 0; d < last; ++d) {
      if (!reduced[d]) xix[d] = qix[kd++];
    }
  }
  // The loop over the block's columns (simd); returns its counter.
  auto columns = [&](bool simd) { return b->For("col", LInt(0), wc, 0, W - 1, 1, simd); };
  auto store = [&](const Member& m, const IndexExpr& c, LValue v) {
    b->Store(m.dest, q * cols + col0 + c, m.t, FromIdentity(m.kind, m.t, std::move(v)));
  };
  // Every member's operand at xix, in one element walk (simd loop `loop`).
  auto operands = [&](int loop, const std::function<void(const Member&, LValue)>& use) {
    ElementBuilder e(ctx_, b);
    std::vector<LValue> vs;
    for (const Member& m : ms) vs.push_back(e.Value(m.n->operands[0], ElemIndex::Multi(xix)));
    for (size_t i = 0; i < ms.size(); ++i) use(ms[i], vs[i]);
    SimdFlags(f, loop, e);
    UseSites(e);
  };
  if (IsFloat(n.shape.dtype()) && nred <= kExactTreeMax) {
    // The interpreter's exact tree per column (ExactTreeReduce) over a local
    // array of the block's values, vals[r * W + c].
    for (const Member& m : ms) b->DeclArray(m.vals, m.t, nred * W);
    const IndexExpr r = b->For("r", LInt(0), LInt(nred), 0, nred - 1);
    const std::vector<IndexExpr> rix = Delinearize(r, red_sizes);
    for (size_t i = 0; i < red_dims.size(); ++i) xix[red_dims[i]] = rix[i];
    {
      const IndexExpr c = columns(true);
      const int loop = b->current();
      xix[last] = col0 + c;
      operands(loop,
               [&](const Member& m, LValue v) { b->Assign(LArray(m.vals, r * W + c, m.t), v); });
      b->Close();
    }
    b->Close();
    const IndexExpr c = columns(true);
    for (const Member& m : ms) {
      int leaf = 0;
      const std::string tp = "t" + std::to_string(m.n->id) + "_";
      std::function<LValue(int64_t, int64_t)> tree = [&](int64_t begin, int64_t len) -> LValue {
        if (len <= 8) {
          const std::string a = tp + std::to_string(leaf++);
          const LValue av = b->Decl(a, m.t, LArray(m.vals, c + begin * W, m.t));
          if (len > 1) {
            const IndexExpr i =
                b->For("i", LInt(begin + 1), LInt(begin + len), begin + 1, begin + len - 1);
            b->Assign(av, LCombine(m.kind, m.t, av, LArray(m.vals, i * W + c, m.t)));
            b->Close();
          }
          return av;
        }
        const int64_t half = len / 2;
        const LValue lhs = tree(begin, half);
        const LValue rhs = tree(begin + half, len - half);
        return LCombine(m.kind, m.t, lhs, rhs);
      };
      store(m, c, tree(0, nred));
    }
    b->Close();
    b->Close();
    return;
  }
  // Blocked lanes, as ReduceOneOutput, with W accumulators per lane.
  const int lanes = DTypeSize(n.shape.dtype()) == 8 ? kLanes64 : kLanes32;
  const int lastr = red_dims.back();
  const int64_t K = xs.dim(lastr);
  bool any_pairwise = false;
  for (const Member& m : ms) any_pairwise = any_pairwise || m.pairwise;
  const std::string nb = "nb" + std::to_string(n.id);
  auto at = [&](const Member& m, const IndexExpr& l, const IndexExpr& c) {
    return LArray(m.acc, c + l * W, m.t);
  };
  auto reset = [&](const Member& m) {
    const IndexExpr i = b->For("i", LInt(0), LInt(lanes * W), 0, lanes * W - 1, 1, true);
    b->Assign(LArray(m.acc, i, m.t), m.id);
    b->Close();
  };
  // One counter per column; pushes: one per chunk of kBlocksPerChunk blocks.
  const int64_t blocks = nred / K * ((K + lanes - 1) / lanes);
  const int64_t pushes = (blocks + kBlocksPerChunk - 1) / kBlocksPerChunk;
  for (const Member& m : ms) {
    if (m.pairwise) b->DeclArray(m.pw, m.t, W, LDeclKind::kPairwise, BitWidth(pushes));
  }
  if (any_pairwise) b->Decl(nb, DType::kS64, LInt(0));
  for (const Member& m : ms) {
    b->DeclArray(m.acc, m.t, lanes * W);
    reset(m);
  }
  auto fold_lanes = [&](const Member& m) {
    for (int w = lanes / 2; w >= 1; w /= 2) {
      const IndexExpr l = b->For("l", LInt(0), LInt(w), 0, w - 1);
      const IndexExpr c = columns(true);
      b->Assign(at(m, l, c), LCombine(m.kind, m.t, at(m, l, c), at(m, l + w, c)));
      b->Close();
      b->Close();
    }
  };
  auto push = [&](const Member& m) {
    const IndexExpr c = columns(false);
    b->Push(m.pw, m.kind, m.t, at(m, IndexExpr(), c), LIndex(c));
    b->Close();
  };
  // One block of `count` lanes from element `start` of the innermost reduced
  // dim: lane l of every column takes element start + l.
  auto block = [&](const IndexExpr& start, int64_t count) {
    const IndexExpr l = b->For("l", LInt(0), LInt(count), 0, count - 1);
    const IndexExpr c = columns(true);
    const int loop = b->current();
    xix[lastr] = start + l;
    xix[last] = col0 + c;
    operands(loop, [&](const Member& m, LValue v) {
      b->Assign(at(m, l, c), LCombine(m.kind, m.t, at(m, l, c), v));
    });
    b->Close();
    b->Close();
    if (!any_pairwise) return;
    const IndexExpr nbv = IndexExpr::Variable(nb, 0, kBlocksPerChunk);
    b->Assign(LVar(nb, DType::kS64), LIndex(nbv + 1));
    b->If(LCmpExpr(LCmp::kEq, LVar(nb, DType::kS64), LInt(kBlocksPerChunk)));
    for (const Member& m : ms) {
      if (!m.pairwise) continue;
      fold_lanes(m);
      push(m);
      reset(m);
    }
    b->Assign(LVar(nb, DType::kS64), LInt(0));
    b->Close();
  };
  if (ph.parts == 0) {
    ForReduceBlocks(b, xs, red_dims, lanes, xix,
                    [&](const IndexExpr& start, int64_t count, bool) { block(start, count); });
  } else {
    // Split by rows (one reduced dim, ColumnPlan): runs of `per_run` blocks of
    // lanes, each a whole number of chunks, so every run and the rest start a
    // chunk where the unsplit loop does.
    const int64_t per_run = (int64_t{1} << ph.part_level) * kBlocksPerChunk;
    const int64_t nfull = K / lanes;
    const int64_t split = ph.parts * per_run;
    if (runs_phase) {
      const IndexExpr kb =
          b->For("kb", LIndex(run * per_run), LIndex(run * per_run + per_run), 0, split - 1);
      block(kb * lanes, lanes);
      b->Close();
    } else {
      // The runs' results first, each at its level (the counter the unsplit
      // loop has after them), then the rest of the rows.
      const IndexExpr pp = b->For("pp", LInt(0), LInt(ph.parts), 0, ph.parts - 1);
      for (const Member& m : ms) {
        const IndexExpr c = columns(false);
        b->Push(m.pw, m.kind, m.t, LLoad(m.partial, pp * E + q * cols + col0 + c, m.t), LIndex(c),
                ph.part_level);
        b->Close();
      }
      b->Close();
      if (split < nfull) {
        const IndexExpr kb = b->For("kb", LInt(split), LInt(nfull), split, nfull - 1);
        block(kb * lanes, lanes);
        b->Close();
      }
      if (K % lanes != 0) block(IndexExpr::Constant(nfull * lanes), K % lanes);
    }
  }
  for (const Member& m : ms) fold_lanes(m);
  if (any_pairwise) {
    b->If(LCmpExpr(LCmp::kGt, LVar(nb, DType::kS64), LInt(0)));
    for (const Member& m : ms) {
      if (m.pairwise) push(m);
    }
    b->Close();
  }
  for (const Member& m : ms) {
    const IndexExpr c = columns(!m.pairwise);
    if (runs_phase) {  // the run's value as the counter holds it (no rounding of -0)
      b->Store(m.partial, run * E + q * cols + col0 + c, m.t,
               LFinish(m.pw, m.kind, m.t, m.id, LIndex(c)));
    } else if (m.pairwise) {
      store(m, c,
            b->LetNamed("red" + std::to_string(m.n->id), m.t,
                        LFinish(m.pw, m.kind, m.t, m.id, LIndex(c))));
    } else {
      store(m, c, at(m, IndexExpr(), c));
    }
    b->Close();
  }
  b->Close();
}

void KernelPlanner::StoreRowValues(ElementBuilder& e, const std::vector<NodeId>& stores,
                                   const ElemIndex& idx, LBuilder* b) {
  for (NodeId id : stores) {
    const Node& n = g_.node(id);
    const LValue v = e.Value(id, idx);
    b->Assign(
        LArray("scr" + std::to_string(id), LinOf(n.shape, idx) - ctx_.row_base, n.shape.dtype()),
        v);
  }
}

LValue KernelPlanner::ReduceOneOutput(const Node& n, const std::vector<IndexExpr>& kept,
                                      LBuilder* b, const std::vector<NodeId>& stores,
                                      const std::vector<int>* only, bool raw) {
  LFunction* f = b->function();
  const NodeId x = n.operands[0];
  const Shape& xs = g_.node(x).shape;
  const DType t = n.shape.dtype();
  const ReduceKind kind = KindOf(n);
  std::vector<bool> reduced(xs.rank(), false);
  if (only) {
    for (int d : *only) reduced[d] = true;
  } else {
    for (int64_t d : attr::Dimensions(n)) reduced[d] = true;
  }
  std::vector<int> red_dims;
  int64_t nred = 1;
  for (int d = 0; d < xs.rank(); ++d) {
    if (reduced[d]) {
      red_dims.push_back(d);
      nred *= xs.dim(d);
    }
  }
  if (nred == 0) return ReduceIdentity(kind, t, /*empty=*/true);
  std::vector<IndexExpr> xix(xs.rank());
  {
    int kd = 0;
    for (int d = 0; d < xs.rank(); ++d) {
      if (!reduced[d]) xix[d] = kept[kd++];
    }
  }
  if (red_dims.empty()) {
    ElementBuilder e(ctx_, b);
    const LValue v = e.Value(x, ElemIndex::Multi(xix));
    UseSites(e);
    return FromIdentity(kind, t, v);
  }
  // A part of a larger reduce (`only`, InnerSplit) takes the blocked loop the
  // whole reduce takes, however few its own elements.
  if (IsFloat(t) && nred <= kExactTreeMax && !only) return ExactTreeReduce(n, xix, b, stores);
  const bool pairwise = IsFloat(t) && (kind == ReduceKind::kAdd || kind == ReduceKind::kMultiply);
  const int lanes = DTypeSize(t) == 8 ? kLanes64 : kLanes32;
  const int last = red_dims.back();
  const LValue id = ReduceIdentity(kind, t, false);
  const std::string acc = "acc" + std::to_string(n.id);
  const std::string pw = "pw" + std::to_string(n.id);
  const std::string nb = "nb" + std::to_string(n.id);
  auto at = [&](const IndexExpr& l) { return LArray(acc, l, t); };
  if (pairwise) {
    b->Decl(pw, t, nullptr, LDeclKind::kPairwise);
    b->Decl(nb, DType::kS64, LInt(0));
  }
  b->DeclArray(acc, t, lanes);
  {
    const IndexExpr l = b->For("l", LInt(0), LInt(lanes), 0, lanes - 1);
    b->Assign(at(l), id);
    b->Close();
  }
  // Pairwise fold of the lanes into acc[0]: acc[l] = acc[l] (+) acc[l + w].
  auto fold_lanes = [&]() {
    for (int w = lanes / 2; w >= 1; w /= 2) {
      const IndexExpr l = b->For("l", LInt(0), LInt(w), 0, w - 1);
      b->Assign(at(l), LCombine(kind, t, at(l), at(l + w)));
      b->Close();
    }
  };
  // One block of `count` lanes starting at element `start` of the innermost
  // reduced dim, then (pairwise) the chunk bookkeeping.
  auto block = [&](const IndexExpr& start, int64_t count, bool simd) {
    const IndexExpr l = b->For("l", LInt(0), LInt(count), 0, count - 1, 1, simd);
    const int loop = b->current();
    xix[last] = start + l;
    ElementBuilder e(ctx_, b);
    const LValue v = e.Value(x, ElemIndex::Multi(xix));
    StoreRowValues(e, stores, ElemIndex::Multi(xix), b);
    b->Assign(at(l), LCombine(kind, t, at(l), v));
    if (simd) SimdFlags(f, loop, e);
    UseSites(e);
    b->Close();
    if (!pairwise) return;
    const IndexExpr nbv = IndexExpr::Variable(nb, 0, kBlocksPerChunk);
    b->Assign(LVar(nb, DType::kS64), LIndex(nbv + 1));
    b->If(LCmpExpr(LCmp::kEq, LVar(nb, DType::kS64), LInt(kBlocksPerChunk)));
    fold_lanes();
    b->Push(pw, kind, t, at(IndexExpr()));
    {
      const IndexExpr l2 = b->For("l", LInt(0), LInt(lanes), 0, lanes - 1);
      b->Assign(at(l2), id);
      b->Close();
    }
    b->Assign(LVar(nb, DType::kS64), LInt(0));
    b->Close();
  };
  ForReduceBlocks(b, xs, red_dims, lanes, xix, block);  // full blocks are simd
  fold_lanes();
  const std::string res = "red" + std::to_string(n.id);
  if (pairwise) {
    b->If(LCmpExpr(LCmp::kGt, LVar(nb, DType::kS64), LInt(0)));
    b->Push(pw, kind, t, at(IndexExpr()));
    b->Close();
    const LValue fin = b->LetNamed(res, t, LFinish(pw, kind, t, id));
    return raw ? fin : FromIdentity(kind, t, fin);
  }
  return FromIdentity(kind, t, b->LetNamed(res, t, at(IndexExpr())));
}

// Small float reductions (n <= kExactTreeMax reduced elements) use the
// interpreter's exact order (PairwiseReduce in src/eval/eval_util.h): halve
// until a run has <= 8 elements, combine each run left to right, then
// combine the halves. n is static, so the tree is built unrolled over a
// local array of the n input values; results are bit-identical.
LValue KernelPlanner::ExactTreeReduce(const Node& n, const std::vector<IndexExpr>& kept_xix,
                                      LBuilder* b, const std::vector<NodeId>& stores) {
  const DType t = n.shape.dtype();
  const ReduceKind kind = KindOf(n);
  const Shape& xs = g_.node(n.operands[0]).shape;
  std::vector<bool> reduced(xs.rank(), false);
  for (int64_t d : attr::Dimensions(n)) reduced[d] = true;
  std::vector<int64_t> red_dims;
  std::vector<int> red_axes;
  for (int d = 0; d < xs.rank(); ++d) {
    if (reduced[d]) {
      red_dims.push_back(xs.dim(d));
      red_axes.push_back(d);
    }
  }
  int64_t total = 1;
  for (int64_t d : red_dims) total *= d;
  const std::string vals = "vals" + std::to_string(n.id);
  b->DeclArray(vals, t, total);
  {
    const IndexExpr r = b->For("r", LInt(0), LInt(total), 0, total - 1, 1, /*simd=*/true);
    const int loop = b->current();
    std::vector<IndexExpr> xix = kept_xix;
    const std::vector<IndexExpr> rix = Delinearize(r, red_dims);
    for (size_t i = 0; i < red_axes.size(); ++i) xix[red_axes[i]] = rix[i];
    ElementBuilder e(ctx_, b);
    const LValue v = e.Value(n.operands[0], ElemIndex::Multi(xix));
    StoreRowValues(e, stores, ElemIndex::Multi(xix), b);
    b->Assign(LArray(vals, r, t), v);
    SimdFlags(b->function(), loop, e);
    UseSites(e);
    b->Close();
  }
  int leaf = 0;
  const std::string tp = "t" + std::to_string(n.id) + "_";
  std::function<LValue(int64_t, int64_t)> tree = [&](int64_t begin, int64_t len) -> LValue {
    if (len <= 8) {
      const std::string a = tp + std::to_string(leaf++);
      const LValue av = b->Decl(a, t, LArray(vals, IndexExpr::Constant(begin), t));
      if (len > 1) {
        const IndexExpr i =
            b->For("i", LInt(begin + 1), LInt(begin + len), begin + 1, begin + len - 1);
        b->Assign(av, LCombine(kind, t, av, LArray(vals, i, t)));
        b->Close();
      }
      return av;
    }
    const int64_t half = len / 2;
    const LValue lhs = tree(begin, half);
    const LValue rhs = tree(begin + half, len - half);
    return LCombine(kind, t, lhs, rhs);
  };
  return FromIdentity(kind, t, tree(0, total));
}

}  // namespace ember::codegen
