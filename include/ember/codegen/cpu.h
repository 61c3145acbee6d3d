// Native CPU code generation, tier 1 (DESIGN §5): one fused subgraph -> one
// C++ function `ember_fused_<ops>_<n>` -> a shared object built by the system
// C++ compiler, kept in an on-disk cache and an in-memory cache.
//
// A kernel is a Graph (parameters -> outputs) made of elementwise ops (every
// unary/binary op, compare, convert, shifts, select, clamp), constant, iota,
// broadcast-in-dim, reshape, transpose, slice, reverse, concatenate, pad and
// reduce (add/multiply/maximum/minimum/and/or over any dims). Elementwise and
// data-movement chains are loop-fused (each output element recomputes its
// inputs through index arithmetic; no intermediate buffers); a reduce is
// fused with its elementwise producers and materialized into a buffer that
// later consumers read. Anything else (complex dtypes, gather, dot, rng, ...)
// makes CompileKernel return Unimplemented; the caller falls back to the
// interpreter. Results equal the reference interpreter's (docs/ir.md) bit for
// bit, except float add/multiply reductions, which use a different (blocked,
// pairwise) summation order, and the vector-math transcendentals (exp, log,
// tanh, erf, ...: libmvec, within a stated ulp bound unless
// CodegenOptions::vector_math is off): see docs/codegen.md for the bounds.
//
// Buffers are dense row-major with the subgraph's parameter/output shapes
// (bf16/f16 as 16-bit patterns, pred as one byte 0/1). An output may be the
// very buffer of an input whose element i it reads only to compute its own
// element i (in-place elementwise, as buffer assignment plans it): generated
// code uses no `restrict` pointers, and its loops carry no dependence between
// elements. Any other overlap of outputs with inputs or each other is not
// allowed.
//
// Environment: EMBER_CACHE_DIR (default $XDG_CACHE_HOME/ember or
// ~/.cache/ember), EMBER_CXX (default `c++` on PATH), EMBER_CODEGEN_FAST=1
// (compile with -O1, as CodegenOptions::fast).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/ir/graph.h"
#include "ember/status.h"

namespace ember::codegen {

struct CodegenOptions {
  // -O1 instead of -O3 (for tests that care about semantics, not speed).
  // EMBER_CODEGEN_FAST=1 also turns it on.
  bool fast = false;
  // The <n> of `ember_fused_<ops>_<n>` (the kernel's index in its graph).
  int kernel_index = 0;
  // Overrides of the environment / detected values ("" = default).
  std::string cache_dir;     // EMBER_CACHE_DIR, then $XDG_CACHE_HOME/ember, ~/.cache/ember
  std::string cxx;           // EMBER_CXX, then `c++` on PATH
  std::string cpu_features;  // detected from /proc/cpuinfo flags (part of the cache key)
  // Appended to the compiler flags (part of the cache key); e.g. {"-O0"} for
  // semantic fuzzing, where compile time dominates.
  std::vector<std::string> extra_flags;
  // Look up / insert loaded kernels in the process-wide in-memory cache.
  bool use_memory_cache = true;
  // exp, log, log1p, expm1, tanh, logistic, sin, cos and erf through glibc's
  // libmvec SIMD variants (vectorized loops; within a few ulps of the
  // interpreter's scalar libm, docs/codegen.md "Vector math"). false (or
  // EMBER_CODEGEN_VECTOR_MATH=0): scalar libm calls, bit-identical to the
  // interpreter, and loops calling them stay scalar.
  bool vector_math = true;
  // CompileKernels builds the kernels it does not find cached several to a
  // compiler run (one translation unit and shared object per batch of up to
  // 32; each kernel keeps its own cache entry). false (or
  // EMBER_CODEGEN_BATCH=0): one compiler run per kernel. Not part of the key:
  // a kernel's code is the same either way.
  bool batch_compile = true;
};

// Runs body(begin', end') over disjoint chunks covering [begin, end), each
// at least `grain` long (except possibly the last), possibly concurrently,
// and returns when all are done. An empty ParallelFor runs serially.
using ParallelFor = std::function<void(int64_t begin, int64_t end, int64_t grain,
                                       const std::function<void(int64_t, int64_t)>& body)>;
// A simple std::thread implementation (threads <= 0: hardware concurrency).
// The runtime passes its own pool (at::parallel_for under torch).
ParallelFor ThreadParallelFor(int threads = 0);

// Generated source of one kernel.
struct KernelSource {
  std::string name;  // ember_fused_mul_add_exp_reduce_0
  std::string code;  // complete C++ translation unit
  // `code` without its header comment and ember_kernel_abi_version: the
  // prelude + vector-math declarations (the same for every kernel emitted
  // with the same vector_math), and the kernel's own part (its anonymous
  // namespace and exported entry). CompileKernels concatenates several
  // kernels' bodies, each in a namespace of its own, after one preamble
  // into one translation unit.
  std::string preamble;
  std::string body;
  // Messages of the data errors the kernel can report (status code k > 0
  // from the generated function means error_messages[k - 1]).
  std::vector<std::string> error_messages;
};

// Whether the code generator handles `op` at all (the single list; callers
// that partition graphs use it). Real arrays only: tuples (except a tuple read
// by get-tuple-element) and complex dtypes are refused by EmitKernelSource.
bool CodegenSupportsOp(OpKind op);

// Whether values of shapes `a` and `b` may be computed by one elementwise loop, element
// i of both in one iteration: equal dims, or as many elements and the same innermost dim
// (a reshape of the outer dims, [4096,512] and [32,128,512]: the same row-major element
// at each linear index, and the same rows for a row loop).
bool OneLoopShapes(const Shape& a, const Shape& b);

// The elementwise loop each output of kernel graph `g` is computed in (docs/codegen.md
// "Loop fusion"): outputs with one id >= 0 share one loop, which computes each element
// of all of them in one iteration (a value several of them read, once); -1 for an output
// that a reduce or scatter phase writes. An output joins the first loop whose first
// output's shape it shares (OneLoopShapes), that has room (at most 8 outputs) and where
// it would not put a sine and a cosine together (GCC makes the pair one sincos call and
// then vectorizes none of the loop). A row kernel computes its row-shaped outputs in one
// pass whatever the ids say.
std::vector<int> OutputLoops(const Graph& g);

// Checks that every node of `g` is supported (Unimplemented naming the
// first one that is not) and emits the kernel's source (`vector_math`: as
// CodegenOptions::vector_math).
StatusOr<KernelSource> EmitKernelSource(const Graph& g, int kernel_index = 0,
                                        bool vector_math = true);

class CompiledKernel {
 public:
  ~CompiledKernel();
  CompiledKernel(const CompiledKernel&) = delete;
  CompiledKernel& operator=(const CompiledKernel&) = delete;

