// Captured programs (capture.h): rerun one sync's compiled graph on new host tensors.
#include "capture.h"

#include <c10/util/flat_hash_map.h>

#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include "binding.h"
#include "execution_queue.h"
#include "graph_cache.h"
#include "lowered_program.h"

namespace ember_torch {
namespace {

const c10::StorageImpl* storage_of(const at::Tensor& t) {
  return t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
}

// A tensor over `base`'s storage with the given geometry (no autograd relation).
at::Tensor view_of(const at::Tensor& base, const std::vector<int64_t>& sizes,
                   const std::vector<int64_t>& strides, int64_t offset) {
  return tensor_over(base.storage(), offset, sizes, strides, base.scalar_type());
}

bool draws_random(const Node& n) {
  if (n.seeded_default) return true;
  for (const auto& sp : n.specs) {
    if (sp.kind == ArgKind::kGenerator) return true;
  }
  return false;
}

// The deleter of the default CPU allocator's memory (what torch.empty allocates).
c10::DeleterFnPtr cpu_deleter() {
  static const c10::DeleterFnPtr d = at::empty({1}).storage().data_ptr().get_deleter();
  return d;
}

// Moves `src`'s buffer (a run's output that only the caller holds) into `dst`, the FX
// input it is the new value of, when nothing can observe the difference from a copy:
// `dst` is a parameter (requires grad: numpy() refuses it, so no array views its memory
// without a second tensor on its storage) that covers its whole storage, which no other
// tensor shares (`storage_uses`: its storage's use count when only `dst` and a Python
// storage object nobody holds refer to it; 0: never), allocated by the CPU allocator or
// a runtime buffer nothing else holds. Returns false (nothing changed) otherwise.
bool move_buffer(const at::Tensor& dst, const at::Tensor& src, size_t storage_uses) {
  if (!dst.requires_grad() || dst.is_inference() || dst.device().type() != at::kCPU ||
      dst.layout() != at::kStrided || dst.scalar_type() != src.scalar_type() ||
      dst.sizes() != src.sizes() || dst.storage_offset() != 0 || src.storage_offset() != 0 ||
      !dst.is_contiguous() || !src.is_contiguous() || !dst.has_storage()) {
    return false;
  }
  const size_t bytes = static_cast<size_t>(dst.numel()) * dst.element_size();

  const c10::Storage& ds = dst.storage();
  const c10::Storage& ss = src.storage();
  if (ds.nbytes() != bytes || ss.nbytes() != bytes || ds.use_count() != storage_uses ||
      ss.use_count() != 1 || src.use_count() != 1 || !is_exclusive_runtime_buffer(src)) {
    return false;
  }
  if (ds.data_ptr().get_deleter() != cpu_deleter() && !is_exclusive_runtime_buffer(dst)) {
    return false;  // external memory (from_blob, NumPy, shared memory, mmap): write it
  }
  c10::StorageImpl* d = ds.unsafeGetStorageImpl();
  c10::StorageImpl* s = ss.unsafeGetStorageImpl();
  c10::DataPtr value = s->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
  c10::DataPtr old = d->set_data_ptr(std::move(value));
  s->set_data_ptr_noswap(std::move(old));  // freed with `src`
  dst.unsafeGetTensorImpl()->bump_version();
  return true;
}

}  // namespace

size_t exclusive_storage_uses(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return 0;
  const c10::Storage& st = t.storage();
  const size_t n = st.use_count();
  if (n == 1) return 1;
  // PyObject preservation (c10/util/intrusive_ptr.h): a Python storage object holds one
  // reference; it is nobody's when only that reference keeps it alive.
  const auto* slot = st.unsafeGetStorageImpl()->pyobj_slot();
  if (n == 2 && slot->load_pyobj() && slot->has_unique_reference()) return 2;
  return 0;
}

std::vector<uint64_t> pending_state_ids() {
  std::vector<uint64_t> ids;
  for (const auto& p : pending_states()) ids.push_back(p.first->id);
  return ids;
}

std::shared_ptr<CapturedProgram> CapturedProgram::capture(const std::vector<at::Tensor>& inputs,
                                                          const std::vector<at::Tensor>& outputs,
                                                          int64_t generation,
                                                          const std::vector<uint64_t>& foreign,
                                                          const std::string& reason,
                                                          std::string* why) {
  auto refuse = [&](const std::string& w) {
    if (why) *why = w;
    return std::shared_ptr<CapturedProgram>();
  };
  // The states the FX graph's outputs hold.
  std::vector<StatePtr> out_states;
  for (const auto& o : outputs) {
    auto* impl = lazy_impl(o);
    TORCH_CHECK(impl, "ember: capture: an output is not an ember tensor");
    out_states.push_back(impl->state());
  }
  bool only_ours = sync_generation() == generation;
  std::string refusal =
      only_ours ? "" : "a sync ran while the graph was traced (a value read or an eager fallback)";
  if (only_ours) {
    // Work pending from before the trace (the user's own lazy tensors) would be rerun by
    // every replay; states the trace made besides the outputs (bases of view outputs)
    // are part of the graph's work.
    std::unordered_set<uint64_t> before(foreign.begin(), foreign.end());
    for (const auto& p : pending_states()) {
      if (before.count(p.first->id)) {
        only_ours = false;
        refusal = "other ember tensors had pending work";
        break;
      }
    }
  }
  SyncCapture sc;
  sync_and_capture(reason, only_ours ? &sc : nullptr);
  if (!only_ours) return refuse(refusal);
  if (sc.roots.empty()) return refuse("nothing was pending (the outputs are views of the inputs)");
  if (!sc.program) return refuse("the graph did not run on a lowered backend");
  if (sc.program->pad_length)
    return refuse(
        "the graph ran on a program padded to a shape bucket (ember.config.shape_buckets)");
  for (Node* n : sc.graph.ops) {
    if (draws_random(*n)) return refuse(std::string("random op ") + n->name());
  }

  auto cap = std::make_shared<CapturedProgram>();
  // FX inputs: metadata, and which earlier input shares each one's storage (AOTAutograd
  // passes saved views of one buffer as several inputs): a replay needs the same pattern.
  std::unordered_map<const c10::StorageImpl*, int> fx_of_storage;
  for (size_t j = 0; j < inputs.size(); ++j) {
    const at::Tensor& t = inputs[j];
    cap->input_is_tensor_.push_back(t.defined());
    cap->input_metas_.push_back(t.defined() ? meta_of(t) : TensorMeta{});
    cap->alias_of_.push_back(-1);
    cap->alias_delta_.push_back(0);
    if (!t.defined()) continue;
    auto ins = fx_of_storage.emplace(storage_of(t), static_cast<int>(j));
    cap->alias_of_[j] = ins.first->second;
    cap->alias_delta_[j] = t.storage_offset() - inputs[ins.first->second].storage_offset();
  }
  auto source_of = [&](const at::Tensor& t) {
    Source s;
    auto it = fx_of_storage.find(storage_of(t));
    if (it == fx_of_storage.end()) {
      s.constant = t;  // made by the trace itself (a tensor constant, a scalar snapshot)
      return s;
    }
    s.fx = it->second;
    s.sizes = t.sizes().vec();
    s.strides = t.strides().vec();
    s.offset_delta = t.storage_offset() - inputs[s.fx].storage_offset();
    return s;
  };
  for (const auto& t : sc.graph.inputs) cap->graph_inputs_.push_back(source_of(t));
  std::unordered_map<const LazyState*, int> root_of;
  for (size_t r = 0; r < sc.roots.size(); ++r)
    root_of.emplace(sc.roots[r].first.get(), static_cast<int>(r));
  for (const auto& s : out_states) {
    auto it = root_of.find(s.get());
    Source src;
    if (it != root_of.end()) {
      src.root = it->second;
    } else {
      at::Tensor data;
      {
        std::lock_guard<std::mutex> g(state_mutex());
        settle_future(*s);
        data = s->data;
      }
      if (!data.defined()) return refuse("an output has no value");
      src = source_of(data);
      if (src.fx < 0) return refuse("an output is a constant of the trace");
    }
    cap->outputs_.push_back(std::move(src));
  }
  cap->program_ = sc.program;
  cap->find_in_place_inputs();
  cap->stats_ = sc.stats;
  cap->ops_ = sc.graph.ops;
  cap->scalars_ = sc.graph.scalars;
  for (const auto& r : sc.roots) cap->keep_.push_back(r.second);
  // The lazy nodes stay for error messages; the first call's input buffers they hold
  // (activations, batches) are released. Nothing else refers to these nodes: every
  // pending state was one of the roots, now bound to data.
  for (Node* n : sc.graph.ops) {
    n->claims.clear();  // the first call's futures (its outputs' buffers)
    for (auto& o : n->operands) {
      if (o.node->kind == NodeKind::kData) o.node->data = at::Tensor();
      if (o.node->kind == NodeKind::kFuture) o.node->future.reset();
    }
  }
  for (const auto& r : sc.roots) {
    if (r.second.node->kind == NodeKind::kData) r.second.node->data = at::Tensor();
    if (r.second.node->kind == NodeKind::kFuture) r.second.node->future.reset();
  }
  return cap;
}

void CapturedProgram::find_in_place_inputs() {
  const size_t n_fx = input_metas_.size();
  in_place_input_.assign(n_fx, -1);
  in_place_root_.assign(n_fx, -1);
  root_uses_.assign(program_->output_metas.size(), 0);
  for (const auto& s : outputs_) {
    if (s.root >= 0) ++root_uses_[s.root];
  }
  wanted_roots_.resize(root_uses_.size());
  for (size_t o = 0; o < root_uses_.size(); ++o) wanted_roots_[o] = root_uses_[o] > 0;
  // FX inputs that cannot be overwritten: on a storage with another FX input, viewed by
  // an output, or reaching the program through a view or more than once.
  std::vector<bool> barred(n_fx, false);
  for (size_t j = 0; j < n_fx; ++j) {
    if (alias_of_[j] >= 0 && alias_of_[j] != static_cast<int>(j)) {
      barred[j] = barred[alias_of_[j]] = true;
    }
  }
  for (const auto& s : outputs_) {
    if (s.fx >= 0) barred[s.fx] = true;
  }
  std::vector<int> graph_input_of(n_fx, -1);
  for (size_t i = 0; i < graph_inputs_.size(); ++i) {
    const Source& s = graph_inputs_[i];
    if (s.fx < 0) continue;
    const TensorMeta& m = input_metas_[s.fx];
    if (graph_input_of[s.fx] != -1 || s.offset_delta != 0 || s.sizes != m.sizes ||
        s.strides != m.strides || !row_major(m.sizes, m.strides)) {
      barred[s.fx] = true;
    }
    graph_input_of[s.fx] = static_cast<int>(i);
  }
  // Executable parameter -> graph input (unpermuted inputs only: a permuted one is a
  // transpose of the buffer, never paired).
  std::unordered_map<int, int> input_of_param;
  for (size_t p = 0; p < program_->params.size(); ++p) {
    const ParamSrc& src = program_->params[p];
    if (src.kind == ParamSrc::kInput && !src.permuted) input_of_param[p] = src.index;
  }
  std::unordered_map<int, int> root_of_input;
  for (const auto& [o, p] : program_->exe->graph().aliases()) {
    auto it = input_of_param.find(p);
    if (it != input_of_param.end()) root_of_input[it->second] = o;
  }
  for (size_t j = 0; j < n_fx; ++j) {
    if (barred[j] || graph_input_of[j] < 0) continue;
    auto it = root_of_input.find(graph_input_of[j]);
    if (it == root_of_input.end() || root_uses_[it->second] != 1) continue;
    in_place_input_[j] = graph_input_of[j];
    in_place_root_[j] = it->second;
  }
}

std::optional<std::vector<at::Tensor>> CapturedProgram::run(const std::vector<at::Tensor>& inputs,
                                                            const std::vector<InputWrite>& writes,
                                                            int64_t* moved,
                                                            int64_t* in_place) const {
  if (inputs.size() != input_metas_.size()) return std::nullopt;

  // Storage -> its first input (one allocation: a call binds hundreds of inputs).
  ska::flat_hash_map<const c10::StorageImpl*, int> first;
  first.reserve(inputs.size());
  for (size_t j = 0; j < inputs.size(); ++j) {
    const at::Tensor& t = inputs[j];
    if (t.defined() != input_is_tensor_[j]) return std::nullopt;
    if (!t.defined()) continue;
    const TensorMeta& m = input_metas_[j];
    if (t.device().type() != at::kCPU || t.layout() != at::kStrided || t.is_conj() || t.is_neg() ||
        t.scalar_type() != m.dtype || t.sizes() != at::IntArrayRef(m.sizes) ||
        t.strides() != at::IntArrayRef(m.strides)) {
      return std::nullopt;
    }
    int f = first.emplace(storage_of(t), static_cast<int>(j)).first->second;
    if (f != alias_of_[j] || t.storage_offset() - inputs[f].storage_offset() != alias_delta_[j]) {
      return std::nullopt;  // inputs share storages differently than when captured
    }
  }
  auto resolve = [&](const Source& s) {
    if (s.fx < 0) return s.constant;
    const at::Tensor& base = inputs[s.fx];
    return view_of(base, s.sizes, s.strides, base.storage_offset() + s.offset_delta);
  };
  LazyGraph g;
  g.ops = ops_;
  g.scalars = scalars_;
  g.inputs.reserve(graph_inputs_.size());
  for (const auto& s : graph_inputs_) g.inputs.push_back(resolve(s));

  // Written inputs the program may overwrite in place (donated to the run).
  std::vector<bool> donated;
  for (const auto& w : writes) {
    const int j = w.input;
    if (j < 0 || j >= static_cast<int>(in_place_input_.size()) || in_place_input_[j] < 0 ||
        w.output < 0 || w.output >= static_cast<int>(outputs_.size()) ||
        outputs_[w.output].root != in_place_root_[j]) {
      continue;
    }
    if (donated.empty()) donated.assign(g.inputs.size(), false);
    donated[in_place_input_[j]] = true;
  }

  std::lock_guard<std::mutex> sync_lock(sync_mutex());
  auto t0 = std::chrono::steady_clock::now();
  LoweredRun r = run_lowered(*program_, g, donated, wanted_roots_);
  g.inputs.clear();  // the views of the inputs (they share the inputs' storages)

  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().syncs++;
    metrics().memory_cache_hits++;
    metrics().execute_seconds += dt;
  }
  set_last_graph(stats_);
  ++runs_;
  if (r.error) std::rethrow_exception(r.error);
  std::vector<at::Tensor> out;
  out.reserve(outputs_.size());
  for (const auto& s : outputs_) {
    if (s.root < 0) {
      out.push_back(resolve(s));
    } else if (root_uses_[s.root] == 1) {
      out.push_back(std::move(r.outputs[s.root]));  // only `out` holds it
    } else {
      out.push_back(r.outputs[s.root]);
    }
  }
  r.outputs.clear();
  for (const auto& w : writes) {
    const at::Tensor& dst = inputs.at(w.input);
    at::Tensor& src = out.at(w.output);
    if (src.has_storage() && dst.has_storage() &&
        src.storage().unsafeGetStorageImpl() == dst.storage().unsafeGetStorageImpl() &&
        src.storage_offset() == dst.storage_offset() && src.sizes() == dst.sizes() &&
        src.strides() == dst.strides()) {
      // The kernel wrote the new value into the donated input: what copy_ would leave.
      dst.unsafeGetTensorImpl()->bump_version();
      if (in_place) ++*in_place;
      continue;
    }
    if (move_buffer(dst, src, w.storage_uses)) {
      if (moved) ++*moved;
      continue;
    }
    at::NoGradGuard no_grad;
    dst.copy_(src);
  }
  return out;
}

}  // namespace ember_torch
