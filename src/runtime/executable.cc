// Executable::Run and DebugString. All per-run state (the slot table, the
// list of overwritten donated parameters) lives on Run's stack, so one
// Executable can run on several threads at once.
#include "ember/runtime/executable.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <map>
#include <sstream>
#include <unordered_map>

#include "ember/eval/interpreter.h"
#include "ember/runtime/step_observer.h"
#include "ember/runtime/thread_pool.h"
#include "passes/buffer_assignment.h"

namespace ember {
namespace {

std::string JoinNodes(const std::vector<NodeId>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? " " : "") << "%" << ids[i];
  return os.str();
}

std::string StepLabel(const Step& step, size_t index) {
  std::ostringstream os;
  os << "step " << index << " (" << StepKindName(step.kind);
  if (step.kind == StepKind::kExtern || step.kind == StepKind::kKernel) {
    os << " " << step.kernel_name;
  }
  os << ")";
  return os.str();
}

// Prefixes `st`'s message with "<op> %<id>: " unless it already starts so
// (the interpreter's and the reference kernels' messages do).
Status NameNode(const Node& node, const Status& st) {
  const std::string label = internal::StrCat(OpName(node.op), " %", node.id);
  const std::string& m = st.message();
  if (m.compare(0, label.size(), label) == 0 &&
      (m.size() == label.size() || !isdigit(static_cast<unsigned char>(m[label.size()])))) {
    return st;
  }
  return Status(st.code(), internal::StrCat(label, ": ", m));
}

// The value a read refers to, or an internal error if the slot is empty.
StatusOr<const Literal*> Resolve(const std::vector<BufferRef>& slots, const SlotRead& r) {
  if (r.slot < 0 || r.slot >= static_cast<int>(slots.size()) || !slots[r.slot]) {
    return EMBER_INTERNAL_ERROR("runtime: slot s", r.slot, " read before it was written");
  }
  const Literal& lit = slots[r.slot]->literal();
  if (r.tuple_index < 0) return &lit;
  if (r.tuple_index >= static_cast<int>(lit.tuple_elements().size())) {
    return EMBER_INTERNAL_ERROR("runtime: slot s", r.slot, " has no tuple element ", r.tuple_index);
  }
  return &lit.tuple_elements()[r.tuple_index];
}

StatusOr<std::vector<const Literal*>> ResolveAll(const std::vector<BufferRef>& slots,
                                                 const std::vector<SlotRead>& reads) {
  std::vector<const Literal*> out;
  out.reserve(reads.size());
  for (const SlotRead& r : reads) {
    EMBER_ASSIGN_OR_RETURN(const Literal* lit, Resolve(slots, r));
    out.push_back(lit);
  }
  return out;
}

// After a subgraph failed: re-runs its original nodes one by one to name the
// node that fails (by its id in the compiled graph). Only on the error path.
Status LocateInterpretFailure(const Step& step, const std::vector<const Literal*>& inputs,
                              const Status& failure) {
  std::map<NodeId, const Literal*> value;
  for (size_t i = 0; i < step.read_nodes.size(); ++i) value[step.read_nodes[i]] = inputs[i];
  std::map<NodeId, Literal> computed;
  for (const Node& node : step.original_nodes) {
    if (value.count(node.id)) continue;  // read directly from a slot
    std::vector<const Literal*> ops;
    for (NodeId op : node.operands) {
      auto it = value.find(op);
      if (it == value.end()) return failure;  // cannot reconstruct: keep the original error
      ops.push_back(it->second);
    }
    StatusOr<Literal> r = EvaluateNode(node, ops);
    if (!r.ok()) return NameNode(node, r.status());
    auto [it, inserted] = computed.emplace(node.id, std::move(r).value());
    value[node.id] = &it->second;
  }
  return failure;
}

// Whether `lit` (and each tuple element) still has `shape`.
bool HasShape(const Literal& lit, const Shape& shape) {
  if (lit.shape() != shape) return false;
  if (!shape.is_tuple()) return lit.size_bytes() == shape.byte_size();
  if (lit.tuple_elements().size() != shape.tuple_shapes().size()) return false;
  for (size_t i = 0; i < lit.tuple_elements().size(); ++i) {
    if (!HasShape(lit.tuple_elements()[i], shape.tuple_shapes()[i])) return false;
  }
  return true;
}

// The result buffer of an extern step: an array, or a tuple whose elements are
// uninitialized bytes of their own or, per Step::element_into_param, a donated
// parameter's buffer (recorded in `overwritten`: the extern may write it).
BufferRef ExternResult(const Step& step, const std::vector<BufferRef>& args,
                       const std::vector<bool>& donated, std::vector<int>& overwritten) {
  const Shape& shape = step.extern_node.shape;
  if (!shape.is_tuple()) return Buffer::Uninitialized(shape);
  std::vector<Literal> elements;
  elements.reserve(shape.tuple_shapes().size());
  for (size_t j = 0; j < shape.tuple_shapes().size(); ++j) {
    const Shape& es = shape.tuple_shapes()[j];
    const int p = j < step.element_into_param.size() ? step.element_into_param[j] : -1;
    if (p >= 0 && donated[p]) {
      StatusOr<Literal> b = Literal::Borrow(es, args[p]->data(), args[p]);
      if (b.ok()) {
        elements.push_back(std::move(b).value());
        overwritten.push_back(p);
        continue;
      }
    }
    elements.push_back(Literal::Uninitialized(es));
  }
  return Buffer::FromLiteral(Literal::Tuple(std::move(elements)));
}

Status RunExtern(const Step& step, std::vector<BufferRef>& slots,
                 const std::vector<BufferRef>& args, const std::vector<bool>& donated,
                 std::vector<int>& overwritten) {
  EMBER_ASSIGN_OR_RETURN(auto inputs, ResolveAll(slots, step.reads));
  BufferRef out = ExternResult(step, args, donated, overwritten);
  ExternCall call;
  call.node = &step.extern_node;
  call.inputs = std::move(inputs);
  Literal& lit = out->literal();
  if (lit.shape().is_tuple()) {
    for (Literal& e : lit.tuple_elements()) call.outputs.push_back(&e);
  } else {
    call.outputs.push_back(&lit);
  }
  Status st = step.kernel(call);
  if (!st.ok()) return NameNode(step.extern_node, st);
  // Outputs handed over (ExternCall::adopted): the bytes become the result's without a
  // copy; the preallocated ones go back to the buffer cache.
  st = CheckAdopted(call);
  if (!st.ok()) return NameNode(step.extern_node, st);
  for (size_t k = 0; k < call.adopted.size(); ++k) {
    ExternCall::Adopted& a = call.adopted[k];
    if (a.data == nullptr) continue;
    if (out->shape().is_tuple()) {
      EMBER_RETURN_IF_ERROR(out->AdoptElement(k, a.data, std::move(a.owner)));
    } else {
      EMBER_ASSIGN_OR_RETURN(out, Buffer::Adopt(out->shape(), a.data, std::move(a.owner)));
    }
  }
  if (!HasShape(out->literal(), step.extern_node.shape)) {
    return NameNode(step.extern_node, EMBER_INTERNAL_ERROR("extern kernel '", step.kernel_name,
                                                           "' changed its output's shape to ",
                                                           out->shape().ToString()));
  }
  slots[step.writes[0]] = std::move(out);
  return OkStatus();
}

Status RunInterpret(const Step& step, std::vector<BufferRef>& slots) {
  EMBER_ASSIGN_OR_RETURN(auto inputs, ResolveAll(slots, step.reads));
  StatusOr<std::vector<Literal>> results = Evaluate(*step.subgraph, inputs);
  if (!results.ok()) return LocateInterpretFailure(step, inputs, results.status());
  if (results->size() != step.writes.size()) {
    return EMBER_INTERNAL_ERROR("runtime: subgraph returned ", results->size(),
                                " values, expected ", step.writes.size());
  }
  for (size_t j = 0; j < step.writes.size(); ++j) {
    slots[step.writes[j]] = Buffer::FromLiteral(std::move((*results)[j]));
  }
  return OkStatus();
}

// Planned raw storage of one run: one allocation per planned buffer.
struct PlannedStorage {
  std::vector<BufferRef> buffers;  // u8[bytes] each, recycled across runs
  std::vector<void*> slot_ptr;     // slot -> its planned bytes, or null
};

// The raw pointer a kernel reads for `r`.
StatusOr<const void*> KernelInput(const std::vector<BufferRef>& slots, const PlannedStorage& ps,
                                  const SlotRead& r) {
  if (r.tuple_index < 0 && r.slot >= 0 && r.slot < static_cast<int>(ps.slot_ptr.size()) &&
      ps.slot_ptr[r.slot]) {
    return static_cast<const void*>(ps.slot_ptr[r.slot]);
  }
  EMBER_ASSIGN_OR_RETURN(const Literal* lit, Resolve(slots, r));
  return lit->data();
}

Status RunKernel(const Step& step, std::vector<BufferRef>& slots, const PlannedStorage& ps,
                 const std::vector<BufferRef>& args, const std::vector<bool>& donated,
                 std::vector<int>& overwritten) {
  const codegen::CompiledKernel& k = *step.compiled;
  std::vector<const void*> in;
  in.reserve(step.reads.size());
  for (const SlotRead& r : step.reads) {
    EMBER_ASSIGN_OR_RETURN(const void* p, KernelInput(slots, ps, r));
    in.push_back(p);
  }
  std::vector<void*> out;
  std::vector<BufferRef> fresh(step.writes.size());
  // The donated parameter write j goes into, or -1.
  auto into_param = [&](size_t j) {
    const int p = j < step.write_into_param.size() ? step.write_into_param[j] : -1;
    return p >= 0 && donated[p] ? p : -1;
  };
  for (size_t j = 0; j < step.writes.size(); ++j) {
    const int w = step.writes[j];
    const int into = into_param(j);
    if (into >= 0) {  // a donated output, written in place
      fresh[j] = args[into];
      out.push_back(fresh[j]->data());
    } else if (ps.slot_ptr[w]) {
      out.push_back(ps.slot_ptr[w]);
    } else {
      fresh[j] = Buffer::Uninitialized(k.output_shapes()[j]);
      out.push_back(fresh[j]->data());
    }
  }
  Status st = k.Run(in, out, RuntimeParallelFor());
  if (!st.ok()) {
    if (step.fusion) return NameNode(step.original_nodes[0], st);
    // Name the failing node by its id in the compiled graph: re-run the
    // original nodes in the interpreter (error path only).
    std::vector<Literal> copies;
    copies.reserve(in.size());
    std::vector<const Literal*> lits;
    for (size_t i = 0; i < in.size(); ++i) {
      Literal l(k.parameter_shapes()[i]);
      if (l.size_bytes() > 0) std::memcpy(l.data(), in[i], static_cast<size_t>(l.size_bytes()));
      copies.push_back(std::move(l));
    }
    for (const Literal& l : copies) lits.push_back(&l);
    return LocateInterpretFailure(step, lits, st);
  }
  for (size_t j = 0; j < step.writes.size(); ++j) {
    if (const int into = into_param(j); into >= 0) overwritten.push_back(into);
    if (fresh[j]) slots[step.writes[j]] = std::move(fresh[j]);
  }
  return OkStatus();
}

Status RunCopy(const Step& step, std::vector<BufferRef>& slots, const std::vector<BufferRef>& args,
               const std::vector<bool>& donated, std::vector<int>& overwritten) {
  EMBER_ASSIGN_OR_RETURN(const Literal* src, Resolve(slots, step.reads[0]));
  const int p = step.donation_param;
  const bool donate = p >= 0 && donated[p];
  if (p >= 0 && !donate) {  // not donated: share the value, nothing is copied
    slots[step.writes[0]] = slots[step.reads[0].slot];
    return OkStatus();
  }
  if (step.into_param) {
    EMBER_RETURN_IF_ERROR(args[p]->CopyFrom(*src));
    overwritten.push_back(p);
    slots[step.writes[0]] = args[p];
    return OkStatus();
  }
  slots[step.writes[0]] = Buffer::FromLiteral(*src);
  return OkStatus();
}

}  // namespace

