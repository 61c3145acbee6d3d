// The graph cache (docs/architecture.md, "Sync" and "Lowering"): compiled graphs in
// memory, keyed by the lazy graph's structural hash and verified by its full token list
// and the backend. On a miss the disk cache (disk_cache.h) is consulted and the graph is
// compiled: lowered to one core executable (lower.h) or, for the aten backend or a graph
// that cannot be lowered, one ATen step per node (aten_step.h). Also the per-call-site
// recompile log and the figures of the graph the last sync ran.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "aten_step.h"
#include "graph_stats.h"
#include "lazy_graph.h"
#include "lower.h"

namespace ember_torch {

struct LoweredProgram;

// One compiled graph: the aten backend's step list, or a lowered core executable.
struct CompiledGraph {
  int backend = 0;
  std::vector<int64_t> tokens;
  std::shared_ptr<AtenExecutable> aten;
  std::shared_ptr<LoweredProgram> lowered;
  GraphStats stats;
  // Wall time of its last run in microseconds (negative before the first): a sync whose
  // caller waits for it runs a short program on the calling thread (sync.cpp).
  mutable std::atomic<double> last_run_us{-1};
};

// The compiled graph for `g` on `backend` from memory (*memory_hit set), or compiled
// now and cached (counted in graphs_compiled, or disk_cache_hits when the disk cache
// knew the graph; a recompile at a call site that compiled before is logged there).
// `allow_buckets` (not for torch.compile's capture): a recompile whose input dims
// changed length may run on a program padded to a bucket (ember.config.shape_buckets;
// logged under EMBER_LOG=recompile, counted in bucketed_graphs / bucket_refusals).
std::shared_ptr<const CompiledGraph> find_or_compile(const LazyGraph& g, int backend,
                                                     bool* memory_hit, bool allow_buckets);

// The figures of the program the last sync ran (memory or disk cache or fresh).
void set_last_graph(const GraphStats& s);
GraphStats last_graph();

}  // namespace ember_torch
