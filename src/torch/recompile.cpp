// The recompile report (recompile.h).
#include "recompile.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace ember_torch {
namespace {

void mix(uint64_t& h, int64_t x) {
  h ^= static_cast<uint64_t>(x);
  h *= 1099511628211ULL;
  h ^= h >> 29;
}

int64_t double_bits(double d) {
  int64_t x;
  std::memcpy(&x, &d, sizeof(x));
  return x;
}

double bits_to_double(int64_t x) {
  double d;
  std::memcpy(&d, &x, sizeof(d));
  return d;
}

// A plain attribute: its ints, bools and floats are values (items), everything else
// (None, strings, list lengths, value types) is structure. `counter`: the element index
// within a list argument (null at the top level: the item's elem is -1).
void attr_values(const c10::IValue& v, uint64_t& h, Signature& s, int op, int arg, int* counter) {
  auto value = [&](uint8_t vtype, int64_t x) {
    mix(h, 2 + vtype);
    SpecItem it{SpecItem::kAttr};
    it.vtype = vtype;
    it.where = op;
    it.sub = arg;
    it.elem = counter ? (*counter)++ : -1;
    it.value = x;
    s.items.push_back(it);
  };
  if (v.isInt()) return value(0, v.toInt());
  if (v.isBool()) return value(1, v.toBool());
  if (v.isDouble()) return value(2, double_bits(v.toDouble()));
  int local = 0;
  int* c = counter ? counter : &local;
  if (v.isIntList()) {
    auto l = v.toIntVector();
    mix(h, 6);
    mix(h, static_cast<int64_t>(l.size()));
    for (int64_t x : l) {
      SpecItem it{SpecItem::kAttr};
      it.where = op;
      it.sub = arg;
      it.elem = (*c)++;
      it.value = x;
      s.items.push_back(it);
    }
    return;
  }
  if (v.isSymIntList()) {
    auto l = v.toSymIntList();
    mix(h, 6);
    mix(h, static_cast<int64_t>(l.size()));
    for (size_t i = 0; i < l.size(); ++i) {
      SpecItem it{SpecItem::kAttr};
      it.where = op;
      it.sub = arg;
      it.elem = (*c)++;
      it.value = l.get(i).expect_int();
      s.items.push_back(it);
    }
    return;
  }
  if (v.isList()) {
    auto l = v.toList();
    mix(h, 12);
    mix(h, static_cast<int64_t>(l.size()));
    for (size_t i = 0; i < l.size(); ++i) attr_values(l.get(i), h, s, op, arg, c);
    return;
  }
  if (v.isNone()) return mix(h, 1);
  if (v.isString()) {
    mix(h, 9);
    return mix(h, static_cast<int64_t>(std::hash<std::string>()(v.toStringRef())));
  }
  mix(h, 13);
  mix(h, static_cast<int64_t>(std::hash<std::string>()(v.tagKind())));
}

void meta_items(const TensorMeta& m, SpecItem::Kind dim_kind, SpecItem::Kind dtype_kind, int where,
                int sub, uint64_t& h, Signature& s, bool layout) {
  mix(h, static_cast<int64_t>(m.sizes.size()));
  SpecItem d{dtype_kind};
  d.where = where;
  d.sub = sub;
  d.value = static_cast<int64_t>(m.dtype);
  s.items.push_back(d);
  for (size_t i = 0; i < m.sizes.size(); ++i) {
    SpecItem it{dim_kind};
    it.where = where;
    if (dim_kind == SpecItem::kInputDim) {
      it.sub = static_cast<int>(i);
    } else {
      it.sub = sub;
      it.elem = static_cast<int>(i);
    }
    it.value = m.sizes[i];
    s.items.push_back(it);
  }
  if (!layout) return;
  for (size_t i = 0; i <= m.strides.size(); ++i) {
    SpecItem it{SpecItem::kInputLayout};
    it.where = where;
    it.sub = static_cast<int>(i);
    it.value = i < m.strides.size() ? m.strides[i] : m.offset;
    s.items.push_back(it);
  }
}

bool is_output(SpecItem::Kind k) {
  return k == SpecItem::kOutputDim || k == SpecItem::kOutputDtype;
}

// A family: the layout of its values (the first member's items) and each member's values.
struct Member {
  uint64_t hash;
  std::vector<int64_t> values;
};
struct Family {
  std::vector<SpecItem> layout;
  std::vector<Member> members;
};
std::unordered_map<uint64_t, Family> g_families;

// Per call site (the sync's Python line): the graphs compiled there, and the last one's
// op and input list for graphs of a new family ("structure").
struct SiteInfo {
  std::unordered_set<uint64_t> graphs;
  std::vector<std::string> last_ops;
  std::vector<std::string> last_inputs;
  bool warned = false;
};
std::unordered_map<std::string, SiteInfo> g_sites;

std::string node_op_name(const Node* n) {
  std::string s = n->op->schema().name();
  if (!n->op->schema().overload_name().empty()) s += "." + n->op->schema().overload_name();
  return s;
}

std::string at_source(const Node* n) { return n->source.empty() ? "" : " at " + n->source; }

// The first op reading input slot `slot`, as "aten::cat at file:line".
std::string first_reader(const LazyGraph& g, int slot) {
  for (const Node* n : g.ops) {
    for (const Value& o : n->operands) {
      if (slot_of(g, o) == slot) return node_op_name(n) + at_source(n);
    }
  }
  return "";
}

std::string value_str(uint8_t vtype, int64_t v) {
  if (vtype == 1) return v ? "True" : "False";
  if (vtype == 2) {
    std::ostringstream os;
    os << bits_to_double(v);
    return os.str();
  }
  return std::to_string(v);
}

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

const char* scalar_kind_name(int64_t tag) {
  switch (tag) {
    case 1:
      return "float";
    case 2:
      return "int";
    case 3:
      return "bool";
    case 4:
      return "complex";
    default:
      return "other";
  }
}

std::string dtype_name(int64_t v) { return c10::toString(static_cast<at::ScalarType>(v)); }

// The Python kind of a wrapped number of dtype `v`.
const char* python_kind(int64_t v) {
  const auto t = static_cast<at::ScalarType>(v);
  if (t == at::kBool) return "bool";
  if (c10::isComplexType(t)) return "complex";
  if (c10::isFloatingType(t)) return "float";
  return "int";
}

// Whether input `in` of `g` is a wrapped number (a Python scalar an op took as a tensor).
bool wrapped_input(const LazyGraph& g, int in) {
  const int slot = g.input_slots[in];
  for (const auto& kv : g.first_slot) {
    if (kv.second == slot && kv.first->kind == NodeKind::kHost)
      return kv.first->data.unsafeGetTensorImpl()->is_wrapped_number();
  }
  return false;
}

// One change: its reason and text.
struct Change {
  std::string reason, text;
};

// The changes of `now` against `old` (values of one family layout), most telling first:
// inputs in slot order, then baked attributes and scalar kinds in trace order; op output
// shapes only when nothing else differs (then a Scalar argument's value set them).
std::vector<Change> describe(const LazyGraph& g, const std::vector<SpecItem>& layout,
                             const std::vector<int64_t>& old, const std::vector<int64_t>& now) {
  std::vector<Change> out;
  const size_t n = layout.size();
  bool primary = false;
  for (size_t i = 0; i < n && !primary; ++i)
    primary = old[i] != now[i] && !is_output(layout[i].kind);
  size_t i = 0;
  while (i < n) {
    const SpecItem& it = layout[i];
    // The run of items of one input, one op argument or one op output.
    size_t j = i + 1;
    auto same_group = [&](const SpecItem& b) {
      switch (it.kind) {
        case SpecItem::kInputDim:
        case SpecItem::kInputDtype:
        case SpecItem::kInputLayout:
          return (b.kind == SpecItem::kInputDim || b.kind == SpecItem::kInputDtype ||
                  b.kind == SpecItem::kInputLayout) &&
                 b.where == it.where;
        case SpecItem::kAttr:
        case SpecItem::kScalarType:
          return b.kind == it.kind && b.where == it.where && b.sub == it.sub;
        case SpecItem::kOutputDim:
        case SpecItem::kOutputDtype:
          return (b.kind == SpecItem::kOutputDim || b.kind == SpecItem::kOutputDtype) &&
                 b.where == it.where && b.sub == it.sub;
      }
      return false;
    };
    while (j < n && same_group(layout[j])) ++j;
    bool differs = false;
    for (size_t k = i; k < j; ++k) differs |= old[k] != now[k];
    if (!differs || (is_output(it.kind) && primary)) {
      i = j;
      continue;
    }
    std::ostringstream os;
    Change c;
    if (it.kind == SpecItem::kInputDim || it.kind == SpecItem::kInputDtype ||
        it.kind == SpecItem::kInputLayout) {
      const int in = it.where;
      os << "input " << in;
      if (wrapped_input(g, in)) {
        // A Python number an op took as a tensor (`x * 2`): its kind is its dtype.
        for (size_t k = i; k < j; ++k) {
          if (layout[k].kind != SpecItem::kInputDtype) continue;
          os << ": a Python " << python_kind(old[k]) << ", now a " << python_kind(now[k]);
        }
        const std::string reader = first_reader(g, g.input_slots[in]);
        if (!reader.empty()) os << " (read by " << reader << ")";
        c.reason = "scalar_type";
        c.text = os.str();
        out.push_back(std::move(c));
        i = j;
        continue;
      }
      std::vector<std::string> parts;
      std::vector<int64_t> os_strides, ns_strides;
      bool layout_differs = false;
      for (size_t k = i; k < j; ++k) {
        const SpecItem& x = layout[k];
        if (x.kind == SpecItem::kInputDtype && old[k] != now[k]) {
          parts.push_back("dtype " + dtype_name(old[k]) + " -> " + dtype_name(now[k]));
          c.reason = "dtype";
        } else if (x.kind == SpecItem::kInputDim && old[k] != now[k]) {
          parts.push_back("dim " + std::to_string(x.sub) + ": " + std::to_string(old[k]) + " -> " +
                          std::to_string(now[k]));
          if (c.reason.empty()) c.reason = "dim";
        } else if (x.kind == SpecItem::kInputLayout) {
          os_strides.push_back(old[k]);
          ns_strides.push_back(now[k]);
          layout_differs |= old[k] != now[k];
        }
      }
      if (c.reason.empty() && layout_differs) {
        // Strides then the offset (the last layout item).
        const int64_t oo = os_strides.back(), no = ns_strides.back();
        os_strides.pop_back();
        ns_strides.pop_back();
        std::string p = "strides " + list_str(os_strides) + " -> " + list_str(ns_strides);
        if (oo != no) p += ", offset " + std::to_string(oo) + " -> " + std::to_string(no);
        parts.push_back(p);
        c.reason = "layout";
      }
      for (size_t k = 0; k < parts.size(); ++k) os << (k ? ", " : " ") << parts[k];
      const std::string reader = first_reader(g, g.input_slots[in]);
      os << " (now " << meta_str(g.input_metas[in]);
      if (!reader.empty()) os << ", read first by " << reader;
      os << ")";
    } else if (it.kind == SpecItem::kAttr || it.kind == SpecItem::kScalarType) {
      const Node* node = g.ops[it.where];
      const auto& args = node->op->schema().arguments();
      const std::string arg =
          it.sub < static_cast<int>(args.size()) ? args[it.sub].name() : std::to_string(it.sub);
      os << node_op_name(node) << " argument " << arg;
      if (it.kind == SpecItem::kScalarType) {
        for (size_t k = i; k < j; ++k) {
          if (old[k] == now[k]) continue;
          if (layout[k].elem >= 0) os << "[" << layout[k].elem << "]";
          os << ": a Python " << scalar_kind_name(old[k]) << ", now a " << scalar_kind_name(now[k]);
          break;
        }
        c.reason = "scalar_type";
      } else {
        if (it.elem < 0) {
          os << ": " << value_str(it.vtype, old[i]) << " -> " << value_str(it.vtype, now[i]);
        } else {
          std::string o = "[", w = "[";
          for (size_t k = i; k < j; ++k) {
            o += (k > i ? "," : "") + value_str(layout[k].vtype, old[k]);
            w += (k > i ? "," : "") + value_str(layout[k].vtype, now[k]);
          }
          os << ": " << o << "] -> " << w << "]";
        }
        os << " (a Python scalar baked into the graph)";
        c.reason = "scalar";
      }
      os << at_source(node);
    } else {
      const Node* node = g.ops[it.where];
      os << node_op_name(node) << " output " << it.sub;
      std::vector<int64_t> od, nd;
      for (size_t k = i; k < j; ++k) {
        if (layout[k].kind == SpecItem::kOutputDtype) {
          if (old[k] != now[k]) {
            os << " dtype " << dtype_name(old[k]) << " -> " << dtype_name(now[k]);
            c.reason = "dtype";
          }
          continue;
        }
        od.push_back(old[k]);
        nd.push_back(now[k]);
      }
      if (od != nd) {
        os << " shape " << list_str(od) << " -> " << list_str(nd)
           << " (set by the value of a Python scalar argument)";
        c.reason = "scalar";
      }
      os << at_source(node);
    }
    c.text = os.str();
    out.push_back(std::move(c));
    i = j;
  }
  return out;
}

// The structure diff of the old per-site log: the first op or input that changed.
std::string structure_diff(SiteInfo& info, const std::vector<std::string>& ops,
                           const std::vector<std::string>& ins) {
  for (size_t i = 0; i < std::min(ins.size(), info.last_inputs.size()); ++i) {
    if (ins[i] != info.last_inputs[i])
      return "input " + std::to_string(i) + " changed from " + info.last_inputs[i] + " to " +
             ins[i];
  }
  for (size_t i = 0; i < std::min(ops.size(), info.last_ops.size()); ++i) {
    if (ops[i] != info.last_ops[i])
      return "op " + std::to_string(i) + " changed from " + info.last_ops[i] + " to " + ops[i];
  }
  if (ops.size() != info.last_ops.size()) {
    return "op count changed from " + std::to_string(info.last_ops.size()) + " to " +
           std::to_string(ops.size());
  }
  if (ins.size() != info.last_inputs.size()) {
    return "input count changed from " + std::to_string(info.last_inputs.size()) + " to " +
           std::to_string(ins.size());
  }
  return "scalar argument types or attributes changed";
}

// The nearest member of `fam` to `values`: the fewest differing values outside op
// outputs, then the fewest in all; ties go to the latest. Null without members.
const Member* nearest_member(const Family& fam, const std::vector<int64_t>& values) {
  const Member* nearest = nullptr;
  size_t best_p = SIZE_MAX, best_s = SIZE_MAX;
  for (const Member& m : fam.members) {
    size_t p = 0, s = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      if (m.values[i] == values[i]) continue;
      ++s;
      if (!is_output(fam.layout[i].kind)) ++p;
    }
    if (p < best_p || (p == best_p && s <= best_s)) {
      best_p = p;
      best_s = s;
      nearest = &m;
    }
  }
  return nearest;
}

}  // namespace

