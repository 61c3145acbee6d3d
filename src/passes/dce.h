// dce: dead-code elimination.
//
// Removes every node not reachable from the graph's outputs. Parameters are
// never removed: the parameter list is the graph's calling convention.
// A dead rng op is removed like any other node: it has no side effect (its
// seed and offset are graph inputs assigned at trace time, so dropping it
// does not shift the numbers any other rng op draws). Dead custom-calls and
// optimization-barriers are removed too: extern kernels are pure.
#pragma once

#include "ember/passes/pass.h"

namespace ember::passes {

class DcePass : public Pass {
 public:
  std::string name() const override { return "dce"; }
  StatusOr<bool> Run(Graph& g) override;
};

}  // namespace ember::passes
