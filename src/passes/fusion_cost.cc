#include "passes/fusion_cost.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace ember::passes {
namespace {

std::string Label(const Node& n) {
  std::ostringstream os;
  os << OpName(n.op) << " %" << n.id;
  return os.str();
}

int64_t Elements(const Shape& s) { return s.is_tuple() ? 0 : s.num_elements(); }

std::string UsersText(int num_users, bool is_output) {
  std::string users = std::to_string(num_users) + (num_users == 1 ? " user" : " users");
  return is_output ? "is a graph output (and has " + users + ")" : "has " + users;
}

}  // namespace

int64_t ElementCost(const Node& n) { return ember::ElementCost(n.op); }

bool IsExpensive(const Node& n) {
  return n.op == OpKind::kReduce || ElementCost(n) >= kExpensiveCost;
}

FusionDecision ShouldDuplicate(const Node& p, const DuplicationFacts& f) {
  std::ostringstream os;
  const std::string users = UsersText(f.num_users, f.is_output);
  if (p.op == OpKind::kReduce) {
    os << Label(p) << " " << users << "; a reduction is never recomputed per consumer";
    return FusionDecision::No(os.str());
  }
  if (IsExpensive(p)) {
    os << "expensive producer " << Label(p) << " (cost " << ElementCost(p) << " per element) "
       << users << "; not duplicated";
    return FusionDecision::No(os.str());
  }
  const bool cheap = p.op == OpKind::kConstant || p.op == OpKind::kIota ||
                     IsCheapDataMovement(p.op) || IsDuplicatedRead(p.op);
  if (!cheap && !IsElementwise(p.op)) {
    os << Label(p) << " " << users
       << "; only constant, iota, broadcast-in-dim, reshape, convert, slice, pad and plain "
          "arithmetic are duplicated";
    return FusionDecision::No(os.str());
  }
  if (f.num_users > kMaxDuplicateUsers && !(cheap && (f.from_constants || f.from_scalars))) {
    os << (cheap ? "cheap producer " : "arithmetic producer ") << Label(p) << " " << users
       << ", more than the duplication bound " << kMaxDuplicateUsers;
    return FusionDecision::No(os.str());
  }
  const double out_bytes = static_cast<double>(p.shape.is_tuple() ? 0 : p.shape.byte_size());
  if (cheap && f.read_bytes > out_bytes && (f.is_output || f.private_operand != kInvalidNode)) {
    // A copy reads the producer's operands instead of its result: more bytes for a
    // narrowing convert. It saves no write when the result is a graph output (written
    // whatever fuses it), and it makes an operand only the producer reads a fusion input,
    // written at its width, where the producer's own fusion computes it in registers: an
    // f32 value computed in f64 (an optimizer's state, a residual add) was written and
    // read as f64 by every reader.
    os << Label(p) << " " << users << "; a copy would read " << f.read_bytes
       << " bytes, more than the result it is (" << out_bytes << ")";
    if (!f.is_output) os << ", and %" << f.private_operand << " would be written";
    return FusionDecision::No(os.str());
  }
  if (cheap) return FusionDecision::Yes();
  if (!f.into_reduction) {
    os << "arithmetic producer " << Label(p) << " " << users
       << "; it is recomputed only in a fusion with a reduction";
    return FusionDecision::No(os.str());
  }
  if (f.is_output || !f.all_users_fuse) {
    os << "arithmetic producer " << Label(p) << " " << users
       << (f.is_output ? "" : ", not all of which fuse it")
       << "; it is materialized, so it is not also recomputed";
    return FusionDecision::No(os.str());
  }
  if (f.shared_operand != kInvalidNode) {
    os << "arithmetic producer " << Label(p) << " " << users << "; its operand %"
       << f.shared_operand << " is arithmetic with several users (recomputing both would "
       << "recompute their chain in every consumer)";
    return FusionDecision::No(os.str());
  }
  if (f.evaluations_per_element > 1 + 1e-9) {
    os << "arithmetic producer " << Label(p) << " " << users << "; a broadcast would evaluate it "
       << f.evaluations_per_element << " times per element";
    return FusionDecision::No(os.str());
  }
  if ((f.num_users - 1) * f.read_bytes > (f.num_users + 1) * out_bytes) {
    os << "arithmetic producer " << Label(p) << " " << users << "; its copies would read "
       << (f.num_users * f.read_bytes) << " bytes, more than materializing it moves ("
       << (f.read_bytes + (f.num_users + 1) * out_bytes) << ")";
    return FusionDecision::No(os.str());
  }
  return FusionDecision::Yes();
}

