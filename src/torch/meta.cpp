// Meta inference and its caches (meta.h).
#include "meta.h"

#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "meta_corrections.h"
#include "op_schema.h"

namespace ember_torch {
namespace {

at::Tensor meta_tensor(const TensorMeta& m, bool wrapped) {
  int64_t extent = 1;
  bool empty = false;
  for (size_t i = 0; i < m.sizes.size(); ++i) {
    if (m.sizes[i] == 0) empty = true;
    extent += (m.sizes[i] - 1) * m.strides[i];
  }
  int64_t n = empty ? m.offset : m.offset + extent;
  auto base = at::empty({n}, at::TensorOptions().dtype(m.dtype).device(at::kMeta));
  auto t = base.as_strided(m.sizes, m.strides, m.offset);
  if (wrapped) t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& v) const {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t x : v) {
      h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return h;
  }
};

std::mutex g_meta_mu;
std::unordered_map<std::vector<int64_t>, std::shared_ptr<const MetaResult>, KeyHash> g_meta_cache;

int64_t bits(double d) {
  int64_t x;
  std::memcpy(&x, &d, sizeof(x));
  return x;
}

// Appends a value's contribution to the meta-cache key. Returns false if the value
// cannot be keyed (then the result is not cached).
bool key_plain(const c10::IValue& v, bool exact_floats, std::vector<int64_t>& key) {
  if (v.isNone()) {
    key.push_back(1);
    return true;
  }
  if (v.isInt()) {
    key.push_back(2);
    key.push_back(v.toInt());
    return true;
  }
  if (v.isBool()) {
    key.push_back(3);
    key.push_back(v.toBool());
    return true;
  }
  if (v.isDouble()) {
    key.push_back(4);
    key.push_back(exact_floats ? bits(v.toDouble()) : 0);
    return true;
  }
  if (v.isComplexDouble()) {
    key.push_back(5);
    return true;
  }
  if (v.isIntList() || v.isSymIntList()) {
    auto vec = int_vec(v);
    key.push_back(6);
    key.push_back(vec.size());
    key.insert(key.end(), vec.begin(), vec.end());
    return true;
  }
  if (v.isDoubleList()) {
    auto l = v.toDoubleVector();
    key.push_back(7);
    key.push_back(l.size());
    for (double d : l) key.push_back(bits(d));
    return true;
  }
  if (v.isBoolList()) {
    key.push_back(8);
    for (bool b : v.toBoolList()) key.push_back(b);
    return true;
  }
  if (v.isString()) {
    key.push_back(9);
    key.push_back(std::hash<std::string>()(v.toStringRef()));
    return true;
  }
  if (v.isDevice()) {
    key.push_back(10);
    key.push_back(static_cast<int64_t>(v.toDevice().type()));
    return true;
  }
  if (v.isGenerator()) {
    key.push_back(11);
    return true;
  }
  if (v.isSymInt()) {
    key.push_back(2);
    key.push_back(v.toSymInt().expect_int());
    return true;
  }
  if (v.isList()) {
    auto l = v.toList();
    key.push_back(12);
    key.push_back(l.size());
    for (size_t i = 0; i < l.size(); ++i) {
      if (!key_plain(l.get(i), exact_floats, key)) return false;
    }
    return true;
  }
  return false;
}

void key_tensor(const at::Tensor& t, std::vector<int64_t>& key) {
  if (!t.defined()) {
    key.push_back(20);
    return;
  }
  key.push_back(21);
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(t.dim());
  for (auto s : t.sizes()) key.push_back(s);
  for (auto s : t.strides()) key.push_back(s);
  key.push_back(t.storage_offset());
  key.push_back(t.unsafeGetTensorImpl()->is_wrapped_number());
  key.push_back(t.device().type() == kDeviceType);
}

// Converts an operand tensor for a meta call.
at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined()) return t;
  // CPU scalars (wrapped numbers) mix with device tensors, as in eager; Python meta
  // kernels also require wrapped numbers to be on the CPU.
  if (t.device().type() == at::kCPU && t.dim() == 0) return t;
  return meta_tensor(meta_of(t), t.unsafeGetTensorImpl()->is_wrapped_number());
}

}  // namespace

