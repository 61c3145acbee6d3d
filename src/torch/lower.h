// Lowering a lazy graph to one core IR graph and running it through the core runtime
// (docs/architecture.md, "Lowering"). The lowerer is lower.cpp; the ATen custom-calls
// aten_extern.cpp; binding a run's inputs and outputs binding.cpp; donation donation.cpp.
//
// On a graph-cache miss, every lazy op node becomes an ember::lowering::AtenCall and
// is lowered through the LoweringTable; a node the table does not lower (no entry, a
// declined call, or a lowering that failed) becomes a custom-call running ATen's CPU
// kernel inside the executable. Tensor inputs are parameters borrowed zero-copy from
// the device buffers (row-major ones), Scalar arguments and rng (seed, offset) pairs
// are 0-d parameters fed at each run, and results are bound back with exactly eager's
// sizes, strides and storage offset.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "graph_stats.h"
#include "lazy_graph.h"

namespace ember_torch {

struct LoweredProgram;

// Shape bucketing's request (graph_cache.cpp): pad dims `dims` ((input, dim) of g.inputs),
// all of length `length`, to `bucket`.
struct BucketRequest {
  std::vector<std::pair<int, int>> dims;
  int64_t length = 0, bucket = 0;
};

// Lowers and compiles `g` for `backend` (kCpu or kInterpreter). On failure returns
// null and sets *error (the caller then runs the graph on the aten backend). With
// `bucket`, the lowered graph is padded (pad_dimensions.h) and compiled through the
// process's executable cache, so lengths of one bucket share one executable
// (`*reused`: this one was compiled before); when padding is refused, `*bucket_why`
// says why and the exact graph is compiled.
std::shared_ptr<LoweredProgram> lower_graph(const LazyGraph& g, Backend backend, std::string* error,
                                            const BucketRequest* bucket = nullptr,
                                            std::string* bucket_why = nullptr,
                                            bool* reused = nullptr);
const GraphStats& program_stats(const LoweredProgram& p);

struct LoweredRun {
  std::vector<at::Tensor> outputs;  // per root, laid out as eager reports it
  std::exception_ptr error;         // the run failed (outputs empty)
  int failed_op = -1;               // index into g.ops of the failing node; -1 unknown
  // Per root: whether it depends on the failing core node (empty: unknown, then use
  // failed_op, or fail every root if that is unknown too).
  std::vector<bool> root_failed;
};
// Where run_lowered's time went in the last run on this thread (microseconds), filled
// only while EMBER_LOG=sync is on: argument buffers, Executable::Run, output tensors.
struct RunTiming {
  double args_us = 0, exec_us = 0, outputs_us = 0;
};
extern thread_local RunTiming g_run_timing;

// Runs the program on this sync's inputs and scalars. `donated[i]`: input i's buffer
// may be overwritten in place (no other live tensor refers to it). `wanted` (empty: all):
// the roots the caller reads; the others are left undefined in `outputs`, so a root the
// caller reads gets the buffer it shares with one it does not (t(t(x)) beside x) without
// a copy.
LoweredRun run_lowered(const LoweredProgram& p, const LazyGraph& g,
                       const std::vector<bool>& donated, const std::vector<bool>& wanted = {});

// Registers the ATen-backed `ember.dot-general` extern kernel (mm/bmm through ATen) and
// makes ATen's intra-op thread pool (at::parallel_for) the runtime's parallel-for
// (aten_extern.cpp).
void register_aten_externs();

// Registers `ember.dot-general` as an ATen GEMM call (dot_general.cpp).
void register_aten_dot_general();
// Operand copies the dot-general extern made (dtype converts, layouts no GEMM call
// takes as strides, misaligned borrowed inputs) since the process started.
int64_t gemm_operand_copies();

// Reports every step the runtime runs to torch.profiler (profiler.cpp).
void install_profiler_events();

// Makes at::parallel_for the runtime's parallel-for (aten_parallel.cpp).
void use_aten_parallel_for();

}  // namespace ember_torch
