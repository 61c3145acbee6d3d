// Compile: partitions a verified graph into runtime steps (see
// include/ember/runtime/executable.h).
//
//  1. Keep the nodes some output depends on.
//  2. Walk them in order: each extern node (dot-general, convolution,
//     custom-call) is its own kExtern step; each run of other nodes between
//     two externs becomes one kInterpret step with its own subgraph.
//  3. Give a slot to every parameter (slots 0..P-1) and to every value read
//     by another step or returned as an output.
//  4. Donation: for each alias (output o -> parameter p) add a kCopy step
//     that writes o into p's buffer right after the last read of p; an
//     output that *is* such a parameter is first snapshotted.
//  5. Record, per step, the slots whose last reader it is, so intermediate
//     buffers are freed as soon as they are dead.
//  6. (kCpu) Compile every kernel group in parallel; Unimplemented ones
//     become interpret steps. Then buffer assignment over the schedule.
//
// With backend kCpu, step 2 also makes each fusion node its own kernel group
// and splits the other runs into kernel runs (codegen-supported nodes) and
// interpret runs.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "ember/codegen/cpu.h"
#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ember/ir/hash.h"
#include "ember/ir/text.h"
#include "ember/passes/pass.h"
#include "ember/runtime/executable.h"
#include "ember/version.h"
#include "ir/debug_dump.h"
#include "ir/log.h"
#include "passes/barrier_expansion.h"
#include "passes/buffer_assignment.h"
#include "passes/memory_scheduling.h"

