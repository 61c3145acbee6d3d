// Private: the string-concatenation emitter, Graph -> C++ source of one
// fused kernel, kept behind EMBER_CODEGEN_LOOP_IR=0 while the loop-IR
// emitter (kernel_planner.h, the default) replaces it; and the helpers both
// share (support check, kernel name, ABI function). The public entry point
// is EmitKernelSource in include/ember/codegen/cpu.h.
//
// Generated layout (docs/codegen.md has a real example):
//   header comment (the subgraph as PrintGraph lines), the prelude
//   (prelude.h), constant tables, one `ember_phase_<k>` body per materialized
//   value (each reduce, then each graph output), and the exported entry
//     extern "C" int ember_fused_<ops>_<n>(const void* const* inputs,
//         void* const* outputs, void* pf_ctx, ember_parallel_for_fn pf);
//   which runs the phases in order through the parallel-for callback and
//   returns 0, k > 0 for data error k (KernelSource::error_messages[k-1]) or
//   -1 when a temporary buffer cannot be allocated.
#pragma once

#include <string>

#include "ember/codegen/cpu.h"

namespace ember::codegen {

// EmitKernelSource through the string emitter (EMBER_CODEGEN_LOOP_IR=0).
StatusOr<KernelSource> EmitKernelSourceLegacy(const Graph& g, int kernel_index, bool vector_math);

// OK if CompileKernel supports every node of `g`; Unimplemented naming the
// first node it does not.
Status CheckKernelSupported(const Graph& g);

// The exported entry's name: `ember_` + KernelName(g, kernel_index)
// (ember/ir/kernel_name.h), e.g. `ember_fused_mul_add_exp_reduce_0`.
std::string KernelEntryName(const Graph& g, int kernel_index);

// `EMBER_EXPORT int ember_kernel_abi_version(void) { return 1; }`: once per
// shared object (a standalone kernel's, or a batch's, kernel.cc).
std::string AbiVersionFunction();

}  // namespace ember::codegen
