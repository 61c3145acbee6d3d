// The fusion op in the IR: builder shape rule, Verify recursion, text form
// (multi-graph files), structural hash and interpreter.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "ember/eval/interpreter.h"
#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ember/ir/hash.h"
#include "ember/ir/text.h"

namespace ember {
namespace {

const Shape kF8(DType::kF32, {8});

std::shared_ptr<const Graph> MulAddBody(const std::string& name = "fused_mul_add_0") {
  GraphBuilder b(name);
  NodeId p0 = b.Parameter(0, kF8);
  NodeId p1 = b.Parameter(1, kF8);
  b.SetOutputs({b.Add(b.Multiply(p0, p1), p1)});
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::make_shared<const Graph>(std::move(g).value());
}

Graph MainCalling(std::shared_ptr<const Graph> body) {
  GraphBuilder b("main");
  NodeId p0 = b.Parameter(0, kF8);
  NodeId p1 = b.Parameter(1, kF8);
  b.SetOutputs({b.Fusion({p0, p1}, std::move(body), FusionKind::kLoop)});
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

constexpr char kMainText[] = R"(graph main(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] fusion(%0, %1), calls=fused_mul_add_0, kind=loop
  ROOT (%2)
}

graph fused_mul_add_0(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] multiply(%0, %1)
  %3 = f32[8] add(%2, %1)
  ROOT (%3)
}
)";

TEST(FusionIrTest, BuilderInfersResultFromBody) {
  Graph g = MainCalling(MulAddBody());
  const Node& f = g.node(2);
  EXPECT_EQ(f.op, OpKind::kFusion);
  EXPECT_EQ(f.shape, kF8);
  ASSERT_NE(f.called, nullptr);
  EXPECT_EQ(attr::Kind.Text(f.attrs), "loop");
  EXPECT_FALSE(f.attrs.Has("calls"));
  EXPECT_TRUE(IsOpaqueToPasses(OpKind::kFusion));
  EXPECT_EQ(OpCategory(OpKind::kFusion), OpCategoryKind::kFusion);
}

TEST(FusionIrTest, BuilderRejectsMismatches) {
  auto body = MulAddBody();
  {
    GraphBuilder b;
    NodeId p0 = b.Parameter(0, kF8);
    b.Fusion({p0}, body, FusionKind::kLoop);  // body takes two
    EXPECT_NE(b.status().message().find("takes 2 parameters but the fusion has 1"),
              std::string::npos)
        << b.status().ToString();
  }
  {
    GraphBuilder b;
    NodeId p0 = b.Parameter(0, kF8);
    NodeId p1 = b.Parameter(1, Shape(DType::kF32, {4}));
    b.Fusion({p0, p1}, body, FusionKind::kLoop);
    EXPECT_NE(b.status().message().find("operand 1 has shape f32[4]"), std::string::npos)
        << b.status().ToString();
  }
  {
    GraphBuilder b;
    NodeId p0 = b.Parameter(0, kF8);
    b.Fusion({p0, p0}, body, FusionKind::kInput);  // no reduce in the body
    EXPECT_NE(b.status().message().find("kind=input but the body's kind is loop"),
              std::string::npos)
        << b.status().ToString();
  }
  {
    GraphBuilder b;
    NodeId p0 = b.Parameter(0, kF8);
    b.Fusion({p0}, nullptr, FusionKind::kLoop);
    EXPECT_FALSE(b.status().ok());
  }
  {
    GraphBuilder two("two");
    NodeId p0 = two.Parameter(0, kF8);
    two.SetOutputs({p0, two.Negate(p0)});
    auto g2 = std::make_shared<const Graph>(two.Build().value());
    GraphBuilder b;
    b.Fusion({b.Parameter(0, kF8)}, g2, FusionKind::kLoop);
    EXPECT_NE(b.status().message().find("exactly one"), std::string::npos);
  }
  {
    // Only a fusion may carry a body.
    GraphBuilder b;
    NodeId p0 = b.Parameter(0, kF8);
    b.AddNode(OpKind::kNegate, {p0}, {}, std::nullopt, nullptr, "", body);
    EXPECT_NE(b.status().message().find("only a fusion"), std::string::npos);
  }
}

