// The kernel caches and the produced objects: memory hits; a corrupt or
// truncated disk entry is detected, deleted and rebuilt (never loaded); two
// threads and two processes compiling one kernel at once both succeed; a
// second process loads from disk without running the compiler at all; a
// different CPU feature set misses; objects never depend on libgomp; the
// innermost loops of an elementwise chain and of a row sum vectorize at -O3.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "codegen/cpu/codegen_test_util.h"
#include "codegen/cpu/elf_needed.h"
#include "codegen/cpu/toolchain.h"

namespace ember::codegen {
namespace {

using testing::FastOptions;
using testing::RunKernel;
using testing::TempDir;

// The 8-op chain of the benchmark BM_FusedElementwiseChain, on f32[n].
Graph ChainGraph(int64_t n, double c0 = 1.5) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {n}));
  auto k = [&](double v) { return b.BroadcastInDim(b.ConstantScalar(DType::kF32, v), {n}, {}); };
  NodeId y = b.Multiply(x, k(c0));
  y = b.Add(y, k(0.5));
  y = b.Maximum(y, k(-2.0));
  y = b.Multiply(y, k(0.75));
  y = b.Subtract(y, k(0.125));
  y = b.Minimum(y, k(4.0));
  y = b.Add(y, k(1.0));
  y = b.Multiply(y, k(3.0));
  b.SetOutputs({y});
  return *b.Build();
}

// Checks a compiled chain kernel against the interpreter on fixed data.
bool ChainWorks(const CompiledKernel& k, const Graph& g) {
  const int64_t n = g.node(g.parameters()[0]).shape.num_elements();
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((i % 17) * 0.5 - 4);
  Literal x = Literal::FromDoubles(Shape(DType::kF32, {n}), v);
  auto got = RunKernel(k, {x});
  auto want = Evaluate(g, {x});
  return got.ok() && want.ok() && (*got)[0].BitwiseEquals((*want)[0]);
}

std::string SlurpFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The .so path named by a cache entry's .meta.
std::string EntrySo(const std::string& dir, const std::string& key) {
  std::string meta = SlurpFile(DiskCache(dir).MetaPath(key));
  std::istringstream in(meta);
  std::string a, b, c, d, e, so;
  in >> a >> b >> c >> d >> e >> so;
  return dir + "/kernels/" + key.substr(0, 2) + "/" + so;
}

TEST(CodegenCache, MemoryHitReturnsTheLoadedKernel) {
  TempDir dir;
  ResetCodegenStats();
  ClearKernelMemoryCache();
  Graph g = ChainGraph(100);
  auto a = CompileKernel(g, FastOptions(dir.path()));
  auto b = CompileKernel(g, FastOptions(dir.path()));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ(a->get(), b->get());
  CodegenStats s = GetCodegenStats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.memory_hits, 1);
  EXPECT_EQ(s.disk_hits, 0);
  EXPECT_GT(s.compile_seconds, 0);
  EXPECT_TRUE(ChainWorks(**a, g));
  // The source is kept beside the entry, for reading.
  EXPECT_EQ(SlurpFile(DiskCache(dir.path()).SourcePath((*a)->cache_key())), (*a)->source());
}

