// Asynchronous execution (docs/architecture.md, "Execution model"): one FIFO queue of
// jobs run by one worker thread, and the futures through which tensor states receive
// a queued program's results.
//
// A sync turns the states it gathers into in-flight states holding a FutureData (under
// the state mutex, in the same step as the gather), then enqueues a job that runs the
// program and resolves those futures. Readers of the bytes wait for their future only;
// everything else (tracing, hashing, compiling the next graph) goes on meanwhile.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "bridge.h"

namespace ember_torch {

// The device value (one root of one job) a queued program will produce.
//
// A *view future* is the value of a view op traced on an in-flight tensor: it has no
// job of its own and is ready when its base is; its data aliases the base's bytes with
// `meta`'s sizes, strides and offset (the view eager would return on the base's data).
// So a view of an in-flight tensor is a leaf exactly like the same view of device data
// (same graph structure and hash whether or not the base's program has finished).
//
// Donation (donation.cpp) reads the future's use_count: every state, leaf node and view
// future that may still read the value holds a FuturePtr.
struct FutureData {
  explicit FutureData(TensorMeta m) : meta(std::move(m)) {}
  // A view future of `base` with the view's layout `m` (offset in the base's storage).
  FutureData(TensorMeta m, std::shared_ptr<FutureData> base)
      : meta(std::move(m)), base_(std::move(base)) {}

  const TensorMeta meta;  // eager's layout of the result (known when the job is made)

  // Sets the value (device data laid out as `meta`) and wakes the waiters. The first
  // resolve or fail wins (states sharing one value share its future).
  void resolve(at::Tensor data);
  // Sets the error (eager's exception, with its message text) and wakes the waiters.
  // `reported` is shared by every future one program's error failed: the first read
  // that raises it sets it, and syncs raise an error no read has (sync.cpp).
  void fail(std::exception_ptr error, std::string text,
            std::shared_ptr<std::atomic<bool>> reported);

  bool ready() const;
  // Blocks until ready (through g_wait_hook: the GIL is released, and a
  // KeyboardInterrupt cancels the running job and propagates). Returns the data;
  // rethrows the error.
  at::Tensor wait();
  // Non-blocking: when ready and failed, rethrows the error (marking it reported).
  void rethrow_if_failed() const;
  // Non-blocking: the error when ready and failed, else null (not marked reported: for
  // a program that propagates it to its own roots).
  std::exception_ptr error() const;
  // Non-blocking: the data when ready and ok, else undefined; `*error` gets the error
  // text when ready and failed.
  at::Tensor peek(std::string* error) const;
  // The `reported` flag of a failed future's error (null otherwise).
  std::shared_ptr<std::atomic<bool>> reported_flag() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;
  mutable at::Tensor data_;  // a view future: its view of the base's data, made on first use
  std::exception_ptr error_;
  std::string error_text_;
  std::shared_ptr<std::atomic<bool>> reported_;
  const std::shared_ptr<FutureData> base_;  // a view future's base; null otherwise
  at::Tensor view_of(const at::Tensor& base_data) const;
  friend class ExecutionQueue;
};
using FuturePtr = std::shared_ptr<FutureData>;

// The process's execution queue: jobs run one at a time, in enqueue order, on one
// worker thread (started on the first enqueue).
class ExecutionQueue {
 public:
  static ExecutionQueue& get();

  // The id the next job will get (futures are made before their job is enqueued).
  uint64_t next_id();
  // Queues `job` (which must not throw: it reports through its futures) under `id`.
  // Ids are queued in increasing order (the caller serializes next_id + enqueue).
  void enqueue(uint64_t id, std::function<void()> job);
  // Job `id` ran on the calling thread instead (after wait_for(id - 1)): marks it done.
  void mark_done(uint64_t id);

  // Blocks until every job enqueued so far has finished (through the wait hook).
  void drain();
  // Blocks until job `id` has finished.
  void wait_for(uint64_t id);
  // Whether job `id` has finished (or never existed).
  bool done(uint64_t id) const;
  // Whether job `id` has finished and the worker holds no OpenMP pool, so that a job
  // the caller runs itself leaves the process one pool (openmp_team.h).
  bool idle_for_caller(uint64_t id) const;

  // Whether the calling thread is the worker (which must never wait on the queue or
  // call back into Python).
  static bool on_worker();

  // Asks the running job to stop between its steps (the executable checks the flag).
  void cancel_running();
  // The flag the running job's executable checks; cleared when the next job starts.
  const std::atomic<bool>* cancel_flag() const { return &cancel_; }

  // Finishes the queued jobs and stops the worker (at interpreter exit). Later
  // enqueues run on the calling thread.
  void shutdown();

  int64_t queued() const;  // jobs enqueued and not finished

  // Tests: while paused the worker starts no job (a forced interleaving: other threads
  // trace while a sync's job waits).
  void set_paused(bool paused);

 private:
  ExecutionQueue() = default;
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work available
  std::condition_variable done_cv_;  // a job finished
  std::deque<std::pair<uint64_t, std::function<void()>>> jobs_;
  std::thread worker_;
  bool stopping_ = false;
  bool stopped_ = false;
  bool paused_ = false;
  bool holds_team_ = false;  // the worker ran a job since it last freed its OpenMP pool
  uint64_t next_id_ = 1;
  uint64_t finished_through_ = 0;  // ids <= this have finished (FIFO)
  std::atomic<bool> cancel_{false};
};

// How a blocking wait runs (set by the Python binding; without one, a plain wait):
// `g_wait_hook(body)` calls `body(interrupted)` with the GIL released when the calling
// thread holds it; `interrupted()` briefly takes the GIL back to run Python's signal
// handlers and returns true when one raised (KeyboardInterrupt). When the body returns
// after an interrupt, the hook raises that Python error.
using InterruptCheck = std::function<bool()>;
extern std::function<void(const std::function<void(const InterruptCheck&)>&)> g_wait_hook;

}  // namespace ember_torch
