// torch 2.13 workarounds (torch_workarounds.h). Each section names its entry in
// docs/architecture.md, "Where DESIGN.md §7 proved wrong or incomplete for torch 2.13".
#include "torch_workarounds.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "bridge.h"
#include "op_schema.h"
#include "storage.h"

namespace ember_torch {
namespace {

// ---------------------------------------------------------------- view ops, scatter ops
// Entries "Functionalization takes a view's strides from the backend" and "Inner
// composite kernels can mutate inner views".
//
// Functionalization calls `X_copy` for view ops (reapply_views is off by default) and
// takes the wrapper's sizes/strides/offset from what the backend returns (it computes
// a Meta reference only for XLA/Lazy). We trace the view op `X` itself: the inner
// value is an alias at execution (zero copy) and reports eager's strides and offset.
// Inner tensors are never mutated, so inner aliasing is invisible.
void view_copy_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                      torch::jit::Stack* stack) {
  static std::mutex mu;
  static std::unordered_map<const c10::FunctionSchema*, std::optional<c10::OperatorHandle>> views;
  std::optional<c10::OperatorHandle> view;
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = views.find(&op.schema());
    if (it == views.end()) {
      const auto& name = op.schema().name();
      std::optional<c10::OperatorHandle> h;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, "_copy") == 0) {
        h = c10::Dispatcher::singleton().findOp(
            c10::OperatorName(name.substr(0, name.size() - 5), op.schema().overload_name()));
        if (h && (!h->schema().hasAnyAliasInfo() ||
                  h->schema().arguments().size() != op.schema().arguments().size())) {
          h = std::nullopt;
        }
      }
      it = views.emplace(&op.schema(), h).first;
    }
    view = it->second;
  }
  trace_boxed(view ? *view : op, ks, stack);
}

// The scatter inverses of views (and a few composite copies) are traced whole: their
// composite kernels would run views + in-place writes on inner tensors.
void traced_whole_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                         torch::jit::Stack* stack) {
  trace_boxed(op, ks, stack);
}

// ---------------------------------------------------------------- lift_fresh
// Entry "`torch.tensor(data, device="ember")` returned an unwrapped tensor".
//
// torch.tensor(data, device="ember") copies the data to the device with functionalization
// excluded (torch/csrc/utils/tensor_new.cpp, "[torch.tensor, lift_fresh, and device
// movement]"), so the copy comes back unwrapped, then calls lift_fresh on it, which is
// the identity for a backend: wrap the result here, as the copy would have been.
at::Tensor lift_fresh_kernel(const at::Tensor& self) { return maybe_wrap(self); }

}  // namespace
}  // namespace ember_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace ember_torch;
  m.impl("lift_fresh", TORCH_FN(lift_fresh_kernel));
  // Ops whose composite (CompositeExplicitAutogradNonFunctional) kernels would run
  // views + in-place writes on inner tensors: kept whole, traced as one node each.
  for (const char* name : {
           "view_copy",
           "as_strided_copy",
           "_reshape_alias_copy",
           "expand_copy",
           "slice_copy.Tensor",
           "select_copy.int",
           "transpose_copy.int",
           "permute_copy",
           "unsqueeze_copy",
           "squeeze_copy",
           "squeeze_copy.dim",
           "squeeze_copy.dims",
           "t_copy",
           "alias_copy",
           "diagonal_copy",
           "unfold_copy",
           "split_copy.Tensor",
           "split_with_sizes_copy",
           "unbind_copy.int",
           "detach_copy",
           "view_as_real_copy",
           "view_as_complex_copy",
           "view_copy.dtype",
       }) {
    std::string n(name);
    auto dot = n.find('.');
    auto h = c10::Dispatcher::singleton().findOp(c10::OperatorName(
        "aten::" + n.substr(0, dot), dot == std::string::npos ? "" : n.substr(dot + 1)));
    if (h) m.impl(name, boxed<&view_copy_kernel>());
  }
  for (const char* name : {
           "slice_scatter",
           "select_scatter",
           "diagonal_scatter",
           "as_strided_scatter",
           "_unsafe_view",
           "lift_fresh_copy",
           "narrow_copy",
       }) {
    auto h = c10::Dispatcher::singleton().findOp(c10::OperatorName(
        std::string("aten::") + std::string(name).substr(0, std::string(name).find('.')),
        std::string(name).find('.') == std::string::npos
            ? ""
            : std::string(name).substr(std::string(name).find('.') + 1)));
    if (h) m.impl(name, boxed<&traced_whole_kernel>());
  }
}