TEST(CodegenCache, CorruptEntryIsDetectedDeletedAndRebuilt) {
  TempDir dir;
  ResetCodegenStats();
  ClearKernelMemoryCache();
  Graph g = ChainGraph(200);
  auto a = CompileKernel(g, FastOptions(dir.path()));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::string key = (*a)->cache_key();
  const std::string so = EntrySo(dir.path(), key);
  EXPECT_EQ(so, (*a)->so_path());
  a->reset();  // unload
  ClearKernelMemoryCache();

  // 1. Truncated object.
  ASSERT_EQ(truncate(so.c_str(), 100), 0);
  auto b = CompileKernel(g, FastOptions(dir.path()));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  CodegenStats s = GetCodegenStats();
  EXPECT_EQ(s.corrupt_entries, 1);
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.disk_hits, 0);
  EXPECT_TRUE(ChainWorks(**b, g));
  const std::string so2 = (*b)->so_path();
  b->reset();
  ClearKernelMemoryCache();

  // 2. One flipped byte, size unchanged.
  {
    int fd = open(so2.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c;
    ASSERT_EQ(pread(fd, &c, 1, 1000), 1);
    c ^= 0x20;
    ASSERT_EQ(pwrite(fd, &c, 1, 1000), 1);
    close(fd);
  }
  auto c = CompileKernel(g, FastOptions(dir.path()));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  s = GetCodegenStats();
  EXPECT_EQ(s.corrupt_entries, 2);
  EXPECT_EQ(s.compiles, 3);
  EXPECT_TRUE(ChainWorks(**c, g));
  c->reset();
  ClearKernelMemoryCache();

  // 3. Garbage metadata.
  ASSERT_TRUE(WriteFileAtomic(DiskCache(dir.path()).MetaPath(key), "garbage\n").ok());
  auto d = CompileKernel(g, FastOptions(dir.path()));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(GetCodegenStats().corrupt_entries, 3);
  d->reset();
  ClearKernelMemoryCache();

  // 4. And an intact entry is a disk hit.
  auto e = CompileKernel(g, FastOptions(dir.path()));
  ASSERT_TRUE(e.ok());
  s = GetCodegenStats();
  EXPECT_EQ(s.disk_hits, 1);
  EXPECT_EQ(s.compiles, 4);
  EXPECT_TRUE(ChainWorks(**e, g));
}

TEST(CodegenCache, TwoThreadsCompileOneKernel) {
  TempDir dir;
  ResetCodegenStats();
  ClearKernelMemoryCache();
  Graph g = ChainGraph(300);
  StatusOr<std::shared_ptr<CompiledKernel>> r1 = Status(StatusCode::kInternal, "unset");
  StatusOr<std::shared_ptr<CompiledKernel>> r2 = r1;
  std::thread t1([&] { r1 = CompileKernel(g, FastOptions(dir.path())); });
  std::thread t2([&] { r2 = CompileKernel(g, FastOptions(dir.path())); });
  t1.join();
  t2.join();
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_TRUE(ChainWorks(**r1, g));
  EXPECT_TRUE(ChainWorks(**r2, g));
  CodegenStats s = GetCodegenStats();
  EXPECT_EQ(s.compiles, 1);  // the second waited for the first
  EXPECT_EQ(s.memory_hits, 1);
}

TEST(CodegenCache, KernelsOfOneGraphCompileInParallel) {
  TempDir dir;
  ResetCodegenStats();
  ClearKernelMemoryCache();
  Graph a = ChainGraph(700), b = ChainGraph(800), c = ChainGraph(700);
  auto ks = CompileKernels({&a, &b, &c, nullptr}, FastOptions(dir.path()), 2);
  ASSERT_EQ(ks.size(), 4u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ks[i].ok()) << ks[i].status().ToString();
  EXPECT_FALSE(ks[3].ok());
  EXPECT_EQ(ks[0].value()->name(), "ember_fused_bcast_mul_add_max_sub_min_0");
  EXPECT_EQ(ks[2].value()->name(), "ember_fused_bcast_mul_add_max_sub_min_2");
  EXPECT_TRUE(ChainWorks(*ks[0].value(), a));
  EXPECT_TRUE(ChainWorks(*ks[1].value(), b));
  EXPECT_TRUE(ChainWorks(*ks[2].value(), c));
  // Three misses, two compiler runs at once: two batches (2 + 1 kernels).
  EXPECT_EQ(GetCodegenStats().compiles, 2);
  EXPECT_EQ(GetCodegenStats().kernels_built, 3);
}

