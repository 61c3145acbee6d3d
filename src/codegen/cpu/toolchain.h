// Private: the system C++ compiler as the code generator's backend: finding
// it, its version (part of every cache key), the flags, the CPU feature
// string, and running a process with its output captured.
#pragma once

#include <string>
#include <vector>

#include "ember/status.h"

namespace ember::codegen {

// The compiler to run: `requested` if not empty, else $EMBER_CXX, else `c++`;
// a name without '/' is looked up on PATH. NotFound if it is not executable.
StatusOr<std::string> ResolveCompiler(const std::string& requested);

// The output of `cxx --version`, memoized in this process and on disk under
// <cache_dir>/toolchain/ (keyed by the compiler's real path, size and mtime),
// so a warm process never runs the compiler at all.
StatusOr<std::string> CompilerVersion(const std::string& cxx, const std::string& cache_dir);

// -std=c++17 -O3 (-O1 if fast) -march=native -fPIC -shared -fopenmp-simd
// -fno-math-errno -fwrapv -ffp-contract=off ... (never -ffast-math or -fopenmp).
std::vector<std::string> CompileFlags(bool fast);

// Tuning flags added after CompileFlags on this machine: on x86, where GCC's
// -march=native resolves to -mtune=generic (a CPU this GCC does not know, e.g.
// a recent Xeon in a VM) and the CPU is not slowed by the Gather Data Sampling
// microcode mitigation (/sys/devices/system/cpu/vulnerabilities/
// gather_data_sampling), `-mtune-ctrl=use_gather...` (the names this compiler
// accepts): GCC's generic tuning turns vector gathers off because of that
// mitigation, which leaves every loop with a strided or broadcast load scalar
// (a max-pool kernel: 473 us scalar, 55 us with gathers; docs/codegen.md,
// "Compiler flags"). Empty elsewhere (a known CPU keeps its compiler's tuning;
// another compiler, another architecture). Probed once per compiler, CPU and
// mitigation state, memoized and cached on disk under <cache_dir>/toolchain/.
std::vector<std::string> NativeTuneFlags(const std::string& cxx, const std::string& cache_dir);

// The CPU feature set that -march=native code depends on: the sorted
// `flags` of /proc/cpuinfo (or __builtin_cpu_supports probes).
const std::string& CpuFeatures();

// Runs argv[0] (a path) with argv in directory `cwd` ("" = current), stdout
// and stderr captured into *output; returns the exit status (128+signal if
// killed). Internal error if the process cannot be started.
StatusOr<int> RunProcess(const std::vector<std::string>& argv, const std::string& cwd,
                         std::string* output);

}  // namespace ember::codegen
