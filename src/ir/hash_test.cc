// Tests of the 128-bit structural hash: what it covers changes it, what it
// excludes (metadata, the graph's name, NaN payloads that print alike) does not.
#include "ember/ir/hash.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "ember/ir/builder.h"
#include "ember/ir/text.h"

namespace ember {
namespace {

// Knobs for the sample graph; each one changes exactly one hashed property.
struct Variant {
  ComparisonKind direction = ComparisonKind::kLt;  // an attribute value
  double constant = 2.5;                           // a constant value
  int64_t cols = 3;                                // one dim of parameter 0
  bool swap_operands = false;                      // operand order of subtract
  bool swap_outputs = false;                       // output order
  bool alias = false;                              // alias map {0: 0}
  bool swap_params = false;                        // parameter order
  std::string metadata;                            // never hashed
  std::string name = "main";                       // never hashed
  std::string attr_name = "call_target_name";      // an attribute name (via custom-call)
  DType reduce_dtype = DType::kF32;                // a dtype
};

Graph Sample(const Variant& v) {
  GraphBuilder b(v.name);
  Shape s(DType::kF32, {2, v.cols});
  NodeId x, y;
  if (v.swap_params) {
    y = b.Parameter(1, s);
    x = b.Parameter(0, s);
  } else {
    x = b.Parameter(0, s);
    y = b.Parameter(1, s);
  }
  NodeId c = b.Constant(Literal::FromDoubles(Shape(DType::kF32, {}), {v.constant}));
  NodeId cb = b.BroadcastInDim(c, {2, v.cols}, {});
  NodeId sum = b.AddNode(OpKind::kAdd, {x, cb}, {}, std::nullopt, nullptr, v.metadata);
  NodeId diff = v.swap_operands ? b.Subtract(y, sum) : b.Subtract(sum, y);
  NodeId cmp = b.Compare(diff, x, v.direction);
  NodeId red = b.Reduce(b.Convert(diff, v.reduce_dtype), {1}, ReduceKind::kAdd);
  Attrs cc_attrs;
  cc_attrs.Set(v.attr_name, std::string("ember.op"));
  if (v.attr_name != "call_target_name") cc_attrs.Set("call_target_name", std::string("ember.op"));
  NodeId cc = b.AddNode(OpKind::kCustomCall, {red}, cc_attrs, Shape(DType::kF32, {2}));
  std::vector<NodeId> outs = {diff, cmp, cc};
  if (v.swap_outputs) std::swap(outs[0], outs[1]);
  b.SetOutputs(outs);
  if (v.alias) b.SetAlias(0, 0);
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : Graph();
}

TEST(HashTest, EqualGraphsHashEqual) {
  Variant v;
  Graph a = Sample(v), b = Sample(v);
  ASSERT_GT(a.num_nodes(), 0);
  EXPECT_EQ(HashGraph(a), HashGraph(b));
  EXPECT_EQ(HashGraph(a), HashGraph(a));
}

TEST(HashTest, EachCoveredPropertyChangesTheHash) {
  const Variant base;
  const Hash128 h0 = HashGraph(Sample(base));
  std::vector<std::pair<std::string, Variant>> changes;
  Variant v;
  v = base;
  v.direction = ComparisonKind::kGt;
  changes.push_back({"attribute value", v});
  v = base;
  v.constant = 2.0;
  changes.push_back({"constant value", v});
  v = base;
  v.constant = -0.0;
  changes.push_back({"constant -0 vs 0", v});
  v = base;
  v.cols = 4;
  changes.push_back({"one dim", v});
  v = base;
  v.swap_operands = true;
  changes.push_back({"operand order", v});
  v = base;
  v.swap_outputs = true;
  changes.push_back({"output order", v});
  v = base;
  v.alias = true;
  changes.push_back({"alias map", v});
  v = base;
  v.swap_params = true;
  changes.push_back({"parameter order", v});
  v = base;
  v.attr_name = "backend_config";
  changes.push_back({"attribute name", v});
  v = base;
  v.reduce_dtype = DType::kF64;
  changes.push_back({"dtype", v});
  std::set<std::pair<uint64_t, uint64_t>> seen = {{h0.hi, h0.lo}};
  for (const auto& [what, var] : changes) {
    Graph g = Sample(var);
    ASSERT_GT(g.num_nodes(), 0) << what;
    Hash128 h = HashGraph(g);
    EXPECT_NE(h, h0) << what;
    EXPECT_NE(h.lo, h0.lo) << what;  // both lanes react
    EXPECT_NE(h.hi, h0.hi) << what;
    EXPECT_TRUE(seen.insert({h.hi, h.lo}).second) << what << " collides with another variant";
  }
  // The -0 constant must differ from a constant of 0, too.
  Variant zero = base;
  zero.constant = 0.0;
  Variant neg_zero = base;
  neg_zero.constant = -0.0;
  EXPECT_NE(HashGraph(Sample(zero)), HashGraph(Sample(neg_zero)));
}

TEST(HashTest, AliasTargetMatters) {
  // {0: 0} vs {0: 1}: same output, different parameter.
  GraphBuilder b1, b2;
  for (GraphBuilder* b : {&b1, &b2}) {
    NodeId x = b->Parameter(0, Shape(DType::kF32, {2}));
    NodeId y = b->Parameter(1, Shape(DType::kF32, {2}));
    b->SetOutputs({b->Add(x, y)});
  }
  b1.SetAlias(0, 0);
  b2.SetAlias(0, 1);
  auto g1 = b1.Build(), g2 = b2.Build();
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_NE(HashGraph(*g1), HashGraph(*g2));
}

TEST(HashTest, MetadataAndNameAreNotHashed) {
  Variant base;
  Variant meta = base;
  meta.metadata = "model.py:42";
  Variant named = base;
  named.name = "other";
  Graph g0 = Sample(base), g1 = Sample(meta), g2 = Sample(named);
  EXPECT_EQ(HashGraph(g0), HashGraph(g1));
  EXPECT_EQ(HashGraph(g0), HashGraph(g2));
  EXPECT_NE(PrintGraph(g0), PrintGraph(g1));  // the printer does show metadata
}

TEST(HashTest, ConstantsHashByValueNotIdentity) {
  // Two separately allocated but equal literals hash alike; one bit differs -> differs.
  auto make = [](uint32_t bits) {
    GraphBuilder b;
    Literal lit(Shape(DType::kF32, {3}));
    float vals[3] = {1.0f, 2.0f, 0.0f};
    std::memcpy(&vals[2], &bits, 4);
    std::memcpy(lit.data(), vals, sizeof(vals));
    b.SetOutputs({b.Constant(lit)});
    auto g = b.Build();
    EXPECT_TRUE(g.ok());
    return std::move(g).value();
  };
  EXPECT_EQ(HashGraph(make(0x3f800000u)), HashGraph(make(0x3f800000u)));
  EXPECT_NE(HashGraph(make(0x3f800000u)), HashGraph(make(0x3f800001u)));
  // NaNs that print alike hash alike (payload ignored), the sign of a NaN is kept.
  Graph nan_a = make(0x7fc00000u), nan_b = make(0x7fc00123u), nan_neg = make(0xffc00000u);
  ASSERT_EQ(PrintGraph(nan_a), PrintGraph(nan_b));
  EXPECT_EQ(HashGraph(nan_a), HashGraph(nan_b));
  EXPECT_NE(PrintGraph(nan_a), PrintGraph(nan_neg));
  EXPECT_NE(HashGraph(nan_a), HashGraph(nan_neg));
}

TEST(HashTest, ParameterValuesAreNotInTheGraph) {
  // Scalars that change per step are parameters: graphs differing only in
  // the value later fed to them are one graph.
  auto make = [] {
    GraphBuilder b;
    NodeId lr = b.Parameter(0, Shape(DType::kF32, {}));
    NodeId w = b.Parameter(1, Shape(DType::kF32, {4}));
    b.SetOutputs({b.Multiply(w, b.BroadcastInDim(lr, {4}, {}))});
    return std::move(b.Build()).value();
  };
  EXPECT_EQ(HashGraph(make()), HashGraph(make()));
}

TEST(HashTest, WellMixedOverManySmallGraphs) {
  // 2000 graphs differing in one small integer constant: all hashes distinct
  // and every output bit flips for roughly half of them.
  std::set<std::pair<uint64_t, uint64_t>> seen;
  int ones[128] = {0};
  const int kN = 2000;
  for (int i = 0; i < kN; ++i) {
    GraphBuilder b;
    b.SetOutputs({b.Constant(Literal::ScalarInt(DType::kS32, i))});
    auto g = b.Build();
    ASSERT_TRUE(g.ok());
    Hash128 h = HashGraph(*g);
    EXPECT_TRUE(seen.insert({h.hi, h.lo}).second) << i;
    for (int k = 0; k < 64; ++k) {
      ones[k] += (h.lo >> k) & 1;
      ones[64 + k] += (h.hi >> k) & 1;
    }
  }
  for (int k = 0; k < 128; ++k) {
    EXPECT_GT(ones[k], kN * 40 / 100) << "bit " << k;
    EXPECT_LT(ones[k], kN * 60 / 100) << "bit " << k;
  }
}

TEST(HashTest, ToStringIs32HexDigits) {
  Hash128 h;
  h.hi = 0x0123456789abcdefULL;
  h.lo = 0xfedcba9876543210ULL;
  EXPECT_EQ(h.ToString(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(Hash128().ToString(), std::string(32, '0'));
}

TEST(HashTest, EmptyGraphsDifferFromNonEmpty) {
  GraphBuilder b0, b1;
  b0.SetOutputs({});
  b1.SetOutputs({b1.Parameter(0, Shape(DType::kF32, {}))});
  auto g0 = b0.Build(), g1 = b1.Build();
  ASSERT_TRUE(g0.ok() && g1.ok());
  EXPECT_NE(HashGraph(*g0), HashGraph(*g1));
}

}  // namespace
}  // namespace ember