// Kernels built in one batch keep per-kernel cache semantics: each has its
// own entry (its own verified .so name, a link to the one batch object, and
// its own standalone source beside it); a second process (here: a cleared
// memory cache) loads every one from disk without compiling; removing one
// entry rebuilds only that kernel; with batching off every kernel is a run.
TEST(CodegenCache, BatchedKernelsKeepPerKernelEntries) {
  TempDir dir;
  ResetCodegenStats();
  ClearKernelMemoryCache();
  std::vector<Graph> gs;
  for (int i = 0; i < 5; ++i) gs.push_back(ChainGraph(300 + 10 * i, 1.25 + i));
  std::vector<const Graph*> ptrs;
  for (const Graph& g : gs) ptrs.push_back(&g);
  auto ks = CompileKernels(ptrs, FastOptions(dir.path()), 1);
  for (size_t i = 0; i < gs.size(); ++i) {
    ASSERT_TRUE(ks[i].ok()) << ks[i].status().ToString();
    EXPECT_TRUE(ChainWorks(*ks[i].value(), gs[i])) << i;
    EXPECT_EQ(SlurpFile(DiskCache(dir.path()).SourcePath(ks[i].value()->cache_key())),
              ks[i].value()->source());
    EXPECT_EQ(EntrySo(dir.path(), ks[i].value()->cache_key()), ks[i].value()->so_path());
  }
  EXPECT_EQ(GetCodegenStats().compiles, 1);  // one run for all five
  EXPECT_EQ(GetCodegenStats().kernels_built, 5);
  // Each entry's object is one file with several links (the batch object).
  struct stat st;
  ASSERT_EQ(stat(ks[0].value()->so_path().c_str(), &st), 0);
  EXPECT_GE(st.st_nlink, 5u);

  const std::string removed_key = ks[2].value()->cache_key();
  ks.clear();
  ResetCodegenStats();
  ClearKernelMemoryCache();
  auto warm = CompileKernels(ptrs, FastOptions(dir.path()), 2);
  for (size_t i = 0; i < gs.size(); ++i) {
    ASSERT_TRUE(warm[i].ok()) << warm[i].status().ToString();
    EXPECT_TRUE(ChainWorks(*warm[i].value(), gs[i])) << i;
  }
  EXPECT_EQ(GetCodegenStats().compiles, 0);
  EXPECT_EQ(GetCodegenStats().disk_hits, 5);

  warm.clear();
  DiskCache(dir.path()).Remove(removed_key);
  ResetCodegenStats();
  ClearKernelMemoryCache();
  auto again = CompileKernels(ptrs, FastOptions(dir.path()), 2);
  for (size_t i = 0; i < gs.size(); ++i) {
    ASSERT_TRUE(again[i].ok()) << again[i].status().ToString();
    EXPECT_TRUE(ChainWorks(*again[i].value(), gs[i])) << i;
  }
  EXPECT_EQ(GetCodegenStats().compiles, 1);
  EXPECT_EQ(GetCodegenStats().kernels_built, 1);
  EXPECT_EQ(GetCodegenStats().disk_hits, 4);

  TempDir other;
  ResetCodegenStats();
  CodegenOptions off = FastOptions(other.path());
  off.batch_compile = false;
  auto single = CompileKernels(ptrs, off, 2);
  for (size_t i = 0; i < gs.size(); ++i) ASSERT_TRUE(single[i].ok());
  EXPECT_EQ(GetCodegenStats().compiles, 5);
}

// A batch whose compile fails is retried kernel by kernel, so the error
// names the kernel that failed and the others still build.
TEST(CodegenCache, FailedBatchFallsBackToSingleKernels) {
  TempDir dir;
  const std::string wrapper = dir.path() + "/picky-cxx";
  auto real = ResolveCompiler("");
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  {
    // Refuses any translation unit that holds the marker kernel's entry
    // together with another kernel (i.e. every batch holding it).
    std::ofstream w(wrapper);
    w << "#!/bin/sh\n"
         "if grep -q 'ember_fused_bcast_mul_add_max_sub_min_1(' kernel.cc && "
         "grep -q 'A batch of' kernel.cc; then echo 'picky: no batches' >&2; exit 3; fi\n"
         "if grep -q 'ember_fused_bcast_mul_add_max_sub_min_1(' kernel.cc; then "
         "echo 'picky: not this one' >&2; exit 4; fi\n"
         "exec "
      << *real << " \"$@\"\n";
  }
  ASSERT_EQ(chmod(wrapper.c_str(), 0755), 0);
  ResetCodegenStats();
  ClearKernelMemoryCache();
  Graph a = ChainGraph(210), b = ChainGraph(220), c = ChainGraph(230);
  CodegenOptions o = FastOptions(dir.path() + "/cache");
  o.cxx = wrapper;
  auto ks = CompileKernels({&a, &b, &c}, o, 1);
  ASSERT_TRUE(ks[0].ok()) << ks[0].status().ToString();
  ASSERT_FALSE(ks[1].ok());
  EXPECT_NE(ks[1].status().message().find("ember_fused_bcast_mul_add_max_sub_min_1"),
            std::string::npos)
      << ks[1].status().ToString();
  EXPECT_NE(ks[1].status().message().find("picky: not this one"), std::string::npos);
  ASSERT_TRUE(ks[2].ok()) << ks[2].status().ToString();
  EXPECT_TRUE(ChainWorks(*ks[0].value(), a));
  EXPECT_TRUE(ChainWorks(*ks[2].value(), c));
}

