// Sync (docs/architecture.md, "Sync" and "Execution model"): claims the pending values
// of all live tensors (their states become in-flight futures), builds their lazy graph
// (lazy_graph.h), finds or compiles its executable (graph_cache.h) and hands the run to
// the execution queue (execution_queue.h), or runs it here when asynchronous execution
// is off. The run (`execute`, on the queue's worker) resolves the futures; a failure
// resolves the roots that depend on it with the error and computes the others.
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "../ir/log.h"
#include "bridge.h"
#include "capture.h"
#include "donation.h"
#include "execution_queue.h"
#include "graph_cache.h"
#include "lazy_graph.h"
#include "lower.h"

namespace ember_torch {
namespace {

std::atomic<bool> g_cap_warned{false};
std::mutex g_sync_mu;                       // one sync at a time (gather, build, queue)
std::atomic<int64_t> g_sync_generation{0};  // syncs that ran work; never reset

using Roots = std::vector<std::pair<StatePtr, Value>>;
using Futures = std::vector<FuturePtr>;

// ---------------------------------------------------------------- unreported errors
// A queued program's error is raised once: by the first read of an affected tensor or,
// when nothing reads one, by the next sync (docs/architecture.md, "Execution model").
struct JobError {
  std::exception_ptr error;
  std::shared_ptr<std::atomic<bool>> reported;
};
std::mutex g_err_mu;
std::vector<JobError> g_unreported;

void note_error(std::exception_ptr e, const std::shared_ptr<std::atomic<bool>>& reported) {
  std::lock_guard<std::mutex> l(g_err_mu);
  g_unreported.push_back(JobError{std::move(e), reported});
}

// The first error of a finished program that nothing has raised yet (marked raised).
std::exception_ptr take_unreported() {
  std::lock_guard<std::mutex> l(g_err_mu);
  std::exception_ptr first;
  for (auto& je : g_unreported) {
    if (!first && !je.reported->exchange(true)) first = je.error;
  }
  g_unreported.clear();
  return first;
}

// EMBER_LOG=sync: one line per sync with where its fixed cost went (microseconds):
// gathering the pending roots, building + hashing the lazy graph, the cache lookup,
// the wait in the queue, the run (argument buffers, the executable, binding outputs as
// tensors) and resolving the futures.
bool log_sync() {
  static const bool on = ember::LogEnabled("sync");
  return on;
}
using SteadyClock = std::chrono::steady_clock;
double us_since(SteadyClock::time_point t) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - t).count();
}

struct Tail;
void resolve(const Futures& futures, const std::vector<bool>& failed,
             const std::vector<at::Tensor>& outputs, const std::exception_ptr& error,
             const std::shared_ptr<std::atomic<bool>>& reported);

// One program to run: the compiled graph, its lazy graph (in-flight inputs resolved when
// it starts) and the futures of its roots.
struct Job {
  uint64_t id = 0;
  std::shared_ptr<const CompiledGraph> entry;
  LazyGraph g;
  Roots roots;
  Futures futures;
  int num_threads = 1;  // the syncing thread's intra-op threads: the job runs with them
  bool hit = false;
  // Donation per ember.config.donate_buffers; never for torch.compile's capture, whose
  // program is replayed on new buffers without donation: its first run is the same.
  bool donate = true;
  double gather_us = 0, build_us = 0, lookup_us = 0;
  SteadyClock::time_point queued_at;
  // Run after the program, op by op on ATen (split_tail): null for most jobs.
  std::shared_ptr<Tail> tail;
};

// ---------------------------------------------------------------- eager tails
// A sync's ops downstream of an append to a device tensor (`cat` with a device-data or
// in-flight operand: `ids = torch.cat([ids, next], -1)` in a decoding loop), when there
// are few of them, run after the program as ATen calls instead of inside it, so the
// program's structure does not change as the tensor grows (docs/architecture.md,
// "Recompiles": generation loops).
constexpr size_t kMaxTailOps = 32;

struct Tail {
  std::vector<NodePtr> nodes;  // clones of the tail's op nodes (operands rewired), trace order
  // Leaves standing for program values the tail reads, and the futures the program
  // resolves with those values.
  std::vector<std::pair<NodePtr, FuturePtr>> boundary;
  Roots roots;  // the tail's roots: their states, the clones' values
  Futures futures;
};

