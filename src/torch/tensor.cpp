// Lazy tensors and tracing: the boxed PrivateUse1 fallback records each op as an IR
// node whose output metadata comes from the op's Meta kernel (cached); ops without a
// Meta kernel or with data-dependent shapes run as counted eager-CPU fallbacks.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/ConvUtils.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "bridge.h"

namespace ember_torch {

std::function<std::string()> g_source_hook;
std::function<void(const std::string&)> g_warn_hook;
std::function<void(const std::string&, const std::string&)> g_log_hook;

Config& config() {
  static Config* c = [] {
    auto* cfg = new Config();
    cfg->backend = backend_from_env();
    return cfg;
  }();
  return *c;
}

std::string current_source() {
  if (!config().record_source.load() || !g_source_hook) return "";
  return g_source_hook();
}

const char* Node::name() const {
  if (kind == NodeKind::kData) return "data";
  if (kind == NodeKind::kHost) return "host";
  return op->schema().name().c_str();
}

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta m;
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.offset = t.storage_offset();
  m.dtype = t.scalar_type();
  return m;
}

// ---------------------------------------------------------------- registry
namespace {
std::mutex g_mu;
std::map<uint64_t, std::weak_ptr<LazyState>> g_live;
std::atomic<uint64_t> g_next_id{0};
std::atomic<int64_t> g_pending_ops{0};
std::atomic<uint64_t> g_next_seq{1};  // trace order of op nodes (Node::seq)
}  // namespace

std::mutex& state_mutex() { return g_mu; }

LazyState::~LazyState() {
  std::lock_guard<std::mutex> g(g_mu);
  g_live.erase(id);
}

StatePtr new_state() {
  auto s = std::make_shared<LazyState>(++g_next_id);
  std::lock_guard<std::mutex> g(g_mu);
  g_live.emplace(s->id, s);
  return s;
}

std::vector<std::pair<StatePtr, Value>> pending_states() {
  std::vector<std::pair<StatePtr, Value>> out;
  std::vector<StatePtr> dropped;
  {
    std::lock_guard<std::mutex> g(g_mu);
    for (auto& kv : g_live) {
      StatePtr s = kv.second.lock();
      if (!s) continue;
      if (s->ir) {
        out.emplace_back(s, *s->ir);
      } else {
        dropped.push_back(std::move(s));  // released after unlocking
      }
    }
  }
  return out;
}

int64_t pending_op_count() { return g_pending_ops.load(); }
void add_pending_ops(int64_t n) {
  if (n < 0) {
    g_pending_ops.store(0);
  } else {
    g_pending_ops.fetch_add(n);
  }
}

// ---------------------------------------------------------------- tensor impl
LazyTensorImpl::LazyTensorImpl(const TensorMeta& meta, StatePtr state)
    : c10::TensorImpl(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                      c10::scalarTypeToTypeMeta(meta.dtype), ember_device()),
      state_(std::move(state)) {
  set_storage_access_should_throw();
  set_sizes_and_strides(meta.sizes, meta.strides, meta.offset);
}

void LazyTensorImpl::set_meta(const TensorMeta& m) {
  bool allow = allow_tensor_metadata_change();
  set_allow_tensor_metadata_change(true);
  set_sizes_and_strides(m.sizes, m.strides, m.offset);
  set_allow_tensor_metadata_change(allow);
}

TensorMeta LazyTensorImpl::meta() const {
  TensorMeta m;
  m.sizes = sizes_and_strides_.sizes_arrayref().vec();
  m.strides = sizes_and_strides_.strides_arrayref().vec();
  m.offset = storage_offset_;
  m.dtype = c10::typeMetaToScalarType(dtype());
  return m;
}

c10::intrusive_ptr<c10::TensorImpl> LazyTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LazyTensorImpl>(meta(), state_);
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> LazyTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LazyTensorImpl>(meta(), state_);
  copy_tensor_metadata(this, impl.get(), std::move(version_counter), allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  return impl;
}

void LazyTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<LazyTensorImpl*>(impl.get());
  TORCH_CHECK(other, "ember: cannot shallow-copy a ", impl->device(),
              " tensor into an ember tensor");
  copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
  state_ = other->state_;
  refresh_numel();
  refresh_contiguous();
}

LazyTensorImpl* lazy_impl(const at::Tensor& t) {
  if (!t.defined()) return nullptr;
  return dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
}

