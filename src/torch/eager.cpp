// Ops run eagerly instead of traced (eager.h).
#include "eager.h"

#include <mutex>
#include <unordered_set>

#include "execution_queue.h"
#include "meta.h"
#include "op_schema.h"

namespace ember_torch {
namespace {

// Ops whose output shapes depend on data: always eager-CPU fallbacks.
bool is_data_dependent(const std::string& name) {
  static const std::unordered_set<std::string> ops = {
      "aten::nonzero",
      "aten::nonzero_numpy",
      "aten::argwhere",
      "aten::masked_select",
      "aten::unique",
      "aten::_unique",
      "aten::_unique2",
      "aten::unique_dim",
      "aten::unique_consecutive",
      "aten::unique_dim_consecutive",
      "aten::bincount",
      "aten::_local_scalar_dense",
      "aten::item",
      "aten::equal",
      "aten::allclose",
      "aten::is_nonzero",
      "aten::_assert_async",
      "aten::repeat_interleave",
      "aten::histogram",
      "aten::histc",
      "aten::_ctc_loss",
      "aten::segment_reduce",
  };
  return ops.count(name) > 0;
}

bool has_bool_index(const std::vector<c10::IValue>& args) {
  for (const auto& a : args) {
    if (!a.isOptionalTensorList()) continue;
    for (const auto& o : a.toOptionalTensorList()) {
      std::optional<at::Tensor> t = o;
      if (t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte)) {
        return true;
      }
    }
  }
  return false;
}

// Dtypes with partial CPU kernel coverage (uint16/32/64, float8): ops on them run
// eagerly so an unsupported op fails at the user's line, as in eager.
bool has_limited_dtype(const std::vector<c10::IValue>& args) {
  auto limited = [](const at::Tensor& t) {
    if (!t.defined()) return false;
    switch (t.scalar_type()) {
      case at::kUInt16:
      case at::kUInt32:
      case at::kUInt64:
      case at::kFloat8_e4m3fn:
      case at::kFloat8_e5m2:
      case at::kFloat8_e4m3fnuz:
      case at::kFloat8_e5m2fnuz:
      case at::kFloat8_e8m0fnu:
        return true;
      default:
        return false;
    }
  };
  for (const auto& a : args) {
    if (a.isTensor() && limited(a.toTensor())) return true;
    if (a.isTensorList()) {
      for (const at::Tensor& t : a.toTensorList())
        if (limited(t)) return true;
    }
  }
  return false;
}

void note_fallback(const std::string& name) {
  std::lock_guard<std::mutex> g(metrics().mu);
  metrics().fallbacks[name]++;
}

}  // namespace

bool needs_eager_fallback(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  for (const auto& a : args) {
    if (a.isDevice() && a.toDevice().type() != kDeviceType) return true;
  }
  return is_data_dependent(schema.name()) || has_bool_index(args) || has_limited_dtype(args);
}

void run_eager_fallback(const c10::OperatorHandle& op, std::vector<c10::IValue>& args,
                        torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  note_fallback(op_name(schema));
  std::vector<int> written = written_args(schema, args);
  std::unordered_set<int> wset(written.begin(), written.end());
  // An explicit non-ember device argument (ones_like(x, device="cpu")): results stay there.
  bool foreign_target = false;
  for (const auto& a : args) {
    if (a.isDevice() && a.toDevice().type() != kDeviceType) foreign_target = true;
  }
  bool any_pending = false;
  auto check_pending = [&](const at::Tensor& t) {
    auto* impl = lazy_impl(t);
    if (!impl) return t;
    std::lock_guard<std::mutex> g(state_mutex());
    if (impl->state()->ir) any_pending = true;
    return t;
  };
  for (auto& a : args) convert_tensors(a, check_pending);
  if (any_pending) sync("fallback " + schema.name());

  std::vector<std::pair<at::Tensor, at::Tensor>> written_pairs;  // (inner, cpu copy)
  torch::jit::Stack cpu;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    auto k = base_kind(schema.arguments()[i].type());
    bool w = wset.count(static_cast<int>(i)) > 0;
    if (a.isDevice()) {
      cpu.emplace_back(a.toDevice().type() == kDeviceType ? c10::Device(at::kCPU) : a.toDevice());
    } else if (k == c10::TypeKind::GeneratorType) {
      std::optional<at::Generator> g;
      if (!a.isNone()) g = a.toGenerator();
      auto pr = next_rng_pair(g, 1 << 20);
      cpu.emplace_back(cpu_generator_for(pr.first, pr.second));
    } else {
      cpu.push_back(convert_tensors(a, [&](const at::Tensor& t) -> at::Tensor {
        if (!lazy_impl(t)) return t;
        at::Tensor d = materialize(t);
        if (w) {
          at::Tensor c = alloc_buffer(d.sizes(), d.strides(), d.scalar_type(), d.storage_offset());
          c.copy_(d);
          written_pairs.emplace_back(t, c);
          return c;
        }
        return d;
      }));
    }
  }
  try {
    op.callBoxed(&cpu);
  } catch (const c10::NotImplementedError& e) {
    // Name the op with the shapes and dtypes it was called with.
    throw c10::NotImplementedError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                   "ember: " + describe_args(op, args) +
                                       " cannot run on ember (no Meta kernel, and the "
                                       "CPU fallback failed): " +
                                       e.what_without_backtrace());
  }
  for (auto& wp : written_pairs) {
    auto* impl = lazy_impl(wp.first);
    {
      std::lock_guard<std::mutex> g(state_mutex());
      impl->state()->ir.reset();
      impl->state()->data = wp.second;
      impl->state()->future.reset();
    }
    impl->set_meta(meta_of(wp.second));
  }
  const auto& rets = schema.returns();
  for (size_t r = 0; r < rets.size(); ++r) {
    const auto* ai = rets[r].alias_info();
    if (ai && ai->isWrite()) {
      for (int w : written) {
        const auto* wa = schema.arguments()[w].alias_info();
        if (wa && wa->beforeSets() == ai->beforeSets()) cpu[r] = args[w];
      }
      continue;
    }
    auto to_device = [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined() || t.device().type() != at::kCPU || foreign_target) return t;
      at::Tensor b = alloc_buffer(t.sizes(), t.strides(), t.scalar_type());
      b.copy_(t);
      return maybe_wrap(make_lazy_data(b));
    };
    cpu[r] = convert_tensors(cpu[r], to_device);
  }
  for (auto& v : cpu) stack->push_back(std::move(v));
}

