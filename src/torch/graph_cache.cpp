// The graph cache (graph_cache.h).
#include "graph_cache.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "backend.h"
#include "disk_cache.h"
#include "ember/codegen/cpu.h"
#include "ember/version.h"
#include "lower.h"

namespace ember_torch {
namespace {

std::mutex g_cache_mu;
std::unordered_map<uint64_t, std::vector<std::shared_ptr<CompiledGraph>>> g_cache;
struct SiteInfo {
  std::unordered_set<uint64_t> graphs;
  std::vector<std::string> last_ops;
  std::vector<std::string> last_inputs;
  bool warned = false;
};
std::unordered_map<std::string, SiteInfo> g_sites;

void log_recompile(const std::string& site, const LazyGraph& g) {
  if (site.empty()) return;
  std::vector<std::string> ops, ins;
  for (const Node* n : g.ops)
    ops.push_back(n->op->schema().name() + "->" + meta_str(n->outputs[0]));
  for (const auto& m : g.input_metas) ins.push_back(meta_str(m));
  SiteInfo& info = g_sites[site];
  if (!info.graphs.empty() && config().log_recompiles.load() && g_log_hook) {
    std::string why;
    for (size_t i = 0; i < std::min(ins.size(), info.last_inputs.size()) && why.empty(); ++i) {
      if (ins[i] != info.last_inputs[i]) {
        why =
            "input " + std::to_string(i) + " changed from " + info.last_inputs[i] + " to " + ins[i];
      }
    }
    for (size_t i = 0; i < std::min(ops.size(), info.last_ops.size()) && why.empty(); ++i) {
      if (ops[i] != info.last_ops[i])
        why = "op " + std::to_string(i) + " changed from " + info.last_ops[i] + " to " + ops[i];
    }
    if (why.empty() && ops.size() != info.last_ops.size()) {
      why = "op count changed from " + std::to_string(info.last_ops.size()) + " to " +
            std::to_string(ops.size());
    }
    if (why.empty() && ins.size() != info.last_inputs.size()) {
      why = "input count changed from " + std::to_string(info.last_inputs.size()) + " to " +
            std::to_string(ins.size());
    }
    if (why.empty()) why = "scalar argument types or attributes changed";
    g_log_hook("recompile", "ember: recompiling at " + site + ": " + why);
  }
  info.graphs.insert(g.hash);
  info.last_ops = std::move(ops);
  info.last_inputs = std::move(ins);
  if (!info.warned &&
      static_cast<int64_t>(info.graphs.size()) > config().recompile_warn_limit.load() &&
      g_warn_hook) {
    info.warned = true;
    g_warn_hook("ember: " + site + " has compiled " + std::to_string(info.graphs.size()) +
                " distinct graphs (limit " + std::to_string(config().recompile_warn_limit.load()) +
                "); shapes or dtypes probably change every step");
  }
}

void dump_graph(const LazyGraph& g) {
  const char* dir = std::getenv("EMBER_DEBUG_DIR");
  if (!dir || !*dir) return;
  std::ostringstream name;
  name << dir << "/graph_" << std::hex << g.hash << ".lazy.txt";
  std::ofstream f(name.str());
  if (f) f << "# ember " << ember::Version() << "\n" << graph_text(g);
}

// Compiles `g` for `backend` (counted and logged by find_or_compile).
std::shared_ptr<CompiledGraph> compile(const LazyGraph& g, int backend) {
  auto entry = std::make_shared<CompiledGraph>();
  entry->backend = backend;
  entry->tokens = g.tokens;
  if (backend != static_cast<int>(Backend::kAten)) {
    std::string why;
    entry->lowered = lower_graph(g, static_cast<Backend>(backend), &why);
    if (!entry->lowered) {
      if (g_warn_hook) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true)) {
          g_warn_hook("ember: a graph could not be lowered; it runs on the aten backend (" + why +
                      "; further cases: EMBER_LOG=lowering)");
        }
      }
      const char* e = std::getenv("EMBER_LOG");
      if (e && std::strstr(e, "lowering"))
        std::fprintf(stderr, "ember[lowering]: graph runs on aten: %s\n", why.c_str());
      std::lock_guard<std::mutex> mg(metrics().mu);
      metrics().lowering_failed_graphs++;
    }
  }
  if (!entry->lowered) {
    entry->aten = compile_aten(g);
    entry->stats = aten_stats(g);
  } else {
    entry->stats = program_stats(*entry->lowered);
  }
  return entry;
}

std::mutex g_last_mu;
GraphStats g_last;

}  // namespace

std::shared_ptr<const CompiledGraph> find_or_compile(const LazyGraph& g, int backend,
                                                     bool* memory_hit) {
  *memory_hit = false;
  {
    std::lock_guard<std::mutex> lk(g_cache_mu);
    auto it = g_cache.find(g.hash);
    if (it != g_cache.end()) {
      for (auto& e : it->second) {
        if (e->backend == backend && e->tokens == g.tokens) {  // never trust the hash alone
          *memory_hit = true;
          std::lock_guard<std::mutex> mg(metrics().mu);
          metrics().memory_cache_hits++;
          return e;
        }
      }
    }
  }
  const char* name = backend_name(backend);
  const bool disk_hit = disk_cache_lookup(g.hash, name, g.tokens);
  auto t0 = std::chrono::steady_clock::now();
  const auto cg0 = ember::codegen::GetCodegenStats();
  std::shared_ptr<CompiledGraph> entry = compile(g, backend);
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto cg1 = ember::codegen::GetCodegenStats();
  std::string site = current_source();
  {
    std::lock_guard<std::mutex> lk(g_cache_mu);
    g_cache[g.hash].push_back(entry);
    log_recompile(site, g);
  }
  dump_graph(g);
  if (!disk_hit) disk_cache_store(g.hash, name, g.tokens);
  std::lock_guard<std::mutex> mg(metrics().mu);
  if (disk_hit) {
    metrics().disk_cache_hits++;
  } else {
    metrics().graphs_compiled++;
  }
  metrics().compile_seconds += dt;
  metrics().kernel_compiles += cg1.compiles - cg0.compiles;
  metrics().kernel_disk_hits += cg1.disk_hits - cg0.disk_hits;
  for (const auto& kv : entry->stats.declined) metrics().lowering_declined[kv.first] += kv.second;
  for (const auto& kv : entry->stats.lowering_errors)
    metrics().lowering_errors[kv.first] += kv.second;
  return entry;
}

void set_last_graph(const GraphStats& s) {
  std::lock_guard<std::mutex> l(g_last_mu);
  g_last = s;
}

GraphStats last_graph() {
  std::lock_guard<std::mutex> l(g_last_mu);
  return g_last;
}

int64_t cache_size() {
  std::lock_guard<std::mutex> lk(g_cache_mu);
  int64_t n = 0;
  for (auto& kv : g_cache) n += kv.second.size();
  return n;
}

void clear_cache() {
  std::lock_guard<std::mutex> lk(g_cache_mu);
  g_cache.clear();
  g_sites.clear();
}

}  // namespace ember_torch
