#include "passes/cse.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "passes/rewriter.h"

namespace ember::passes {
namespace {

void AppendBytes(std::string& key, const void* p, size_t n) {
  if (n != 0) key.append(static_cast<const char*>(p), n);
}
template <typename T>
void AppendPod(std::string& key, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  AppendBytes(key, &v, sizeof(v));
}

void AppendShape(std::string& key, const Shape& s) {
  key += s.ToString();
  key += '|';
}

void AppendLiteral(std::string& key, const Literal& lit) {
  AppendShape(key, lit.shape());
  if (lit.shape().is_tuple()) {
    for (const Literal& e : lit.tuple_elements()) AppendLiteral(key, e);
    return;
  }
  AppendPod(key, lit.size_bytes());
  AppendBytes(key, lit.data(), static_cast<size_t>(lit.size_bytes()));
}

void AppendAttr(std::string& key, const AttrValue& v) {
  AppendPod(key, static_cast<uint8_t>(v.index()));
  if (auto* i = std::get_if<int64_t>(&v)) {
    AppendPod(key, *i);
  } else if (auto* d = std::get_if<double>(&v)) {
    AppendPod(key, *d);  // bit pattern: -0 and 0 differ, equal NaNs match
  } else if (auto* s = std::get_if<std::string>(&v)) {
    AppendPod(key, s->size());
    key += *s;
  } else if (auto* l = std::get_if<std::vector<int64_t>>(&v)) {
    AppendPod(key, l->size());
    AppendBytes(key, l->data(), l->size() * sizeof(int64_t));
  }
}

// Everything that makes two nodes compute the same value, as one byte string.
std::string NodeKey(const Node& n, const std::vector<NodeId>& operands) {
  std::string key;
  AppendPod(key, static_cast<uint8_t>(n.op));
  AppendShape(key, n.shape);
  AppendPod(key, operands.size());
  for (NodeId o : operands) AppendPod(key, o);
  AppendPod(key, n.attrs.map().size());
  for (const auto& [name, value] : n.attrs.map()) {
    AppendPod(key, name.size());
    key += name;
    AppendAttr(key, value);
  }
  if (n.literal) {
    key += 'L';
    AppendLiteral(key, *n.literal);
  }
  return key;
}

bool MayMerge(OpKind op) { return op != OpKind::kParameter && !IsOpaqueToPasses(op); }

}  // namespace

StatusOr<bool> CsePass::Run(Graph& g) {
  std::unordered_map<std::string, NodeId> seen;  // key -> node in the new graph
  return RewriteGraph(g, [&](const Node& n, Rewriter& rw) -> StatusOr<NodeId> {
    if (!MayMerge(n.op)) return kCopyNode;
    std::string key = NodeKey(n, rw.MappedOperands(n));
    auto it = seen.find(key);
    if (it != seen.end()) return it->second;
    NodeId id = rw.Copy(n);
    seen.emplace(std::move(key), id);
    return id;
  });
}

}  // namespace ember::passes
