// One OpenMP team at a time (docs/architecture.md, "Threads on 2 cores").
//
// libgomp keeps a thread pool per thread that starts a parallel region (the master of
// its team). Two masters, ember's execution worker and the Python thread running eager
// ops, give the process two pools; once libgomp manages more threads than the CPUs it
// runs, it cuts every spin-wait to a few iterations (GCC's libgomp, team.c and env.c:
// gomp_throttled_spin_count_var), so each region of every team then sleeps and wakes
// its threads through futexes: small ops ran 2-3x slower process-wide (measured,
// docs/performance.md, "The main job's eager baseline"). The execution queue therefore
// keeps one pool alive: the caller releases its own before a job goes to the worker,
// and the worker releases its own once idle.
#pragma once

namespace ember_torch {

// Frees the calling thread's OpenMP pool: its team's other threads exit and libgomp's
// count of managed threads drops by as many (OpenMP 5.0 `omp_pause_resource_all` with
// `omp_pause_soft`). The thread's next parallel region starts a new pool (~0.1 ms on
// the 2-core VM). A no-op without a pool, and inside a parallel region. Never throws.
void release_openmp_team();

}  // namespace ember_torch
