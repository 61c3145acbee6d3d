// CompileKernel: emit -> key -> in-memory cache -> disk cache -> system
// compiler -> dlopen; CompiledKernel::Run; the process-wide counters.
#include <dlfcn.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
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

namespace ember::codegen {
namespace {

// Part of every cache key (kept in step with project(ember VERSION ...)).
constexpr const char* kEmberVersion = "0.1.0";

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
  const int rc = parallel_for
                     ? entry(inputs.data(), outputs.data(), const_cast<ParallelFor*>(&parallel_for),
                             &PfTrampoline)
                     : entry(inputs.data(), outputs.data(), nullptr, nullptr);
  if (rc == 0) return OkStatus();
  if (rc > 0 && static_cast<size_t>(rc) <= source_.error_messages.size()) {
    return OutOfRange(source_.error_messages[rc - 1]);
  }
  if (rc == -1) return ResourceExhausted("kernel ", name(), ": cannot allocate a temporary buffer");
  return EMBER_INTERNAL_ERROR("kernel ", name(), " returned unknown status ", rc);
}

StatusOr<std::shared_ptr<CompiledKernel>> CompileKernel(const Graph& g,
                                                        const CodegenOptions& options) {
  const bool vector_math = options.vector_math && !VectorMathOffByEnv();
  EMBER_ASSIGN_OR_RETURN(KernelSource src,
                         EmitKernelSource(g, options.kernel_index, vector_math));
  const bool fast = options.fast || FastFromEnv();
  EMBER_ASSIGN_OR_RETURN(std::string cxx, ResolveCompiler(options.cxx));
  std::string dir = options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir;
  if (!MakeDirs(dir).ok()) {
    // An unwritable cache costs recompiles, never a failure.
    const char* t = std::getenv("TMPDIR");
    dir = std::string(t && *t ? t : "/tmp") + "/ember-cache-" + std::to_string(getuid());
  }
  EMBER_ASSIGN_OR_RETURN(std::string version, CompilerVersion(cxx, dir));
  std::vector<std::string> flags = CompileFlags(fast);
  flags.insert(flags.end(), options.extra_flags.begin(), options.extra_flags.end());
  const std::string& features =
      options.cpu_features.empty() ? CpuFeatures() : options.cpu_features;

  Sha256 h;
  auto part = [&](const std::string& tag, const std::string& v) {
    h.Update(tag);
    h.Update(std::to_string(v.size()) + ":");
    h.Update(v);
  };
  part("ember", kEmberVersion);
  part("abi", std::to_string(kKernelAbiVersion));
  part("cxx", cxx);
  part("version", version);
  for (const auto& f : flags) part("flag", f);
  for (const auto& f : VectorMathLinkFlags()) part("lib", f);
  part("cpu", features);
  part("source", src.code);
  const std::string key = h.HexDigest();

  // The in-memory cache holds kernels loaded from one cache directory each:
  // the same source under another cache_dir is looked up (and installed) there.
  const std::string memory_key = key + "@" + dir;

  Globals& gl = G();
  std::shared_ptr<std::mutex> key_lock;
  {
    std::lock_guard<std::mutex> lock(gl.mu);
    if (options.use_memory_cache) {
      auto it = gl.memory.find(memory_key);
      if (it != gl.memory.end()) {
        ++gl.stats.memory_hits;
        return it->second;
      }
    }
    auto& kl = gl.key_locks[key];
    if (!kl) kl = std::make_shared<std::mutex>();
    key_lock = kl;
  }
  // One compile per key at a time in this process; other keys proceed.
  std::lock_guard<std::mutex> compile_lock(*key_lock);
  if (options.use_memory_cache) {
    std::lock_guard<std::mutex> lock(gl.mu);
    auto it = gl.memory.find(memory_key);
    if (it != gl.memory.end()) {
      ++gl.stats.memory_hits;
      return it->second;
    }
  }

  std::shared_ptr<CompiledKernel> k(new CompiledKernel());
  k->key_ = key;
  for (NodeId p : g.parameters()) k->parameter_shapes_.push_back(g.node(p).shape);
  for (NodeId o : g.outputs()) k->output_shapes_.push_back(g.node(o).shape);

  DiskCache cache(dir);
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
      EMBER_ASSIGN_OR_RETURN(std::string tmp, cache.MakeTempDir(key));
      Status st = WriteFileAtomic(tmp + "/kernel.cc", src.code);
      if (!st.ok()) {
        RemoveTree(tmp);
        return st;
      }
      std::vector<std::string> argv = {cxx};
      argv.insert(argv.end(), flags.begin(), flags.end());
      argv.insert(argv.end(), {"-o", "kernel.so", "kernel.cc"});
      argv.insert(argv.end(), VectorMathLinkFlags().begin(), VectorMathLinkFlags().end());
      std::string out;
      const auto t0 = std::chrono::steady_clock::now();
      StatusOr<int> rc = RunProcess(argv, tmp, &out);
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> lock(gl.mu);
        ++gl.stats.compiles;
        gl.stats.compile_seconds += secs;
      }
      if (!rc.ok() || *rc != 0) {
        RemoveTree(tmp);
        if (!rc.ok()) return rc.status();
        return Status(StatusCode::kInternal, "cpu codegen: compiling " + src.name + " failed (" +
                                                 cxx + " exit " + std::to_string(*rc) + "):\n" +
                                                 Tail(out, 4000));
      }
      StatusOr<std::string> installed = cache.Install(key, tmp + "/kernel.so", src.code);
      RemoveTree(tmp);
      EMBER_RETURN_IF_ERROR(installed.status());
      so_path = *installed;
    }
    void* handle = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      why = dlerror();
      if (!from_disk) {
        return Status(StatusCode::kInternal, "cpu codegen: dlopen " + so_path + ": " + why);
      }
      continue;  // e.g. removed by a concurrent process: rebuild
    }
    auto abi = reinterpret_cast<int (*)()>(dlsym(handle, "ember_kernel_abi_version"));
    void* entry = dlsym(handle, src.name.c_str());
    if (abi == nullptr || entry == nullptr || abi() != kKernelAbiVersion) {
      dlclose(handle);
      return Status(StatusCode::kInternal,
                    "cpu codegen: " + so_path + " does not export " + src.name + " (ABI " +
                        std::to_string(kKernelAbiVersion) + ")");
    }
    k->handle_ = handle;
    k->entry_ = entry;
  }
  if (k->handle_ == nullptr) {
    return Status(StatusCode::kInternal, "cpu codegen: cannot load " + src.name + ": " + why);
  }
  k->so_path_ = so_path;
  k->source_ = std::move(src);
  std::lock_guard<std::mutex> lock(gl.mu);
  if (from_disk) ++gl.stats.disk_hits;
  if (options.use_memory_cache) gl.memory[memory_key] = k;
  return k;
}

std::vector<StatusOr<std::shared_ptr<CompiledKernel>>> CompileKernels(
    const std::vector<const Graph*>& graphs, const CodegenOptions& options, int max_parallel) {
  std::vector<StatusOr<std::shared_ptr<CompiledKernel>>> results(
      graphs.size(), Status(StatusCode::kInternal, "not compiled"));
  if (max_parallel <= 0) {
    max_parallel = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < graphs.size(); i = next.fetch_add(1)) {
      CodegenOptions o = options;
      o.kernel_index = options.kernel_index + static_cast<int>(i);
      results[i] = graphs[i] ? CompileKernel(*graphs[i], o)
                             : StatusOr<std::shared_ptr<CompiledKernel>>(
                                   InvalidArgument("CompileKernels: graph ", i, " is null"));
    }
  };
  const size_t n = std::min(graphs.size(), static_cast<size_t>(max_parallel));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
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