bool is_append(const Node* n) {
  static const c10::FunctionSchema* cat =
      &c10::Dispatcher::singleton().findSchemaOrThrow("aten::cat", "").schema();
  if (&n->op->schema() != cat) return false;
  for (const Value& o : n->operands) {
    if (o.node->kind == NodeKind::kData || o.node->kind == NodeKind::kFuture) return true;
  }
  return false;
}

// Splits `job`'s graph into a program and an eager tail (above) when it has one: the
// appends and every op reading a tail value, at most kMaxTailOps of them, none random,
// and the program not empty. The program's roots are the other roots and the program
// values the tail reads; job->g is rebuilt from them. `*all_roots` / `*all_futures` keep
// every claimed root (to unclaim them on a compile error).
void split_tail(Job& job) {
  const LazyGraph& g = job.g;
  std::unordered_set<const Node*> in_tail;
  for (const Node* n : g.ops) {
    bool t = is_append(n);
    for (size_t i = 0; i < n->operands.size() && !t; ++i)
      t = in_tail.count(n->operands[i].node.get());
    if (!t) continue;
    if (n->seeded_default || in_tail.size() >= kMaxTailOps) return;
    for (const ArgSpec& sp : n->specs) {
      if (sp.kind == ArgKind::kGenerator) return;
    }
    in_tail.insert(n);
  }
  if (in_tail.empty() || in_tail.size() == g.ops.size()) return;
  auto tail = std::make_shared<Tail>();
  Roots main_roots;
  Futures main_futures;
  std::map<std::pair<const Node*, int>, size_t> main_root_of;  // value -> main root index
  for (size_t i = 0; i < job.roots.size(); ++i) {
    const Value& v = job.roots[i].second;
    if (in_tail.count(v.node.get())) continue;
    main_root_of.emplace(std::make_pair(v.node.get(), v.index), main_roots.size());
    main_roots.push_back(job.roots[i]);
    main_futures.push_back(job.futures[i]);
  }
  std::unordered_map<const Node*, NodePtr> clone_of;
  std::map<std::pair<const Node*, int>, NodePtr> leaf_of;  // program value -> its leaf
  for (Node* n : g.ops) {
    if (!in_tail.count(n)) continue;
    auto c = std::make_shared<Node>(*n);
    for (Value& o : c->operands) {
      Node* src = o.node.get();
      if (src->kind != NodeKind::kOp) continue;  // a leaf: read as it is
      if (in_tail.count(src)) {
        o.node = clone_of.at(src);
        continue;
      }
      const auto key = std::make_pair(static_cast<const Node*>(src), o.index);
      auto it = leaf_of.find(key);
      if (it == leaf_of.end()) {
        auto leaf = std::make_shared<Node>();
        leaf->kind = NodeKind::kData;
        leaf->outputs = {src->outputs[o.index]};
        leaf->output_is_view = {false};
        FuturePtr f;
        auto r = main_root_of.find(key);
        if (r != main_root_of.end()) {
          f = main_futures[r->second];
        } else {
          f = std::make_shared<FutureData>(src->outputs[o.index]);
          main_root_of.emplace(key, main_roots.size());
          main_roots.emplace_back(nullptr, o);
          main_futures.push_back(f);
        }
        tail->boundary.emplace_back(leaf, f);
        it = leaf_of.emplace(key, leaf).first;
      }
      o = Value{it->second, 0};
    }
    clone_of[n] = c;
    tail->nodes.push_back(std::move(c));
  }
  for (size_t i = 0; i < job.roots.size(); ++i) {
    const Value& v = job.roots[i].second;
    auto it = clone_of.find(v.node.get());
    if (it == clone_of.end()) continue;
    tail->roots.emplace_back(job.roots[i].first, Value{it->second, v.index});
    tail->futures.push_back(job.futures[i]);
  }
  job.roots = std::move(main_roots);
  job.futures = std::move(main_futures);
  job.g = LazyGraph();
  build_lazy_graph(job.roots, job.g);
  job.tail = std::move(tail);
  job.donate = false;  // the tail reads inputs the program's donation does not see
}