// Inside torch.inference_mode(), new tensors are inference tensors, except views of
// normal tensors, which stay normal (eager's rule). Inner tensors follow the same rule,
// and wrappers inherit it from them. It matters below the Functionalize key too: in
// inference mode, functionalization's fallback lets composite ops (F.linear) decompose
// on inner tensors, so an inner view (weight.t()) passes through ADInplaceOrView,
// whose as_view needs the view of a normal tensor to be normal.
static at::Tensor new_inner(const TensorMeta& meta, StatePtr s, bool view_of_normal) {
  auto& autograd = c10::AutogradState::get_tls_state();
  if (!view_of_normal || !autograd.get_inference_mode()) {
    return at::Tensor(c10::make_intrusive<LazyTensorImpl>(meta, std::move(s)));
  }
  autograd.set_inference_mode(false);
  struct Restore {
    ~Restore() { c10::AutogradState::get_tls_state().set_inference_mode(true); }
  } restore;
  return at::Tensor(c10::make_intrusive<LazyTensorImpl>(meta, std::move(s)));
}

at::Tensor make_lazy(const TensorMeta& meta, Value v, bool view_of_normal) {
  auto s = new_state();
  s->ir = std::move(v);
  return new_inner(meta, std::move(s), view_of_normal);
}

at::Tensor make_lazy_data(at::Tensor data, bool view_of_normal) {
  auto s = new_state();
  TensorMeta m = meta_of(data);
  s->data = std::move(data);
  return new_inner(m, std::move(s), view_of_normal);
}

static bool functionalize_excluded() {
  return c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Functionalize);
}

at::Tensor maybe_wrap(at::Tensor t) {
  if (!t.defined() || functionalize_excluded()) return t;
  if (at::functionalization::impl::isFunctionalTensor(t)) return t;
  return at::functionalization::impl::to_functional_tensor(t);
}

at::Tensor unwrap(const at::Tensor& t) {
  if (t.defined() && at::functionalization::impl::isFunctionalTensor(t)) {
    at::functionalization::impl::sync(t);
    return at::functionalization::impl::from_functional_tensor(t);
  }
  return t;
}

Value value_of(const at::Tensor& inner) {
  auto* impl = lazy_impl(inner);
  TORCH_INTERNAL_ASSERT(impl, "ember: expected an ember tensor");
  std::lock_guard<std::mutex> g(g_mu);
  auto& s = *impl->state();
  if (s.ir) return *s.ir;
  TORCH_CHECK(s.error.empty(),
              "ember: this tensor has no value because the sync that computed "
              "it failed: ",
              s.error);
  TORCH_CHECK(s.data.defined(), "ember: tensor has neither data nor a pending value");
  auto n = std::make_shared<Node>();
  n->kind = NodeKind::kData;
  n->data = s.data;
  n->outputs.push_back(meta_of(s.data));
  n->output_is_view.push_back(false);
  return Value{n, 0};
}

at::Tensor materialize(const at::Tensor& inner) {
  auto* impl = lazy_impl(inner);
  TORCH_INTERNAL_ASSERT(impl, "ember: expected an ember tensor");
  {
    std::lock_guard<std::mutex> g(g_mu);
    TORCH_CHECK(impl->state()->error.empty(),
                "ember: this tensor has no value because the sync "
                "that computed it failed: ",
                impl->state()->error);
    if (!impl->state()->ir) return impl->state()->data;
  }
  sync("value read");
  std::lock_guard<std::mutex> g(g_mu);
  TORCH_CHECK(impl->state()->error.empty(),
              "ember: this tensor has no value because the sync "
              "that computed it failed: ",
              impl->state()->error);
  TORCH_CHECK(!impl->state()->ir, "ember: sync did not materialize a live tensor");
  return impl->state()->data;
}

// Rebinds `dst` (an inner tensor) to the current value of `src`.
static void assign_state(const at::Tensor& dst, const at::Tensor& src) {
  auto* d = lazy_impl(dst);
  auto* s = lazy_impl(src);
  TORCH_INTERNAL_ASSERT(d && s);
  std::optional<Value> old_ir;
  at::Tensor old_data;
  {
    std::lock_guard<std::mutex> g(g_mu);
    old_ir = std::move(d->state()->ir);
    old_data = std::move(d->state()->data);
    d->state()->ir = s->state()->ir;
    d->state()->data = s->state()->data;
    d->state()->error = s->state()->error;
  }
  d->set_meta(s->meta());
}

