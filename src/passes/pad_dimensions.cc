// PadDimensions (pad_dimensions.h): one walk over the graph in node order, rebuilding
// each node on padded operands and recording how each of its dims carries the length.
#include "passes/pad_dimensions.h"

#include <limits>
#include <string>

#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "passes/dce.h"

namespace ember::passes {

namespace {

using Pads = std::vector<DimPadding>;

struct Padder {
  const Graph& g;
  int64_t n, N;
  GraphBuilder b{"padded"};
  std::vector<NodeId> id;                     // old node -> new node
  std::vector<Pads> pads;                     // old node -> padding of each result dim
  std::vector<std::vector<Pads>> tuple_pads;  // old tuple node -> per element
  NodeId length = kInvalidNode;
  const CustomCallPadding* custom_call = nullptr;

  Padder(const Graph& graph, int64_t len, int64_t padded) : g(graph), n(len), N(padded) {
    tuple_pads.resize(g.num_nodes());
    id.assign(g.num_nodes(), kInvalidNode);
    pads.resize(g.num_nodes());
  }

  Status Refuse(const Node& node, const std::string& why) const {
    std::string where(OpName(node.op));
    if (!node.metadata.empty()) where += " (" + node.metadata + ")";
    return Unimplemented(where, ": ", why);
  }

  bool OperandPadded(const Node& node) const {
    for (NodeId o : node.operands) {
      if (AnyPadded(pads[o])) return true;
      for (const Pads& e : tuple_pads[o])
        if (AnyPadded(e)) return true;
    }
    return false;
  }

  std::vector<int64_t> PaddedDims(const Shape& s, const Pads& p) const {
    std::vector<int64_t> d = s.dims();
    for (size_t i = 0; i < d.size(); ++i)
      if (p[i].padded) d[i] = p[i].outer * N * p[i].inner;
    return d;
  }

  // Whether position i along dim `dim` of new value `x` is real: (i / inner) % N < n.
  NodeId RealPositions(const std::vector<int64_t>& dims, int64_t dim, const DimPadding& p) {
    NodeId pos = b.Iota(Shape(DType::kS64, dims), dim);
    auto scalar = [&](int64_t v) {
      return b.BroadcastInDim(b.Constant(Literal::ScalarInt(DType::kS64, v)), dims, {});
    };
    if (p.inner > 1) pos = b.Divide(pos, scalar(p.inner));
    if (p.outer > 1) pos = b.Binary(OpKind::kRemainder, pos, scalar(N));
    return b.Compare(pos, b.BroadcastInDim(length, dims, {}), ComparisonKind::kLt);
  }

  // `x` (new node) with every padded position along the padded dims `which` of `p` set to
  // `fill` (a scalar literal of x's dtype).
  NodeId Mask(NodeId x, const Pads& p, const std::vector<int64_t>& which, const Literal& fill) {
    const std::vector<int64_t> dims = b.shape(x).dims();
    NodeId f = b.BroadcastInDim(b.Constant(fill), dims, {});
    for (int64_t d : which) {
      if (!p[d].padded) continue;
      x = b.Select(RealPositions(dims, d, p[d]), x, f);
    }
    return x;
  }
  NodeId MaskAll(NodeId x, const Pads& p, const Literal& fill) {
    std::vector<int64_t> all(p.size());
    for (size_t i = 0; i < p.size(); ++i) all[i] = static_cast<int64_t>(i);
    return Mask(x, p, all, fill);
  }