  const std::string& name() const { return source_.name; }
  const std::string& source() const { return source_.code; }
  const std::string& cache_key() const { return key_; }    // 64 hex digits
  const std::string& so_path() const { return so_path_; }  // the cached shared object
  const std::vector<Shape>& parameter_shapes() const { return parameter_shapes_; }
  const std::vector<Shape>& output_shapes() const { return output_shapes_; }
  // Whether Run can report a data error (an integer division by zero:
  // KernelSource::error_messages); out of memory for a temporary aside, a
  // kernel without one always succeeds.
  bool may_fail() const { return !source_.error_messages.empty(); }

  // inputs[i] holds parameter i, outputs[j] receives output j (raw dense
  // row-major buffers of the shapes above). InvalidArgument on a wrong
  // count or a null buffer of nonzero size; OutOfRange for an integer
  // division or remainder by zero (naming the node, as the interpreter);
  // ResourceExhausted if a temporary buffer cannot be allocated. Safe to
  // call from several threads at once.
  Status Run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
             const ParallelFor& parallel_for = {}) const;

 private:
  friend class KernelBuilder;
  CompiledKernel() = default;
  KernelSource source_;
  std::string key_;
  std::string so_path_;
  std::vector<Shape> parameter_shapes_;
  std::vector<Shape> output_shapes_;
  void* handle_ = nullptr;  // dlopen handle
  void* entry_ = nullptr;   // the exported ember_fused_* function
};

// Emits, compiles (or finds in the caches) and loads the kernel for `g`.
// Unimplemented for unsupported ops; Internal (with the compiler's message)
// if the system compiler fails.
StatusOr<std::shared_ptr<CompiledKernel>> CompileKernel(const Graph& g,
                                                        const CodegenOptions& options = {});

// Compiles the kernels of one graph: graphs[i] gets kernel index
// options.kernel_index + i; up to `max_parallel` system-compiler runs at
// once (<= 0: hardware concurrency). Kernels already cached are loaded; the
// others are compiled in batches (CodegenOptions::batch_compile): at least
// min(max_parallel, misses) runs, at most 32 kernels each. A batch that fails
// to compile is retried kernel by kernel, so an error names its kernel.
// results[i] is graphs[i]'s kernel or error.
std::vector<StatusOr<std::shared_ptr<CompiledKernel>>> CompileKernels(
    const std::vector<const Graph*>& graphs, const CodegenOptions& options = {},
    int max_parallel = 0);

// Process-wide counters.
struct CodegenStats {
  int64_t compiles = 0;         // system compiler runs that built kernels
  int64_t kernels_built = 0;    // kernels those runs built (a batch run builds several)
  int64_t disk_hits = 0;        // kernels loaded from a verified disk-cache entry
  int64_t memory_hits = 0;      // kernels found already loaded in this process
  int64_t corrupt_entries = 0;  // disk entries that failed verification (deleted, rebuilt)
  double compile_seconds = 0;   // wall time spent in the system compiler
};
CodegenStats GetCodegenStats();
void ResetCodegenStats();
// Drops the in-memory cache (loaded kernels stay alive while referenced).
void ClearKernelMemoryCache();

}  // namespace ember::codegen