// ---------------------------------------------------------------- argument helpers
namespace {

c10::TypeKind base_kind(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType) {
    return t->expectRef<c10::OptionalType>().getElementType()->kind();
  }
  return t->kind();
}

bool is_list_of(const c10::TypePtr& t, c10::TypeKind k) {
  const c10::TypePtr* tp = &t;
  c10::TypePtr inner;
  if (t->kind() == c10::TypeKind::OptionalType) {
    inner = t->expectRef<c10::OptionalType>().getElementType();
    tp = &inner;
  }
  if ((*tp)->kind() != c10::TypeKind::ListType) return false;
  auto el = (*tp)->expectRef<c10::ListType>().getElementType();
  if (el->kind() == c10::TypeKind::OptionalType) {
    el = el->expectRef<c10::OptionalType>().getElementType();
  }
  return el->kind() == k;
}

std::vector<int64_t> int_vec(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  auto l = v.toSymIntList();
  for (size_t i = 0; i < l.size(); ++i) out.push_back(l.get(i).expect_int());
  return out;
}

std::optional<at::ScalarType> opt_dtype(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  return v.toScalarType();
}

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

// ---------------------------------------------------------------- meta cache
struct MetaResult {
  std::vector<TensorMeta> outputs;
  std::vector<bool> is_view;
  // Per return: -1 single tensor, -2 undefined tensor / None, >=0 list length,
  // -3 aliases a written argument (returned as that argument).
  std::vector<int> ret_shape;
  std::vector<int> ret_alias_arg;  // for -3: argument index
};

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

c10::IValue convert_tensors(const c10::IValue& v,
                            const std::function<at::Tensor(const at::Tensor&)>& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& o : v.toOptionalTensorList()) {
      std::optional<at::Tensor> t = o;
      if (t && t->defined()) {
        out.push_back(f(*t));
      } else {
        out.push_back(std::nullopt);
      }
    }
    return out;
  }
  return v;
}

bool is_factory(const std::vector<c10::IValue>& args) {
  for (const auto& a : args) {
    if (a.isTensor() || a.isTensorList() || a.isOptionalTensorList()) return false;
  }
  return true;
}

// Batch norm in eval mode: the Meta kernels return save_mean/save_invstd (returns 1
// and 2) of shape [C] where the CPU kernel returns empty tensors; ember follows the CPU
// kernel (with [C] the buffers were left uninitialized).
bool batch_norm_in_eval_mode(const c10::FunctionSchema& schema,
                             const std::vector<c10::IValue>& args) {
  const auto& n = schema.name();
  if (n == "aten::_native_batch_norm_legit_no_training" || n == "aten::_batch_norm_no_update") {
    return true;
  }
  if (n != "aten::native_batch_norm" && n != "aten::_native_batch_norm_legit_functional" &&
      !(n == "aten::_native_batch_norm_legit" && schema.overload_name().empty())) {
    return false;
  }
  return args.size() > 5 && args[5].isBool() && !args[5].toBool();
}