  static Literal Zero(DType t) {
    return IsFloat(t) || IsComplex(t) ? Literal::ScalarDouble(t, 0) : Literal::ScalarInt(t, 0);
  }
  // The identity of `k` on `t` (what a padded position must hold for a reduction over it
  // to equal the reduction over the real positions).
  static std::optional<Literal> Identity(ReduceKind k, DType t) {
    const double inf = std::numeric_limits<double>::infinity();
    const bool fl = IsFloat(t);
    auto lowest = [&]() -> Literal {
      if (fl) return Literal::ScalarDouble(t, -inf);
      if (IsPred(t) || IsUnsignedInt(t)) return Literal::ScalarInt(t, 0);
      return Literal::ScalarInt(t, -(int64_t{1} << (BitWidth(t) - 2)) * 2);
    };
    auto highest = [&]() -> Literal {
      if (fl) return Literal::ScalarDouble(t, inf);
      if (IsPred(t)) return Literal::ScalarInt(t, 1);
      if (IsUnsignedInt(t) && BitWidth(t) == 64)
        return Literal::ScalarInt(t, -1);  // all ones: u64 max
      if (IsUnsignedInt(t)) return Literal::ScalarInt(t, (int64_t{1} << BitWidth(t)) - 1);
      return Literal::ScalarInt(t, std::numeric_limits<int64_t>::max() >> (64 - BitWidth(t)));
    };
    if (IsComplex(t) && k != ReduceKind::kAdd) return std::nullopt;
    switch (k) {
      case ReduceKind::kAdd:
      case ReduceKind::kOr:
        return Zero(t);
      case ReduceKind::kMultiply:
        return IsFloat(t) || IsComplex(t) ? Literal::ScalarDouble(t, 1) : Literal::ScalarInt(t, 1);
      case ReduceKind::kAnd:  // bitwise on integers: all ones
        return IsPred(t) ? Literal::ScalarInt(t, 1) : Literal::ScalarInt(t, -1);
      case ReduceKind::kMaximum:
        return lowest();
      case ReduceKind::kMinimum:
        return highest();
      case ReduceKind::kAssign:
        return std::nullopt;
    }
    return std::nullopt;
  }

  // Operands of an elementwise op (or concatenate) agree on each dim (rank-0 operands
  // aside): where one is padded, the others must be too, or be widened to it (Widen).
  StatusOr<Pads> Agree(const Node& node, std::vector<NodeId>& ops) {
    Pads out(node.shape.rank());
    for (NodeId o : node.operands) {
      if (g.node(o).shape.rank() == 0) continue;
      for (size_t d = 0; d < out.size(); ++d)
        if (pads[o][d].padded && !out[d].padded) out[d] = pads[o][d];
    }
    const bool concat = node.op == OpKind::kConcatenate;
    for (size_t k = 0; k < node.operands.size(); ++k) {
      const NodeId o = node.operands[k];
      if (g.node(o).shape.rank() == 0 || pads[o] == out) continue;
      Pads want = out;
      if (concat) want[attr::Dimension(node)] = pads[o][attr::Dimension(node)];
      ops[k] = Widen(o, want);
      if (ops[k] == kInvalidNode)
        return Refuse(node, "its operands disagree on which dim carries the padded length " +
                                std::to_string(n) + " (one is padded, another is not)");
    }
    return out;
  }

  // Per result dim of gather `node`: the indices dim it ranges over (a batch dim), or -1
  // (an offset dim, a slice of the operand).
  std::vector<int64_t> GatherBatchDims(const Node& node) const {
    const GatherDims gd = GatherDimsOf(node);
    const int64_t index_rank = g.node(node.operands[1]).shape.rank();
    std::vector<int64_t> of(node.shape.rank(), -1);
    std::vector<bool> offset(node.shape.rank(), false);
    for (int64_t d : gd.offset_dims) offset[d] = true;
    int64_t k = 0;
    for (int i = 0; i < node.shape.rank(); ++i) {
      if (offset[i]) continue;
      if (k == gd.index_vector_dim) ++k;
      if (k < index_rank) of[i] = k;
      ++k;
    }
    return of;
  }

  // Per operand dim of broadcast-in-dim `node`: the result dim it is (same size), or -1
  // (a dim of size 1 expanded).
  std::vector<int64_t> BroadcastKeptDims(const Node& node) const {
    const auto& bd = attr::Dimensions(node);
    const Shape& os = g.node(node.operands[0]).shape;
    std::vector<int64_t> of(bd.size(), -1);
    for (size_t i = 0; i < bd.size(); ++i)
      if (os.dim(static_cast<int>(i)) == node.shape.dim(static_cast<int>(bd[i]))) of[i] = bd[i];
    return of;
  }