namespace ember {
namespace {

// kFusionSet: several independent fusion nodes run as one kernel, their
// bodies side by side (MergeFusionGroups).
enum class GroupKind { kExtern, kInterpret, kKernelRun, kFusion, kFusionSet };

struct Group {
  GroupKind kind = GroupKind::kInterpret;
  std::vector<NodeId> nodes;
};

std::string NodeRef(NodeId id) { return internal::StrCat("%", id); }

bool RealArray(const Shape& s) { return !s.is_tuple() && !IsComplex(s.dtype()); }

// Ops the CPU code generator handles (include/ember/codegen/cpu.h); the
// code generator has the final word (Unimplemented falls back).
bool CodegenSupported(const Graph& g, const Node& n) {
  if (!RealArray(n.shape)) return false;
  for (NodeId op : n.operands) {
    if (!RealArray(g.node(op).shape)) return false;
  }
  // Tuples stay out of runtime-made kernels (RealArray above); the op list
  // itself is the code generator's.
  return codegen::CodegenSupportsOp(n.op) && n.op != OpKind::kTuple &&
         n.op != OpKind::kGetTupleElement && n.op != OpKind::kParameter;
}

// Whether `from` and every node reached from it through users (transitively) satisfy
// `ok`: the walk behind the in-place and same-index checks below.
bool EveryNodeReachedFrom(const Graph& body, NodeId from,
                          const std::function<bool(const Node&)>& ok) {
  const auto users = body.ComputeUsers();
  std::vector<NodeId> work = {from};
  std::set<NodeId> seen;
  while (!work.empty()) {
    const NodeId id = work.back();
    work.pop_back();
    if (!seen.insert(id).second) continue;
    if (!ok(body.node(id))) return false;
    for (NodeId u : users[id]) work.push_back(u);
  }
  return true;
}

// Whether kernel body `body` may write output `j` over parameter `p`'s buffer:
// p has output j's shape and every path from p goes through elementwise ops
// of that shape and ends at outputs that the kernel computes in output j's loop
// (codegen::OutputLoops: one iteration computes element i of all of them), no data
// movement, no reduce. The kernel then reads element i of p only in the iteration that
// computes element i of output j, before storing it, and no other loop reads p at all.
bool ElementwiseIntoOutput(const Graph& body, int p, int j) {
  if (p >= static_cast<int>(body.parameters().size()) ||
      j >= static_cast<int>(body.outputs().size())) {
    return false;
  }
  const NodeId out_node = body.outputs()[j];
  const Shape& out = body.node(out_node).shape;
  const NodeId pid = body.parameters()[p];
  if (body.node(pid).shape != out || out.is_tuple()) return false;
  for (size_t k = 0; k < body.outputs().size(); ++k) {
    if (static_cast<int>(k) != j && body.outputs()[k] == out_node) return false;
  }
  const std::vector<int> loop_of = codegen::OutputLoops(body);
  std::set<NodeId> outputs, in_loop;
  for (size_t k = 0; k < body.outputs().size(); ++k) {
    outputs.insert(body.outputs()[k]);
    if (loop_of[k] >= 0 && loop_of[k] == loop_of[j]) in_loop.insert(body.outputs()[k]);
  }
  in_loop.insert(out_node);
  return EveryNodeReachedFrom(body, pid, [&](const Node& x) {
    if (outputs.count(x.id) && !in_loop.count(x.id)) return false;  // p reaches another loop
    return x.id == pid || (IsElementwise(x.op) && x.shape.dims() == out.dims());
  });
}

// Whether `body` computes its output element i from element i of parameter
// `p` only: every path from p to the output goes through elementwise ops of
// the output's shape (no data movement, no reduce).
bool ElementwiseFromParameter(const Graph& body, int p) {
  return body.outputs().size() == 1 && ElementwiseIntoOutput(body, p, 0);
}

// Bounds of one merged kernel (MergeFusionGroups): fusions and body nodes.
constexpr size_t kMaxMergedFusions = 16;
constexpr int kMaxMergedNodes = 512;

// memory-scheduling (and horizontal fusion's limit on deferring large last
// reads) is off until the whole test suite has run with it on.
bool MemorySchedulingOnByEnv() {
  const char* f = std::getenv("EMBER_MEMORY_SCHEDULING");
  return f && std::string(f) == "1";
}

bool MergeFusionsOffByEnv() {
  const char* f = std::getenv("EMBER_MERGE_FUSIONS");
  return f && std::string(f) == "0";
}

// Whether fusion node `n` may share a kernel with others: loop and input
// fusions (its `kind`, ember/ir/fusion_analysis.h). Row fusions (softmax,
// layer norm) stay alone so that their kernel keeps the one-pass row plan
// (docs/codegen.md "Row kernels"), which the other fusions' outputs would
// break; scatter fusions keep their serial phase alone.
bool Mergeable(const Node& n) {
  if (n.op != OpKind::kFusion || !n.called || n.called->outputs().size() != 1) return false;
  const auto kind = attr::Kind.Find(n.attrs);
  return kind == FusionKind::kLoop || kind == FusionKind::kInput;
}

// Whether `body` reads parameter `p` only at the linear index of the output element it
// computes: every path from p to the output goes through elementwise ops and reshapes
// (row-major: a reshape keeps each element's linear index), and p has as many elements.
bool ReadsParameterAtOutputIndex(const Graph& body, int p) {
  if (body.outputs().size() != 1 || p >= static_cast<int>(body.parameters().size())) return false;
  const NodeId pid = body.parameters()[p];
  const Shape& ps = body.node(pid).shape;
  const Shape& os = body.node(body.outputs()[0]).shape;
  if (ps.is_tuple() || os.is_tuple() || ps.num_elements() != os.num_elements()) return false;
  return EveryNodeReachedFrom(body, pid, [&](const Node& x) {
    return x.id == pid || (!x.shape.is_tuple() && x.shape.num_elements() == ps.num_elements() &&
                           (IsElementwise(x.op) || x.op == OpKind::kReshape));
  });
}

// Whether loop fusion `c` reads loop fusion `p`'s result only at the element it computes
// (ReadsParameterAtOutputIndex for each of c's operands that is p), both of shapes one
// loop computes (codegen::OneLoopShapes). Merged into one kernel, c then reads p's value
// where the kernel's loop computes it (docs/codegen.md "Loop fusion": such outputs share
// one loop), instead of from memory in a later loop.
bool ReadsAtItsIndex(const Graph& g, NodeId c, NodeId p) {
  const Node& cn = g.node(c);
  const Node& pn = g.node(p);
  if (!Mergeable(cn) || !Mergeable(pn) || attr::Kind.Find(cn.attrs) != FusionKind::kLoop ||
      attr::Kind.Find(pn.attrs) != FusionKind::kLoop ||
      !codegen::OneLoopShapes(cn.shape, pn.shape)) {
    return false;
  }
  bool any = false;
  for (size_t i = 0; i < cn.operands.size(); ++i) {
    if (cn.operands[i] != p) continue;
    if (!ReadsParameterAtOutputIndex(*cn.called, static_cast<int>(i))) return false;
    any = true;
  }
  return any;
}

// Scatter prologues: a loop fusion whose one reader is a scatter in a kernel
// run (an embedding backward's masked updates `select(ids == pad, 0, dy)`, its
// zero destination, its reshaped ids), and that is no graph output, moves into
// the scatter's group, so the scatter's kernel computes it where it reads it
// (docs/codegen.md "gather / scatter") instead of writing and reading it back
// (64 MiB for the bench's embedding_bwd). The fusion only moves later, to its
// only reader's group, so every value is still computed before it is read.
// EMBER_FUSE_INTO_SCATTER=0 keeps them apart (A/B; the same values).
std::vector<Group> FuseIntoScatters(const Graph& g, std::vector<Group> groups) {
  const char* env = std::getenv("EMBER_FUSE_INTO_SCATTER");
  if (env && std::string(env) == "0") return groups;
  const auto users = g.ComputeUsers();
  std::vector<bool> is_output(g.num_nodes(), false);
  for (NodeId o : g.outputs()) is_output[o] = true;
  std::vector<int> group_of(g.num_nodes(), -1);
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (NodeId id : groups[gi].nodes) group_of[id] = static_cast<int>(gi);
  std::vector<bool> moved(groups.size(), false);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (groups[gi].kind != GroupKind::kKernelRun) continue;
    std::vector<NodeId> add;
    for (NodeId id : groups[gi].nodes) {
      const Node& s = g.node(id);
      if (s.op != OpKind::kScatter) continue;
      for (NodeId op : s.operands) {
        const int og = group_of[op];
        if (og < 0 || moved[og] || groups[og].kind != GroupKind::kFusion) continue;
        const Node& f = g.node(op);
        if (is_output[op] || attr::Kind.Find(f.attrs) != FusionKind::kLoop || !f.called ||
            f.called->outputs().size() != 1 ||
            std::any_of(users[op].begin(), users[op].end(), [&](NodeId u) { return u != id; })) {
          continue;
        }
        moved[og] = true;
        add.push_back(op);
      }
    }
    if (add.empty()) continue;
    std::vector<NodeId>& nodes = groups[gi].nodes;
    nodes.insert(nodes.end(), add.begin(), add.end());
    std::sort(nodes.begin(), nodes.end());
  }
  std::vector<Group> out;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (!moved[gi]) out.push_back(std::move(groups[gi]));
  }
  return out;
}

