// Tests of the IR text form: canonical round trips for every op and every
// dtype, non-canonical input, error messages with line and column, and a
// mutation fuzzer that feeds broken text to the parser.
#include "ember/ir/text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ember/ir/hash.h"

namespace ember {
namespace {

const Shape kF23(DType::kF32, {2, 3});

// One small valid graph that contains `op` (built through the builder's
// typed entry points, so the attributes are the builder's own).
StatusOr<Graph> BuildOpGraph(OpKind op) {
  GraphBuilder b(std::string("op_") + std::string(OpName(op)));
  std::vector<NodeId> outs;
  switch (op) {
    case OpKind::kParameter:
      outs = {b.Parameter(0, kF23)};
      break;
    case OpKind::kConstant:
      outs = {b.Constant(Literal::FromDoubles(Shape(DType::kF32, {3}), {1, 2.5, std::nan("")}))};
      break;
    case OpKind::kIota:
      outs = {b.Iota(Shape(DType::kS32, {4, 3}), 1)};
      break;
    case OpKind::kRngUniform:
    case OpKind::kRngNormal: {
      NodeId seed = b.Parameter(0, Shape(DType::kU64, {}));
      NodeId offset = b.Parameter(1, Shape(DType::kU64, {}));
      outs = {op == OpKind::kRngUniform ? b.RngUniform(seed, offset, kF23, 7)
                                        : b.RngNormal(seed, offset, Shape(DType::kBF16, {4}), 3)};
      break;
    }
    case OpKind::kNot:
      outs = {b.Unary(op, b.Parameter(0, Shape(DType::kPred, {2, 3})))};
      break;
    case OpKind::kConvert:
      outs = {b.Convert(b.Parameter(0, kF23), DType::kS32)};
      break;
    case OpKind::kCompare: {
      NodeId x = b.Parameter(0, kF23);
      outs = {b.Compare(x, b.Parameter(1, kF23), ComparisonKind::kLe)};
      break;
    }
    case OpKind::kAnd:
    case OpKind::kOr:
    case OpKind::kXor:
    case OpKind::kShiftLeft:
    case OpKind::kShiftRightArithmetic:
    case OpKind::kShiftRightLogical: {
      Shape s(DType::kS32, {2, 3});
      NodeId x = b.Parameter(0, s);
      outs = {b.Binary(op, x, b.Parameter(1, s))};
      break;
    }
    case OpKind::kSelect: {
      NodeId p = b.Parameter(0, Shape(DType::kPred, {2, 3}));
      NodeId x = b.Parameter(1, kF23);
      outs = {b.Select(p, x, b.Parameter(2, kF23))};
      break;
    }
    case OpKind::kClamp: {
      NodeId lo = b.ConstantScalar(DType::kF32, -1);
      NodeId x = b.Parameter(0, kF23);
      outs = {b.Clamp(lo, x, b.ConstantScalar(DType::kF32, 1))};
      break;
    }
    case OpKind::kFma:
      outs = {b.Fma(b.Parameter(0, kF23), b.Parameter(1, kF23), b.Parameter(2, kF23))};
      break;
    case OpKind::kBroadcastInDim:
      outs = {b.BroadcastInDim(b.Parameter(0, Shape(DType::kF32, {3})), {2, 3}, {1})};
      break;
    case OpKind::kReshape:
      outs = {b.Reshape(b.Parameter(0, kF23), {3, 2})};
      break;
    case OpKind::kTranspose:
      outs = {b.Transpose(b.Parameter(0, kF23), {1, 0})};
      break;
    case OpKind::kSlice:
      outs = {b.Slice(b.Parameter(0, Shape(DType::kF32, {4, 5})), {0, 1}, {4, 5}, {2, 1})};
      break;
    case OpKind::kDynamicSlice: {
      NodeId x = b.Parameter(0, Shape(DType::kF32, {4, 5}));
      NodeId i = b.Parameter(1, Shape(DType::kS32, {}));
      outs = {b.DynamicSlice(x, {i, b.Parameter(2, Shape(DType::kS32, {}))}, {2, 2})};
      break;
    }
    case OpKind::kDynamicUpdateSlice: {
      NodeId x = b.Parameter(0, Shape(DType::kF32, {4, 5}));
      NodeId u = b.Parameter(1, Shape(DType::kF32, {2, 2}));
      NodeId i = b.Parameter(2, Shape(DType::kS64, {}));
      outs = {b.DynamicUpdateSlice(x, u, {i, b.Parameter(3, Shape(DType::kS64, {}))})};
      break;
    }
    case OpKind::kConcatenate: {
      NodeId x = b.Parameter(0, kF23);
      outs = {b.Concatenate({x, b.Parameter(1, Shape(DType::kF32, {1, 3})), x}, 0)};
      break;
    }
    case OpKind::kPad: {
      NodeId x = b.Parameter(0, kF23);
      outs = {b.Pad(x, b.ConstantScalar(DType::kF32, 0), {1, 0}, {0, -1}, {1, 0})};
      break;
    }
    case OpKind::kReverse:
      outs = {b.Reverse(b.Parameter(0, kF23), {0, 1})};
      break;
    case OpKind::kGather: {
      NodeId x = b.Parameter(0, Shape(DType::kF32, {5, 3}));
      NodeId idx = b.Parameter(1, Shape(DType::kS32, {4, 1}));
      GatherDims d;
      d.offset_dims = {1};
      d.collapsed_slice_dims = {0};
      d.start_index_map = {0};
      d.index_vector_dim = 1;
      outs = {b.Gather(x, idx, d, {1, 3})};
      break;
    }
    case OpKind::kScatter: {
      NodeId x = b.Parameter(0, Shape(DType::kF32, {5, 3}));
      NodeId idx = b.Parameter(1, Shape(DType::kS32, {4, 1}));
      NodeId upd = b.Parameter(2, Shape(DType::kF32, {4, 3}));
      ScatterDims d;
      d.update_window_dims = {1};
      d.inserted_window_dims = {0};
      d.scatter_dims_to_operand_dims = {0};
      d.index_vector_dim = 1;
      outs = {b.Scatter(x, idx, upd, d, ReduceKind::kAdd)};
      break;
    }
    case OpKind::kReduce:
      outs = {b.Reduce(b.Parameter(0, kF23), {1}, ReduceKind::kMaximum)};
      break;
    case OpKind::kArgMax:
      outs = {b.ArgMax(b.Parameter(0, kF23), 1)};
      break;
    case OpKind::kArgMin:
      outs = {b.ArgMin(b.Parameter(0, kF23), 0, DType::kS32)};
      break;
    case OpKind::kReduceWindow:
      outs = {b.ReduceWindow(b.Parameter(0, Shape(DType::kF32, {4, 4})), ReduceKind::kAdd, {2, 2},
                             {2, 1}, {0, 1}, {0, 0})};
      break;
    case OpKind::kDotGeneral: {
      NodeId l = b.Parameter(0, kF23);
      NodeId r = b.Parameter(1, Shape(DType::kF32, {3, 4}));
      DotDims d;
      d.lhs_contracting = {1};
      d.rhs_contracting = {0};
      outs = {b.DotGeneral(l, r, d)};
      break;
    }
    case OpKind::kConvolution: {
      NodeId l = b.Parameter(0, Shape(DType::kF32, {1, 2, 5, 5}));
      NodeId r = b.Parameter(1, Shape(DType::kF32, {3, 2, 3, 3}));
      ConvConfig c;
      c.window_strides = {2, 1};
      c.padding_low = {1, 1};
      c.padding_high = {1, 0};
      outs = {b.Convolution(l, r, c)};
      break;
    }
    case OpKind::kCustomCall: {
      NodeId x = b.Parameter(0, kF23);
      outs = {b.CustomCall("ember.foo", {x, x}, Shape(DType::kF32, {6}),
                           "cfg \"quoted\" \\ tab\t nl\n bell\x07 end")};
      break;
    }
    case OpKind::kOptimizationBarrier: {
      NodeId x = b.Parameter(0, kF23);
      NodeId y = b.Parameter(1, Shape(DType::kS32, {}));
      NodeId t = b.OptimizationBarrier({x, y});
      outs = {b.GetTupleElement(t, 0), b.GetTupleElement(t, 1)};
      break;
    }
    case OpKind::kFusion: {
      GraphBuilder body("fused_exp_add");
      NodeId p0 = body.Parameter(0, kF23);
      body.SetOutputs({body.Add(body.Exp(p0), body.Parameter(1, kF23))});
      auto bg = body.Build();
      if (!bg.ok()) return bg.status();
      auto shared = std::make_shared<const Graph>(std::move(bg).value());
      NodeId x = b.Parameter(0, kF23);
      NodeId f = b.Fusion({x, x}, shared, FusionKind::kLoop);
      outs = {b.Fusion({f, x}, shared, FusionKind::kLoop)};
      break;
    }
    case OpKind::kTuple:
    case OpKind::kGetTupleElement: {
      NodeId x = b.Parameter(0, kF23);
      NodeId t = b.Tuple({x, b.Parameter(1, Shape(DType::kC64, {2}))});
      outs = {t, b.GetTupleElement(t, 1)};
      break;
    }
    default:
      if (IsUnary(op) || IsBinary(op)) {
        NodeId x = b.Parameter(0, kF23);
        outs = {IsUnary(op) ? b.Unary(op, x) : b.Binary(op, x, b.Parameter(1, kF23))};
        break;
      }
      return InvalidArgument("no test graph for ", OpName(op));
  }
  b.SetOutputs(outs);
  return b.Build();
}

// Attribute maps equal entry by entry, floats compared by bits (NaN == NaN).
bool AttrsIdentical(const Attrs& a, const Attrs& b) {
  if (a.map().size() != b.map().size()) return false;
  for (auto ia = a.map().begin(), ib = b.map().begin(); ia != a.map().end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.index() != ib->second.index()) return false;
    if (auto* da = std::get_if<double>(&ia->second)) {
      double db = std::get<double>(ib->second);
      if (std::memcmp(da, &db, sizeof(double)) != 0) return false;
    } else if (ia->second != ib->second) {
      return false;
    }
  }
  return true;
}

// Print -> parse -> print must be a fixed point, and the hash must survive.
void ExpectRoundTrip(const Graph& g) {
  std::string text = PrintGraph(g);
  auto parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << text;
  EXPECT_EQ(PrintGraph(*parsed), text);
  EXPECT_EQ(HashGraph(*parsed), HashGraph(g)) << text;
  ASSERT_EQ(parsed->num_nodes(), g.num_nodes());
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& a = g.node(i);
    const Node& b = parsed->node(i);
    EXPECT_EQ(a.op, b.op);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.operands, b.operands);
    EXPECT_TRUE(AttrsIdentical(a.attrs, b.attrs)) << "node " << i << "\n" << text;
    EXPECT_EQ(a.metadata, b.metadata);
    ASSERT_EQ(a.literal == nullptr, b.literal == nullptr);
    if (a.literal) {
      EXPECT_TRUE(a.literal->BitwiseEquals(*b.literal)) << text;
    }
  }
  EXPECT_EQ(parsed->parameters(), g.parameters());
  EXPECT_EQ(parsed->outputs(), g.outputs());
  EXPECT_EQ(parsed->aliases(), g.aliases());
  EXPECT_EQ(parsed->name(), g.name());
}

