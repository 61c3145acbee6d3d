// CompileKernel: emit -> key -> in-memory cache -> disk cache -> system
// compiler -> dlopen; CompiledKernel::Run; the process-wide counters.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "codegen/cpu/disk_cache.h"
#include "codegen/cpu/emitter.h"
#include "codegen/cpu/prelude.h"
#include "codegen/cpu/sha256.h"
#include "codegen/cpu/toolchain.h"
#include "codegen/cpu/vector_math.h"
#include "ember/codegen/cpu.h"
#include "ember/version.h"
#include "ir/log.h"

namespace ember::codegen {
namespace {

// Part of every cache key, beside ember::Version() (ember/version.h): bumped
// when the kernels generated for the same graphs change without Ember's
// version changing, so that entries of an
// older scheme are never looked up (docs/codegen.md "Disk cache"). 2: the
// fusion kind from AnalyzeFusion (ember/ir/fusion_analysis.h) picks the row
// plan.
constexpr int kKernelCacheVersion = 2;

// Most kernels CompileKernels puts into one translation unit: large enough to
// spread the compiler's start-up and the prelude over many kernels, small
// enough that each kernel's disk entry (a hard link to the batch object,
// checksummed on load) stays small, and that several runs keep every core
// busy.
constexpr size_t kMaxBatchKernels = 32;

using BodyFn = void (*)(void*, int64_t, int64_t);
using ParallelForFn = void (*)(void*, int64_t, int64_t, int64_t, void*, BodyFn);
using EntryFn = int (*)(const void* const*, void* const*, void*, ParallelForFn);

struct Globals {
  std::mutex mu;
  CodegenStats stats;
  std::map<std::string, std::shared_ptr<CompiledKernel>> memory;
  std::map<std::string, std::shared_ptr<std::mutex>> key_locks;
};
Globals& G() {
  static Globals* g = new Globals;  // never destroyed: kernels may outlive static dtors
  return *g;
}

std::string Tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

void PfTrampoline(void* pf_ctx, int64_t begin, int64_t end, int64_t grain, void* body_ctx,
                  BodyFn body) {
  const auto* pf = static_cast<const ParallelFor*>(pf_ctx);
  (*pf)(begin, end, grain, [&](int64_t b, int64_t e) { body(body_ctx, b, e); });
}

bool FastFromEnv() {
  const char* f = std::getenv("EMBER_CODEGEN_FAST");
  return f && *f && std::string(f) != "0";
}

bool VectorMathOffByEnv() {
  const char* f = std::getenv("EMBER_CODEGEN_VECTOR_MATH");
  return f && std::string(f) == "0";
}

}  // namespace

CompiledKernel::~CompiledKernel() {
  if (handle_) dlclose(handle_);
}

Status CompiledKernel::Run(const std::vector<const void*>& inputs,
                           const std::vector<void*>& outputs,
                           const ParallelFor& parallel_for) const {
  if (inputs.size() != parameter_shapes_.size() || outputs.size() != output_shapes_.size()) {
    return InvalidArgument("kernel ", name(), ": expected ", parameter_shapes_.size(),
                           " inputs and ", output_shapes_.size(), " outputs, got ", inputs.size(),
                           " and ", outputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr && parameter_shapes_[i].byte_size() > 0) {
      return InvalidArgument("kernel ", name(), ": input ", i, " is null");
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] == nullptr && output_shapes_[i].byte_size() > 0) {
      return InvalidArgument("kernel ", name(), ": output ", i, " is null");
    }
  }
  auto entry = reinterpret_cast<EntryFn>(entry_);
  const int rc = parallel_for ? entry(inputs.data(), outputs.data(),
                                      const_cast<ParallelFor*>(&parallel_for), &PfTrampoline)
                              : entry(inputs.data(), outputs.data(), nullptr, nullptr);
  if (rc == 0) return OkStatus();
  if (rc > 0 && static_cast<size_t>(rc) <= source_.error_messages.size()) {
    return OutOfRange(source_.error_messages[rc - 1]);
  }
  if (rc == -1) return ResourceExhausted("kernel ", name(), ": cannot allocate a temporary buffer");
  return EMBER_INTERNAL_ERROR("kernel ", name(), " returned unknown status ", rc);
}