// Bytes of the buffers pending fusions may free (their last reads) before a
// merge stops deferring them past other groups (MergeFusionGroups): merging
// saves a kernel dispatch, which matters for small values; deferring the
// last reader of a large one raises the peak the memory scheduler lowered.
constexpr int64_t kMaxDeferredFreeBytes = 64 << 10;

// Horizontal fusion over the group list (in node order). Mergeable fusion
// groups are collected into pending sets by level: a fusion joins the set
// one level above the highest pending set it reads (level 0 if it reads
// none), so a set never reads its own results. The sets run as kFusionSet
// groups in level order, placed just before the first other group that
// reads a pending result (or at the end), or that would run while the
// pending fusions hold more than `max_deferred_free_bytes` they are the last
// to read (kMaxDeferredFreeBytes with memory-scheduling on, else no limit); a fusion whose set is
// full first flushes them all. Other groups keep their order; a pending fusion only moves later,
// past groups that do not read it, and after the sets it reads, so every value is still computed
// before it is read.
std::vector<Group> MergeFusionGroups(const Graph& g, std::vector<Group> groups,
                                     int64_t max_deferred_free_bytes) {
  struct Pending {
    std::vector<NodeId> nodes;
    int body = 0;
  };
  // The last group reading each value; graph outputs count as read at the end.
  std::vector<int> last_group(g.num_nodes(), -1);
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (NodeId id : groups[gi].nodes)
      for (NodeId op : g.node(id).operands) last_group[op] = static_cast<int>(gi);
  for (NodeId o : g.outputs()) last_group[o] = static_cast<int>(groups.size());
  std::vector<Group> out;
  std::vector<Pending> levels;
  std::map<NodeId, int> level_of;  // pending fusion -> its level
  int64_t pending_free = 0;        // bytes the pending fusions read last
  auto flush = [&] {
    pending_free = 0;
    for (Pending& p : levels) {
      if (p.nodes.size() == 1) {
        out.push_back(Group{GroupKind::kFusion, p.nodes});
      } else if (!p.nodes.empty()) {
        out.push_back(Group{GroupKind::kFusionSet, p.nodes});
      }
    }
    levels.clear();
    level_of.clear();
  };
  // The level `grp` joins: above every pending set it reads, or in the set of a pending
  // loop fusion it reads at the same element index (ReadsAtItsIndex); 0 if it reads none.
  auto level_after = [&](const Group& grp) {
    int level = 0;
    for (NodeId id : grp.nodes)
      for (NodeId op : g.node(id).operands) {
        auto it = level_of.find(op);
        if (it == level_of.end()) continue;
        const bool same_loop = grp.kind == GroupKind::kFusion && ReadsAtItsIndex(g, id, op);
        level = std::max(level, it->second + (same_loop ? 0 : 1));
      }
    return level;
  };
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& grp = groups[gi];
    const bool mergeable = grp.kind == GroupKind::kFusion && Mergeable(g.node(grp.nodes[0]));
    int level = level_after(grp);
    if (!mergeable) {
      if (level > 0 || pending_free > max_deferred_free_bytes) flush();
      out.push_back(std::move(grp));
      continue;
    }
    const NodeId f = grp.nodes[0];
    const int body = g.node(f).called->num_nodes();
    if (level < static_cast<int>(levels.size()) &&
        (levels[level].nodes.size() >= kMaxMergedFusions ||
         levels[level].body + body > kMaxMergedNodes)) {
      flush();
      level = 0;
    }
    if (level >= static_cast<int>(levels.size())) levels.resize(level + 1);
    levels[level].nodes.push_back(f);
    levels[level].body += body;
    level_of[f] = level;
    std::vector<NodeId> ops = g.node(f).operands;
    std::sort(ops.begin(), ops.end());
    ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
    for (NodeId op : ops) {
      if (last_group[op] == static_cast<int>(gi) && g.node(op).op != OpKind::kParameter)
        pending_free += g.node(op).shape.byte_size();
    }
  }
  flush();
  return out;
}

// The text of a debug dump: the graph, then a comment naming the text
// form's version and Ember's (ember/version.h).
std::string DebugIrText(const Graph& g) {
  return internal::StrCat(PrintGraph(g), "// ember IR text version ", kIrTextVersion, " (ember ",
                          Version(), ")\n");
}

