// Fused optimizer ops (_fused_adam_, _fused_adamw_, _fused_sgd_, _fused_adagrad_, all
// overloads) under functionalization.
//
// torch 2.13's generated Functionalize kernel of an in-place op requires every mutable
// argument to be a functional tensor, and counts a mutable tensor list as functional
// only when it is non-empty. These ops take empty lists in their usual configurations
// (Adam/AdamW's max_exp_avg_sqs without amsgrad, SGD's momentum buffers without
// momentum), so for ember tensors the generated kernel always asserts ("mutating a
// non-functional tensor with a functional tensor is not allowed"). torch.optim runs them
// for PrivateUse1 when asked (`fused=True`), and transformers' Trainer asks by default
// (`optim="adamw_torch_fused"`). The kernel below does what the generated one does for
// functional arguments, treating an empty list as functional: unwrap every tensor, run
// the functional variant (`_fused_adamw` for `_fused_adamw_`) below functionalization,
// and replace_ each written tensor with its new value. Calls without any functional
// tensor keep torch's kernel.
#include <ATen/FunctionalTensorWrapper.h>
#include <torch/library.h>

#include <string>
#include <utility>
#include <vector>

#include "bridge.h"
#include "op_schema.h"

namespace ember_torch {
namespace {

namespace fimpl = at::functionalization::impl;

bool has_functional(const c10::IValue& v) {
  if (v.isTensor()) return fimpl::isFunctionalTensor(v.toTensor());
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) {
      if (fimpl::isFunctionalTensor(t)) return true;
    }
  }
  return false;
}

struct FusedFunctionalizeKernel final : c10::OperatorKernel {
  FusedFunctionalizeKernel(c10::SafeKernelFunction orig, c10::OperatorHandle functional)
      : orig(std::move(orig)), functional(std::move(functional)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const auto& args = op.schema().arguments();
    const size_t n = args.size(), base = stack->size() - n;
    bool any = false;
    for (size_t i = base; i < stack->size(); ++i) any = any || has_functional((*stack)[i]);
    if (!any) {
      orig.callBoxed(op, ks, stack);
      return;
    }
    std::vector<std::vector<at::Tensor>> written;  // the mutable lists, in schema order
    for (size_t i = 0; i < n; ++i) {
      c10::IValue& v = (*stack)[base + i];
      const bool write = args[i].alias_info() && args[i].alias_info()->isWrite();
      if (v.isTensorList()) {
        std::vector<at::Tensor> outer = v.toTensorVector(), inner;
        inner.reserve(outer.size());
        for (const at::Tensor& t : outer) {
          TORCH_CHECK(!write || fimpl::isFunctionalTensor(t), op.schema().name(),
                      ": every tensor of '", args[i].name(),
                      "' must be on the device of the others (got one on ", t.device(), ")");
          inner.push_back(unwrap(t));
        }
        if (write) written.push_back(std::move(outer));
        v = c10::IValue(std::move(inner));
      } else if (v.isTensor()) {
        v = c10::IValue(unwrap(v.toTensor()));
      }
    }
    {
      at::AutoDispatchSkipFunctionalize guard;
      functional.callBoxed(stack);
    }
    const size_t nr = functional.schema().returns().size();
    TORCH_INTERNAL_ASSERT(nr == written.size(), op.schema().name(), ": ", nr, " results for ",
                          written.size(), " mutable lists");
    for (size_t k = 0; k < nr; ++k) {
      std::vector<at::Tensor> out = (*stack)[stack->size() - nr + k].toTensorVector();
      TORCH_INTERNAL_ASSERT(out.size() == written[k].size());
      for (size_t j = 0; j < out.size(); ++j) {
        fimpl::replace_(written[k][j], out[j]);
        fimpl::commit_update(written[k][j]);
        fimpl::sync(written[k][j]);
      }
    }
    torch::jit::drop(*stack, nr);  // the in-place op returns nothing
  }

  c10::SafeKernelFunction orig;
  c10::OperatorHandle functional;
};

// Meta kernel of an in-place fused optimizer op that torch 2.13 has none for
// (`_fused_sgd_`, `_fused_adagrad_` and the `tensor_lr` overloads; `_fused_adam(w)_`
// have Python ones): the op writes its lists in place, so its meta effect is the check
// eager's CPU kernel makes first, every non-empty tensor list as long as the first.
void fused_optimizer_meta(const c10::OperatorHandle& op, c10::DispatchKeySet,
                          torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t n = args.size(), base = stack->size() - n;
  int64_t len = -1;
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = (*stack)[base + i];
    if (!v.isTensorList()) continue;
    const int64_t l = static_cast<int64_t>(v.toTensorList().size());
    if (len < 0) len = l;
    TORCH_CHECK(l == 0 || l == len, op.schema().name(), ": '", args[i].name(), "' has ", l,
                " tensors; expected ", len, " (one per parameter) or none");
  }
  torch::jit::drop(*stack, n);
}

// Every in-place `aten::_fused_*_` op whose written arguments are all tensor lists, with
// its name as registered under `aten` ("_fused_adamw_" or "_fused_sgd_.tensor_lr").
std::vector<std::pair<c10::OperatorHandle, std::string>> fused_list_ops() {
  std::vector<std::pair<c10::OperatorHandle, std::string>> ops;
  auto& d = c10::Dispatcher::singleton();
  for (const auto& name : d.getAllOpNames()) {
    const std::string& op = name.name;
    if (op.rfind("aten::_fused_", 0) != 0 || op.back() != '_') continue;
    auto h = d.findOp(name);
    if (!h || !writes_only_tensor_lists(h->schema())) continue;
    std::string qual = op.substr(6);
    if (!name.overload_name.empty()) qual += "." + name.overload_name;
    ops.emplace_back(*h, std::move(qual));
  }
  return ops;
}

}  // namespace

// Registers fused_optimizer_meta (above) as the Meta kernel of every in-place
// `aten::_fused_*_` op whose written arguments are all tensor lists and that has no Meta
// kernel, so a fused step traces (Meta inference of its functional variant) instead of
// running as an eager fallback.
void register_fused_optimizer_meta() {
  static torch::Library* lib =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
  for (const auto& [h, qual] : fused_list_ops()) {
    if (h.hasKernelForDispatchKey(c10::DispatchKey::Meta) || !h.schema().returns().empty())
      continue;
    lib->impl(qual.c_str(), torch::CppFunction::makeFromBoxedFunction<&fused_optimizer_meta>());
  }
}

// Registers the kernel above on `flib` (aten, Functionalize) for every in-place
// `aten::_fused_*_` op whose written arguments are all tensor lists and that has a
// functional variant of the same overload. Call it before wrapping the mutating ops'
// Functionalize kernels (their wrapper then calls this one).
void register_fused_optimizer_functionalize(torch::Library& flib) {
  for (const auto& [h, qual] : fused_list_ops()) {
    if (!h.hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) continue;
    const auto& name = h.operator_name();
    auto functional = c10::Dispatcher::singleton().findOp(
        c10::OperatorName(name.name.substr(0, name.name.size() - 1), name.overload_name));
    if (!functional) continue;
    flib.impl(
        qual.c_str(),
        torch::CppFunction::makeFromBoxedFunctor(std::make_unique<FusedFunctionalizeKernel>(
            h.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize), *functional)));
  }
}

}  // namespace ember_torch