TEST(TextTest, RoundTripEveryOp) {
  std::set<OpKind> covered;
  for (OpKind op : AllOps()) {
    SCOPED_TRACE(std::string(OpName(op)));
    auto g = BuildOpGraph(op);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    for (const Node& n : g->nodes()) covered.insert(n.op);
    std::string text = PrintGraph(*g);
    EXPECT_NE(text.find(std::string(" ") + std::string(OpName(op)) + "("), std::string::npos)
        << text;
    ExpectRoundTrip(*g);
  }
  EXPECT_EQ(covered.size(), AllOps().size()) << "some OpKind has no round-trip graph";
}

// A constant with edge values of dtype `t` (exact bit patterns matter).
Literal EdgeValues(DType t) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (t) {
    case DType::kPred:
      return Literal::FromInts(Shape(t, {3}), {1, 0, 1});
    case DType::kS8:
      return Literal::FromInts(Shape(t, {3}), {-128, 127, 0});
    case DType::kS16:
      return Literal::FromInts(Shape(t, {3}), {-32768, 32767, -1});
    case DType::kS32:
      return Literal::FromInts(Shape(t, {3}), {std::numeric_limits<int32_t>::min(),
                                               std::numeric_limits<int32_t>::max(), 7});
    case DType::kS64:
      return Literal::FromInts(Shape(t, {3}), {std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max(), -5});
    case DType::kU8:
      return Literal::FromInts(Shape(t, {3}), {0, 255, 128});
    case DType::kU16:
      return Literal::FromInts(Shape(t, {3}), {0, 65535, 1});
    case DType::kU32:
      return Literal::FromInts(Shape(t, {3}), {0, 4294967295LL, 2});
    case DType::kU64:
      return Literal::FromInts(Shape(t, {3}), {0, -1, std::numeric_limits<int64_t>::min()});
    case DType::kF16:
      return Literal::FromDoubles(Shape(t, {6}),
                                  {nan, -inf, 65504, 5.960464477539063e-08, -0.0, 0.1});
    case DType::kBF16:
      return Literal::FromDoubles(Shape(t, {6}),
                                  {-nan, inf, 3.3895313892515355e38, 9.2e-41, -0.0, 0.1});
    case DType::kF32:
      return Literal::FromDoubles(Shape(t, {7}), {0.1, 1.401298464324817e-45, 3.4028234663852886e38,
                                                  nan, -inf, 1.0 / 3.0, 16777217.0});
    case DType::kF64:
      return Literal::FromDoubles(Shape(t, {6}),
                                  {0.1, 4.9406564584124654e-324, -0.0, inf, -nan, 1.0 / 3.0});
    case DType::kC64: {
      Literal lit(Shape(t, {2}));
      float v[4] = {1.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(), 0.1f};
      std::memcpy(lit.data(), v, sizeof(v));
      return lit;
    }
    case DType::kC128: {
      Literal lit(Shape(t, {2}));
      double v[4] = {1.0 / 3.0, -inf, 2.0, -1e300};
      std::memcpy(lit.data(), v, sizeof(v));
      return lit;
    }
  }
  return Literal();
}

