#include "passes/fusion.h"

#include <algorithm>
#include <memory>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ember/ir/fusion_analysis.h"
#include "ember/ir/kernel_name.h"
#include "ir/log.h"
#include "passes/fusion_cost.h"
#include "passes/fusion_legality.h"

namespace ember::passes {
namespace {

struct Cluster {
  NodeId root = kInvalidNode;
  std::vector<NodeId> members;                     // root first, then in joining order
  std::unordered_set<NodeId> in;                   // members (absorbed and duplicated)
  std::unordered_map<NodeId, double> evaluations;  // per kernel run
  std::vector<NodeId> reduces;                     // in joining order
  // AnalyzeFusion of the members computing the root, updated when a reduce
  // joins (only a reduce can change it: the others join upstream of every
  // member reduce).
  FusionAnalysis analysis;
};

double Elements(const Shape& s) {
  return s.is_tuple() ? 0.0 : static_cast<double>(s.num_elements());
}

// Whether broadcast-in-dim `c` repeats each element of its operand along
// the innermost dims only (operand = the leading dims of the result, mapped
// to dims {0..k-1}): a "row broadcast". Generated code evaluates such an
// operand once per row, outside the loop over the row (docs/codegen.md).
bool IsRowBroadcast(const Graph& g, const Node& c) {
  if (c.op != OpKind::kBroadcastInDim || c.shape.is_tuple()) return false;
  const Shape& os = g.node(c.operands[0]).shape;
  const auto& map = attr::Dimensions(c);
  if (os.rank() == 0 || os.rank() >= c.shape.rank()) return false;
  for (int i = 0; i < os.rank(); ++i)
    if (map[i] != i || os.dim(i) != c.shape.dim(i)) return false;
  return true;
}

// How many times `producer` is evaluated when its consumer `c` is evaluated
// `c_evals` times: a broadcast or slice reads one operand element per result
// element, except a row broadcast (once per row); other ops read their
// operands in proportion to their sizes.
double ProducerEvaluations(const Graph& g, const Node& producer, const Node& c, double c_evals) {
  if (IsRowBroadcast(g, c)) {
    const double ce = Elements(c.shape);
    return ce <= 0 ? 0 : c_evals * Elements(producer.shape) / ce;
  }
  if (c.op == OpKind::kBroadcastInDim || c.op == OpKind::kSlice) return c_evals;
  const double ce = Elements(c.shape);
  if (ce <= 0) return 0;
  return c_evals * Elements(producer.shape) / ce;
}

// How many times `producer` is evaluated in a fusion whose members `consumers` read it,
// member m being evaluated evals(m) times. The kernel memoizes a value per element
// index, so elementwise consumers of the producer's shape (which read it at their own
// index) share its evaluations: the largest of them counts. A broadcast, slice or
// other consumer reads it at indices of its own, and adds its count.
template <typename EvalsOf>
double CombinedEvaluations(const Graph& g, const Node& producer,
                           const std::vector<NodeId>& consumers, EvalsOf evals_of) {
  double shared = 0, other = 0;
  for (NodeId m : consumers) {
    const Node& mn = g.node(m);
    const double e = ProducerEvaluations(g, producer, mn, evals_of(m));
    if (IsElementwise(mn.op) && !mn.shape.is_tuple() && !producer.shape.is_tuple() &&
        mn.shape.dims() == producer.shape.dims()) {
      shared = std::max(shared, e);
    } else {
      other += e;
    }
  }
  return shared + other;
}

class FusionBuilder {
 public:
  explicit FusionBuilder(const Graph& g, std::vector<std::string>& refusals)
      : g_(g),
        refusals_(refusals),
        users_(g.ComputeUsers()),
        owner_(g.num_nodes(), -1),
        is_input_(g.num_nodes(), false),
        is_output_(g.num_nodes(), false),
        dead_(g.num_nodes(), false) {
    for (NodeId o : g.outputs()) is_output_[o] = true;
    subtree_cost_.resize(g.num_nodes(), 0);
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      subtree_cost_[i] = SubtreeCost(g, g.node(i), users_, is_output_, subtree_cost_);
  }

