// ExecutableCache (see include/ember/runtime/executable_cache.h).
#include "ember/runtime/executable_cache.h"

#include "ember/ir/text.h"

namespace ember {

std::string ExecutableCache::KeyFor(const Graph& g, const CompileOptions& o) {
  const codegen::CodegenOptions& c = o.codegen;
  std::string key = HashGraph(g).ToString();
  key += internal::StrCat("|b", static_cast<int>(o.backend), "|x", o.extern_contractions ? 1 : 0,
                          "|o", o.optimize ? 1 : 0, "|f", c.fast ? 1 : 0, "|d", c.cache_dir, "|c",
                          c.cxx, "|cpu", c.cpu_features);
  for (const std::string& f : c.extra_flags) key += "|" + f;
  return key;
}

StatusOr<std::shared_ptr<const Executable>> ExecutableCache::GetOrCompile(
    const Graph& g, const CompileOptions& options, bool* hit) {
  if (hit) *hit = true;
  const std::string key = key_fn_ ? key_fn_(g, options) : KeyFor(g, options);
  const std::string text = PrintGraph(g);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto range = entries_.equal_range(key);
    bool collided = false;
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second.text == text) {
        ++stats_.hits;
        return it->second.exe;
      }
      collided = true;
    }
    ++stats_.misses;
    if (collided) ++stats_.collisions;
  }
  if (hit) *hit = false;
  EMBER_ASSIGN_OR_RETURN(Executable exe, Compile(g, options));
  auto shared = std::make_shared<const Executable>(std::move(exe));
  std::lock_guard<std::mutex> lock(mu_);
  auto range = entries_.equal_range(key);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.text == text) {  // another thread stored it first
      if (hit) *hit = true;
      return it->second.exe;
    }
  }
  entries_.emplace(key, Entry{text, shared});
  stats_.entries = static_cast<int64_t>(entries_.size());
  return shared;
}

ExecutableCacheStats ExecutableCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ExecutableCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  stats_ = ExecutableCacheStats{};
}

ExecutableCache& GlobalExecutableCache() {
  static ExecutableCache* cache = new ExecutableCache();
  return *cache;
}

}  // namespace ember