  // Old node `o` recomputed with the padding `want` (each dim as padded or more): values
  // that do not depend on position along a dim, or are iota along it, have a padded form
  // that keeps the invariant. A dim of length n the walk left unpadded (a bias broadcast
  // over `[B*n, C]`, an `arange(n)` indexing an embedding) is so widened where it meets a
  // padded operand; a coincidental dim of length n elsewhere never is. Handles
  // broadcast-in-dim, iota, elementwise ops over such values and gathers indexed by
  // them, through reshapes that add or drop dims of size 1; kInvalidNode otherwise.
  NodeId Widen(NodeId o, const Pads& want) {
    if (pads[o] == want) return id[o];
    const Node& node = g.node(o);
    for (size_t d = 0; d < want.size(); ++d)
      if (pads[o][d] != want[d] && pads[o][d].padded) return kInvalidNode;
    if (node.op == OpKind::kIota) {
      // Along a merged dim the values would count padded positions (o * N + t).
      if (want[attr::IotaDimension(node)].outer > 1) return kInvalidNode;
      return Rebuild(node, {}, want);
    }
    if (node.op == OpKind::kBroadcastInDim) {
      const NodeId x = node.operands[0];
      const std::vector<int64_t> kept = BroadcastKeptDims(node);
      Pads xw = pads[x];
      for (size_t i = 0; i < kept.size(); ++i)
        if (kept[i] >= 0) xw[i] = want[kept[i]];
      NodeId xv = Widen(x, xw);
      if (xv == kInvalidNode) return kInvalidNode;
      return b.BroadcastInDim(xv, PaddedDims(node.shape, want), attr::Dimensions(node));
    }
    if (IsElementwise(node.op)) {
      std::vector<NodeId> ops;
      for (NodeId a : node.operands) {
        ops.push_back(g.node(a).shape.rank() == 0 ? id[a] : Widen(a, want));
        if (ops.back() == kInvalidNode) return kInvalidNode;
      }
      return Rebuild(node, ops, want);
    }
    if (node.op == OpKind::kReshape) {
      // Only a reshape that adds or drops dims of size 1: its other dims map in order.
      const NodeId x = node.operands[0];
      const Shape& xs = g.node(x).shape;
      std::vector<int> xd, od;
      for (int i = 0; i < xs.rank(); ++i)
        if (xs.dim(i) != 1) xd.push_back(i);
      for (int i = 0; i < node.shape.rank(); ++i)
        if (node.shape.dim(i) != 1) od.push_back(i);
      if (xd.size() != od.size()) return kInvalidNode;
      Pads xw = pads[x];
      for (size_t i = 0; i < xd.size(); ++i) {
        if (xs.dim(xd[i]) != node.shape.dim(od[i])) return kInvalidNode;
        xw[xd[i]] = want[od[i]];
      }
      for (size_t d = 0; d < want.size(); ++d)
        if (want[d].padded && node.shape.dim(static_cast<int>(d)) == 1) return kInvalidNode;
      NodeId xv = Widen(x, xw);
      if (xv == kInvalidNode) return kInvalidNode;
      return Rebuild(node, {xv}, want);
    }
    if (node.op == OpKind::kGather) {
      const NodeId src = node.operands[0], idx = node.operands[1];
      if (AnyPadded(pads[src])) return kInvalidNode;
      const std::vector<int64_t> batch = GatherBatchDims(node);
      Pads iw = pads[idx];
      for (size_t i = 0; i < batch.size(); ++i) {
        if (batch[i] >= 0)
          iw[batch[i]] = want[i];
        else if (want[i].padded)
          return kInvalidNode;
      }
      NodeId iv = Widen(idx, iw);
      if (iv == kInvalidNode) return kInvalidNode;
      iv = MaskAll(iv, iw, Zero(g.node(idx).shape.dtype()));
      return Rebuild(node, {id[src], iv}, want);
    }
    return kInvalidNode;
  }

  // `node` over new operands, its result declared as padded by `p`: shape inference then
  // checks that the padding of every dim is what the op computes.
  NodeId Rebuild(const Node& node, const std::vector<NodeId>& ops, const Pads& p,
                 const Attrs* attrs = nullptr) {
    return b.AddNode(node.op, ops, attrs ? *attrs : node.attrs,
                     Shape(node.shape.dtype(), PaddedDims(node.shape, p)), node.literal,
                     node.metadata, node.called);
  }

