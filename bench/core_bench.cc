// ember-core-bench: native CPU backend benchmarks (docs/performance.md).
//
//   BM_FusedElementwiseChain  8 elementwise ops with scalar constants over one
//                             2^24-element f32 input (one fused loop kernel);
//                             bytes = one read + one write.
//   BM_RowSoftmax             softmax over the rows of f32[4096,4096];
//                             bytes = one read + one write.
//   BM_ColumnSum              sum over dim 0 of f32[32768,512] (a Linear
//                             bias's gradient, 64 MiB): /column:1 the
//                             column phase, /column:0 the per-output loop
//                             (EMBER_CODEGEN_COLUMN_REDUCE=0); kernels only;
//                             bytes = one read of the input + the output.
//   BM_Compile200             passes + code generation + system compiler for
//                             a 200-node graph; cold (fresh EMBER_CACHE_DIR,
//                             memory cache dropped) and warm (disk cache hit).
//
// Bandwidth benchmarks have two variants: /e2e runs Executable::Run (which
// allocates the output buffer each run), /kernels runs only the executable's
// kernel steps into buffers allocated once. Each reports
//   triad_ratio = achieved bytes/s / STREAM-triad bytes/s,
// triad measured in this process with the same thread pool and thread count
// (a[i] = b[i] + s*c[i], double, 3 x 2^25 elements = 768 MiB, bytes counted
// = 3 arrays, best of 5).
// BM_Compile200 reports compiles_per_iter / disk_hits_per_iter.
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ember/codegen/cpu.h"
#include "ember/ir/builder.h"
#include "ember/runtime/executable.h"
#include "ember/runtime/thread_pool.h"

