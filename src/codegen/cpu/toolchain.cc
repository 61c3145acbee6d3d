// The system compiler, its version and flags, CPU features, process runs.
#include "codegen/cpu/toolchain.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "codegen/cpu/disk_cache.h"
#include "codegen/cpu/sha256.h"

extern char** environ;

namespace ember::codegen {

StatusOr<std::string> ResolveCompiler(const std::string& requested) {
  std::string name = requested;
  if (name.empty()) {
    const char* env = std::getenv("EMBER_CXX");
    name = (env && *env) ? env : "c++";
  }
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) != 0) {
      return NotFound("cpu codegen: compiler '", name, "' is not executable");
    }
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream ss(dirs);
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (dir.empty()) continue;
    std::string cand = dir + "/" + name;
    struct stat st;
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) {
      return cand;
    }
  }
  return NotFound("cpu codegen: no C++ compiler '", name,
                  "' on PATH (install g++ or set EMBER_CXX)");
}

StatusOr<std::string> CompilerVersion(const std::string& cxx, const std::string& cache_dir) {
  static std::mutex mu;
  static std::map<std::string, std::string> memo;
  char real[PATH_MAX];
  std::string real_path = realpath(cxx.c_str(), real) ? real : cxx;
  struct stat st;
  if (stat(real_path.c_str(), &st) != 0) {
    return NotFound("cpu codegen: cannot stat compiler '", cxx, "'");
  }
  const std::string id = cxx + "|" + real_path + "|" + std::to_string(st.st_size) + "|" +
                         std::to_string(st.st_mtim.tv_sec) + "." +
                         std::to_string(st.st_mtim.tv_nsec);
  std::lock_guard<std::mutex> lock(mu);
  auto it = memo.find(id);
  if (it != memo.end()) return it->second;
  const std::string file = cache_dir + "/toolchain/" + Sha256Hex(id) + ".version";
  std::string version;
  if (ReadFile(file, &version).ok() && version.rfind("ember-toolchain 1\n", 0) == 0) {
    version = version.substr(18);
  } else {
    int rc = 0;
    EMBER_ASSIGN_OR_RETURN(rc, RunProcess({cxx, "--version"}, "", &version));
    if (rc != 0) {
      return Status(StatusCode::kInternal,
                    "cpu codegen: '" + cxx + " --version' failed: " + version);
    }
    // Best effort: a cache that cannot be written only costs a rerun.
    (void)WriteFileAtomic(file, "ember-toolchain 1\n" + version);
  }
  memo[id] = version;
  return version;
}

std::vector<std::string> CompileFlags(bool fast) {
  return {"-std=c++17",        fast ? "-O1" : "-O3",
          "-march=native",     "-fPIC",
          "-shared",           "-fopenmp-simd",
          "-fno-math-errno",   "-fwrapv",
          "-ffp-contract=off", "-fno-exceptions",
          "-fno-rtti",         "-fvisibility=hidden",
          "-Wl,--as-needed",   "-w"};
}

namespace {

// The kernel's /sys/.../gather_data_sampling: "Not affected", "Vulnerable",
// "Mitigation: Microcode", ...; "" where the file is absent. Read once a process.
const std::string& GatherDataSampling() {
  static const std::string state = [] {
    std::string s;
    if (!ReadFile("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling", &s).ok())
      return std::string();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }();
  return state;
}

// The probe behind NativeTuneFlags, run once per compiler, CPU and GDS state.
std::vector<std::string> ProbeNativeTuneFlags(const std::string& cxx, const std::string& gds) {
#if defined(__x86_64__)
  if (gds.rfind("Mitigation", 0) == 0) return {};  // gathers are slow under the microcode
  std::string out;
  // GCC prints the options -march=native resolved to; another compiler fails or prints
  // no -mtune= line, and keeps its own tuning.
  StatusOr<int> rc = RunProcess({cxx, "-march=native", "-Q", "--help=target"}, "", &out);
  if (!rc.ok() || *rc != 0) return {};
  std::istringstream in(out);
  std::string tune;
  for (std::string l; std::getline(in, l);) {
    std::istringstream words(l);
    std::string key, value;
    if (words >> key >> value && key == "-mtune=") tune = value;
  }
  if (tune != "generic") return {};  // the compiler knows this CPU: its tuning decides
  // The tuning knob's names differ between GCC releases; an unknown name is an error.
  for (const char* names : {"use_gather_2parts,use_gather_4parts,use_gather_8parts",
                            "use_gather_2parts,use_gather_4parts,use_gather", "use_gather"}) {
    const std::string flag = std::string("-mtune-ctrl=") + names;
    rc = RunProcess({cxx, "-x", "c++", "-fsyntax-only", flag, "/dev/null"}, "", &out);
    if (rc.ok() && *rc == 0) return {flag};
  }
#else
  (void)cxx;
  (void)gds;
#endif
  return {};
}

}  // namespace

