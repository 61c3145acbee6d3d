// Sync: one graph from the pending values of all live tensors, a structural hash, an
// in-memory cache of executables, execution as ATen extern steps over slots.
#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>
#include <torch/headeronly/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "../ir/log.h"
#include "bridge.h"
#include "capture.h"
#include "ember/codegen/cpu.h"
#include "lazy_graph.h"
#include "lower.h"

namespace ember_torch {
namespace {

int64_t dbits(double d) {
  int64_t x;
  std::memcpy(&x, &d, sizeof(x));
  return x;
}

void hash_plain(const c10::IValue& v, std::vector<int64_t>& t) {
  if (v.isNone()) {
    t.push_back(1);
    return;
  }
  if (v.isInt()) {
    t.push_back(2);
    t.push_back(v.toInt());
    return;
  }
  if (v.isBool()) {
    t.push_back(3);
    t.push_back(v.toBool());
    return;
  }
  if (v.isDouble()) {
    t.push_back(4);
    t.push_back(dbits(v.toDouble()));
    return;
  }
  if (v.isIntList()) {
    auto l = v.toIntVector();
    t.push_back(6);
    t.push_back(l.size());
    t.insert(t.end(), l.begin(), l.end());
    return;
  }
  if (v.isSymIntList()) {
    auto l = v.toSymIntList();
    t.push_back(6);
    t.push_back(l.size());
    for (size_t i = 0; i < l.size(); ++i) t.push_back(l.get(i).expect_int());
    return;
  }
  if (v.isString()) {
    t.push_back(9);
    t.push_back(std::hash<std::string>()(v.toStringRef()));
    return;
  }
  if (v.isDevice()) {
    t.push_back(10);
    return;
  }
  if (v.isList()) {
    auto l = v.toList();
    t.push_back(12);
    t.push_back(l.size());
    for (size_t i = 0; i < l.size(); ++i) hash_plain(l.get(i), t);
    return;
  }
  t.push_back(13);
  t.push_back(std::hash<std::string>()(v.tagKind()));
}

void hash_meta(const TensorMeta& m, std::vector<int64_t>& t) {
  t.push_back(static_cast<int64_t>(m.dtype));
  t.push_back(m.sizes.size());
  t.insert(t.end(), m.sizes.begin(), m.sizes.end());
  t.insert(t.end(), m.strides.begin(), m.strides.end());
  t.push_back(m.offset);
}

}  // namespace

int64_t scalar_tag(const c10::IValue& v) {
  if (v.isDouble()) return 1;
  if (v.isInt()) return 2;
  if (v.isBool()) return 3;
  if (v.isComplexDouble()) return 4;
  return 5;
}

namespace {

// ---------------------------------------------------------------- graph
uint64_t hash_tokens(const std::vector<int64_t>& v) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t x : v) {
    h ^= static_cast<uint64_t>(x);
    h *= 1099511628211ULL;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

void build_lazy_graph(const std::vector<std::pair<StatePtr, Value>>& roots, LazyGraph& g) {
  std::unordered_map<const c10::TensorImpl*, int> data_slots;
  std::unordered_set<const Node*> visited;
  // Iterative post-order DFS.
  std::vector<std::pair<Node*, size_t>> work;
  auto& t = g.tokens;
  auto visit_leaf = [&](Node* n) {
    if (n->kind == NodeKind::kData) {
      auto* key = n->data.unsafeGetTensorImpl();
      auto it = data_slots.find(key);
      if (it != data_slots.end()) {
        g.first_slot[n] = it->second;
        for (size_t i = 0; i < g.input_slots.size(); ++i) {
          if (g.input_slots[i] == it->second) g.input_nodes[i]++;
        }
        return;
      }
      int s = g.num_slots++;
      data_slots[key] = s;
      g.first_slot[n] = s;
      g.inputs.push_back(n->data);
      g.input_slots.push_back(s);
      g.input_nodes.push_back(1);
      t.push_back(-1);
      hash_meta(n->outputs[0], t);
    } else {
      int s = g.num_slots++;
      g.first_slot[n] = s;
      g.inputs.push_back(n->data);
      g.input_slots.push_back(s);
      g.input_nodes.push_back(0);  // host snapshot: never donated
      t.push_back(-2);
      hash_meta(n->outputs[0], t);
      t.push_back(n->data.unsafeGetTensorImpl()->is_wrapped_number());
    }
  };
  auto emit_op = [&](Node* n) {
    g.first_slot[n] = g.num_slots;
    g.num_slots += static_cast<int>(n->outputs.size());
    g.ops.push_back(n);
    t.push_back(-3);
    t.push_back(static_cast<int64_t>(std::hash<std::string>()(n->op->schema().name())));
    t.push_back(static_cast<int64_t>(std::hash<std::string>()(n->op->schema().overload_name())));
    for (size_t i = 0; i < n->specs.size(); ++i) {
      const auto& sp = n->specs[i];
      t.push_back(100 + static_cast<int>(sp.kind));
      switch (sp.kind) {
        case ArgKind::kPlain:
          hash_plain(n->args[i], t);
          break;
        case ArgKind::kTensor:
        case ArgKind::kTensorList:
        case ArgKind::kOptTensorList:
          t.push_back(sp.operands.size());
          for (int o : sp.operands) t.push_back(o < 0 ? -1 : slot_of(g, n->operands[o]));
          break;
        case ArgKind::kScalar:
          t.push_back(scalar_tag(n->args[i]));
          g.scalars.push_back(n->args[i]);
          break;
        case ArgKind::kScalarList: {
          auto l = n->args[i].toList();
          t.push_back(l.size());
          for (size_t j = 0; j < l.size(); ++j) {
            t.push_back(scalar_tag(l.get(j)));
            g.scalars.push_back(l.get(j));
          }
          break;
        }
        case ArgKind::kGenerator:
          g.scalars.emplace_back(static_cast<int64_t>(n->rng_seed));
          g.scalars.emplace_back(static_cast<int64_t>(n->rng_offset));
          break;
        case ArgKind::kDevice:
          break;
      }
    }
    if (n->seeded_default) {
      t.push_back(-7);
      g.scalars.emplace_back(static_cast<int64_t>(n->rng_seed));
      g.scalars.emplace_back(static_cast<int64_t>(n->rng_offset));
    }
    for (const auto& m : n->outputs) hash_meta(m, t);
  };
  // Every op reachable from the roots (iterative post-order DFS) is emitted in program
  // order (the trace sequence): running steps in the order the program traced them
  // keeps what is live at each step what eager would hold (micro-batch k's activations
  // are dead before micro-batch k+1's forward runs), where the DFS order from the roots
  // can interleave independent chains. Leaves take slots at their first use.
  std::vector<Node*> ops;
  for (const auto& r : roots) {
    Node* root = r.second.node.get();
    if (visited.count(root)) continue;
    work.emplace_back(root, 0);
    visited.insert(root);
    while (!work.empty()) {
      auto& [n, i] = work.back();
      if (n->kind != NodeKind::kOp) {
        work.pop_back();
        continue;
      }
      if (i < n->operands.size()) {
        Node* c = n->operands[i].node.get();
        ++i;
        if (!visited.count(c)) {
          visited.insert(c);
          work.emplace_back(c, 0);
        }
        continue;
      }
      ops.push_back(n);
      work.pop_back();
    }
  }
  std::stable_sort(ops.begin(), ops.end(),
                   [](const Node* a, const Node* b) { return a->seq < b->seq; });
  std::unordered_set<const Node*> leaves;
  auto leaf = [&](Node* n) {
    if (n->kind != NodeKind::kOp && leaves.insert(n).second) visit_leaf(n);
  };
  for (Node* n : ops) {
    for (const auto& o : n->operands) leaf(o.node.get());
    emit_op(n);
  }
  for (const auto& r : roots) leaf(r.second.node.get());
  t.push_back(-4);
  for (const auto& r : roots) {
    int s = slot_of(g, r.second);
    g.output_slots.push_back(s);
    t.push_back(s);
  }
  g.hash = hash_tokens(t);
}

namespace {

// ---------------------------------------------------------------- ATen steps
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
    if (!h->hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    if (!out_overload_ok(*h)) continue;
    return h;
  }
  return std::nullopt;
}

at::Tensor conform(const at::Tensor& r, const TensorMeta& m, bool view, bool* copied) {
  bool same =
      r.sizes().vec() == m.sizes && r.strides().vec() == m.strides && r.scalar_type() == m.dtype;
  if (view) {
    if (same && r.storage_offset() == m.offset) return r;
  } else if (same && (r.storage_offset() == m.offset) && is_device_buffer(r)) {
    return r;
  }
  at::Tensor b = alloc_buffer(m.sizes, m.strides, m.dtype, m.offset);
  b.copy_(r);
  *copied = true;
  return b;
}

at::Generator cpu_gen(uint64_t seed, uint64_t offset) {
  uint64_t s = seed ^ (offset * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
  return at::make_generator<at::CPUGeneratorImpl>(s);
}

// The aten backend's executable: one step per lazy op node over numbered slots.
struct Executable {
  std::vector<int64_t> tokens;
  int num_slots = 0;
  int num_inputs = 0;
  std::vector<AtenStep> steps;
  std::vector<int> output_slots;
};

std::shared_ptr<Executable> compile(const LazyGraph& g) {
  auto ex = std::make_shared<Executable>();
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

}  // namespace

AtenStep make_aten_step(const Node& n, const std::function<int(int)>& tensor_ref,
                        int* next_scalar) {
  AtenStep st(*n.op);
  st.name = n.op->schema().name();
  if (!n.op->schema().overload_name().empty()) st.name += "." + n.op->schema().overload_name();
  st.out_op = find_out_overload(*n.op, n);
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
        stack.emplace_back(cpu_gen(static_cast<uint64_t>(io.scalar(refs[0]).toInt()),
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
    gen.set_current_seed(seed ^ (off * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
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
  bool use_out = st.out_op.has_value() && out_overload_ok(*st.out_op);
  std::vector<bool> preset(st.out_metas.size(), false);
  if (use_out) {
    std::vector<at::Tensor> outs;
    for (size_t k = 0; k < st.out_metas.size(); ++k) {
      const auto& m = st.out_metas[k];
      at::Tensor given = io.out_buffer ? io.out_buffer(k) : at::Tensor();
      if (given.defined()) {
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
        if (o.strides().vec() == m.strides && o.storage_offset() == m.offset &&
            o.sizes().vec() == m.sizes) {
          continue;
        }
        at::Tensor values = o.clone();
        o.as_strided_(m.sizes, m.strides, m.offset);
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
    results[k] = conform(results[k], st.out_metas[k], st.out_view[k], &copied);
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

std::vector<bool> donatable_inputs(const LazyGraph& g) {
  static const bool log = ember::LogEnabled("donation");  // EMBER_LOG topics, read once
  std::vector<bool> d(g.inputs.size(), false);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const at::Tensor& t = g.inputs[i];
    if (g.input_nodes[i] <= 0 || !t.defined() || !t.has_storage() || !is_device_buffer(t)) continue;
    // References: g.inputs[i] plus the leaf nodes' data; nothing else (no live state,
    // view, data_of() result or autograd save) may hold the tensor or its storage.
    d[i] = t.use_count() == 1 + g.input_nodes[i] && t.storage().use_count() == 1;
    if (log) {
      ember::LogLine("donation",
                     c10::str("input ", i, " ", t.sizes(), ": ", d[i] ? "donatable" : "kept",
                              " (tensor refs ", t.use_count(), ", graph ", 1 + g.input_nodes[i],
                              "; storage refs ", t.storage().use_count(), ")"));
    }
  }
  return d;
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

namespace {

// ---------------------------------------------------------------- cache + call sites
std::mutex g_cache_mu;
// One compiled graph: the aten backend's step list, or a lowered core executable.
struct CacheEntry {
  int backend = 0;
  std::vector<int64_t> tokens;
  std::shared_ptr<Executable> aten;
  std::shared_ptr<LoweredProgram> lowered;
  GraphStats stats;
};
std::unordered_map<uint64_t, std::vector<std::shared_ptr<CacheEntry>>> g_cache;
struct SiteInfo {
  std::unordered_set<uint64_t> graphs;
  std::vector<std::string> last_ops;
  std::vector<std::string> last_inputs;
  bool warned = false;
};
std::unordered_map<std::string, SiteInfo> g_sites;
std::atomic<bool> g_cap_warned{false};
std::mutex g_sync_mu;                       // one sync at a time
std::atomic<int64_t> g_sync_generation{0};  // syncs that ran work; never reset

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

std::string meta_str(const TensorMeta& m) {
  std::ostringstream os;
  os << dtype_name(m.dtype) << "[";
  for (size_t i = 0; i < m.sizes.size(); ++i) os << (i ? "," : "") << m.sizes[i];
  os << "]";
  return os.str();
}

std::string graph_text(const LazyGraph& g) {
  std::ostringstream os;
  os << "# ember lazy graph " << std::hex << g.hash << std::dec << ": " << g.ops.size() << " ops, "
     << g.inputs.size() << " tensor inputs, " << g.scalars.size() << " scalar inputs\n";
  std::unordered_map<const Node*, bool> printed;
  for (const auto& kv : g.first_slot) {
    const Node* n = kv.first;
    if (n->kind == NodeKind::kOp) continue;
    os << "%" << kv.second << " = " << (n->kind == NodeKind::kData ? "parameter " : "host ")
       << meta_str(n->outputs[0]) << "\n";
  }
  for (const Node* n : g.ops) {
    int first = g.first_slot.at(n);
    os << "(";
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      os << (k ? ", " : "") << "%" << first + k << ": " << meta_str(n->outputs[k]);
    }
    os << ") = " << n->op->schema().name();
    if (!n->op->schema().overload_name().empty()) os << "." << n->op->schema().overload_name();
    os << "(";
    for (size_t i = 0; i < n->specs.size(); ++i) {
      os << (i ? ", " : "");
      const auto& sp = n->specs[i];
      switch (sp.kind) {
        case ArgKind::kTensor:
        case ArgKind::kTensorList:
        case ArgKind::kOptTensorList:
          if (sp.kind != ArgKind::kTensor) os << "[";
          for (size_t j = 0; j < sp.operands.size(); ++j) {
            os << (j ? ", " : "");
            int o = sp.operands[j];
            if (o < 0)
              os << "None";
            else
              os << "%" << slot_of(g, n->operands[o]);
          }
          if (sp.kind != ArgKind::kTensor) os << "]";
          break;
        case ArgKind::kScalar:
          os << "$scalar";
          break;
        case ArgKind::kScalarList:
          os << "$scalars";
          break;
        case ArgKind::kGenerator:
          os << "$rng";
          break;
        case ArgKind::kDevice:
          os << "device";
          break;
        case ArgKind::kPlain:
          os << n->args[i];
          break;
      }
    }
    os << ")";
    if (!n->source.empty()) os << "  # " << n->source;
    os << "\n";
  }
  os << "return (";
  for (size_t i = 0; i < g.output_slots.size(); ++i)
    os << (i ? ", " : "") << "%" << g.output_slots[i];
  os << ")\n";
  return os.str();
}

void log_recompile(const std::string& site, const LazyGraph& g) {
  if (site.empty()) return;
  std::vector<std::string> ops, ins;
  for (const Node* n : g.ops)
    ops.push_back(n->op->schema().name() + "->" + meta_str(n->outputs[0]));
  for (const auto& t : g.inputs) ins.push_back(meta_str(meta_of(t)));
  SiteInfo& info = g_sites[site];
  if (!info.graphs.empty() && config().log_recompiles.load() && g_log_hook) {
    std::string why;
    for (size_t i = 0; i < std::min(ins.size(), info.last_inputs.size()) && why.empty(); ++i) {
      if (ins[i] != info.last_inputs[i]) {
        why =
            "input " + std::to_string(i) + " changed from " + info.last_inputs[i] + " to " + ins[i];
      }
    }
    for (size_t i = 0; i < std::min(ops.size(), info.last_ops.size()) && why.empty(); ++i) {
      if (ops[i] != info.last_ops[i])
        why = "op " + std::to_string(i) + " changed from " + info.last_ops[i] + " to " + ops[i];
    }
    if (why.empty() && ops.size() != info.last_ops.size()) {
      why = "op count changed from " + std::to_string(info.last_ops.size()) + " to " +
            std::to_string(ops.size());
    }
    if (why.empty() && ins.size() != info.last_inputs.size()) {
      why = "input count changed from " + std::to_string(info.last_inputs.size()) + " to " +
            std::to_string(ins.size());
    }
    if (why.empty()) why = "scalar argument types or attributes changed";
    g_log_hook("recompile", "ember: recompiling at " + site + ": " + why);
  }
  info.graphs.insert(g.hash);
  info.last_ops = std::move(ops);
  info.last_inputs = std::move(ins);
  if (!info.warned &&
      static_cast<int64_t>(info.graphs.size()) > config().recompile_warn_limit.load() &&
      g_warn_hook) {
    info.warned = true;
    g_warn_hook("ember: " + site + " has compiled " + std::to_string(info.graphs.size()) +
                " distinct graphs (limit " + std::to_string(config().recompile_warn_limit.load()) +
                "); shapes or dtypes probably change every step");
  }
}

// ---------------------------------------------------------------- disk cache
// Entries are the canonical token list of a lazy graph, named by its hash and backend,
// under $EMBER_CACHE_DIR (default ~/.cache/ember)/lazy-v1-torchX.Y/. A hit is verified
// against the stored tokens. A hit still lowers the graph and compiles it with the core
// runtime (milliseconds); the expensive part, the native kernels, comes from the code
// generator's own disk cache (ember/codegen/cpu.h), so a second process runs no system
// compiler (metrics: kernel_compiles == 0).
std::string cache_dir() {
  const char* d = std::getenv("EMBER_CACHE_DIR");
  std::string base;
  if (d && *d) {
    base = d;
  } else {
    const char* home = std::getenv("HOME");
    if (!home || !*home) return "";
    base = std::string(home) + "/.cache/ember";
  }
  return base + "/lazy-v1-torch" + std::to_string(TORCH_VERSION_MAJOR) + "." +
         std::to_string(TORCH_VERSION_MINOR);
}

std::string cache_path(const LazyGraph& g, int backend) {
  std::string dir = cache_dir();
  if (dir.empty()) return "";
  std::ostringstream os;
  os << dir << "/" << std::hex << g.hash << "." << backend_name(backend) << ".graph";
  return os.str();
}

bool disk_cache_lookup(const LazyGraph& g, int backend) {
  std::string p = cache_path(g, backend);
  if (p.empty()) return false;
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  std::vector<int64_t> tokens;
  int64_t n = 0;
  if (!f.read(reinterpret_cast<char*>(&n), sizeof(n)) ||
      n != static_cast<int64_t>(g.tokens.size())) {
    return false;
  }
  tokens.resize(n);
  if (!f.read(reinterpret_cast<char*>(tokens.data()), n * sizeof(int64_t))) return false;
  return tokens == g.tokens;
}

void disk_cache_store(const LazyGraph& g, int backend) {
  std::string p = cache_path(g, backend);
  if (p.empty()) return;
  std::string dir = p.substr(0, p.rfind('/'));
  std::string cmd_dir = dir;
  // mkdir -p
  for (size_t i = 1; i <= cmd_dir.size(); ++i) {
    if (i == cmd_dir.size() || cmd_dir[i] == '/') {
      std::string sub = cmd_dir.substr(0, i);
      ::mkdir(sub.c_str(), 0755);
    }
  }
  std::string tmp = p + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    int64_t n = static_cast<int64_t>(g.tokens.size());
    f.write(reinterpret_cast<const char*>(&n), sizeof(n));
    f.write(reinterpret_cast<const char*>(g.tokens.data()), n * sizeof(int64_t));
    if (!f) {
      std::remove(tmp.c_str());
      return;
    }
  }
  std::rename(tmp.c_str(), p.c_str());  // atomic: readers never see a partial entry
}

void dump_graph(const LazyGraph& g) {
  const char* dir = std::getenv("EMBER_DEBUG_DIR");
  if (!dir || !*dir) return;
  std::ostringstream name;
  name << dir << "/graph_" << std::hex << g.hash << ".lazy.txt";
  std::ofstream f(name.str());
  if (f) f << graph_text(g);
}

// Runs the aten backend's executable: one ATen step per node. A failing step poisons
// its outputs; independent steps still run, so every tensor that does not depend on
// the failure stays readable.
void run_aten(const Executable& ex, const LazyGraph& g, std::vector<at::Tensor>& outputs,
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
    std::string name = n->op->schema().name();
    if (!n->op->schema().overload_name().empty()) name += "." + n->op->schema().overload_name();
    s.externs[name]++;
  }
  return s;
}

// Whether root value `v` depends on op node `bad`.
bool depends_on(const Value& v, const Node* bad) {
  std::vector<const Node*> work{v.node.get()};
  std::unordered_set<const Node*> seen;
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    if (n == bad) return true;
    if (!seen.insert(n).second) continue;
    for (const Value& o : n->operands) work.push_back(o.node.get());
  }
  return false;
}

void bind_results(const std::vector<std::pair<StatePtr, Value>>& roots,
                  const std::vector<at::Tensor>& outputs, const std::vector<bool>& failed,
                  const std::string& error, bool only_failed = false) {
  std::vector<std::optional<Value>> released;
  std::lock_guard<std::mutex> lk(state_mutex());
  for (size_t i = 0; i < roots.size(); ++i) {
    if (only_failed && !failed[i]) continue;  // left pending for a later run
    auto& s = *roots[i].first;
    if (s.ir && *s.ir == roots[i].second) {
      released.push_back(std::move(s.ir));
      s.ir.reset();
      if (failed[i]) {
        s.error = error;
      } else {
        s.data = outputs[i];
      }
    }
  }
}

// EMBER_LOG=sync: one line per sync with where its fixed cost went (microseconds):
// gathering the pending roots, building + hashing the lazy graph, the cache lookup,
// the run (argument buffers, the executable, binding outputs as tensors) and binding
// the tensor states. Read once; a disabled topic costs one branch per sync.
bool log_sync() {
  static const bool on = ember::LogEnabled("sync");
  return on;
}
using SteadyClock = std::chrono::steady_clock;
double us_since(SteadyClock::time_point t) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - t).count();
}
thread_local double t_gather_us = 0;  // set by sync() for the line sync_roots prints

// Compiles (or finds) and runs the graph of `roots`, binding results. Throws the first
// error after binding every result that does not depend on it.
void sync_roots(const std::vector<std::pair<StatePtr, Value>>& roots, int depth,
                SyncCapture* capture = nullptr) {
  const bool timed = log_sync();
  auto tb = SteadyClock::now();
  LazyGraph g;
  build_lazy_graph(roots, g);
  const double build_us = timed ? us_since(tb) : 0;
  tb = SteadyClock::now();
  const int backend = config().backend.load();

  std::shared_ptr<CacheEntry> entry;
  bool hit = false;
  {
    std::lock_guard<std::mutex> lk(g_cache_mu);
    auto it = g_cache.find(g.hash);
    if (it != g_cache.end()) {
      for (auto& e : it->second) {
        if (e->backend == backend && e->tokens == g.tokens) {  // never trust the hash alone
          entry = e;
          hit = true;
          break;
        }
      }
    }
  }
  bool disk_hit = false;
  if (!entry) disk_hit = disk_cache_lookup(g, backend);
  if (!entry) {
    auto t0 = std::chrono::steady_clock::now();
    const auto cg0 = ember::codegen::GetCodegenStats();
    entry = std::make_shared<CacheEntry>();
    entry->backend = backend;
    entry->tokens = g.tokens;
    if (backend != static_cast<int>(Backend::kAten)) {
      std::string why;
      entry->lowered = lower_graph(g, static_cast<Backend>(backend), &why);
      if (!entry->lowered) {
        if (g_warn_hook) {
          static std::atomic<bool> warned{false};
          if (!warned.exchange(true)) {
            g_warn_hook("ember: a graph could not be lowered; it runs on the aten backend (" + why +
                        "; further cases: EMBER_LOG=lowering)");
          }
        }
        const char* e = std::getenv("EMBER_LOG");
        if (e && std::strstr(e, "lowering"))
          std::fprintf(stderr, "ember[lowering]: graph runs on aten: %s\n", why.c_str());
        std::lock_guard<std::mutex> mg(metrics().mu);
        metrics().lowering_failed_graphs++;
      }
    }
    if (!entry->lowered) {
      entry->aten = compile(g);
      entry->stats = aten_stats(g);
    } else {
      entry->stats = program_stats(*entry->lowered);
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto cg1 = ember::codegen::GetCodegenStats();
    std::string site = current_source();
    {
      std::lock_guard<std::mutex> lk(g_cache_mu);
      g_cache[g.hash].push_back(entry);
      log_recompile(site, g);
    }
    dump_graph(g);
    if (!disk_hit) disk_cache_store(g, backend);
    std::lock_guard<std::mutex> mg(metrics().mu);
    if (disk_hit) {
      metrics().disk_cache_hits++;
    } else {
      metrics().graphs_compiled++;
    }
    metrics().compile_seconds += dt;
    metrics().kernel_compiles += cg1.compiles - cg0.compiles;
    metrics().kernel_disk_hits += cg1.disk_hits - cg0.disk_hits;
    for (const auto& kv : entry->stats.declined) metrics().lowering_declined[kv.first] += kv.second;
    for (const auto& kv : entry->stats.lowering_errors)
      metrics().lowering_errors[kv.first] += kv.second;
  }
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().syncs += depth == 0 ? 1 : 0;
    if (hit) metrics().memory_cache_hits++;
  }
  set_last_graph(entry->stats);
  const double lookup_us = timed ? us_since(tb) : 0;
  if (timed) g_run_timing = RunTiming{};

  auto t0 = std::chrono::steady_clock::now();
  std::vector<at::Tensor> outputs;
  std::vector<bool> failed(roots.size(), false);
  std::exception_ptr first_error;
  if (entry->lowered) {
    LoweredRun r = run_lowered(*entry->lowered, g,
                               donate_buffers().load() ? donatable_inputs(g) : std::vector<bool>());
    if (!r.error) {
      outputs = std::move(r.outputs);
    } else {
      first_error = r.error;
      // Roots that do not depend on the failing node are computed again without it.
      const Node* bad = r.failed_op >= 0 ? g.ops[r.failed_op] : nullptr;
      std::vector<std::pair<StatePtr, Value>> rest;
      for (size_t i = 0; i < roots.size(); ++i) {
        if (r.root_failed.size() == roots.size())
          failed[i] = r.root_failed[i];
        else
          failed[i] = !bad || depends_on(roots[i].second, bad);
        if (!failed[i]) rest.push_back(roots[i]);
      }
      outputs.assign(roots.size(), at::Tensor());
      bind_results(roots, outputs, failed, error_text(first_error), /*only_failed=*/true);
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> mg(metrics().mu);
        metrics().execute_seconds += dt;
      }
      if (!rest.empty() && depth < 8) {
        try {
          sync_roots(rest, depth + 1);
        } catch (...) {
          // Reported already through the failed tensors' errors; the first error wins.
        }
      }
      std::rethrow_exception(first_error);
    }
  } else {
    run_aten(*entry->aten, g, outputs, failed, first_error);
  }
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().execute_seconds += dt;
  }
  tb = SteadyClock::now();
  bind_results(roots, outputs, failed, first_error ? error_text(first_error) : std::string());
  if (timed) {
    char line[320];
    std::snprintf(line, sizeof(line),
                  "roots=%zu ops=%zu inputs=%zu %s gather=%.1f build=%.1f lookup=%.1f run=%.1f "
                  "(args=%.1f exec=%.1f outputs=%.1f) bind=%.1f us",
                  roots.size(), g.ops.size(), g.inputs.size(), hit ? "hit" : "miss", t_gather_us,
                  build_us, lookup_us, dt * 1e6, g_run_timing.args_us, g_run_timing.exec_us,
                  g_run_timing.outputs_us, us_since(tb));
    ember::LogLine("sync", line);
  }
  if (first_error) std::rethrow_exception(first_error);
  if (capture && entry->lowered) {
    capture->program = entry->lowered;
    capture->stats = entry->stats;
    capture->roots = roots;
    capture->graph = std::move(g);
  }
}

}  // namespace

void sync_and_capture(const std::string& reason, SyncCapture* capture) {
  std::lock_guard<std::mutex> sync_lock(g_sync_mu);
  auto tg = SteadyClock::now();
  auto roots = pending_states();
  if (log_sync()) t_gather_us = us_since(tg);
  add_pending_ops(-1);
  if (roots.empty()) return;
  g_sync_generation.fetch_add(1);
  sync_roots(roots, 0, capture);
}

std::mutex& sync_mutex() { return g_sync_mu; }

void sync(const std::string& reason) { sync_and_capture(reason, nullptr); }

void maybe_sync_early() {
  int64_t cap = config().max_pending_ops.load();
  if (cap <= 0 || pending_op_count() < cap) return;
  if (!g_cap_warned.exchange(true) && g_warn_hook) {
    g_warn_hook("ember: more than " + std::to_string(cap) +
                " ops pending without a sync; syncing early (call ember.sync() in loops "
                "without an optimizer step; ember.config.max_pending_ops sets the cap)");
  }
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().early_syncs++;
  }
  sync("pending-op cap");
}

std::string graph_debug_text() {
  auto roots = pending_states();
  if (roots.empty()) return "";
  LazyGraph g;
  build_lazy_graph(roots, g);
  return graph_text(g);
}

int64_t sync_generation() { return g_sync_generation.load(); }

int64_t cache_size() {
  std::lock_guard<std::mutex> lk(g_cache_mu);
  int64_t n = 0;
  for (auto& kv : g_cache) n += kv.second.size();
  return n;
}

void clear_cache() {
  std::lock_guard<std::mutex> lk(g_cache_mu);
  g_cache.clear();
  g_sites.clear();
}

}  // namespace ember_torch