std::shared_ptr<const MetaResult> infer_meta(const c10::OperatorHandle& op,
                                             const std::vector<c10::IValue>& args,
                                             const std::vector<int>& written) {
  const auto& schema = op.schema();
  // The key is built in a per-thread buffer (kept between calls: a key of a `_foreach_*`
  // op over many tensors is kilobytes, and allocating it per call made malloc consolidate
  // its free lists every op); copied only when stored.
  thread_local std::vector<int64_t> key;
  key.clear();
  key.push_back(reinterpret_cast<int64_t>(&schema));
  key.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(at::get_default_dtype())));
  bool exact_floats = is_factory(args);
  bool cacheable = true;
  for (const auto& a : args) {
    if (a.isTensor()) {
      key_tensor(a.toTensor(), key);
    } else if (a.isTensorList()) {
      key.push_back(30);
      for (const at::Tensor& t : a.toTensorList()) key_tensor(t, key);
    } else if (a.isOptionalTensorList()) {
      key.push_back(31);
      for (const auto& o : a.toOptionalTensorList()) {
        std::optional<at::Tensor> t = o;
        key_tensor(t ? *t : at::Tensor(), key);
      }
    } else if (!key_plain(a, exact_floats, key)) {
      cacheable = false;
      break;
    }
  }
  if (cacheable) {
    std::lock_guard<std::mutex> g(g_meta_mu);
    auto it = g_meta_cache.find(key);
    if (it != g_meta_cache.end()) {
      std::lock_guard<std::mutex> mg(metrics().mu);
      metrics().meta_cache_hits++;
      return it->second;
    }
  }
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().meta_cache_misses++;
  }
  std::vector<int64_t> owned;  // the key to store (the Meta call may build other keys)
  if (cacheable) owned = key;
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    auto k = base_kind(schema.arguments()[i].type());
    if (a.isDevice()) {
      stack.emplace_back(c10::Device(at::kMeta));
    } else if (k == c10::TypeKind::GeneratorType) {
      stack.emplace_back();
    } else {
      stack.push_back(convert_tensors(a, to_meta));
    }
  }
  std::vector<c10::IValue> meta_args = stack;  // keep the written meta tensors
  op.callBoxed(&stack);

  auto res = std::make_shared<MetaResult>();
  for (int w : written) {
    const auto& v = meta_args[w];
    if (v.isTensor()) {
      res->outputs.push_back(meta_of(v.toTensor()));
      res->is_view.push_back(false);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        res->outputs.push_back(meta_of(t));
        res->is_view.push_back(false);
      }
    }
  }
  const auto& rets = schema.returns();
  TORCH_INTERNAL_ASSERT(stack.size() == rets.size());
  correct_meta_returns(schema, args, stack);  // where eager's CPU kernel differs
  for (size_t r = 0; r < rets.size(); ++r) {
    const auto* ai = rets[r].alias_info();
    const auto& v = stack[r];
    if (ai && ai->isWrite()) {
      // Find the written argument with the same alias set.
      int arg = -1;
      for (int w : written) {
        const auto* wa = schema.arguments()[w].alias_info();
        if (wa && wa->beforeSets() == ai->beforeSets()) arg = w;
      }
      TORCH_CHECK(arg >= 0, "ember: cannot match the aliased return of ", schema.name());
      res->ret_shape.push_back(-3);
      res->ret_alias_arg.push_back(arg);
      continue;
    }
    res->ret_alias_arg.push_back(-1);
    bool view = ai != nullptr;
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (!t.defined()) {
        res->ret_shape.push_back(-2);
        continue;
      }
      res->ret_shape.push_back(-1);
      res->outputs.push_back(meta_of(t));
      res->is_view.push_back(view);
    } else if (v.isTensorList()) {
      auto l = v.toTensorList();
      res->ret_shape.push_back(static_cast<int>(l.size()));
      for (const at::Tensor& t : l) {
        res->outputs.push_back(meta_of(t));
        res->is_view.push_back(view);
      }
    } else if (v.isNone()) {
      res->ret_shape.push_back(-2);
    } else {
      // A non-tensor result (a Python number, a bool): needs data.
      TORCH_CHECK_NOT_IMPLEMENTED(false, "ember: ", schema.name(), " returns a non-tensor value");
    }
  }
  if (cacheable) {
    std::lock_guard<std::mutex> g(g_meta_mu);
    g_meta_cache.emplace(std::move(owned), res);
  }
  return res;
}