namespace {

// Everything a kernel's cache key depends on except its source.
struct Target {
  bool vector_math = true;
  std::string cxx, dir, version, features;
  std::vector<std::string> flags;
  bool use_memory_cache = true;
};

StatusOr<Target> ResolveTarget(const CodegenOptions& options) {
  Target t;
  t.vector_math = options.vector_math && !VectorMathOffByEnv();
  t.use_memory_cache = options.use_memory_cache;
  const bool fast = options.fast || FastFromEnv();
  EMBER_ASSIGN_OR_RETURN(t.cxx, ResolveCompiler(options.cxx));
  t.dir = options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir;
  if (!MakeDirs(t.dir).ok()) {
    // An unwritable cache costs recompiles, never a failure.
    const char* tmp = std::getenv("TMPDIR");
    t.dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/ember-cache-" + std::to_string(getuid());
  }
  EMBER_ASSIGN_OR_RETURN(t.version, CompilerVersion(t.cxx, t.dir));
  t.flags = CompileFlags(fast);
  if (options.cpu_features.empty()) {  // -march=native: this CPU's tuning (not a portable target)
    for (auto& f : NativeTuneFlags(t.cxx, t.dir)) t.flags.push_back(std::move(f));
  }
  t.flags.insert(t.flags.end(), options.extra_flags.begin(), options.extra_flags.end());
  t.features = options.cpu_features.empty() ? CpuFeatures() : options.cpu_features;
  return t;
}

std::string KeyOf(const Target& t, const std::string& code) {
  Sha256 h;
  auto part = [&](const std::string& tag, const std::string& v) {
    h.Update(tag);
    h.Update(std::to_string(v.size()) + ":");
    h.Update(v);
  };
  part("ember", Version());
  part("abi", std::to_string(kKernelAbiVersion));
  part("cache", std::to_string(kKernelCacheVersion));
  part("cxx", t.cxx);
  part("version", t.version);
  for (const auto& f : t.flags) part("flag", f);
  for (const auto& f : VectorMathLinkFlags()) part("lib", f);
  part("cpu", t.features);
  part("source", code);
  return h.HexDigest();
}

// Runs the compiler on dir/kernel.cc -> dir/kernel.so; counts the run
// (`kernels`: how many kernels the translation unit holds).
Status RunCompiler(const Target& t, const std::string& dir, const std::string& what,
                   int64_t kernels) {
  std::vector<std::string> argv = {t.cxx};
  argv.insert(argv.end(), t.flags.begin(), t.flags.end());
  argv.insert(argv.end(), {"-o", "kernel.so", "kernel.cc"});
  argv.insert(argv.end(), VectorMathLinkFlags().begin(), VectorMathLinkFlags().end());
  std::string out;
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<int> rc = RunProcess(argv, dir, &out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    Globals& gl = G();
    std::lock_guard<std::mutex> lock(gl.mu);
    ++gl.stats.compiles;
    gl.stats.kernels_built += kernels;
    gl.stats.compile_seconds += secs;
  }
  if (!rc.ok()) return rc.status();
  if (*rc != 0) {
    return Status(StatusCode::kInternal, "cpu codegen: compiling " + what + " failed (" + t.cxx +
                                             " exit " + std::to_string(*rc) + "):\n" +
                                             Tail(out, 4000));
  }
  return OkStatus();
}

std::shared_ptr<CompiledKernel> MemoryLookup(const std::string& memory_key) {
  Globals& gl = G();
  std::lock_guard<std::mutex> lock(gl.mu);
  auto it = gl.memory.find(memory_key);
  if (it == gl.memory.end()) return nullptr;
  ++gl.stats.memory_hits;
  return it->second;
}

// The kernel's batch of a CompileKernels call.
struct BatchItem {
  size_t index;
  const Graph* graph;
  KernelSource src;
  std::string key;
};

}  // namespace