// Pushes an eager view's results in the op's return structure, each output made by
// `next()` (in output order).
template <typename F>
void push_view_results(const MetaResult& meta, F& next, torch::jit::Stack* stack) {
  for (size_t r = 0; r < meta.ret_shape.size(); ++r) {
    int shape = meta.ret_shape[r];
    if (shape == -1) {
      stack->emplace_back(next());
    } else if (shape == -2) {
      stack->emplace_back(at::Tensor());
    } else {
      c10::List<at::Tensor> l;
      for (int j = 0; j < shape; ++j) l.push_back(next());
      stack->emplace_back(std::move(l));
    }
  }
}

// A view op (every output a view, nothing written) on device data runs eagerly, right
// away on the buffers: the result aliases them (zero copy), so reading e.g.
// `p.detach().cpu()` needs no graph and no sync. On an in-flight value it gives view
// futures (execution_queue.h). Returns false when the op must be traced instead.
bool try_eager_view(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
                    const std::vector<int>& written, const MetaResult& meta,
                    torch::jit::Stack* stack) {
  if (!written.empty() || meta.outputs.empty()) return false;
  for (bool v : meta.is_view) {
    if (!v) return false;
  }
  torch::jit::Stack cpu;
  bool ok = true;
  int tensors = 0;
  FuturePtr in_flight;  // the operand's future when its program has not finished
  for (const auto& a : args) {
    if (a.isDevice()) {
      cpu.emplace_back(c10::Device(at::kCPU));
      continue;
    }
    cpu.push_back(convert_tensors(a, [&](const at::Tensor& t) -> at::Tensor {
      auto* impl = lazy_impl(t);
      if (!impl) return t;
      ++tensors;
      std::lock_guard<std::mutex> g(state_mutex());
      auto& st = *impl->state();
      settle_future(st);  // a resolved program's value is device data now
      if (st.future && !st.future->error()) {
        in_flight = st.future;
        return t;
      }
      if (st.ir || st.future || !st.data.defined()) {
        ok = false;
        return t;
      }
      return st.data;
    }));
    if (!ok) return false;
  }
  if (in_flight) {
    // A view of an in-flight value: a view future with the layout the Meta kernel gave
    // (eager's view of the data once it exists), never a traced node, so the next graph
    // is the same whether the base's program has finished or not.
    if (tensors != 1) return false;
    const bool normal = view_base_is_normal(args);
    size_t oi = 0;
    auto wrap = [&]() {
      at::Tensor t =
          make_lazy_future(std::make_shared<FutureData>(meta.outputs[oi++], in_flight), normal);
      lazy_impl(t)->state()->is_view = true;
      return maybe_wrap(t);
    };
    push_view_results(meta, wrap, stack);
    return true;
  }
  op.callBoxed(&cpu);
  std::vector<at::Tensor> results;
  for (const auto& v : cpu) {
    if (v.isTensor()) {
      results.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) results.push_back(t);
    }
  }
  TORCH_INTERNAL_ASSERT(results.size() == meta.outputs.size(), "ember: eager view ",
                        op.schema().name(), " returned ", results.size(), " tensors");
  size_t oi = 0;
  auto wrap = [&]() {
    at::Tensor r = results[oi];
    const TensorMeta& m = meta.outputs[oi];
    ++oi;
    if (!(meta_of(r) == m)) {  // CPU and Meta disagree: keep the reported layout
      at::Tensor b = alloc_buffer(m.sizes, m.strides, m.dtype, m.offset);
      b.copy_(r);
      r = b;
    }
    at::Tensor t = make_lazy_data(r, view_base_is_normal(args));
    lazy_impl(t)->state()->is_view = true;
    return maybe_wrap(t);
  };
  push_view_results(meta, wrap, stack);
  return true;
}

}  // namespace ember_torch
