// The ATen step and the aten backend (aten_step.h).
#include "aten_step.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_set>

#include "ember/runtime/thread_pool.h"
#include "op_schema.h"

namespace ember_torch {
namespace {

// `.out` kernels that resize their output internally (e.g. mse_loss.out computes into
// `out` at another shape first) warn about the resize; such overloads are dropped, and
// the step that saw the warning reruns through the functional op.
std::mutex g_bad_out_mu;
std::unordered_set<const c10::FunctionSchema*> g_bad_out;

bool out_overload_ok(const c10::OperatorHandle& h) {
  std::lock_guard<std::mutex> l(g_bad_out_mu);
  return !g_bad_out.count(&h.schema());
}

void mark_bad_out(const c10::OperatorHandle& h) {
  std::lock_guard<std::mutex> l(g_bad_out_mu);
  g_bad_out.insert(&h.schema());
}

struct ResizeWarningFilter : c10::WarningHandler {
  c10::WarningHandler* prev;
  bool resized = false;
  explicit ResizeWarningFilter(c10::WarningHandler* p) : prev(p) {}
  void process(const c10::Warning& w) override {
    if (w.msg().find("was resized since it had shape") != std::string::npos) {
      resized = true;
      return;
    }
    if (prev) prev->process(w);
  }
};

std::optional<c10::OperatorHandle> find_out_overload(const c10::OperatorHandle& op, const Node& n) {
  const auto& s = op.schema();
  if (!n.written.empty()) return std::nullopt;
  for (bool v : n.output_is_view)
    if (v) return std::nullopt;
  for (const auto& r : s.returns()) {
    if (r.type()->kind() != c10::TypeKind::TensorType) return std::nullopt;
  }
  if (n.outputs.size() != s.returns().size()) return std::nullopt;  // undefined results
  std::vector<std::string> cands;
  if (s.overload_name().empty()) {
    cands = {"out"};
  } else {
    cands = {s.overload_name() + "_out", "out"};
  }
  for (const auto& c : cands) {
    auto h = c10::Dispatcher::singleton().findOp(c10::OperatorName(s.name(), c));
    if (!h) continue;
    const auto& os = h->schema();
    size_t n_in = s.arguments().size(), n_ret = s.returns().size();
    if (os.arguments().size() != n_in + n_ret) continue;
    bool ok = true;
    for (size_t i = 0; i < n_in && ok; ++i) {
      ok = os.arguments()[i].name() == s.arguments()[i].name() &&
           *os.arguments()[i].type() == *s.arguments()[i].type();
    }
    for (size_t i = n_in; i < n_in + n_ret && ok; ++i) {
      const auto* ai = os.arguments()[i].alias_info();
      ok = ai && ai->isWrite() && os.arguments()[i].type()->kind() == c10::TypeKind::TensorType;
    }
    if (!ok) continue;
    // A kernel of the CPU backend itself: an `.out` overload that torch generates for a
    // composite op (`autogen:` in native_functions.yaml: convolution.out,
    // convolution_backward.out) only runs the functional op and copies its result into
    // the output; the functional op's fresh tensor is handed over instead (run_extern).
    if (!h->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    if (!out_overload_ok(*h)) continue;
    return h;
  }
  return std::nullopt;
}

// The in-place op whose functional variant `op` is, when `n` is such a call: `op` is
// `name.overload`, `name_.overload` exists with a CPU kernel and the same arguments, its
// written arguments are `op`'s returns in order (functionalization names them
// `<argument>_out`), and each output has its argument's dtype and sizes (the variant
// clones the argument, then runs the in-place op on the clone). `*args` gets the
// written arguments' indices.
std::optional<c10::OperatorHandle> find_inplace_variant(const c10::OperatorHandle& op,
                                                        const Node& n, std::vector<int>* args) {
  const auto& s = op.schema();
  if (!n.written.empty() || s.name().empty() || s.name().back() == '_') return std::nullopt;
  for (bool v : n.output_is_view)
    if (v) return std::nullopt;
  auto h =
      c10::Dispatcher::singleton().findOp(c10::OperatorName(s.name() + "_", s.overload_name()));
  if (!h || !h->hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return std::nullopt;
  const auto& is = h->schema();
  if (is.arguments().size() != s.arguments().size()) return std::nullopt;
  for (size_t i = 0; i < is.arguments().size(); ++i) {
    const auto& a = is.arguments()[i];
    if (a.name() != s.arguments()[i].name() || *a.type() != *s.arguments()[i].type())
      return std::nullopt;
  }
  std::vector<int> written = marked_written_args(is);
  const auto& rets = s.returns();
  if (written.empty() || written.size() != rets.size()) return std::nullopt;
  size_t out = 0;
  for (size_t k = 0; k < rets.size(); ++k) {
    const int i = written[k];
    if (rets[k].name() != is.arguments()[i].name() + "_out" ||
        *rets[k].type() != *is.arguments()[i].type())
      return std::nullopt;
    const ArgSpec& sp = n.specs[i];
    if (sp.kind != ArgKind::kTensor && sp.kind != ArgKind::kTensorList) return std::nullopt;
    for (int o : sp.operands) {
      if (o < 0 || out >= n.outputs.size()) return std::nullopt;
      const Value& v = n.operands[o];
      const TensorMeta& in = v.node->outputs[v.index];
      const TensorMeta& res = n.outputs[out++];
      if (in.dtype != res.dtype || in.sizes != res.sizes) return std::nullopt;
    }
  }
  if (out != n.outputs.size()) return std::nullopt;
  *args = std::move(written);
  return h;
}

// Whether in-place op `h` computes index by index over its tensor lists, so that slices
// of the lists give the same values as the whole call: the fused optimizers and the
// `_foreach_*_` ops, when every written argument is a list (not, e.g.,
// `_amp_foreach_non_finite_check_and_unscale_`, which writes one shared flag).
bool index_wise_lists(const c10::OperatorHandle& h) {
  const std::string& name = h.schema().name();
  return (name.rfind("aten::_fused_", 0) == 0 || name.rfind("aten::_foreach_", 0) == 0) &&
         writes_only_tensor_lists(h.schema());
}

// Runs in-place op `op` on `stack` (its arguments). With `split`, a call whose tensor
// lists have one length of at least 2 runs as one parallel loop over slices of the
// lists (empty lists stay empty): ATen's loop per tensor runs serially inside it
// (at::parallel_for in a parallel region), one thread team wake-up for the call instead
// of one per tensor.
void call_inplace(const c10::OperatorHandle& op, torch::jit::Stack& stack, bool split) {
  int64_t n = 0;  // the lists' common length, or -1 when they differ
  for (const auto& v : stack) {
    if (!split || !v.isTensorList() || v.toTensorList().empty()) continue;
    const int64_t len = static_cast<int64_t>(v.toTensorList().size());
    n = n == 0 || n == len ? len : -1;
  }
  if (n < 2 || at::get_num_threads() < 2 || at::in_parallel_region()) {
    op.callBoxed(&stack);
    return;
  }
  const int64_t threads = at::get_num_threads();
  // The runtime's parallel-for is ATen's pool (aten_parallel.cpp: this file is not
  // compiled with OpenMP, where at::parallel_for would run serially).
  ember::RuntimeParallelFor()(0, n, (n + threads - 1) / threads, [&](int64_t b, int64_t e) {
    torch::jit::Stack part;
    part.reserve(stack.size());
    for (const auto& v : stack) {
      if (!v.isTensorList() || v.toTensorList().empty()) {
        part.push_back(v);
        continue;
      }
      c10::List<at::Tensor> l;
      const c10::List<at::Tensor> all = v.toTensorList();
      l.reserve(static_cast<size_t>(e - b));
      for (int64_t i = b; i < e; ++i) l.push_back(all.get(static_cast<size_t>(i)));
      part.emplace_back(std::move(l));
    }
    op.callBoxed(&part);
  });
}

at::Tensor conform(const at::Tensor& r, const TensorMeta& m, bool view, bool any_memory,
                   bool* copied) {
  bool same =
      r.sizes().vec() == m.sizes && r.strides().vec() == m.strides && r.scalar_type() == m.dtype;
  if (view) {
    if (same && r.storage_offset() == m.offset) return r;
  } else if (same && (r.storage_offset() == m.offset) && (any_memory || is_device_buffer(r))) {
    return r;
  }
  at::Tensor b = alloc_buffer(m.sizes, m.strides, m.dtype, m.offset);
  b.copy_(r);
  *copied = true;
  return b;
}

}  // namespace

AtenStep make_aten_step(const Node& n, const std::function<int(int)>& tensor_ref,
                        int* next_scalar) {
  AtenStep st(*n.op);
  st.name = op_name(n.op->schema());
  st.out_op = find_out_overload(*n.op, n);
  if (!st.out_op) st.inplace_op = find_inplace_variant(*n.op, n, &st.inplace_args);
  st.split_lists = st.inplace_op && index_wise_lists(*st.inplace_op);
  st.args = n.args;
  st.written = n.written;
  int& scalar_idx = *next_scalar;
  for (size_t i = 0; i < n.specs.size(); ++i) {
    const auto& sp = n.specs[i];
    st.kinds.push_back(sp.kind);
    std::vector<int> refs;
    switch (sp.kind) {
      case ArgKind::kTensor:
      case ArgKind::kTensorList:
      case ArgKind::kOptTensorList:
        for (int o : sp.operands) refs.push_back(o < 0 ? -1 : tensor_ref(o));
        break;
      case ArgKind::kScalar:
        refs.push_back(scalar_idx++);
        break;
      case ArgKind::kScalarList: {
        size_t len = n.args[i].toList().size();
        for (size_t j = 0; j < len; ++j) refs.push_back(scalar_idx++);
        break;
      }
      case ArgKind::kGenerator:
        refs.push_back(scalar_idx);
        scalar_idx += 2;
        break;
      default:
        break;
    }
    st.refs.push_back(std::move(refs));
  }
  if (n.seeded_default) {
    st.seed_idx = scalar_idx;
    scalar_idx += 2;
  }
  st.out_metas = n.outputs;
  st.out_view = n.output_is_view;
  return st;
}

std::vector<at::Tensor> run_aten_step(const AtenStep& st, const AtenStepIO& io, int64_t* copies) {
  torch::jit::Stack stack;
  stack.reserve(st.args.size() + st.out_metas.size());
  for (size_t i = 0; i < st.args.size(); ++i) {
    const auto& refs = st.refs[i];
    bool written =
        std::find(st.written.begin(), st.written.end(), static_cast<int>(i)) != st.written.end();
    auto get = [&](int s) -> at::Tensor {
      at::Tensor t = io.tensor(s);
      if (written) {  // the op mutates it: work on a copy, the input stays intact
        at::Tensor c = alloc_buffer(t.sizes(), t.strides(), t.scalar_type(), t.storage_offset());
        c.copy_(t);
        return c;
      }
      return t;
    };
    switch (st.kinds[i]) {
      case ArgKind::kPlain:
        stack.push_back(st.args[i]);
        break;
      case ArgKind::kTensor:
        stack.emplace_back(refs[0] < 0 ? at::Tensor() : get(refs[0]));
        break;
      case ArgKind::kTensorList: {
        c10::List<at::Tensor> l;
        for (int s : refs) l.push_back(get(s));
        stack.emplace_back(std::move(l));
        break;
      }
      case ArgKind::kOptTensorList: {
        c10::List<std::optional<at::Tensor>> l;
        for (int s : refs) {
          if (s < 0)
            l.push_back(std::nullopt);
          else
            l.push_back(get(s));
        }
        stack.emplace_back(std::move(l));
        break;
      }
      case ArgKind::kScalar:
        stack.push_back(io.scalar(refs[0]));
        break;
      case ArgKind::kScalarList: {
        auto orig = st.args[i].toList();
        c10::impl::GenericList l(orig.elementType());
        for (int s : refs) l.push_back(io.scalar(s));
        stack.emplace_back(std::move(l));
        break;
      }
      case ArgKind::kGenerator:
        stack.emplace_back(
            cpu_generator_for(static_cast<uint64_t>(io.scalar(refs[0]).toInt()),
                              static_cast<uint64_t>(io.scalar(refs[0] + 1).toInt())));
        break;
      case ArgKind::kDevice:
        stack.emplace_back(c10::Device(at::kCPU));
        break;
    }
  }
  std::vector<at::Tensor> results;
  // Written arguments (copied above) are the first outputs.
  std::vector<at::Tensor> written_ts;
  for (int w : st.written) {
    const auto& v = stack[w];
    if (v.isTensor())
      written_ts.push_back(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList()) written_ts.push_back(t);
  }
  std::optional<at::Tensor> saved_rng;
  if (st.seed_idx >= 0) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> l(gen.mutex());
    saved_rng = gen.get_state();
    uint64_t seed = static_cast<uint64_t>(io.scalar(st.seed_idx).toInt());
    uint64_t off = static_cast<uint64_t>(io.scalar(st.seed_idx + 1).toInt());
    gen.set_current_seed(cpu_seed_for(seed, off));
  }
  struct RestoreRng {
    std::optional<at::Tensor>& s;
    ~RestoreRng() {
      if (!s) return;
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> l(gen.mutex());
      gen.set_state(*s);
    }
  } restore_rng{saved_rng};
  if (st.inplace_op) {
    // Each written argument's values in its output buffer (or a new one), then the
    // in-place op on those buffers: the results are the buffers.
    size_t k = 0;
    for (int i : st.inplace_args) {
      auto into_output = [&](const at::Tensor& in) {
        const auto& m = st.out_metas[k];
        // Output k's bytes are the input's own (a donated argument): the input is it.
        const bool own = io.out_data && in.numel() > 0 && io.out_data(k) == in.data_ptr() &&
                         in.sizes() == m.sizes && in.strides() == m.strides;
        at::Tensor o = own ? in : io.out_buffer ? io.out_buffer(k) : at::Tensor();
        if (!o.defined()) o = alloc_buffer(m.sizes, m.strides, m.dtype, m.offset);
        ++k;
        if (!own) o.copy_(in);
        results.push_back(o);
        return o;
      };
      c10::IValue& v = stack[i];
      if (v.isTensor()) {
        v = into_output(v.toTensor());
      } else {
        c10::List<at::Tensor> l;
        for (const at::Tensor& t : v.toTensorList()) l.push_back(into_output(t));
        v = std::move(l);
      }
    }
    call_inplace(*st.inplace_op, stack, st.split_lists);
    return results;
  }
  bool use_out = st.out_op.has_value() && out_overload_ok(*st.out_op);
  std::vector<bool> preset(st.out_metas.size(), false);
  // The layout of each given output buffer (offset 0): where a kernel restrides one,
  // its values are put back in that layout.
  std::vector<std::vector<int64_t>> given_strides(st.out_metas.size());
  if (use_out) {
    std::vector<at::Tensor> outs;
    for (size_t k = 0; k < st.out_metas.size(); ++k) {
      const auto& m = st.out_metas[k];
      at::Tensor given = io.out_buffer ? io.out_buffer(k) : at::Tensor();
      if (given.defined()) {
        given_strides[k] = given.strides().vec();
        outs.push_back(given);
        preset[k] = true;
      } else {
        outs.push_back(alloc_buffer(m.sizes, m.strides, m.dtype, m.offset));
      }
    }
    torch::jit::Stack saved = stack;
    for (const auto& o : outs) stack.emplace_back(o);
    ResizeWarningFilter filter(c10::WarningUtils::get_warning_handler());
    bool failed_resize = false;
    try {
      c10::WarningUtils::WarningHandlerGuard guard(&filter);
      st.out_op->callBoxed(&stack);
    } catch (const c10::Error&) {
      // A preallocated (non-resizable) output that the kernel tried to resize:
      // drop the overload and run the functional op instead.
      if (!filter.resized) throw;
      failed_resize = true;
    }
    // The kernel resized our buffer (it computes at another shape first, e.g.
    // binary_cross_entropy.out): the result is not in the planned buffer. Run the
    // functional op instead, now and from now on.
    if (filter.resized) mark_bad_out(*st.out_op);
    if (failed_resize || filter.resized) {
      stack = std::move(saved);
      use_out = false;
      preset.assign(preset.size(), false);
    } else {
      results = outs;
      for (size_t k = 0; k < outs.size(); ++k) {
        // A kernel may restride a preallocated output in place (a memory-format
        // preserving resize_ at the same size, e.g. max_unpool2d.out on a channels_last
        // input): same bytes, another layout. Put the values back in the planned one.
        if (!preset[k]) continue;
        at::Tensor& o = outs[k];
        const auto& m = st.out_metas[k];
        if (o.strides() == given_strides[k] && o.storage_offset() == 0 &&
            o.sizes().vec() == m.sizes) {
          continue;
        }
        at::Tensor values = o.clone();
        o.as_strided_(m.sizes, given_strides[k], 0);
        o.copy_(values);
        ++*copies;
      }
    }
  }
  if (!use_out) {
    st.op.callBoxed(&stack);
    results = written_ts;
    const auto& rets = st.op.schema().returns();
    for (size_t r = 0; r < rets.size(); ++r) {
      const auto* ai = rets[r].alias_info();
      if (ai && ai->isWrite()) continue;
      const auto& v = stack[r];
      if (v.isTensor()) {
        if (v.toTensor().defined()) results.push_back(v.toTensor());
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList()) results.push_back(t);
      }
    }
  }
  TORCH_INTERNAL_ASSERT(results.size() == st.out_metas.size(), "ember: ", st.name, " produced ",
                        results.size(), " tensors, expected ", st.out_metas.size());
  for (size_t k = 0; k < results.size(); ++k) {
    if (preset[k]) continue;
    bool copied = false;
    results[k] = conform(results[k], st.out_metas[k], st.out_view[k], io.any_memory, &copied);
    if (copied && !st.out_view[k]) ++*copies;
  }
  return results;
}

[[noreturn]] void rethrow_at(const std::exception& e, const std::string& op_name, const Node* n) {
  std::string where = "ember: error while running " + op_name;
  if (n) {
    where += " on (";
    for (size_t i = 0; i < n->operands.size(); ++i) {
      const auto& m = n->operands[i].node->outputs[n->operands[i].index];
      where += (i ? ", " : "") + std::string(c10::toString(m.dtype)) +
               c10::str(c10::IntArrayRef(m.sizes));
    }
    where += ")";
  }
  if (n && !n->source.empty()) where += " (traced at " + n->source + ")";
  where += ": ";
  if (auto* ie = dynamic_cast<const c10::IndexError*>(&e)) {
    throw c10::IndexError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                          where + ie->what_without_backtrace());
  }
  if (auto* ve = dynamic_cast<const c10::ValueError*>(&e)) {
    throw c10::ValueError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                          where + ve->what_without_backtrace());
  }
  if (auto* te = dynamic_cast<const c10::TypeError*>(&e)) {
    throw c10::TypeError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                         where + te->what_without_backtrace());
  }
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) {
    throw c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                     where + ce->what_without_backtrace());
  }
  throw c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, where + e.what());
}

