#include "ember/ir/graph.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "ember/ir/builder.h"

namespace ember {

const AttrValue* Attrs::Find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

int64_t Attrs::GetInt(const std::string& key, int64_t def) const {
  const AttrValue* v = Find(key);
  if (v && std::holds_alternative<int64_t>(*v)) return std::get<int64_t>(*v);
  return def;
}

double Attrs::GetFloat(const std::string& key, double def) const {
  const AttrValue* v = Find(key);
  if (v && std::holds_alternative<double>(*v)) return std::get<double>(*v);
  if (v && std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
  return def;
}

const std::string& Attrs::GetString(const std::string& key) const {
  static const std::string kEmpty;
  const AttrValue* v = Find(key);
  if (v && std::holds_alternative<std::string>(*v)) return std::get<std::string>(*v);
  return kEmpty;
}

const std::vector<int64_t>& Attrs::GetInts(const std::string& key) const {
  static const std::vector<int64_t> kEmpty;
  const AttrValue* v = Find(key);
  if (v && std::holds_alternative<std::vector<int64_t>>(*v)) return std::get<std::vector<int64_t>>(*v);
  return kEmpty;
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
      if (c == '"' || c == '\\') os << '\\' << c;
      else if (c == '\n') os << "\\n";
      else os << c;
    }
    os << '"';
  } else {
    os << DimsToString(std::get<std::vector<int64_t>>(v));
  }
  return os.str();
}

std::string_view ReduceKindName(ReduceKind k) {
  switch (k) {
    case ReduceKind::kAdd: return "add";
    case ReduceKind::kMultiply: return "multiply";
    case ReduceKind::kMaximum: return "maximum";
    case ReduceKind::kMinimum: return "minimum";
    case ReduceKind::kAnd: return "and";
    case ReduceKind::kOr: return "or";
    case ReduceKind::kAssign: return "assign";
  }
  return "?";
}

std::optional<ReduceKind> ParseReduceKind(std::string_view s) {
  for (ReduceKind k : {ReduceKind::kAdd, ReduceKind::kMultiply, ReduceKind::kMaximum,
                       ReduceKind::kMinimum, ReduceKind::kAnd, ReduceKind::kOr,
                       ReduceKind::kAssign})
    if (ReduceKindName(k) == s) return k;
  return std::nullopt;
}

std::string_view ComparisonKindName(ComparisonKind k) {
  switch (k) {
    case ComparisonKind::kEq: return "EQ";
    case ComparisonKind::kNe: return "NE";
    case ComparisonKind::kLt: return "LT";
    case ComparisonKind::kLe: return "LE";
    case ComparisonKind::kGt: return "GT";
    case ComparisonKind::kGe: return "GE";
  }
  return "?";
}

std::optional<ComparisonKind> ParseComparisonKind(std::string_view s) {
  for (ComparisonKind k : {ComparisonKind::kEq, ComparisonKind::kNe, ComparisonKind::kLt,
                           ComparisonKind::kLe, ComparisonKind::kGt, ComparisonKind::kGe})
    if (ComparisonKindName(k) == s) return k;
  return std::nullopt;
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

Status Verify(const Graph& g) {
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
    if (n.op == OpKind::kParameter) {
      int64_t idx = n.attrs.GetInt("index", -1);
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
      return InvalidArgument("alias: output index ", out, " out of range [0, ",
                             g.outputs().size(), ")");
    if (param < 0 || param >= static_cast<int>(g.parameters().size()))
      return InvalidArgument("alias: parameter index ", param, " out of range [0, ",
                             g.parameters().size(), ")");
    const Shape& os = g.node(g.outputs()[out]).shape;
    const Shape& ps = g.node(g.parameters()[param]).shape;
    if (os != ps)
      return InvalidArgument("alias: output ", out, " (", os.ToString(), ") and parameter ",
                             param, " (", ps.ToString(), ") differ in shape");
  }
  return OkStatus();
}

}  // namespace ember
