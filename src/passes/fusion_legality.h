// Fusion legality: which ops may live inside a fusion body, and whether a
// producer may be computed inside the fusion of one of its consumers.
// Profitability (the cost model) is separate: fusion_cost.h; what kind of
// fusion a set of nodes makes (loop, input, row): ember/ir/fusion_analysis.h.
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

}  // namespace ember::passes
