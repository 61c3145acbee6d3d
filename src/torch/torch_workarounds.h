// Where the bridge replaces or wraps torch 2.13's own kernels, or registers a kernel only
// because torch 2.13 behaves unlike DESIGN.md §7 assumed. Each workaround in
// torch_workarounds.cpp cites its entry in docs/architecture.md ("Where DESIGN.md §7
// proved wrong or incomplete for torch 2.13"); a torch upgrade revisits exactly these.
// The per-op corrections of Meta kernels are a table of their own (meta_corrections.h),
// the fused optimizers' Functionalize kernel a file of its own (fused_optimizers.cpp).
#pragma once

namespace ember_torch {

// The Functionalize-key kernels: copy_, _to_copy and native_batch_norm replaced, every
// view op's and every mutating op's kernel wrapped. Called once by register_kernels,
// with torch's override warnings silenced.
void register_functionalize_workarounds();

// trace_boxed on PrivateUse1 for every functional aten op that has a
// CompositeExplicitAutograd(NonFunctional) kernel. Called once by register_kernels.
void register_composites_whole();

}  // namespace ember_torch
