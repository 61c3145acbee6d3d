// The graph cache (graph_cache.h).
#include "graph_cache.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "../ir/debug_dump.h"
#include "../ir/log.h"
#include "backend.h"
#include "disk_cache.h"
#include "ember/codegen/cpu.h"
#include "ember/runtime/executable_cache.h"
#include "ember/version.h"
#include "lower.h"
#include "lowered_program.h"
#include "recompile.h"

namespace ember_torch {
namespace {

std::mutex g_cache_mu;
std::unordered_map<uint64_t, std::vector<std::shared_ptr<CompiledGraph>>> g_cache;
void dump_graph(const LazyGraph& g) {
  const std::string dir = ember::DebugDir();
  if (dir.empty()) return;
  std::ostringstream name;
  name << "graph_" << std::hex << g.hash << ".lazy.txt";
  ember::WriteDebugFile(dir, name.str(),
                        std::string("# ember ") + ember::Version() + "\n" + graph_text(g));
}

// Shape bucketing (ember.config.shape_buckets): the request for `g`, a recompile whose
// inputs differ from the nearest compiled graph of its family in `dims`, or nullopt with
// *why ("" when bucketing does not apply at all). Every varying dim must have one
// length n, and a bucket must hold it.
std::optional<BucketRequest> bucket_request(const LazyGraph& g,
                                            const std::vector<std::pair<int, int>>& dims,
                                            const std::vector<int64_t>& buckets, std::string* why) {
  if (dims.empty()) return std::nullopt;
  BucketRequest r;
  r.dims = dims;
  r.length = g.input_metas[dims[0].first].sizes[dims[0].second];
  for (auto [in, d] : dims) {
    const int64_t len = g.input_metas[in].sizes[d];
    if (len != r.length) {
      *why = "input dims of two lengths vary (" + std::to_string(r.length) + " and " +
             std::to_string(len) + "); one varying length is padded";
      return std::nullopt;
    }
  }
  if (r.length < 2) {
    *why = "the varying length is " + std::to_string(r.length);
    return std::nullopt;
  }
  for (int64_t b : buckets) {
    if (b >= r.length) {
      r.bucket = b;
      return r;
    }
  }
  *why = "length " + std::to_string(r.length) + " exceeds the largest bucket " +
         std::to_string(buckets.back());
  return std::nullopt;
}

// One line of the recompile channel: stderr under EMBER_LOG=recompile and, while
// ember.config.log_recompiles, logger "ember".
void log_recompile_line(const std::string& text) {
  ember::LogLine("recompile", text);
  if (config().log_recompiles.load() && g_log_hook) g_log_hook("recompile", text);
}

std::string dims_text(const std::vector<std::pair<int, int>>& dims) {
  std::string s;
  for (auto [in, d] : dims) {
    s += (s.empty() ? "input " : ", input ") + std::to_string(in) + " dim " + std::to_string(d);
  }
  return s;
}

// Compiles `g` for `backend` (counted and logged by find_or_compile); with `bucket`,
// padded to it unless an op is not pad-safe (`*bucket_why`).
std::shared_ptr<CompiledGraph> compile(const LazyGraph& g, int backend, const BucketRequest* bucket,
                                       std::string* bucket_why, bool* reused) {
  auto entry = std::make_shared<CompiledGraph>();
  entry->backend = backend;
  entry->tokens = g.tokens;
  if (backend != static_cast<int>(Backend::kAten)) {
    std::string why;
    entry->lowered =
        lower_graph(g, static_cast<Backend>(backend), &why, bucket, bucket_why, reused);
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
                                                     bool* memory_hit, bool allow_buckets) {
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
  const Signature sig = signature_of(g);  // the recompile report's and bucketing's
  std::optional<BucketRequest> bucket;
  std::string bucket_why;
  if (allow_buckets && backend != static_cast<int>(Backend::kAten)) {
    const std::vector<int64_t> buckets = config().shape_buckets();
    if (!buckets.empty()) {
      std::vector<std::pair<int, int>> dims;
      {
        std::lock_guard<std::mutex> lk(g_cache_mu);
        dims = varying_input_dims(sig);
      }
      bucket = bucket_request(g, dims, buckets, &bucket_why);
    }
  }
  const bool disk_hit = !bucket && disk_cache_lookup(g.hash, name, g.tokens);
  auto t0 = std::chrono::steady_clock::now();
  const auto cg0 = ember::codegen::GetCodegenStats();
  bool reused = false;
  std::shared_ptr<CompiledGraph> entry =
      compile(g, backend, bucket ? &*bucket : nullptr, &bucket_why, &reused);
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto cg1 = ember::codegen::GetCodegenStats();
  std::string site = current_source();
  RecompileReport report;
  {
    std::lock_guard<std::mutex> lk(g_cache_mu);
    g_cache[g.hash].push_back(entry);
    report = note_compile(g, sig, site);
  }
  // The report is emitted outside the cache lock (the hooks take the GIL).
  if (!report.reason.empty()) {
    {
      std::lock_guard<std::mutex> mg(metrics().mu);
      metrics().recompiles++;
      metrics().recompiles_by_reason[report.reason]++;
    }
    log_recompile_line(report.text);
  }
  if (!report.warning.empty() && g_warn_hook) g_warn_hook(report.warning);
  if (bucket || !bucket_why.empty()) {
    const bool padded = entry->lowered && entry->lowered->pad_length;
    std::string text = "ember: shape bucketing" + (site.empty() ? "" : " at " + site) + ": ";
    if (padded) {
      text += dims_text(bucket->dims) + " of length " + std::to_string(bucket->length) +
              " padded to " + std::to_string(bucket->bucket) +
              (reused ? " (the bucket's program, compiled before)" : " (compiled for the bucket)");
    } else {
      text += "compiled the exact shape: " + bucket_why;
    }
    {
      std::lock_guard<std::mutex> mg(metrics().mu);
      if (padded) {
        metrics().bucketed_graphs++;
        metrics().bucket_reuses += reused;
      } else {
        metrics().bucket_refusals++;
      }
    }
    log_recompile_line(text);
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
  clear_families();
  ember::GlobalExecutableCache().Clear();  // the padded programs of shape bucketing
}

}  // namespace ember_torch