TEST(FusionIrTest, InputFusionWithReduce) {
  GraphBuilder bb("fused_sum");
  NodeId x = bb.Parameter(0, Shape(DType::kF32, {3, 2}));
  bb.SetOutputs({bb.Reduce(bb.Exp(x), {0}, ReduceKind::kAdd)});
  auto body = std::make_shared<const Graph>(bb.Build().value());
  GraphBuilder b;
  NodeId p = b.Parameter(0, Shape(DType::kF32, {3, 2}));
  b.Fusion({p}, body, FusionKind::kLoop);
  EXPECT_NE(b.status().message().find("kind=loop but the body's kind is input"), std::string::npos)
      << b.status().ToString();
  GraphBuilder c;
  NodeId q = c.Parameter(0, Shape(DType::kF32, {3, 2}));
  c.SetOutputs({c.Fusion({q}, body, FusionKind::kInput)});
  auto g = c.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->node(1).shape, Shape(DType::kF32, {2}));
  Literal in = Literal::FromDoubles(Shape(DType::kF32, {3, 2}), {0, 1, 0, 1, 0, 1});
  auto r = Evaluate(*g, std::vector<Literal>{in});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FLOAT_EQ((*r)[0].GetDouble(0), 3.0f);
  EXPECT_FLOAT_EQ((*r)[0].GetDouble(1), 3.0f * std::exp(1.0f));
}

TEST(FusionIrTest, PrintsEntryThenBodies) {
  Graph g = MainCalling(MulAddBody());
  EXPECT_EQ(PrintGraph(g), kMainText);
  auto parsed = ParseGraph(kMainText);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(PrintGraph(*parsed), kMainText);
  EXPECT_EQ(HashGraph(*parsed), HashGraph(g));
}

TEST(FusionIrTest, ParsesBodiesInAnyOrder) {
  // `outer` calls `inner`, which is written before it.
  std::string nested = R"(graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=outer, kind=loop
  ROOT (%1)
}

graph inner(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] negate(%0)
  ROOT (%1)
}

graph outer(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=inner, kind=loop
  %2 = f32[8] abs(%1)
  ROOT (%2)
}
)";
  auto g = ParseGraph(nested);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_NE(g->node(1).called, nullptr);
  EXPECT_EQ(g->node(1).called->name(), "outer");
  EXPECT_EQ(g->node(1).called->node(1).called->name(), "inner");
  // Printed in order of first use: main, outer, inner.
  std::string printed = PrintGraph(*g);
  EXPECT_LT(printed.find("graph outer"), printed.find("graph inner"));
  auto again = ParseGraph(printed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(PrintGraph(*again), printed);
  // Nested evaluation: abs(negate(x)).
  Literal x = Literal::FromDoubles(kF8, {-1, 2, -3, 4, -5, 6, -7, 8});
  auto r = Evaluate(*g, std::vector<Literal>{x});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 8; ++i) EXPECT_EQ((*r)[0].GetDouble(i), i + 1.0);
}