TEST(TextTest, RoundTripEveryDType) {
  for (int ti = 0; ti < kNumDTypes; ++ti) {
    DType t = static_cast<DType>(ti);
    SCOPED_TRACE(std::string(DTypeName(t)));
    GraphBuilder b("dtypes");
    NodeId p = b.Parameter(0, Shape(t, {2, 2}));
    NodeId scalar = b.Parameter(1, Shape(t, {}));
    NodeId c = b.Constant(EdgeValues(t));
    std::vector<NodeId> outs = {p, scalar, c};
    for (int ui = 0; ui < kNumDTypes; ++ui) {
      DType u = static_cast<DType>(ui);
      if (IsComplex(t) && !IsComplex(u)) continue;  // the builder rejects these
      outs.push_back(b.Convert(p, u));
    }
    b.SetOutputs(outs);
    auto g = b.Build();
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ExpectRoundTrip(*g);
  }
}

TEST(TextTest, ConstantElementSpellings) {
  GraphBuilder b;
  b.SetOutputs({b.Constant(EdgeValues(DType::kF32)), b.Constant(EdgeValues(DType::kPred)),
                b.Constant(EdgeValues(DType::kC64)), b.Constant(EdgeValues(DType::kU64))});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::string text = PrintGraph(*g);
  EXPECT_NE(text.find("constant({0.1, 1e-45, 3.4028235e+38, nan, -inf, 0.33333334, 16777216})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pred[3] constant({true, false, true})"), std::string::npos) << text;
  EXPECT_NE(text.find("c64[2] constant({(1.5,-0), (nan,0.1)})"), std::string::npos) << text;
  EXPECT_NE(text.find("u64[3] constant({0, 18446744073709551615, 9223372036854775808})"),
            std::string::npos)
      << text;
}