std::string error_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& ce) {
    return ce.what_without_backtrace();
  } catch (const std::exception& se) {
    return se.what();
  }
  return "unknown error";
}

// ---------------------------------------------------------------- the aten backend
// The aten backend's executable: one step per lazy op node over numbered slots.
struct AtenExecutable {
  std::vector<int64_t> tokens;
  int num_slots = 0;
  int num_inputs = 0;
  std::vector<AtenStep> steps;
  std::vector<int> output_slots;
};

std::shared_ptr<AtenExecutable> compile_aten(const LazyGraph& g) {
  auto ex = std::make_shared<AtenExecutable>();
  ex->tokens = g.tokens;
  ex->num_slots = g.num_slots;
  ex->num_inputs = static_cast<int>(g.inputs.size());
  ex->output_slots = g.output_slots;
  int scalar_idx = 0;
  for (Node* n : g.ops) {
    AtenStep st = make_aten_step(
        *n, [&](int o) { return slot_of(g, n->operands[o]); }, &scalar_idx);
    int first = g.first_slot.at(n);
    for (size_t k = 0; k < n->outputs.size(); ++k)
      st.out_slots.push_back(first + static_cast<int>(k));
    ex->steps.push_back(std::move(st));
  }
  // Liveness: a slot is dropped after its last reader (or right after its producer
  // when nothing reads it), unless it is a graph output, so executing a graph holds
  // what eager would hold at that point, not every intermediate of the graph.
  std::vector<int> last(ex->num_slots, -1);
  for (size_t i = 0; i < ex->steps.size(); ++i) {
    const AtenStep& st = ex->steps[i];
    for (int s : st.out_slots) last[s] = static_cast<int>(i);
    for (size_t a = 0; a < st.kinds.size(); ++a) {
      auto k = st.kinds[a];
      if (k != ArgKind::kTensor && k != ArgKind::kTensorList && k != ArgKind::kOptTensorList)
        continue;
      for (int s : st.refs[a])
        if (s >= 0) last[s] = static_cast<int>(i);
    }
  }
  for (int s : ex->output_slots) last[s] = -1;
  for (int s = 0; s < ex->num_slots; ++s) {
    if (last[s] >= 0) ex->steps[last[s]].release.push_back(s);
  }
  return ex;
}