TEST(FusionIrTest, SharedBodyPrintedOnceAndNamesMadeUnique) {
  auto body = MulAddBody("f");
  auto other = MulAddBody("f");  // same name, different graph
  GraphBuilder b("f");           // entry has the name too
  NodeId p0 = b.Parameter(0, kF8);
  NodeId p1 = b.Parameter(1, kF8);
  NodeId a = b.Fusion({p0, p1}, body, FusionKind::kLoop);
  NodeId c = b.Fusion({a, p1}, body, FusionKind::kLoop);
  b.SetOutputs({b.Fusion({c, p1}, other, FusionKind::kLoop)});
  Graph g = b.Build().value();
  std::string text = PrintGraph(g);
  EXPECT_NE(text.find("calls=f.1, kind=loop\n  %3 = f32[8] fusion(%2, %1), calls=f.1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("calls=f.2"), std::string::npos) << text;
  EXPECT_NE(text.find("graph f.1("), std::string::npos);
  EXPECT_NE(text.find("graph f.2("), std::string::npos);
  EXPECT_EQ(text.find("graph f.3("), std::string::npos);
  auto parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(PrintGraph(*parsed), text);
  EXPECT_EQ(HashGraph(*parsed), HashGraph(g));
  // The parser shares one body between the two fusions that call it.
  EXPECT_EQ(parsed->node(2).called, parsed->node(3).called);
}

void ExpectParseError(const std::string& text, const std::string& where, const std::string& what) {
  auto g = ParseGraph(text);
  ASSERT_FALSE(g.ok()) << text;
  EXPECT_NE(g.status().message().find(where), std::string::npos) << g.status().ToString();
  EXPECT_NE(g.status().message().find(what), std::string::npos) << g.status().ToString();
}

TEST(FusionIrTest, OddBodyNamesRoundTrip) {
  for (const char* name : {"nan", "inf", "", "with space", "graph", "ROOT"}) {
    SCOPED_TRACE(name);
    Graph g = MainCalling(MulAddBody(name));
    std::string text = PrintGraph(g);
    auto parsed = ParseGraph(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << text;
    EXPECT_EQ(PrintGraph(*parsed), text);
    EXPECT_EQ(HashGraph(*parsed), HashGraph(g));
  }
}

TEST(FusionIrTest, NestingIsBounded) {
  // Text: graph i calls graph i+1, 80 deep.
  std::string text;
  for (int i = 0; i < 80; ++i) {
    text += "graph g" + std::to_string(i) + "(%p0: f32[8]) {\n  %0 = f32[8] parameter(0)\n";
    if (i + 1 < 80) {
      text += "  %1 = f32[8] fusion(%0), calls=g" + std::to_string(i + 1) + ", kind=loop\n";
      text += "  ROOT (%1)\n}\n";
    } else {
      text += "  ROOT (%0)\n}\n";
    }
  }
  auto g = ParseGraph(text);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nested more than 64"), std::string::npos)
      << g.status().ToString();
  // Builder: the fusion that makes a chain of bodies deeper than 64 is
  // refused when it is added (AddNode), and Build returns that error.
  auto body = MulAddBody();
  Status last;
  for (int depth = 0; depth < 70 && last.ok(); ++depth) {
    GraphBuilder b("level" + std::to_string(depth));
    NodeId p0 = b.Parameter(0, kF8);
    NodeId p1 = b.Parameter(1, kF8);
    b.SetOutputs({b.Fusion({p0, p1}, body, FusionKind::kLoop)});
    auto built = b.Build();
    if (!built.ok()) {
      last = built.status();
      break;
    }
    body = std::make_shared<const Graph>(std::move(built).value());
  }
  EXPECT_NE(last.message().find("nested more than 64"), std::string::npos) << last.ToString();
  EXPECT_EQ(body->fusion_depth(), 64);
  GraphBuilder b("too_deep");
  NodeId p0 = b.Parameter(0, kF8);
  NodeId p1 = b.Parameter(1, kF8);
  EXPECT_EQ(b.Fusion({p0, p1}, body, FusionKind::kLoop), kInvalidNode);
  EXPECT_NE(b.status().message().find("nested more than 64"), std::string::npos);
}

TEST(FusionIrTest, ParseErrors) {
  ExpectParseError(R"(graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=nowhere, kind=loop
  ROOT (%1)
}
)",
                   "line 3, column 33:", "undefined graph 'nowhere'");
  ExpectParseError(R"(graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=a, kind=loop
  ROOT (%1)
}
graph a(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=b, kind=loop
  ROOT (%1)
}
graph b(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=a, kind=loop
  ROOT (%1)
}
)",
                   "line 13, column 33:", "cycle of calls");
  ExpectParseError(R"(graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=main, kind=loop
  ROOT (%1)
}
)",
                   "line 3, column 33:", "cycle of calls");
  ExpectParseError(R"(graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  ROOT (%0)
}
graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  ROOT (%0)
}
)",
                   "line 5, column 7:", "defined twice");
  // An error inside a body names the body's line.
  ExpectParseError(R"(graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=a, kind=loop
  ROOT (%1)
}
graph a(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] negate(%7)
  ROOT (%1)
}
)",
                   "line 8, column 22:", "undefined value");
  // Body signature mismatch: the builder's error at the fusion.
  ExpectParseError(R"(graph main(%p0: f32[4]) {
  %0 = f32[4] parameter(0)
  %1 = f32[8] fusion(%0), calls=a, kind=loop
  ROOT (%1)
}
graph a(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  ROOT (%0)
}
)",
                   "line 3, column 15:", "operand 0 has shape f32[4]");
  ExpectParseError(R"(graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), kind=loop
  ROOT (%1)
}
)",
                   "line 3, column 15:", "calls=GRAPH_NAME");
  ExpectParseError(R"(graph main(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  ROOT (%0)
}
junk)",
                   "line 5, column 1:", "expected end of input");
}