std::vector<std::pair<int, int>> varying_input_dims(const Signature& sig) {
  std::vector<std::pair<int, int>> out;
  auto it = g_families.find(sig.family);
  if (it == g_families.end() || it->second.layout.size() != sig.items.size()) return out;
  std::vector<int64_t> values(sig.items.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = sig.items[i].value;
  const Member* m = nearest_member(it->second, values);
  if (!m) return out;
  for (size_t i = 0; i < values.size(); ++i) {
    const SpecItem& item = sig.items[i];
    if (item.kind == SpecItem::kInputDim && m->values[i] != values[i])
      out.emplace_back(item.where, item.sub);
  }
  return out;
}

Signature signature_of(const LazyGraph& g) {
  Signature s;
  uint64_t h = 1469598103934665603ULL;
  // Leaf node of each input slot: host snapshots (wrapped numbers) are structure.
  std::unordered_map<int, const Node*> leaf_at;
  for (const auto& kv : g.first_slot) {
    if (kv.first->kind != NodeKind::kOp) leaf_at[kv.second] = kv.first;
  }
  for (size_t i = 0; i < g.input_metas.size(); ++i) {
    auto it = leaf_at.find(g.input_slots[i]);
    const Node* leaf = it == leaf_at.end() ? nullptr : it->second;
    const bool host = leaf && leaf->kind == NodeKind::kHost;
    mix(h, host ? -2 : -1);
    if (host) mix(h, leaf->data.unsafeGetTensorImpl()->is_wrapped_number());
    meta_items(g.input_metas[i], SpecItem::kInputDim, SpecItem::kInputDtype, static_cast<int>(i), 0,
               h, s, /*layout=*/true);
  }
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const Node* n = g.ops[k];
    const int op = static_cast<int>(k);
    mix(h, -3);
    mix(h, static_cast<int64_t>(std::hash<std::string>()(n->op->schema().name())));
    mix(h, static_cast<int64_t>(std::hash<std::string>()(n->op->schema().overload_name())));
    for (size_t i = 0; i < n->specs.size(); ++i) {
      const auto& sp = n->specs[i];
      const int arg = static_cast<int>(i);
      mix(h, 100 + static_cast<int>(sp.kind));
      switch (sp.kind) {
        case ArgKind::kPlain:
          attr_values(n->args[i], h, s, op, arg, nullptr);
          break;
        case ArgKind::kTensor:
        case ArgKind::kTensorList:
        case ArgKind::kOptTensorList:
          mix(h, static_cast<int64_t>(sp.operands.size()));
          for (int o : sp.operands) mix(h, o < 0 ? -1 : slot_of(g, n->operands[o]));
          break;
        case ArgKind::kScalar: {
          SpecItem it{SpecItem::kScalarType};
          it.where = op;
          it.sub = arg;
          it.value = scalar_tag(n->args[i]);
          s.items.push_back(it);
          break;
        }
        case ArgKind::kScalarList: {
          auto l = n->args[i].toList();
          mix(h, static_cast<int64_t>(l.size()));
          for (size_t j = 0; j < l.size(); ++j) {
            SpecItem it{SpecItem::kScalarType};
            it.where = op;
            it.sub = arg;
            it.elem = static_cast<int>(j);
            it.value = scalar_tag(l.get(j));
            s.items.push_back(it);
          }
          break;
        }
        case ArgKind::kGenerator:
        case ArgKind::kDevice:
          break;
      }
    }
    if (n->seeded_default) mix(h, -7);
    mix(h, static_cast<int64_t>(n->outputs.size()));
    for (size_t o = 0; o < n->outputs.size(); ++o) {
      meta_items(n->outputs[o], SpecItem::kOutputDim, SpecItem::kOutputDtype, op,
                 static_cast<int>(o), h, s, /*layout=*/false);
    }
  }
  mix(h, -4);
  for (int slot : g.output_slots) mix(h, slot);
  s.family = h;
  return s;
}

