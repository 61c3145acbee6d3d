// cse: common-subexpression elimination.
//
// Two nodes are merged (later uses refer to the first) when they have the
// same op, result shape, attributes, constant bytes and (already merged)
// operands. Never merged: parameters (two parameters of equal shape are
// distinct inputs), rng ops (each draws its own numbers), custom-call and
// optimization-barrier (opaque to every pass). Node metadata is ignored.
// Values produced after a barrier (through its get-tuple-elements) have
// different operands from those before it, so nothing moves across it.
#pragma once

#include "ember/passes/pass.h"

namespace ember::passes {

class CsePass : public Pass {
 public:
  std::string name() const override { return "cse"; }
  StatusOr<bool> Run(Graph& g) override;
};

}  // namespace ember::passes
