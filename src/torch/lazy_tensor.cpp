// Lazy tensors (bridge.h, "tensor state"): the registry of live tensor states, the
// LazyTensorImpl that users' FunctionalTensorWrappers wrap, and the few operations on a
// tensor's state (its operand value, its device data, rebinding it).
#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/flat_hash_map.h>
#include <c10/util/hash.h>

#include <algorithm>

#include "bridge.h"
#include "execution_queue.h"
#include "storage.h"

namespace ember_torch {

const char* Node::name() const {
  if (kind == NodeKind::kData) return "data";
  if (kind == NodeKind::kHost) return "host";
  if (kind == NodeKind::kFuture) return "in-flight";
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
// Every live state, newest first: an intrusive list (LazyState::live_prev/live_next), so
// a state's birth and death cost no allocation.
LazyState* g_live = nullptr;
// States made pending since the last gather, in no order (LazyState::pending_slot); a
// state leaves it when it dies, so a gather visits no dead state.
std::vector<LazyState*> g_pending;
void unlist(LazyState* s) {
  LazyState* last = g_pending.back();
  g_pending[s->pending_slot] = last;
  last->pending_slot = s->pending_slot;
  g_pending.pop_back();
  s->pending_slot = LazyState::kUnlisted;
}
std::atomic<uint64_t> g_next_id{0};
uint64_t g_claim_gen = 0;  // claim_pending_states calls (Node::Claim::gen); guarded by g_mu
std::atomic<int64_t> g_pending_ops{0};
std::atomic<uint64_t> g_next_seq{1};  // trace order of op nodes (Node::seq)
}  // namespace

std::mutex& state_mutex() { return g_mu; }

LazyState::~LazyState() {
  std::lock_guard<std::mutex> g(g_mu);
  (live_prev ? live_prev->live_next : g_live) = live_next;
  if (live_next) live_next->live_prev = live_prev;
  if (pending_slot != kUnlisted) unlist(this);
}

StatePtr new_state(std::optional<Value> ir) {
  auto s = std::make_shared<LazyState>(++g_next_id);
  std::lock_guard<std::mutex> g(g_mu);
  s->live_next = g_live;
  if (g_live) g_live->live_prev = s.get();
  g_live = s.get();
  if (ir) set_pending(s, std::move(*ir));
  return s;
}

void set_pending(const StatePtr& s, Value v) {
  s->ir = std::move(v);
  if (s->pending_slot == LazyState::kUnlisted) {
    s->pending_slot = g_pending.size();
    g_pending.push_back(s.get());
  }
}

namespace {
// The listed states alive and pending, in creation order (g_mu held); with `take` the list
// is emptied, else the dead and no longer pending entries leave it. States locked here
// that are not returned go to *dropped, to be released after unlocking (a state's
// destructor takes g_mu).
std::vector<StatePtr> listed_pending(bool take, std::vector<StatePtr>* dropped) {
  std::vector<StatePtr> out;
  out.reserve(g_pending.size());
  for (size_t i = 0; i < g_pending.size();) {
    LazyState* raw = g_pending[i];
    StatePtr s = raw->weak_from_this().lock();  // null: dying (its destructor unlists it)
    const bool pending = s && s->ir;
    if (take) raw->pending_slot = LazyState::kUnlisted;  // the list is cleared below
    if (!take && s && !pending) {
      unlist(raw);  // moves the last entry to i
    } else {
      ++i;
    }
    if (s) (pending ? out : *dropped).push_back(std::move(s));
  }
  if (take) g_pending.clear();
  std::sort(out.begin(), out.end(),
            [](const StatePtr& a, const StatePtr& b) { return a->id < b->id; });
  return out;
}
}  // namespace

std::vector<std::pair<StatePtr, Value>> pending_states() {
  std::vector<std::pair<StatePtr, Value>> out;
  std::vector<StatePtr> listed, dropped;  // released after unlocking
  {
    std::lock_guard<std::mutex> g(g_mu);
    listed = listed_pending(false, &dropped);
    for (const StatePtr& s : listed) out.emplace_back(s, *s->ir);
  }
  return out;
}

std::vector<std::pair<StatePtr, Value>> claim_pending_states(std::vector<FuturePtr>* futures) {
  std::vector<std::pair<StatePtr, Value>> out;
  std::vector<StatePtr> listed, dropped;  // released after unlocking
  std::vector<std::optional<Value>> released;
  // Root value (node, output index) -> its future.
  ska::flat_hash_map<std::pair<const Node*, int>, FuturePtr, c10::hash<std::pair<const Node*, int>>>
      by_value;
  {
    std::lock_guard<std::mutex> g(g_mu);
    const uint64_t gen = ++g_claim_gen;
    listed = listed_pending(true, &dropped);
    by_value.reserve(listed.size());
    for (const StatePtr& s : listed) {
      const Value& v = *s->ir;
      if (const Node::Claim* c = v.node->claim(v.index); c && c->gen != gen) {
        // Claimed by an earlier sync (this state was made from a value read before
        // it): that program computes it.
        s->future = c->future;
      } else {
        // States holding one value share its future: the next graph sees one input
        // whether the value is still in flight or already resolved (one structure).
        FuturePtr& shared = by_value[{v.node.get(), v.index}];
        if (!shared) {
          shared = std::make_shared<FutureData>(v.node->outputs.at(v.index));
          auto& claims = v.node->claims;
          if (claims.size() < v.node->outputs.size()) claims.resize(v.node->outputs.size());
          claims[v.index] = Node::Claim{shared, gen};
        }
        out.emplace_back(s, v);
        futures->push_back(shared);
        s->future = shared;
      }
      released.push_back(std::move(s->ir));
      s->ir.reset();
      s->data = at::Tensor();
    }
  }
  return out;
}

void unclaim_states(const std::vector<std::pair<StatePtr, Value>>& roots,
                    const std::vector<FuturePtr>& futures) {
  std::lock_guard<std::mutex> g(g_mu);
  for (size_t i = 0; i < roots.size(); ++i) {
    const Value& v = roots[i].second;
    if (const Node::Claim* c = v.node->claim(v.index); c && c->future == futures[i]) {
      v.node->claims[v.index] = Node::Claim{};
    }
    LazyState& s = *roots[i].first;
    if (s.future != futures[i]) continue;  // rebound since (an in-place op traced on it)
    s.future.reset();
    set_pending(roots[i].first, roots[i].second);
  }
}

int64_t pending_op_count() { return g_pending_ops.load(); }
void add_pending_ops(int64_t n) {
  if (n < 0) {
    g_pending_ops.store(0);
  } else {
    g_pending_ops.fetch_add(n);
  }
}

uint64_t next_node_seq() { return g_next_seq.fetch_add(1); }

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
  auto s = new_state(std::move(v));
  return new_inner(meta, std::move(s), view_of_normal);
}