// EMBER_DEBUG_DIR dumps belong to the runtime (dir/<graph hash>.<kernel>.cc,
// kernel_steps_test DebugDir): CompileKernel itself writes nothing there.
TEST(CodegenCache, StaleTempDirsAreSweptAndDebugDirIsLeftToTheRuntime) {
  TempDir dir;
  // A compile directory left by a killed process two days ago, and a fresh one.
  const std::string stale = dir.path() + "/cache/tmp/0123456789abcdef.1.2.3";
  const std::string fresh = dir.path() + "/cache/tmp/0123456789abcdef.4.5.6";
  ASSERT_TRUE(MakeDirs(stale).ok());
  ASSERT_TRUE(MakeDirs(fresh).ok());
  struct timespec old_times[2] = {{time(nullptr) - 48 * 3600, 0}, {time(nullptr) - 48 * 3600, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, stale.c_str(), old_times, 0), 0);
  const std::string debug = dir.path() + "/debug";
  ASSERT_TRUE(MakeDirs(debug).ok());
  setenv("EMBER_DEBUG_DIR", debug.c_str(), 1);
  Graph g = ChainGraph(900);
  auto k = CompileKernel(g, FastOptions(dir.path() + "/cache"));
  unsetenv("EMBER_DEBUG_DIR");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  int dumped = 0;
  if (DIR* d = opendir(debug.c_str())) {
    while (dirent* e = readdir(d)) dumped += e->d_name[0] != '.';
    closedir(d);
  }
  EXPECT_EQ(dumped, 0) << "CompileKernel wrote into EMBER_DEBUG_DIR";
  struct stat st;
  EXPECT_NE(stat(stale.c_str(), &st), 0) << "stale temp dir not swept";
  EXPECT_EQ(stat(fresh.c_str(), &st), 0) << "a live compile dir was removed";
}

// The in-memory cache is keyed by cache directory too: the same kernel asked
// for under another cache_dir is built (or found) there, not handed back
// from the first directory.
TEST(CodegenCache, MemoryCacheIsPerCacheDir) {
  TempDir a, b;
  ResetCodegenStats();
  ClearKernelMemoryCache();
  Graph g = ChainGraph(120);
  auto ka = CompileKernel(g, FastOptions(a.path()));
  auto kb = CompileKernel(g, FastOptions(b.path()));
  auto ka2 = CompileKernel(g, FastOptions(a.path()));
  ASSERT_TRUE(ka.ok() && kb.ok() && ka2.ok()) << kb.status().ToString();
  EXPECT_NE(ka->get(), kb->get());
  EXPECT_EQ(ka->get(), ka2->get());
  EXPECT_EQ((*ka)->cache_key(), (*kb)->cache_key());  // same source, flags, compiler
  EXPECT_EQ((*kb)->so_path().rfind(b.path(), 0), 0u) << (*kb)->so_path();
  EXPECT_EQ(SlurpFile(DiskCache(b.path()).SourcePath((*kb)->cache_key())), (*kb)->source());
  CodegenStats s = GetCodegenStats();
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.memory_hits, 1);
  EXPECT_TRUE(ChainWorks(**kb, g));
}