// Convolutions: torch's Meta kernel leaves the output contiguous because a meta tensor
// does not say which backend would run (see meta_conv in torch/_meta_registrations.py);
// eager CPU picks channels_last when the input or the weight is channels_last. Ask
// ATen's own backend choice for a CPU stand-in with the operands' layout (as torch's
// FakeTensor convolution rule does) and restride the outputs to match eager.
// Stand-ins alias a dummy pointer: only metadata is read.
at::Tensor cpu_standin(const at::Tensor& t) {
  alignas(64) static char dummy[64];
  return at::from_blob(dummy, t.sizes(), t.strides(),
                       at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
}

std::vector<int64_t> strides_for(const std::vector<int64_t>& sizes, at::MemoryFormat mf) {
  if (mf == at::MemoryFormat::ChannelsLast && sizes.size() == 4) {
    return c10::get_channels_last_strides_2d(sizes);
  }
  if (mf == at::MemoryFormat::ChannelsLast3d && sizes.size() == 5) {
    return c10::get_channels_last_strides_3d(sizes);
  }
  auto st = c10::contiguous_strides(sizes);
  return std::vector<int64_t>(st.begin(), st.end());
}

std::vector<c10::SymInt> sym_vec(const c10::IValue& v) {
  std::vector<c10::SymInt> out;
  for (int64_t x : int_vec(v)) out.emplace_back(x);
  return out;
}

void apply_conv_layout(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                       MetaResult& res) {
  const auto& name = schema.name();
  bool fwd = name == "aten::convolution" || name == "aten::_convolution";
  bool bwd = name == "aten::convolution_backward";
  if (!fwd && !bwd) return;
  const int base = bwd ? 1 : 0;  // index of `input`
  if (!args[base].isTensor() || !args[base + 1].isTensor()) return;
  const at::Tensor& input = args[base].toTensor();
  const at::Tensor& weight = args[base + 1].toTensor();
  if (!input.defined() || !weight.defined() || (weight.dim() != 4 && weight.dim() != 5)) return;
  at::MemoryFormat mf;
  try {
    std::optional<at::Tensor> bias;
    at::OptionalSymIntArrayRef bias_sizes;
    std::vector<c10::SymInt> bias_sizes_v;
    if (fwd && args[2].isTensor() && args[2].toTensor().defined()) {
      bias = cpu_standin(args[2].toTensor());
    }
    if (bwd && !args[3].isNone()) {
      bias_sizes_v = sym_vec(args[3]);
      bias_sizes = c10::SymIntArrayRef(bias_sizes_v);
    }
    int p = bwd ? 4 : 3;  // stride, padding, dilation, transposed, output_padding, groups
    auto stride = sym_vec(args[p]), padding = sym_vec(args[p + 1]), dilation = sym_vec(args[p + 2]);
    auto output_padding = sym_vec(args[p + 4]);
    at::Tensor in = cpu_standin(input), w = cpu_standin(weight);
    auto backend = at::native::select_conv_backend(in, w, bias, stride, padding, dilation,
                                                   args[p + 3].toBool(), output_padding,
                                                   c10::SymInt(args[p + 5].toInt()), bias_sizes);
    mf = at::native::_determine_backend_memory_format(in, w, backend);
  } catch (const std::exception&) {
    return;  // eager raises its own error at execution
  }
  // Outputs to restride: the result (forward); grad_input and grad_weight (backward).
  size_t oi = 0;
  for (size_t r = 0; r < res.ret_shape.size() && r < 2; ++r) {
    if (res.ret_shape[r] != -1) continue;
    auto& m = res.outputs[oi++];
    if (m.sizes.size() == 4 || m.sizes.size() == 5) {
      m.strides = strides_for(m.sizes, mf);
      m.offset = 0;
    }
    if (fwd) break;
  }
}

// Batch/layer norm on float16/bfloat16 input: the Meta kernels return the statistics
// (save_mean, rstd, updated running stats) in float32, as CUDA does; the CPU kernel
// returns them in the input's dtype unless a parameter (weight, bias, running stats) is
// of another dtype ("mixed type", then float32). The dtype the CPU kernel gives to the
// float32 statistics, or nullopt when Meta already agrees.
std::optional<at::ScalarType> norm_stats_dtype(const c10::FunctionSchema& schema,
                                               const std::vector<c10::IValue>& args) {
  static const std::unordered_set<std::string> ops = {
      "aten::native_batch_norm",
      "aten::_native_batch_norm_legit",
      "aten::_native_batch_norm_legit_functional",
      "aten::_native_batch_norm_legit_no_training",
      "aten::_batch_norm_with_update",
      "aten::_batch_norm_with_update_functional",
      "aten::_batch_norm_no_update",
      "aten::native_layer_norm",
  };
  if (!ops.count(schema.name()) || args.empty() || !args[0].isTensor()) return std::nullopt;
  const auto in = args[0].toTensor().scalar_type();
  if (in != at::kHalf && in != at::kBFloat16) return std::nullopt;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].isTensor() && args[i].toTensor().defined() &&
        args[i].toTensor().scalar_type() != in) {
      return std::nullopt;  // mixed type: float32 statistics, as Meta says
    }
  }
  return in;
}