// Builds the buffer plan for a kCpu executable's schedule.
void PlanBuffers(const Graph& g, const std::vector<Step>& steps, int num_slots,
                 const std::vector<std::string>& slot_names, const std::vector<int>& output_slots,
                 std::shared_ptr<const BufferAssignment>* assignment,
                 std::vector<int>* planned_buffer_of, std::vector<int64_t>* planned_bytes) {
  const int num_params = static_cast<int>(g.parameters().size());
  std::vector<ScheduledValue> values(num_slots);
  std::vector<Shape> slot_shape(num_slots);
  std::vector<bool> known(num_slots, false);
  std::vector<bool> written_by_kernel(num_slots, false), touched_by_other(num_slots, false);
  for (int p = 0; p < num_params; ++p) {
    slot_shape[p] = g.node(g.parameters()[p]).shape;
    known[p] = true;
    values[p].parameter = true;
  }
  for (const auto& [o, p] : g.aliases()) values[p].donated = true;
  for (const Step& st : steps) {
    for (const SlotRead& r : st.reads) {
      if (st.kind != StepKind::kKernel || r.tuple_index >= 0) touched_by_other[r.slot] = true;
    }
    for (size_t j = 0; j < st.writes.size(); ++j) {
      const int w = st.writes[j];
      if (st.kind == StepKind::kKernel) {
        written_by_kernel[w] = true;
        slot_shape[w] = st.compiled->output_shapes()[j];
        known[w] = true;
      } else {
        touched_by_other[w] = true;
        if (st.kind == StepKind::kInterpret) {
          slot_shape[w] = st.subgraph->node(st.subgraph->outputs()[j]).shape;
          known[w] = true;
        } else if (st.kind == StepKind::kExtern) {
          slot_shape[w] = st.extern_node.shape;
          known[w] = true;
        } else if (!st.reads.empty() && known[st.reads[0].slot]) {  // copy
          slot_shape[w] = slot_shape[st.reads[0].slot];
          known[w] = true;
        }
      }
    }
  }
  for (int s : output_slots) values[s].output = true;
  for (int s = 0; s < num_slots; ++s) {
    values[s].name = slot_names[s];
    if (known[s]) {
      const Shape& sh = slot_shape[s];
      int64_t b = 0;
      if (sh.is_tuple()) {
        for (const Shape& e : sh.tuple_shapes()) b += e.byte_size();
      } else {
        b = sh.byte_size();
      }
      values[s].bytes = b;
    }
    values[s].plannable =
        written_by_kernel[s] && !touched_by_other[s] && !values[s].output && !values[s].parameter;
  }
  std::vector<ScheduledStep> sched(steps.size());
  for (size_t k = 0; k < steps.size(); ++k) {
    for (const SlotRead& r : steps[k].reads) sched[k].reads.push_back(r.slot);
    sched[k].writes = steps[k].writes;
    if (steps[k].in_place_read >= 0)
      sched[k].in_place_read = steps[k].reads[steps[k].in_place_read].slot;
  }
  auto a = std::make_shared<BufferAssignment>(AssignBuffers(values, sched));
  planned_buffer_of->assign(num_slots, -1);
  planned_bytes->assign(a->buffer_bytes.size(), 0);
  for (int s = 0; s < num_slots; ++s) {
    const int b = a->buffer_of[s];
    if (b >= 0 && a->buffer_plannable[b]) {
      (*planned_buffer_of)[s] = b;
      (*planned_bytes)[b] = a->buffer_bytes[b];
    }
  }
  *assignment = std::move(a);
}

}  // namespace

std::string ExternKernelName(const Node& n) {
  switch (n.op) {
    case OpKind::kDotGeneral:
      return "ember.dot-general";
    case OpKind::kConvolution:
      return "ember.convolution";
    case OpKind::kCustomCall:
      return attr::CallTargetName(n);
    default:
      return "";
  }
}