TEST(FusionIrTest, HashIsStructuralNotNamed) {
  Graph a = MainCalling(MulAddBody("x"));
  Graph b = MainCalling(MulAddBody("y"));
  EXPECT_EQ(HashGraph(a), HashGraph(b));
  // A different body changes the hash.
  GraphBuilder bb("x");
  NodeId p0 = bb.Parameter(0, kF8);
  NodeId p1 = bb.Parameter(1, kF8);
  bb.SetOutputs({bb.Add(bb.Multiply(p0, p1), p0)});  // p0 instead of p1
  Graph c = MainCalling(std::make_shared<const Graph>(bb.Build().value()));
  EXPECT_NE(HashGraph(a), HashGraph(c));
  // Same nodes without the body (inlined) hash differently from the fusion.
  GraphBuilder d("main");
  NodeId q0 = d.Parameter(0, kF8);
  NodeId q1 = d.Parameter(1, kF8);
  d.SetOutputs({d.Add(d.Multiply(q0, q1), q1)});
  EXPECT_NE(HashGraph(a), HashGraph(d.Build().value()));
}

TEST(FusionIrTest, InterpreterEvaluatesBody) {
  Graph g = MainCalling(MulAddBody());
  Literal x = Literal::FromDoubles(kF8, {1, 2, 3, 4, 5, 6, 7, 8});
  Literal y = Literal::FromDoubles(kF8, {0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4});
  auto r = Evaluate(g, std::vector<Literal>{x, y});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 8; ++i) {
    float xi = i + 1.0f, yi = (i + 1) * 0.5f;
    EXPECT_EQ((*r)[0].GetDouble(i), xi * yi + yi);
  }
  // EvaluateNode on the fusion node directly.
  auto n = EvaluateNode(g.node(2), {&x, &y});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(n->BitwiseEquals((*r)[0]));
  auto bad = EvaluateNode(g.node(2), {&x});
  EXPECT_FALSE(bad.ok());
}

TEST(FusionIrTest, InterpreterErrorInsideNestedBody) {
  auto g = ParseGraph(R"(graph main(%p0: s32[2], %p1: s32[2]) {
  %0 = s32[2] parameter(0)
  %1 = s32[2] parameter(1)
  %2 = s32[2] fusion(%0, %1), calls=outer, kind=loop
  ROOT (%2)
}
graph outer(%p0: s32[2], %p1: s32[2]) {
  %0 = s32[2] parameter(0)
  %1 = s32[2] parameter(1)
  %2 = s32[2] fusion(%0, %1), calls=inner, kind=loop
  ROOT (%2)
}
graph inner(%p0: s32[2], %p1: s32[2]) {
  %0 = s32[2] parameter(0)
  %1 = s32[2] parameter(1)
  %2 = s32[2] divide(%0, %1)
  ROOT (%2)
}
)");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Literal a = Literal::FromInts(Shape(DType::kS32, {2}), {7, -7});
  Literal ok_b = Literal::FromInts(Shape(DType::kS32, {2}), {2, 2});
  auto r = Evaluate(*g, std::vector<Literal>{a, ok_b});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].GetInt(0), 3);
  EXPECT_EQ((*r)[0].GetInt(1), -3);
  Literal zero = Literal::FromInts(Shape(DType::kS32, {2}), {2, 0});
  auto e = Evaluate(*g, std::vector<Literal>{a, zero});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kOutOfRange) << e.status().ToString();
  EXPECT_NE(e.status().message().find("in fusion body 'outer'"), std::string::npos)
      << e.status().ToString();
  EXPECT_NE(e.status().message().find("in fusion body 'inner'"), std::string::npos)
      << e.status().ToString();
}

TEST(FusionIrTest, VerifyRecursesIntoBodies) {
  Graph g = MainCalling(MulAddBody());
  EXPECT_TRUE(Verify(g).ok());
  // Graphs can only be built verified, so a broken body is only possible
  // through a fusion whose declared shape disagrees: AddNode rejects it.
  GraphBuilder b;
  NodeId p0 = b.Parameter(0, kF8);
  NodeId p1 = b.Parameter(1, kF8);
  b.AddNode(OpKind::kFusion, {p0, p1}, {{"kind", std::string("loop")}}, Shape(DType::kF32, {4}),
            nullptr, "", MulAddBody());
  EXPECT_NE(b.status().message().find("differs from the body's output"), std::string::npos)
      << b.status().ToString();
  GraphBuilder c;
  NodeId q = c.Parameter(0, kF8);
  c.AddNode(OpKind::kFusion, {q, q}, {{"kind", std::string("loop")}, {"extra", int64_t{1}}}, kF8,
            nullptr, "", MulAddBody());
  EXPECT_NE(c.status().message().find("unexpected attribute 'extra'"), std::string::npos)
      << c.status().ToString();
}

}  // namespace
}  // namespace ember