std::vector<std::string> NativeTuneFlags(const std::string& cxx, const std::string& cache_dir) {
  static std::mutex mu;
  static std::map<std::string, std::vector<std::string>> memo;
  const std::string& gds = GatherDataSampling();
  const std::string id = cxx + "|" + CpuFeatures() + "|" + gds;
  std::lock_guard<std::mutex> lock(mu);
  auto it = memo.find(id);
  if (it != memo.end()) return it->second;
  const std::string version = [&] {
    auto v = CompilerVersion(cxx, cache_dir);
    return v.ok() ? *v : std::string();
  }();
  const std::string file = cache_dir + "/toolchain/" + Sha256Hex(id + "|" + version) + ".tune";
  const std::string header = "ember-tune 1\n";
  std::vector<std::string> flags;
  std::string cached;
  if (ReadFile(file, &cached).ok() && cached.rfind(header, 0) == 0) {
    std::istringstream in(cached.substr(header.size()));
    for (std::string f; std::getline(in, f);) {
      if (!f.empty()) flags.push_back(f);
    }
  } else {
    flags = ProbeNativeTuneFlags(cxx, gds);
    std::string text = header;
    for (const auto& f : flags) text += f + "\n";
    (void)WriteFileAtomic(file, text);  // best effort, as for the version
  }
  memo[id] = flags;
  return flags;
}

const std::string& CpuFeatures() {
  static const std::string features = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::stringstream ss(line.substr(colon + 1));
      std::vector<std::string> flags;
      for (std::string f; ss >> f;) flags.push_back(f);
      std::sort(flags.begin(), flags.end());
      std::string s = "x86 flags:";
      for (const auto& f : flags) s += " " + f;
      return s;
    }
    std::string s = "probed:";
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    // clang-format off: the probes carry their own semicolons (one a line)
#define EMBER_PROBE(f) \
  if (__builtin_cpu_supports(f)) s += " " f;
    EMBER_PROBE("sse4.2")
    EMBER_PROBE("avx")
    EMBER_PROBE("avx2")
    EMBER_PROBE("fma")
    EMBER_PROBE("f16c")
    EMBER_PROBE("bmi2")
    EMBER_PROBE("avx512f")
    EMBER_PROBE("avx512bw")
    EMBER_PROBE("avx512dq")
    EMBER_PROBE("avx512vl")
    EMBER_PROBE("avx512cd")
    EMBER_PROBE("avx512vnni")
    EMBER_PROBE("avx512bf16")
    EMBER_PROBE("avx512vbmi")
#undef EMBER_PROBE
#endif
    return s;
    // clang-format on
  }();
  return features;
}

StatusOr<int> RunProcess(const std::vector<std::string>& argv, const std::string& cwd,
                         std::string* output) {
  output->clear();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return EMBER_INTERNAL_ERROR("pipe: ", std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int err = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return Status(StatusCode::kInternal,
                  "cpu codegen: cannot run '" + argv[0] + "': " + std::strerror(err));
  }
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      output->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return EMBER_INTERNAL_ERROR("waitpid: ", std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

}  // namespace ember::codegen
