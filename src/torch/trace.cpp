// Tracing (docs/architecture.md, "Tracing"): the boxed PrivateUse1 kernel that turns
// each op call on ember tensors into a lazy Node whose outputs' metadata comes from Meta
// inference (meta.h), or runs the call eagerly (eager.h).
#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "bridge.h"
#include "eager.h"
#include "lazy_graph.h"
#include "meta.h"
#include "op_schema.h"

namespace ember_torch {

void check_not_forked() {
  TORCH_CHECK(!in_bad_fork(),
              "ember: the ember device cannot be used in a forked child process (e.g. a "
              "DataLoader worker with num_workers > 0); load CPU tensors in workers and move "
              "them to ember in the main process, or use the 'spawn' start method");
}

// ---------------------------------------------------------------- test hook
// trace_pause_after_operands (bridge.h): one tracer stops between reading its operands
// and binding its results.
namespace {
std::atomic<bool> g_pause_armed{false};
std::mutex g_pause_mu;
std::condition_variable g_pause_cv;
bool g_paused = false, g_released = false;

void maybe_pause_after_operands() {
  if (!g_pause_armed.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> l(g_pause_mu);
  if (!g_pause_armed.exchange(false)) return;  // another tracer took it
  g_paused = true;
  g_pause_cv.notify_all();
  g_pause_cv.wait(l, [] { return g_released; });
  g_paused = false;
  g_pause_cv.notify_all();
}
}  // namespace

void trace_pause_after_operands(bool arm) {
  std::unique_lock<std::mutex> l(g_pause_mu);
  if (arm) {
    g_released = false;
    g_pause_armed.store(true);
  } else {
    g_pause_armed.store(false);
    g_released = true;
    g_pause_cv.notify_all();
    g_pause_cv.wait(l, [] { return !g_paused; });
  }
}

void wait_for_trace_pause() {
  std::unique_lock<std::mutex> l(g_pause_mu);
  g_pause_cv.wait(l, [] { return g_paused; });
}

namespace {

// Whether a call of a random op without a Generator argument (tagged
// nondeterministic_seeded) draws random numbers, as eager's kernel for it does: only then
// is it seeded from the device generator. Ops with a `train` (or `training`) flag draw
// nothing with it false (native_dropout, the dropout family, RNNs); attention ops draw
// nothing at a `dropout_p` of 0 (eager's CPU flash attention in an AOT forward).
// native_dropout at p 0 in training does draw (eager's kernel samples a mask of
// probability 1), so its `p` is not consulted. Seeding a call that draws nothing would
// move the generator for no number, and torch.compile(backend="ember") refuses to replay
// a graph that moved it ("the graph draws random numbers").
bool call_draws(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  const auto& formals = schema.arguments();
  for (size_t i = 0; i < formals.size() && i < args.size(); ++i) {
    const std::string& name = formals[i].name();
    const c10::IValue& a = args[i];
    if (a.isBool() && !a.toBool() && (name == "train" || name == "training")) return false;
    if (a.isDouble() && a.toDouble() == 0 && name == "dropout_p") return false;
  }
  return true;
}

// Below a tensor subclass's __torch_dispatch__ (DTensor's local ops, FSDP2's sharded
// parameters) torch excludes every dispatch key above Python, Functionalize included, so
// a mutating op on functional ember tensors arrives here with the wrappers themselves.
// Such a call goes back through functionalization (Functionalize re-enabled for it, all
// else as the caller had it), as the same call from outside the subclass would.
bool redispatch_through_functionalize(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize)) return false;
  const auto& schema = op.schema();
  if (!schema.is_mutable()) return false;
  const size_t n = schema.arguments().size();
  bool functional = false;
  for (size_t i = stack->size() - n; i < stack->size() && !functional; ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      functional = at::functionalization::impl::isFunctionalTensor(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList())
        functional = functional || at::functionalization::impl::isFunctionalTensor(t);
    }
  }
  if (!functional) return false;
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  c10::impl::ForceDispatchKeyGuard guard(tls.included_,
                                         tls.excluded_.remove(c10::DispatchKey::Functionalize));
  op.callBoxed(stack);
  return true;
}

}  // namespace

