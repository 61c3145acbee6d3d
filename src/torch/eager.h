// Ops run eagerly instead of traced (docs/architecture.md, "Tracing"): the counted
// eager-CPU fallback for calls a graph cannot hold (no Meta kernel, data-dependent
// shapes, non-tensor results, dtypes with partial CPU coverage, a Meta-kernel error),
// and view ops on device data, which run at once as zero-copy aliases.
#pragma once

#include <vector>

#include "bridge.h"

namespace ember_torch {

struct MetaResult;

// Whether the call must run as an eager fallback whatever its Meta kernel says: an
// explicit non-ember device argument, an op whose output shapes depend on data, a
// bool-mask index, or a tensor of a dtype with partial CPU coverage.
bool needs_eager_fallback(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args);

// Syncs what the call's ember operands need, runs `op` on CPU with their device data
// (written operands on copies, rebound afterwards) and pushes the results onto `stack`
// as ember tensors (counted in Metrics::fallbacks). Throws eager's own error;
// c10::NotImplementedError names the call when the CPU kernel is missing too.
void run_eager_fallback(const c10::OperatorHandle& op, std::vector<c10::IValue>& args,
                        torch::jit::Stack* stack);

// A view op (detach, t, view, slice, ...) whose operands all hold device data: runs it
// on the buffers and pushes aliases of them onto `stack` (zero copy, no graph). False,
// with nothing pushed, when the call is not such a view.
bool try_eager_view(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
                    const std::vector<int>& written, const MetaResult& meta,
                    torch::jit::Stack* stack);

}  // namespace ember_torch
