// The explicit PrivateUse1 kernels (factories, copies between CPU and ember, value
// reads) and the registration of every kernel of the bridge: the boxed fallback
// (trace_boxed) statically, and at import (register_kernels) the kernels that need the
// whole dispatcher loaded: torch_workarounds.cpp's and the in-place Meta cache
// (meta.h).
#include <torch/library.h>

#include <mutex>

#include "bridge.h"
#include "meta.h"
#include "op_schema.h"
#include "torch_workarounds.h"

namespace ember_torch {
namespace {

void check_device_arg(const c10::IValue& d) {
  if (d.isNone()) return;
  auto dev = d.toDevice();
  TORCH_CHECK(dev.type() == kDeviceType && (!dev.has_index() || dev.index() == 0),
              "ember: invalid device ", dev, " (ember has one device, ember:0)");
}

// empty.memory_format(SymInt[] size, *, ScalarType? dtype, Layout? layout, Device? device,
//                     bool? pin_memory, MemoryFormat? memory_format)
void empty_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  check_not_forked();
  auto args = pop_args(op, stack);
  auto size = int_vec(args[0]);
  auto dtype = opt_dtype(args[1]).value_or(c10::typeMetaToScalarType(at::get_default_dtype()));
  check_device_arg(args[3]);
  auto mf = args[5].isNone() ? at::MemoryFormat::Contiguous : args[5].toMemoryFormat();
  for (auto s : size)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  auto m = at::empty(size, at::TensorOptions().dtype(dtype).device(at::kMeta).memory_format(mf));
  auto buf = alloc_buffer(m.sizes(), m.strides(), dtype);
  stack->emplace_back(maybe_wrap(make_lazy_data(buf)));
}

// empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype, Layout? layout,
//               Device? device, bool? pin_memory)
void empty_strided_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet,
                          torch::jit::Stack* stack) {
  check_not_forked();
  auto args = pop_args(op, stack);
  auto size = int_vec(args[0]);
  auto stride = int_vec(args[1]);
  auto dtype = opt_dtype(args[2]).value_or(c10::typeMetaToScalarType(at::get_default_dtype()));
  check_device_arg(args[4]);
  auto m = at::empty_strided(size, stride, at::TensorOptions().dtype(dtype).device(at::kMeta));
  auto buf = alloc_buffer(m.sizes(), m.strides(), dtype);
  stack->emplace_back(maybe_wrap(make_lazy_data(buf)));
}

at::Tensor host_to_device(const at::Tensor& like, const at::Tensor& src) {
  at::Tensor buf = alloc_buffer(like.sizes(), like.strides(), like.scalar_type());
  buf.copy_(src);
  {
    std::lock_guard<std::mutex> g(metrics().mu);
    metrics().transfers_to_device++;
  }
  return buf;
}

void call_traced(const char* name, const char* overload, std::vector<c10::IValue> args,
                 torch::jit::Stack* out) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  for (auto& a : args) out->push_back(std::move(a));
  trace_boxed(op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), out);
}

// _to_copy(Tensor self, *, ScalarType? dtype, Layout? layout, Device? device,
//          bool? pin_memory, bool non_blocking, MemoryFormat? memory_format)
void to_copy_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                    torch::jit::Stack* stack) {
  check_not_forked();
  auto args = pop_args(op, stack);
  at::Tensor self = unwrap(args[0].toTensor());
  std::optional<c10::Device> dev;
  if (!args[3].isNone()) dev = args[3].toDevice();
  if (dev && dev->type() == at::kCPU) {
    TORCH_INTERNAL_ASSERT(lazy_impl(self));
    at::Tensor data = materialize(self);
    auto r = at::_ops::_to_copy::call(
        data, opt_dtype(args[1]), std::nullopt, dev, std::nullopt, false,
        args[6].isNone() ? std::optional<at::MemoryFormat>() : args[6].toMemoryFormat());
    {
      std::lock_guard<std::mutex> g(metrics().mu);
      metrics().transfers_to_host++;
    }
    if (!args[4].isNone() && args[4].toBool()) r = r.pin_memory();
    stack->emplace_back(r);
    return;
  }
  if (dev) check_device_arg(args[3]);
  if (!lazy_impl(self)) {
    // A CPU tensor routed here (e.g. through a composite): copy to the device.
    TORCH_CHECK(self.device().type() == at::kCPU, "ember: cannot copy from ", self.device());
    at::Tensor conv = at::_ops::_to_copy::call(
        self, opt_dtype(args[1]), std::nullopt, std::nullopt, std::nullopt, false,
        args[6].isNone() ? std::optional<at::MemoryFormat>() : args[6].toMemoryFormat());
    stack->emplace_back(maybe_wrap(make_lazy_data(host_to_device(conv, conv))));
    return;
  }
  args[0] = self;
  for (auto& a : args) stack->push_back(std::move(a));
  // The result is wrapped by to_copy_functionalize when the call came through
  // functionalization, and by trace_boxed (maybe_wrap) when from outside it.
  trace_boxed(op, ks, stack);
}

// copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor  (functional)
void copy_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  check_not_forked();
  auto args = pop_args(op, stack);
  at::Tensor self = unwrap(args[0].toTensor());
  at::Tensor src = unwrap(args[1].toTensor());
  if (lazy_impl(self) && !lazy_impl(src)) {
    TORCH_CHECK(src.device().type() == at::kCPU, "ember: cannot copy from ", src.device());
    stack->emplace_back(maybe_wrap(make_lazy_data(host_to_device(self, src))));
    return;
  }
  TORCH_CHECK(lazy_impl(self), "ember: copy into a ", self.device(), " tensor");
  args[0] = self;
  args[1] = src;
  for (auto& a : args) stack->push_back(std::move(a));
  trace_boxed(op, ks, stack);
}

// copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)
void copy__kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  check_not_forked();
  auto args = pop_args(op, stack);
  at::Tensor self = args[0].toTensor();
  at::Tensor src = unwrap(args[1].toTensor());
  if (!lazy_impl(self)) {
    // ember -> host
    TORCH_CHECK(self.device().type() == at::kCPU, "ember: cannot copy into ", self.device());
    self.copy_(materialize(src));
    std::lock_guard<std::mutex> g(metrics().mu);
    metrics().transfers_to_host++;
  } else if (!lazy_impl(src)) {
    TORCH_CHECK(src.device().type() == at::kCPU, "ember: cannot copy from ", src.device());
    at::Tensor n = make_lazy_data(host_to_device(self, src));
    assign_state(self, n);
  } else {
    torch::jit::Stack tmp;
    call_traced("aten::copy", "", {self, src, args[2]}, &tmp);
    assign_state(self, unwrap(tmp.back().toTensor()));
  }
  stack->emplace_back(args[0]);
}

// _copy_from(Tensor self, Tensor dst, bool non_blocking=False) -> Tensor
void copy_from_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                      torch::jit::Stack* stack) {
  check_not_forked();
  auto args = pop_args(op, stack);
  at::Tensor src = unwrap(args[0].toTensor());
  at::Tensor dst = unwrap(args[1].toTensor());
  if (lazy_impl(dst) && !lazy_impl(src)) {
    assign_state(dst, make_lazy_data(host_to_device(dst, src)));
  } else if (!lazy_impl(dst) && lazy_impl(src)) {
    dst.copy_(materialize(src));
    std::lock_guard<std::mutex> g(metrics().mu);
    metrics().transfers_to_host++;
  } else {
    torch::jit::Stack tmp;
    call_traced("aten::copy", "", {dst, src, args[2]}, &tmp);
    assign_state(dst, unwrap(tmp.back().toTensor()));
  }
  stack->emplace_back(args[1]);
}

// _copy_from_and_resize(Tensor self, Tensor dst) -> Tensor
void copy_from_and_resize_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                                 torch::jit::Stack* stack) {
  auto args = pop_args(op, stack);
  at::Tensor src = unwrap(args[0].toTensor());
  at::Tensor dst = unwrap(args[1].toTensor());
  if (!lazy_impl(dst)) {
    at::Tensor d = materialize(src);
    dst.resize_(d.sizes());
    dst.copy_(d);
  } else if (!lazy_impl(src)) {
    assign_state(dst, make_lazy_data(host_to_device(src, src)));
  } else {
    torch::jit::Stack tmp;
    call_traced("aten::clone", "", {src, c10::IValue()}, &tmp);
    assign_state(dst, unwrap(tmp.back().toTensor()));
  }
  stack->emplace_back(args[1]);
}

// _local_scalar_dense(Tensor self) -> Scalar
void local_scalar_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                         torch::jit::Stack* stack) {
  auto args = pop_args(op, stack);
  at::Tensor self = unwrap(args[0].toTensor());
  std::string site = current_source();
  {
    std::lock_guard<std::mutex> g(metrics().mu);
    metrics().value_reads++;
    metrics().value_read_sites[site.empty() ? "<unknown>" : site]++;
  }
  at::Tensor d = materialize(self);
  stack->emplace_back(at::_local_scalar_dense(d));
}

}  // namespace

}  // namespace ember_torch

// Registration ---------------------------------------------------------------

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&ember_torch::trace_boxed>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace ember_torch;
  m.impl("empty.memory_format", boxed<&empty_kernel>());
  m.impl("empty_strided", boxed<&empty_strided_kernel>());
  m.impl("_to_copy", boxed<&to_copy_kernel>());
  m.impl("copy", boxed<&copy_kernel>());
  m.impl("copy_", boxed<&copy__kernel>());
  m.impl("_copy_from", boxed<&copy_from_kernel>());
  m.impl("_copy_from_and_resize", boxed<&copy_from_and_resize_kernel>());
  m.impl("_local_scalar_dense", boxed<&local_scalar_kernel>());
}

namespace ember_torch {
namespace {
// Silences torch's "overriding a previously registered kernel" warnings while the
// bridge replaces Functionalize and Meta kernels on purpose.
struct SilentWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};
}  // namespace

void register_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    {
      SilentWarnings silent;
      c10::WarningUtils::WarningHandlerGuard guard(&silent);
      register_functionalize_workarounds();
      cache_inplace_meta_kernels();
    }
    register_composites_whole();
  });
}

}  // namespace ember_torch
