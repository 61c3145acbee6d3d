// EMBER_DEBUG_DIR: where Ember writes what a bug report attaches (CONTRIBUTING.md,
// "Reporting a bug"): each Compile's IR before and after the passes, each generated
// kernel's C++ source (src/runtime/compile.cc), the bridge's lazy graph text
// (src/torch/graph_cache.cpp). The one place that reads the variable.
#pragma once

#include <string>

namespace ember {

// The folder EMBER_DEBUG_DIR names, created with its parents when missing, or "" when
// the variable is unset or empty, or the folder cannot be created (logged under the
// "runtime" topic of EMBER_LOG). The variable is read on every call (tests set it).
std::string DebugDir();

// Writes `text` to `dir`/`name` atomically (a temporary file in the same folder, then a
// rename: a reader never sees a partial dump); `dir` is what DebugDir() returned, and
// nothing is written when it is empty. A failed write is logged under "runtime" and
// leaves no file behind.
void WriteDebugFile(const std::string& dir, const std::string& name, const std::string& text);

}  // namespace ember
