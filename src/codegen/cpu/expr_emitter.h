// Private: emits the C++ statements that compute one node's element at a
// given index, recursing through operands (loop fusion: every element is
// recomputed from the kernel's inputs; elementwise and data-movement ops
// need no intermediate buffer). Data-movement ops become index arithmetic
// from the output index back to their operand's index; concatenate and pad
// become branches. Materialized nodes (reduces) are read from their buffers.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpu/f32_muladd.h"
#include "ember/ir/graph.h"

namespace ember::codegen {

// An element index of some node: a multi-index (one int64 C++ expression
// per dim) and/or the row-major linear index. At least one is known.
struct Index {
  bool has_multi = false;
  std::vector<std::string> ix;
  std::string lin;  // "" if unknown

  static Index Multi(std::vector<std::string> ix) { return Index{true, std::move(ix), ""}; }
  static Index Linear(std::string lin) { return Index{false, {}, std::move(lin)}; }
  static Index Scalar() { return Index{true, {}, "0"}; }
};

// What the emitter knows about the kernel as a whole.
struct KernelPlan {
  const Graph* graph = nullptr;
  std::map<NodeId, int> parameter_index;       // parameter node -> input slot
  std::map<NodeId, std::string> materialized;  // node -> pointer variable ("m5")
  // Values held in a local variable for the current loop iteration (row
  // kernels: a reduction's value for the current row), node -> variable.
  std::map<NodeId, std::string> scalars;
  // Scalars that hold their node at one multi-index only (row invariants
  // hoisted out of the loop over the row), node -> that index: a read at any
  // other index (through a reverse, slice, ... of the row's dims) computes
  // the element instead.
  std::map<NodeId, std::vector<std::string>> scalar_index;
  // Row kernels: values an earlier pass over the row stored in a row-sized
  // local array, node -> array; element at linear index lin is
  // array[lin - row_base].
  std::map<NodeId, std::string> row_buffers;
  std::string row_base;
  // Nodes whose data errors are reported, in node order; the site number is
  // the position here: integer divide/remainder (a zero divisor), gather and
  // scatter (a start index out of range).
  std::vector<NodeId> error_sites;
  // File-scope tables for non-splat constants, by node.
  std::map<NodeId, std::string> constant_tables;
  // Multiply-adds the current loop computes in f32 (f32_muladd.h: the loop
  // runs only after checking that each one's invariant factor is +-1), by root.
  std::map<NodeId, F32MulAdd> f32_muladds;
};

class ExprEmitter {
 public:
  // `var_counter` numbers temporaries across the whole kernel.
  ExprEmitter(const KernelPlan& plan, int* var_counter, int indent);

  // Appends statements computing node `id` at `idx`; returns a C++
  // expression (a variable or a literal) of the node's compute type.
  std::string Value(NodeId id, const Index& idx);

  const std::string& code() const { return code_; }
  // True if some multi-index had to be derived from a linear one with
  // division (the caller then prefers a row loop with explicit indices).
  bool derived_multi_from_linear() const { return derived_multi_; }
  // Zero-divisor sites whose flag variables (`zd<site>`) the code sets.
  const std::set<int>& used_sites() const { return used_sites_; }
  // Parameters / materialized nodes the code reads.
  const std::set<NodeId>& used_buffers() const { return used_buffers_; }

  // Gather / scatter node `n` (operand 0: the operand, operand 1: the
  // indices): the start of the index vector at batch position `batch_ix`
  // (one expression per dim of the indices except index_vector_dim), per
  // indexed operand dim (`index_to_operand`, windows `window`): an int64
  // variable checked to lie in [0, dim - window], else 0 with n's error flag
  // (site) set. Operand dims that are not indexed are absent.
  std::map<int64_t, std::string> IndexStarts(const Node& n, int64_t index_vector_dim,
                                             const std::vector<int64_t>& index_to_operand,
                                             const std::vector<int64_t>& window,
                                             const std::vector<std::string>& batch_ix);

  // Linear index of `s` at `idx` / its multi-index (see Index).
  std::string LinOf(const Shape& s, const Index& idx);
  std::vector<std::string> MultiOf(const Shape& s, const Index& idx);

 private:
  struct Val {
    std::string expr;
    bool is_const = false;  // a compile-time constant (no index dependence)
  };
  Val Emit(NodeId id, const Index& idx);
  Val EmitUncached(const Node& n, const Index& idx);
  Val EmitElementwise(const Node& n, const Index& idx);
  Val EmitUnary(const Node& n, const Val& x);
  Val EmitBinary(const Node& n, const Val& a, const Val& b);
  Val EmitConvert(DType from, DType to, const Val& x);
  Val EmitConcatenate(const Node& n, const Index& idx);
  Val EmitPad(const Node& n, const Index& idx);
  Val EmitF32MulAdd(const F32MulAdd& m, const Index& idx);
  Val EmitGather(const Node& n, const Index& idx);
  Index OperandIndex(const Node& n, const Index& idx);  // 1:1 data movement

  std::string NewVar();
  // Declares `const T v = expr;` and returns v (literals are returned as is).
  std::string Bind(DType t, const std::string& expr);
  void Line(const std::string& s);
  std::string Key(NodeId id, const Index& idx) const;
  const Val* Lookup(const std::string& key) const;

  const KernelPlan& plan_;
  const Graph& g_;
  int* var_counter_;
  int indent_;
  std::string code_;
  std::vector<std::map<std::string, Val>> scopes_;
  bool derived_multi_ = false;
  std::set<int> used_sites_;
  std::set<NodeId> used_buffers_;
};

}  // namespace ember::codegen