TEST(TextTest, RoundTripOddAttributesAndNames) {
  GraphBuilder b("3 odd\tname");
  NodeId x = b.Parameter(0, kF23);
  Attrs attrs;
  attrs.Set("call_target_name", std::string("x"));
  attrs.Set("weird key", int64_t{1});
  attrs.Set("a.b-c", std::vector<int64_t>{-1, 0, std::numeric_limits<int64_t>::min()});
  attrs.Set("f_one", 1.0);
  attrs.Set("f_neg_zero", -0.0);
  attrs.Set("f_big", 1e300);
  attrs.Set("f_tiny", 4.9406564584124654e-324);
  attrs.Set("f_tenth", 0.1);
  attrs.Set("f_nan", std::nan(""));
  attrs.Set("f_inf", -std::numeric_limits<double>::infinity());
  attrs.Set("s_nan", std::string("nan"));
  attrs.Set("s_inf", std::string("inf"));
  attrs.Set("s_empty", std::string(""));
  attrs.Set("s_root", std::string("ROOT"));
  attrs.Set("s_num", std::string("12"));
  attrs.Set("s_bytes", std::string("\xff\x00\x7f\"\\", 5));
  attrs.Set("i_min", std::numeric_limits<int64_t>::min());
  NodeId cc =
      b.AddNode(OpKind::kCustomCall, {x}, attrs, kF23, nullptr, "meta \\x41 \n\r\t\x01 // end ");
  b.SetOutputs({cc});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::string text = PrintGraph(*g);
  for (const char* want :
       {"graph \"3 odd\\tname\"(", "\"weird key\"=1", "a.b-c={-1,0,-9223372036854775808}",
        "f_one=1.0", "f_neg_zero=-0.0", "f_big=1e+300", "f_tiny=5e-324", "f_tenth=0.1", "f_nan=nan",
        "f_inf=-inf", "s_nan=\"nan\"", "s_inf=\"inf\"", "s_empty=\"\"", "s_root=ROOT",
        "s_num=\"12\"", "s_bytes=\"\xff\\x00\\x7f\\\"\\\\\"", "i_min=-9223372036854775808",
        "// meta \\\\x41 \\n\\r\t\\x01 // end \n"}) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing " << want << " in\n" << text;
  }
  ExpectRoundTrip(*g);
}