// How CompileKernel and CompileKernels build and load one kernel.
class KernelBuilder {
 public:
  // Memory cache, then disk cache, then (if `compile`) the compiler. With
  // `compile` false a miss returns a null kernel and leaves *src / *key set.
  static StatusOr<std::shared_ptr<CompiledKernel>> Get(const Graph& g,
                                                       const CodegenOptions& options,
                                                       const Target& t, bool compile,
                                                       KernelSource* src_out = nullptr,
                                                       std::string* key_out = nullptr) {
    EMBER_ASSIGN_OR_RETURN(KernelSource src,
                           EmitKernelSource(g, options.kernel_index, t.vector_math));
    const std::string key = KeyOf(t, src.code);
    // The in-memory cache holds kernels loaded from one cache directory each:
    // the same source under another cache_dir is looked up (and installed) there.
    const std::string memory_key = key + "@" + t.dir;
    Globals& gl = G();
    std::shared_ptr<std::mutex> key_lock;
    if (t.use_memory_cache) {
      if (auto k = MemoryLookup(memory_key)) return k;
    }
    {
      std::lock_guard<std::mutex> lock(gl.mu);
      auto& kl = gl.key_locks[key];
      if (!kl) kl = std::make_shared<std::mutex>();
      key_lock = kl;
    }
    // One compile per key at a time in this process; other keys proceed.
    std::lock_guard<std::mutex> compile_lock(*key_lock);
    if (t.use_memory_cache) {
      if (auto k = MemoryLookup(memory_key)) return k;
    }

    std::shared_ptr<CompiledKernel> k = NewKernel(g, key);
    DiskCache cache(t.dir);
    std::string why;
    std::string so_path;
    bool from_disk = false;
    // At most: a disk hit, or (after a miss, a corrupt entry, or an object
    // that fails to load) one compile.
    for (int attempt = 0; attempt < 2 && k->handle_ == nullptr; ++attempt) {
      DiskCache::LookupKind lk =
          attempt == 0 ? cache.Lookup(key, &so_path, &why) : DiskCache::LookupKind::kMiss;
      if (lk == DiskCache::LookupKind::kCorrupt) {
        std::lock_guard<std::mutex> lock(gl.mu);
        ++gl.stats.corrupt_entries;
      }
      from_disk = lk == DiskCache::LookupKind::kHit;
      if (!from_disk) {
        if (!compile) {
          if (src_out) *src_out = std::move(src);
          if (key_out) *key_out = key;
          return std::shared_ptr<CompiledKernel>();
        }
        EMBER_ASSIGN_OR_RETURN(std::string tmp, cache.MakeTempDir(key));
        Status st = WriteFileAtomic(tmp + "/kernel.cc", src.code);
        if (st.ok()) st = RunCompiler(t, tmp, src.name, 1);
        if (!st.ok()) {
          RemoveTree(tmp);
          return st;
        }
        StatusOr<std::string> installed = cache.Install(key, tmp + "/kernel.so", src.code);
        RemoveTree(tmp);
        EMBER_RETURN_IF_ERROR(installed.status());
        so_path = *installed;
      }
      bool retry = false;
      EMBER_RETURN_IF_ERROR(Load(k.get(), so_path, src.name, from_disk, &retry, &why));
      if (retry) continue;  // e.g. removed by a concurrent process: rebuild
    }
    if (k->handle_ == nullptr) {
      return Status(StatusCode::kInternal, "cpu codegen: cannot load " + src.name + ": " + why);
    }
    return Finish(std::move(k), so_path, std::move(src), memory_key, from_disk, t);
  }

  // Compiles `items` (misses of one CompileKernels call) as one translation
  // unit: the shared preamble once, then each kernel's body in a namespace of
  // its own (`ember_k<i>`; the exported entry names stay unique because they
  // carry the kernel index). Each kernel then gets its own disk-cache entry
  // (a hard link to the one object) and is loaded from it. If the batch does
  // not compile or load, each kernel is built on its own, so that an error
  // names the kernel that caused it.
  static void Batch(std::vector<BatchItem>& items, const CodegenOptions& options, const Target& t,
                    std::vector<StatusOr<std::shared_ptr<CompiledKernel>>>* out) {
    Status st = BatchOnce(items, t, out);
    if (st.ok()) return;
    LogLine("codegen", "batch of " + std::to_string(items.size()) +
                           " kernels failed, compiling them one by one: " + st.ToString());
    for (BatchItem& it : items) {
      if ((*out)[it.index].ok() && (*out)[it.index].value() != nullptr) continue;
      CodegenOptions o = options;
      o.kernel_index = options.kernel_index + static_cast<int>(it.index);
      (*out)[it.index] = Get(*it.graph, o, t, /*compile=*/true);
    }
  }

