// The pass interface and the pipeline (DESIGN §4).
//
// A pass rewrites a graph by building a new one (nodes are immutable) and
// reports whether anything changed. The pipeline runs passes in a fixed,
// readable order, verifies the graph after each, can dump it after each pass
// (EMBER_DUMP_PASSES=1 prints to stderr) and skips passes named in
// EMBER_SKIP_PASSES (comma-separated, e.g. "cse,simplify").
//
// No pass may merge, fold, duplicate or move rng ops, optimization-barrier or
// custom-call, nor move anything across an optimization-barrier. (memory-scheduling,
// which reorders nodes, keeps rng ops and custom-calls in their relative order and
// moves nothing across a barrier.)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  virtual StatusOr<bool> Run(Graph& g) = 0;
};

class Pipeline {
 public:
  // `max_rounds` > 1 repeats the whole list until a round changes nothing,
  // at most `max_rounds` times.
  explicit Pipeline(std::vector<std::unique_ptr<Pass>> passes, int max_rounds = 1);
  // Runs each pass once, in order (per round). Returns whether any pass
  // changed the graph. A pass error, or a graph that fails Verify after a
  // pass, is returned as a Status naming the pass; `g` then holds the graph
  // as it was before that pass.
  StatusOr<bool> Run(Graph& g) const;
  std::vector<std::string> pass_names() const;
  int max_rounds() const { return max_rounds_; }

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
  int max_rounds_ = 1;
};

// simplify, constant-folding, cse, dce (repeated until nothing changes, at most 4 rounds).
// Target-independent: it creates no fusions.
Pipeline DefaultPipeline();
// For the CPU backend: the DefaultPipeline passes, then fusion (src/passes/fusion.h),
// repeated like DefaultPipeline (fusions are opaque to the other passes, and fusion
// leaves a fused graph unchanged, so the rounds end).
Pipeline CpuPipeline();
// Creates a pass by name; NotFound for an unknown name.
StatusOr<std::unique_ptr<Pass>> CreatePass(const std::string& name);
// The pipelines' passes, then memory-scheduling (which Compile runs after them).
std::vector<std::string> AllPassNames();
// Whether EMBER_SKIP_PASSES names `name`.
bool PassSkippedByEnv(const std::string& name);

}  // namespace ember