namespace ember_torch {
namespace {

// ---------------------------------------------------------------- copy_
// Entry "`cpu_tensor.copy_(ember_tensor)` hits an internal assert".
//
// Functionalization of copy_, as generated by torchgen, plus the case it asserts on for
// every backend but XLA: cpu_tensor.copy_(ember_tensor) is valid code.
at::Tensor& copy_functionalize(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  at::Tensor src_ = src;
  if (at::functionalization::impl::isFunctionalTensor(src)) {
    at::functionalization::impl::sync(src);
    src_ = at::functionalization::impl::from_functional_tensor(src);
  }
  if (!at::functionalization::impl::isFunctionalTensor(self)) {
    at::AutoDispatchSkipFunctionalize guard;
    at::_ops::copy_::call(self, src_, non_blocking);
    return self;
  }
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) at::assert_no_internal_overlap(self);
  release_storage_data(self);  // the write gives it new bytes (storage.h)
  at::functionalization::impl::sync(self);
  at::Tensor self_ = at::functionalization::impl::from_functional_tensor(self);
  at::Tensor tmp;
  {
    at::AutoDispatchSkipFunctionalize guard;
    tmp = at::_ops::copy::call(self_, src_, non_blocking);
  }
  at::functionalization::impl::replace_(self, tmp);
  at::functionalization::impl::commit_update(self);
  at::functionalization::impl::sync(self);
  return self;
}

// ---------------------------------------------------------------- _to_copy
// Entry "`_to_copy`'s Functionalize kernel does not wrap ember→ember results".
//
// Functionalization of _to_copy. torch's kernel wraps the result only for XLA/Lazy
// targets, so the bridge must wrap ember results itself -- here, where it knows that the
// call came through functionalization. Its PrivateUse1 kernel cannot tell: below
// functionalization (e.g. inside a torch.library custom op's implementation, which runs
// on unwrapped tensors) it is called with Functionalize excluded exactly as from here,
// and a wrapped result there would escape as a wrapper inside a wrapper.
at::Tensor to_copy_functionalize(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                 std::optional<bool> pin_memory, bool non_blocking,
                                 std::optional<at::MemoryFormat> memory_format) {
  namespace fimpl = at::functionalization::impl;
  at::Tensor self_ = self;
  if (fimpl::isFunctionalTensor(self)) {
    fimpl::sync(self);
    self_ = fimpl::from_functional_tensor(self);
  }
  at::Tensor out;
  {
    at::AutoDispatchSkipFunctionalize guard;
    out = at::_ops::_to_copy::call(self_, dtype, layout, device, pin_memory, non_blocking,
                                   memory_format);
  }
  if (out.defined() && out.device().type() == kDeviceType && !fimpl::isFunctionalTensor(out)) {
    out = fimpl::to_functional_tensor(out);
  }
  return out;
}

// ---------------------------------------------------------------- unsafe_split
// Entry "`unsafe_split` is a view in eager but not to functionalization".
//
// Eager's unsafe_split (and unsafe_chunk, which calls it) returns split()'s views, each
// with a fresh version counter so that autograd does not track them as views. Its schema
// has no alias annotations, so functionalization treats it as a functional op and each
// piece would get a storage of its own. Here it runs split() on the functional wrapper
// instead: the pieces are functional views of the input (one storage, the input's
// offsets and strides, writes through a piece reach the input), and each gets a new
// version counter as in eager. Autograd above sees the op as unsafe_split, as in eager.
std::vector<at::Tensor> with_fresh_version_counters(std::vector<at::Tensor> pieces) {
  for (at::Tensor& t : pieces) {
    if (!t.is_inference()) t.unsafeGetTensorImpl()->set_version_counter(c10::VariableVersion(0));
  }
  return pieces;
}

std::vector<at::Tensor> unsafe_split_functionalize(const at::Tensor& self, c10::SymInt split_size,
                                                   int64_t dim) {
  return with_fresh_version_counters(at::split_symint(self, std::move(split_size), dim));
}

std::vector<at::Tensor> unsafe_split_with_sizes_functionalize(const at::Tensor& self,
                                                              c10::SymIntArrayRef split_sizes,
                                                              int64_t dim) {
  return with_fresh_version_counters(at::split_with_sizes_symint(self, split_sizes, dim));
}

// ---------------------------------------------------------------- native_batch_norm
// Entry "`native_batch_norm` mutates `running_mean`/`running_var` without alias
// annotations" (its written arguments: meta_corrections.cpp).
//
// native_batch_norm mutates running_mean/running_var in training mode, but its schema
// has no alias annotations, so functionalization would treat it as functional and the
// update would bypass views of the running stats (e.g. a state_dict taken earlier).
// Functionalize it as eager does: the functional variant, then replace_ + commit_update.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_functionalize(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  namespace fimpl = at::functionalization::impl;
  auto un = [](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
    if (!t || !t->defined() || !fimpl::isFunctionalTensor(*t)) return t;
    fimpl::sync(*t);
    return fimpl::from_functional_tensor(*t);
  };
  auto in = un(input).value();
  auto w = un(weight), b = un(bias), rm = un(running_mean), rv = un(running_var);
  bool functional_stats = training && running_mean && running_mean->defined() && running_var &&
                          running_var->defined() && fimpl::isFunctionalTensor(*running_mean) &&
                          fimpl::isFunctionalTensor(*running_var);
  if (!functional_stats) {
    std::tuple<at::Tensor, at::Tensor, at::Tensor> r;
    {
      at::AutoDispatchSkipFunctionalize guard;
      r = at::native_batch_norm(in, w, b, rm, rv, training, momentum, eps);
    }
    return {fimpl::to_functional_tensor(std::get<0>(r)),
            fimpl::to_functional_tensor(std::get<1>(r)),
            fimpl::to_functional_tensor(std::get<2>(r))};
  }
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> r;
  {
    at::AutoDispatchSkipFunctionalize guard;
    r = at::_native_batch_norm_legit_functional(in, w, b, *rm, *rv, training, momentum, eps);
  }
  fimpl::replace_(*running_mean, std::get<3>(r));
  fimpl::commit_update(*running_mean);
  fimpl::sync(*running_mean);
  fimpl::replace_(*running_var, std::get<4>(r));
  fimpl::commit_update(*running_var);
  fimpl::sync(*running_var);
  return {fimpl::to_functional_tensor(std::get<0>(r)), fimpl::to_functional_tensor(std::get<1>(r)),
          fimpl::to_functional_tensor(std::get<2>(r))};
}

