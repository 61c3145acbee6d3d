// The C++ API (ember_torch.h): initialization without Python, counters snapshot.
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include "bridge.h"
#include "ember_torch.h"
#include "lower.h"

namespace ember_torch {

void initialize() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::register_privateuse1_backend("ember");
    register_kernels();
    register_aten_externs();
    // Without Python's handlers, ember's warnings go through c10's warning handler
    // (stderr by default); Python's _init replaces these.
    if (!g_warn_hook) g_warn_hook = [](const std::string& msg) { TORCH_WARN(msg); };
  });
}

Counters counters() {
  auto& m = metrics();
  std::lock_guard<std::mutex> g(m.mu);
  Counters c;
  c.syncs = m.syncs;
  c.graphs_compiled = m.graphs_compiled;
  c.memory_cache_hits = m.memory_cache_hits;
  c.disk_cache_hits = m.disk_cache_hits;
  c.compile_seconds = m.compile_seconds;
  c.execute_seconds = m.execute_seconds;
  c.transfers_to_device = m.transfers_to_device;
  c.transfers_to_host = m.transfers_to_host;
  c.ops_traced = m.ops_traced;
  c.value_reads = m.value_reads;
  c.fallbacks = m.fallbacks;
  c.externs = m.externs;
  c.value_read_sites = m.value_read_sites;
  c.recompiles = m.recompiles;
  c.recompiles_by_reason = m.recompiles_by_reason;
  return c;
}

void clear_counters() { metrics().clear(); }

}  // namespace ember_torch