RecompileReport note_compile(const LazyGraph& g, const Signature& sig, const std::string& site) {
  RecompileReport r;
  std::vector<int64_t> values(sig.items.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = sig.items[i].value;
  Family& fam = g_families[sig.family];
  if (fam.members.empty()) fam.layout = sig.items;
  const bool same_layout = fam.layout.size() == sig.items.size();
  const Member* nearest = same_layout ? nearest_member(fam, values) : nullptr;
  const std::string where = site.empty() ? "" : " at " + site;
  if (nearest) {
    std::vector<Change> changes = describe(g, fam.layout, nearest->values, values);
    std::ostringstream os;
    os << "ember: recompiling" << where << ": ";
    if (changes.empty()) {
      r.reason = "structure";
      os << "the same shapes, dtypes and attributes as a cached graph; its layout differs";
    } else {
      r.reason = changes[0].reason;
      const size_t shown = std::min<size_t>(changes.size(), 3);
      for (size_t i = 0; i < shown; ++i) os << (i ? "; " : "") << changes[i].text;
      if (changes.size() > shown) os << "; and " << changes.size() - shown << " more changes";
    }
    os << " [against the nearest of " << fam.members.size() << " cached graph"
       << (fam.members.size() == 1 ? "" : "s") << " of this structure]";
    r.text = os.str();
  }
  if (same_layout) fam.members.push_back(Member{g.hash, std::move(values)});
  if (site.empty()) return r;
  std::vector<std::string> ops, ins;
  for (const Node* n : g.ops)
    ops.push_back(n->op->schema().name() + "->" + meta_str(n->outputs[0]));
  for (const auto& m : g.input_metas) ins.push_back(meta_str(m));
  SiteInfo& info = g_sites[site];
  if (!nearest && !info.graphs.empty()) {
    r.reason = "structure";
    r.text =
        "ember: recompiling" + where + ": a new graph structure: " + structure_diff(info, ops, ins);
  }
  info.graphs.insert(g.hash);
  info.last_ops = std::move(ops);
  info.last_inputs = std::move(ins);
  const int64_t limit = config().recompile_warn_limit.load();
  if (!info.warned && static_cast<int64_t>(info.graphs.size()) > limit) {
    info.warned = true;
    r.warning = "ember: " + site + " has compiled " + std::to_string(info.graphs.size()) +
                " distinct graphs (limit " + std::to_string(limit) +
                "); shapes or dtypes probably change every step (EMBER_LOG=recompile names "
                "what changes)";
  }
  return r;
}

void clear_families() {
  g_families.clear();
  g_sites.clear();
}

}  // namespace ember_torch
