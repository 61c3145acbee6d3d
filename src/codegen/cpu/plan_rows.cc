// Row kernels (kernel_planner.h). A row fusion (ember/ir/fusion_analysis.h:
// reductions over the same innermost dims {k..r-1} of operands of one shape
// S, everything computed from them consumed per row, outputs of shape S or
// the outer shape) runs as ONE phase over the rows: for each row, each
// reduction in node order is one pass over the row (its value a local
// scalar), then the row's outputs are written in one more pass. The row (K
// elements) stays in cache between passes, so the input is read from memory
// once (softmax: max pass, exp-sum pass, normalize pass). A row fusion of
// fewer than kMinRowKernelRows rows runs as phases, like an input fusion.
//
// Row buffers: an expensive value (a transcendental, a division, ...) that
// several passes compute is stored by the first of them into a row-sized
// local array and read back by the later ones (softmax: the exp-sum pass
// stores exp(x - max), the normalize pass divides it). Non-temporal stores:
// when the row-shaped outputs total at least kStreamBytes, the 64-byte-aligned
// middle of each row is computed into a 64-byte local block and written with
// ember_stream64 (no write-allocate traffic); the unaligned head and tail,
// and rows whose outputs are misaligned differently, take the plain loop.
#include <algorithm>

#include "codegen/cpu/c_types.h"
#include "codegen/cpu/kernel_planner.h"
#include "ember/ir/attributes.h"
#include "ember/ir/fusion_analysis.h"

namespace ember::codegen {
namespace {

constexpr int64_t kMinRowKernelRows = 8;
// Row buffers live on the stack: at most this many bytes per kernel.
constexpr int64_t kRowBufferBytes = 64 << 10;
// Row kernels whose row-shaped outputs total at least this many bytes
// (beyond the caches) write them with non-temporal stores.
constexpr int64_t kStreamBytes = int64_t{4} << 20;

// Values worth keeping in a row buffer rather than recomputing per pass:
// float values of the expensive ops (element cost >= kExpensiveElementCost:
// transcendental functions, division).
bool IsRowBufferWorthy(const Node& n) {
  return !n.shape.is_tuple() && IsFloat(n.shape.dtype()) && IsElementwise(n.op) &&
         ElementCost(n.op) >= kExpensiveElementCost;
}

}  // namespace

// The row plan when the kernel is a row fusion (AnalyzeFusion) of at least
// kMinRowKernelRows non-empty rows (fewer rows leave threads idle: phases).
KernelPlanner::RowPlan KernelPlanner::PlanRows() const {
  RowPlan rp;
  const FusionAnalysis a = AnalyzeFusion(g_);
  if (a.kind != FusionKind::kRow || a.row.rows < kMinRowKernelRows || a.row.row_length == 0) {
    return rp;
  }
  rp.ok = true;
  rp.k = a.row.outer_rank;
  rp.full = a.row.shape;
  rp.rows = a.row.rows;
  rp.K = a.row.row_length;
  rp.reduces = a.reduces;
  return rp;
}

// Full-shaped nodes reached from `roots` through elementwise ops of shape
// `full` (the values a pass over the row computes per element).
std::set<NodeId> KernelPlanner::RowPassNodes(const std::vector<NodeId>& roots,
                                             const std::vector<int64_t>& full) const {
  std::set<NodeId> seen;
  std::vector<NodeId> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    const Node& n = g_.node(id);
    if (n.shape.is_tuple() || n.shape.dims() != full || !IsElementwise(n.op)) continue;
    if (!seen.insert(id).second) continue;
    for (NodeId o : n.operands) stack.push_back(o);
  }
  return seen;
}