namespace {

// Functionalization runs every in-place op on meta tensors before converting it to its
// functional form (a shape check the generated Functionalize kernels do for in-place
// ops). Many in-place Meta kernels are Python reference implementations (torch's
// _meta_registrations: add_, mul_, addcmul_, lerp_, ... and the per-tensor loops of
// the _foreach_*_ ops), ~0.1-0.5 ms per call: most of the tracing time of an optimizer
// step. Their outcome depends only on metadata, so the Meta kernel of each in-place op
// is wrapped with a cache of signatures that passed (keyed like the Meta-shape cache:
// tensor dtype/sizes/strides/offset, floats by type); a repeat returns `self` at once.
// Signatures that raise are not cached, so errors are raised every time.
struct InplaceMetaCacheKernel final : c10::OperatorKernel {
  InplaceMetaCacheKernel(c10::SafeKernelFunction k, bool returns_self)
      : orig(std::move(k)), returns_self(returns_self) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    thread_local std::vector<int64_t> key;  // as in infer_meta
    key.clear();
    bool cacheable = true;
    key.push_back(reinterpret_cast<int64_t>(&op.schema()));
    for (size_t i = stack->size() - n; i < stack->size() && cacheable; ++i) {
      const auto& a = (*stack)[i];
      // `float` arguments by value (meta checks such as uniform_'s from <= to read
      // them), Scalars by type (learning rates vary every step).
      const bool exact = op.schema().arguments()[i - (stack->size() - n)].type()->kind() ==
                         c10::TypeKind::FloatType;
      if (a.isTensor()) {
        key_tensor(a.toTensor(), key);
      } else if (a.isTensorList()) {
        key.push_back(30);
        for (const at::Tensor& t : a.toTensorList()) key_tensor(t, key);
      } else {
        cacheable = key_plain(a, exact, key);
      }
    }
    if (cacheable) {
      std::lock_guard<std::mutex> g(mu);
      if (seen.count(key)) {
        c10::IValue self = (*stack)[stack->size() - n];
        stack->erase(stack->end() - n, stack->end());
        if (returns_self) stack->push_back(std::move(self));
        return;
      }
    }
    std::vector<int64_t> owned;
    if (cacheable) owned = key;
    orig.callBoxed(op, ks, stack);
    if (cacheable) {
      std::lock_guard<std::mutex> g(mu);
      seen.insert(std::move(owned));
    }
  }
  c10::SafeKernelFunction orig;
  bool returns_self;
  std::mutex mu;
  std::unordered_set<std::vector<int64_t>, KeyHash> seen;
};

void wrap_inplace_meta_kernels(torch::Library& meta_lib) {
  static const std::unordered_set<std::string> skip = {
      "aten::resize_",         "aten::resize_as_",  "aten::set_",
      "aten::_resize_output_", "aten::_coalesced_", "aten::copy_",
  };
  auto& d = c10::Dispatcher::singleton();
  for (const auto& name : d.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0 || name.name.back() != '_' || skip.count(name.name))
      continue;
    auto h = d.findOp(name);
    if (!h || !h->hasKernelForDispatchKey(c10::DispatchKey::Meta)) continue;
    if (h->hasTag(at::Tag::inplace_view) || h->hasTag(at::Tag::nondeterministic_seeded)) continue;
    const auto& s = h->schema();
    if (s.arguments().empty() || !s.arguments()[0].alias_info() ||
        !s.arguments()[0].alias_info()->isWrite()) {
      continue;
    }
    bool other_writes = false;
    for (size_t i = 1; i < s.arguments().size(); ++i) {
      other_writes = other_writes ||
                     (s.arguments()[i].alias_info() && s.arguments()[i].alias_info()->isWrite());
    }
    if (other_writes) continue;
    bool returns_self = false;
    if (s.returns().size() == 1) {
      const auto* ra = s.returns()[0].alias_info();
      if (!ra || !ra->isWrite() || ra->beforeSets() != s.arguments()[0].alias_info()->beforeSets())
        continue;
      returns_self = true;
    } else if (!s.returns().empty()) {
      continue;
    }
    std::string qual = name.name.substr(6);
    if (!name.overload_name.empty()) qual += "." + name.overload_name;
    meta_lib.impl(qual.c_str(),
                  torch::CppFunction::makeFromBoxedFunctor(std::make_unique<InplaceMetaCacheKernel>(
                      h->getComputedKernelForDispatchKey(c10::DispatchKey::Meta), returns_self)));
  }
}

// The meta reference of functionalization's in-place kernels, cached. torchgen's
// Functionalize kernel of an in-place op first runs the op on meta copies of its
// arguments (catching errors only the in-place form has, e.g. `a.add_(b)` where the
// broadcast result is larger than `a`), then converts it. Making those meta copies (one
// `empty_strided` per tensor, 8-24 for an optimizer's `_foreach_*_`) cost more than
// the rest of functionalization for small tensors. The bridge switches torch's
// reference off (TORCH_DISABLE_FUNCTIONALIZATION_META_REFERENCE, read by torch once per
// process) and wraps every such Functionalize kernel with the same check, run only for
// a signature not seen to pass before (keyed as InplaceMetaCacheKernel); a signature
// that raises is checked again at every call, so the error is eager's each time. Calls
// with symbolic shapes, and random in-place ops, are checked every time. If torch read
// the variable before the bridge set it, both checks run: slower, same behaviour.
constexpr c10::DispatchKeySet kExcludeForMetaReference =
    c10::functorch_transforms_ks |
    c10::DispatchKeySet({c10::DispatchKey::FuncTorchDynamicLayerBackMode,
                         c10::DispatchKey::FuncTorchDynamicLayerFrontMode, c10::DispatchKey::Python,
                         c10::DispatchKey::PreDispatch});