  // The factor analysis of a reshape: the input's dims as numeric runs and the padded
  // factor, consumed in order by the result's dims. nullopt when the padded factor
  // would be split or two padded factors merged.
  std::optional<Pads> ReshapePads(const Shape& in, const Pads& ip, const Shape& out) const {
    struct Factor {
      int64_t size;
      bool padded;
    };
    std::vector<Factor> fs;
    auto numeric = [&](int64_t s) {
      if (s == 1) return;
      if (!fs.empty() && !fs.back().padded)
        fs.back().size *= s;
      else
        fs.push_back({s, false});
    };
    for (int i = 0; i < in.rank(); ++i) {
      if (!ip[i].padded) {
        numeric(in.dim(i));
        continue;
      }
      numeric(ip[i].outer);
      fs.push_back({n, true});
      numeric(ip[i].inner);
    }
    Pads op(out.rank());
    size_t fi = 0;
    int64_t cur = fs.empty() ? 1 : fs[0].size;
    auto advance = [&]() {
      ++fi;
      cur = fi < fs.size() ? fs[fi].size : 1;
    };
    for (int j = 0; j < out.rank(); ++j) {
      int64_t need = out.dim(j), before = 1, after = 1;
      bool seen = false;
      while (need > 1) {
        if (fi >= fs.size()) return std::nullopt;
        if (fs[fi].padded) {
          if (seen || need % n != 0) return std::nullopt;
          seen = true;
          need /= n;
          advance();
          continue;
        }
        int64_t& part = seen ? after : before;
        if (need % cur == 0) {
          need /= cur;
          part *= cur;
          advance();
        } else if (cur % need == 0) {
          cur /= need;
          part *= need;
          need = 1;
        } else {
          return std::nullopt;
        }
      }
      if (seen) op[j] = DimPadding{true, before, after};
    }
    for (; fi < fs.size(); advance())
      if (fs[fi].padded) return std::nullopt;
    return op;
  }

