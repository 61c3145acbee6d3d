// ThreadParallelFor: the default parallel-for for generated kernels when no
// runtime pool is supplied: splits the range into at most `threads` parts of
// at least `grain` elements and runs them on fresh std::threads (the
// calling thread takes the first part). Kernels never own a thread pool.
#include <algorithm>
#include <thread>
#include <vector>

#include "ember/codegen/cpu.h"

namespace ember::codegen {

ParallelFor ThreadParallelFor(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return [threads](int64_t begin, int64_t end, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& body) {
    const int64_t n = end - begin;
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    const int64_t parts = std::min<int64_t>(threads, (n + grain - 1) / grain);
    if (parts <= 1) {
      body(begin, end);
      return;
    }
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(parts - 1));
    const int64_t chunk = n / parts, extra = n % parts;
    int64_t b = begin;
    int64_t first_end = 0;
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t e = b + chunk + (p < extra ? 1 : 0);
      if (p == 0) {
        first_end = e;
      } else {
        pool.emplace_back([&body, b, e] { body(b, e); });
      }
      b = e;
    }
    body(begin, first_end);
    for (auto& t : pool) t.join();
  };
}

}  // namespace ember::codegen