at::Tensor reference_meta(const at::Tensor& t) {  // torchgen's to_meta
  if (!t.defined()) return t;
  return at::empty_strided_symint(
      t.sym_sizes(), t.sym_strides(),
      at::TensorOptions().dtype(t.scalar_type()).layout(t.layout()).device(at::kMeta));
}

bool symbolic(const at::Tensor& t) {
  return t.defined() && t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

struct InplaceMetaReferenceKernel final : c10::OperatorKernel {
  InplaceMetaReferenceKernel(c10::SafeKernelFunction k, bool cache)
      : orig(std::move(k)), cache(cache) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const auto& formals = op.schema().arguments();
    const size_t n = formals.size(), base = stack->size() - n;
    thread_local std::vector<int64_t> key;  // as in infer_meta
    key.clear();
    bool cacheable = cache;
    if (cacheable) {
      key.push_back(reinterpret_cast<int64_t>(&op.schema()));
      for (size_t i = 0; i < n && cacheable; ++i) {
        const auto& a = (*stack)[base + i];
        if (a.isTensor()) {
          cacheable = !symbolic(a.toTensor());
          if (cacheable) key_tensor(a.toTensor(), key);
        } else if (a.isTensorList()) {
          key.push_back(30);
          for (const at::Tensor& t : a.toTensorList()) {
            if (symbolic(t)) {
              cacheable = false;
              break;
            }
            key_tensor(t, key);
          }
        } else {
          cacheable = key_plain(a, formals[i].type()->kind() == c10::TypeKind::FloatType, key);
        }
      }
      if (cacheable) {
        std::lock_guard<std::mutex> g(mu);
        if (passed.count(key)) {
          orig.callBoxed(op, ks, stack);
          return;
        }
      }
    }
    std::vector<int64_t> owned;
    if (cacheable) owned = key;
    torch::jit::Stack meta;
    meta.reserve(n);
    for (size_t i = 0; i < n; ++i)
      meta.push_back(convert_tensors((*stack)[base + i], reference_meta));
    {
      at::AutoDispatchSkipFunctionalize skip;
      c10::impl::ExcludeDispatchKeyGuard guard(kExcludeForMetaReference);
      op.callBoxed(&meta);  // raises the in-place op's own error
    }
    if (cacheable) {
      std::lock_guard<std::mutex> g(mu);
      passed.insert(std::move(owned));
    }
    orig.callBoxed(op, ks, stack);
  }
  c10::SafeKernelFunction orig;
  bool cache;
  std::mutex mu;
  std::unordered_set<std::vector<int64_t>, KeyHash> passed;
};

// Every aten in-place op (torchgen's SchemaKind.inplace: name ending in '_', `self`
// written) with a Functionalize kernel, but for the view ops and those whose
// Functionalize kernel is hand-written or the bridge's own (no meta reference there).
void wrap_inplace_functionalize_kernels(torch::Library& flib) {
  static const std::unordered_set<std::string> skip = {
      "aten::resize_",         "aten::resize_as_",  "aten::set_",
      "aten::_resize_output_", "aten::_coalesced_", "aten::copy_",
  };
  auto& d = c10::Dispatcher::singleton();
  for (const auto& name : d.getAllOpNames()) {
    const std::string& op = name.name;
    if (op.rfind("aten::", 0) != 0 || op.back() != '_' || op.rfind("aten::__", 0) == 0 ||
        op.rfind("aten::_fused_", 0) == 0 || skip.count(op))
      continue;
    auto h = d.findOp(name);
    if (!h || !h->hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) continue;
    if (h->hasTag(at::Tag::inplace_view)) continue;
    const auto& s = h->schema();
    if (s.arguments().empty() || !s.arguments()[0].alias_info() ||
        !s.arguments()[0].alias_info()->isWrite() || s.arguments()[0].kwarg_only())
      continue;
    bool storage = false;
    for (const auto& a : s.arguments())
      storage = storage || a.type()->kind() == c10::TypeKind::StorageType;
    if (storage) continue;
    std::string qual = op.substr(6);
    if (!name.overload_name.empty()) qual += "." + name.overload_name;
    const bool cache = !h->hasTag(at::Tag::nondeterministic_seeded);
    flib.impl(qual.c_str(),
              torch::CppFunction::makeFromBoxedFunctor(std::make_unique<InplaceMetaReferenceKernel>(
                  h->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize), cache)));
  }
}

}  // namespace

void cache_inplace_meta_kernels() {
  static torch::Library* meta_lib =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
  wrap_inplace_meta_kernels(*meta_lib);
  // Before any in-place op is functionalized in this process, or torch keeps its own.
  setenv("TORCH_DISABLE_FUNCTIONALIZATION_META_REFERENCE", "1", /*overwrite=*/0);
  static torch::Library* flib = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  wrap_inplace_functionalize_kernels(*flib);
}

}  // namespace ember_torch
