// Scaled dot-product attention, whole (src/torch/attention.cpp registers it):
//   ember::sdpa_forward(q, k, v, attn_mask?, philox_seed, philox_offset,
//                       is_causal, [scale, dropout_p]) -> out
//   ember::sdpa_backward(grad_out, q, k, v, attn_mask?, philox_seed,
//                        philox_offset, is_causal, [scale, dropout_p])
//       -> (grad_q, grad_k, grad_v, grad_mask)
// q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev]; attn_mask bool (true =
// attend) or of q's dtype, broadcastable to [B, H, L, S]; philox_seed/offset
// 0-d s64 (bits of a u64 pair). Computed in f32 (f64 for f64 inputs), rounded
// once at each output.
//
//   S = scale * (q k^T)  [+ mask | where(mask, S, -inf)]  [where(j <= i, S, -inf)]
//   P = softmax(S) over the last dim, rows whose maximum is -inf give 0
//   Z = P * keep / (1 - p)  (dropout; keep = Philox U(seed, offset) < 1 - p, f32)
//   out = Z v
// Backward (softmax recomputed from the scores: no saved probabilities; inside
// one graph CSE merges the recomputation with the forward's nodes):
//   dV = Z^T dO,  dZ = dO v^T,  dP = dZ * keep / (1 - p),
//   dS = P * (dP - rowsum(dP * P)),  dq = scale * dS k,  dk = scale * dS^T q,
//   d mask = dS summed over the dims the mask was broadcast along.
// QK^T, PV and the four backward products are dot-generals (externs); the
// scaling, masking, softmax and dropout are elementwise/row ops that fuse.
// scale and dropout_p are plain arguments (the graph key), so dropout_p == 0
// draws nothing and the causal/mask structure is known at lowering time.
#include <cmath>

#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

struct Sdpa {
  TensorArg q, k, v;
  std::optional<TensorArg> mask;
  TensorArg seed, offset;
  bool causal = false;
  double scale = 1, dropout_p = 0;
  DType ct = DType::kF32;       // computation dtype
  std::vector<int64_t> scores;  // [B, H, L, S]
};

// Parses the arguments from position `first` (0: forward, 1: backward).
StatusOr<Sdpa> Parse(const AtenCall& c, size_t first) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  Sdpa a;
  EMBER_ASSIGN_OR_RETURN(a.q, TensorAt(c, first + 0));
  EMBER_ASSIGN_OR_RETURN(a.k, TensorAt(c, first + 1));
  EMBER_ASSIGN_OR_RETURN(a.v, TensorAt(c, first + 2));
  EMBER_ASSIGN_OR_RETURN(a.mask, OptTensorAt(c, first + 3));
  EMBER_ASSIGN_OR_RETURN(a.seed, TensorAt(c, first + 4));
  EMBER_ASSIGN_OR_RETURN(a.offset, TensorAt(c, first + 5));
  EMBER_ASSIGN_OR_RETURN(a.causal, BoolAt(c, first + 6));
  const Arg& sd = ArgAt(c, first + 7);
  if (sd.kind != Arg::Kind::kDoubleList || sd.doubles.size() != 2)
    return InvalidArgument(c.op, ": argument ", first + 7, " must be [scale, dropout_p]");
  a.scale = sd.doubles[0];
  a.dropout_p = sd.doubles[1];
  const auto &q = a.q.sizes, &k = a.k.sizes, &v = a.v.sizes;
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return InvalidArgument(c.op, ": query/key/value must be 4-D");
  if (a.q.dtype != a.k.dtype || a.q.dtype != a.v.dtype || !IsFloat(a.q.dtype))
    return Declined("query/key/value not of one floating dtype");
  if (q[0] != k[0] || q[0] != v[0] || q[1] != k[1] || q[1] != v[1] || q[3] != k[3] || k[2] != v[2])
    return InvalidArgument(c.op, ": inconsistent query/key/value shapes");
  if (a.seed.dtype != DType::kS64 || !a.seed.sizes.empty() || a.offset.dtype != DType::kS64 ||
      !a.offset.sizes.empty())
    return InvalidArgument(c.op, ": philox_seed/philox_offset must be 0-d s64");
  a.scores = {q[0], q[1], q[2], k[2]};
  if (a.mask) {
    const auto& m = a.mask->sizes;
    if (m.size() > 4 || !BroadcastShapes(m, a.scores) || *BroadcastShapes(m, a.scores) != a.scores)
      return InvalidArgument(c.op, ": attn_mask not broadcastable to the scores");
    if (a.mask->dtype != DType::kPred && a.mask->dtype != a.q.dtype)
      return Declined("attn_mask dtype differs from query");
  }
  if (!(a.dropout_p >= 0 && a.dropout_p <= 1))
    return InvalidArgument(c.op, ": dropout_p outside [0, 1]");
  a.ct = a.q.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  return a;
}

