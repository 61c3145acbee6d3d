// The graph cache's disk half (docs/architecture.md, "Sync"). Torch-free.
//
// Entries are the canonical token list of a lazy graph, named by its hash and backend,
// under $EMBER_CACHE_DIR (default ~/.cache/ember)/lazy-v1-torchX.Y/. A hit is verified
// against the stored tokens. A hit still lowers the graph and compiles it with the core
// runtime (milliseconds); the expensive part, the native kernels, comes from the code
// generator's own disk cache (ember/codegen/cpu.h), so a second process runs no system
// compiler (metrics: kernel_compiles == 0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember_torch {

// Whether the entry for (hash, backend) exists and holds exactly `tokens`.
bool disk_cache_lookup(uint64_t hash, const char* backend, const std::vector<int64_t>& tokens);
// Writes the entry (temp file + rename: readers never see a partial entry); failures
// are silent (the cache is an optimization).
void disk_cache_store(uint64_t hash, const char* backend, const std::vector<int64_t>& tokens);

}  // namespace ember_torch