const char kCanonical[] =
    "graph NAME(%p0: f32[8,16], %p1: s32[]) {\n"
    "  %0 = f32[8,16] parameter(0)\n"
    "  %1 = s32[] parameter(1)\n"
    "  %2 = f32[8,16] add(%0, %0)\n"
    "  %3 = f32[16,8] transpose(%2), dimensions={1,0}\n"
    "  %4 = f32[3] constant({1, 2.5, nan})\n"
    "  %5 = pred[8,16] compare(%2, %2), direction=LT\n"
    "  %6 = (f32[8,16], f32[16,8]) optimization-barrier(%2, %3)\n"
    "  %7 = f32[8,16] custom-call(%2), backend_config=\"a \\\"b\\\"\\n\\x01\", "
    "call_target_name=\"ember.foo\", scale=0.5, seed=-3, tag=x // model.py:12 \\\\ \\n x\n"
    "  %8 = s32[] negate(%1) //  two spaces\n"
    "  ROOT (%3, %2, %7)\n"
    "  ALIAS {1: 0, 2: 0}\n"
    "}\n";

TEST(TextTest, CanonicalTextIsAFixedPoint) {
  auto g = ParseGraph(kCanonical);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(PrintGraph(*g), kCanonical);
  EXPECT_EQ(g->name(), "NAME");
  const Node& cc = g->node(7);
  EXPECT_EQ(attr::BackendConfig(cc), "a \"b\"\n\x01");
  EXPECT_EQ(attr::CallTargetName(cc), "ember.foo");
  // Attributes no op declares (a custom-call's own) are kept as given.
  EXPECT_EQ(std::get<std::string>(cc.attrs.map().at("tag")), "x");
  EXPECT_EQ(std::get<double>(cc.attrs.map().at("scale")), 0.5);
  EXPECT_EQ(std::get<int64_t>(cc.attrs.map().at("seed")), -3);
  EXPECT_EQ(cc.metadata, "model.py:12 \\ \n x");
  EXPECT_EQ(g->node(8).metadata, " two spaces");
  EXPECT_EQ(attr::Direction(g->node(5)), ComparisonKind::kLt);
  EXPECT_EQ(g->node(0).metadata, "");
  EXPECT_EQ(g->outputs(), (std::vector<NodeId>{3, 2, 7}));
  EXPECT_EQ(g->aliases(), (std::map<int, int>{{1, 0}, {2, 0}}));
  ASSERT_TRUE(g->node(4).literal);
  EXPECT_EQ(g->node(4).literal->GetDouble(1), 2.5);
  EXPECT_TRUE(std::isnan(g->node(4).literal->GetDouble(2)));
  ExpectRoundTrip(*g);
}