DotDims Dims(int64_t lhs_contracting, int64_t rhs_contracting) {
  DotDims d;
  d.lhs_batch = {0, 1};
  d.rhs_batch = {0, 1};
  d.lhs_contracting = {lhs_contracting};
  d.rhs_contracting = {rhs_contracting};
  return d;
}

// Row reductions over the last dim of [B, H, L, S] and their broadcast back:
// reduce + broadcast-in-dim with no reshape between, the form the fusion pass
// turns into one row kernel.
NodeId RowReduce(GraphBuilder& b, NodeId x, ReduceKind kind) { return b.Reduce(x, {3}, kind); }
NodeId RowBroadcast(GraphBuilder& b, NodeId r, const std::vector<int64_t>& ss) {
  return b.BroadcastInDim(r, ss, {0, 1, 2});
}

struct Probs {
  NodeId p = kInvalidNode;     // softmax probabilities [B, H, L, S]
  NodeId keep = kInvalidNode;  // dropout: keep / (1 - p) in ct; kInvalidNode without dropout
};

// The masked, scaled scores' softmax and the dropout multiplier. Built the same
// way by forward and backward, so CSE can merge them within one graph.
Probs BuildProbs(GraphBuilder& b, const Sdpa& a, NodeId qf, NodeId kf) {
  const auto& ss = a.scores;
  const std::vector<int64_t> rows = {ss[0], ss[1], ss[2]};
  NodeId s = b.DotGeneral(qf, kf, Dims(3, 3));
  s = b.Multiply(s, Splat(b, a.ct, a.scale, ss));
  NodeId ninf = Splat(b, a.ct, -INFINITY, ss);
  if (a.mask) {
    NodeId m = BroadcastTo(b, a.mask->value, a.mask->sizes, ss);
    s = a.mask->dtype == DType::kPred ? b.Select(m, s, ninf) : b.Add(s, ConvertTo(b, m, a.ct));
  }
  if (a.causal) {
    const std::vector<int64_t> ls = {ss[2], ss[3]};
    NodeId row = b.Iota(Shape(DType::kS64, ls), 0);
    NodeId col = b.Iota(Shape(DType::kS64, ls), 1);
    NodeId allowed = BroadcastTo(b, b.Compare(col, row, ComparisonKind::kLe), ls, ss);
    s = b.Select(allowed, s, ninf);
  }
  // Softmax over S; a row whose maximum is -inf (everything masked) gives 0.
  NodeId mx = RowReduce(b, s, ReduceKind::kMaximum);
  NodeId e = b.Exp(b.Subtract(s, RowBroadcast(b, mx, ss)));
  NodeId sum = RowReduce(b, e, ReduceKind::kAdd);
  NodeId p = b.Divide(e, RowBroadcast(b, sum, ss));
  NodeId masked_row = b.Compare(mx, Splat(b, a.ct, -INFINITY, rows), ComparisonKind::kEq);
  p = b.Select(RowBroadcast(b, masked_row, ss), Splat(b, a.ct, 0, ss), p);
  Probs r;
  r.p = p;
  if (a.dropout_p > 0) {
    NodeId seed = ConvertTo(b, a.seed.value, DType::kU64);
    NodeId offset = ConvertTo(b, a.offset.value, DType::kU64);
    NodeId u = b.RngUniform(seed, offset, Shape(DType::kF32, ss), /*stream=*/0);
    NodeId keep = b.Compare(u, Splat(b, DType::kF32, static_cast<float>(1.0 - a.dropout_p), ss),
                            ComparisonKind::kLt);
    double kept_scale = a.dropout_p >= 1 ? 0.0 : 1.0 / (1.0 - a.dropout_p);
    r.keep = b.Multiply(ConvertTo(b, keep, a.ct), Splat(b, a.ct, kept_scale, ss));
  }
  return r;
}