// Forks a child that runs `fn` and exits with its result (0 = success).
pid_t ForkChild(const std::function<int()>& fn) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  return pid;
}
int WaitChild(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(CodegenCache, TwoProcessesCompileOneKernelAtOnce) {
  TempDir dir;
  Graph g = ChainGraph(400, 2.5);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  auto child = [&] {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) return 10;  // wait for the start signal
    ResetCodegenStats();
    ClearKernelMemoryCache();
    auto k = CompileKernel(g, FastOptions(dir.path()));
    if (!k.ok()) {
      std::fprintf(stderr, "child: %s\n", k.status().ToString().c_str());
      return 11;
    }
    if (!ChainWorks(**k, g)) return 12;
    return GetCodegenStats().compiles == 1 ? 0 : 13;  // both really compiled
  };
  pid_t a = ForkChild(child);
  pid_t b = ForkChild(child);
  close(go[0]);
  ASSERT_EQ(write(go[1], "gg", 2), 2);  // start both at once
  close(go[1]);
  EXPECT_EQ(WaitChild(a), 0);
  EXPECT_EQ(WaitChild(b), 0);
  // The surviving entry is valid: this process loads it from disk.
  ResetCodegenStats();
  ClearKernelMemoryCache();
  auto k = CompileKernel(g, FastOptions(dir.path()));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(GetCodegenStats().disk_hits, 1);
  EXPECT_EQ(GetCodegenStats().compiles, 0);
  EXPECT_TRUE(ChainWorks(**k, g));
}

TEST(CodegenCache, SecondProcessHitsDiskWithoutRunningTheCompiler) {
  TempDir dir;
  auto real = ResolveCompiler("");
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  // A compiler wrapper that logs every invocation.
  const std::string log = dir.path() + "/cxx.log";
  const std::string wrapper = dir.path() + "/logging-cxx";
  {
    std::ofstream w(wrapper);
    w << "#!/bin/sh\necho \"$*\" >> '" << log << "'\nexec '" << *real << "' \"$@\"\n";
  }
  ASSERT_EQ(chmod(wrapper.c_str(), 0755), 0);
  CodegenOptions opts = FastOptions(dir.path() + "/cache");
  opts.cxx = wrapper;
  Graph g = ChainGraph(500, 3.5);
  auto run_child = [&](int64_t want_compiles, int64_t want_disk_hits) {
    return WaitChild(ForkChild([&] {
      ResetCodegenStats();
      ClearKernelMemoryCache();
      auto k = CompileKernel(g, opts);
      if (!k.ok()) {
        std::fprintf(stderr, "child: %s\n", k.status().ToString().c_str());
        return 11;
      }
      if (!ChainWorks(**k, g)) return 12;
      CodegenStats s = GetCodegenStats();
      if (s.compiles != want_compiles || s.disk_hits != want_disk_hits) {
        std::fprintf(stderr, "child: compiles %lld disk hits %lld\n",
                     static_cast<long long>(s.compiles), static_cast<long long>(s.disk_hits));
        return 13;
      }
      return 0;
    }));
  };
  EXPECT_EQ(run_child(1, 0), 0);
  const std::string first = SlurpFile(log);
  EXPECT_NE(first.find("--version"), std::string::npos) << first;
  EXPECT_NE(first.find("kernel.cc"), std::string::npos) << first;
  ASSERT_EQ(truncate(log.c_str(), 0), 0);
  EXPECT_EQ(run_child(0, 1), 0);
  EXPECT_EQ(SlurpFile(log), "") << "the warm process ran the compiler";
}