// Runs `job`'s tail after its program: the boundary values from the program's futures,
// then one ATen call per op (the aten backend's runner; nothing is cached or counted as
// a compile). Returns the tail's first error.
std::exception_ptr run_tail(Tail& t, const std::shared_ptr<std::atomic<bool>>& reported) {
  auto fail_all = [&](const std::exception_ptr& e, const std::shared_ptr<std::atomic<bool>>& flag) {
    resolve(t.futures, std::vector<bool>(t.futures.size(), true), {}, e, flag ? flag : reported);
  };
  for (auto& [leaf, f] : t.boundary) {
    if (std::exception_ptr e = f->error()) {
      fail_all(e, f->reported_flag());  // the program's error, reported through it
      return nullptr;
    }
    std::string err;
    leaf->data = f->peek(&err);
  }
  LazyGraph g;
  build_lazy_graph(t.roots, g);
  std::vector<const FutureData*> bad;
  if (std::exception_ptr e = resolve_inputs(g, &bad)) {
    fail_all(e, bad.front()->reported_flag());
    return nullptr;
  }
  std::vector<at::Tensor> outputs;
  std::vector<bool> failed(t.roots.size(), false);
  std::exception_ptr first_error;
  try {
    auto ex = compile_aten(g);
    run_aten(*ex, g, outputs, failed, first_error);
  } catch (...) {
    first_error = std::current_exception();
    failed.assign(t.roots.size(), true);
  }
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().tail_ops += static_cast<int64_t>(g.ops.size());
  }
  resolve(t.futures, failed, outputs, first_error, reported);
  return first_error;
}

void resolve(const Futures& futures, const std::vector<bool>& failed,
             const std::vector<at::Tensor>& outputs, const std::exception_ptr& error,
             const std::shared_ptr<std::atomic<bool>>& reported) {
  const std::string text = error ? error_text(error) : std::string();
  for (size_t i = 0; i < futures.size(); ++i) {
    if (failed[i]) {
      futures[i]->fail(error, text, reported);
    } else {
      futures[i]->resolve(outputs[i]);
    }
  }
}

std::exception_ptr execute(const CompiledGraph& entry, LazyGraph& g, const Roots& roots,
                           const Futures& futures, int depth, Job* timing,
                           const std::shared_ptr<std::atomic<bool>>& reported);

// Runs `roots` (a subset of a failed program's roots) as a program of their own: built,
// found or compiled here (the worker), resolving their futures. Errors are reported
// through the futures, with the failed program's `reported` flag: raising any error of
// the program (or of its reruns) counts as raising the program's error.
void rerun(const Roots& roots, const Futures& futures, int depth,
           const std::shared_ptr<std::atomic<bool>>& reported) {
  if (roots.empty()) return;
  if (depth >= 8) {
    auto e = std::make_exception_ptr(
        c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                   "ember: internal error: too many failures recomputing a program"));
    resolve(futures, std::vector<bool>(futures.size(), true), {}, e, reported);
    return;
  }
  LazyGraph g;
  build_lazy_graph(roots, g);
  bool hit = false;
  std::shared_ptr<const CompiledGraph> entry;
  try {
    entry = find_or_compile(g, config().backend.load(), &hit, /*allow_buckets=*/true);
  } catch (...) {
    resolve(futures, std::vector<bool>(futures.size(), true), {}, std::current_exception(),
            reported);
    return;
  }
  execute(*entry, g, roots, futures, depth, nullptr, reported);
}

// Splits a failed program's roots: those that `failed_root(i)` gets the error, the rest
// are computed again without the failing part.
template <typename F>
void fail_and_rerun(const Roots& roots, const Futures& futures, const std::exception_ptr& error,
                    const std::shared_ptr<std::atomic<bool>>& reported, int depth, F failed_root) {
  Roots rest;
  Futures rest_f;
  const std::string text = error_text(error);
  for (size_t i = 0; i < roots.size(); ++i) {
    if (failed_root(i)) {
      futures[i]->fail(error, text, reported);
    } else {
      rest.push_back(roots[i]);
      rest_f.push_back(futures[i]);
    }
  }
  rerun(rest, rest_f, depth + 1, reported);
}

