// Per compiled graph figures (ember.metrics.last_graph(); docs/architecture.md,
// "Introspection"). Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember_torch {

struct GraphStats {
  std::string backend;
  int64_t lazy_ops = 0;      // lazy op nodes in the graph
  int64_t lowered_ops = 0;   // lowered into core ops
  int64_t extern_ops = 0;    // run as ATen custom-calls
  int64_t kernels = 0;       // native kernel steps
  int64_t interpreted = 0;   // interpreter steps
  int64_t extern_steps = 0;  // extern steps (ATen custom-calls + core externs)
  int64_t copy_steps = 0;    // runtime copy steps (donation copies, snapshots)
  // Per native kernel step, in run order: the core ops it computes (a fusion's body
  // ops, parameters excluded; 1 for an unfused op), so fused chains are visible.
  std::vector<int64_t> kernel_ops;
  int64_t core_nodes = 0;                       // nodes of the optimized core graph
  int64_t parameters = 0;                       // core graph parameters (tensors + scalars + rng)
  std::map<std::string, int64_t> externs;       // ATen op -> custom-call steps
  std::map<std::string, int64_t> core_externs;  // "ember.dot-general" -> steps
  std::map<std::string, int64_t> declined;      // ATen op -> declined calls
  std::map<std::string, int64_t> lowering_errors;  // ATen op -> failed lowerings
  // The program's buffer plan (ember::Executable::memory_plan(); 0 for the interpreter
  // and aten backends), bytes: the most bytes of its own buffers live at once over the
  // step schedule (outputs included, arguments excluded), and the planned buffers a run
  // allocates at its start and holds to its end.
  int64_t planned_peak_bytes = 0;
  int64_t planned_buffer_bytes = 0;
};

}  // namespace ember_torch
