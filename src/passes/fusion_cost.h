// Fusion profitability: a per-element cost model and the duplication and
// recomputation bounds. Legality is separate (fusion_legality.h).
//
// Costs are rough per-element work units, each op's element cost in its
// properties (ember/ir/opcode.h EMBER_OP_PROPERTIES): constant/iota 0,
// broadcast-in-dim, reshape and plain arithmetic 1, other data movement 2,
// divide/remainder and reduce 4, transcendental ops (exp, log, tanh, erf,
// power, ...) 20. A producer is "expensive" at cost >= kExpensiveCost or when
// it is a reduce (a reduce is never recomputed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/ir/fusion_analysis.h"
#include "ember/ir/graph.h"
#include "passes/fusion_legality.h"

namespace ember::passes {

inline constexpr int64_t kExpensiveCost = kExpensiveElementCost;
// A producer whose subtree (SubtreeCost) costs at least this much per element, one
// transcendental op's worth, is as expensive to replicate as one.
inline constexpr int64_t kExpensiveSubtreeCost = 20;
// A cheap producer (constant, iota, broadcast-in-dim, reshape, convert) is
// duplicated into each consuming fusion when it has at most this many users.
inline constexpr int kMaxDuplicateUsers = 8;
// At most this many nodes in one fusion body (bounds kernel size).
inline constexpr int kMaxFusionNodes = 256;

// broadcast-in-dim, reshape, convert: data movement a duplicate is seen
// through (its operand is what a copy reads) and always cheap to recompute.
inline bool IsCheapDataMovement(OpKind op) {
  return op == OpKind::kBroadcastInDim || op == OpKind::kReshape || op == OpKind::kConvert;
}

// slice, pad: a read of part of the operand (or the padding value), duplicated like the
// cheap data movement above: each consumer reads the operand's elements it needs, where
// a materialized copy would cost a kernel and the same reads (a max-pool's window
// offsets, shared by its value and index chains).
inline bool IsDuplicatedRead(OpKind op) { return op == OpKind::kSlice || op == OpKind::kPad; }

// Work per result element of `n`.
int64_t ElementCost(const Node& n);
bool IsExpensive(const Node& n);

// What the fusion pass knows about a producer when a consumer fusion that
// does not own it considers computing it again (duplicating it).
struct DuplicationFacts {
  int num_users = 0;       // users of the producer (any fusion, or none)
  bool is_output = false;  // a graph output: materialized whatever fuses it
  // Computed from no runtime value (a constant, an iota, or a broadcast-in-dim/
  // reshape/convert of one, e.g. the splat of a layer norm's element count).
  bool from_constants = false;
  // Every operand, seen through broadcast-in-dim / reshape / convert, is a scalar (rank
  // 0): a copy reads one value, e.g. the broadcast learning rate or bias correction
  // that every parameter's update in an optimizer step reads.
  bool from_scalars = false;
  // Every user is a fusible node that may compute the producer (CanFuse): when
  // each takes its copy, the producer is never written to memory.
  bool all_users_fuse = false;
  // Bytes a copy of the producer reads from memory: its operands' bytes, seen
  // through broadcast-in-dim / reshape / convert (a row of `mean` broadcast to
  // a matrix reads the row) and 0 for constants and iotas.
  double read_bytes = 0;
  // An operand (seen through broadcast-in-dim / reshape / convert) that is plain
  // arithmetic with several users, itself or through one of those ops on the
  // way (a convert every layer reads), or kInvalidNode: recomputing the producer
  // would recompute that operand too, so a chain (a residual stream, each
  // layer's sum read by the next) would be recomputed from its start in every
  // consumer.
  NodeId shared_operand = kInvalidNode;
  // How many times a copy computes each element, per pass over the rows (more
  // than 1 when a broadcast in the consumer replicates it).
  double evaluations_per_element = 1;
  // The fusion that would hold the copy contains a reduction.
  bool into_reduction = false;
  // An operand of the producer that is computed by a fusible node, read by the producer
  // alone and no graph output, or kInvalidNode: the producer's own fusion computes it in
  // registers, but a copy elsewhere makes it a fusion input, written to memory.
  NodeId private_operand = kInvalidNode;
};

// Whether `producer` may be recomputed inside a consumer fusion (duplicated):
//  - a cheap data-movement producer (constant, iota, broadcast-in-dim,
//    reshape, convert, slice, pad) with at most kMaxDuplicateUsers users, or any number
//    when `from_constants` or `from_scalars` (recomputing it is free or reads one
//    scalar, materializing it costs a kernel and a read per use);
//  - plain arithmetic (elementwise, element cost below kExpensiveCost: add,
//    subtract, multiply, negate, max, select, compare, ...) when it is not a
//    graph output, every user fuses it, it has at most kMaxDuplicateUsers
//    users, and the copies read no more than materializing it moves:
//    (users - 1) * read_bytes <= (users + 1) * result bytes (a kernel that
//    reads its operands and writes the result, then one read per user). A
//    layer norm's x_hat = (x - mean) * rstd read by its backward's row and
//    column kernels is recomputed in both instead of written and read back.
//    Only into a fusion with a reduction (a row or column kernel; merged into
//    a plain loop fusion it was measured slower, in the gpt training step).
//    Not when an operand is itself arithmetic with several users (the chain
//    would be recomputed from its start) or when a broadcast in the consumer
//    would evaluate it more than once per element (per pass of a row fusion).
//    The idea is XLA's instruction fusion's (duplicate cheap producers
//    when every consumer fuses them and memory traffic does not grow).
// A reduction and an expensive producer (transcendental, divide) never are.
FusionDecision ShouldDuplicate(const Node& producer, const DuplicationFacts& facts);

// At most this many reductions in one row fusion (each is one pass over a
// row of the input; the row kernel recomputes values used by several passes).
inline constexpr int kMaxRowReductions = 4;

// Whether reduce `reduce` may join a fusion in which `downstream` (the
// consumer and every fusion member that depends on it) computes from its
// result, given the reductions `existing` already in the fusion and
// `with_reduce`, the AnalyzeFusion (ember/ir/fusion_analysis.h) of the
// fusion's members with `reduce` added:
//  - the fusion's only reduction, used by elementwise consumers of the
//    reduced shape (an input fusion, or a row fusion if its rows allow);
//  - a row fusion (with_reduce.kind == row: e.g. the reduction broadcast back
//    to the row shape, as in softmax) of at most kMaxRowReductions reductions.
// Otherwise refused, with both reasons.
FusionDecision CanFuseReduceResult(const Graph& g, NodeId reduce,
                                   const std::vector<NodeId>& downstream,
                                   const std::vector<NodeId>& existing,
                                   const FusionAnalysis& with_reduce);

// Work per element of `n` when the fusible producers only `n` reads (one user, not a
// graph output) are computed with it: ElementCost(n) plus, recursively, the subtree
// cost of each such operand (capped at 1 << 20). A chain of cheap ops (a max-pool's
// index: a select per window offset over iota arithmetic) adds up to the cost of one
// transcendental op, and a broadcast that replicates it recomputes all of it.
// `subtree_cost[o]` holds the value for every operand o of n (node order).
int64_t SubtreeCost(const Graph& g, const Node& n, const std::vector<std::vector<NodeId>>& users,
                    const std::vector<bool>& is_output, const std::vector<int64_t>& subtree_cost);

// Whether `producer`, evaluated `evaluations` times per kernel run inside the
// fusion (more than its element count when a broadcast replicates it), is
// cheap enough to recompute: an expensive producer, or one whose `subtree_cost`
// (SubtreeCost: the work the fusion would take on with it) reaches
// kExpensiveSubtreeCost, may be evaluated at most `passes` times per element.
// `passes` is 1, except in a row fusion, where a value may be recomputed once per
// pass over the row (FusionAnalysis::row_passes: one per reduction, plus one for the
// row-shaped outputs; a row in cache is cheaper to recompute from than a
// materialized intermediate written to and read back from memory).
FusionDecision CanRecompute(const Node& producer, double evaluations, int passes = 1,
                            int64_t subtree_cost = 0);

}  // namespace ember::passes
