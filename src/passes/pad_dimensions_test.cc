// PadDimensions: a padded graph, run by the interpreter on inputs whose padded
// positions hold garbage (NaN, out-of-range indices), equals the original graph on the
// real positions; programs of two lengths in one bucket are one graph; ops that are not
// pad-safe are refused with their reason.
#include "passes/pad_dimensions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"
#include "ember/ir/text.h"

namespace ember::passes {
namespace {

using Dims = std::vector<std::pair<int64_t, int64_t>>;

// Padded flat index of original flat index `i` of `s` under `pads`.
int64_t PaddedIndex(const Shape& s, const std::vector<DimPadding>& pads, int64_t n, int64_t N,
                    int64_t i) {
  std::vector<int64_t> idx(s.rank()), pdims = s.dims();
  for (int d = s.rank() - 1; d >= 0; --d) {
    idx[d] = i % s.dim(d);
    i /= s.dim(d);
  }
  for (int d = 0; d < s.rank(); ++d) {
    if (!pads[d].padded) continue;
    const int64_t inner = pads[d].inner, o = idx[d] / (n * inner), r = idx[d] % (n * inner);
    idx[d] = o * N * inner + (r / inner) * inner + r % inner;
    pdims[d] = pads[d].outer * N * inner;
  }
  int64_t flat = 0;
  for (int d = 0; d < s.rank(); ++d) flat = flat * pdims[d] + idx[d];
  return flat;
}

// Pads `g` and checks it on random inputs: padded positions of float inputs hold NaN,
// of integer inputs `int_fill` (1000: out of range for any gather here; 0: what the
// torch binding pads with).
PaddedGraph ExpectPadsCorrectly(const Graph& g, const Dims& dims, int64_t n, int64_t N,
                                int64_t int_fill = 1000) {
  StatusOr<PaddedGraph> pg = PadDimensions(g, dims, n, N);
  EXPECT_TRUE(pg.ok()) << pg.status().ToString() << "\n" << PrintGraph(g);
  if (!pg.ok()) return {};
  std::mt19937_64 rng(7);
  for (int draw = 0; draw < 3; ++draw) {
    // Normal floats, integers in [1, 7] (fuzz::RandomArguments draws infinities too,
    // which make every softmax a NaN).
    std::vector<Literal> args;
    std::normal_distribution<double> normal;
    for (NodeId pid : g.parameters()) {
      Literal l(g.node(pid).shape);
      for (int64_t i = 0; i < l.num_elements(); ++i) {
        if (IsFloat(l.dtype()))
          l.SetDouble(i, normal(rng));
        else
          l.SetInt(i, static_cast<int64_t>(rng() % 7) + 1);
      }
      args.push_back(std::move(l));
    }
    std::vector<Literal> padded;
    for (size_t p = 0; p < args.size(); ++p) {
      const Shape& ps = pg->graph.node(pg->graph.parameters()[p]).shape;
      Literal l(ps);
      const bool fl = IsFloat(ps.dtype());
      for (int64_t i = 0; i < l.num_elements(); ++i) {
        if (fl)
          l.SetDouble(i, std::nan(""));
        else
          l.SetInt(i, int_fill);
      }
      for (int64_t i = 0; i < args[p].num_elements(); ++i) {
        const int64_t j = PaddedIndex(args[p].shape(), pg->parameters[p], n, N, i);
        if (fl)
          l.SetDouble(j, args[p].GetDouble(i));
        else
          l.SetInt(j, args[p].GetInt(i));
      }
      padded.push_back(std::move(l));
    }
    padded.push_back(Literal::ScalarInt(DType::kS64, n));
    auto want = Evaluate(g, args);
    auto got = Evaluate(pg->graph, padded);
    EXPECT_TRUE(want.ok()) << want.status().ToString();
    EXPECT_TRUE(got.ok()) << got.status().ToString() << "\n" << PrintGraph(pg->graph);
    if (!want.ok() || !got.ok()) return *pg;
    for (size_t o = 0; o < want->size(); ++o) {
      const Literal &w = (*want)[o], &r = (*got)[o];
      for (int64_t i = 0; i < w.num_elements(); ++i) {
        const double a = w.GetDouble(i);
        const double b = r.GetDouble(PaddedIndex(w.shape(), pg->outputs[o], n, N, i));
        const bool same = a == b || (std::isnan(a) && std::isnan(b));
        if (!same && !(std::fabs(a - b) <= 1e-5 * (1 + std::fabs(a)))) {
          ADD_FAILURE() << "output " << o << " element " << i << ": " << b << ", want " << a;
          return *pg;
        }
      }
    }
  }
  return *pg;
}

Graph BuildOrDie(GraphBuilder& b) {
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : Graph();
}

// x [2, n, 3] -> [2n, 3] @ w [3, 4] + bias -> tanh -> [2, n, 4]: a position-wise layer.
Graph Linear(int64_t n) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {2, n, 3}));
  NodeId w = b.Parameter(1, Shape(DType::kF32, {3, 4}));
  NodeId bias = b.Parameter(2, Shape(DType::kF32, {4}));
  NodeId flat = b.Reshape(x, {2 * n, 3});
  NodeId y = b.DotGeneral(flat, w, DotDims{{}, {}, {1}, {0}});
  y = b.Add(y, b.BroadcastInDim(bias, {2 * n, 4}, {1}));
  b.SetOutputs({b.Reshape(b.Unary(OpKind::kTanh, y), {2, n, 4})});
  return BuildOrDie(b);
}

