// Graph: an immutable, topologically ordered list of Nodes with ordered
// parameters, ordered outputs and an output→parameter alias (donation) map.
//
// Nodes are created only through GraphBuilder (builder.h), which infers and
// checks every result shape; a built Graph is never mutated. Passes build a
// new Graph and replace the old one (see passes/pass.h).
//
// NodeIds are indices into nodes(); every operand id is smaller than the id
// of the node that uses it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ember/ir/literal.h"
#include "ember/ir/opcode.h"
#include "ember/ir/shape.h"
#include "ember/status.h"

namespace ember {

using NodeId = int32_t;
inline constexpr NodeId kInvalidNode = -1;

// An attribute value: an integer, a float, a string or a list of integers.
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

namespace attr {
struct Base;
}

// Named attributes of a node, kept sorted by name so printing and hashing are
// canonical. Values are read through the typed accessors of
// ember/ir/attributes.h (attr::Dimensions(n), attr::ToApply(n), ...), the one
// place that knows each attribute's key and type; generic code (printer,
// parser, hash, cse) walks map().
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

  bool Has(const std::string& key) const { return map_.count(key) != 0; }
  void Set(const std::string& key, AttrValue v) { map_[key] = std::move(v); }
  void Erase(const std::string& key) { map_.erase(key); }

  const std::map<std::string, AttrValue>& map() const { return map_; }
  bool empty() const { return map_.empty(); }
  bool operator==(const Attrs& o) const { return map_ == o.map_; }
  bool operator!=(const Attrs& o) const { return !(*this == o); }

 private:
  friend struct attr::Base;
  const AttrValue* Find(const std::string& key) const;
  std::map<std::string, AttrValue> map_;
};

std::string AttrValueToString(const AttrValue& v);

// Reduction / combiner kinds, stored as the `to_apply` attribute of reduce,
// reduce-window and scatter. `assign` (scatter only) overwrites.
enum class ReduceKind : uint8_t { kAdd, kMultiply, kMaximum, kMinimum, kAnd, kOr, kAssign };
std::string_view ReduceKindName(ReduceKind k);  // "add", "multiply", ...
std::optional<ReduceKind> ParseReduceKind(std::string_view s);

// compare's `direction` attribute.
enum class ComparisonKind : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
std::string_view ComparisonKindName(ComparisonKind k);  // "EQ", "NE", ...
std::optional<ComparisonKind> ParseComparisonKind(std::string_view s);

class Graph;

// The deepest allowed nesting of fusion bodies (Graph::fusion_depth()).
inline constexpr int kMaxFusionNesting = 64;

// fusion's `kind` attribute: what the body computes and how a backend runs
// it, decided by AnalyzeFusion (ember/ir/fusion_analysis.h, which defines
// each kind).
enum class FusionKind : uint8_t { kLoop, kInput, kRow, kScatter };
std::string_view FusionKindName(FusionKind k);  // "loop", "input", "row", "scatter"
std::optional<FusionKind> ParseFusionKind(std::string_view s);

struct Node {
  NodeId id = kInvalidNode;
  OpKind op = OpKind::kParameter;
  Shape shape;
  std::vector<NodeId> operands;
  Attrs attrs;
  std::shared_ptr<const Literal> literal;  // constant only
  std::string metadata;                    // free text (e.g. source line); not hashed
  // fusion only: the body graph it calls (shared, immutable). Its parameters
  // take the operands in order; its single output is the result.
  std::shared_ptr<const Graph> called;
};

class Graph {
 public:
  Graph() = default;

  const std::string& name() const { return name_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const { return nodes_[id]; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  // parameters()[i] is the node of parameter(i).
  const std::vector<NodeId>& parameters() const { return parameters_; }
  const std::vector<NodeId>& outputs() const { return outputs_; }
  // output index -> parameter index whose buffer the output may overwrite.
  const std::map<int, int>& aliases() const { return aliases_; }

  // users()[id] = nodes that use `id` as an operand (each user listed once).
  std::vector<std::vector<NodeId>> ComputeUsers() const;

  // How deep fusion bodies nest below this graph: 0 without fusions, else
  // 1 + the largest fusion_depth() of a called body. GraphBuilder refuses a
  // fusion that would make it exceed kMaxFusionNesting.
  int fusion_depth() const { return fusion_depth_; }

 private:
  friend class GraphBuilder;
  std::string name_ = "main";
  int fusion_depth_ = 0;
  std::vector<Node> nodes_;
  std::vector<NodeId> parameters_;
  std::vector<NodeId> outputs_;
  std::map<int, int> aliases_;
};

// Checks every invariant a pass must preserve: operands precede users, result
// shapes equal what shape inference gives, parameters numbered 0..n-1 once
// each, outputs valid, aliases between equal shapes, and for every fusion
// (recursively) that its body is valid and matches it (CheckFusionBody).
// InvalidArgument on failure.
Status Verify(const Graph& g);

// The fusion shape rule: `body` is non-null, its parameter shapes equal
// `operands` in order, it has exactly one output whose shape is `result`
// (multi-output fusion is a later tier), and `kind` is the body's kind
// (AnalyzeFusion). Does not verify the body itself. InvalidArgument naming
// the mismatch.
Status CheckFusionBody(const std::vector<Shape>& operands, const Graph* body, const Shape& result,
                       const std::string& kind);

}  // namespace ember