// ---------------------------------------------------------------- inference mode
// Entry "`torch.inference_mode()` breaks functionalized views of normal tensors" (the
// inner half: new_inner in lazy_tensor.cpp).
//
// torch.inference_mode(): functionalization creates the wrapper of a view after the
// backend returns, so inside inference mode that wrapper is an inference tensor, and
// ADInplaceOrView's as_view then fails ("Cannot set version_counter for inference
// tensor") when the base is a normal tensor such as a parameter (weight.t() in
// F.linear). Eager makes a view of a normal tensor a normal tensor, in inference mode
// too. This wraps the Functionalize kernel of every view op: when the base is a normal
// functional tensor under inference mode, the original kernel runs with the
// inference-mode flag off (dispatch keys untouched), so the wrapper it creates is a
// normal tensor; as_view then tags it with CreationMeta::INFERENCE_MODE, as in eager.
struct InferenceModeViewKernel final : c10::OperatorKernel {
  explicit InferenceModeViewKernel(c10::SafeKernelFunction k) : orig(std::move(k)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    auto& state = c10::AutogradState::get_tls_state();
    bool lift = false;
    if (state.get_inference_mode()) {
      const auto& self = (*stack)[stack->size() - op.schema().arguments().size()];
      lift = self.isTensor() && self.toTensor().defined() &&
             at::functionalization::impl::isFunctionalTensor(self.toTensor()) &&
             !self.toTensor().is_inference();
    }
    if (!lift) {
      orig.callBoxed(op, ks, stack);
      return;
    }
    struct Restore {
      ~Restore() { c10::AutogradState::get_tls_state().set_inference_mode(true); }
    } restore;
    state.set_inference_mode(false);
    orig.callBoxed(op, ks, stack);
  }
  c10::SafeKernelFunction orig;
};

