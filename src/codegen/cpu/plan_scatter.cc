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
// destination rows: it copies the operand's rows of its block, then walks
// every update in the same row-major order and combines those whose row is
// in its block (the index is read once per update row; the window is the
// inner loop). Each destination element still combines its updates in update
// order, so the values are the single work item's bits whatever the threads.
#include <algorithm>
#include <cstdlib>
#include <map>
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

void KernelPlanner::ScatterRowBlockPhase(const Phase& ph, LFunction* f) {
  const Node& n = g_.node(ph.node);
  const DType t = n.shape.dtype();
  const auto& update_window_dims = attr::UpdateWindowDims(n);
  const Shape& os = n.shape;
  const Shape& us = g_.node(n.operands[2]).shape;
  const int64_t R = os.dim(0), P = ph.count;
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
  // The update's dims split after its last batch dim: the outer ones (every
  // batch dim among them) pick the row, the inner ones (window dims) walk it.
  int split = 0;
  for (int d = 0; d < us.rank(); ++d) {
    if (!Has(update_window_dims, d)) split = d + 1;
  }
  const std::vector<int64_t> outer_dims(us.dims().begin(), us.dims().begin() + split);
  const std::vector<int64_t> inner_dims(us.dims().begin() + split, us.dims().end());
  int64_t nouter = 1, ninner = 1;
  for (int64_t d : outer_dims) nouter *= d;
  for (int64_t d : inner_dims) ninner *= d;
  const IndexExpr uo = b.For("uo", LInt(0), LInt(nouter), 0, nouter - 1);
  const std::vector<IndexExpr> oix_outer = Delinearize(uo, outer_dims);
  std::vector<IndexExpr> batch_ix;
  for (int d = 0; d < split; ++d) {
    if (!Has(update_window_dims, d)) batch_ix.push_back(oix_outer[d]);
  }
  ElementBuilder upd(ctx_, &b);
  const std::map<int64_t, IndexExpr> starts =
      upd.IndexStarts(n, attr::IndexVectorDim(n), attr::ScatterDimsToOperandDims(n),
                      ScatterWindow(n, os, us), batch_ix);
  const IndexExpr s0 = starts.at(0);
  b.If(LAnd(LCmpExpr(LCmp::kGe, LIndex(s0), LIndex(r0)),
            LCmpExpr(LCmp::kLt, LIndex(s0), LIndex(r1))));
  const IndexExpr ui = b.For("ui", LInt(0), LInt(ninner), 0, ninner - 1);
  std::vector<IndexExpr> uix = oix_outer;
  for (const IndexExpr& e : Delinearize(ui, inner_dims)) uix.push_back(e);
  ElemIndex uidx = ElemIndex::Multi(uix);
  uidx.has_lin = true;
  uidx.lin = uo * ninner + ui;
  StoreUpdate(n, os, uix, starts, upd.Value(n.operands[2], uidx), ph.dest, b);
  UseSites(upd);
  b.Close();  // ui
  b.Close();  // if
  b.Close();  // uo
  b.Close();  // w
}

}  // namespace ember::codegen
