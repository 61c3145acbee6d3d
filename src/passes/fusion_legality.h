// Fusion legality: which ops may live inside a fusion body, and whether a
// producer may be computed inside the fusion of one of its consumers.
// Profitability (the cost model) is separate: fusion_cost.h.
#pragma once

#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember::passes {

// A yes/no answer with the reason for a refusal (empty when allowed).
struct FusionDecision {
  bool ok = true;
  std::string reason;
  static FusionDecision Yes() { return {true, ""}; }
  static FusionDecision No(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

// Ops a loop fusion may contain: elementwise (unary, binary, compare,
// convert, select, clamp), broadcast-in-dim, reshape, transpose, slice,
// reverse, pad, concatenate, iota, constant.
bool IsLoopFusibleOp(OpKind op);

// Whether node `n` may be inside a fusion body: a loop-fusible op or a
// reduce, with an array result of a non-complex dtype. Everything else —
// parameters, rng, dot-general, convolution, custom-call, gather, scatter,
// dynamic-slice/update, reduce-window, argmax/argmin, optimization-barrier,
// tuple/get-tuple-element, fusion — stays outside (their consumers may fuse).
FusionDecision IsFusibleNode(const Node& n);

// Whether `producer` may be computed inside the fusion that contains its
// user `consumer` (both nodes of `g`, producer an operand of consumer).
// Refuses non-fusible producers or consumers, anything reached through an
// optimization-barrier, and rng ops (never moved or merged).
FusionDecision CanFuse(const Graph& g, NodeId producer, NodeId consumer);

// Row fusion: several reductions of one fusion that all reduce the same
// innermost dims {k..r-1} (k >= 1) of operands of one shape S, i.e. one
// "row" of S per outer index, together with what consumes them per row. The
// CPU backend runs such a body as one pass per reduction over each row while
// the row is in cache, then one pass writing the row's outputs (row kernels,
// docs/codegen.md); softmax, log-softmax and layer norm are row fusions.
//
// Whether reduce `reduce` may join a row fusion in which `downstream` (its
// consumers in the fusion and every member computed from them) uses its
// result, given the reductions `existing` already in the fusion: `reduce`
// must reduce a nonempty suffix of its operand's dims leaving at least one
// outer dim, with the same operand shape and dims as every existing one; and
// every downstream node must be an elementwise op of shape S or of the outer
// shape S[0..k), a broadcast-in-dim of an outer-shaped value to S along dims
// {0..k-1}, or another such reduction (anything else would read other rows).
FusionDecision CanRowFuse(const Graph& g, NodeId reduce, const std::vector<NodeId>& downstream,
                          const std::vector<NodeId>& existing);

}  // namespace ember::passes
