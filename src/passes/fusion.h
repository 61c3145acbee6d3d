// fusion: groups fusible nodes into `fusion` nodes, each calling a body graph
// that the CPU backend compiles into one native kernel (XLA/Inductor style).
//
// Loop fusion: elementwise ops, broadcast-in-dim, reshape, transpose, slice,
// reverse, pad, concatenate, iota, constant, convert, select, clamp and
// compare chains fuse into their consumers. Input fusion: a reduce fuses with
// its elementwise/data-movement producers and with elementwise consumers of
// the reduced shape. Row fusion: up to kMaxRowReductions reduces over the
// same innermost dims, with their results consumed per row (softmax, layer
// norm). The fusion node's `kind` is AnalyzeFusion's answer for its body
// (ember/ir/fusion_analysis.h), which also decides, while a fusion grows,
// whether a reduce's result may be consumed per row. dot-general, convolution,
// custom-call, gather, scatter, dynamic-slice/update, reduce-window,
// argmax/argmin, rng, optimization-barrier, tuple/get-tuple-element,
// parameters and existing fusions stay outside (their consumers may fuse).
// Fusions have a single output (multi-output fusion is a later tier).
//
// Algorithm: nodes are visited from the last to the first; a fusible node
// not yet inside a fusion roots a new one, which then grows over its
// operands in decreasing node order. A producer joins when legal
// (fusion_legality.h) and profitable (fusion_cost.h): it is absorbed when
// all its users are in the fusion (and it is no graph output), or
// duplicated when it is cheap and has few users; otherwise it is refused and
// becomes an input of the fusion. After the pass every fusible node except
// a plain constant is inside some fusion (singletons allowed); a constant no
// fusion absorbs stays a constant node (data, not compute).
//
// Values are unchanged bit for bit under the interpreter: a body evaluates
// the same ops on the same values. Every refusal is recorded with its
// reason, and printed to stderr as `fusion: refuse %5 -> %7: <reason>` (node
// ids of the input graph) when EMBER_LOG lists `fusion`.
#pragma once

#include <string>
#include <vector>

#include "ember/passes/pass.h"

namespace ember::passes {

class FusionPass : public Pass {
 public:
  std::string name() const override { return "fusion"; }
  StatusOr<bool> Run(Graph& g) override;
  // "refuse %P -> %C: reason" lines of the last Run, in decision order.
  const std::vector<std::string>& refusals() const { return refusals_; }

 private:
  std::vector<std::string> refusals_;
};

}  // namespace ember::passes
