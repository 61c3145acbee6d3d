// The execution queue and futures (execution_queue.h).
#include "execution_queue.h"

#include <chrono>

#include "openmp_team.h"

namespace ember_torch {

std::function<void(const std::function<void(const InterruptCheck&)>&)> g_wait_hook;

namespace {

thread_local bool t_on_worker = false;

// How long the worker stays idle before it frees its OpenMP pool (openmp_team.h):
// longer than the gap between a training loop's syncs (the next step's trace), so that a
// loop of queued steps keeps one pool, and short against eager work that follows.
constexpr auto kTeamIdleRelease = std::chrono::milliseconds(20);

// Waits on `cv`/`mu` until `pred()`, through g_wait_hook when one is set; a
// KeyboardInterrupt cancels the running job (the hook then raises it).
template <typename Pred>
void blocking_wait(std::mutex& mu, std::condition_variable& cv, Pred pred) {
  TORCH_CHECK(!ExecutionQueue::on_worker(),
              "ember: internal error: the execution worker waited on its own queue");
  auto body = [&](const InterruptCheck& interrupted) {
    std::unique_lock<std::mutex> lk(mu);
    while (!pred()) {
      if (!interrupted) {
        cv.wait(lk);
        continue;
      }
      cv.wait_for(lk, std::chrono::milliseconds(20));
      if (pred()) return;
      lk.unlock();
      if (interrupted()) {
        ExecutionQueue::get().cancel_running();
        return;
      }
      lk.lock();
    }
  };
  if (g_wait_hook) {
    g_wait_hook(body);
  } else {
    body(InterruptCheck());
  }
}

}  // namespace

// ---------------------------------------------------------------- futures
void FutureData::resolve(at::Tensor data) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (ready_) return;  // a future shared by several roots of one program
    data_ = std::move(data);
    ready_ = true;
  }
  cv_.notify_all();
}

void FutureData::fail(std::exception_ptr error, std::string text,
                      std::shared_ptr<std::atomic<bool>> reported) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (ready_) return;
    error_ = std::move(error);
    error_text_ = std::move(text);
    reported_ = std::move(reported);
    ready_ = true;
  }
  cv_.notify_all();
}

at::Tensor FutureData::view_of(const at::Tensor& b) const {
  if (!b.defined()) return b;
  std::lock_guard<std::mutex> lk(mu_);
  if (data_.defined()) return data_;  // made once: one tensor, as a settled state holds
  const TensorMeta& bm = base_->meta;
  TORCH_INTERNAL_ASSERT(
      b.sizes() == at::IntArrayRef(bm.sizes) && b.strides() == at::IntArrayRef(bm.strides),
      "ember: a program's result is not laid out as its tensor");
  data_ = b.as_strided(meta.sizes, meta.strides, b.storage_offset() + (meta.offset - bm.offset));
  return data_;
}

bool FutureData::ready() const {
  if (base_) return base_->ready();
  std::lock_guard<std::mutex> lk(mu_);
  return ready_;
}

at::Tensor FutureData::wait() {
  if (base_) return view_of(base_->wait());
  blocking_wait(mu_, cv_, [&] { return ready_; });
  std::lock_guard<std::mutex> lk(mu_);
  if (!ready_) {  // interrupted: the hook raised already; reached without a hook only
    TORCH_CHECK(false, "ember: wait for a queued program was interrupted");
  }
  if (error_) {
    if (reported_) reported_->store(true);
    std::rethrow_exception(error_);
  }
  return data_;
}

void FutureData::rethrow_if_failed() const {
  if (base_) return base_->rethrow_if_failed();
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (ready_) e = error_;
    if (e && reported_) reported_->store(true);
  }
  if (e) std::rethrow_exception(e);
}

std::exception_ptr FutureData::error() const {
  if (base_) return base_->error();
  std::lock_guard<std::mutex> lk(mu_);
  return ready_ ? error_ : nullptr;
}