TEST(TextTest, NonCanonicalInputPrintsCanonically) {
  const char* in =
      "// leading comment\n"
      "graph \"my graph\" ( %x : f32[2] ,%y:f32[2] ) {\n"
      "  // a full-line comment is not metadata\n"
      "  %b = f32[2] parameter(1)   %a = f32[2] parameter(0)\n"
      "  %sum.1 = f32[2] add(%a,\n"
      "                      %b)  // meta\r\n"
      "  %c = f64[2] constant({+1.50, -0.0})\n"
      "  %f = f32[] constant({ 1e400 })\n"
      "  %h = f32[2] subtract(%sum.1, %a), extra=\"val\", alpha=1e3\n"
      "  ROOT %h   // trailing\n"
      "}  // done\n";
  auto g = ParseGraph(in);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const char* want =
      "graph \"my graph\"(%p0: f32[2], %p1: f32[2]) {\n"
      "  %0 = f32[2] parameter(1)\n"
      "  %1 = f32[2] parameter(0)\n"
      "  %2 = f32[2] add(%1, %0) // meta\n"
      "  %3 = f64[2] constant({1.5, -0})\n"
      "  %4 = f32[] constant({inf})\n"
      "  %5 = f32[2] subtract(%2, %1), alpha=1000.0, extra=val\n"
      "  ROOT (%5)\n"
      "}\n";
  EXPECT_EQ(PrintGraph(*g), want);
  EXPECT_EQ(g->parameters(), (std::vector<NodeId>{1, 0}));
  ExpectRoundTrip(*g);
}

TEST(TextTest, LargeGraphRoundTrips) {
  // A 20000-node chain and a 10000-element constant: no recursion or
  // quadratic behaviour in the parser, values exact.
  GraphBuilder b("large");
  NodeId x = b.Parameter(0, Shape(DType::kF32, {4}));
  NodeId y = x;
  for (int i = 0; i < 20000; ++i) y = i % 2 ? b.Add(y, x) : b.Negate(y);
  Literal big(Shape(DType::kF64, {10000}));
  for (int64_t i = 0; i < big.num_elements(); ++i) big.SetDouble(i, 1.0 / (i + 1));
  NodeId c = b.Constant(big);
  b.SetOutputs({y, c});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExpectRoundTrip(*g);
}

TEST(TextTest, EmptyGraphAndEmptyLists) {
  const char* text =
      "graph g() {\n"
      "  %0 = f32[0] constant({})\n"
      "  %1 = (f32[0]) tuple(%0)\n"
      "  %2 = s32[0,3] iota(), iota_dimension=1\n"
      "  ROOT (%0, %1, %2)\n"
      "}\n";
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(PrintGraph(*g), text);
}

// Parses `text`, expecting InvalidArgument whose message contains every
// string in `want` (the first is usually the "line L, column C" prefix).
void ExpectParseError(const std::string& text, std::vector<std::string> want) {
  auto g = ParseGraph(text);
  ASSERT_FALSE(g.ok()) << "parsed unexpectedly:\n" << text;
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().ToString();
  for (const std::string& w : want) {
    EXPECT_NE(g.status().message().find(w), std::string::npos)
        << "message: " << g.status().message() << "\nmissing: " << w;
  }
}

std::string Wrap(const std::string& body, const std::string& header = "%p0: f32[4]") {
  return "graph g(" + header + ") {\n  %0 = f32[4] parameter(0)\n" + body + "}\n";
}