  void FormClusters() {
    for (NodeId id = g_.num_nodes() - 1; id >= 0; --id) {
      const Node& n = g_.node(id);
      if (owner_[id] != -1 || !IsFusibleNode(n)) continue;
      // Every user is decided by now. A fusible node that no materialized
      // node reads (its users hold duplicates, or it was dead) is dropped.
      bool needed = is_output_[id] || is_input_[id];
      for (NodeId u : users_[id]) needed = needed || (owner_[u] == -1 && !dead_[u]);
      if (!needed) {
        dead_[id] = true;
        continue;
      }
      if (n.op == OpKind::kConstant) continue;  // data; fused only into users
      Grow(id);
    }
  }

  StatusOr<Graph> Emit() {
    GraphBuilder b(g_.name());
    std::vector<NodeId> remap(g_.num_nodes(), kInvalidNode);
    int emitted = 0;  // fusions in node order number their bodies
    for (const Node& n : g_.nodes()) {
      const int c = owner_[n.id];
      if (dead_[n.id]) continue;
      if (c == -1) {
        std::vector<NodeId> ops;
        for (NodeId o : n.operands) ops.push_back(remap[o]);
        remap[n.id] = b.AddNodeLike(n, std::move(ops));
      } else if (clusters_[c].root == n.id) {
        EMBER_ASSIGN_OR_RETURN(remap[n.id], EmitFusion(clusters_[c], emitted++, remap, b));
      }
      if (!b.status().ok()) return b.status();
    }
    std::vector<NodeId> outs;
    for (NodeId o : g_.outputs()) outs.push_back(remap[o]);
    b.SetOutputs(outs);
    for (auto [o, p] : g_.aliases()) b.SetAlias(o, p);
    return b.Build();
  }

  bool changed() const {
    return !clusters_.empty() || std::find(dead_.begin(), dead_.end(), true) != dead_.end();
  }

 private:
  bool Materialized(NodeId y) const { return owner_[y] == -1 || clusters_[owner_[y]].root == y; }

  void Refuse(NodeId producer, NodeId consumer, const std::string& reason) {
    std::ostringstream os;
    os << "refuse %" << producer << " -> %" << consumer << ": " << reason;
    refusals_.push_back(os.str());
    LogLine("fusion", refusals_.back());
  }

  void Grow(NodeId root) {
    const int ci = static_cast<int>(clusters_.size());
    clusters_.emplace_back();
    Cluster& c = clusters_.back();
    c.root = root;
    c.members.push_back(root);
    c.in.insert(root);
    c.evaluations[root] = Elements(g_.node(root).shape);
    if (g_.node(root).op == OpKind::kReduce) {
      c.reduces.push_back(root);
      c.analysis = AnalyzeFusion(g_, {root}, {root});
    }
    owner_[root] = ci;

    std::priority_queue<NodeId> heap;
    std::unordered_set<NodeId> queued;
    auto push_operands = [&](NodeId m) {
      for (NodeId o : g_.node(m).operands)
        if (queued.insert(o).second) heap.push(o);
    };
    push_operands(root);
    while (!heap.empty()) {
      const NodeId p = heap.top();
      heap.pop();
      if (c.in.count(p)) continue;
      const Node& pn = g_.node(p);
      // Members reading p (all have larger ids, so all are known by now).
      std::vector<NodeId> consumers;
      for (NodeId m : c.members) {
        const auto& ops = g_.node(m).operands;
        if (std::find(ops.begin(), ops.end(), p) != ops.end()) consumers.push_back(m);
      }
      const NodeId shown = consumers.empty() ? root : consumers.front();
      if (pn.op == OpKind::kParameter) continue;  // a parameter is simply an input
      bool absorb = false;
      FusionAnalysis with_p;
      FusionDecision d = Decide(c, ci, p, consumers, &absorb, &with_p);
      if (!d) {
        Refuse(p, shown, d.reason);
        is_input_[p] = true;
        continue;
      }
      double evals =
          CombinedEvaluations(g_, pn, consumers, [&](NodeId m) { return c.evaluations[m]; });
      // A reduce is computed once per result element (kept in a buffer, or
      // in a row kernel once per row), whatever reads it.
      if (pn.op == OpKind::kReduce) evals = Elements(pn.shape);
      c.members.push_back(p);
      c.in.insert(p);
      c.evaluations[p] = evals;
      if (pn.op == OpKind::kReduce) {
        c.reduces.push_back(p);
        c.analysis = std::move(with_p);
      }
      if (absorb) owner_[p] = ci;
      push_operands(p);
    }
  }