// Runs the compiled program of `g` and resolves `futures` (one per root). Returns the
// first error of this program (already recorded in the futures of the roots it
// affects), or null; null too when it failed only through a failed input (that input's
// program reports the error).
std::exception_ptr execute(const CompiledGraph& entry, LazyGraph& g, const Roots& roots,
                           const Futures& futures, int depth, Job* timing,
                           const std::shared_ptr<std::atomic<bool>>& reported) {
  // In-flight inputs: their programs ran before this one (FIFO).
  std::vector<const FutureData*> bad;
  if (std::exception_ptr in_error = resolve_inputs(g, &bad)) {
    // Roots reading a failed input fail with its error (one walk per root). The error
    // is the earlier program's: it keeps that program's `reported` flag (raising it
    // through any tensor reports it once) and is not this program's to report again.
    auto flag = bad.front()->reported_flag();
    fail_and_rerun(roots, futures, in_error, flag ? flag : reported, depth, [&](size_t i) {
      return reaches(roots[i].second, [&](const Node* n) {
        return n->kind == NodeKind::kFuture &&
               std::find(bad.begin(), bad.end(), n->future.get()) != bad.end();
      });
    });
    return nullptr;
  }
  const bool timed = timing && log_sync();
  auto tr = SteadyClock::now();
  if (timed) g_run_timing = RunTiming{};
  LoweredRun lowered;
  std::vector<at::Tensor> outputs;
  std::vector<bool> failed(roots.size(), false);
  std::exception_ptr first_error;
  if (entry.lowered) {
    const bool donate = donate_buffers().load() && (!timing || timing->donate);
    lowered = run_lowered(*entry.lowered, g, donate ? donatable_inputs(g) : std::vector<bool>());
  } else {
    run_aten(*entry.aten, g, outputs, failed, first_error);
  }
  const double run_us = us_since(tr);
  entry.last_run_us.store(run_us, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().execute_seconds += run_us * 1e-6;
  }
  if (entry.lowered && lowered.error) {
    // Roots that do not depend on the failing node are computed again without it.
    const Node* bad = lowered.failed_op >= 0 ? g.ops[lowered.failed_op] : nullptr;
    fail_and_rerun(roots, futures, lowered.error, reported, depth, [&](size_t i) {
      if (lowered.root_failed.size() == roots.size())
        return static_cast<bool>(lowered.root_failed[i]);
      return !bad || depends_on(roots[i].second, bad);
    });
    return lowered.error;
  }
  if (entry.lowered) outputs = std::move(lowered.outputs);
  auto tb = SteadyClock::now();
  resolve(futures, failed, outputs, first_error, reported);
  if (timed) {
    char line[360];
    std::snprintf(line, sizeof(line),
                  "roots=%zu ops=%zu inputs=%zu %s gather=%.1f build=%.1f lookup=%.1f "
                  "queued=%.1f run=%.1f (args=%.1f exec=%.1f outputs=%.1f) bind=%.1f us",
                  roots.size(), g.ops.size(), g.inputs.size(), timing->hit ? "hit" : "miss",
                  timing->gather_us, timing->build_us, timing->lookup_us,
                  std::chrono::duration<double, std::micro>(tr - timing->queued_at).count(), run_us,
                  g_run_timing.args_us, g_run_timing.exec_us, g_run_timing.outputs_us,
                  us_since(tb));
    ember::LogLine("sync", line);
  }
  return first_error;
}

// Runs a job on the calling thread (the worker, or the syncing thread without
// asynchronous execution); returns its first error, whose `reported` flag the futures
// it failed share.
std::exception_ptr run_job(Job& job, const std::shared_ptr<std::atomic<bool>>& reported) {
  if (at::get_num_threads() != job.num_threads) at::set_num_threads(job.num_threads);
  std::exception_ptr e = execute(*job.entry, job.g, job.roots, job.futures, 0, &job, reported);
  if (job.tail) {
    std::exception_ptr te = run_tail(*job.tail, reported);
    if (!e) e = te;
  }
  return e;
}

// Runs a job as the worker does: its error is noted, raised by the first read of an
// affected tensor or by the next sync.
void run_queued_job(Job& job) {
  auto reported = std::make_shared<std::atomic<bool>>(false);
  std::exception_ptr e = run_job(job, reported);
  // A run cancelled by Ctrl-C: the KeyboardInterrupt the wait raised told the user.
  if (e && ExecutionQueue::on_worker() && ExecutionQueue::get().cancel_flag()->load())
    reported->store(true);
  if (e) note_error(e, reported);
}

// A program whose caller waits for it at once (ember.sync(), a value read), with nothing
// else queued, runs on the calling thread when its last run took less than this: handing
// it to the worker costs two thread wake-ups (the worker's, then the waiter's; ~0.1 ms
// each on the 2-core VM), as much as a small program. A longer one goes to the worker,
// where the wait for it is interruptible (Ctrl-C cancels it between steps). While the
// worker still holds its OpenMP pool (idle less than 20 ms) the job goes to it too: two
// pools would slow both teams (openmp_team.h).
//
// With async_execution "auto", a short program also runs here when nothing waits for it
// if the machine has no CPU beyond the program's ATen threads, after the programs queued
// before it: the worker's team and the tracer would share the CPUs, and each team
// barrier waits on a thread the tracer preempted (the digits step's program took
// 2.8-3.3 ms on the worker while Python traced, 1.7 ms here; docs/performance.md).
constexpr double kInlineRunUs = 10000;