namespace {
std::atomic<StepObserver*> g_step_observer{nullptr};

// Ends an observed step on every path out of it (error returns, exceptions).
struct ObservedStep {
  StepObserver* observer;
  void* token;
  ObservedStep(StepObserver* o, const Executable& exe, size_t index)
      : observer(o), token(o ? o->Begin(exe, index) : nullptr) {}
  ~ObservedStep() {
    if (observer) observer->End(token);
  }
};
}  // namespace

void SetStepObserver(StepObserver* observer) {
  g_step_observer.store(observer, std::memory_order_release);
}
StepObserver* GetStepObserver() { return g_step_observer.load(std::memory_order_acquire); }

std::string StepDisplayName(const Executable& exe, size_t index) {
  const Step& step = exe.steps().at(index);
  switch (step.kind) {
    case StepKind::kKernel:
      return step.kernel_name;
    case StepKind::kExtern: {
      // ATen custom-calls are named "aten:<op>#<k>" (one target per node).
      const std::string& n = step.kernel_name;
      if (n.rfind("aten:", 0) == 0) {
        const size_t hash = n.rfind('#');
        return n.substr(5, hash == std::string::npos ? std::string::npos : hash - 5);
      }
      return n;
    }
    case StepKind::kInterpret:
      return "ember.interpret";
    case StepKind::kCopy:
      return "ember.copy";
  }
  return "ember.step";
}