// _embedding_bag / _embedding_bag_forward_only: the CPU kernel (EmbeddingBag.cpp) leaves
// offset2bag (return 1) empty on its "fast path" (mode sum, float/half/bfloat16 weight
// with unit inner stride, unit-stride per_sample_weights, no padding_idx), sizes bag_size
// (return 2) by the number of bags (one less than offsets with include_last_offset, except
// in _embedding_bag_forward_only's mode sum), and
// gives max_indices (return 3) bag_size's shape unless mode is max; the Meta kernel sizes
// offset2bag [num_indices], bag_size [len(offsets)] and max_indices [0]. The CPU length
// of return `r`, or nullopt where Meta agrees.
std::optional<int64_t> embedding_bag_cpu_numel(const c10::FunctionSchema& schema,
                                               const std::vector<c10::IValue>& args, size_t r) {
  const auto& n = schema.name();
  if ((n != "aten::_embedding_bag" && n != "aten::_embedding_bag_forward_only") ||
      args.size() < 9 || r < 1 || r > 3 || !args[0].isTensor() || !args[4].isInt()) {
    return std::nullopt;
  }
  const int64_t mode = args[4].toInt();
  if (r == 2 || r == 3) {
    if ((r == 3 && mode == 2) || !args[2].isTensor() || args[2].toTensor().dim() != 1) {
      return std::nullopt;
    }
    // _embedding_bag_forward_only in mode sum keeps one entry per offset.
    const bool last = args[7].isBool() && args[7].toBool() &&
                      !(mode == 0 && n == "aten::_embedding_bag_forward_only");
    return std::max<int64_t>(args[2].toTensor().size(0) - (last ? 1 : 0), 0);
  }
  const auto& w = args[0].toTensor();
  const auto t = w.scalar_type();
  bool fast = mode == 0 && (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) &&
              w.dim() == 2 && w.stride(1) == 1 && args[8].isInt() && args[8].toInt() < 0;
  if (fast && args[6].isTensor() && args[6].toTensor().defined()) {
    fast = args[6].toTensor().stride(0) == 1;
  }
  if (!fast) return std::nullopt;
  return 0;
}

// Runs the Meta kernel (cached). Throws whatever the Meta kernel throws.
std::shared_ptr<const MetaResult> infer_meta(const c10::OperatorHandle& op,
                                             const std::vector<c10::IValue>& args,
                                             const std::vector<int>& written) {
  const auto& schema = op.schema();
  std::vector<int64_t> key;
  key.reserve(64);
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
  // Backward ops with an output_mask: Meta kernels may return defined tensors where the
  // CPU kernel returns undefined ones; follow the mask.
  std::vector<bool> mask;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (schema.arguments()[i].name() == "output_mask" && args[i].isBoolList()) {
      for (bool b : args[i].toBoolList()) mask.push_back(b);
    }
  }
  const bool bn_eval = batch_norm_in_eval_mode(schema, args);
  const auto stats_dtype = norm_stats_dtype(schema, args);
  for (size_t r = 0; r < rets.size(); ++r) {
    const auto* ai = rets[r].alias_info();
    auto& v = stack[r];
    if (r < mask.size() && !mask[r] && v.isTensor()) {
      res->ret_alias_arg.push_back(-1);
      res->ret_shape.push_back(-2);
      continue;
    }
    if (bn_eval && (r == 1 || r == 2) && v.isTensor()) {
      v = at::empty({0}, v.toTensor().options());  // save_mean/save_invstd, as on CPU
    }
    if (auto n = embedding_bag_cpu_numel(schema, args, r)) {
      v = at::empty({*n}, v.toTensor().options());
    }
    if (stats_dtype && r >= 1 && v.isTensor() && v.toTensor().scalar_type() == at::kFloat) {
      const auto& t = v.toTensor();
      v = at::empty_strided(t.sizes(), t.strides(), t.options().dtype(*stats_dtype));
    }
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
  apply_conv_layout(schema, args, *res);
  if (cacheable) {
    std::lock_guard<std::mutex> g(g_meta_mu);
    g_meta_cache.emplace(std::move(key), res);
  }
  return res;
}

std::string describe_args(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  std::ostringstream os;
  os << op.schema().name();
  if (!op.schema().overload_name().empty()) os << "." << op.schema().overload_name();
  os << "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) os << ", ";
    const auto& a = args[i];
    if (a.isTensor()) {
      const auto& t = a.toTensor();
      if (t.defined()) {
        os << t.scalar_type() << t.sizes() << "@" << t.device();
      } else {
        os << "None";
      }
    } else if (a.isTensorList()) {
      os << "[" << a.toTensorList().size() << " tensors]";
    } else {
      os << a.tagKind();
    }
  }
  os << ")";
  return os.str();
}