// Runs the aten backend's executable: one ATen step per node. A failing step poisons
// its outputs; independent steps still run, so every tensor that does not depend on
// the failure stays readable.
void run_aten(const AtenExecutable& ex, const LazyGraph& g, std::vector<at::Tensor>& outputs,
              std::vector<bool>& root_failed, std::exception_ptr& first_error) {
  std::vector<at::Tensor> slots(ex.num_slots);
  for (size_t i = 0; i < g.inputs.size(); ++i) slots[g.input_slots[i]] = g.inputs[i];
  std::map<std::string, int64_t> extern_counts;
  int64_t copies = 0;
  std::vector<bool> failed(ex.num_slots, false);
  for (size_t si = 0; si < ex.steps.size(); ++si) {
    const AtenStep& st = ex.steps[si];
    const Node* node = g.ops[si];
    bool poisoned = false;
    for (size_t i = 0; i < st.kinds.size() && !poisoned; ++i) {
      auto k = st.kinds[i];
      if (k == ArgKind::kTensor || k == ArgKind::kTensorList || k == ArgKind::kOptTensorList) {
        for (int s : st.refs[i]) poisoned = poisoned || (s >= 0 && failed[s]);
      }
    }
    if (poisoned) {
      for (int s : st.out_slots) failed[s] = true;
      for (int s : st.release) slots[s] = at::Tensor();
      continue;
    }
    try {
      AtenStepIO io;
      io.tensor = [&](int s) { return slots[s]; };
      io.scalar = [&](int j) { return g.scalars[j]; };
      auto results = run_aten_step(st, io, &copies);
      for (size_t k = 0; k < results.size(); ++k) slots[st.out_slots[k]] = results[k];
      extern_counts[st.name]++;
    } catch (const std::exception& e) {
      for (int s : st.out_slots) failed[s] = true;
      if (!first_error) {
        try {
          rethrow_at(e, st.name, node);
        } catch (...) {
          first_error = std::current_exception();
        }
      }
    }
    for (int s : st.release) slots[s] = at::Tensor();
  }
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().nodes_executed += static_cast<int64_t>(ex.steps.size());
    metrics().extern_copies += copies;
    for (auto& kv : extern_counts) metrics().externs[kv.first] += kv.second;
  }
  outputs.resize(g.output_slots.size());
  root_failed.assign(g.output_slots.size(), false);
  for (size_t i = 0; i < g.output_slots.size(); ++i) {
    if (failed[g.output_slots[i]])
      root_failed[i] = true;
    else
      outputs[i] = slots[g.output_slots[i]];
  }
}

GraphStats aten_stats(const LazyGraph& g) {
  GraphStats s;
  s.backend = "aten";
  s.lazy_ops = static_cast<int64_t>(g.ops.size());
  s.extern_ops = s.lazy_ops;
  s.extern_steps = s.lazy_ops;
  for (const Node* n : g.ops) {
    s.externs[op_name(n->op->schema())]++;
  }
  return s;
}

}  // namespace ember_torch
