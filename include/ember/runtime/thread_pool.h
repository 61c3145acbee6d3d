// The runtime's parallel-for, handed to native kernels (codegen::ParallelFor).
//
// ThreadPool: a fixed set of worker threads. ParallelFor splits [begin, end)
// into at most num_threads() chunks of at least `grain` elements; the
// calling thread runs one chunk and waits for the rest. A ParallelFor
// called from inside a pool task (nested) runs serially, so it never
// deadlocks. Several threads may call ParallelFor at once (jobs queue).
//
// The process-wide runtime parallel-for (RuntimeParallelFor) is a pool of
// EMBER_NUM_THREADS threads (default: hardware concurrency), created on
// first use. The torch bridge swaps in at::parallel_for with
// SetRuntimeParallelFor; an empty function restores the pool.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ember/codegen/cpu.h"

namespace ember {

class ThreadPool {
 public:
  // threads <= 0: hardware concurrency. The calling thread counts as one:
  // the pool starts threads - 1 workers.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& body);

 private:
  struct Job;
  void WorkerLoop();
  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
};

// Threads of the default pool: EMBER_NUM_THREADS if set and > 0, else
// hardware concurrency.
int DefaultNumThreads();
// The pool behind the default runtime parallel-for.
ThreadPool& DefaultThreadPool();
// What kernel steps use: the function set by SetRuntimeParallelFor, else the
// default pool's ParallelFor.
codegen::ParallelFor RuntimeParallelFor();
void SetRuntimeParallelFor(codegen::ParallelFor pf);

}  // namespace ember
