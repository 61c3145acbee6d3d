#include "ember/ir/graph.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ember/ir/fusion_analysis.h"

namespace ember {

const AttrValue* Attrs::Find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

std::string AttrValueToString(const AttrValue& v) {
  std::ostringstream os;
  if (auto* i = std::get_if<int64_t>(&v)) {
    os << *i;
  } else if (auto* d = std::get_if<double>(&v)) {
    char buf[64];
    for (int prec = 1; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof(buf), "%.*g", prec, *d);
      if (std::strtod(buf, nullptr) == *d) break;
    }
    os << buf;
    // Keep floats distinguishable from ints in text.
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) os << ".0";
  } else if (auto* s = std::get_if<std::string>(&v)) {
    os << '"';
    for (char c : *s) {
      if (c == '"' || c == '\\')
        os << '\\' << c;
      else if (c == '\n')
        os << "\\n";
      else
        os << c;
    }
    os << '"';
  } else {
    os << DimsToString(std::get<std::vector<int64_t>>(v));
  }
  return os.str();
}

std::string_view ReduceKindName(ReduceKind k) {
  switch (k) {
    case ReduceKind::kAdd:
      return "add";
    case ReduceKind::kMultiply:
      return "multiply";
    case ReduceKind::kMaximum:
      return "maximum";
    case ReduceKind::kMinimum:
      return "minimum";
    case ReduceKind::kAnd:
      return "and";
    case ReduceKind::kOr:
      return "or";
    case ReduceKind::kAssign:
      return "assign";
  }
  return "?";
}

std::optional<ReduceKind> ParseReduceKind(std::string_view s) {
  for (ReduceKind k :
       {ReduceKind::kAdd, ReduceKind::kMultiply, ReduceKind::kMaximum, ReduceKind::kMinimum,
        ReduceKind::kAnd, ReduceKind::kOr, ReduceKind::kAssign})
    if (ReduceKindName(k) == s) return k;
  return std::nullopt;
}

std::string_view ComparisonKindName(ComparisonKind k) {
  switch (k) {
    case ComparisonKind::kEq:
      return "EQ";
    case ComparisonKind::kNe:
      return "NE";
    case ComparisonKind::kLt:
      return "LT";
    case ComparisonKind::kLe:
      return "LE";
    case ComparisonKind::kGt:
      return "GT";
    case ComparisonKind::kGe:
      return "GE";
  }
  return "?";
}

std::optional<ComparisonKind> ParseComparisonKind(std::string_view s) {
  for (ComparisonKind k : {ComparisonKind::kEq, ComparisonKind::kNe, ComparisonKind::kLt,
                           ComparisonKind::kLe, ComparisonKind::kGt, ComparisonKind::kGe})
    if (ComparisonKindName(k) == s) return k;
  return std::nullopt;
}

std::string_view FusionKindName(FusionKind k) {
  switch (k) {
    case FusionKind::kLoop:
      return "loop";
    case FusionKind::kInput:
      return "input";
    case FusionKind::kRow:
      return "row";
    case FusionKind::kScatter:
      return "scatter";
  }
  return "?";
}

std::optional<FusionKind> ParseFusionKind(std::string_view s) {
  for (FusionKind k :
       {FusionKind::kLoop, FusionKind::kInput, FusionKind::kRow, FusionKind::kScatter})
    if (FusionKindName(k) == s) return k;
  return std::nullopt;
}

Status CheckFusionBody(const std::vector<Shape>& operands, const Graph* body, const Shape& result,
                       const std::string& kind) {
  if (!body) return InvalidArgument("fusion: missing body graph (calls=...)");
  const std::string who = "fusion calling '" + body->name() + "': ";
  if (body->parameters().size() != operands.size())
    return InvalidArgument(who, "the body takes ", body->parameters().size(),
                           " parameters but the fusion has ", operands.size(), " operands");
  for (size_t i = 0; i < operands.size(); ++i) {
    NodeId p = body->parameters()[i];
    if (p < 0 || p >= body->num_nodes())
      return InvalidArgument(who, "body parameter ", i, " is missing");
    if (body->node(p).shape != operands[i])
      return InvalidArgument(who, "operand ", i, " has shape ", operands[i].ToString(),
                             " but body parameter ", i, " is ", body->node(p).shape.ToString());
  }
  if (body->outputs().size() != 1)
    return InvalidArgument(who, "the body has ", body->outputs().size(),
                           " outputs; a fusion body has exactly one (multi-output fusion is "
                           "not supported)");
  NodeId out = body->outputs()[0];
  if (out < 0 || out >= body->num_nodes())
    return InvalidArgument(who, "the body's output is not a node");
  if (body->node(out).shape != result)
    return InvalidArgument(who, "result ", result.ToString(), " differs from the body's output ",
                           body->node(out).shape.ToString());
  if (!body->aliases().empty()) return InvalidArgument(who, "a fusion body may not alias");
  auto k = ParseFusionKind(kind);
  if (!k) return InvalidArgument(who, "kind '", kind, "' is not loop, input, row or scatter");
  const FusionAnalysis a = AnalyzeFusion(*body);
  if (*k != a.kind) {
    std::string why;
    if (a.kind == FusionKind::kInput && *k == FusionKind::kRow)
      why = "; no row fusion: " + a.not_row;
    return InvalidArgument(who, "kind=", kind, " but the body's kind is ", FusionKindName(a.kind),
                           why);
  }
  return OkStatus();
}