namespace ember {
namespace {

// STREAM triad on the runtime's pool, best of 10; arrays allocated and
// first-touched once, re-measured at each call (right after a benchmark's
// loop, so under the same machine load).
double TriadBytesPerSecond() {
  static const int64_t n = int64_t{1} << 25;
  static double* a = nullptr;
  static double* b = nullptr;
  static double* c = nullptr;
  ThreadPool& pool = DefaultThreadPool();
  if (!a) {
    // mmap'ed directly (as glibc does for large blocks by default), so
    // EMBER_BENCH_MALLOPT does not change how the triad arrays are backed.
    auto map = [] {
      void* p = mmap(nullptr, n * sizeof(double), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      return p == MAP_FAILED ? new double[n] : static_cast<double*>(p);
    };
    a = map();
    b = map();
    c = map();
    pool.ParallelFor(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        a[i] = 0;
        b[i] = 1.0 + static_cast<double>(i & 7);
        c[i] = 2.0;
      }
    });
  }
  const double s = 3.0;
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
      double* __restrict__ pa = a;
      const double* __restrict__ pb = b;
      const double* __restrict__ pc = c;
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  benchmark::DoNotOptimize(a[n / 2]);
  return 3.0 * 8.0 * static_cast<double>(n) / best;
}

// Shape bookkeeping to run only the kernel steps into preallocated buffers.
struct KernelOnly {
  std::vector<std::unique_ptr<uint8_t[]>> storage;
  std::vector<void*> slot;
  bool ok = true;
};

KernelOnly PrepareKernelOnly(const Executable& exe, const std::vector<BufferRef>& args) {
  KernelOnly k;
  k.slot.assign(exe.num_slots(), nullptr);
  for (size_t p = 0; p < args.size(); ++p) k.slot[p] = args[p]->data();
  for (const Step& s : exe.steps()) {
    if (s.kind != StepKind::kKernel) {
      k.ok = false;
      return k;
    }
    for (size_t j = 0; j < s.writes.size(); ++j) {
      const int64_t bytes = s.compiled->output_shapes()[j].byte_size();
      k.storage.emplace_back(new uint8_t[std::max<int64_t>(bytes, 1)]);
      std::fill_n(k.storage.back().get(), std::max<int64_t>(bytes, 1), 0);  // touch pages once
      k.slot[s.writes[j]] = k.storage.back().get();
    }
  }
  return k;
}

Status RunKernelsOnly(const Executable& exe, KernelOnly& k, const codegen::ParallelFor& pf) {
  for (const Step& s : exe.steps()) {
    std::vector<const void*> in;
    std::vector<void*> out;
    for (const SlotRead& r : s.reads) in.push_back(k.slot[r.slot]);
    for (int w : s.writes) out.push_back(k.slot[w]);
    EMBER_RETURN_IF_ERROR(s.compiled->Run(in, out, pf));
  }
  return OkStatus();
}

BufferRef RandomF32(const Shape& shape, uint64_t seed) {
  Literal lit(shape);
  float* d = lit.data_as<float>();
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  for (int64_t i = 0; i < shape.num_elements(); ++i) d[i] = u(rng);
  return Buffer::FromLiteral(std::move(lit));
}

CompileOptions CpuOptions() {
  CompileOptions o;
  o.backend = Backend::kCpu;
  o.optimize = true;  // DefaultPipeline + fusion
  return o;
}

Graph ElementwiseChain(int64_t n) {
  GraphBuilder b("chain");
  NodeId x = b.Parameter(0, Shape(DType::kF32, {n}));
  auto c = [&](double v) { return b.BroadcastInDim(b.ConstantScalar(DType::kF32, v), {n}, {}); };
  NodeId y = b.Multiply(x, c(1.5));
  y = b.Add(y, c(0.25));
  y = b.Maximum(y, c(-1.0));
  y = b.Multiply(y, c(0.75));
  y = b.Subtract(y, c(0.5));
  y = b.Minimum(y, c(2.0));
  y = b.Add(y, c(1.0));
  y = b.Multiply(y, c(3.0));
  b.SetOutputs({y});
  return b.Build().value();
}

Graph RowSoftmax(int64_t rows, int64_t cols) {
  GraphBuilder b("softmax");
  NodeId x = b.Parameter(0, Shape(DType::kF32, {rows, cols}));
  NodeId m = b.Reduce(x, {1}, ReduceKind::kMaximum);
  NodeId e = b.Exp(b.Subtract(x, b.BroadcastInDim(m, {rows, cols}, {0})));
  NodeId s = b.Reduce(e, {1}, ReduceKind::kAdd);
  b.SetOutputs({b.Divide(e, b.BroadcastInDim(s, {rows, cols}, {0}))});
  return b.Build().value();
}

void BandwidthBench(benchmark::State& state, const Graph& g, const Shape& in_shape,
                    int64_t bytes_per_run, bool kernels_only) {
  auto exe = Compile(g, CpuOptions());
  if (!exe.ok()) {
    state.SkipWithError(exe.status().ToString().c_str());
    return;
  }
  std::vector<BufferRef> args = {RandomF32(in_shape, 1)};
  const codegen::ParallelFor pf = RuntimeParallelFor();
  KernelOnly k;
  if (kernels_only) {
    k = PrepareKernelOnly(*exe, args);
    if (!k.ok) {
      state.SkipWithError("executable has non-kernel steps");
      return;
    }
  }
  int kernels = 0;
  for (const Step& s : exe->steps()) kernels += s.kind == StepKind::kKernel;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (kernels_only) {
      Status st = RunKernelsOnly(*exe, k, pf);
      if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    } else {
      auto out = exe->Run(args);
      if (!out.ok()) state.SkipWithError(out.status().ToString().c_str());
      benchmark::DoNotOptimize(out);
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double achieved = static_cast<double>(bytes_per_run) * state.iterations() / wall;
  const double triad = TriadBytesPerSecond();
  state.SetBytesProcessed(state.iterations() * bytes_per_run);
  state.counters["achieved_GBps"] = achieved / 1e9;
  state.counters["triad_GBps"] = triad / 1e9;
  state.counters["kernels"] = kernels;
  state.counters["threads"] = DefaultThreadPool().num_threads();
  state.counters["triad_ratio"] = achieved / triad;
}

void BM_FusedElementwiseChain(benchmark::State& state) {
  const int64_t n = int64_t{1} << 24;
  static const Graph g = ElementwiseChain(n);
  BandwidthBench(state, g, Shape(DType::kF32, {n}), 2 * n * 4, state.range(0) == 1);
}
BENCHMARK(BM_FusedElementwiseChain)
    ->ArgName("kernels_only")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_RowSoftmax(benchmark::State& state) {
  const int64_t r = 4096, c = 4096;
  static const Graph g = RowSoftmax(r, c);
  BandwidthBench(state, g, Shape(DType::kF32, {r, c}), 2 * r * c * 4, state.range(0) == 1);
}
BENCHMARK(BM_RowSoftmax)
    ->ArgName("kernels_only")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

Graph ColumnSum(int64_t rows, int64_t cols) {
  GraphBuilder b("colsum");
  NodeId x = b.Parameter(0, Shape(DType::kF32, {rows, cols}));
  b.SetOutputs({b.Reduce(x, {0}, ReduceKind::kAdd)});
  return b.Build().value();
}

void BM_ColumnSum(benchmark::State& state) {
  const int64_t r = 32768, c = 512;
  static const Graph g = ColumnSum(r, c);
  const bool column = state.range(0) == 1;
  if (!column) setenv("EMBER_CODEGEN_COLUMN_REDUCE", "0", 1);
  BandwidthBench(state, g, Shape(DType::kF32, {r, c}), (r * c + c) * 4, /*kernels_only=*/true);
  unsetenv("EMBER_CODEGEN_COLUMN_REDUCE");
}
BENCHMARK(BM_ColumnSum)
    ->ArgName("column")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// 200 nodes: 8 segments, each 22 elementwise ops over f32[256,64] (with
// scalar constants) and a row reduction broadcast back.
Graph Graph200() {
  GraphBuilder b("g200");
  const int64_t r = 256, c = 64;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {r, c}));
  NodeId y = b.Parameter(1, Shape(DType::kF32, {r, c}));
  std::vector<NodeId> outs;
  const OpKind ops[] = {OpKind::kAdd, OpKind::kMultiply, OpKind::kMaximum, OpKind::kSubtract,
                        OpKind::kMinimum};
  for (int seg = 0; seg < 8; ++seg) {
    NodeId k = b.BroadcastInDim(b.ConstantScalar(DType::kF32, 0.5 + seg), {r, c}, {});
    for (int i = 0; i < 18; ++i) {
      x = b.Binary(ops[(seg + i) % 5], x, (i % 3 == 0) ? y : k);
      if (i % 6 == 5) x = b.Unary(i % 12 == 5 ? OpKind::kExp : OpKind::kTanh, x);
    }
    NodeId s = b.Reduce(x, {1}, ReduceKind::kAdd);
    x = b.Divide(x, b.BroadcastInDim(s, {r, c}, {0}));
    outs.push_back(s);
  }
  outs.push_back(x);
  b.SetOutputs(outs);
  return b.Build().value();
}