void wrap_view_functionalize_kernels(torch::Library& flib) {
  auto& d = c10::Dispatcher::singleton();
  for (const auto& name : d.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto h = d.findOp(name);
    if (!h || !h->hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) continue;
    const auto& s = h->schema();
    if (s.arguments().empty() || s.arguments()[0].type()->kind() != c10::TypeKind::TensorType)
      continue;
    bool view = false, writes = false;
    for (const auto& a : s.arguments()) {
      if (a.alias_info() && a.alias_info()->isWrite()) writes = true;
    }
    for (const auto& r : s.returns()) {
      if (r.alias_info()) view = view || !r.alias_info()->isWrite();
    }
    if (!view || writes) continue;
    std::string qual = name.name.substr(6);
    if (!name.overload_name.empty()) qual += "." + name.overload_name;
    flib.impl(qual.c_str(),
              torch::CppFunction::makeFromBoxedFunctor(std::make_unique<InferenceModeViewKernel>(
                  h->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize))));
  }
}

// ---------------------------------------------------------------- internal overlap
// Entry "Functionalization does not check internal overlap".
//
// In-place writes into a tensor in which several elements share one memory location
// (an expanded view: a stride 0 over a size > 1). Eager's TensorIterator raises for
// them; functionalization would instead write back through the view's inverse
// (expand's inverse sums over the broadcast rows) and compute a different value. So
// every mutating op checks its written ember arguments first: ops that raise in eager
// raise eager's own error (at::assert_no_internal_overlap); the few that eager allows
// (fill_, zero_, masked_fill_ and index_put_, the latter two deprecated) raise an
// ember error asking for a clone, rather than computing something else.
bool overlap_exempt_in_eager(const std::string& name) {
  return name == "aten::fill_" || name == "aten::zero_" || name == "aten::masked_fill_" ||
         name == "aten::index_put_" || name == "aten::_index_put_impl_";
}

void check_written_overlap(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  const size_t n = schema.arguments().size();
  const size_t base = stack.size() - n;
  auto check = [&](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kDeviceType) return;
    release_storage_data(t);  // the write gives it new bytes (storage.h)
    if (at::has_internal_overlap(t) != at::MemOverlap::Yes) return;
    TORCH_CHECK(!overlap_exempt_in_eager(schema.name()), "ember: ", schema.name(),
                " writes into a tensor in which more than one element refers to the same memory "
                "location (an expanded view, sizes ",
                t.sizes(), ", strides ", t.strides(),
                "); ember cannot represent that write. clone() the tensor first.");
    at::assert_no_internal_overlap(t);
  };
  for (size_t i = 0; i < n; ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (!ai || !ai->isWrite()) continue;
    const auto& v = stack[base + i];
    if (v.isTensor()) {
      check(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) check(t);
    }
  }
}

struct OverlapCheckKernel final : c10::OperatorKernel {
  explicit OverlapCheckKernel(c10::SafeKernelFunction k) : orig(std::move(k)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    check_written_overlap(op.schema(), *stack);
    orig.callBoxed(op, ks, stack);
  }
  c10::SafeKernelFunction orig;
};