at::Tensor FutureData::peek(std::string* error) const {
  if (base_) return view_of(base_->peek(error));
  std::lock_guard<std::mutex> lk(mu_);
  if (!ready_) return at::Tensor();
  if (error_ && error) *error = error_text_;
  return data_;
}

std::shared_ptr<std::atomic<bool>> FutureData::reported_flag() const {
  if (base_) return base_->reported_flag();
  std::lock_guard<std::mutex> lk(mu_);
  return reported_;
}

// ---------------------------------------------------------------- the queue
ExecutionQueue& ExecutionQueue::get() {
  static ExecutionQueue* q = new ExecutionQueue();  // leaked: may be used during exit
  return *q;
}

uint64_t ExecutionQueue::next_id() {
  std::lock_guard<std::mutex> lk(mu_);
  return next_id_++;
}

bool ExecutionQueue::on_worker() { return t_on_worker; }

void ExecutionQueue::enqueue(uint64_t id, std::function<void()> job) {
  // The worker's team runs the job: the caller's pool (from eager ops or a job run here)
  // goes, so that the process holds one (openmp_team.h).
  release_openmp_team();
  std::unique_lock<std::mutex> lk(mu_);
  if (stopped_) {
    // After shutdown (interpreter exit): run here, still in order (nothing is queued).
    lk.unlock();
    job();
    lk.lock();
    finished_through_ = std::max(finished_through_, id);
    done_cv_.notify_all();
    return;
  }
  jobs_.emplace_back(id, std::move(job));
  if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  lk.unlock();
  cv_.notify_one();
}

void ExecutionQueue::mark_done(uint64_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    finished_through_ = std::max(finished_through_, id);
  }
  done_cv_.notify_all();
}

void ExecutionQueue::run() {
  t_on_worker = true;
  std::unique_lock<std::mutex> lk(mu_);
  const auto has_work = [&] { return stopping_ || (!jobs_.empty() && !paused_); };
  for (;;) {
    if (holds_team_ && !cv_.wait_for(lk, kTeamIdleRelease, has_work)) {
      lk.unlock();
      release_openmp_team();  // idle: the caller's eager ops get the one pool
      lk.lock();
      holds_team_ = false;
    }
    cv_.wait(lk, has_work);
    if (jobs_.empty()) return;  // stopping, nothing left
    auto [id, job] = std::move(jobs_.front());
    jobs_.pop_front();
    cancel_.store(false);
    holds_team_ = true;  // the job's parallel regions start the worker's pool
    lk.unlock();
    job();
    // Released before a waiter wakes: what the job holds (its graph, inputs, results) is
    // freed by the time a read of its value returns (ember.memory_allocated() is exact).
    job = nullptr;
    lk.lock();
    finished_through_ = id;
    done_cv_.notify_all();
  }
}

void ExecutionQueue::drain() {
  uint64_t last;
  {
    std::lock_guard<std::mutex> lk(mu_);
    last = next_id_ - 1;
  }
  wait_for(last);
}

void ExecutionQueue::wait_for(uint64_t id) {
  if (done(id)) return;
  blocking_wait(mu_, done_cv_, [&] { return finished_through_ >= id || stopped_; });
}

bool ExecutionQueue::idle_for_caller(uint64_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  return (finished_through_ >= id || (jobs_.empty() && !worker_.joinable())) && !holds_team_;
}

bool ExecutionQueue::done(uint64_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  return finished_through_ >= id || (jobs_.empty() && !worker_.joinable());
}

void ExecutionQueue::cancel_running() { cancel_.store(true); }

void ExecutionQueue::shutdown() {
  std::thread w;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_) return;
    stopping_ = true;
    w = std::move(worker_);
  }
  cv_.notify_all();
  if (w.joinable()) w.join();  // runs every queued job first
  std::lock_guard<std::mutex> lk(mu_);
  stopped_ = true;
  done_cv_.notify_all();
}

void ExecutionQueue::set_paused(bool paused) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    paused_ = paused;
  }
  cv_.notify_all();
}

int64_t ExecutionQueue::queued() const {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int64_t>(next_id_ - 1 - finished_through_);
}

}  // namespace ember_torch
