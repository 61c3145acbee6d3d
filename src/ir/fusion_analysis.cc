// AnalyzeFusion (ember/ir/fusion_analysis.h): the one place a fusion's kind is decided.
// Adding a kind: CONTRIBUTING.md, "Walkthrough: adding a codegen fusion kind" (every
// place that reads a kind, the cache and text-IR versions to bump).
#include "ember/ir/fusion_analysis.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <unordered_map>

#include "ember/ir/attributes.h"

namespace ember {
namespace {

std::string Label(const Node& n) {
  std::ostringstream os;
  os << OpName(n.op) << " %" << n.id;
  return os.str();
}

std::string DimsText(const std::vector<int64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "}";
}

std::vector<int64_t> SortedReduceDims(const Node& n) {
  const auto& d = attr::Dimensions(n);
  std::vector<int64_t> v(d.begin(), d.end());
  std::sort(v.begin(), v.end());
  return v;
}

// The analysis over `members` (increasing ids) of `g`; `all` when every
// node of `g` is a member (a body), which spares the membership search.
class Analyzer {
 public:
  Analyzer(const Graph& g, const std::vector<NodeId>& members, const std::vector<NodeId>& outputs,
           bool all)
      : g_(g), members_(members), outputs_(outputs), all_(all) {}

  FusionAnalysis Run() {
    FusionAnalysis a;
    bool scatter = false;
    for (NodeId id : members_) {
      const Node& n = g_.node(id);
      if (n.op == OpKind::kScatter) scatter = true;
      if (OpCategory(n.op) == OpCategoryKind::kReduction) a.reduces.push_back(id);
      if (n.op == OpKind::kFusion && n.called) {
        const FusionKind k = AnalyzeFusion(*n.called).kind;
        if (k == FusionKind::kScatter) scatter = true;
        if (k != FusionKind::kLoop && nested_ < 0) nested_ = id;
      }
    }
    if (scatter) {
      a.kind = FusionKind::kScatter;
      return a;
    }
    if (a.reduces.empty() && nested_ < 0) {
      a.kind = FusionKind::kLoop;
      return a;
    }
    a.not_row = RowReason(&a);
    a.kind = a.not_row.empty() ? FusionKind::kRow : FusionKind::kInput;
    return a;
  }

 private:
  bool IsMember(NodeId id) const {
    return all_ || std::binary_search(members_.begin(), members_.end(), id);
  }

  // Why the members are no row fusion ("" when they are one; then fills
  // a->row and a->row_shaped_output).
  std::string RowReason(FusionAnalysis* a) {
    std::ostringstream os;
    if (nested_ >= 0) {
      os << Label(g_.node(nested_)) << " calls a body with reductions";
      return os.str();
    }
    for (NodeId id : a->reduces) {
      if (g_.node(id).op != OpKind::kReduce) {
        os << Label(g_.node(id)) << " is no reduce; a row fusion holds only reduces";
        return os.str();
      }
    }
    const Node& r = g_.node(a->reduces[0]);
    const Shape& xs = g_.node(r.operands[0]).shape;
    const std::vector<int64_t> dims = SortedReduceDims(r);
    const int rank = xs.rank();
    const int k = rank - static_cast<int>(dims.size());
    bool suffix = !dims.empty() && k >= 1;
    for (size_t i = 0; suffix && i < dims.size(); ++i)
      suffix = dims[i] == k + static_cast<int64_t>(i);
    if (!suffix) {
      os << Label(r) << " reduces dims " << DimsText(dims) << " of " << xs.ToString()
         << "; a row fusion needs reductions over the innermost dims, keeping at least one";
      return os.str();
    }
    for (size_t i = 1; i < a->reduces.size(); ++i) {
      const Node& en = g_.node(a->reduces[i]);
      const Shape& es = g_.node(en.operands[0]).shape;
      if (es.dims() != xs.dims() || SortedReduceDims(en) != dims) {
        os << Label(r) << " (dims " << DimsText(dims) << " of " << xs.ToString() << ") and "
           << Label(en) << " (dims " << DimsText(SortedReduceDims(en)) << " of " << es.ToString()
           << ") reduce different rows";
        return os.str();
      }
    }
    const std::vector<int64_t> full = xs.dims();
    const std::vector<int64_t> outer(full.begin(), full.begin() + k);
    std::vector<int64_t> canonical(k);
    std::iota(canonical.begin(), canonical.end(), 0);
    // from[id]: the first reduce (by id) that member `id` is computed from,
    // for every member computed from one (reduces included).
    std::unordered_map<NodeId, NodeId> from;
    for (NodeId id : members_) {
      const Node& n = g_.node(id);
      NodeId src = -1;
      for (NodeId o : n.operands) {
        if (!IsMember(o)) continue;
        auto it = from.find(o);
        if (it != from.end() && (src < 0 || it->second < src)) src = it->second;
      }
      if (n.op == OpKind::kReduce) {  // same rows: checked above
        from[id] = src < 0 ? id : src;
        continue;
      }
      if (src < 0) continue;
      from[id] = src;
      const Node& rn = g_.node(src);
      if (n.op == OpKind::kBroadcastInDim && !n.shape.is_tuple()) {
        const auto& bd = attr::Dimensions(n);
        if (g_.node(n.operands[0]).shape.dims() == outer && n.shape.dims() == full &&
            std::vector<int64_t>(bd.begin(), bd.end()) == canonical)
          continue;
        os << Label(n) << " broadcasts a value computed from " << Label(rn)
           << " other than back along the rows of " << xs.ToString() << " (dims "
           << DimsText(canonical) << ")";
        return os.str();
      }
      if (!IsElementwise(n.op) || n.shape.is_tuple() ||
          (n.shape.dims() != full && n.shape.dims() != outer)) {
        os << Label(n) << " consumes " << Label(rn) << "'s rows other than elementwise per row "
           << "(a row fusion allows elementwise ops of shape " << Shape(xs.dtype(), full).ToString()
           << " or " << Shape(xs.dtype(), outer).ToString() << " and broadcasts back)";
        return os.str();
      }
    }
    bool row_shaped = false;
    for (NodeId o : outputs_) {
      const Shape& s = g_.node(o).shape;
      if (s.is_tuple() || (s.dims() != full && s.dims() != outer)) {
        os << "output " << Label(g_.node(o)) << " has shape " << s.ToString()
           << "; a row fusion's outputs have the rows' shape " << Shape(xs.dtype(), full).ToString()
           << " or their outer shape " << Shape(xs.dtype(), outer).ToString();
        return os.str();
      }
      row_shaped = row_shaped || s.dims() == full;
    }
    a->row.outer_rank = k;
    a->row.shape = full;
    a->row.rows = 1;
    a->row.row_length = 1;
    for (int i = 0; i < rank; ++i) (i < k ? a->row.rows : a->row.row_length) *= full[i];
    a->row_shaped_output = row_shaped;
    return "";
  }

  const Graph& g_;
  const std::vector<NodeId>& members_;
  const std::vector<NodeId>& outputs_;
  const bool all_;
  NodeId nested_ = -1;  // a member fusion whose body has reductions
};

}  // namespace

FusionAnalysis AnalyzeFusion(const Graph& body) {
  std::vector<NodeId> all(body.num_nodes());
  std::iota(all.begin(), all.end(), 0);
  return Analyzer(body, all, body.outputs(), true).Run();
}

FusionAnalysis AnalyzeFusion(const Graph& g, const std::vector<NodeId>& members,
                             const std::vector<NodeId>& outputs) {
  return Analyzer(g, members, outputs, false).Run();
}

}  // namespace ember
