// In-memory executable cache keyed by the structural hash of the graph
// (include/ember/ir/hash.h) and the compile options that change the result.
//
// A hit is confirmed by comparing the stored canonical text of the graph
// (PrintGraph) with the looked-up graph's: the hash alone is never trusted,
// so a hash collision compiles (and is counted as a miss plus a collision).
// Thread-safe; two threads missing on the same graph may both compile (the
// first stored entry is kept and returned to both).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ember/ir/hash.h"
#include "ember/runtime/executable.h"

namespace ember {

struct ExecutableCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t collisions = 0;  // same hash, different text
  int64_t entries = 0;
};

class ExecutableCache {
 public:
  // The executable for `g` compiled with `options`, compiling it on a miss.
  // Compile errors are returned and not cached. `*hit` (when given): the executable was
  // compiled before (by this call's own lookup, or by a thread that stored it first).
  StatusOr<std::shared_ptr<const Executable>> GetOrCompile(const Graph& g,
                                                           const CompileOptions& options = {},
                                                           bool* hit = nullptr);
  ExecutableCacheStats stats() const;
  void Clear();

  // For tests: the key used for `g` (hash of the graph + option bits).
  static std::string KeyFor(const Graph& g, const CompileOptions& options);
  // For tests: replaces KeyFor (e.g. a constant key forces hash collisions).
  void SetKeyFunctionForTesting(
      std::function<std::string(const Graph&, const CompileOptions&)> fn) {
    key_fn_ = std::move(fn);
  }

 private:
  struct Entry {
    std::string text;  // PrintGraph of the graph (the verified identity)
    std::shared_ptr<const Executable> exe;
  };
  mutable std::mutex mu_;
  std::multimap<std::string, Entry> entries_;
  ExecutableCacheStats stats_;
  std::function<std::string(const Graph&, const CompileOptions&)> key_fn_;
};

// A process-wide cache.
ExecutableCache& GlobalExecutableCache();

}  // namespace ember