// Causal softmax attention over q, k, v [2, n, 4]; also the scores' row sums.
Graph CausalAttention(int64_t n) {
  GraphBuilder b;
  Shape s(DType::kF32, {2, n, 4});
  NodeId q = b.Parameter(0, s), k = b.Parameter(1, s), v = b.Parameter(2, s);
  NodeId sc = b.DotGeneral(q, k, DotDims{{0}, {0}, {2}, {2}});  // [2, n, n]
  NodeId i = b.Iota(Shape(DType::kS64, {2, n, n}), 1), j = b.Iota(Shape(DType::kS64, {2, n, n}), 2);
  NodeId ninf = b.BroadcastInDim(b.ConstantScalar(DType::kF32, -INFINITY), {2, n, n}, {});
  sc = b.Select(b.Compare(j, i, ComparisonKind::kLe), sc, ninf);
  NodeId mx = b.Reduce(sc, {2}, ReduceKind::kMaximum);
  NodeId e = b.Exp(b.Subtract(sc, b.BroadcastInDim(mx, {2, n, n}, {0, 1})));
  NodeId sum = b.Reduce(e, {2}, ReduceKind::kAdd);
  NodeId p = b.Divide(e, b.BroadcastInDim(sum, {2, n, n}, {0, 1}));
  NodeId out = b.DotGeneral(p, v, DotDims{{0}, {0}, {2}, {1}});  // [2, n, 4]
  b.SetOutputs({out, sum});
  return BuildOrDie(b);
}

TEST(PadDimensions, PositionWiseLayerThroughMergedDims) {
  PaddedGraph pg = ExpectPadsCorrectly(Linear(5), {{0, 1}}, 5, 8);
  ASSERT_EQ(pg.outputs.size(), 1u);
  EXPECT_TRUE(pg.outputs[0][1].padded);
  EXPECT_EQ(pg.graph.node(pg.graph.outputs()[0]).shape, Shape(DType::kF32, {2, 8, 4}));
}

TEST(PadDimensions, CausalAttentionMasksItsReductionsAndContraction) {
  ExpectPadsCorrectly(CausalAttention(5), {{0, 1}, {1, 1}, {2, 1}}, 5, 8);
}

TEST(PadDimensions, TwoLengthsOfOneBucketAreOneGraph) {
  const std::vector<std::pair<std::function<Graph(int64_t)>, Dims>> cases = {
      {Linear, {{0, 1}}}, {CausalAttention, {{0, 1}, {1, 1}, {2, 1}}}};
  for (const auto& [build, d] : cases) {
    auto a = PadDimensions(build(5), d, 5, 8), c = PadDimensions(build(7), d, 7, 8);
    ASSERT_TRUE(a.ok() && c.ok());
    EXPECT_EQ(PrintGraph(a->graph), PrintGraph(c->graph));
  }
}

TEST(PadDimensions, MeanOverThePaddedDimCountsRealPositionsOnly) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {3, 6}));
  NodeId s = b.Reduce(x, {1}, ReduceKind::kAdd);
  NodeId m = b.Reduce(x, {1}, ReduceKind::kMinimum);
  NodeId am = b.ArgMax(x, 1);
  b.SetOutputs({b.Divide(s, b.BroadcastInDim(b.ConstantScalar(DType::kF32, 6), {3}, {})), m, am});
  ExpectPadsCorrectly(BuildOrDie(b), {{0, 1}}, 6, 16);
}

