// Private: Graph -> loop IR of one fused kernel (loop_ir.h), one planner per
// kind of phase:
//   kernel_planner.cc  the kernel: which values are materialized (each reduce
//                      and scatter, then each graph output), buffers, tables,
//                      error sites, the entry's launches, the header comment;
//   plan_loop.cc       elementwise phases: one flat simd loop when every
//                      index is affine in the element number, else a loop
//                      over rows with the innermost dim vectorized and row
//                      invariants hoisted; the f32 multiply-add variant;
//   plan_reduce.cc     reductions: blocked lane accumulators with pairwise
//                      chunk combination, or the interpreter's exact tree for
//                      small float reductions; column reductions (innermost
//                      dim kept) vectorized across a block of columns, in
//                      each column the same order as the per-output loop;
//                      reductions split at their kept dims (inner runs
//                      first, then pushed at their level: the same order);
//   plan_rows.cc       row kernels: one phase over rows, one pass per reduce,
//                      row buffers, non-temporal stores;
//   plan_scatter.cc    scatter phases (in update order; by blocks of
//                      destination rows when the index picks the row, over
//                      update rows bucketed by block).
// docs/codegen.md describes the kernels they build.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpu/element_builder.h"
#include "codegen/cpu/loop_ir.h"
#include "ember/codegen/cpu.h"

namespace ember::codegen {

// Nodes computed into a buffer by a phase of their own (read through it by later phases).
inline bool Materialized(OpKind op) { return op == OpKind::kReduce || op == OpKind::kScatter; }

// Checks support (CheckKernelSupported), plans, prints: the kernel's source.
StatusOr<KernelSource> EmitKernelSourceFromLoopIr(const Graph& g, int kernel_index,
                                                  bool vector_math);

class KernelPlanner {
 public:
  KernelPlanner(const Graph& g, int kernel_index);
  // The kernel's loop IR (the graph must pass CheckKernelSupported).
  LKernel Plan();

 private:
  struct Phase {
    NodeId node;
    int dest;               // the buffer it writes
    std::string dest_text;  // "c->out[2]" / "c->tmp[0]" / "rows"
    int64_t count;          // work items (elements, rows, 1 for a scatter, column blocks)
    int64_t grain;
    int64_t col_width = 0;  // a column reduce: the columns of a work item (else 0)
    // A column reduce split by rows (ColumnPlan): `parts` aligned runs of
    // 2^part_level chunks, one work item per column block and run in a first
    // phase, each run's partial result per column into `partials` (one temp
    // buffer per member); this phase pushes them and reduces the rest.
    int64_t parts = 0;
    int part_level = 0;
    std::vector<int> partials;
    // Values computed in the same pass and their buffers: column reduces (ColumnSiblings),
    // or the other outputs of the node's loop in an elementwise phase (OutputLoops).
    std::vector<NodeId> siblings;
    std::vector<int> sibling_dests;
    // A reduce split at its last kept dim (InnerSplit): the reduced dims
    // after it (`inner_dims`, each of their sets a whole aligned subtree of
    // 2^inner_level chunks) reduced by a first phase into `inner_temp` (the
    // operand's other dims), which this phase pushes at that level.
    std::vector<int> inner_dims;
    int inner_level = 0;
    int inner_temp = -1;
    // A scatter by row blocks (count > 1): its update rows bucketed by
    // destination block in `scatter_chunks` chunks (ScatterBucketPhase), the
    // counts (s64[blocks * chunks], block-major) and the list of update rows
    // (s64[rows], block by block, each in update order).
    int64_t scatter_chunks = 0;
    int scatter_counts = -1, scatter_rows = -1;
  };

  // kernel_planner.cc
  void PlanPhases();
  void BuildPhase(int k);
  int OutputBuffer(int j, const std::string& name);
  // Declares the phase's data-error flags at its top and stores them at its
  // end (phase_sites_).
  void FinishFlags(LFunction* f);
  void UseSites(const ElementBuilder& e) {
    phase_sites_.insert(e.used_sites().begin(), e.used_sites().end());
  }
  // Marks the simd loop `stmt` with reduction(|:) clauses for `e`'s flags.
  void SimdFlags(LFunction* f, int stmt, const ElementBuilder& e);