std::string StepSourceSummary(const Executable& exe, size_t index, size_t max_items) {
  const Step& step = exe.steps().at(index);
  std::vector<std::string> items;
  auto add = [&](const std::string& m) {
    if (m.empty() || std::find(items.begin(), items.end(), m) != items.end()) return;
    items.push_back(m);
  };
  auto add_node = [&](const Node& n) {
    add(n.metadata);
    if (n.called) {
      for (const Node& inner : n.called->nodes()) add(inner.metadata);
    }
  };
  if (!step.original_nodes.empty()) {
    for (const Node& n : step.original_nodes) add_node(n);
  } else {
    for (NodeId id : step.nodes) add_node(exe.graph().node(id));
  }
  std::string out;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > max_items) out += "; ...";
  return out;
}

std::string_view StepKindName(StepKind k) {
  switch (k) {
    case StepKind::kExtern:
      return "extern";
    case StepKind::kInterpret:
      return "interpret";
    case StepKind::kCopy:
      return "copy";
    case StepKind::kKernel:
      return "kernel";
  }
  return "?";
}

StatusOr<std::vector<BufferRef>> Executable::Run(const std::vector<BufferRef>& args,
                                                 const ExecuteOptions& options) const {
  const size_t num_params = parameter_shapes_.size();
  if (args.size() != num_params) {
    return InvalidArgument("run ", graph_->name(), ": expected ", num_params, " arguments, got ",
                           args.size());
  }
  for (size_t i = 0; i < num_params; ++i) {
    if (!args[i]) return InvalidArgument("run ", graph_->name(), ": argument ", i, " is null");
    if (args[i]->shape() != parameter_shapes_[i]) {
      return InvalidArgument("run ", graph_->name(), ": argument ", i, " has shape ",
                             args[i]->shape().ToString(), ", parameter(", i, ") expects ",
                             parameter_shapes_[i].ToString());
    }
  }
  // A buffer passed in two places is never donated: overwriting it would
  // change the other argument.
  std::vector<bool> donated(num_params, false);
  if (std::find(options.donated.begin(), options.donated.end(), true) != options.donated.end()) {
    std::vector<const Buffer*> sorted;  // the arguments' buffers, to count each one's places
    sorted.reserve(args.size());
    for (const BufferRef& a : args) sorted.push_back(a.get());
    std::sort(sorted.begin(), sorted.end());
    for (size_t p = 0; p < num_params && p < options.donated.size(); ++p) {
      if (!options.donated[p]) continue;
      auto [lo, hi] = std::equal_range(sorted.begin(), sorted.end(), args[p].get());
      donated[p] = hi - lo == 1;
    }
  }

  std::vector<BufferRef> slots(num_slots_);
  for (size_t i = 0; i < num_params; ++i) slots[i] = args[i];
  // Planned buffers: allocated once for this run.
  PlannedStorage planned;
  planned.slot_ptr.assign(num_slots_, nullptr);
  if (!planned_bytes_.empty()) {
    std::vector<void*> by_buffer(planned_bytes_.size(), nullptr);
    for (size_t b = 0; b < planned_bytes_.size(); ++b) {
      if (planned_bytes_[b] <= 0) continue;
      planned.buffers.push_back(Buffer::Uninitialized(Shape(DType::kU8, {planned_bytes_[b]})));
      by_buffer[b] = planned.buffers.back()->data();
    }
    for (int s = 0; s < num_slots_; ++s) {
      const int b = planned_buffer_of_[s];
      if (b >= 0) planned.slot_ptr[s] = by_buffer[b];
    }
  }
  std::vector<int> overwritten;
  StepObserver* const observer = GetStepObserver();
  for (size_t si = 0; si < steps_.size(); ++si) {
    const Step& step = steps_[si];
    // Once a kernel wrote a donated argument in place nothing after it can
    // fail: the run finishes, so no argument is left half-updated.
    if (options.cancel && overwritten.empty() && options.cancel->load(std::memory_order_relaxed)) {
      return Status(
          StatusCode::kCancelled,
          internal::StrCat("run ", graph_->name(), " cancelled before ", StepLabel(step, si)));
    }
    Status st;
    ObservedStep observed(observer, *this, si);
    try {
      switch (step.kind) {
        case StepKind::kExtern:
          st = RunExtern(step, slots, args, donated, overwritten);
          break;
        case StepKind::kInterpret:
          st = RunInterpret(step, slots);
          break;
        case StepKind::kCopy:
          st = RunCopy(step, slots, args, donated, overwritten);
          break;
        case StepKind::kKernel:
          st = RunKernel(step, slots, planned, args, donated, overwritten);
          break;
      }
    } catch (const std::bad_alloc&) {
      // A buffer too large for the host: an error status, never an abort.
      Status oom(StatusCode::kResourceExhausted, "out of memory allocating a buffer");
      st = step.nodes.empty() ? oom : NameNode(graph_->node(step.nodes[0]), oom);
    }
    if (!st.ok()) {
      std::string msg = internal::StrCat(StepLabel(step, si), ": ", st.message());
      if (!overwritten.empty()) {
        msg += "; donated parameters already overwritten (their buffers are now invalid):";
        for (int p : overwritten) msg += internal::StrCat(" parameter(", p, ")");
      }
      return Status(st.code(), msg);
    }
    for (int s : step.release_after) slots[s].reset();
  }
  std::vector<BufferRef> outputs;
  outputs.reserve(output_slots_.size());
  for (size_t o = 0; o < output_slots_.size(); ++o) {
    const int s = output_slots_[o];
    if (!slots[s]) return EMBER_INTERNAL_ERROR("runtime: output slot s", s, " never written");
    const int ti = output_tuple_indices_[o];
    if (ti < 0) {
      outputs.push_back(slots[s]);
      continue;
    }
    if (output_repeats_[o] >= 0) {  // an element returned twice: one buffer twice
      outputs.push_back(outputs[output_repeats_[o]]);
      continue;
    }
    // A tuple this run made and nobody else holds (an extern's results): the element's
    // bytes become a buffer of their own, so the caller can keep them without a copy
    // and without keeping the other elements alive.
    if (!output_in_whole_tuple_[o] && slots[s].use_count() == 1) {
      if (BufferRef own = slots[s]->TakeElement(static_cast<size_t>(ti))) {
        outputs.push_back(std::move(own));
        continue;
      }
    }
    Literal& element = slots[s]->literal().tuple_elements().at(static_cast<size_t>(ti));
    EMBER_ASSIGN_OR_RETURN(BufferRef b, Buffer::Borrow(element.shape(), element.data(), slots[s]));
    outputs.push_back(std::move(b));
  }
  return outputs;
}

