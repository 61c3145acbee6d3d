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
#include <algorithm>
#include <map>
#include <set>

#include "ember/ir/builder.h"
#include "ember/runtime/executable.h"

namespace ember {
namespace {

constexpr const char* kCustomCallTargetAttr = "call_target_name";
constexpr const char* kTupleIndexAttr = "index";

struct Group {
  bool is_extern = false;
  std::vector<NodeId> nodes;
};

std::string NodeRef(NodeId id) { return internal::StrCat("%", id); }

}  // namespace

std::string ExternKernelName(const Node& n) {
  switch (n.op) {
    case OpKind::kDotGeneral:
      return "ember.dot-general";
    case OpKind::kConvolution:
      return "ember.convolution";
    case OpKind::kCustomCall:
      return n.attrs.GetString(kCustomCallTargetAttr);
    default:
      return "";
  }
}

StatusOr<Executable> Compile(const Graph& g, const CompileOptions& options) {
  if (options.verify) EMBER_RETURN_IF_ERROR(Verify(g));
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

  // 2. Groups.
  std::vector<Group> groups;
  std::vector<int> group_of(n, -1);
  for (NodeId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (!live[id] || node.op == OpKind::kParameter) continue;
    if (is_extern(node)) {
      groups.push_back(Group{true, {id}});
    } else {
      if (groups.empty() || groups.back().is_extern) groups.push_back(Group{false, {}});
      groups.back().nodes.push_back(id);
    }
    group_of[id] = static_cast<int>(groups.size()) - 1;
  }

  // 3. Slots. A value needs a slot if it is a parameter, an output, or read
  // from another group.
  std::vector<int> slot_of(n, -1);
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
    if (needs_slot[id] && slot_of[id] < 0) {
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
    if (grp.is_extern) {
      const Node& node = g.node(grp.nodes[0]);
      step.kind = StepKind::kExtern;
      step.kernel_name = ExternKernelName(node);
      if (step.kernel_name.empty()) {
        return InvalidArgument("compile: ", OpName(node.op), " ", NodeRef(node.id),
                               " has no extern kernel name (custom-call without ",
                               kCustomCallTargetAttr, ")");
      }
      auto kernel = ExternRegistry::Global().Lookup(step.kernel_name);
      if (!kernel.ok()) {
        return NotFound("compile: ", OpName(node.op), " ", NodeRef(node.id),
                        ": no extern kernel named '", step.kernel_name, "' is registered");
      }
      step.kernel = *kernel;
      step.extern_node = node;
      for (NodeId op : node.operands) step.reads.push_back(SlotRead{slot_of[op], -1});
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
      if (node.op == OpKind::kGetTupleElement && group_of[node.operands[0]] != static_cast<int>(gi)) {
        SlotRead read{slot_of[node.operands[0]],
                      static_cast<int>(node.attrs.GetInt(kTupleIndexAttr))};
        local[id] = param_for(id, read, node.shape);
        continue;
      }
      std::vector<NodeId> ops;
      for (NodeId op : node.operands) {
        if (group_of[op] == static_cast<int>(gi)) {
          ops.push_back(local.at(op));
        } else {
          ops.push_back(param_for(op, SlotRead{slot_of[op], -1}, g.node(op).shape));
        }
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
    steps.push_back(std::move(step));
  }

  std::vector<int> output_slots;
  for (NodeId o : g.outputs()) output_slots.push_back(slot_of[o]);

  // 4. Donation copies. insert_before[k] holds copy steps to run before
  // original step k (k == steps.size(): at the end).
  std::vector<std::vector<Step>> insert_before(steps.size() + 1);
  std::vector<int> producer_step(slot_names.size(), -1);
  std::vector<int> last_reader(slot_names.size(), -1);
  for (size_t si = 0; si < steps.size(); ++si) {
    for (int w : steps[si].writes) producer_step[w] = static_cast<int>(si);
    for (const SlotRead& r : steps[si].reads) last_reader[r.slot] = static_cast<int>(si);
  }
  std::set<int> donation_targets;
  for (const auto& [o, p] : g.aliases()) {
    if (g.outputs()[o] != g.parameters()[p]) donation_targets.insert(p);
  }
  // Snapshots: an output that returns a parameter whose buffer another output
  // may overwrite must not see the overwrite.
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
    int pos = 0;
    if (src < static_cast<int>(producer_step.size())) pos = std::max(pos, producer_step[src] + 1);
    pos = std::max(pos, last_reader[p] + 1);
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
  exe.slot_names_ = std::move(slot_names);

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