  // plan_loop.cc
  // The nodes a loop phase stores: its node, then its siblings.
  static std::vector<NodeId> LoopRoots(const Phase& ph);
  // Computes the loop roots' elements at `idx` (a root of other dims than the phase's
  // node: at linear index `lin`), then stores each at `lin`: every value of the iteration
  // before any store, so an output written over an input (ElementwiseIntoOutput) reads
  // the input first.
  void StoreLoopRoots(const Phase& ph, ElementBuilder* e, LBuilder* b, const ElemIndex& idx,
                      const IndexExpr& lin);
  void LoopPhase(Phase* ph, LFunction* f);
  // Builds one loop over the phase into `b`: flat (row_len == 0) or by rows
  // of row_len elements (a divisor of the innermost dim); with `tile` > 0 (rows of the
  // whole innermost dim: ColumnTile) the rows' columns in blocks of `tile`, each block
  // over the chunk's rows. `used_digits`: an index kept a digit of the element number
  // (flat) or of the row's counter.
  void LoopNest(const Phase& ph, LBuilder* b, int64_t row_len, int64_t tile, bool* used_digits);
  // LoopNest on a detached block of `f` (discarded), unblocked (blocking leaves every
  // index as it is): only `digits` is kept.
  void TrialLoopNest(const Phase& ph, LFunction* f, int64_t row_len, bool* digits);
  // The row length of a phase whose flat loop needs digits: the innermost
  // dim, else the longest divisor of it (>= kMinRowLength, at most
  // kMaxRowLengthTrials tried) whose row loop reads every index without a
  // digit of the row's counter; the innermost dim when none does.
  int64_t RowLength(const Phase& ph, LFunction* f);
  // The shortest row loop: a phase whose innermost dim is shorter runs flat, with the
  // digits of the element number (plan_loop.cc).
  static constexpr int64_t kMinRowLength = 8;
  static constexpr size_t kMaxRowLengthTrials = 12;
  // The column block of a phase's rows of `row_len` elements: kTransposeTile when the
  // rows are the whole innermost dim (64+ columns, 32+ rows) and the loop reads a
  // transpose that moves the innermost dim, reached through elementwise ops of the
  // phase's dims (consecutive elements of a row then read its operand a row apart), so
  // the operand lines one block reads are still in cache for the block's next rows (an
  // untiled 1024x1024 f32 transpose read each source line once per output row); else 0.
  int64_t ColumnTile(const Phase& ph, int64_t row_len) const;
  static constexpr int64_t kTransposeTile = 32;
  // Calls `visit` once on each node of dims `full` reached from `roots` through
  // elementwise ops (materialized values and row buffers excluded), and goes on into the
  // operands of an elementwise node for which it returns true.
  void WalkRowNodes(const std::vector<NodeId>& roots, const std::vector<int64_t>& full,
                    const std::function<bool(const Node&)>& visit) const;
  // Computes row-broadcast operands reached from `roots` once per row into
  // locals (ctx_.scalars). `outer` indexes the row's leading dims.
  void HoistRowInvariants(const std::vector<NodeId>& roots, const std::vector<int64_t>& full,
                          const std::vector<IndexExpr>& outer, LBuilder* b);