  // `with_p` (a reduce `p` only): AnalyzeFusion of the members and p.
  FusionDecision Decide(const Cluster& c, int ci, NodeId p, const std::vector<NodeId>& consumers,
                        bool* absorb, FusionAnalysis* with_p) {
    const Node& pn = g_.node(p);
    for (NodeId m : consumers) {
      FusionDecision d = CanFuse(g_, p, m);
      if (!d) return d;
    }
    if (static_cast<int>(c.members.size()) >= kMaxFusionNodes) {
      return FusionDecision::No("the fusion has reached its size bound of " +
                                std::to_string(kMaxFusionNodes) + " nodes");
    }
    if (pn.op == OpKind::kReduce) {
      // The consumers and every member computed from them, in node order.
      std::set<NodeId> down(consumers.begin(), consumers.end());
      std::vector<NodeId> sorted(c.members.begin(), c.members.end());
      std::sort(sorted.begin(), sorted.end());
      for (NodeId m : sorted) {
        if (down.count(m)) continue;
        for (NodeId o : g_.node(m).operands)
          if (down.count(o)) {
            down.insert(m);
            break;
          }
      }
      std::vector<NodeId> members = sorted;
      members.insert(std::lower_bound(members.begin(), members.end(), p), p);
      *with_p = AnalyzeFusion(g_, members, {c.root});
      FusionDecision d = CanFuseReduceResult(g_, p, std::vector<NodeId>(down.begin(), down.end()),
                                             c.reduces, *with_p);
      if (!d) return d;
    }
    double evals = CombinedEvaluations(g_, pn, consumers, [&](NodeId m) {
      auto it = c.evaluations.find(m);
      return it == c.evaluations.end() ? 0.0 : it->second;
    });
    if (pn.op == OpKind::kReduce) evals = Elements(pn.shape);
    // In a row fusion each pass over the row may recompute a value.
    FusionDecision rd = CanRecompute(pn, evals, c.analysis.row_passes(), subtree_cost_[p]);
    if (!rd) return rd;
    bool all_users_inside = !is_output_[p] && !is_input_[p];
    for (NodeId u : users_[p]) all_users_inside = all_users_inside && owner_[u] == ci;
    if (all_users_inside) {
      *absorb = true;
      return FusionDecision::Yes();
    }
    DuplicationFacts facts = DuplicationFactsOf(p);
    const double elems = Elements(pn.shape);
    facts.evaluations_per_element = elems > 0 ? evals / elems / c.analysis.row_passes() : 0;
    facts.into_reduction = !c.reduces.empty();
    FusionDecision dup = ShouldDuplicate(pn, facts);
    if (!dup) return dup;
    for (NodeId y : pn.operands) {
      if (!Materialized(y)) {
        return FusionDecision::No("operand %" + std::to_string(y) + " of the duplicate is " +
                                  "inside another fusion");
      }
    }
    *absorb = false;
    return FusionDecision::Yes();
  }

  // The facts ShouldDuplicate weighs for producer `p` (fusion_cost.h).
  DuplicationFacts DuplicationFactsOf(NodeId p) const {
    const Node& pn = g_.node(p);
    DuplicationFacts f;
    f.num_users = static_cast<int>(users_[p].size());
    f.is_output = is_output_[p];
    auto constant_like = [&](const Node& x) {
      return x.op == OpKind::kConstant || x.op == OpKind::kIota;
    };
    f.from_constants = constant_like(pn);
    if (!f.from_constants && !pn.operands.empty()) {
      f.from_constants = true;
      for (NodeId y : pn.operands) f.from_constants = f.from_constants && constant_like(g_.node(y));
    }
    f.all_users_fuse = !is_input_[p];
    for (NodeId u : users_[p]) f.all_users_fuse = f.all_users_fuse && CanFuse(g_, p, u).ok;
    std::unordered_set<NodeId> seen;
    f.from_scalars = !pn.operands.empty();
    for (NodeId y : pn.operands) {
      // Shared: the value, or a broadcast / reshape / convert of it on the way, has
      // several users (a convert read by every layer makes its operand shared).
      bool shared = false;
      while (IsCheapDataMovement(g_.node(y).op)) {
        shared = shared || users_[y].size() > 1;
        y = g_.node(y).operands[0];
      }
      const Node& yn = g_.node(y);
      f.from_scalars = f.from_scalars && !yn.shape.is_tuple() && yn.shape.rank() == 0;
      shared = shared || users_[y].size() > 1;
      if (IsElementwise(yn.op) && !IsExpensive(yn) && shared) f.shared_operand = y;
      if (!seen.insert(y).second || constant_like(yn) || yn.shape.is_tuple()) continue;
      if (!shared && !is_output_[y] && !is_input_[y] && IsFusibleNode(yn).ok) {
        f.private_operand = y;
      }
      f.read_bytes += static_cast<double>(yn.shape.byte_size());
    }
    return f;
  }