StatusOr<Executable> Compile(const Graph& given, const CompileOptions& options) {
  if (options.verify) EMBER_RETURN_IF_ERROR(Verify(given));
  const std::string debug_dir = DebugDir();
  std::string debug_hash;
  if (!debug_dir.empty()) {
    debug_hash = HashGraph(given).ToString();
    WriteDebugFile(debug_dir, debug_hash + ".before.ir", DebugIrText(given));
  }
  Graph optimized;
  const Graph* gp = &given;
  if (options.optimize) {
    optimized = given;
    const Pipeline pipeline = options.backend == Backend::kCpu ? CpuPipeline() : DefaultPipeline();
    EMBER_RETURN_IF_ERROR(pipeline.Run(optimized).status());
    gp = &optimized;
  }
  // Order the nodes for a lower peak; the barriers still fence the order
  // (src/passes/memory_scheduling.h).
  const bool schedule =
      options.optimize && MemorySchedulingOnByEnv() && !PassSkippedByEnv("memory-scheduling");
  if (schedule) {
    passes::MemorySchedulingPass scheduling;
    EMBER_RETURN_IF_ERROR(scheduling.Run(optimized).status());
  }
  // Optimization barriers have kept the passes apart; at run time they are free
  // (src/passes/barrier_expansion.h).
  if (options.optimize && std::any_of(gp->nodes().begin(), gp->nodes().end(), [](const Node& n) {
        return n.op == OpKind::kOptimizationBarrier;
      })) {
    EMBER_RETURN_IF_ERROR(passes::BarrierExpansionPass().Run(optimized).status());
  }
  const Graph& g = *gp;
  if (!debug_dir.empty()) WriteDebugFile(debug_dir, debug_hash + ".after.ir", DebugIrText(g));
  const bool cpu = options.backend == Backend::kCpu;
  const int n = g.num_nodes();
  const int num_params = static_cast<int>(g.parameters().size());

  auto is_extern = [&](const Node& node) {
    if (node.op == OpKind::kCustomCall) return true;
    return options.extern_contractions &&
           (node.op == OpKind::kDotGeneral || node.op == OpKind::kConvolution);
  };

  // 1. Liveness.
  std::vector<bool> live(n, false);
  for (NodeId o : g.outputs()) live[o] = true;
  for (NodeId id = n - 1; id >= 0; --id) {
    if (!live[id]) continue;
    for (NodeId op : g.node(id).operands) live[op] = true;
  }

  // An element of an extern's tuple result is read in place by its readers (a slot
  // read with a tuple index), not copied out by an interpreted step, and so is one that
  // is a graph output (Run returns a buffer over the element: a convolution backward's
  // weight gradient). kInterpreter: one that an output aliases to a parameter (donation)
  // keeps its own slot, for the copy into the parameter; kCpu reads it through too (the
  // extern writes it in the parameter's buffer where it may, step 4).
  std::vector<bool> read_through(n, false);
  for (NodeId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    read_through[id] =
        live[id] && node.op == OpKind::kGetTupleElement && is_extern(g.node(node.operands[0]));
  }
  if (!cpu) {
    for (const auto& [o, p] : g.aliases()) read_through[g.outputs()[o]] = false;
  }

  // 2. Groups.
  std::vector<Group> groups;
  std::vector<int> group_of(n, -1);
  for (NodeId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (!live[id] || node.op == OpKind::kParameter || read_through[id]) continue;
    if (is_extern(node)) {
      groups.push_back(Group{GroupKind::kExtern, {id}});
    } else if (cpu && node.op == OpKind::kFusion) {
      groups.push_back(Group{GroupKind::kFusion, {id}});
    } else {
      const GroupKind k =
          cpu && CodegenSupported(g, node) ? GroupKind::kKernelRun : GroupKind::kInterpret;
      if (groups.empty() || groups.back().kind != k) groups.push_back(Group{k, {}});
      groups.back().nodes.push_back(id);
    }
    group_of[id] = static_cast<int>(groups.size()) - 1;
  }
  if (cpu) groups = FuseIntoScatters(g, std::move(groups));
  if (cpu && options.merge_fusions && !MergeFusionsOffByEnv()) {
    groups =
        MergeFusionGroups(g, std::move(groups),
                          schedule ? kMaxDeferredFreeBytes : std::numeric_limits<int64_t>::max());
    for (size_t gi = 0; gi < groups.size(); ++gi)
      for (NodeId id : groups[gi].nodes) group_of[id] = static_cast<int>(gi);
  }

  // 3. Slots. A value needs a slot if it is a parameter, an output, or read
  // from another group.
  std::vector<int> slot_of(n, -1);
  auto read_of = [&](NodeId v) {
    if (!read_through[v]) return SlotRead{slot_of[v], -1};
    const Node& gte = g.node(v);
    return SlotRead{slot_of[gte.operands[0]], static_cast<int>(attr::Index(gte))};
  };
  std::vector<std::string> slot_names;
  for (int p = 0; p < num_params; ++p) {
    slot_of[g.parameters()[p]] = p;
    slot_names.push_back(NodeRef(g.parameters()[p]));
  }
  std::vector<bool> needs_slot(n, false);
  for (NodeId o : g.outputs()) needs_slot[o] = true;
  for (NodeId id = 0; id < n; ++id) {
    if (!live[id]) continue;
    for (NodeId op : g.node(id).operands) {
      if (group_of[op] != group_of[id]) needs_slot[op] = true;
    }
  }
  for (NodeId id = 0; id < n; ++id) {
    if (needs_slot[id] && slot_of[id] < 0 && !read_through[id]) {
      slot_of[id] = static_cast<int>(slot_names.size());
      slot_names.push_back(NodeRef(id));
    }
  }
  auto new_slot = [&](std::string name) {
    slot_names.push_back(std::move(name));
    return static_cast<int>(slot_names.size()) - 1;
  };

  // Steps from groups.
  std::vector<Step> steps;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& grp = groups[gi];
    Step step;
    step.nodes = grp.nodes;
    if (grp.kind == GroupKind::kExtern) {
      const Node& node = g.node(grp.nodes[0]);
      step.kind = StepKind::kExtern;
      step.kernel_name = ExternKernelName(node);
      if (step.kernel_name.empty()) {
        return InvalidArgument("compile: ", OpName(node.op), " ", NodeRef(node.id),
                               " has no extern kernel name (custom-call without ",
                               attr::CallTargetName.key, ")");
      }
      auto local = options.externs.find(step.kernel_name);
      auto kernel = local != options.externs.end()
                        ? StatusOr<ExternKernel>(local->second)
                        : ExternRegistry::Global().Lookup(step.kernel_name);
      if (!kernel.ok()) {
        return NotFound("compile: ", OpName(node.op), " ", NodeRef(node.id),
                        ": no extern kernel named '", step.kernel_name, "' is registered");
      }
      step.kernel = *kernel;
      step.extern_node = node;
      for (NodeId op : node.operands) step.reads.push_back(read_of(op));
      step.writes.push_back(slot_of[node.id]);
      steps.push_back(std::move(step));
      continue;
    }

    step.kind = StepKind::kInterpret;
    GraphBuilder sub(internal::StrCat(g.name(), ".step", steps.size()));
    std::map<NodeId, NodeId> local;    // original id -> subgraph id
    std::map<NodeId, NodeId> outside;  // original id read from a slot -> subgraph parameter
    auto param_for = [&](NodeId orig, SlotRead read, const Shape& shape) {
      auto it = outside.find(orig);
      if (it != outside.end()) return it->second;
      NodeId p = sub.Parameter(static_cast<int64_t>(step.reads.size()), shape);
      step.reads.push_back(read);
      step.read_nodes.push_back(orig);
      outside[orig] = p;
      return p;
    };
    for (NodeId id : grp.nodes) {
      const Node& node = g.node(id);
      step.original_nodes.push_back(node);
      // get-tuple-element of a tuple held in a slot: read the element directly.
      if (node.op == OpKind::kGetTupleElement &&
          group_of[node.operands[0]] != static_cast<int>(gi)) {
        SlotRead read{slot_of[node.operands[0]], static_cast<int>(attr::Index(node))};
        local[id] = param_for(id, read, node.shape);
        continue;
      }
      std::vector<NodeId> ops;
      for (NodeId op : node.operands) {
        if (group_of[op] == static_cast<int>(gi)) {
          ops.push_back(local.at(op));
        } else {
          ops.push_back(param_for(op, read_of(op), g.node(op).shape));
        }
      }
      if (node.op == OpKind::kFusion && grp.kind != GroupKind::kFusion) {
        // A merged fusion (kFusionSet, or a scatter's prologue:
        // FuseIntoScatters), its body inlined: its parameters are the
        // fusion's operands.
        const Graph& body = *node.called;
        std::vector<NodeId> in_body(body.num_nodes(), kInvalidNode);
        for (const Node& bn : body.nodes()) {
          if (bn.op == OpKind::kParameter) {
            in_body[bn.id] = ops.at(static_cast<size_t>(attr::Index(bn)));
            continue;
          }
          std::vector<NodeId> bops;
          for (NodeId o : bn.operands) bops.push_back(in_body[o]);
          in_body[bn.id] = sub.AddNodeLike(bn, std::move(bops));
        }
        local[id] = in_body[body.outputs()[0]];
        continue;
      }
      local[id] = sub.AddNodeLike(node, std::move(ops));
    }
    std::vector<NodeId> sub_outputs;
    for (NodeId id : grp.nodes) {
      if (slot_of[id] >= 0) {
        sub_outputs.push_back(local.at(id));
        step.writes.push_back(slot_of[id]);
      }
    }
    sub.SetOutputs(sub_outputs);
    auto built = sub.Build();
    if (!built.ok()) {
      return Status(built.status().code(),
                    internal::StrCat("compile: extracting step ", steps.size(), " (nodes ",
                                     NodeRef(grp.nodes.front()), "..", NodeRef(grp.nodes.back()),
                                     "): ", built.status().message()));
    }
    step.subgraph = std::make_shared<const Graph>(std::move(built).value());
    if (grp.kind == GroupKind::kKernelRun || grp.kind == GroupKind::kFusion ||
        grp.kind == GroupKind::kFusionSet) {
      step.kind = StepKind::kKernel;  // provisional: compiled below
      step.fusion = grp.kind == GroupKind::kFusion;
    }
    steps.push_back(std::move(step));
  }

  // 6a. Compile kernel groups in parallel; Unimplemented -> interpret.
  if (cpu) {
    std::vector<const Graph*> kernel_graphs;
    std::vector<size_t> kernel_steps;
    for (size_t si = 0; si < steps.size(); ++si) {
      if (steps[si].kind == StepKind::kInterpret && LogEnabled("runtime")) {
        std::set<std::string> ops;
        for (NodeId id : steps[si].nodes) ops.insert(std::string(OpName(g.node(id).op)));
        std::string list;
        for (const std::string& o : ops) list += (list.empty() ? "" : ", ") + o;
        LogLine("runtime",
                internal::StrCat("nodes ", NodeRef(steps[si].nodes.front()), "..",
                                 NodeRef(steps[si].nodes.back()),
                                 " stay interpreted (not generated by codegen: ", list, ")"));
      }
      if (steps[si].kind != StepKind::kKernel) continue;
      const Step& st = steps[si];
      kernel_graphs.push_back(st.fusion ? g.node(st.nodes[0]).called.get() : st.subgraph.get());
      kernel_steps.push_back(si);
    }
    auto compiled =
        codegen::CompileKernels(kernel_graphs, options.codegen, options.max_parallel_compiles);
    for (size_t i = 0; i < kernel_steps.size(); ++i) {
      Step& st = steps[kernel_steps[i]];
      if (!compiled[i].ok()) {
        if (compiled[i].status().code() != StatusCode::kUnimplemented) {
          return Status(
              compiled[i].status().code(),
              internal::StrCat("compile: kernel for nodes ", NodeRef(st.nodes.front()), "..",
                               NodeRef(st.nodes.back()), ": ", compiled[i].status().message()));
        }
        LogLine("runtime", internal::StrCat("nodes ", NodeRef(st.nodes.front()), "..",
                                            NodeRef(st.nodes.back()),
                                            " stay interpreted: ", compiled[i].status().message()));
        st.kind = StepKind::kInterpret;
        st.fusion = false;
        continue;
      }
      st.compiled = std::move(compiled[i]).value();
      st.kernel_name = st.compiled->name();
      if (st.fusion) {
        // The body's parameters take the fusion's operands in order.
        const Node& fn = g.node(st.nodes[0]);
        st.reads.clear();
        st.read_nodes.clear();
        for (NodeId op : fn.operands) {
          st.reads.push_back(read_of(op));
          st.read_nodes.push_back(op);
        }
      }
      // In place: the output may overwrite an input it reads elementwise.
      const Graph& kg = *kernel_graphs[i];
      for (size_t r = 0; r < st.reads.size(); ++r) {
        if (st.reads[r].tuple_index < 0 && ElementwiseFromParameter(kg, static_cast<int>(r))) {
          st.in_place_read = static_cast<int>(r);
          break;
        }
      }
      if (!debug_dir.empty()) {
        WriteDebugFile(debug_dir, internal::StrCat(debug_hash, ".", st.compiled->name(), ".cc"),
                       st.compiled->source());
      }
    }
  }

  std::vector<int> output_slots, output_tuple_indices;
  for (NodeId o : g.outputs()) {
    const SlotRead r = read_of(o);
    output_slots.push_back(r.slot);
    output_tuple_indices.push_back(r.tuple_index);
  }

  // 4. Donation. kCpu: the kernel computing a donated output writes it
  // straight into the parameter's buffer where that is safe (below), and
  // nothing is copied: an output it cannot write in place keeps a buffer of
  // its own, and the caller lets go of the parameter's (the same bytes
  // either way, without a copy of the model state per step). kInterpreter:
  // copy steps, as follows. insert_before[k] holds copy steps to run before
  // original step k (k == steps.size(): at the end).
  std::vector<std::vector<Step>> insert_before(steps.size() + 1);
  if (cpu) {
    // The steps from which on something can fail: a kernel reporting data
    // errors, an extern or an interpreted step (out of memory aside).
    std::vector<bool> fails_from(steps.size() + 1, false);
    for (size_t k = steps.size(); k-- > 0;) {
      const Step& st = steps[k];
      const bool may_fail = st.kind == StepKind::kExtern || st.kind == StepKind::kInterpret ||
                            (st.kind == StepKind::kKernel && st.compiled->may_fail());
      fails_from[k] = fails_from[k + 1] || may_fail;
    }
    std::vector<int> last_reader(num_params, -1);
    std::map<int, std::pair<int, int>> kernel_write;  // slot -> (kernel step, write index)
    for (size_t k = 0; k < steps.size(); ++k) {
      const Step& st = steps[k];
      for (const SlotRead& r : st.reads) {
        if (r.slot < num_params) last_reader[r.slot] = static_cast<int>(k);
      }
      if (st.kind != StepKind::kKernel) continue;
      for (size_t j = 0; j < st.writes.size(); ++j) {
        kernel_write[st.writes[j]] = {static_cast<int>(k), static_cast<int>(j)};
      }
    }
    // Whether kernel step `st` reads parameter p, if at all, only elementwise
    // into its write j.
    auto reads_only_into = [&](const Step& st, int p, int j) {
      const Graph& kg = st.fusion ? *g.node(st.nodes[0]).called : *st.subgraph;
      for (size_t r = 0; r < st.reads.size(); ++r) {
        if (st.reads[r].slot != p) continue;
        if (st.reads[r].tuple_index >= 0 || !ElementwiseIntoOutput(kg, static_cast<int>(r), j))
          return false;
      }
      return true;
    };
    // In place when: the parameter is not itself returned and the value is
    // returned once; a native kernel computes it, after the parameter's last
    // reader other than that kernel, which reads the parameter only
    // elementwise into this value; and nothing from that kernel on can fail,
    // so a failing run leaves every argument intact (and a run that wrote one
    // stops honouring cancellation).
    const auto returned = [&](NodeId x) {
      return std::count(g.outputs().begin(), g.outputs().end(), x);
    };
    for (const auto& [o, p] : g.aliases()) {
      const NodeId v = g.outputs()[o];
      auto w = kernel_write.find(slot_of[v]);
      if (returned(g.parameters()[p]) || returned(v) != 1 || w == kernel_write.end()) continue;
      const auto [k, j] = w->second;
      Step& st = steps[k];
      if (fails_from[k] || last_reader[p] > k) continue;
      if (last_reader[p] == k && !reads_only_into(st, p, j)) continue;
      st.write_into_param.resize(st.writes.size(), -1);
      st.write_into_param[j] = p;
    }
    // An extern's tuple element declared to alias an operand (output_to_operand_aliasing)
    // goes into the buffer of that operand's parameter when the element is a donated
    // output of that parameter, read through: the parameter is not returned and reaches
    // the extern once, no step after the extern reads it, and nothing after it can fail
    // (an extern that fails has checked its arguments before writing: the fused
    // optimizers; the run then names the parameters as overwritten).
    std::map<NodeId, int> extern_step;  // extern node -> its step
    for (size_t k = 0; k < steps.size(); ++k) {
      if (steps[k].kind == StepKind::kExtern) extern_step[steps[k].nodes[0]] = static_cast<int>(k);
    }
    for (const auto& [o, p] : g.aliases()) {
      const NodeId v = g.outputs()[o];
      if (!read_through[v]) continue;
      const Node& gte = g.node(v);
      const Node& ext = g.node(gte.operands[0]);
      const std::vector<int64_t>& pairs = attr::OutputToOperandAliasing(ext);
      const int64_t j = attr::Index(gte);
      const NodeId param = g.parameters()[p];
      int64_t operand = -1;
      for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
        if (pairs[i] == j) operand = pairs[i + 1];
      }
      auto ks = extern_step.find(ext.id);
      if (operand < 0 || ext.operands[operand] != param || ks == extern_step.end()) continue;
      const int k = ks->second;
      if (std::count(ext.operands.begin(), ext.operands.end(), param) != 1 || returned(param) ||
          returned(v) != 1 || last_reader[p] > k || fails_from[k + 1])
        continue;
      Step& st = steps[k];
      st.element_into_param.resize(ext.shape.tuple_shapes().size(), -1);
      st.element_into_param[j] = p;
    }
  } else {
    std::set<int> donation_targets;
    for (const auto& [o, p] : g.aliases()) {
      if (g.outputs()[o] != g.parameters()[p]) donation_targets.insert(p);
    }
    // Snapshots: an output that returns a parameter whose buffer another
    // output may overwrite must not see the overwrite.
    std::map<int, int> snapshot_slot;  // parameter -> slot holding its snapshot
    for (int p : donation_targets) {
      bool returned = false;
      for (NodeId o : g.outputs()) returned |= (o == g.parameters()[p]);
      if (!returned) continue;
      Step copy;
      copy.kind = StepKind::kCopy;
      copy.nodes = {g.parameters()[p]};
      copy.reads = {SlotRead{p, -1}};
      int s = new_slot(internal::StrCat(NodeRef(g.parameters()[p]), ".snapshot"));
      copy.writes = {s};
      copy.donation_param = p;
      copy.into_param = false;
      insert_before[0].push_back(std::move(copy));
      snapshot_slot[p] = s;
      for (size_t oi = 0; oi < g.outputs().size(); ++oi) {
        if (g.outputs()[oi] == g.parameters()[p]) output_slots[oi] = s;
      }
    }
    for (const auto& [o, p] : g.aliases()) {
      NodeId v = g.outputs()[o];
      if (v == g.parameters()[p]) continue;  // output o is parameter p itself
      int src = slot_of[v];
      for (int q = 0; q < num_params; ++q) {
        if (g.parameters()[q] == v && snapshot_slot.count(q)) src = snapshot_slot[q];
      }
      // After every computing step, not just after the value's producer and
      // the parameter's last reader: a step that fails (an out-of-range
      // gather, an extern's exception) then leaves every donated parameter
      // intact, so the caller can still read it, and recompute the outputs
      // that do not depend on the failure from the same arguments (the torch
      // bridge does). The cost: the output's own buffer lives until the end.
      const int pos = static_cast<int>(steps.size());
      Step copy;
      copy.kind = StepKind::kCopy;
      copy.nodes = {v};
      copy.reads = {SlotRead{src, -1}};
      int dst = new_slot(internal::StrCat("out", o, "->", NodeRef(g.parameters()[p])));
      copy.writes = {dst};
      copy.donation_param = p;
      copy.into_param = true;
      insert_before[pos].push_back(std::move(copy));
      output_slots[o] = dst;
    }
  }
  std::vector<Step> ordered;
  for (size_t k = 0; k <= steps.size(); ++k) {
    for (Step& c : insert_before[k]) ordered.push_back(std::move(c));
    if (k < steps.size()) ordered.push_back(std::move(steps[k]));
  }

  Executable exe;
  exe.graph_ = std::make_shared<const Graph>(g);
  exe.steps_ = std::move(ordered);
  exe.num_slots_ = static_cast<int>(slot_names.size());
  for (NodeId p : g.parameters()) exe.parameter_shapes_.push_back(g.node(p).shape);
  exe.output_slots_ = std::move(output_slots);
  exe.output_tuple_indices_ = std::move(output_tuple_indices);
  exe.slot_names_ = std::move(slot_names);
  {
    const size_t n = exe.output_slots_.size();
    std::vector<char> whole(exe.num_slots_, 0);
    for (size_t o = 0; o < n; ++o) {
      if (exe.output_tuple_indices_[o] < 0) whole[exe.output_slots_[o]] = 1;
    }
    exe.output_repeats_.assign(n, -1);
    exe.output_in_whole_tuple_.assign(n, 0);
    std::map<std::pair<int, int>, int> first_read;  // (slot, element) -> first output
    for (size_t o = 0; o < n; ++o) {
      const int s = exe.output_slots_[o], ti = exe.output_tuple_indices_[o];
      if (ti < 0) continue;
      auto [it, fresh] = first_read.emplace(std::make_pair(s, ti), static_cast<int>(o));
      if (!fresh) exe.output_repeats_[o] = it->second;
      exe.output_in_whole_tuple_[o] = whole[s];
    }
  }

  if (cpu) {
    PlanBuffers(g, exe.steps_, exe.num_slots_, exe.slot_names_, exe.output_slots_, &exe.assignment_,
                &exe.planned_buffer_of_, &exe.planned_bytes_);
  }

  // 5. Release slots after their last reader (never outputs).
  std::vector<int> last_use(exe.num_slots_, -1);
  for (size_t si = 0; si < exe.steps_.size(); ++si) {
    for (const SlotRead& r : exe.steps_[si].reads) last_use[r.slot] = static_cast<int>(si);
  }
  std::vector<bool> is_output(exe.num_slots_, false);
  for (int s : exe.output_slots_) is_output[s] = true;
  for (int s = 0; s < exe.num_slots_; ++s) {
    if (last_use[s] >= 0 && !is_output[s]) exe.steps_[last_use[s]].release_after.push_back(s);
  }
  return exe;
}

}  // namespace ember