TEST(CodegenCache, DifferentCpuFeaturesMiss) {
  TempDir dir;
  ResetCodegenStats();
  ClearKernelMemoryCache();
  Graph g = ChainGraph(600);
  CodegenOptions a = FastOptions(dir.path());
  a.cpu_features = "ember-test-cpu avx2";
  CodegenOptions b = a;
  b.cpu_features = "ember-test-cpu avx2 avx512f";
  auto ka = CompileKernel(g, a);
  auto kb = CompileKernel(g, b);
  ASSERT_TRUE(ka.ok() && kb.ok());
  EXPECT_NE((*ka)->cache_key(), (*kb)->cache_key());
  EXPECT_EQ(GetCodegenStats().compiles, 2);
  ka->reset();
  ClearKernelMemoryCache();
  auto again = CompileKernel(g, a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(GetCodegenStats().compiles, 2);
  EXPECT_EQ(GetCodegenStats().disk_hits, 1);
  // The detected feature set is the machine's.
  EXPECT_NE(CpuFeatures().find(" "), std::string::npos);
}

TEST(CodegenObject, NoOpenMpRuntimeDependency) {
  TempDir dir;
  // exp() makes the object need libm, so the dynamic section is not empty.
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {1 << 12}));
  b.SetOutputs({b.Exp(b.Multiply(x, x)), b.Reduce(x, {0}, ReduceKind::kAdd)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  CodegenOptions opts;  // -O3, as in production
  opts.cache_dir = dir.path();
  auto k = CompileKernel(*g, opts);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  auto needed = ElfNeededLibraries((*k)->so_path());
  ASSERT_TRUE(needed.ok()) << needed.status().ToString();
  bool libm = false, libmvec = false;
  for (const auto& lib : *needed) {
    EXPECT_EQ(lib.find("gomp"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("omp"), std::string::npos) << lib;
    libm |= lib.rfind("libm.so", 0) == 0;
    libmvec |= lib.rfind("libmvec.so", 0) == 0;
  }
  EXPECT_TRUE(libm) << "the dynamic section was not read";
  // Linked --as-needed: the vectorized exp loop calls libmvec's variant.
  EXPECT_TRUE(libmvec) << "exp was not vectorized through libmvec";

  // Positive control: the same check sees libgomp in an object built with -fopenmp.
  ASSERT_TRUE(WriteFileAtomic(dir.path() + "/omp.cc",
                              "extern \"C\" void f(float* x, int n) {\n"
                              "#pragma omp parallel for\n"
                              "  for (int i = 0; i < n; ++i) x[i] += 1;\n}\n")
                  .ok());
  auto cxx = ResolveCompiler("");
  ASSERT_TRUE(cxx.ok());
  std::string out;
  auto rc = RunProcess({*cxx, "-O1", "-fPIC", "-shared", "-fopenmp", "-o", "omp.so", "omp.cc"},
                       dir.path(), &out);
  ASSERT_TRUE(rc.ok() && *rc == 0) << out;
  auto omp = ElfNeededLibraries(dir.path() + "/omp.so");
  ASSERT_TRUE(omp.ok());
  bool gomp = false;
  for (const auto& lib : *omp) gomp |= lib.find("gomp") != std::string::npos;
  EXPECT_TRUE(gomp);
}

// Compiles `source` at -O3 with -fopt-info-vec-optimized and returns the
// source lines GCC reports as vectorized loops.
std::vector<int> VectorizedLines(const std::string& source) {
  TempDir dir;
  EXPECT_TRUE(WriteFileAtomic(dir.path() + "/kernel.cc", source).ok());
  auto cxx = ResolveCompiler("");
  EXPECT_TRUE(cxx.ok());
  std::vector<std::string> argv = {*cxx};
  std::vector<std::string> flags = CompileFlags(false);
  for (const auto& f : NativeTuneFlags(*cxx, DefaultCacheDir())) flags.push_back(f);  // as Compile
  for (const auto& f : flags) {
    if (f != "-shared" && f != "-w" && f.rfind("-Wl,", 0) != 0) argv.push_back(f);
  }
  argv.insert(argv.end(), {"-fopt-info-vec-optimized", "-c", "kernel.cc", "-o", "kernel.o"});
  std::string out;
  auto rc = RunProcess(argv, dir.path(), &out);
  EXPECT_TRUE(rc.ok() && *rc == 0) << out;
  std::vector<int> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("kernel.cc:", 0) == 0 && l.find("loop vectorized") != std::string::npos) {
      lines.push_back(std::stoi(l.substr(10)));
    }
  }
  return lines;
}

// Line range [first, last] of function `fn` in `source` (1-based).
std::pair<int, int> FunctionLines(const std::string& source, const std::string& fn) {
  std::istringstream in(source);
  int line = 0, first = -1;
  for (std::string l; std::getline(in, l);) {
    ++line;
    if (first < 0 && l.find("void " + fn + "(") != std::string::npos) first = line;
    if (first > 0 && l == "}") return {first, line};
  }
  return {first, -1};
}

