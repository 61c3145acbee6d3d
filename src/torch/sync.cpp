// Sync (docs/architecture.md, "Sync"): gathers the pending values of all live tensors,
// builds their lazy graph (lazy_graph.h), finds or compiles its executable (graph
// cache, graph_cache.h), runs it (lowered: lower.h; aten: aten_step.h) and binds the
// results back to the tensor states. A failure binds what does not depend on it.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "../ir/log.h"
#include "bridge.h"
#include "capture.h"
#include "donation.h"
#include "graph_cache.h"
#include "lazy_graph.h"
#include "lower.h"

namespace ember_torch {
namespace {

std::atomic<bool> g_cap_warned{false};
std::mutex g_sync_mu;                       // one sync at a time
std::atomic<int64_t> g_sync_generation{0};  // syncs that ran work; never reset

void bind_results(const std::vector<std::pair<StatePtr, Value>>& roots,
                  const std::vector<at::Tensor>& outputs, const std::vector<bool>& failed,
                  const std::string& error, bool only_failed = false) {
  std::vector<std::optional<Value>> released;
  std::lock_guard<std::mutex> lk(state_mutex());
  for (size_t i = 0; i < roots.size(); ++i) {
    if (only_failed && !failed[i]) continue;  // left pending for a later run
    auto& s = *roots[i].first;
    if (s.ir && *s.ir == roots[i].second) {
      released.push_back(std::move(s.ir));
      s.ir.reset();
      if (failed[i]) {
        s.error = error;
      } else {
        s.data = outputs[i];
      }
    }
  }
}

// EMBER_LOG=sync: one line per sync with where its fixed cost went (microseconds):
// gathering the pending roots, building + hashing the lazy graph, the cache lookup,
// the run (argument buffers, the executable, binding outputs as tensors) and binding
// the tensor states. Read once; a disabled topic costs one branch per sync.
bool log_sync() {
  static const bool on = ember::LogEnabled("sync");
  return on;
}
using SteadyClock = std::chrono::steady_clock;
double us_since(SteadyClock::time_point t) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - t).count();
}
thread_local double t_gather_us = 0;  // set by sync() for the line sync_roots prints

void sync_roots(const std::vector<std::pair<StatePtr, Value>>& roots, int depth,
                SyncCapture* capture = nullptr);

// Runs a lowered program. On a failure: binds the roots that depend on the failing node
// to the error, computes the others again without it, and throws the first error.
std::vector<at::Tensor> run_lowered_roots(const LoweredProgram& program, const LazyGraph& g,
                                          const std::vector<std::pair<StatePtr, Value>>& roots,
                                          int depth, SteadyClock::time_point t0) {
  LoweredRun r =
      run_lowered(program, g, donate_buffers().load() ? donatable_inputs(g) : std::vector<bool>());
  if (!r.error) return std::move(r.outputs);
  std::exception_ptr first_error = r.error;
  // Roots that do not depend on the failing node are computed again without it.
  const Node* bad = r.failed_op >= 0 ? g.ops[r.failed_op] : nullptr;
  std::vector<bool> failed(roots.size(), false);
  std::vector<std::pair<StatePtr, Value>> rest;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (r.root_failed.size() == roots.size())
      failed[i] = r.root_failed[i];
    else
      failed[i] = !bad || depends_on(roots[i].second, bad);
    if (!failed[i]) rest.push_back(roots[i]);
  }
  std::vector<at::Tensor> outputs(roots.size());
  bind_results(roots, outputs, failed, error_text(first_error), /*only_failed=*/true);
  double dt = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().execute_seconds += dt;
  }
  if (!rest.empty() && depth < 8) {
    try {
      sync_roots(rest, depth + 1);
    } catch (...) {
      // Reported already through the failed tensors' errors; the first error wins.
    }
  }
  std::rethrow_exception(first_error);
}

// Compiles (or finds) and runs the graph of `roots`, binding results. Throws the first
// error after binding every result that does not depend on it.
void sync_roots(const std::vector<std::pair<StatePtr, Value>>& roots, int depth,
                SyncCapture* capture) {
  const bool timed = log_sync();
  auto tb = SteadyClock::now();
  LazyGraph g;
  build_lazy_graph(roots, g);
  const double build_us = timed ? us_since(tb) : 0;
  tb = SteadyClock::now();
  bool hit = false;
  std::shared_ptr<const CompiledGraph> entry = find_or_compile(g, config().backend.load(), &hit);
  if (depth == 0) {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().syncs++;
  }
  set_last_graph(entry->stats);
  const double lookup_us = timed ? us_since(tb) : 0;
  if (timed) g_run_timing = RunTiming{};

  auto t0 = SteadyClock::now();
  std::vector<at::Tensor> outputs;
  std::vector<bool> failed(roots.size(), false);
  std::exception_ptr first_error;
  if (entry->lowered) {
    outputs = run_lowered_roots(*entry->lowered, g, roots, depth, t0);
  } else {
    run_aten(*entry->aten, g, outputs, failed, first_error);
  }
  double dt = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().execute_seconds += dt;
  }
  tb = SteadyClock::now();
  bind_results(roots, outputs, failed, first_error ? error_text(first_error) : std::string());
  if (timed) {
    char line[320];
    std::snprintf(line, sizeof(line),
                  "roots=%zu ops=%zu inputs=%zu %s gather=%.1f build=%.1f lookup=%.1f run=%.1f "
                  "(args=%.1f exec=%.1f outputs=%.1f) bind=%.1f us",
                  roots.size(), g.ops.size(), g.inputs.size(), hit ? "hit" : "miss", t_gather_us,
                  build_us, lookup_us, dt * 1e6, g_run_timing.args_us, g_run_timing.exec_us,
                  g_run_timing.outputs_us, us_since(tb));
    ember::LogLine("sync", line);
  }
  if (first_error) std::rethrow_exception(first_error);
  if (capture && entry->lowered) {
    capture->program = entry->lowered;
    capture->stats = entry->stats;
    capture->roots = roots;
    capture->graph = std::move(g);
  }
}

}  // namespace

void sync_and_capture(const std::string& reason, SyncCapture* capture) {
  std::lock_guard<std::mutex> sync_lock(g_sync_mu);
  auto tg = SteadyClock::now();
  auto roots = pending_states();
  if (log_sync()) t_gather_us = us_since(tg);
  add_pending_ops(-1);
  if (roots.empty()) return;
  g_sync_generation.fetch_add(1);
  sync_roots(roots, 0, capture);
}

std::mutex& sync_mutex() { return g_sync_mu; }

void sync(const std::string& reason) { sync_and_capture(reason, nullptr); }

void maybe_sync_early() {
  int64_t cap = config().max_pending_ops.load();
  if (cap <= 0 || pending_op_count() < cap) return;
  if (!g_cap_warned.exchange(true) && g_warn_hook) {
    g_warn_hook("ember: more than " + std::to_string(cap) +
                " ops pending without a sync; syncing early (call ember.sync() in loops "
                "without an optimizer step; ember.config.max_pending_ops sets the cap)");
  }
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().early_syncs++;
  }
  sync("pending-op cap");
}

std::string graph_debug_text() {
  auto roots = pending_states();
  if (roots.empty()) return "";
  LazyGraph g;
  build_lazy_graph(roots, g);
  return graph_text(g);
}

int64_t sync_generation() { return g_sync_generation.load(); }

}  // namespace ember_torch