void KernelPlanner::RowPhase(LFunction* f) {
  const RowPlan& rp = row_;
  const int k = rp.k;
  const auto& outs = g_.outputs();
  std::vector<int> out_buf(outs.size());
  for (size_t j = 0; j < outs.size(); ++j) {
    out_buf[j] = OutputBuffer(static_cast<int>(j), "out" + std::to_string(j));
  }
  std::vector<NodeId> full_roots;
  for (NodeId o : outs) {
    if (g_.node(o).shape.dims() == rp.full) full_roots.push_back(o);
  }
  // Row buffers: values several passes compute, stored by the first.
  std::vector<std::set<NodeId>> pass_nodes;
  for (NodeId id : rp.reduces)
    pass_nodes.push_back(RowPassNodes({g_.node(id).operands[0]}, rp.full));
  pass_nodes.push_back(RowPassNodes(full_roots, rp.full));
  std::vector<std::vector<NodeId>> stores(rp.reduces.size());
  LBuilder b(f, &var_counter_);
  int64_t scratch_bytes = 0;
  for (const Node& n : g_.nodes()) {
    if (!IsRowBufferWorthy(n)) continue;
    int first = -1, uses = 0;
    for (size_t p = 0; p < pass_nodes.size(); ++p) {
      if (!pass_nodes[p].count(n.id)) continue;
      if (first < 0) first = static_cast<int>(p);
      ++uses;
    }
    const int64_t bytes =
        rp.K * DTypeSize(n.shape.dtype() == DType::kF64 ? DType::kF64 : DType::kF32);
    if (uses < 2 || first >= static_cast<int>(rp.reduces.size()) ||
        scratch_bytes + bytes > kRowBufferBytes) {
      continue;
    }
    scratch_bytes += bytes;
    stores[first].push_back(n.id);
    b.DeclArray("scr" + std::to_string(n.id), n.shape.dtype(), rp.K);
  }
  // Large row-shaped outputs of one element size take non-temporal stores.
  std::vector<size_t> full_outs;
  for (size_t j = 0; j < outs.size(); ++j) {
    if (g_.node(outs[j]).shape.dims() == rp.full) full_outs.push_back(j);
  }
  int esize = 0;
  int64_t out_bytes = 0;
  bool stream = true;
  for (size_t j : full_outs) {
    const DType t = g_.node(outs[j]).shape.dtype();
    const int sz = static_cast<int>(DTypeSize(t));
    stream &= (sz == 4 || sz == 8) && (esize == 0 || esize == sz) && t != DType::kPred;
    esize = sz;
    out_bytes += rp.rows * rp.K * sz;
  }
  stream &= esize > 0 && out_bytes >= kStreamBytes;
  const std::string streamed = "streamed";
  if (stream) b.Decl(streamed, DType::kS64, LInt(0));

  const IndexExpr o =
      b.For("o", LVar("begin", DType::kS64), LVar("end", DType::kS64), 0, rp.rows - 1);
  const std::vector<IndexExpr> outer_ix =
      Delinearize(o, std::vector<int64_t>(rp.full.begin(), rp.full.begin() + k));
  ctx_.row_base = o * rp.K;
  for (size_t ri = 0; ri < rp.reduces.size(); ++ri) {
    const NodeId id = rp.reduces[ri];
    const Node& n = g_.node(id);
    const DType t = n.shape.dtype();
    HoistRowInvariants({n.operands[0]}, rp.full, outer_ix, &b);
    b.Comment("pass: %" + std::to_string(id) + " reduce (" + attr::ToApply.Text(n.attrs) + ")");
    const LValue v = ReduceOneOutput(n, outer_ix, &b, stores[ri]);
    // The value later passes see is the stored one (bf16/f16 rounded).
    ctx_.scalars[ValueKey(g_, id, ElemIndex::Multi(outer_ix))] =
        b.LetNamed("rv" + std::to_string(id), t, LConvert(t, t, v));
    for (NodeId st : stores[ri]) ctx_.row_buffers[st] = "scr" + std::to_string(st);
  }
  // Output pass(es): outer-shaped outputs once per row, full-shaped ones in
  // one simd loop over the row.
  HoistRowInvariants(full_roots, rp.full, outer_ix, &b);
  {
    ElemIndex oidx = ElemIndex::Multi(outer_ix);
    oidx.has_lin = true;
    oidx.lin = o;
    ElementBuilder e(ctx_, &b);
    bool first = true;
    for (size_t j = 0; j < outs.size(); ++j) {
      const Node& n = g_.node(outs[j]);
      if (n.shape.dims() == rp.full) continue;
      if (first) b.Comment("outputs of the row's outer shape");
      first = false;
      b.Store(out_buf[j], o, n.shape.dtype(), e.Value(outs[j], oidx));
    }
    UseSites(e);
  }
  if (!full_outs.empty()) {
    const std::vector<int64_t> inner_dims(rp.full.begin() + k, rp.full.end());
    const IndexExpr base = o * rp.K;
    // The elements of the row at j (one loop's counter).
    auto row_index = [&](const IndexExpr& j) {
      std::vector<IndexExpr> ix = outer_ix;
      const std::vector<IndexExpr> in = Delinearize(j, inner_dims);
      ix.insert(ix.end(), in.begin(), in.end());
      ElemIndex idx = ElemIndex::Multi(ix);
      idx.has_lin = true;
      idx.lin = base + j;
      return idx;
    };
    b.Comment("outputs of the row's shape: one pass");
    // [h, m): the streamed middle of the row (empty unless streaming).
    IndexExpr h = IndexExpr::Constant(rp.K), m = IndexExpr::Constant(rp.K);
    if (stream) {
      const int W = 64 / esize;
      const LValue hv = b.Decl(b.NewName("h"), DType::kS64, LInt(rp.K));
      const LValue mv = b.Decl(b.NewName("m"), DType::kS64, LInt(rp.K));
      const LValue a0 = b.Let(DType::kS64, LMisalign(out_buf[full_outs[0]], base));
      const IndexExpr a0i = IndexExpr::Variable(a0->name, 0, 63);
      LValue same = LCmpExpr(LCmp::kEq, LIndex(a0i.Mod(esize)), LInt(0));
      for (size_t i = 1; i < full_outs.size(); ++i) {
        same = LAnd(same, LCmpExpr(LCmp::kEq,
                                   b.Let(DType::kS64, LMisalign(out_buf[full_outs[i]], base)), a0));
      }
      b.If(same);
      // mis = a0 / esize elements into the line: h = the first aligned
      // element (at most K), m = h + whole blocks of W.
      const IndexExpr mis = a0i.FloorDiv(esize);
      const IndexExpr hx = (IndexExpr::Constant(W) - mis).Mod(W);
      b.Assign(hv, LSelect(LCmpExpr(LCmp::kGt, LIndex(hx), LInt(rp.K)), LInt(rp.K), LIndex(hx),
                           DType::kS64));
      const IndexExpr hvar = IndexExpr::Variable(hv->name, 0, rp.K);
      b.Assign(mv, LIndex(hvar + (IndexExpr::Constant(rp.K) - hvar).FloorDiv(W) * W));
      const IndexExpr mvar = IndexExpr::Variable(mv->name, 0, rp.K);
      const IndexExpr jb = b.For("jb", LIndex(hvar), LIndex(mvar), 0, rp.K - 1, W);
      for (size_t j : full_outs) {
        b.DeclArray("st" + std::to_string(j), g_.node(outs[j]).shape.dtype(), W,
                    LDeclKind::kStorage);
      }
      const IndexExpr l = b.For("l", LInt(0), LInt(W), 0, W - 1, 1, /*simd=*/true);
      const int loop = b.current();
      ElementBuilder en(ctx_, &b);
      std::vector<LValue> vals;
      for (size_t j : full_outs) vals.push_back(en.Value(outs[j], row_index(jb + l)));
      // Blocks of 4- or 8-byte non-pred elements: storage and compute types agree.
      for (size_t i = 0; i < full_outs.size(); ++i) {
        b.Assign(LArray("st" + std::to_string(full_outs[i]), l,
                        g_.node(outs[full_outs[i]]).shape.dtype()),
                 vals[i]);
      }
      SimdFlags(f, loop, en);
      UseSites(en);
      b.Close();
      for (size_t j : full_outs) b.Stream(out_buf[j], base + jb, "st" + std::to_string(j));
      b.Close();
      b.If(LCmpExpr(LCmp::kGt, LIndex(mvar), LIndex(hvar)));
      b.Assign(LVar(streamed, DType::kS64), LInt(1));
      b.Close();
      b.Close();
      h = hvar;
      m = mvar;
    }
    const IndexExpr part = b.For("part", LInt(0), LInt(2), 0, 1);  // [0, h) and [m, K)
    const LValue j0 = b.Let(DType::kS64, LSelect(LCmpExpr(LCmp::kNe, LIndex(part), LInt(0)),
                                                 LIndex(m), LInt(0), DType::kS64));
    const LValue j1 = b.Let(DType::kS64, LSelect(LCmpExpr(LCmp::kNe, LIndex(part), LInt(0)),
                                                 LInt(rp.K), LIndex(h), DType::kS64));
    const IndexExpr j = b.For("j", j0, j1, 0, rp.K - 1, 1, /*simd=*/true);
    const int loop = b.current();
    ElementBuilder e(ctx_, &b);
    std::vector<LValue> vals;
    for (size_t jj : full_outs) vals.push_back(e.Value(outs[jj], row_index(j)));
    for (size_t i = 0; i < full_outs.size(); ++i) {
      b.Store(out_buf[full_outs[i]], base + j, g_.node(outs[full_outs[i]]).shape.dtype(), vals[i]);
    }
    SimdFlags(f, loop, e);
    UseSites(e);
    b.Close();
    b.Close();
  }
  b.Close();  // the row loop
  if (stream) {
    b.If(LCmpExpr(LCmp::kNe, LVar(streamed, DType::kS64), LInt(0)));
    b.Fence();
    b.Close();
  }
  ctx_.scalars.clear();
  ctx_.row_buffers.clear();
}

}  // namespace ember::codegen