std::vector<int> written_args(const c10::FunctionSchema& schema,
                              const std::vector<c10::IValue>& args) {
  std::vector<int> w;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (ai && ai->isWrite()) w.push_back(static_cast<int>(i));
  }
  // native_batch_norm updates running_mean/running_var (args 3, 4) in training mode
  // although its schema does not say so: treat them as written.
  if (schema.name() == "aten::native_batch_norm" && args.size() >= 6 && args[5].isBool() &&
      args[5].toBool()) {
    for (int i : {3, 4}) {
      if (args[i].isTensor() && args[i].toTensor().defined()) w.push_back(i);
    }
  }
  return w;
}

void note_fallback(const std::string& name) {
  std::lock_guard<std::mutex> g(metrics().mu);
  metrics().fallbacks[name]++;
}

at::Generator cpu_generator_for(uint64_t seed, uint64_t offset) {
  uint64_t s = seed ^ (offset * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
  return at::make_generator<at::CPUGeneratorImpl>(s);
}

// ---------------------------------------------------------------- eager fallback
// Runs `op` on CPU with the (synced) data of its ember operands and wraps the results.
void run_eager_fallback(const c10::OperatorHandle& op, std::vector<c10::IValue>& args,
                        torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  note_fallback(schema.operator_name().name +
                (schema.overload_name().empty() ? "" : "." + schema.overload_name()));
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

// Whether the base of a view op (its first tensor argument) is a normal tensor.
bool view_base_is_normal(const std::vector<c10::IValue>& args) {
  for (const auto& a : args) {
    if (a.isTensor()) return a.toTensor().defined() && !a.toTensor().is_inference();
    if (a.isTensorList()) {
      auto l = a.toTensorList();
      return l.size() > 0 && !l.get(0).is_inference();
    }
  }
  return false;
}

// A view op (detach, t, view, slice, ...) whose operands all hold device data runs
// right away on the buffers: the result aliases them (zero copy), so reading e.g.
// `p.detach().cpu()` needs no graph and no sync.
bool try_eager_view(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
                    const std::vector<int>& written, const MetaResult& meta,
                    torch::jit::Stack* stack) {
  if (!written.empty() || meta.outputs.empty()) return false;
  for (bool v : meta.is_view) {
    if (!v) return false;
  }
  torch::jit::Stack cpu;
  bool ok = true;
  for (const auto& a : args) {
    if (a.isDevice()) {
      cpu.emplace_back(c10::Device(at::kCPU));
      continue;
    }
    cpu.push_back(convert_tensors(a, [&](const at::Tensor& t) -> at::Tensor {
      auto* impl = lazy_impl(t);
      if (!impl) return t;
      std::lock_guard<std::mutex> g(state_mutex());
      const auto& st = *impl->state();
      if (st.ir || !st.data.defined()) {
        ok = false;
        return t;
      }
      return st.data;
    }));
    if (!ok) return false;
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
  for (size_t r = 0; r < meta.ret_shape.size(); ++r) {
    int shape = meta.ret_shape[r];
    if (shape == -1) {
      stack->emplace_back(wrap());
    } else if (shape == -2) {
      stack->emplace_back(at::Tensor());
    } else {
      c10::List<at::Tensor> l;
      for (int j = 0; j < shape; ++j) l.push_back(wrap());
      stack->emplace_back(std::move(l));
    }
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------- tracing
void check_not_forked() {
  TORCH_CHECK(!in_bad_fork(),
              "ember: the ember device cannot be used in a forked child process (e.g. a "
              "DataLoader worker with num_workers > 0); load CPU tensors in workers and move "
              "them to ember in the main process, or use the 'spawn' start method");
}

void trace_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  check_not_forked();
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - nargs),
                                std::make_move_iterator(stack->end()));
  stack->erase(stack->end() - nargs, stack->end());

  // Defensive: functional wrappers should have been unwrapped above us.
  for (auto& a : args) a = convert_tensors(a, [](const at::Tensor& t) { return unwrap(t); });

  std::vector<int> written = written_args(schema, args);
  bool foreign_device = false;
  for (const auto& a : args) {
    if (a.isDevice() && a.toDevice().type() != kDeviceType) foreign_device = true;
  }
  if (foreign_device || is_data_dependent(schema.name()) || has_bool_index(args) ||
      has_limited_dtype(args)) {
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
  node->seq = g_next_seq.fetch_add(1);
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
  // execution: seed it from the device generator so runs stay reproducible.
  bool has_gen = false;
  for (const auto& sp : node->specs) has_gen = has_gen || sp.kind == ArgKind::kGenerator;
  if (!has_gen && op.hasTag(at::Tag::nondeterministic_seeded)) {
    auto pr = next_rng_pair(std::nullopt, draws);
    node->seeded_default = true;
    node->rng_seed = pr.first;
    node->rng_offset = pr.second;
  }

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
        impl->state()->ir = Value{node, static_cast<int>(oi)};
        impl->state()->data = at::Tensor();
        impl->state()->error.clear();
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

// ---------------------------------------------------------------- explicit kernels
namespace {

std::vector<c10::IValue> pop_args(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - n),
                                std::make_move_iterator(stack->end()));
  stack->erase(stack->end() - n, stack->end());
  return args;
}

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

void fallback_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                     torch::jit::Stack* stack) {
  trace_boxed(op, ks, stack);
}

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

}  // namespace

}  // namespace ember_torch