  StatusOr<NodeId> EmitFusion(const Cluster& c, int index, const std::vector<NodeId>& remap,
                              GraphBuilder& b) {
    std::vector<NodeId> sorted(c.members.begin(), c.members.end());
    std::sort(sorted.begin(), sorted.end());
    std::vector<NodeId> inputs;
    std::unordered_set<NodeId> seen;
    for (NodeId m : sorted)
      for (NodeId o : g_.node(m).operands)
        if (!c.in.count(o) && seen.insert(o).second) inputs.push_back(o);
    GraphBuilder body(KernelName(g_, sorted, index));
    std::unordered_map<NodeId, NodeId> local;
    for (size_t i = 0; i < inputs.size(); ++i)
      local[inputs[i]] = body.Parameter(static_cast<int64_t>(i), g_.node(inputs[i]).shape);
    for (NodeId m : sorted) {
      std::vector<NodeId> ops;
      for (NodeId o : g_.node(m).operands) ops.push_back(local.at(o));
      local[m] = body.AddNodeLike(g_.node(m), std::move(ops));
    }
    body.SetOutputs({local.at(c.root)});
    StatusOr<Graph> built = body.Build();
    if (!built.ok())
      return EMBER_INTERNAL_ERROR("fusion: building the body of %", c.root, ": ",
                                  built.status().ToString());
    std::vector<NodeId> operands;
    for (NodeId y : inputs) {
      if (remap[y] == kInvalidNode)
        return EMBER_INTERNAL_ERROR("fusion: input %", y, " of the fusion of %", c.root,
                                    " is not materialized");
      operands.push_back(remap[y]);
    }
    auto called = std::make_shared<const Graph>(std::move(built).value());
    const FusionKind kind = AnalyzeFusion(*called).kind;
    const Node& r = g_.node(c.root);
    return b.AddNode(OpKind::kFusion, std::move(operands),
                     {{"kind", std::string(FusionKindName(kind))}}, r.shape, nullptr, r.metadata,
                     std::move(called));
  }

  const Graph& g_;
  std::vector<std::string>& refusals_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<int> owner_;      // cluster absorbing the node (or rooted at it); -1: none
  std::vector<bool> is_input_;  // read by some fusion as an input: must stay materialized
  std::vector<bool> is_output_;
  std::vector<bool> dead_;             // fusible, and read by no materialized node: dropped
  std::vector<int64_t> subtree_cost_;  // SubtreeCost of each node (fusion_cost.h)
  std::vector<Cluster> clusters_;
};

}  // namespace

StatusOr<bool> FusionPass::Run(Graph& g) {
  refusals_.clear();
  FusionBuilder fb(g, refusals_);
  fb.FormClusters();
  if (!fb.changed()) return false;
  EMBER_ASSIGN_OR_RETURN(Graph out, fb.Emit());
  g = std::move(out);
  return true;
}

}  // namespace ember::passes

namespace ember {

Pipeline CpuPipeline() {
  std::vector<std::unique_ptr<Pass>> list;
  for (const char* name : {"simplify", "constant-folding", "cse", "dce", "fusion"}) {
    list.push_back(std::move(CreatePass(name)).value());
  }
  return Pipeline(std::move(list), DefaultPipeline().max_rounds());
}

}  // namespace ember
