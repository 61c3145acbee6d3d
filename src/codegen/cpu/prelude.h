// Private: the fixed C++ text at the top of every generated kernel: the ABI
// types (parallel-for callback) and the scalar helpers whose semantics are
// the reference interpreter's (src/eval/elementwise.cc, element_access.h,
// dtype.cc), written against compiler builtins only, so a kernel includes
// nothing but <stdint.h> and compiles fast.
#pragma once

namespace ember::codegen {

// Bumped whenever the generated-code ABI or the prelude's semantics change
// (part of every cache key).
inline constexpr int kKernelAbiVersion = 1;

const char* KernelPrelude();

}  // namespace ember::codegen