// Registration ---------------------------------------------------------------

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&ember_torch::trace_boxed>());
}

namespace ember_torch {
namespace {
template <void (*F)(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack*)>
torch::CppFunction boxed() {
  return torch::CppFunction::makeFromBoxedFunction<F>();
}

// torch.tensor(data, device="ember") copies the data to the device with functionalization
// excluded (torch/csrc/utils/tensor_new.cpp, "[torch.tensor, lift_fresh, and device
// movement]"), so the copy comes back unwrapped, then calls lift_fresh on it, which is
// the identity for a backend: wrap the result here, as the copy would have been.
at::Tensor lift_fresh_kernel(const at::Tensor& self) { return maybe_wrap(self); }
}  // namespace
}  // namespace ember_torch

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace ember_torch;
  m.impl("empty.memory_format", boxed<&empty_kernel>());
  m.impl("empty_strided", boxed<&empty_strided_kernel>());
  m.impl("_to_copy", boxed<&to_copy_kernel>());
  m.impl("lift_fresh", TORCH_FN(lift_fresh_kernel));
  m.impl("copy", boxed<&copy_kernel>());
  m.impl("copy_", boxed<&copy__kernel>());
  m.impl("_copy_from", boxed<&copy_from_kernel>());
  m.impl("_copy_from_and_resize", boxed<&copy_from_and_resize_kernel>());
  m.impl("_local_scalar_dense", boxed<&local_scalar_kernel>());
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
    if (h) m.impl(name, boxed<&fallback_kernel>());
  }
}

namespace ember_torch {

namespace {
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

struct SilentWarnings : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

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
    std::vector<int64_t> key;
    key.reserve(32);
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
    orig.callBoxed(op, ks, stack);
    if (cacheable) {
      std::lock_guard<std::mutex> g(mu);
      seen.insert(std::move(key));
    }
  }
  c10::SafeKernelFunction orig;
  bool returns_self;
  std::mutex mu;
  std::unordered_set<std::vector<int64_t>, KeyHash> seen;
};

void cache_inplace_meta_kernels(torch::Library& meta_lib) {
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
}  // namespace

void register_fused_optimizer_functionalize(torch::Library& flib);  // fused_optimizers.cpp

// Functional ops with a CompositeExplicitAutograd(NonFunctional) kernel would run that
// composite at the PrivateUse1 key (structured ops become empty + `.out`): trace them
// whole instead, so each stays one node with a functional schema.
void register_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    static torch::Library* lib = new torch::Library(
        torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    static const std::unordered_set<std::string> skip = {
        "aten::empty_like", "aten::new_empty", "aten::new_empty_strided",    "aten::_to_copy",
        "aten::copy",       "aten::to",        "aten::_efficientzerotensor", "aten::resize",
    };
    {
      // Replaces torch's Functionalize kernel for copy_ (silencing the override warning).
      static torch::Library* flib = new torch::Library(
          torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
      SilentWarnings silent;
      c10::WarningUtils::WarningHandlerGuard guard(&silent);
      flib->impl("copy_", TORCH_FN(copy_functionalize));
      flib->impl("native_batch_norm", TORCH_FN(native_batch_norm_functionalize));
      flib->impl("_to_copy", TORCH_FN(to_copy_functionalize));
      register_fused_optimizer_functionalize(*flib);  // fused_optimizers.cpp
      wrap_view_functionalize_kernels(*flib);
      wrap_mutating_functionalize_kernels(*flib);
      static torch::Library* meta_lib = new torch::Library(
          torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
      cache_inplace_meta_kernels(*meta_lib);
    }
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
  });
}

}  // namespace ember_torch