TEST(TextTest, ParseErrors) {
  ExpectParseError(Wrap("  %1 = f32[4] addd(%0, %0)\n  ROOT (%1)\n"),
                   {"line 3, column 15:", "unknown op 'addd'"});
  ExpectParseError(Wrap("  %1 = f33[4] add(%0, %0)\n  ROOT (%1)\n"),
                   {"line 3, column 8:", "unknown dtype 'f33'", "expected one of pred"});
  ExpectParseError(Wrap("  %1 = f32[4] add(%0, $0)\n  ROOT (%1)\n"),
                   {"line 3, column 23:", "unexpected character '$'"});
  ExpectParseError(Wrap("  %1 = f32[4] add(%0, %zz)\n  ROOT (%1)\n"),
                   {"line 3, column 23:", "undefined value '%zz'"});
  ExpectParseError(Wrap("  %1 = f32[4] add(%0)\n  ROOT (%1)\n"),
                   {"line 3, column 15:", "add", "expected 2 operand(s), got 1"});
  ExpectParseError(Wrap("  %1 = f32[3] constant({1, 2})\n  ROOT (%1)\n"),
                   {"line 3, column 24:", "needs 3 values, got 2"});
  ExpectParseError(Wrap("  %1 = f32[4] add(%0, %0)\n"), {"line 4, column 1:", "missing ROOT"});
  ExpectParseError(Wrap("  %1 = f32[8] add(%0, %0)\n  ROOT (%1)\n"),
                   {"line 3, column 15:", "f32[8]", "f32[4]"});
  ExpectParseError(Wrap("  %1 = f32[4] add(%0, %0)\n  ROOT (%1)\n", "%p0: f32[5]"),
                   {"line 1, column 9:", "header parameter 0", "f32[5]", "f32[4]"});
  ExpectParseError(Wrap("  %1 = f32[4] add(%0, %0)\n  ROOT (%1)\n", ""),
                   {"line 1, column 8:", "header lists 0 parameters"});
  ExpectParseError(Wrap("  %0 = f32[4] negate(%0)\n  ROOT (%0)\n"),
                   {"line 3, column 3:", "redefinition of '%0'"});
  ExpectParseError(Wrap("  %1 = f32[4] custom-call(%0), call_target_name=\"abc\n  ROOT (%1)\n"),
                   {"line 3, column 49:", "unterminated string"});
  ExpectParseError(Wrap("  %1 = s8[2] constant({1, 128})\n  ROOT (%1)\n"),
                   {"line 3, column 27:", "out of range for s8"});
  ExpectParseError(Wrap("  %1 = u8[1] constant({-1})\n  ROOT (%1)\n"),
                   {"line 3, column 24:", "non-negative integer for u8"});
  ExpectParseError(Wrap("  %1 = s32[1] constant({1.5})\n  ROOT (%1)\n"),
                   {"line 3, column 25:", "expected an integer for s32"});
  ExpectParseError(Wrap("  %1 = pred[1] constant({2})\n  ROOT (%1)\n"),
                   {"line 3, column 26:", "true or false"});
  ExpectParseError(Wrap("  %1 = c64[1] constant({1})\n  ROOT (%1)\n"),
                   {"line 3, column 25:", "complex value (re,im)"});
  ExpectParseError(
      Wrap("  %1 = f32[4] transpose(%0), dimensions={0}, dimensions={0}\n  ROOT (%1)\n"),
      {"line 3, column 46:", "duplicate attribute 'dimensions'"});
  ExpectParseError(Wrap("  %1 = f32[4] negate(%0), x=99999999999999999999\n  ROOT (%1)\n"),
                   {"line 3, column 29:", "does not fit in 64 bits"});
  ExpectParseError(Wrap("  %1 = f32[4] negate(%0)\n  ROOT (%1)\n  ALIAS {1: 0}\n"),
                   {"line 5, column 10:", "alias output index 1 out of range"});
  ExpectParseError(Wrap("  %1 = f32[4] negate(%0)\n  ROOT (%1)\n  ALIAS {0: 3}\n"),
                   {"line 4, column 3:", "parameter index 3 out of range"});
  ExpectParseError(Wrap("  %1 = f32[-4] negate(%0)\n  ROOT (%1)\n"),
                   {"line 3, column 12:", "dimension size must be >= 0"});
  ExpectParseError(Wrap("  %1 = f32[4] negate(%0)\n  ROOT (%1)\n") + "extra",
                   {"line 6, column 1:", "expected end of input"});
  ExpectParseError(Wrap("  %1 = f32[4] parameter(0)\n  ROOT (%1)\n"),
                   {"line 3, column 15:", "defined twice"});
  ExpectParseError(Wrap("  %1 = f32[4] parameter(2)\n  ROOT (%1)\n", "%p0: f32[4], %p1: f32[4]"),
                   {"parameter(1) is missing"});
  ExpectParseError(Wrap("  %1 = f32[4000000000,4000000000,4000000000] parameter(1)\n  ROOT (%1)\n"),
                   {"line 3, column 23:", "more than 2^48 elements"});
  ExpectParseError("", {"line 1, column 1:", "expected 'graph'"});
  ExpectParseError("graph g() {", {"line 1, column 12:", "missing ROOT"});
  ExpectParseError("graph g() { ROOT () ", {"line 1, column 21:", "'}' to close the graph"});
  ExpectParseError(std::string(200, '('), {"expected 'graph'"});
  ExpectParseError("graph g() {\n %0 = " + std::string(200, '(') + "f32[])",
                   {"nested more than 64"});
}

