// The C++ API of the ember device for libtorch programs (no Python needed).
//
//   #include "ember_torch.h"
//   ember_torch::initialize();                 // once, before using torch::Device("ember")
//   torch::Device dev("ember:0");
//   auto x = torch::randn({8, 4}).to(dev);     // ops on x are recorded, not run
//   ember_torch::sync("my step");              // runs pending work as one cached graph
//   auto c = ember_torch::counters();          // syncs, graphs compiled, fallbacks, ...
//
// Link the shared library `ember_torch` (the same bridge that the Python extension
// ember._C uses). This header is deliberately free of torch headers.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ember_torch {

// Names PyTorch's PrivateUse1 backend "ember" and registers ember's kernels with the
// dispatcher. Idempotent and thread-safe; `import ember` does the same from Python.
// Throws c10::Error if PrivateUse1 was already given another name in this process.
void initialize();

// Runs all pending work of all live ember tensors as one graph (a no-op when nothing
// is pending). `reason` names the sync in logs and recompile messages.
void sync(const std::string& reason);

// A snapshot of the runtime counters (what `ember.metrics.counters()` returns).
struct Counters {
  int64_t syncs = 0;
  int64_t graphs_compiled = 0;
  int64_t memory_cache_hits = 0;
  int64_t disk_cache_hits = 0;
  double compile_seconds = 0;  // wall-clock seconds spent building executables
  double execute_seconds = 0;  // wall-clock seconds spent running them
  int64_t transfers_to_device = 0;
  int64_t transfers_to_host = 0;
  int64_t ops_traced = 0;
  int64_t value_reads = 0;
  // ATen op name -> count. fallbacks: ops run eagerly on CPU outside a graph (e.g.
  // no Meta kernel to infer their shapes); externs: ATen kernels called inside graphs.
  std::map<std::string, int64_t> fallbacks;
  std::map<std::string, int64_t> externs;
  std::map<std::string, int64_t> value_read_sites;  // "file:line" or "<unknown>" -> count
  // Compiles of a graph whose structure was cached with other shapes, dtypes or baked
  // scalars (or at a call site that compiled before), by the reason the recompile report
  // (EMBER_LOG=recompile) gave: "dim", "dtype", "layout", "scalar", "scalar_type",
  // "structure".
  int64_t recompiles = 0;
  std::map<std::string, int64_t> recompiles_by_reason;
};
Counters counters();
void clear_counters();

}  // namespace ember_torch
