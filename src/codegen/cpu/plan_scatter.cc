// Scatter phases (kernel_planner.h): one work item (XLA's dimension numbers,
// as src/eval/indexing.cc) that copies the operand into the destination, then
// combines the updates in row-major order of the update index space, so
// duplicate indices combine in the interpreter's order. An out-of-range start
// sets the node's error flag (the element goes to start 0: the result is
// discarded).
#include <algorithm>

#include "codegen/cpu/kernel_planner.h"
#include "ember/ir/attributes.h"

namespace ember::codegen {

void KernelPlanner::ScatterPhase(const Phase& ph, LFunction* f) {
  const Node& n = g_.node(ph.node);
  const DType t = n.shape.dtype();
  const ReduceKind kind = attr::ToApply(n);
  const auto& update_window_dims = attr::UpdateWindowDims(n);
  const auto& inserted = attr::InsertedWindowDims(n);
  const Shape& os = n.shape;
  const Shape& us = g_.node(n.operands[2]).shape;
  auto has = [](const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  LBuilder b(f, &var_counter_);
  {
    const IndexExpr i = b.For("i", LInt(0), LInt(os.num_elements()), 0, os.num_elements() - 1);
    ElementBuilder copy(ctx_, &b);
    b.Store(ph.dest, i, t, copy.Value(n.operands[0], ElemIndex::Linear(i)));
    UseSites(copy);
    b.Close();
  }
  std::vector<int64_t> window_operand_dims, window(os.rank(), 1);
  for (int d = 0; d < os.rank(); ++d) {
    if (!has(inserted, d)) window_operand_dims.push_back(d);
  }
  for (size_t k = 0; k < update_window_dims.size(); ++k) {
    window[window_operand_dims[k]] = us.dim(static_cast<int>(update_window_dims[k]));
  }
  const IndexExpr u = b.For("u", LInt(0), LInt(us.num_elements()), 0, us.num_elements() - 1);
  const std::vector<IndexExpr> uix = Delinearize(u, us.dims());
  std::vector<IndexExpr> batch_ix;
  for (int d = 0; d < us.rank(); ++d) {
    if (!has(update_window_dims, d)) batch_ix.push_back(uix[d]);
  }
  ElementBuilder upd(ctx_, &b);
  const std::map<int64_t, IndexExpr> starts = upd.IndexStarts(
      n, attr::IndexVectorDim(n), attr::ScatterDimsToOperandDims(n), window, batch_ix);
  std::vector<IndexExpr> oix(os.rank());
  size_t k = 0;  // position among the window dims
  for (int d = 0; d < os.rank(); ++d) {
    IndexExpr off;
    if (!has(inserted, d)) off = uix[update_window_dims[k++]];
    auto s0 = starts.find(d);
    oix[d] = s0 == starts.end() ? off : s0->second + off;
  }
  ElemIndex ui = ElemIndex::Multi(uix);
  ui.has_lin = true;
  ui.lin = u;
  const LValue v = upd.Value(n.operands[2], ui);
  const IndexExpr at = LinOf(os, ElemIndex::Multi(oix));
  const LValue value =
      kind == ReduceKind::kAssign ? v : LCombine(kind, t, LLoad(ph.dest, at, t), v);
  b.Store(ph.dest, at, t, value);
  UseSites(upd);
  b.Close();
}

}  // namespace ember::codegen
