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

#include <cstdint>
#include <string>

#include "ember/codegen/cpu.h"

namespace ember::codegen {

// Element-operations one parallel chunk holds at least (a phase's `grain` is this over
// the work of one item: its elements, a row's K per pass, a reduce's inputs per output).
// ATen's at::internal::GRAIN_SIZE, the size below which eager's TensorIterator runs an
// op on one thread: at::parallel_for forks only when count > grain, so a phase of at
// most this much work runs on the calling thread, as eager's op of that size does.
// Forking costs the team's wake-up and, on shared cores, a run-queue wait of the other
// thread at the join (docs/performance.md, "A tiny kernel's 7 ms"): 2^14 split the
// 32768-element index concat of nll_loss into two 10 us chunks that waited 6-10 ms.
constexpr int64_t kGrainWork = int64_t{1} << 15;

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