at::Tensor make_lazy_data(at::Tensor data, bool view_of_normal) {
  auto s = new_state();
  TensorMeta m = meta_of(data);
  s->data = std::move(data);
  return new_inner(m, std::move(s), view_of_normal);
}

at::Tensor make_lazy_future(FuturePtr f, bool view_of_normal) {
  auto s = new_state();
  TensorMeta m = f->meta;
  {
    std::lock_guard<std::mutex> g(g_mu);
    s->future = std::move(f);
  }
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

// A future resolved with a value becomes the state's data. A failed one stays, so every
// read raises its error with eager's exception type.
void settle_future(LazyState& s) {
  if (!s.future || !s.future->ready()) return;
  std::string err;
  at::Tensor d = s.future->peek(&err);
  if (!err.empty()) return;
  s.data = std::move(d);
  s.future.reset();
}

namespace {

[[noreturn]] void raise_failed(const std::string& error) {
  // An error of ember's own making says why itself (a storage resized to 0: storage.h).
  TORCH_CHECK(error.rfind("ember: ", 0) != 0, error);
  TORCH_CHECK(false,
              "ember: this tensor has no value because the sync that computed "
              "it failed: ",
              error);
}

}  // namespace

Value future_leaf(const FuturePtr& f) {
  auto n = std::make_shared<Node>();
  n->kind = NodeKind::kFuture;
  n->future = f;
  n->outputs.push_back(f->meta);
  n->output_is_view.push_back(false);
  return Value{n, 0};
}

Value value_of(const at::Tensor& inner) {
  auto* impl = lazy_impl(inner);
  TORCH_INTERNAL_ASSERT(impl, "ember: expected an ember tensor");
  std::lock_guard<std::mutex> g(g_mu);
  auto& s = *impl->state();
  if (s.ir) return *s.ir;
  settle_future(s);
  if (s.future) {
    s.future->rethrow_if_failed();  // a failed program's error, eager's type
    return future_leaf(s.future);   // in flight: a leaf the queued program will fill
  }
  if (!s.error.empty()) raise_failed(s.error);
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
  LazyState& s = *impl->state();
  bool pending = false;
  {
    std::lock_guard<std::mutex> g(g_mu);
    pending = s.ir.has_value();
  }
  if (pending) sync_for_read("value read");
  FuturePtr f;
  {
    std::lock_guard<std::mutex> g(g_mu);
    TORCH_CHECK(!s.ir, "ember: sync did not materialize a live tensor");
    settle_future(s);
    if (!s.future) {
      if (!s.error.empty()) raise_failed(s.error);
      return s.data;
    }
    f = s.future;
  }
  // The value's program is queued or running: wait for it alone (its error, with
  // eager's exception type, is raised here).
  at::Tensor d = f->wait();
  std::lock_guard<std::mutex> g(g_mu);
  if (s.future == f) settle_future(s);
  return d;
}

// Rebinds `dst` (an inner tensor) to the current value of `src`.
void assign_state(const at::Tensor& dst, const at::Tensor& src) {
  auto* d = lazy_impl(dst);
  auto* s = lazy_impl(src);
  TORCH_INTERNAL_ASSERT(d && s);
  std::optional<Value> old_ir;
  at::Tensor old_data;
  {
    std::lock_guard<std::mutex> g(g_mu);
    old_ir = std::move(d->state()->ir);
    old_data = std::move(d->state()->data);
    if (s->state()->ir) {
      set_pending(d->state(), *s->state()->ir);
    } else {
      d->state()->ir.reset();
    }
    d->state()->data = s->state()->data;
    d->state()->error = s->state()->error;
    d->state()->future = s->state()->future;
  }
  d->set_meta(s->meta());
}

// ---------------------------------------------------------------- storage (storage.h)
std::vector<StatePtr> states_on_buffer(const c10::StorageImpl* buffer) {
  std::vector<StatePtr> out, others;  // others: released after unlocking (~LazyState locks)
  std::lock_guard<std::mutex> g(g_mu);
  for (LazyState* raw = g_live; raw; raw = raw->live_next) {
    StatePtr s = raw->weak_from_this().lock();  // null: dying (its destructor unlinks it)
    if (!s) continue;
    bool on = s->data.defined() && s->data.storage().unsafeGetStorageImpl() == buffer;
    (on ? out : others).push_back(std::move(s));
  }
  return out;
}

}  // namespace ember_torch
