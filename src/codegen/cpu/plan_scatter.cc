// Scatter phases (kernel_planner.h): one work item (XLA's dimension numbers,
// as src/eval/indexing.cc) that copies the operand into the destination, then
// combines the updates in row-major order of the update index space, so
// duplicate indices combine in the interpreter's order. An out-of-range start
// sets the node's error flag (the element goes to start 0: the result is
// discarded).
//
// Row blocks: when the destination's dim 0 is an inserted window dim chosen
// by the index (an embedding's backward: updates [N, C] into [V, C] rows by
// ids [N]), the phase has ScatterRowBlocks work items, each owning a block of
// destination rows. Two bucketing phases over fixed chunks of update rows
// first count each chunk's rows per block, then list them (block-major, so a
// block's rows stay in update order); each block copies the operand's rows
// of its block and combines the windows of its listed rows (a simd loop),
// prefetching the rows a few entries ahead. Each destination element still
// combines its updates in update order, so the values are the single work
// item's bits whatever the threads.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen/cpu/kernel_planner.h"
#include "ember/ir/attributes.h"

namespace ember::codegen {

namespace {

bool Has(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The window (slice sizes) each update element is placed through, per
// destination dim: 1 for inserted dims, the update's window dim otherwise.
std::vector<int64_t> ScatterWindow(const Node& n, const Shape& os, const Shape& us) {
  const auto& update_window_dims = attr::UpdateWindowDims(n);
  const auto& inserted = attr::InsertedWindowDims(n);
  std::vector<int64_t> window_operand_dims, window(os.rank(), 1);
  for (int d = 0; d < os.rank(); ++d) {
    if (!Has(inserted, d)) window_operand_dims.push_back(d);
  }
  for (size_t k = 0; k < update_window_dims.size(); ++k) {
    window[window_operand_dims[k]] = us.dim(static_cast<int>(update_window_dims[k]));
  }
  return window;
}

// Combines update element `v` (at update index `uix`, the index starts from
// IndexStarts) into the destination `dest` of shape `os`.
void StoreUpdate(const Node& n, const Shape& os, const std::vector<IndexExpr>& uix,
                 const std::map<int64_t, IndexExpr>& starts, const LValue& v, int dest,
                 LBuilder& b) {
  const auto& update_window_dims = attr::UpdateWindowDims(n);
  const auto& inserted = attr::InsertedWindowDims(n);
  std::vector<IndexExpr> oix(os.rank());
  size_t k = 0;  // position among the window dims
  for (int d = 0; d < os.rank(); ++d) {
    IndexExpr off;
    if (!Has(inserted, d)) off = uix[update_window_dims[k++]];
    auto st = starts.find(d);
    oix[d] = st == starts.end() ? off : st->second + off;
  }
  const DType t = n.shape.dtype();
  const ReduceKind kind = attr::ToApply(n);
  const IndexExpr at = LinOf(os, ElemIndex::Multi(oix));
  b.Store(dest, at, t, kind == ReduceKind::kAssign ? v : LCombine(kind, t, LLoad(dest, at, t), v));
}

}  // namespace

int64_t KernelPlanner::ScatterRowBlocks(const Node& n) const {
  const Shape& os = n.shape;
  if (os.rank() < 1 || os.dim(0) < 2 || os.num_elements() == 0) return 1;
  // EMBER_CODEGEN_SCATTER_ROWS=0: one serial work item (A/B; the same values).
  const char* env = std::getenv("EMBER_CODEGEN_SCATTER_ROWS");
  if (env && std::string(env) == "0") return 1;
  if (!Has(attr::InsertedWindowDims(n), 0) || !Has(attr::ScatterDimsToOperandDims(n), 0)) {
    return 1;
  }
  const Shape& us = g_.node(n.operands[2]).shape;
  if (us.num_elements() == 0) return 1;
  return std::min<int64_t>(os.dim(0), kScatterRowBlocks);
}

void KernelPlanner::ScatterPhase(const Phase& ph, LFunction* f) {
  if (ph.count > 1) {
    ScatterRowBlockPhase(ph, f);
    return;
  }
  const Node& n = g_.node(ph.node);
  const DType t = n.shape.dtype();
  const auto& update_window_dims = attr::UpdateWindowDims(n);
  const Shape& os = n.shape;
  const Shape& us = g_.node(n.operands[2]).shape;
  LBuilder b(f, &var_counter_);
  {
    const IndexExpr i = b.For("i", LInt(0), LInt(os.num_elements()), 0, os.num_elements() - 1);
    ElementBuilder copy(ctx_, &b);
    b.Store(ph.dest, i, t, copy.Value(n.operands[0], ElemIndex::Linear(i)));
    UseSites(copy);
    b.Close();
  }
  const IndexExpr u = b.For("u", LInt(0), LInt(us.num_elements()), 0, us.num_elements() - 1);
  const std::vector<IndexExpr> uix = Delinearize(u, us.dims());
  std::vector<IndexExpr> batch_ix;
  for (int d = 0; d < us.rank(); ++d) {
    if (!Has(update_window_dims, d)) batch_ix.push_back(uix[d]);
  }
  ElementBuilder upd(ctx_, &b);
  const std::map<int64_t, IndexExpr> starts =
      upd.IndexStarts(n, attr::IndexVectorDim(n), attr::ScatterDimsToOperandDims(n),
                      ScatterWindow(n, os, us), batch_ix);
  ElemIndex ui = ElemIndex::Multi(uix);
  ui.has_lin = true;
  ui.lin = u;
  StoreUpdate(n, os, uix, starts, upd.Value(n.operands[2], ui), ph.dest, b);
  UseSites(upd);
  b.Close();
}

namespace {

// The update's dims split after its last batch dim: the outer ones (every
// batch dim among them) pick the destination row, the inner ones (window
// dims) walk it.
struct UpdateRows {
  std::vector<int64_t> outer_dims, inner_dims;
  int64_t nouter = 1, ninner = 1;
};

UpdateRows SplitUpdateRows(const Node& n, const Shape& us) {
  const auto& update_window_dims = attr::UpdateWindowDims(n);
  int split = 0;
  for (int d = 0; d < us.rank(); ++d) {
    if (!Has(update_window_dims, d)) split = d + 1;
  }
  UpdateRows r;
  r.outer_dims.assign(us.dims().begin(), us.dims().begin() + split);
  r.inner_dims.assign(us.dims().begin() + split, us.dims().end());
  for (int64_t d : r.outer_dims) r.nouter *= d;
  for (int64_t d : r.inner_dims) r.ninner *= d;
  return r;
}

}  // namespace

int64_t KernelPlanner::ScatterUpdateRows(const Node& n) const {
  return SplitUpdateRows(n, g_.node(n.operands[2]).shape).nouter;
}

int64_t KernelPlanner::ScatterChunks(const Node& n) const {
  return std::min<int64_t>(ScatterUpdateRows(n), kScatterRowBlocks);
}

std::map<int64_t, IndexExpr> KernelPlanner::ScatterStarts(const Node& n, const IndexExpr& uo,
                                                          ElementBuilder* e) {
  const Shape& us = g_.node(n.operands[2]).shape;
  const UpdateRows ur = SplitUpdateRows(n, us);
  const auto& update_window_dims = attr::UpdateWindowDims(n);
  const std::vector<IndexExpr> oix_outer = Delinearize(uo, ur.outer_dims);
  std::vector<IndexExpr> batch_ix;
  for (size_t d = 0; d < ur.outer_dims.size(); ++d) {
    if (!Has(update_window_dims, static_cast<int64_t>(d))) batch_ix.push_back(oix_outer[d]);
  }
  return e->IndexStarts(n, attr::IndexVectorDim(n), attr::ScatterDimsToOperandDims(n),
                        ScatterWindow(n, n.shape, us), batch_ix);
}

void KernelPlanner::ScatterBucketPhase(const Phase& ph, LFunction* f, bool place) {
  // Work item q: update rows [q * N / Q, (q + 1) * N / Q). counts[blk * Q + q]:
  // how many of them go to destination block blk (block-major, so the prefix
  // sum of counts up to (blk, q) is where chunk q's rows of block blk start in
  // the list, every block's rows in update order).
  const Node& n = g_.node(ph.node);
  const int64_t R = n.shape.dim(0), P = ph.count, Q = ph.scatter_chunks;
  const int64_t N = SplitUpdateRows(n, g_.node(n.operands[2]).shape).nouter;
  LBuilder b(f, &var_counter_);
  const IndexExpr q = b.For("q", LVar("begin", DType::kS64), LVar("end", DType::kS64), 0, Q - 1);
  if (!place) {
    const IndexExpr blk = b.For("blk", LInt(0), LInt(P), 0, P - 1);
    b.Store(ph.scatter_counts, blk * Q + q, DType::kS64, LInt(0));
    b.Close();
  } else {
    // off[blk]: the list position of this chunk's next row of block blk.
    b.DeclArray("off", DType::kS64, P);
    const LValue run = b.Decl("run", DType::kS64, LInt(0));
    const IndexExpr i = b.For("i", LInt(0), LInt(P * Q), 0, P * Q - 1);
    b.If(LCmpExpr(LCmp::kEq, LIndex(i.Mod(Q)), LIndex(q)));
    b.Assign(LArray("off", i.FloorDiv(Q), DType::kS64), run);
    b.Close();
    b.Assign(run, LOpExpr(OpKind::kAdd, DType::kS64, DType::kS64,
                          {run, LLoad(ph.scatter_counts, i, DType::kS64)}));
    b.Close();
  }
  const IndexExpr uo =
      b.For("uo", LIndex((q * N).FloorDiv(Q)), LIndex((q * N + N).FloorDiv(Q)), 0, N - 1);
  ElementBuilder e(ctx_, &b);
  const IndexExpr s0 = ScatterStarts(n, uo, &e).at(0);
  UseSites(e);
  // The block of row s0: the w with floor(w R / P) <= s0 < floor((w + 1) R / P).
  const IndexExpr blk = b.LetIndex("blk", ((s0 + 1) * P - 1).FloorDiv(R));
  if (!place) {
    const IndexExpr at = blk * Q + q;
    b.Store(ph.scatter_counts, at, DType::kS64,
            LOpExpr(OpKind::kAdd, DType::kS64, DType::kS64,
                    {LLoad(ph.scatter_counts, at, DType::kS64), LLit("(int64_t)1", DType::kS64)}));
  } else {
    b.LetNamed("pos", DType::kS64, LArray("off", blk, DType::kS64));
    const IndexExpr pos = IndexExpr::Variable("pos", 0, N - 1);
    b.Store(ph.scatter_rows, pos, DType::kS64, LIndex(uo));
    b.Assign(LArray("off", blk, DType::kS64), LIndex(pos + 1));
  }
  b.Close();  // uo
  b.Close();  // q
}

void KernelPlanner::ScatterRowBlockPhase(const Phase& ph, LFunction* f) {
  const Node& n = g_.node(ph.node);
  const DType t = n.shape.dtype();
  const Shape& os = n.shape;
  const Shape& us = g_.node(n.operands[2]).shape;
  const UpdateRows ur = SplitUpdateRows(n, us);
  const int64_t R = os.dim(0), P = ph.count, Q = ph.scatter_chunks;
  const int64_t row = os.num_elements() / R;
  LBuilder b(f, &var_counter_);
  const IndexExpr w = b.For("w", LVar("begin", DType::kS64), LVar("end", DType::kS64), 0, P - 1);
  // Work item w: destination rows [r0, r1).
  const IndexExpr r0 = b.LetIndex("r0", (w * R).FloorDiv(P));
  const IndexExpr r1 = b.LetIndex("r1", (w * R + R).FloorDiv(P));
  {
    const IndexExpr i = b.For("i", LIndex(r0 * row), LIndex(r1 * row), 0, os.num_elements() - 1);
    ElementBuilder copy(ctx_, &b);
    b.Store(ph.dest, i, t, copy.Value(n.operands[0], ElemIndex::Linear(i)));
    UseSites(copy);
    b.Close();
  }
  // The block's update rows: list positions [k0, k1) (ScatterBucketPhase).
  const LValue k0 = b.Decl("k0", DType::kS64, LInt(0));
  const LValue k1 = b.Decl("k1", DType::kS64, LInt(0));
  {
    const IndexExpr i = b.For("i", LInt(0), LIndex(w * Q + Q), 0, P * Q - 1);
    const LValue c = b.Let(DType::kS64, LLoad(ph.scatter_counts, i, DType::kS64));
    b.If(LCmpExpr(LCmp::kLt, LIndex(i), LIndex(w * Q)));
    b.Assign(k0, LOpExpr(OpKind::kAdd, DType::kS64, DType::kS64, {k0, c}));
    b.Close();
    b.Assign(k1, LOpExpr(OpKind::kAdd, DType::kS64, DType::kS64, {k1, c}));
    b.Close();
  }
  const IndexExpr k = b.For("k", k0, k1, 0, ur.nouter - 1);
  const int kloop = b.current();
  b.LetNamed("uo", DType::kS64, LLoad(ph.scatter_rows, k, DType::kS64));
  const IndexExpr uo = IndexExpr::Variable("uo", 0, ur.nouter - 1);
  const std::vector<IndexExpr> oix_outer = Delinearize(uo, ur.outer_dims);
  ElementBuilder upd(ctx_, &b);
  const std::map<int64_t, IndexExpr> starts = ScatterStarts(n, uo, &upd);
  // Every update row in the list lands in [r0, r1): the window loop has
  // distinct destination elements and reads no destination element it does
  // not write, so it is a simd loop.
  const IndexExpr ui = b.For("ui", LInt(0), LInt(ur.ninner), 0, ur.ninner - 1, 1, /*simd=*/true);
  const int loop = b.current();
  std::vector<IndexExpr> uix = oix_outer;
  for (const IndexExpr& e : Delinearize(ui, ur.inner_dims)) uix.push_back(e);
  ElemIndex uidx = ElemIndex::Multi(uix);
  uidx.has_lin = true;
  uidx.lin = uo * ur.ninner + ui;
  StoreUpdate(n, os, uix, starts, upd.Value(n.operands[2], uidx), ph.dest, b);
  SimdFlags(f, loop, upd);
  UseSites(upd);
  b.Close();  // ui
  PrefetchUpdateRows(ph, f, kloop, loop, k1);
  b.Close();  // k
  b.Close();  // w
}

void KernelPlanner::PrefetchUpdateRows(const Phase& ph, LFunction* f, int kloop, int uiloop,
                                       const LValue& k1) {
  // The window loop's contiguous reads of the update row (an input read at
  // uo * C + ui with unit stride in ui).
  std::map<std::string, std::pair<int, IndexExpr>> reads;  // by key: buffer, index
  std::vector<const LExpr*> stack;
  for (int id : f->block(f->stmt(uiloop).body)) {
    if (f->stmt(id).value) stack.push_back(f->stmt(id).value.get());
  }
  while (!stack.empty()) {
    const LExpr* e = stack.back();
    stack.pop_back();
    for (const LValue& a : e->args) stack.push_back(a.get());
    if (e->kind != LExprKind::kLoad || e->buffer == ph.dest) continue;
    if (k_.buffers.at(e->buffer).kind != LBuffer::kInput) continue;
    const auto vars = e->index.Variables();
    if (std::find(vars.begin(), vars.end(), "uo") == vars.end() ||
        e->index.Coefficient("ui") != std::optional<int64_t>(1)) {
      continue;
    }
    reads.emplace(std::to_string(e->buffer) + ":" + e->index.key(),
                  std::make_pair(e->buffer, e->index));
  }
  if (reads.empty()) return;
  const Node& n = g_.node(ph.node);
  const int64_t nouter = ScatterUpdateRows(n);
  const int64_t ninner = g_.node(n.operands[2]).shape.num_elements() / nouter;
  int64_t row_bytes = 0;
  for (const auto& [key, r] : reads) row_bytes += ninner * DTypeSize(k_.buffers[r.first].type);
  const int64_t ahead =
      std::clamp<int64_t>(kPrefetchBytes / std::max<int64_t>(1, row_bytes), 1, kMaxPrefetchRows);
  // if (k + ahead < k1) { uo_pf = lst[k + ahead]; prefetch each line of its row }
  const int block = f->NewBlock();
  LBuilder b(f, &var_counter_, block);
  const IndexExpr k = IndexExpr::Variable("k", 0, nouter - 1);
  b.If(LCmpExpr(LCmp::kLt, LIndex(k + ahead), k1));
  b.LetNamed("uo_pf", DType::kS64, LLoad(ph.scatter_rows, k + ahead, DType::kS64));
  const IndexExpr uo_pf = IndexExpr::Variable("uo_pf", 0, nouter - 1);
  for (const auto& [key, r] : reads) {
    const int64_t step = std::max<int64_t>(1, 64 / DTypeSize(k_.buffers[r.first].type));
    const IndexExpr j = b.For("j", LInt(0), LInt(ninner), 0, ninner - 1, step);
    b.Prefetch(r.first, r.second.Substitute("uo", uo_pf).Substitute("ui", j));
    b.Close();
  }
  b.Close();
  // Before the window loop in the body of the loop over the list.
  const int body = f->stmt(kloop).body;
  const std::vector<int>& stmts = f->block(body);
  const size_t pos = std::find(stmts.begin(), stmts.end(), uiloop) - stmts.begin();
  LStmt seq;
  seq.kind = LStmtKind::kSeq;
  seq.body = block;
  f->Insert(body, pos, seq);
}

}  // namespace ember::codegen