  Status Visit(const Node& node) {
    const NodeId old = node.id;
    std::vector<NodeId> ops;
    for (NodeId o : node.operands) ops.push_back(id[o]);
    Pads& out = pads[old];
    out.assign(node.shape.is_tuple() ? 0 : node.shape.rank(), DimPadding{});
    const bool padded_in = OperandPadded(node);
    auto take = [&](NodeId nid) {
      id[old] = nid;
      return b.status().ok() ? Status() : b.status();
    };
    const OpKind op = node.op;
    if (op == OpKind::kParameter || op == OpKind::kConstant) {
      return take(op == OpKind::kConstant ? b.AddNodeLike(node, {}) : id[old]);
    }
    if (op == OpKind::kIota) return take(Rebuild(node, ops, out));  // padded by Widen
    if (IsRng(op)) {
      for (int64_t d : node.shape.dims())
        if (d == n)
          return Refuse(node, "it draws random numbers over a dim of the padded length " +
                                  std::to_string(n) + " (padding would change the draws)");
      return take(b.AddNodeLike(node, ops));
    }
    if (IsElementwise(op)) {
      EMBER_ASSIGN_OR_RETURN(out, Agree(node, ops));
      // An integer division raises on a zero divisor: padded positions divide by 1.
      const DType dt = node.shape.dtype();
      if ((op == OpKind::kDivide || op == OpKind::kRemainder) && (IsInteger(dt)) && AnyPadded(out))
        ops[1] = MaskAll(ops[1], out, Literal::ScalarInt(dt, 1));
      return take(Rebuild(node, ops, out));
    }
    switch (op) {
      case OpKind::kBroadcastInDim: {
        const std::vector<int64_t> kept = BroadcastKeptDims(node);
        for (size_t i = 0; i < kept.size(); ++i)
          if (kept[i] >= 0) out[kept[i]] = pads[node.operands[0]][i];
        return take(Rebuild(node, ops, out));  // created dims: padded by Widen
      }
      case OpKind::kReshape: {
        const NodeId x = node.operands[0];
        if (!AnyPadded(pads[x])) return take(Rebuild(node, ops, out));
        auto rp = ReshapePads(g.node(x).shape, pads[x], node.shape);
        if (!rp) return Refuse(node, "it splits the dim of the padded length " + std::to_string(n));
        out = *rp;
        return take(Rebuild(node, ops, out));
      }
      case OpKind::kTranspose: {
        const auto& perm = attr::Dimensions(node);
        for (size_t i = 0; i < perm.size(); ++i) out[i] = pads[node.operands[0]][perm[i]];
        return take(Rebuild(node, ops, out));
      }
      case OpKind::kSlice: {
        const Pads& ip = pads[node.operands[0]];
        std::vector<int64_t> start = attr::Start(node), limit = attr::Limit(node),
                             stride = attr::Stride(node);
        const Shape& is = g.node(node.operands[0]).shape;
        for (size_t i = 0; i < ip.size(); ++i) {
          if (!ip[i].padded) continue;
          const int64_t st = stride.empty() ? 1 : stride[i];
          if (start[i] == 0 && limit[i] == is.dim(static_cast<int>(i)) && st == 1) {
            out[i] = ip[i];
            limit[i] = ip[i].outer * N * ip[i].inner;
          } else if (ip[i].outer != 1 || ip[i].inner != 1) {
            return Refuse(node, "it takes part of a merged dim of the padded length");
          }  // else: within the real positions, the result dim is not padded
        }
        Attrs a = node.attrs;
        a.Set(attr::Limit.key, limit);
        return take(Rebuild(node, ops, out, &a));
      }
      case OpKind::kConcatenate: {
        EMBER_ASSIGN_OR_RETURN(out, Agree(node, ops));
        if (out[attr::Dimension(node)].padded)
          return Refuse(node, "it concatenates along the padded dim");
        return take(Rebuild(node, ops, out));
      }
      case OpKind::kPad: {
        out = pads[node.operands[0]];
        const auto &lo = attr::Low(node), &hi = attr::High(node), &in = attr::Interior(node);
        for (size_t i = 0; i < out.size(); ++i) {
          if (out[i].padded && (lo[i] != 0 || hi[i] != 0 || (!in.empty() && in[i] != 0)))
            return Refuse(node, "it pads the padded dim");
        }
        return take(Rebuild(node, ops, out));
      }
      case OpKind::kReduce: {
        const NodeId x = node.operands[0];
        const auto& dims = attr::Dimensions(node);
        NodeId xv = ops[0];
        bool masked = false;
        for (int64_t d : dims) masked |= pads[x][d].padded;
        if (masked) {
          auto fill = Identity(attr::ToApply(node), g.node(x).shape.dtype());
          if (!fill) return Refuse(node, "its combiner has no identity to pad with");
          xv = Mask(xv, pads[x], dims, *fill);
        }
        int j = 0;
        for (size_t i = 0; i < pads[x].size(); ++i) {
          bool reduced = false;
          for (int64_t d : dims) reduced |= d == static_cast<int64_t>(i);
          if (!reduced) out[j++] = pads[x][i];
        }
        return take(Rebuild(node, {xv}, out));
      }
      case OpKind::kArgMax:
      case OpKind::kArgMin: {
        const NodeId x = node.operands[0];
        const int64_t d = attr::Dimension(node);
        NodeId xv = ops[0];
        if (pads[x][d].padded && pads[x][d].outer > 1)
          return Refuse(node, "its index along a merged dim would count padded positions");
        if (pads[x][d].padded) {
          auto fill = Identity(op == OpKind::kArgMax ? ReduceKind::kMaximum : ReduceKind::kMinimum,
                               g.node(x).shape.dtype());
          if (!fill) return Refuse(node, "its dtype has no extreme value to pad with");
          xv = Mask(xv, pads[x], {d}, *fill);
        }
        int j = 0;
        for (size_t i = 0; i < pads[x].size(); ++i)
          if (static_cast<int64_t>(i) != d) out[j++] = pads[x][i];
        return take(Rebuild(node, {xv}, out));
      }
      case OpKind::kReduceWindow: {
        out = pads[node.operands[0]];
        const auto &wd = attr::WindowDimensions(node), &ws = attr::WindowStrides(node),
                   &pl = attr::PaddingLow(node), &ph = attr::PaddingHigh(node),
                   &dl = attr::WindowDilations(node);
        for (size_t i = 0; i < out.size(); ++i) {
          if (!out[i].padded) continue;
          if (wd[i] != 1 || (!ws.empty() && ws[i] != 1) || (!pl.empty() && pl[i] != 0) ||
              (!ph.empty() && ph[i] != 0) || (!dl.empty() && dl[i] != 1))
            return Refuse(node, "its window slides along the padded dim");
        }
        return take(Rebuild(node, ops, out));
      }
      case OpKind::kDotGeneral: {
        const NodeId l = node.operands[0], r = node.operands[1];
        const DotDims dd = DotDimsOf(node);
        NodeId lv = ops[0], rv = ops[1];
        for (size_t i = 0; i < dd.lhs_batch.size(); ++i) {
          if (pads[l][dd.lhs_batch[i]] != pads[r][dd.rhs_batch[i]])
            return Refuse(node, "its operands disagree on a padded batch dim");
        }
        for (size_t i = 0; i < dd.lhs_contracting.size(); ++i) {
          const DimPadding& lp = pads[l][dd.lhs_contracting[i]];
          if (lp != pads[r][dd.rhs_contracting[i]])
            return Refuse(node, "its operands disagree on a padded contracting dim");
          if (!lp.padded) continue;
          lv = Mask(lv, pads[l], {dd.lhs_contracting[i]}, Zero(g.node(l).shape.dtype()));
          rv = Mask(rv, pads[r], {dd.rhs_contracting[i]}, Zero(g.node(r).shape.dtype()));
        }
        int j = 0;
        for (int64_t d : dd.lhs_batch) out[j++] = pads[l][d];
        auto free_dims = [&](NodeId x, const std::vector<int64_t>& batch,
                             const std::vector<int64_t>& contracting) {
          for (size_t i = 0; i < pads[x].size(); ++i) {
            bool used = false;
            for (int64_t d : batch) used |= d == static_cast<int64_t>(i);
            for (int64_t d : contracting) used |= d == static_cast<int64_t>(i);
            if (!used) out[j++] = pads[x][i];
          }
        };
        free_dims(l, dd.lhs_batch, dd.lhs_contracting);
        free_dims(r, dd.rhs_batch, dd.rhs_contracting);
        return take(Rebuild(node, {lv, rv}, out));
      }
      case OpKind::kGather: {
        const NodeId src = node.operands[0], idx = node.operands[1];
        if (AnyPadded(pads[src])) return Refuse(node, "it gathers from a padded operand");
        NodeId iv = ops[1];
        if (AnyPadded(pads[idx])) iv = MaskAll(iv, pads[idx], Zero(g.node(idx).shape.dtype()));
        const std::vector<int64_t> batch = GatherBatchDims(node);
        for (size_t i = 0; i < batch.size(); ++i)
          if (batch[i] >= 0) out[i] = pads[idx][batch[i]];
        return take(Rebuild(node, {ops[0], iv}, out));
      }
      case OpKind::kScatter: {
        if (!padded_in) return take(Rebuild(node, ops, out));
        const NodeId dst = node.operands[0], idx = node.operands[1], upd = node.operands[2];
        if (AnyPadded(pads[dst])) return Refuse(node, "it scatters into a padded operand");
        if (attr::ToApply(node) != ReduceKind::kAdd)
          return Refuse(node, "it scatters padded updates with a combiner other than add");
        const ScatterDims sd = ScatterDimsOf(node);
        for (int64_t d : sd.update_window_dims)
          if (pads[upd][d].padded)
            return Refuse(node, "its update window runs along the padded dim");
        NodeId iv = ops[1], uv = ops[2];
        if (AnyPadded(pads[idx])) iv = MaskAll(iv, pads[idx], Zero(g.node(idx).shape.dtype()));
        uv = MaskAll(uv, pads[upd], Zero(g.node(upd).shape.dtype()));
        return take(Rebuild(node, {ops[0], iv, uv}, out));
      }
      case OpKind::kCustomCall: {
        if (!padded_in || !custom_call || !*custom_call) break;
        std::vector<Pads> operand_pads;
        for (NodeId o : node.operands) operand_pads.push_back(pads[o]);
        auto cp = (*custom_call)(node, operand_pads);
        if (!cp.ok()) return Refuse(node, cp.status().message());
        std::vector<Pads>* rp = &cp->results;
        std::vector<Pads> cur = operand_pads;  // after widening
        for (const auto& [k, want] : cp->widen) {
          if (k < 0 || k >= static_cast<int64_t>(ops.size()))
            return Refuse(node, "its padding widens an operand it does not have");
          ops[k] = Widen(node.operands[k], want);
          if (ops[k] == kInvalidNode)
            return Refuse(node, "operand " + std::to_string(k) +
                                    " cannot be recomputed at the padded length");
          cur[k] = want;
        }
        for (const auto& f : cp->fills) {
          if (f.operand < 0 || f.operand >= static_cast<int64_t>(ops.size()))
            return Refuse(node, "its padding fills an operand it does not have");
          ops[f.operand] = Mask(ops[f.operand], cur[f.operand], f.dims, f.value);
        }
        if (cp->key_mask) {
          const auto& km = *cp->key_mask;
          if (km.position < 0 || km.position > static_cast<int64_t>(ops.size()))
            return Refuse(node, "its key mask goes where no operand is");
          DimPadding dp;
          dp.padded = true;
          NodeId mask = b.Select(RealPositions(km.dims, km.dim, dp),
                                 b.BroadcastInDim(b.Constant(km.on_real), km.dims, {}),
                                 b.BroadcastInDim(b.Constant(km.on_padded), km.dims, {}));
          ops.insert(ops.begin() + km.position, mask);
        }
        Shape result;
        if (node.shape.is_tuple()) {
          const auto& es = node.shape.tuple_shapes();
          if (rp->size() != es.size()) return Refuse(node, "its padding names the wrong results");
          std::vector<Shape> padded;
          for (size_t i = 0; i < es.size(); ++i)
            padded.emplace_back(es[i].dtype(), PaddedDims(es[i], (*rp)[i]));
          result = Shape::Tuple(std::move(padded));
          tuple_pads[old] = std::move(*rp);
        } else {
          if (rp->size() != 1) return Refuse(node, "its padding names the wrong results");
          out = (*rp)[0];
          result = Shape(node.shape.dtype(), PaddedDims(node.shape, out));
        }
        Attrs a = node.attrs;
        a.Set(attr::BackendConfig.key, cp->backend_config);
        return take(b.AddNode(op, ops, a, result, node.literal, node.metadata));
      }
      case OpKind::kGetTupleElement: {
        const auto& tp = tuple_pads[node.operands[0]];
        if (tp.empty()) break;
        out = tp[attr::Index(node)];
        return take(Rebuild(node, ops, out));
      }
      default:
        break;
    }
    // Everything else (reverse, dynamic slices, convolution, custom-call, tuples,
    // barriers, fusions) runs unchanged when nothing it reads is padded.
    if (padded_in) return Refuse(node, "it reads a value padded along the varying length");
    return take(b.AddNodeLike(node, ops));
  }
};

}  // namespace

StatusOr<PaddedGraph> PadDimensions(const Graph& g,
                                    const std::vector<std::pair<int64_t, int64_t>>& dims,
                                    int64_t length, int64_t padded_length,
                                    const CustomCallPadding& custom_call) {
  if (length < 2 || padded_length < length)
    return InvalidArgument("PadDimensions: length ", length, " padded to ", padded_length,
                           " (want 1 < length <= padded length)");
  Padder p(g, length, padded_length);
  p.custom_call = &custom_call;
  const int64_t k = static_cast<int64_t>(g.parameters().size());
  PaddedGraph out;
  out.parameters.resize(k);
  for (int64_t i = 0; i < k; ++i) {
    const Node& pn = g.node(g.parameters()[i]);
    if (pn.shape.is_tuple()) return InvalidArgument("PadDimensions: parameter ", i, " is a tuple");
    out.parameters[i].assign(pn.shape.rank(), DimPadding{});
  }
  for (auto [param, dim] : dims) {
    if (param < 0 || param >= k) return InvalidArgument("PadDimensions: no parameter ", param);
    const Shape& s = g.node(g.parameters()[param]).shape;
    if (dim < 0 || dim >= s.rank() || s.dim(static_cast<int>(dim)) != length)
      return InvalidArgument("PadDimensions: parameter ", param, " ", s.ToString(), " has no dim ",
                             dim, " of length ", length);
    out.parameters[param][dim].padded = true;
  }
  for (int64_t i = 0; i < k; ++i) {
    const NodeId pid = g.parameters()[i];
    const Node& pn = g.node(pid);
    p.pads[pid] = out.parameters[i];
    p.id[pid] = p.b.Parameter(i, Shape(pn.shape.dtype(), p.PaddedDims(pn.shape, p.pads[pid])));
  }
  p.length = p.b.Parameter(k, Shape(DType::kS64, {}));
  for (const Node& node : g.nodes()) {
    if (node.op == OpKind::kParameter) continue;
    EMBER_RETURN_IF_ERROR(p.Visit(node));
  }
  std::vector<NodeId> outs;
  for (NodeId o : g.outputs()) {
    outs.push_back(p.id[o]);
    out.outputs.push_back(p.pads[o]);
  }
  p.b.SetOutputs(outs);
  EMBER_ASSIGN_OR_RETURN(out.graph, p.b.Build());
  // Broadcasts redone at the padded size leave their unpadded originals dead; removed,
  // so that lengths of one bucket print as one graph.
  EMBER_RETURN_IF_ERROR(DcePass().Run(out.graph).status());
  return out;
}

}  // namespace ember::passes