 private:
  static Status BatchOnce(std::vector<BatchItem>& items, const Target& t,
                          std::vector<StatusOr<std::shared_ptr<CompiledKernel>>>* out) {
    std::string code = "// A batch of " + std::to_string(items.size()) +
                       " kernels generated by Ember (src/codegen/cpu), do not edit.\n\n";
    code += items[0].src.preamble;
    for (size_t j = 0; j < items.size(); ++j) {
      if (items[j].src.preamble != items[0].src.preamble) {
        return EMBER_INTERNAL_ERROR("kernels of one batch differ in their preamble");
      }
      code += "namespace ember_k" + std::to_string(j) + " {\n" + items[j].src.body + "}\n\n";
    }
    code += AbiVersionFunction();
    DiskCache cache(t.dir);
    EMBER_ASSIGN_OR_RETURN(std::string tmp, cache.MakeTempDir(items[0].key));
    Status st = WriteFileAtomic(tmp + "/kernel.cc", code);
    if (st.ok()) {
      st = RunCompiler(t, tmp, "a batch of " + std::to_string(items.size()) + " kernels",
                       static_cast<int64_t>(items.size()));
    }
    for (size_t j = 0; st.ok() && j < items.size(); ++j) {
      BatchItem& it = items[j];
      StatusOr<std::string> so_path = cache.InstallShared(it.key, tmp + "/kernel.so", it.src.code);
      if (!so_path.ok()) {
        st = so_path.status();
        break;
      }
      std::shared_ptr<CompiledKernel> k = NewKernel(*it.graph, it.key);
      bool retry = false;
      std::string why;
      st = Load(k.get(), *so_path, it.src.name, /*from_disk=*/false, &retry, &why);
      if (st.ok() && k->handle_ == nullptr) st = EMBER_INTERNAL_ERROR("cannot load ", why);
      if (!st.ok()) break;
      (*out)[it.index] = Finish(std::move(k), *so_path, std::move(it.src), it.key + "@" + t.dir,
                                /*from_disk=*/false, t);
    }
    RemoveTree(tmp);
    return st;
  }

  static std::shared_ptr<CompiledKernel> NewKernel(const Graph& g, const std::string& key) {
    std::shared_ptr<CompiledKernel> k(new CompiledKernel());
    k->key_ = key;
    for (NodeId p : g.parameters()) k->parameter_shapes_.push_back(g.node(p).shape);
    for (NodeId o : g.outputs()) k->output_shapes_.push_back(g.node(o).shape);
    return k;
  }

  // dlopens `so_path` into k. A disk-cache object that fails to open sets
  // *retry (rebuild it); an object that lacks the entry is an error.
  static Status Load(CompiledKernel* k, const std::string& so_path, const std::string& name,
                     bool from_disk, bool* retry, std::string* why) {
    void* handle = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      *why = dlerror();
      if (!from_disk) {
        return Status(StatusCode::kInternal, "cpu codegen: dlopen " + so_path + ": " + *why);
      }
      *retry = true;
      return OkStatus();
    }
    auto abi = reinterpret_cast<int (*)()>(dlsym(handle, "ember_kernel_abi_version"));
    void* entry = dlsym(handle, name.c_str());
    if (abi == nullptr || entry == nullptr || abi() != kKernelAbiVersion) {
      dlclose(handle);
      return Status(StatusCode::kInternal, "cpu codegen: " + so_path + " does not export " + name +
                                               " (ABI " + std::to_string(kKernelAbiVersion) + ")");
    }
    k->handle_ = handle;
    k->entry_ = entry;
    return OkStatus();
  }

  static std::shared_ptr<CompiledKernel> Finish(std::shared_ptr<CompiledKernel> k,
                                                const std::string& so_path, KernelSource src,
                                                const std::string& memory_key, bool from_disk,
                                                const Target& t) {
    k->so_path_ = so_path;
    k->source_ = std::move(src);
    Globals& gl = G();
    std::lock_guard<std::mutex> lock(gl.mu);
    if (from_disk) ++gl.stats.disk_hits;
    if (t.use_memory_cache) {
      // Another thread may have built the same source meanwhile: keep one.
      auto [it, inserted] = gl.memory.emplace(memory_key, k);
      if (!inserted) return it->second;
    }
    return k;
  }
};

