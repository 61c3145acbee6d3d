// simplify: local algebraic rewrites that are exactly value-preserving under
// IEEE arithmetic and PyTorch semantics (bit for bit; any NaN for a NaN).
//
// Each rule is a function in simplify.cc headed by its identity
// (`// x*1 => x`) and has its own text-IR test in simplify_test.cc. Rules
// look at a node's operands in the graph being built, so a chain such as
// neg(neg(neg(neg(x)))) collapses in one pass. A constant counts as "1" (or
// "0", ...) only when every element is; a broadcast-in-dim or reshape of
// such a constant counts too. Where a rule makes a new constant it is a
// broadcast-in-dim of a scalar.
//
// Never rewritten: rng ops, custom-call, optimization-barrier (opaque to
// every pass); no rule looks through a get-tuple-element of an
// optimization-barrier, so no value moves across a barrier.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ember/passes/pass.h"

namespace ember::passes {

class SimplifyPass : public Pass {
 public:
  std::string name() const override { return "simplify"; }
  StatusOr<bool> Run(Graph& g) override;
  // How often each rule fired over this object's lifetime (rule name -> count).
  const std::map<std::string, int64_t>& fired() const { return fired_; }

 private:
  std::map<std::string, int64_t> fired_;
};

// The names of all rules, in the order they are tried.
std::vector<std::string> SimplifyRuleNames();

}  // namespace ember::passes
