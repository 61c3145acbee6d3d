// Fusion profitability: a per-element cost model and the duplication and
// recomputation bounds. Legality is separate (fusion_legality.h).
//
// Costs are rough per-element work units: constant/iota 0, broadcast-in-dim,
// reshape and plain arithmetic 1, other data movement 2, divide/remainder 4,
// transcendental ops (exp, log, tanh, erf, power, ...) 20. A producer is
// "expensive" at cost >= kExpensiveCost or when it is a reduce (a reduce is
// never recomputed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/ir/graph.h"
#include "passes/fusion_legality.h"

namespace ember::passes {

inline constexpr int64_t kExpensiveCost = 4;
// A cheap producer (constant, iota, broadcast-in-dim, reshape, convert) is
// duplicated into each consuming fusion when it has at most this many users.
inline constexpr int kMaxDuplicateUsers = 8;
// At most this many nodes in one fusion body (bounds kernel size).
inline constexpr int kMaxFusionNodes = 256;

// Work per result element of `n`.
int64_t ElementCost(const Node& n);
bool IsExpensive(const Node& n);

// Whether `producer`, which has `num_users` users (or is a graph output)
// outside the fusion being grown, may be recomputed inside it (duplicated).
// Only cheap producers (constant, iota, broadcast-in-dim, reshape, convert)
// with at most kMaxDuplicateUsers users are duplicated; an expensive one
// (transcendental, divide, reduce) never is.
FusionDecision ShouldDuplicate(const Node& producer, int num_users, bool is_output);

// Whether reduce `reduce` may join a fusion in which `downstream` (the
// consumer and every fusion member that depends on it) computes from its
// result, given the reduce `existing_reduce` already in the fusion
// (kInvalidNode if none). Refuses a second reduce, a result broadcast back to
// a larger shape (each output element would recompute the whole reduction),
// and any non-elementwise use of the reduced value.
FusionDecision CanFuseReduceResult(const Graph& g, NodeId reduce,
                                   const std::vector<NodeId>& downstream,
                                   NodeId existing_reduce);

// Whether `producer`, evaluated `evaluations` times per kernel run inside the
// fusion (more than its element count when a broadcast replicates it), is
// cheap enough to recompute: an expensive producer may not be recomputed.
FusionDecision CanRecompute(const Node& producer, double evaluations);

}  // namespace ember::passes