  // plan_reduce.cc
  void ReducePhase(const Phase& ph, LFunction* f);
  // Statements computing reduce `n` at its output multi-index `kept`; returns
  // the finished value (before the store's rounding). `stores`: nodes of the
  // operand's shape whose value at each element the loop also writes into
  // its row buffer (row kernels).
  // `only`: reduce these dims of the operand instead of the node's (`kept`
  // then indexes all the others, in operand order); `raw`: the finished
  // counter's value as it is (no combine with +0: a partial result).
  LValue ReduceOneOutput(const Node& n, const std::vector<IndexExpr>& kept, LBuilder* b,
                         const std::vector<NodeId>& stores = {},
                         const std::vector<int>* only = nullptr, bool raw = false);
  // A float sum or product (f32/f64, more than kExactTreeMax elements) that
  // the per-output loop would read strided, a reduced dim before a kept one
  // (BatchNorm's channel sums over (0, 2, 3)): the reduced dims after the
  // last kept dim, when their lane blocks are 16 * 2^level (their value per
  // index of the other dims is one node of the output's binary counter), in
  // inner_dims/inner_level; else inner_dims empty.
  void InnerSplit(const Node& n, Phase* ph) const;
  // The first phase of such a split: each subtree's value into inner_temp.
  void InnerReducePhase(const Phase& ph, LFunction* f);
  LValue ExactTreeReduce(const Node& n, const std::vector<IndexExpr>& xix, LBuilder* b,
                         const std::vector<NodeId>& stores);
  void StoreRowValues(ElementBuilder& e, const std::vector<NodeId>& stores, const ElemIndex& idx,
                      LBuilder* b);
  // Column reductions (the operand's innermost dim is kept): the columns of
  // one work item (0 when reduce `n` takes the per-output loop) and, for a
  // float sum or product over one dim with few column blocks, the split of
  // its rows into aligned runs of chunks (parts 0: no split).
  struct ColumnPlanInfo {
    int64_t width = 0;
    int64_t parts = 0;
    int part_level = 0;
  };
  ColumnPlanInfo ColumnPlan(const Node& n) const;
  int64_t ColumnWidth(const Node& n) const { return ColumnPlan(n).width; }
  // Whether column reduce `n` can join phase `ph`'s pass: the same operand
  // dims, reduced dims, lanes and loop kind, at most kMaxColumnSiblings, and
  // no member read by `n`.
  bool ColumnSiblings(const Phase& ph, const Node& n) const;
  static constexpr size_t kMaxColumnSiblings = 3;
  // `runs_phase`: the first phase of a split reduce (its runs' partial
  // results), else the phase that finishes it.
  void ColumnReducePhase(const Phase& ph, LFunction* f, bool runs_phase = false);

  // plan_rows.cc
  struct RowPlan {
    bool ok = false;
    int k = 0;                  // outer rank
    std::vector<int64_t> full;  // the rows' shape S
    int64_t rows = 0, K = 0;
    std::vector<NodeId> reduces;  // node order
  };
  RowPlan PlanRows() const;
  void RowPhase(LFunction* f);
  std::set<NodeId> RowPassNodes(const std::vector<NodeId>& roots,
                                const std::vector<int64_t>& full) const;

  // plan_scatter.cc
  void ScatterPhase(const Phase& ph, LFunction* f);
  // The work items of scatter `n`: blocks of destination rows (at most
  // kScatterRowBlocks) when its dim 0 is an inserted dim chosen by the index,
  // else 1 (one serial item).
  int64_t ScatterRowBlocks(const Node& n) const;
  void ScatterRowBlockPhase(const Phase& ph, LFunction* f);
  static constexpr int64_t kScatterRowBlocks = 16;
  // The chunks of update rows the bucketing phases split (at most
  // kScatterRowBlocks, from the shape alone).
  int64_t ScatterChunks(const Node& n) const;
  // The update rows of scatter `n` (its update index space up to the last
  // batch dim; each row one window).
  int64_t ScatterUpdateRows(const Node& n) const;
  // The start along destination dim 0 of update row `uo` (range-checked:
  // an out-of-range start flags the node and reads 0).
  std::map<int64_t, IndexExpr> ScatterStarts(const Node& n, const IndexExpr& uo, ElementBuilder* e);
  // The bucketing phases before a row-block scatter: counts of each chunk's
  // rows per destination block, then (place) the list of the rows.
  void ScatterBucketPhase(const Phase& ph, LFunction* f, bool place);
  // Prefetches the input lines of the update row `ahead` list entries on
  // (about kPrefetchBytes of rows, at most kMaxPrefetchRows), before window
  // loop `uiloop` in the body of list loop `kloop`: the rows of a block are
  // scattered through the updates, so the hardware prefetcher does not see
  // them coming.
  void PrefetchUpdateRows(const Phase& ph, LFunction* f, int kloop, int uiloop, const LValue& k1);
  static constexpr int64_t kPrefetchBytes = 4096;
  static constexpr int64_t kMaxPrefetchRows = 16;

  const Graph& g_;
  int kernel_index_;
  LKernel k_;
  KernelContext ctx_;
  std::vector<Phase> phases_;
  RowPlan row_;
  std::set<int> written_outputs_;
  std::set<int> phase_sites_;
  int var_counter_ = 0;
};

}  // namespace ember::codegen