LowerResult LowerForward(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Sdpa a, Parse(c, 0));
  const OutputMeta& out = c.outputs.at(0);
  NodeId qf = ConvertTo(b, a.q.value, a.ct), kf = ConvertTo(b, a.k.value, a.ct);
  NodeId vf = ConvertTo(b, a.v.value, a.ct);
  Probs pr = BuildProbs(b, a, qf, kf);
  NodeId z = pr.keep == kInvalidNode ? pr.p : b.Multiply(pr.p, pr.keep);
  NodeId o = b.DotGeneral(z, vf, Dims(3, 2));
  return CheckOutputs(b, c, {Finish(b, o, out)});
}

// ds [B, H, L, S] summed to the mask's sizes (numpy broadcasting undone).
NodeId SumToMask(GraphBuilder& b, NodeId ds, const std::vector<int64_t>& ss,
                 const std::vector<int64_t>& mask) {
  const size_t lead = ss.size() - mask.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < ss.size(); ++d) {
    if (d < lead || (mask[d - lead] == 1 && ss[d] != 1)) dims.push_back(static_cast<int64_t>(d));
  }
  NodeId r = dims.empty() ? ds : b.Reduce(ds, dims, ReduceKind::kAdd);
  return b.Reshape(r, mask);
}

LowerResult LowerBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg go, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Sdpa a, Parse(c, 1));
  if (c.outputs.size() != 4) return InvalidArgument(c.op, ": expected four outputs");
  const auto& ss = a.scores;
  NodeId qf = ConvertTo(b, a.q.value, a.ct), kf = ConvertTo(b, a.k.value, a.ct);
  NodeId vf = ConvertTo(b, a.v.value, a.ct);
  NodeId gof = ConvertTo(b, go.value, a.ct);
  Probs pr = BuildProbs(b, a, qf, kf);
  NodeId z = pr.keep == kInvalidNode ? pr.p : b.Multiply(pr.p, pr.keep);
  NodeId gv = b.DotGeneral(z, gof, Dims(2, 2));
  NodeId dp = b.DotGeneral(gof, vf, Dims(3, 3));
  if (pr.keep != kInvalidNode) dp = b.Multiply(dp, pr.keep);
  NodeId row = RowReduce(b, b.Multiply(dp, pr.p), ReduceKind::kAdd);
  NodeId ds = b.Multiply(pr.p, b.Subtract(dp, RowBroadcast(b, row, ss)));
  NodeId dss = b.Multiply(ds, Splat(b, a.ct, a.scale, ss));
  NodeId gq = b.DotGeneral(dss, kf, Dims(3, 2));
  NodeId gk = b.DotGeneral(dss, qf, Dims(2, 2));
  const OutputMeta& mo = c.outputs[3];
  NodeId gm;
  if (a.mask && a.mask->dtype != DType::kPred) {
    gm = Finish(b, SumToMask(b, ds, ss, a.mask->sizes), mo);
  } else {
    gm = Splat(b, mo.dtype, 0, mo.sizes);  // no float mask: a 0-element placeholder
  }
  return CheckOutputs(
      b, c,
      {Finish(b, gq, c.outputs[0]), Finish(b, gk, c.outputs[1]), Finish(b, gv, c.outputs[2]), gm});
}

}  // namespace

void RegisterAttention(LoweringTable& t) {
  t.Add("ember::sdpa_forward", LowerForward);
  t.Add("ember::sdpa_backward", LowerBackward);
}

}  // namespace ember::lowering