StatusOr<std::shared_ptr<CompiledKernel>> CompileKernel(const Graph& g,
                                                        const CodegenOptions& options) {
  EMBER_ASSIGN_OR_RETURN(Target t, ResolveTarget(options));
  return KernelBuilder::Get(g, options, t, /*compile=*/true);
}

namespace {

bool BatchOffByEnv() {
  const char* f = std::getenv("EMBER_CODEGEN_BATCH");
  return f && std::string(f) == "0";
}

// Runs job(i) for i in [0, n) on up to `threads` threads.
void ParallelJobs(size_t n, int threads, const std::function<void(size_t)>& job) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) job(i);
  };
  const size_t m = std::min(n, static_cast<size_t>(std::max(1, threads)));
  std::vector<std::thread> pool;
  for (size_t w = 1; w < m; ++w) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace

std::vector<StatusOr<std::shared_ptr<CompiledKernel>>> CompileKernels(
    const std::vector<const Graph*>& graphs, const CodegenOptions& options, int max_parallel) {
  using Result = StatusOr<std::shared_ptr<CompiledKernel>>;
  std::vector<Result> results(graphs.size(), Status(StatusCode::kInternal, "not compiled"));
  if (max_parallel <= 0) {
    max_parallel = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  auto options_of = [&](size_t i) {
    CodegenOptions o = options;
    o.kernel_index = options.kernel_index + static_cast<int>(i);
    return o;
  };
  StatusOr<Target> target = ResolveTarget(options);
  if (!target.ok()) {
    for (auto& r : results) r = target.status();
    return results;
  }
  const Target& t = *target;
  // 1. Emit every kernel and load the cached ones (memory, then disk).
  std::vector<BatchItem> misses(graphs.size());
  std::vector<char> missed(graphs.size(), 0);
  ParallelJobs(graphs.size(), max_parallel, [&](size_t i) {
    if (graphs[i] == nullptr) {
      results[i] = InvalidArgument("CompileKernels: graph ", i, " is null");
      return;
    }
    BatchItem& it = misses[i];
    results[i] = KernelBuilder::Get(*graphs[i], options_of(i), t,
                                    /*compile=*/false, &it.src, &it.key);
    if (results[i].ok() && results[i].value() == nullptr) {
      it.index = i;
      it.graph = graphs[i];
      missed[i] = 1;
    }
  });
  std::vector<BatchItem> todo;
  for (size_t i = 0; i < graphs.size(); ++i) {
    if (missed[i]) todo.push_back(std::move(misses[i]));
  }
  if (todo.empty()) return results;
  // 2. Compile the misses: one kernel per compiler run when there are few
  // or batching is off, else up to kMaxBatchKernels per run, as many runs
  // as the parallelism allows.
  if (todo.size() < 2 || BatchOffByEnv() || !options.batch_compile) {
    ParallelJobs(todo.size(), max_parallel, [&](size_t j) {
      const size_t i = todo[j].index;
      results[i] = KernelBuilder::Get(*graphs[i], options_of(i), t, /*compile=*/true);
    });
    return results;
  }
  const size_t m = todo.size();
  const size_t nb = std::max<size_t>(std::min<size_t>(static_cast<size_t>(max_parallel), m),
                                     (m + kMaxBatchKernels - 1) / kMaxBatchKernels);
  std::vector<std::vector<BatchItem>> batches(nb);
  for (size_t j = 0; j < m; ++j) batches[j * nb / m].push_back(std::move(todo[j]));
  ParallelJobs(nb, max_parallel,
               [&](size_t b) { KernelBuilder::Batch(batches[b], options, t, &results); });
  return results;
}

CodegenStats GetCodegenStats() {
  std::lock_guard<std::mutex> lock(G().mu);
  return G().stats;
}

void ResetCodegenStats() {
  std::lock_guard<std::mutex> lock(G().mu);
  G().stats = CodegenStats();
}

void ClearKernelMemoryCache() {
  std::lock_guard<std::mutex> lock(G().mu);
  G().memory.clear();
}

}  // namespace ember::codegen