// Mutations of valid text must never crash the parser; whatever it accepts
// must print canonically, reparse to the same text and hash alike.
TEST(TextTest, FuzzMutationsNeverCrash) {
  std::vector<std::string> seeds = {kCanonical};
  for (OpKind op : AllOps()) {
    auto g = BuildOpGraph(op);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    seeds.push_back(PrintGraph(*g));
  }
  {
    GraphBuilder b("dt");
    std::vector<NodeId> outs;
    for (int ti = 0; ti < kNumDTypes; ++ti)
      outs.push_back(b.Constant(EdgeValues(static_cast<DType>(ti))));
    b.SetOutputs(outs);
    auto g = b.Build();
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    seeds.push_back(PrintGraph(*g));
  }
  const std::string alphabet = "%(){}[],=:\"\\/-+.0123456789eEnaifxtrupl \n\t#$";
  const std::vector<std::string> chunks = {"99999999999999999999",
                                           "-1",
                                           "9223372036854775807",
                                           "nan",
                                           "(",
                                           "{",
                                           "%0",
                                           ", ",
                                           "f32[]",
                                           "\"",
                                           "//",
                                           "ROOT",
                                           "ALIAS {0: 0}",
                                           "1e999",
                                           "4000000000"};
  // EMBER_FUZZ_ITERS / EMBER_FUZZ_SEED run a longer or different campaign.
  const char* iters_env = std::getenv("EMBER_FUZZ_ITERS");
  const char* seed_env = std::getenv("EMBER_FUZZ_SEED");
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 20261130;
  const int kIters = iters_env ? std::atoi(iters_env) : 10000;
  SCOPED_TRACE("fuzz seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int accepted = 0;
  for (int it = 0; it < kIters; ++it) {
    std::string s = seeds[rng() % seeds.size()];
    int n_mut = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < n_mut && !s.empty(); ++m) {
      size_t pos = rng() % (s.size() + 1);
      switch (rng() % 9) {
        case 0:
          s.resize(pos);
          break;  // truncate
        case 1:
          s.erase(pos, 1 + rng() % 8);
          break;
        case 2:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 3:
          if (pos < s.size()) s[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 4:
          s.insert(pos, chunks[rng() % chunks.size()]);
          break;
        case 5: {  // duplicate a span
          size_t len = rng() % 40;
          s.insert(pos, s.substr(rng() % s.size(), len));
          break;
        }
        case 6:
          if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
          break;
        case 7: {  // swap two space-separated fields
          size_t a0 = s.rfind(' ', pos), b0 = s.find(' ', rng() % s.size());
          if (a0 == std::string::npos || b0 == std::string::npos || a0 == b0) break;
          size_t a1 = s.find_first_of(" \n", a0 + 1), b1 = s.find_first_of(" \n", b0 + 1);
          if (a1 == std::string::npos || b1 == std::string::npos) break;
          if (a0 > b0) {
            std::swap(a0, b0);
            std::swap(a1, b1);
          }
          if (a1 > b0) break;
          std::string fa = s.substr(a0, a1 - a0), fb = s.substr(b0, b1 - b0);
          s = s.substr(0, a0) + fb + s.substr(a1, b0 - a1) + fa + s.substr(b1);
          break;
        }
        case 8: {  // replace a run of digits by another number
          size_t d0 = s.find_first_of("0123456789", pos);
          if (d0 == std::string::npos) break;
          size_t d1 = s.find_first_not_of("0123456789", d0);
          if (d1 == std::string::npos) d1 = s.size();
          static const char* kNums[] = {"0",   "1",   "2",          "3",
                                        "7",   "-1",  "64",         "65",
                                        "255", "256", "2147483648", "18446744073709551616",
                                        "1e5", "0.5"};
          s.replace(d0, d1 - d0, kNums[rng() % (sizeof(kNums) / sizeof(kNums[0]))]);
          break;
        }
      }
    }
    auto g = ParseGraph(s);
    if (!g.ok()) {
      ASSERT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().ToString();
      ASSERT_EQ(g.status().message().rfind("line ", 0), 0u) << g.status().message();
      continue;
    }
    ++accepted;
    std::string printed = PrintGraph(*g);
    auto again = ParseGraph(printed);
    ASSERT_TRUE(again.ok()) << again.status().ToString() << "\ninput:\n"
                            << s << "\nprinted:\n"
                            << printed;
    ASSERT_EQ(PrintGraph(*again), printed) << "input:\n" << s;
    ASSERT_EQ(HashGraph(*again), HashGraph(*g)) << printed;
  }
  // Some mutations (in comments, metadata, names, values) keep the text valid.
  EXPECT_GT(accepted, kIters / 200);
  EXPECT_LT(accepted, kIters);
}

}  // namespace
}  // namespace ember