FusionDecision CanFuseReduceResult(const Graph& g, NodeId reduce,
                                   const std::vector<NodeId>& downstream,
                                   const std::vector<NodeId>& existing,
                                   const FusionAnalysis& with_reduce) {
  const Node& r = g.node(reduce);
  std::ostringstream os;
  if (!existing.empty()) {
    os << "the fusion already contains " << Label(g.node(existing.front()))
       << " (one reduction per input fusion)";
  } else {
    for (NodeId d : downstream) {
      const Node& n = g.node(d);
      if (n.op == OpKind::kBroadcastInDim) {
        os << Label(r) << " result is broadcast back to " << n.shape.ToString() << " by "
           << Label(n);
        break;
      }
      if (!IsElementwise(n.op)) {
        os << Label(r) << " result feeds " << Label(n)
           << "; only elementwise consumers of the reduced shape fuse with a reduce";
        break;
      }
    }
    if (os.str().empty()) return FusionDecision::Yes();  // input fusion
  }
  FusionDecision rd = with_reduce.kind == FusionKind::kRow
                          ? FusionDecision::Yes()
                          : FusionDecision::No(with_reduce.not_row);
  if (rd && static_cast<int>(existing.size()) >= kMaxRowReductions) {
    rd = FusionDecision::No("the row fusion already has " + std::to_string(existing.size()) +
                            " reductions (bound " + std::to_string(kMaxRowReductions) + ")");
  }
  if (rd) return FusionDecision::Yes();
  os << "; no row fusion: " << rd.reason;
  return FusionDecision::No(os.str());
}

int64_t SubtreeCost(const Graph& g, const Node& n, const std::vector<std::vector<NodeId>>& users,
                    const std::vector<bool>& is_output, const std::vector<int64_t>& subtree_cost) {
  constexpr int64_t kCap = int64_t{1} << 20;
  int64_t cost = ElementCost(n);
  std::vector<NodeId> seen;
  for (NodeId o : n.operands) {
    if (std::find(seen.begin(), seen.end(), o) != seen.end()) continue;
    seen.push_back(o);
    const Node& on = g.node(o);
    if (users[o].size() != 1 || is_output[o] || on.op == OpKind::kReduce || !IsFusibleNode(on).ok)
      continue;
    cost = std::min(kCap, cost + subtree_cost[o]);
  }
  return cost;
}

FusionDecision CanRecompute(const Node& p, double evaluations, int passes, int64_t subtree_cost) {
  const double elems = static_cast<double>(Elements(p.shape));
  const bool expensive = IsExpensive(p) || subtree_cost >= kExpensiveSubtreeCost;
  // The tolerance absorbs rounding in the evaluation counts (doubles).
  if (!expensive || evaluations <= elems * passes * (1 + 1e-9)) return FusionDecision::Yes();
  std::ostringstream os;
  if (!IsExpensive(p)) {
    os << "producer " << Label(p) << " with the ops only it reads costs " << subtree_cost
       << " per element and would be evaluated " << evaluations << " times for " << elems
       << " elements (replicated by a broadcast in the fusion)";
    return FusionDecision::No(os.str());
  }
  os << "expensive producer " << Label(p) << " would be evaluated " << evaluations << " times for "
     << elems << " elements ("
     << (passes > 1 ? "more than once per pass over the rows"
                    : "replicated by a broadcast in the fusion")
     << ")";
  return FusionDecision::No(os.str());
}

}  // namespace ember::passes
