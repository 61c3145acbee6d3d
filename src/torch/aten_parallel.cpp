// The runtime's parallel-for under torch: ATen's intra-op thread pool.
//
// torch's CPU wheels use ATen's OpenMP backend (AT_PARALLEL_OPENMP), where
// at::parallel_for is an inline `#pragma omp parallel` region: it runs on the
// process's one OpenMP runtime (the libgomp.so.1 torch ships, already loaded)
// only in a translation unit compiled with OpenMP. Without it the pragma is
// ignored and every kernel runs on the calling thread. This file alone is
// compiled with -fopenmp (src/torch/CMakeLists.txt); the check below keeps it so.
#include <ATen/Parallel.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ember/runtime/thread_pool.h"
#include "lower.h"
#include "openmp_team.h"

#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#error \
    "aten_parallel.cpp must be compiled with OpenMP (-fopenmp): at::parallel_for would run serially"
#endif

namespace ember_torch {

void use_aten_parallel_for() {
  ember::SetRuntimeParallelFor([](int64_t begin, int64_t end, int64_t grain,
                                  const std::function<void(int64_t, int64_t)>& body) {
    at::parallel_for(begin, end, grain, body);
  });
}

void release_openmp_team() {
#ifdef _OPENMP
  // Returns nonzero inside a parallel region (nothing is freed then): nothing to do.
  (void)omp_pause_resource_all(omp_pause_soft);
#endif
}

}  // namespace ember_torch