TEST(PadDimensions, GatheredIndicesInPaddedPositionsAreMasked) {
  GraphBuilder b;
  NodeId w = b.Parameter(0, Shape(DType::kF32, {8, 3}));
  NodeId ids = b.Parameter(1, Shape(DType::kS64, {2, 5}));  // 1..7; padded: 1000
  GatherDims gd{{2}, {0}, {0}, 2};
  NodeId e = b.Gather(w, ids, gd, {1, 3});  // [2, 5, 3]
  NodeId pos = b.Iota(Shape(DType::kF32, {2, 5, 3}), 1);
  b.SetOutputs({b.Add(e, pos)});
  ExpectPadsCorrectly(BuildOrDie(b), {{1, 1}}, 5, 8);
}

TEST(PadDimensions, ScatterAddOfPaddedUpdatesAddsNothingThere) {
  GraphBuilder b;
  NodeId dst = b.Parameter(0, Shape(DType::kF32, {8, 3}));
  NodeId ids = b.Parameter(1, Shape(DType::kS64, {5, 1}));  // 1..7; padded: 1000
  NodeId upd = b.Parameter(2, Shape(DType::kF32, {5, 3}));  // padded: NaN
  ScatterDims sd{{1}, {0}, {0}, 1};
  b.SetOutputs({b.Scatter(dst, ids, upd, sd, ReduceKind::kAdd)});
  ExpectPadsCorrectly(BuildOrDie(b), {{1, 0}, {2, 0}}, 5, 8);
}

TEST(PadDimensions, IntegerDivisionAndBitwiseReductionsOverPaddedPositions) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kS32, {3, 5}));
  NodeId y = b.Parameter(1, Shape(DType::kS32, {3, 5}));  // 1..7; padded: 0
  NodeId q = b.Divide(x, y);
  NodeId r = b.Binary(OpKind::kRemainder, x, y);
  b.SetOutputs({q, r, b.Reduce(b.Add(x, q), {1}, ReduceKind::kAnd),
                b.Reduce(x, {1}, ReduceKind::kMultiply), b.Reduce(x, {1}, ReduceKind::kMaximum)});
  ExpectPadsCorrectly(BuildOrDie(b), {{0, 1}, {1, 1}}, 5, 8, /*int_fill=*/0);
}

TEST(PadDimensions, SlicesWithinTheRealPositionsAreExact) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {2, 6}));
  NodeId head = b.Slice(x, {0, 1}, {2, 4}, {1, 1});  // [2, 3], not padded
  NodeId all = b.Slice(x, {0, 0}, {1, 6}, {1, 1});   // [1, 6], padded
  b.SetOutputs({b.Exp(head), all});
  PaddedGraph pg = ExpectPadsCorrectly(BuildOrDie(b), {{0, 1}}, 6, 8);
  ASSERT_EQ(pg.outputs.size(), 2u);
  EXPECT_FALSE(pg.outputs[0][1].padded);
  EXPECT_TRUE(pg.outputs[1][1].padded);
}

TEST(PadDimensions, RefusesOpsThatAreNotPadSafe) {
  auto refuse = [](std::function<NodeId(GraphBuilder&, NodeId)> body, const std::string& why) {
    GraphBuilder b;
    NodeId x = b.Parameter(0, Shape(DType::kF32, {2, 6}));
    b.SetOutputs({body(b, x)});
    auto g = b.Build();
    ASSERT_TRUE(g.ok());
    auto pg = PadDimensions(*g, {{0, 1}}, 6, 8);
    ASSERT_FALSE(pg.ok());
    EXPECT_EQ(pg.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(pg.status().message().find(why), std::string::npos) << pg.status().message();
  };
  refuse([](GraphBuilder& b, NodeId x) { return b.Reverse(x, {1}); }, "padded along");
  refuse([](GraphBuilder& b, NodeId x) { return b.Reshape(x, {2, 2, 3}); }, "splits");
  refuse([](GraphBuilder& b, NodeId x) { return b.Concatenate({x, x}, 1); }, "concatenates");
  refuse([](GraphBuilder& b, NodeId x) { return b.ArgMax(b.Reshape(x, {12}), 0); }, "merged dim");
  refuse(
      [](GraphBuilder& b, NodeId x) {
        NodeId seed = b.Constant(Literal::ScalarInt(DType::kU64, 1));
        NodeId r = b.RngUniform(seed, seed, Shape(DType::kF32, {2, 6}), 0);
        return b.Add(x, r);
      },
      "random numbers");
  refuse(
      [](GraphBuilder& b, NodeId x) {
        NodeId c = b.Constant(Literal(Shape(DType::kF32, {2, 6})));
        return b.Add(x, c);
      },
      "disagree");
}

TEST(PadDimensions, RejectsADimOfAnotherLength) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {2, 6}));
  b.SetOutputs({x});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(PadDimensions(*g, {{0, 0}}, 6, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PadDimensions(*g, {{0, 1}}, 6, 4).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ember::passes