// CPUs this process may run on (its affinity mask), read once.
int available_cpus() {
  static const int n = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

// What the caller of a sync does next: nothing (the optimizer-step sync), wait for one of
// this sync's values (a value read), or wait until every queued program has run.
enum class Then { kReturn, kReadValue, kDrain };

// The sync proper; with `capture` (torch.compile's first call) the program runs here and
// the capture receives it.
void sync_impl(const std::string& reason, SyncCapture* capture, Then then) {
  const bool caller_waits = then != Then::kReturn;
  const bool wait = then == Then::kDrain;
  // An earlier program's error nothing has raised yet: raised here, before anything new
  // is claimed (the pending states stay pending).
  if (std::exception_ptr e = take_unreported()) std::rethrow_exception(e);
  ExecutionQueue& queue = ExecutionQueue::get();
  const int async_mode = config().async_execution.load();
  const bool inline_run = capture || async_mode == Config::kAsyncOff;
  std::exception_ptr inline_error;
  {
    std::lock_guard<std::mutex> sync_lock(g_sync_mu);
    auto job = std::make_shared<Job>();
    job->donate = !capture;
    const bool timed = log_sync();
    auto t0 = SteadyClock::now();
    job->roots = claim_pending_states(&job->futures);
    job->gather_us = timed ? us_since(t0) : 0;
    add_pending_ops(-1);
    if (!job->roots.empty()) {
      g_sync_generation.fetch_add(1);
      const Roots claimed = job->roots;
      const Futures claimed_futures = job->futures;
      try {
        t0 = SteadyClock::now();
        build_lazy_graph(job->roots, job->g);
        if (!capture) split_tail(*job);
        job->build_us = timed ? us_since(t0) : 0;
        t0 = SteadyClock::now();
        job->entry = find_or_compile(job->g, config().backend.load(), &job->hit, !capture);
        job->lookup_us = timed ? us_since(t0) : 0;
      } catch (...) {
        unclaim_states(claimed, claimed_futures);
        throw;
      }
      {
        std::lock_guard<std::mutex> mg(metrics().mu);
        metrics().syncs++;
      }
      set_last_graph(job->entry->stats);
      job->id = queue.next_id();
      job->num_threads = at::get_num_threads();
      job->queued_at = SteadyClock::now();
      if (inline_run) {
        // Earlier queued programs produce this one's in-flight inputs: they finish first.
        queue.wait_for(job->id - 1);
        inline_error = run_job(*job, std::make_shared<std::atomic<bool>>(true));
        queue.mark_done(job->id);
        if (!inline_error && capture && job->entry->lowered) {
          capture->program = job->entry->lowered;
          capture->stats = job->entry->stats;
          capture->roots = job->roots;
          capture->graph = std::move(job->g);
        }
      } else if (const double last_us = job->entry->last_run_us.load(std::memory_order_relaxed);
                 last_us >= 0 && last_us < kInlineRunUs &&
                 ((async_mode == Config::kAsyncAuto && available_cpus() <= job->num_threads) ||
                  (caller_waits && queue.idle_for_caller(job->id - 1)))) {
        // Runs here, as the worker would (errors noted for the next read or sync), after
        // the programs queued before it (their results are its inputs).
        queue.wait_for(job->id - 1);
        run_queued_job(*job);
        queue.mark_done(job->id);
      } else {
        // The worker runs the job under the syncing thread's ATen thread-local state
        // (profiler, debug info, dispatch keys, grad mode), as the sync would have.
        queue.enqueue(job->id, [job, tls = at::ThreadLocalState()] {
          at::ThreadLocalStateGuard tls_guard(tls);
          run_queued_job(*job);
        });
      }
    }
  }
  if (inline_error) std::rethrow_exception(inline_error);  // its futures' flag says raised
  if (wait) {
    queue.drain();
    if (std::exception_ptr e = take_unreported()) std::rethrow_exception(e);
  }
}

}  // namespace

void sync_and_capture(const std::string& reason, SyncCapture* capture) {
  sync_impl(reason, capture, Then::kReturn);
}

std::mutex& sync_mutex() { return g_sync_mu; }

void sync(const std::string& reason) { sync_impl(reason, nullptr, Then::kReturn); }

void sync_for_read(const std::string& reason) { sync_impl(reason, nullptr, Then::kReadValue); }

void sync_and_wait(const std::string& reason) { sync_impl(reason, nullptr, Then::kDrain); }

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
