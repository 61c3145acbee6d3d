// The version of Ember, e.g. "0.1.0".
//
// Decided in one place: pyproject.toml's [project] version. CMake reads it from there
// and compiles it into src/ir/version.cc only. The same string is ember.__version__
// (Python), the output of `ember-opt --version` and `ember-run --version`, part of
// every kernel disk-cache key (codegen/cpu/kernel.cc) and of the graph disk cache's
// folder name (src/torch/disk_cache.cpp), and is written into EMBER_DEBUG_DIR dumps.
// CONTRIBUTING.md, "Versions and the changelog", says when to change it.
#pragma once

namespace ember {

// A static string, never null (semantic versioning: MAJOR.MINOR.PATCH[suffix]).
const char* Version();

}  // namespace ember