void wrap_mutating_functionalize_kernels(torch::Library& flib) {
  static const std::unordered_set<std::string> skip = {
      "aten::copy_",  // our own kernel (copy_functionalize) checks
      "aten::set_",  "aten::resize_", "aten::resize_as_", "aten::_resize_output_",
  };
  auto& d = c10::Dispatcher::singleton();
  for (const auto& name : d.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0 || skip.count(name.name)) continue;
    auto h = d.findOp(name);
    if (!h || !h->hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) continue;
    if (h->hasTag(at::Tag::inplace_view)) continue;  // metadata-only (t_, squeeze_, ...)
    bool writes = false;
    for (const auto& a : h->schema().arguments()) {
      writes = writes || (a.alias_info() && a.alias_info()->isWrite());
    }
    if (!writes) continue;
    std::string qual = name.name.substr(6);
    if (!name.overload_name.empty()) qual += "." + name.overload_name;
    flib.impl(qual.c_str(),
              torch::CppFunction::makeFromBoxedFunctor(std::make_unique<OverlapCheckKernel>(
                  h->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize))));
  }
}
}  // namespace

// Entry "Fused optimizers assert under functionalization" (fused_optimizers.cpp).
void register_fused_optimizer_functionalize(torch::Library& flib);
void register_fused_optimizer_meta();

void register_functionalize_workarounds() {
  static torch::Library* flib = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  flib->impl("copy_", TORCH_FN(copy_functionalize));
  flib->impl("native_batch_norm", TORCH_FN(native_batch_norm_functionalize));
  flib->impl("_to_copy", TORCH_FN(to_copy_functionalize));
  flib->impl("unsafe_split.Tensor", TORCH_FN(unsafe_split_functionalize));
  flib->impl("unsafe_split_with_sizes", TORCH_FN(unsafe_split_with_sizes_functionalize));
  register_fused_optimizer_functionalize(*flib);  // fused_optimizers.cpp
  register_fused_optimizer_meta();                // fused_optimizers.cpp
  wrap_view_functionalize_kernels(*flib);
  wrap_mutating_functionalize_kernels(*flib);
}

// ---------------------------------------------------------------- composites
// Entry "CompositeExplicitAutogradNonFunctional kernels apply to PrivateUse1".
//
// Functional ops with a CompositeExplicitAutograd(NonFunctional) kernel would run that
// composite at the PrivateUse1 key (structured ops become empty + `.out`): trace them
// whole instead, so each stays one node with a functional schema.
void register_composites_whole() {
  static torch::Library* lib = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static const std::unordered_set<std::string> skip = {
      "aten::empty_like", "aten::new_empty", "aten::new_empty_strided",    "aten::_to_copy",
      "aten::copy",       "aten::to",        "aten::_efficientzerotensor", "aten::resize",
  };
  auto& d = c10::Dispatcher::singleton();
  for (const auto& name : d.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0 || skip.count(name.name)) continue;
    auto h = d.findOp(name);
    if (!h) continue;
    if (h->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    if (!h->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
        !h->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) {
      continue;
    }
    const auto& s = h->schema();
    if (s.hasAnyAliasInfo() || s.returns().empty()) continue;
    bool ok = true;
    bool any_tensor_arg = false;
    for (const auto& r : s.returns()) {
      ok = ok && (r.type()->kind() == c10::TypeKind::TensorType ||
                  (r.type()->kind() == c10::TypeKind::ListType &&
                   r.type()->expectRef<c10::ListType>().getElementType()->kind() ==
                       c10::TypeKind::TensorType));
    }
    for (const auto& a : s.arguments()) {
      auto k = a.type()->kind();
      if (k == c10::TypeKind::TensorType || k == c10::TypeKind::ListType ||
          k == c10::TypeKind::OptionalType) {
        any_tensor_arg = true;
      }
    }
    if (!ok || !any_tensor_arg) continue;
    std::string qual = name.name.substr(6);
    if (!name.overload_name.empty()) qual += "." + name.overload_name;
    lib->impl(qual.c_str(), torch::CppFunction::makeFromBoxedFunction<&trace_boxed>());
  }
}

}  // namespace ember_torch