void trace_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  check_not_forked();
  if (redispatch_through_functionalize(op, stack)) return;
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  std::vector<c10::IValue> args = pop_args(op, stack);

  // Defensive: functional wrappers should have been unwrapped above us.
  for (auto& a : args) a = convert_tensors(a, [](const at::Tensor& t) { return unwrap(t); });

  std::vector<int> written = written_args(schema, args);
  if (needs_eager_fallback(schema, args)) {
    run_eager_fallback(op, args, stack);
    return;
  }
  for (int w : written) {
    auto check = [&](const at::Tensor& t) {
      auto* impl = lazy_impl(t);
      TORCH_CHECK(impl || !t.defined(), "ember: ", schema.name(), " writes into a ", t.device(),
                  " tensor; expected an ember tensor");
      if (impl) {
        std::lock_guard<std::mutex> g(state_mutex());
        TORCH_INTERNAL_ASSERT(!impl->state()->is_view, "ember: internal error: ", schema.name(),
                              " mutates an inner view; register it as a whole op");
      }
      return t;
    };
    convert_tensors(args[w], check);
  }

  std::shared_ptr<const MetaResult> meta;
  try {
    meta = infer_meta(op, args, written);
  } catch (const std::exception& e) {
    static const bool log = std::getenv("EMBER_LOG_FALLBACKS") != nullptr;
    if (log) {
      std::fprintf(stderr, "ember: fallback for %s: %s\n", describe_args(op, args).c_str(),
                   e.what());
    }
    // No Meta kernel, a non-tensor result, or a genuine user error: run eagerly on CPU,
    // which either works (counted fallback) or raises eager's own error.
    run_eager_fallback(op, args, stack);
    return;
  }

  if (try_eager_view(op, args, written, *meta, stack)) return;

  auto node = std::make_shared<Node>();
  node->kind = NodeKind::kOp;
  node->seq = next_node_seq();
  node->op = op;
  node->written = written;
  node->outputs = meta->outputs;
  node->output_is_view = meta->is_view;
  node->ret_shape = meta->ret_shape;
  node->source = current_source();
  node->specs.resize(nargs);
  node->args.resize(nargs);
  uint64_t draws = 0;
  for (const auto& m : meta->outputs) draws += c10::multiply_integers(m.sizes);
  for (size_t i = 0; i < nargs; ++i) {
    auto& a = args[i];
    auto& spec = node->specs[i];
    const auto& type = schema.arguments()[i].type();
    auto k = base_kind(type);
    const bool index_list = a.isOptionalTensorList();  // CPU indices are allowed, as in eager
    auto add_operand = [&](const at::Tensor& t) -> int {
      if (!t.defined()) return -1;
      if (lazy_impl(t)) {
        node->operands.push_back(value_of(t));
      } else {
        TORCH_CHECK(t.device().type() == at::kCPU && (t.dim() == 0 || index_list),
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, ember:0 and ",
                    t.device(), "! (when checking argument '", schema.arguments()[i].name(),
                    "' of ", schema.name(), ")");
        auto h = std::make_shared<Node>();
        h->kind = NodeKind::kHost;
        // Wrapped numbers are temporaries made by the argument parser, never visible to
        // the user: no snapshot needed. Other CPU tensors may be mutated later: copy.
        if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
          h->data = t;
        } else {
          h->data = t.dim() == 0 ? t.clone() : t.clone(at::MemoryFormat::Preserve);
        }
        h->outputs.push_back(meta_of(h->data));
        h->output_is_view.push_back(false);
        node->operands.push_back(Value{h, 0});
      }
      return static_cast<int>(node->operands.size()) - 1;
    };
    if (a.isTensor()) {
      spec.kind = ArgKind::kTensor;
      spec.operands.push_back(add_operand(a.toTensor()));
    } else if (a.isTensorList()) {
      spec.kind = ArgKind::kTensorList;
      for (const at::Tensor& t : a.toTensorList()) spec.operands.push_back(add_operand(t));
    } else if (a.isOptionalTensorList()) {
      spec.kind = ArgKind::kOptTensorList;
      for (const auto& o : a.toOptionalTensorList()) {
        std::optional<at::Tensor> t = o;
        spec.operands.push_back(t ? add_operand(*t) : -1);
      }
    } else if (k == c10::TypeKind::GeneratorType) {
      spec.kind = ArgKind::kGenerator;
      std::optional<at::Generator> g;
      if (!a.isNone()) g = a.toGenerator();
      auto pr = next_rng_pair(g, draws);
      node->rng_seed = pr.first;
      node->rng_offset = pr.second;
    } else if (a.isDevice()) {
      spec.kind = ArgKind::kDevice;
    } else if ((k == c10::TypeKind::NumberType || k == c10::TypeKind::FloatType) && !a.isNone()) {
      spec.kind = ArgKind::kScalar;
      node->args[i] = a;
    } else if (is_list_of(type, c10::TypeKind::NumberType) && !a.isNone()) {
      spec.kind = ArgKind::kScalarList;
      node->args[i] = a;
    } else {
      node->args[i] = a;
    }
  }

  // A random op without a Generator argument draws from the default CPU generator at
  // execution: seed it from the device generator so runs stay reproducible, when this call
  // draws at all (call_draws).
  bool has_gen = false;
  for (const auto& sp : node->specs) has_gen = has_gen || sp.kind == ArgKind::kGenerator;
  if (!has_gen && op.hasTag(at::Tag::nondeterministic_seeded) && call_draws(schema, args)) {
    auto pr = next_rng_pair(std::nullopt, draws);
    node->seeded_default = true;
    node->rng_seed = pr.first;
    node->rng_offset = pr.second;
  }
  node->structure_hash = structure_hash(*node);

  maybe_pause_after_operands();

  // Results.
  std::vector<at::Tensor> outs;
  outs.reserve(meta->outputs.size());
  size_t oi = 0;
  // Written arguments first: rebind their state to the node's outputs.
  for (int w : written) {
    auto rebind = [&](const at::Tensor& t) {
      if (!t.defined()) return t;
      auto* impl = lazy_impl(t);
      const TensorMeta& m = meta->outputs[oi];
      {
        std::lock_guard<std::mutex> g(state_mutex());
        set_pending(impl->state(), Value{node, static_cast<int>(oi)});
        impl->state()->data = at::Tensor();
        impl->state()->error.clear();
        impl->state()->future.reset();
      }
      if (!(impl->meta() == m)) impl->set_meta(m);
      ++oi;
      return t;
    };
    convert_tensors(args[w], rebind);
  }
  const bool normal_base = view_base_is_normal(args);
  auto new_output = [&]() -> at::Tensor {
    const TensorMeta& m = meta->outputs[oi];
    at::Tensor t =
        make_lazy(m, Value{node, static_cast<int>(oi)}, meta->is_view[oi] && normal_base);
    if (meta->is_view[oi]) lazy_impl(t)->state()->is_view = true;
    ++oi;
    return maybe_wrap(t);
  };
  const auto& rets = schema.returns();
  for (size_t r = 0; r < rets.size(); ++r) {
    int shape = meta->ret_shape[r];
    if (shape == -3) {
      stack->push_back(args[meta->ret_alias_arg[r]]);
    } else if (shape == -2) {
      stack->emplace_back(at::Tensor());
    } else if (shape == -1) {
      stack->emplace_back(new_output());
    } else {
      c10::List<at::Tensor> l;
      for (int j = 0; j < shape; ++j) l.push_back(new_output());
      stack->emplace_back(std::move(l));
    }
  }
  {
    std::lock_guard<std::mutex> g(metrics().mu);
    metrics().ops_traced++;
  }
  add_pending_ops(1);
  maybe_sync_early();
}

}  // namespace ember_torch