StatusOr<std::vector<Literal>> Executable::RunLiterals(const std::vector<Literal>& args) const {
  std::vector<BufferRef> bufs;
  bufs.reserve(args.size());
  for (const Literal& a : args) bufs.push_back(Buffer::FromLiteral(a));
  EMBER_ASSIGN_OR_RETURN(auto outs, Run(bufs));
  std::vector<Literal> result;
  result.reserve(outs.size());
  for (const BufferRef& b : outs) result.push_back(b->literal());
  return result;
}

std::string Executable::AssignmentDebugString() const {
  return assignment_ ? assignment_->DebugString() : std::string();
}

MemoryPlan Executable::memory_plan() const {
  MemoryPlan m;
  if (assignment_) m.peak_bytes = assignment_->stats.peak_bytes;
  for (int64_t b : planned_bytes_) {
    if (b <= 0) continue;
    m.planned_bytes += b;
    ++m.planned_buffers;
  }
  return m;
}

std::string Executable::DebugString() const {
  std::ostringstream os;
  auto slot_str = [&](int s) { return internal::StrCat("s", s, "=", slot_names_[s]); };
  os << "executable " << graph_->name() << ": " << parameter_shapes_.size() << " parameters, "
     << num_slots_ << " slots, " << steps_.size() << " steps\n";
  for (size_t si = 0; si < steps_.size(); ++si) {
    const Step& step = steps_[si];
    os << "  step " << si << ": " << StepKindName(step.kind);
    if (step.kind == StepKind::kExtern || step.kind == StepKind::kKernel) {
      os << " " << step.kernel_name;
    }
    os << " " << JoinNodes(step.nodes);
    if (step.kind == StepKind::kKernel && step.in_place_read >= 0) {
      os << " (in-place candidate: read " << step.in_place_read << ")";
    }
    for (size_t j = 0; j < step.write_into_param.size(); ++j) {
      if (step.write_into_param[j] >= 0) {
        os << " (write " << j << " into parameter(" << step.write_into_param[j] << ") if donated)";
      }
    }
    if (step.kind == StepKind::kCopy) {
      if (step.donation_param < 0) {
        os << " (fresh copy)";
      } else if (step.into_param) {
        os << " (into parameter(" << step.donation_param << ") if donated)";
      } else {
        os << " (snapshot of parameter(" << step.donation_param << ") if donated)";
      }
    }
    os << " reads [";
    for (size_t i = 0; i < step.reads.size(); ++i) {
      os << (i ? ", " : "") << slot_str(step.reads[i].slot);
      if (step.reads[i].tuple_index >= 0) os << "." << step.reads[i].tuple_index;
    }
    os << "] writes [";
    for (size_t i = 0; i < step.writes.size(); ++i)
      os << (i ? ", " : "") << slot_str(step.writes[i]);
    os << "]\n";
  }
  os << "  outputs [";
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    os << (i ? ", " : "") << slot_str(output_slots_[i]);
    if (output_tuple_indices_[i] >= 0) os << "." << output_tuple_indices_[i];
  }
  os << "]\n";
  return os.str();
}

}  // namespace ember