void BM_Compile200(benchmark::State& state) {
  const bool warm = state.range(0) == 1;
  static const Graph g = Graph200();
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("ember-bench-cache-" + std::to_string(getpid()));
  int n = 0;
  int kernels = 0;
  CompileOptions o = CpuOptions();
  o.codegen.cache_dir = (root / "warm").string();
  if (warm) {  // fill the disk cache once (not from kernels already loaded)
    codegen::ClearKernelMemoryCache();
    auto exe = Compile(g, o);
    if (!exe.ok()) state.SkipWithError(exe.status().ToString().c_str());
  }
  const codegen::CodegenStats before = codegen::GetCodegenStats();
  for (auto _ : state) {
    if (!warm) {
      state.PauseTiming();
      o.codegen.cache_dir = (root / ("cold" + std::to_string(n++))).string();
      state.ResumeTiming();
    }
    codegen::ClearKernelMemoryCache();
    auto exe = Compile(g, o);
    if (!exe.ok()) {
      state.SkipWithError(exe.status().ToString().c_str());
      break;
    }
    kernels = 0;
    for (const Step& s : exe->steps()) kernels += s.kind == StepKind::kKernel;
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  const codegen::CodegenStats after = codegen::GetCodegenStats();
  state.counters["compiles_per_iter"] = static_cast<double>(after.compiles - before.compiles) /
                                        std::max<int64_t>(1, state.iterations());
  state.counters["disk_hits_per_iter"] = static_cast<double>(after.disk_hits - before.disk_hits) /
                                         std::max<int64_t>(1, state.iterations());
  state.counters["nodes"] = g.num_nodes();
  state.counters["kernels"] = kernels;
  state.counters["triad_GBps"] = TriadBytesPerSecond() / 1e9;
}
BENCHMARK(BM_Compile200)
    ->ArgName("warm")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

}  // namespace
}  // namespace ember

// EMBER_BENCH_MALLOPT=1 keeps freed large blocks mapped (glibc
// M_MMAP_THRESHOLD / M_TRIM_THRESHOLD = 1 GiB), so a run's fresh output
// buffer does not page-fault again: isolates the cost of first-touch page
// faults in the /e2e numbers (docs/performance.md).
int main(int argc, char** argv) {
  if (const char* m = std::getenv("EMBER_BENCH_MALLOPT"); m && std::string(m) == "1") {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