std::vector<std::vector<NodeId>> Graph::ComputeUsers() const {
  std::vector<std::vector<NodeId>> users(nodes_.size());
  for (const Node& n : nodes_) {
    for (NodeId op : n.operands) {
      auto& u = users[op];
      if (u.empty() || u.back() != n.id) u.push_back(n.id);
    }
  }
  return users;
}

namespace {
Status VerifyImpl(const Graph& g, std::set<const Graph*>& verified, int depth);
}  // namespace

Status Verify(const Graph& g) {
  std::set<const Graph*> verified;
  return VerifyImpl(g, verified, 0);
}

namespace {

// `verified` holds bodies already checked (a body shared by many fusions is
// verified once); `depth` bounds the nesting of bodies.
Status VerifyImpl(const Graph& g, std::set<const Graph*>& verified, int depth) {
  if (depth > kMaxFusionNesting)
    return InvalidArgument("graph '", g.name(), "': fusion bodies nested more than ",
                           kMaxFusionNesting, " deep");
  std::vector<int> param_seen(g.parameters().size(), 0);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.id != static_cast<NodeId>(i))
      return EMBER_INTERNAL_ERROR("node at position ", i, " has id ", n.id);
    std::vector<Shape> operand_shapes;
    for (NodeId op : n.operands) {
      if (op < 0 || op >= n.id)
        return InvalidArgument(OpName(n.op), " %", n.id, ": operand %", op,
                               " does not precede its user");
      operand_shapes.push_back(g.node(op).shape);
    }
    std::optional<Shape> declared = n.shape;
    auto inferred = InferShape(n.op, operand_shapes, n.attrs, declared, n.literal.get());
    if (!inferred.ok()) return inferred.status();
    if (*inferred != n.shape)
      return InvalidArgument(OpName(n.op), " %", n.id, ": result shape ", n.shape.ToString(),
                             " differs from inferred ", inferred->ToString());
    if (n.called && n.op != OpKind::kFusion)
      return InvalidArgument(OpName(n.op), " %", n.id, ": only a fusion may call a body graph");
    if (n.op == OpKind::kFusion) {
      Status s = CheckFusionBody(operand_shapes, n.called.get(), n.shape, attr::Kind.Text(n.attrs));
      if (!s.ok()) return InvalidArgument("fusion %", n.id, ": ", s.message());
      if (verified.insert(n.called.get()).second) {
        Status b = VerifyImpl(*n.called, verified, depth + 1);
        if (!b.ok()) {
          verified.erase(n.called.get());
          return InvalidArgument("fusion %", n.id, " body '", n.called->name(), "': ", b.message());
        }
      }
    }
    if (n.op == OpKind::kParameter) {
      int64_t idx = attr::Index(n, -1);
      if (idx < 0 || idx >= static_cast<int64_t>(param_seen.size()) || g.parameters()[idx] != n.id)
        return InvalidArgument("parameter %", n.id, ": index ", idx,
                               " is not registered in the parameter list");
      param_seen[idx]++;
    }
  }
  for (size_t i = 0; i < param_seen.size(); ++i)
    if (param_seen[i] != 1)
      return InvalidArgument("parameter(", i, ") appears ", param_seen[i],
                             " times; parameters must be numbered 0..n-1 once each");
  for (NodeId out : g.outputs())
    if (out < 0 || out >= g.num_nodes())
      return InvalidArgument("output %", out, " is not a node of the graph");
  for (auto [out, param] : g.aliases()) {
    if (out < 0 || out >= static_cast<int>(g.outputs().size()))
      return InvalidArgument("alias: output index ", out, " out of range [0, ", g.outputs().size(),
                             ")");
    if (param < 0 || param >= static_cast<int>(g.parameters().size()))
      return InvalidArgument("alias: parameter index ", param, " out of range [0, ",
                             g.parameters().size(), ")");
    const Shape& os = g.node(g.outputs()[out]).shape;
    const Shape& ps = g.node(g.parameters()[param]).shape;
    if (os != ps)
      return InvalidArgument("alias: output ", out, " (", os.ToString(), ") and parameter ", param,
                             " (", ps.ToString(), ") differ in shape");
  }
  return OkStatus();
}

}  // namespace

}  // namespace ember
