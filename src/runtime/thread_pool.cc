// ThreadPool and the process-wide runtime parallel-for (see
// include/ember/runtime/thread_pool.h).
#include "ember/runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace ember {
namespace {
thread_local bool t_in_pool_task = false;
}  // namespace

// One ParallelFor call: `parts` chunks, taken by index; the caller waits
// until `done` reaches `parts`.
struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* body = nullptr;
  int64_t begin = 0, chunk = 0, extra = 0, parts = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;

  // Runs chunks until none are left; returns whether it ran any.
  void RunChunks() {
    for (;;) {
      const int64_t p = next.fetch_add(1);
      if (p >= parts) return;
      const int64_t b = begin + p * chunk + std::min(p, extra);
      const int64_t e = b + chunk + (p < extra ? 1 : 0);
      const bool was = t_in_pool_task;
      t_in_pool_task = true;
      (*body)(b, e);
      t_in_pool_task = was;
      if (done.fetch_add(1) + 1 == parts) {
        std::lock_guard<std::mutex> lock(mu);
        cv.notify_all();
      }
    }
  }
};

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = threads;
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      job = queue_.front();
      // Leave the job queued while chunks remain so other workers join it.
      if (job->next.load() >= job->parts) {
        queue_.pop_front();
        continue;
      }
    }
    job->RunChunks();
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty() && queue_.front() == job) queue_.pop_front();
  }
}

void ThreadPool::ParallelFor(int64_t begin, int64_t end, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& body) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t parts = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (parts <= 1 || workers_.empty() || t_in_pool_task) {
    body(begin, end);
    return;
  }
  auto job = std::make_shared<Job>();
  job->body = &body;
  job->begin = begin;
  job->parts = parts;
  job->chunk = n / parts;
  job->extra = n % parts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
  }
  cv_.notify_all();
  job->RunChunks();
  std::unique_lock<std::mutex> lock(job->mu);
  job->cv.wait(lock, [&] { return job->done.load() >= job->parts; });
}

int DefaultNumThreads() {
  if (const char* env = std::getenv("EMBER_NUM_THREADS")) {
    const int v = std::atoi(env);
    if (v > 0) return v;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool& DefaultThreadPool() {
  // Leaked on purpose: kernels may run during static destruction of callers.
  static ThreadPool* pool = new ThreadPool(DefaultNumThreads());
  return *pool;
}

namespace {
std::mutex g_pf_mu;
codegen::ParallelFor& OverridePf() {
  static codegen::ParallelFor* pf = new codegen::ParallelFor();
  return *pf;
}
}  // namespace

codegen::ParallelFor RuntimeParallelFor() {
  {
    std::lock_guard<std::mutex> lock(g_pf_mu);
    if (OverridePf()) return OverridePf();
  }
  return
      [](int64_t b, int64_t e, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
        DefaultThreadPool().ParallelFor(b, e, grain, body);
      };
}

void SetRuntimeParallelFor(codegen::ParallelFor pf) {
  std::lock_guard<std::mutex> lock(g_pf_mu);
  OverridePf() = std::move(pf);
}

}  // namespace ember
