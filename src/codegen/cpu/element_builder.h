// Private: builds the loop-IR statements that compute one node's element at
// a given index (loop fusion: every element is recomputed from the kernel's
// inputs, so elementwise and data-movement chains need no intermediate
// buffer). Data-movement ops are index arithmetic from the output index back
// to their operand's (IndexExpr: simplified as it is composed, so a reshape
// of a transpose of a slice is one strided index); concatenate and pad
// become branches, gather a checked index read. Materialized nodes (reduces,
// scatters) are read from their buffers.
//
// The walk over the operand DAG is iterative (an explicit stack of frames):
// a chain as deep as CheckKernelSupported allows costs heap, not stack.
// Values are memoized per (node, linear index) within a branch scope, so a
// node used twice at the same index is computed once.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpu/f32_muladd.h"
#include "codegen/cpu/loop_ir.h"
#include "ember/ir/graph.h"

namespace ember::codegen {

// An element index of some node: its multi-index and/or its row-major linear
// index (at least one is known).
struct ElemIndex {
  bool has_multi = false;
  std::vector<IndexExpr> multi;
  bool has_lin = false;
  IndexExpr lin;

  static ElemIndex Multi(std::vector<IndexExpr> ix);
  static ElemIndex Linear(IndexExpr lin);
  static ElemIndex Scalar();
};

// Linear index of shape `s` at `idx` / its multi-index.
IndexExpr LinOf(const Shape& s, const ElemIndex& idx);
std::vector<IndexExpr> MultiOf(const Shape& s, const ElemIndex& idx);

// The memo key of node `id`'s element at `idx`: equal keys, equal elements.
std::string ValueKey(const Graph& g, NodeId id, const ElemIndex& idx);

// What the builder knows about the kernel (the planner updates it per phase
// and per loop).
struct KernelContext {
  const Graph* graph = nullptr;
  LKernel* kernel = nullptr;
  std::map<NodeId, int> parameter_buffer;  // parameter node -> LKernel buffer
  std::map<NodeId, int> constant_tables;   // non-splat constant -> its table buffer
  std::map<NodeId, int> materialized;      // node computed by an earlier phase -> buffer
  // Values held in a local for the current iteration (a row's reduction,
  // hoisted row invariants), by ValueKey: a node reached at another index
  // (through a reverse, say) is computed there, not read from the local.
  std::map<std::string, LValue> scalars;
  // Row kernels: values an earlier pass over the row stored in a local
  // array; the element at linear index lin is array[lin - row_base].
  std::map<NodeId, std::string> row_buffers;
  IndexExpr row_base;
  // Nodes whose data errors are reported, in node order; the site number is
  // the position: integer divide/remainder (a zero divisor), gather and
  // scatter (a start index out of range). Flag variable: zd<site>.
  std::vector<NodeId> error_sites;
  // Multiply-adds the current loop computes in f32 (f32_muladd.h), by root.
  std::map<NodeId, F32MulAdd> f32_muladds;

  int Site(NodeId id) const;
};

class ElementBuilder {
 public:
  ElementBuilder(const KernelContext& ctx, LBuilder* b);

  // Appends statements computing node `id` at `idx` at the builder's
  // insertion point; returns a value of the node's compute type.
  LValue Value(NodeId id, const ElemIndex& idx);

  // Error sites whose flags the statements set (zd<site> |= ...).
  const std::set<int>& used_sites() const { return used_sites_; }
  // Whether an index the statements read at (a load, iota, branch) kept a
  // floor division or modulo: the caller then prefers a loop with explicit
  // multi-indices.
  bool used_digits() const { return used_digits_; }
  // Counts only the digits that read variable `var` (the innermost loop's
  // counter; "" = every digit): digits of the outer counters alone are
  // invariant in that loop.
  void set_digit_var(const std::string& var) { digit_var_ = var; }

  // Gather / scatter node `n` (operand 1: the indices): the start of the
  // index vector at batch position `batch_ix` (the indices' dims except
  // index_vector_dim), per indexed operand dim (`index_to_operand`, windows
  // `window`): an int64 variable in [0, dim - window], 0 with n's error
  // flag set when out of range. Dims that are not indexed are absent.
  std::map<int64_t, IndexExpr> IndexStarts(const Node& n, int64_t index_vector_dim,
                                           const std::vector<int64_t>& index_to_operand,
                                           const std::vector<int64_t>& window,
                                           const std::vector<IndexExpr>& batch_ix);

 private:
  struct Frame;
  struct Step;
  Step Advance(Frame& f, LValue child);
  Step Leaf(Frame& f);
  Step Elementwise(Frame& f);
  Step Concatenate(Frame& f);
  Step Pad(Frame& f);
  Step Gather(Frame& f);
  ElemIndex OperandIndex(const Node& n, const ElemIndex& idx);  // 1:1 data movement
  IndexExpr Lin(const Shape& s, const ElemIndex& idx);          // LinOf, noting digits
  std::vector<IndexExpr> Multi(const Shape& s, const ElemIndex& idx);
  std::string Key(NodeId id, const ElemIndex& idx) const;
  const LValue* Lookup(const std::string& key) const;
  IndexExpr LetRanged(const IndexExpr& e, int64_t lo, int64_t hi);
  // Notes whether `e` keeps a digit (of digit_var_ when set).
  void NoteDigits(const IndexExpr& e);
  // `idx` with every component larger than kMaxIndexSize bound to a variable.
  ElemIndex Bound(ElemIndex idx);

  const KernelContext& ctx_;
  const Graph& g_;
  LBuilder* b_;
  std::vector<std::map<std::string, LValue>> scopes_;
  std::set<int> used_sites_;
  bool used_digits_ = false;
  std::string digit_var_;
};

}  // namespace ember::codegen