TEST(CodegenObject, InnerLoopsVectorize) {
  // Elementwise chain.
  auto chain = EmitKernelSource(ChainGraph(1 << 12));
  ASSERT_TRUE(chain.ok());
  auto [c0, c1] = FunctionLines(chain->code, "ember_phase_0");
  ASSERT_GT(c0, 0);
  bool chain_vec = false;
  for (int l : VectorizedLines(chain->code)) chain_vec |= l > c0 && l < c1;
  EXPECT_TRUE(chain_vec) << chain->code;

  // Row reductions: the lane loops of both passes of the row kernel (a max
  // of exp(x), through libmvec, and a sum of squares).
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {64, 1024}));
  b.SetOutputs({b.Reduce(b.Exp(x), {1}, ReduceKind::kMaximum),
                b.Reduce(b.Multiply(x, x), {1}, ReduceKind::kAdd)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto red = EmitKernelSource(*g);
  ASSERT_TRUE(red.ok());
  ASSERT_NE(red->code.find("// pass: %2 reduce (maximum)"), std::string::npos) << red->code;
  ASSERT_NE(red->code.find("// pass: %4 reduce (add)"), std::string::npos) << red->code;
  auto [r0, r1] = FunctionLines(red->code, "ember_phase_0");
  ASSERT_GT(r0, 0);
  // The line of each pass's full-block lane loop (the simd loop
  // "for (int64_t l = 0; l < 16; ++l) {" after its "#pragma omp simd").
  std::vector<int> lane_loops;
  {
    std::istringstream in(red->code);
    int line = 0;
    bool simd = false;
    for (std::string l; std::getline(in, l);) {
      ++line;
      if (simd && line > r0 && line < r1 &&
          l.find("for (int64_t l = 0; l < 16; ++l) {") != std::string::npos)
        lane_loops.push_back(line);
      simd = l.find("#pragma omp simd") != std::string::npos;
    }
  }
  ASSERT_EQ(lane_loops.size(), 2u) << red->code;
  const std::vector<int> vec_lines = VectorizedLines(red->code);
  for (int loop : lane_loops) {
    bool vec = false;
    for (int l : vec_lines) vec |= l == loop || l == loop + 1;  // GCC may name the body's line
    std::string reported;
    for (int l : vec_lines) reported += " " + std::to_string(l);
    EXPECT_TRUE(vec) << "line " << loop << " not vectorized (reported:" << reported << ")\n"
                     << red->code;
  }
}

// A 2x2 max pool's window (stride-2 slices of [64,32,8,8]) reads its input at
// strided positions of the flat loop: a vector loop needs gathers. Where
// NativeTuneFlags turns them on (a CPU GCC tunes as generic, without the GDS
// mitigation) the loop must vectorize; it stayed scalar, 8x slower, without the
// flag on such a machine. Elsewhere the compiler's own tuning decides, and the
// flags are empty on a GDS-mitigated CPU.
TEST(CodegenObject, StridedLoadsVectorizeWhereTheTuningAllowsGathers) {
  auto cxx = ResolveCompiler("");
  ASSERT_TRUE(cxx.ok());
  const std::vector<std::string> tune = NativeTuneFlags(*cxx, DefaultCacheDir());
  std::string gds;
  if (ReadFile("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling", &gds).ok() &&
      gds.rfind("Mitigation", 0) == 0) {
    EXPECT_TRUE(tune.empty());
  }
  ASSERT_LE(tune.size(), 1u);
  if (tune.empty()) GTEST_SKIP() << "this compiler tunes for this CPU itself";
  EXPECT_EQ(tune[0].rfind("-mtune-ctrl=use_gather", 0), 0u) << tune[0];
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {64, 32, 8, 8}));
  NodeId m = b.Maximum(b.Slice(x, {0, 0, 0, 0}, {64, 32, 7, 7}, {1, 1, 2, 2}),
                       b.Slice(x, {0, 0, 1, 1}, {64, 32, 8, 8}, {1, 1, 2, 2}));
  b.SetOutputs({m});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto src = EmitKernelSource(*g);
  ASSERT_TRUE(src.ok());
  auto [f0, f1] = FunctionLines(src->code, "ember_phase_0");
  ASSERT_GT(f0, 0);
  bool vec = false;
  for (int l : VectorizedLines(src->code)) vec |= l > f0 && l < f1;
  EXPECT_TRUE(vec) << src->code;
}

}  // namespace
}  // namespace ember::codegen
