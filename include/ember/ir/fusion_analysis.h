// Fusion analysis: what kind of fusion a body is (in the spirit of XLA's
// HloFusionAnalysis). The one place that decides it; the fusion pass records
// the answer as the fusion node's `kind` attribute (Verify checks that it
// still holds), and the fusion pass's cost model, the CPU code generator and
// the runtime's horizontal fusion read it.
//
//   loop     no reduce and no scatter: every value is computed per output
//            element (docs/codegen.md "Loop fusion").
//   input    at least one reduce, and no row fusion: each reduce is
//            materialized by a phase of its own and read back by later
//            phases (XLA's input fusion).
//   row      at least one reduce, every reduce reduces the same innermost
//            dims {k..r-1} (k >= 1) of operands of one shape S (one "row" of
//            S per outer index), every value computed from a reduce is an
//            elementwise op of shape S or of the outer shape S[0..k), a
//            broadcast-in-dim of an outer-shaped value back to S along dims
//            {0..k-1}, or another such reduce, and every output has shape S
//            or the outer shape. Softmax, log-softmax, layer norm and a plain
//            row sum are row fusions. The CPU backend runs one as a row
//            kernel: per row, one pass per reduce, then one pass writing the
//            row's outputs, while the row is in cache.
//   scatter  a scatter (materialized by a serial phase of its own).
//
// A body that calls a fusion is classified by what that body holds (its
// reduces and scatters count), and the nested fusion is never a per-row
// consumer.
#pragma once

#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember {

// The rows of a row fusion: the reduced operands have dims `shape` (S);
// dims {0..outer_rank-1} index the rows.
struct RowGeometry {
  int outer_rank = 0;
  std::vector<int64_t> shape;
  int64_t rows = 0;        // product of S[0..outer_rank)
  int64_t row_length = 0;  // product of S[outer_rank..r)
};

struct FusionAnalysis {
  FusionKind kind = FusionKind::kLoop;
  std::vector<NodeId> reduces;  // the reduce nodes, in node order
  RowGeometry row;              // kind == kRow only
  // kind == kInput: why the body is not a row fusion (names nodes by id).
  std::string not_row;
  // kind == kRow: an output has the row shape S (the row kernel then writes
  // it in one more pass over each row).
  bool row_shaped_output = false;

  // Passes a row kernel makes over each row: one per reduce, plus one for
  // the row-shaped outputs. 1 for the other kinds.
  int row_passes() const {
    return kind == FusionKind::kRow ? static_cast<int>(reduces.size()) + (row_shaped_output ? 1 : 0)
                                    : 1;
  }
};

// The analysis of a fusion body (or of any kernel graph: all its nodes,
// computing its outputs).
FusionAnalysis AnalyzeFusion(const Graph& body);

// The same analysis for the nodes `members` of `g` (in increasing id order)
// computing `outputs`; operands outside `members` are inputs. The fusion
// pass asks this while it grows a fusion, before a body exists.
FusionAnalysis AnalyzeFusion(const Graph& g, const std::vector<NodeId>& members,
                             const std::vector<NodeId>& outputs);

}  // namespace ember
