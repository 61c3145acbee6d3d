// The interpreter driver: argument checks, tuples, optimization-barrier,
// custom-call through the extern registry (the reference dot-general and
// convolution kernels and user-registered kernels), error statuses that
// name the op and node, and EvaluateNode on nodes outside a graph.
#include "ember/eval/interpreter.h"

#include <stdexcept>

#include "eval/interp_test_util.h"

namespace ember {
namespace {

using testing::Doubles;
using testing::F32Lit;
using testing::HasAll;
using testing::IntLit;
using testing::Ints;
using testing::Run1;

Shape F32(std::vector<int64_t> d) { return Shape(DType::kF32, std::move(d)); }

StatusOr<Graph> AddGraph() {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2}));
  auto y = b.Parameter(1, F32({2}));
  b.SetOutputs({b.Add(x, y)});
  return b.Build();
}

TEST(InterpreterTest, EvaluatesAndChecksArgumentCount) {
  EMBER_ASSERT_OK_AND_ASSIGN(Graph g, AddGraph());
  EMBER_ASSERT_OK_AND_ASSIGN(auto out, Evaluate(g, {F32Lit({2}, {1, 2}), F32Lit({2}, {10, 20})}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Doubles(out[0]), (std::vector<double>{11, 22}));
  auto r = Evaluate(g, std::vector<Literal>{F32Lit({2}, {1, 2})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasAll(r.status().message(), {"2 arguments", "got 1"})) << r.status().message();
}

TEST(InterpreterTest, ArgumentShapeMustMatchExactly) {
  EMBER_ASSERT_OK_AND_ASSIGN(Graph g, AddGraph());
  for (const Literal& bad : {F32Lit({3}, {1, 2, 3}), testing::Lit(DType::kF64, {2}, {1, 2})}) {
    auto r = Evaluate(g, {F32Lit({2}, {1, 2}), bad});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(HasAll(r.status().message(), {"parameter(1)", bad.shape().ToString(), "f32[2]"}))
        << r.status().message();
  }
  std::vector<const Literal*> null_args = {nullptr, nullptr};
  EXPECT_FALSE(Evaluate(g, null_args).ok());
}

TEST(InterpreterTest, OutputsMayRepeatAndIncludeParameters) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2}));
  auto n = b.Negate(x);
  auto m = b.Multiply(n, n);  // n used twice by one node, then freed
  auto e = b.Exp(x);          // unused: dropped
  (void)e;
  auto r = testing::BuildAndRun(b, {m, x, m, n}, {F32Lit({2}, {2, -3})});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{4, 9}));
  EXPECT_EQ(Doubles((*r)[1]), (std::vector<double>{2, -3}));
  EXPECT_EQ(Doubles((*r)[2]), (std::vector<double>{4, 9}));
  EXPECT_EQ(Doubles((*r)[3]), (std::vector<double>{-2, 3}));
}

TEST(InterpreterTest, TupleGetTupleElementAndBarrier) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2}));
  auto y = b.Parameter(1, Shape(DType::kS32, {}));
  auto bar = b.OptimizationBarrier({x, y});
  auto x2 = b.GetTupleElement(bar, 0);
  auto y2 = b.GetTupleElement(bar, 1);
  auto t = b.Tuple({y2, x2});
  auto r =
      testing::BuildAndRun(b, {x2, y2, t}, {F32Lit({2}, {1.5, 2.5}), IntLit(DType::kS32, {}, {7})});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(Ints((*r)[1]), (std::vector<int64_t>{7}));
  const Literal& tup = (*r)[2];
  ASSERT_TRUE(tup.shape().is_tuple());
  ASSERT_EQ(tup.tuple_elements().size(), 2u);
  EXPECT_EQ(Ints(tup.tuple_elements()[0]), (std::vector<int64_t>{7}));
  EXPECT_EQ(Doubles(tup.tuple_elements()[1]), (std::vector<double>{1.5, 2.5}));
}

TEST(InterpreterTest, DataErrorsNameTheOpAndNode) {
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kS32, {2}));
  auto y = b.Parameter(1, Shape(DType::kS32, {2}));
  auto d = b.Divide(x, y);
  auto r = Run1(b, d, {IntLit(DType::kS32, {2}, {1, 2}), IntLit(DType::kS32, {2}, {1, 0})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("divide %" + std::to_string(d)), std::string::npos)
      << r.status().message();
}

// A custom-call to the reference kernels carries the op's attributes.
TEST(InterpreterTest, CustomCallReferenceDotGeneral) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  auto y = b.Parameter(1, F32({3, 2}));
  Attrs attrs{{"call_target_name", std::string("ember.dot-general")},
              {"lhs_contracting_dims", std::vector<int64_t>{1}},
              {"rhs_contracting_dims", std::vector<int64_t>{0}}};
  auto cc = b.AddNode(OpKind::kCustomCall, {x, y}, attrs, F32({2, 2}));
  DotDims dd;
  dd.lhs_contracting = {1};
  dd.rhs_contracting = {0};
  auto dot = b.DotGeneral(x, y, dd);
  auto r = testing::BuildAndRun(
      b, {cc, dot}, {F32Lit({2, 3}, {1, 2, 3, 4, 5, 6}), F32Lit({3, 2}, {7, 8, 9, 10, 11, 12})});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{58, 64, 139, 154}));
  EXPECT_TRUE((*r)[0].BitwiseEquals((*r)[1]));
}

TEST(InterpreterTest, CustomCallReferenceConvolution) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({1, 1, 5}));
  auto w = b.Parameter(1, F32({1, 1, 3}));
  Attrs attrs{{"call_target_name", std::string("ember.convolution")},
              {"window_strides", std::vector<int64_t>{2}},
              {"padding_low", std::vector<int64_t>{1}},
              {"padding_high", std::vector<int64_t>{1}}};
  auto cc = b.AddNode(OpKind::kCustomCall, {x, w}, attrs, F32({1, 1, 3}));
  ConvConfig c;
  c.window_strides = {2};
  c.padding_low = {1};
  c.padding_high = {1};
  auto conv = b.Convolution(x, w, c);
  auto r = testing::BuildAndRun(
      b, {cc, conv}, {F32Lit({1, 1, 5}, {1, 2, 3, 4, 5}), F32Lit({1, 1, 3}, {1, 0, -1})});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{-2, -2, 4}));
  EXPECT_TRUE((*r)[0].BitwiseEquals((*r)[1]));
}

TEST(InterpreterTest, CustomCallWithWrongShapesIsAnErrorNotACrash) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  auto y = b.Parameter(1, F32({4, 2}));  // contracting sizes 3 vs 4
  Attrs attrs{{"call_target_name", std::string("ember.dot-general")},
              {"lhs_contracting_dims", std::vector<int64_t>{1}},
              {"rhs_contracting_dims", std::vector<int64_t>{0}}};
  auto cc = b.AddNode(OpKind::kCustomCall, {x, y}, attrs, F32({2, 2}));
  auto r =
      Run1(b, cc,
           {F32Lit({2, 3}, std::vector<double>(6, 1)), F32Lit({4, 2}, std::vector<double>(8, 1))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      HasAll(r.status().message(), {"custom-call %" + std::to_string(cc), "ember.dot-general"}))
      << r.status().message();
  // Wrong declared result.
  GraphBuilder b2;
  auto x2 = b2.Parameter(0, F32({1, 1, 5}));
  auto w2 = b2.Parameter(1, F32({1, 1, 3}));
  auto cc2 =
      b2.AddNode(OpKind::kCustomCall, {x2, w2},
                 Attrs{{"call_target_name", std::string("ember.convolution")}}, F32({1, 1, 4}));
  auto r2 = Run1(b2, cc2, {F32Lit({1, 1, 5}, {1, 2, 3, 4, 5}), F32Lit({1, 1, 3}, {1, 0, -1})});
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kInvalidArgument);
}

TEST(InterpreterTest, UnknownCustomCallTargetIsNotFound) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2}));
  auto cc = b.CustomCall("no.such.kernel", {x}, F32({2}));
  auto r = Run1(b, cc, {F32Lit({2}, {1, 2})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      HasAll(r.status().message(), {"custom-call %" + std::to_string(cc), "no.such.kernel"}))
      << r.status().message();
}

TEST(InterpreterTest, UserKernelWithTupleResultAndErrors) {
  ExternRegistry::Global().Register("test.split-sum", [](ExternCall& c) -> Status {
    // inputs: x f32[n]; outputs: (sum f32[], count s64[])
    const Literal& x = *c.inputs[0];
    if (x.num_elements() == 0) return OutOfRange("empty input");
    double s = 0;
    for (int64_t i = 0; i < x.num_elements(); ++i) s += x.GetDouble(i);
    c.outputs[0]->SetDouble(0, s);
    c.outputs[1]->SetInt(0, x.num_elements());
    return OkStatus();
  });
  EXPECT_TRUE(ExternRegistry::Global().Has("test.split-sum"));
  EXPECT_TRUE(ExternRegistry::Global().Has("ember.dot-general"));
  EXPECT_TRUE(ExternRegistry::Global().Has("ember.convolution"));
  EXPECT_FALSE(ExternRegistry::Global().Lookup("test.absent").ok());
  {
    GraphBuilder b;
    auto x = b.Parameter(0, F32({3}));
    auto cc = b.CustomCall("test.split-sum", {x}, Shape::Tuple({F32({}), Shape(DType::kS64, {})}));
    auto s = b.GetTupleElement(cc, 0);
    auto n = b.GetTupleElement(cc, 1);
    auto r = testing::BuildAndRun(b, {s, n}, {F32Lit({3}, {1, 2, 4})});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{7}));
    EXPECT_EQ(Ints((*r)[1]), (std::vector<int64_t>{3}));
  }
  {
    GraphBuilder b;
    auto x = b.Parameter(0, F32({0}));
    auto cc = b.CustomCall("test.split-sum", {x}, Shape::Tuple({F32({}), Shape(DType::kS64, {})}));
    auto r = Run1(b, cc, {F32Lit({0}, {})});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
    EXPECT_TRUE(HasAll(r.status().message(), {"custom-call %" + std::to_string(cc), "empty input"}))
        << r.status().message();
  }
}

TEST(InterpreterTest, KernelThatChangesOutputShapeIsRejected) {
  ExternRegistry::Global().Register("test.bad-shape", [](ExternCall& c) -> Status {
    *c.outputs[0] = Literal(Shape(DType::kF32, {5}));
    return OkStatus();
  });
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2}));
  auto cc = b.CustomCall("test.bad-shape", {x}, F32({2}));
  auto r = Run1(b, cc, {F32Lit({2}, {1, 2})});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(HasAll(r.status().message(), {"custom-call %", "f32[5]"})) << r.status().message();
}

TEST(InterpreterTest, HugeResultIsResourceExhaustedNotAnAbort) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({}));
  auto y = b.BroadcastInDim(x, {int64_t{1} << 20, int64_t{1} << 20}, {});  // 4 TiB
  auto r = Run1(b, y, {F32Lit({}, {1})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("broadcast-in-dim %" + std::to_string(y)), std::string::npos)
      << r.status().message();
}

TEST(InterpreterTest, KernelExceptionsBecomeStatuses) {
  ExternRegistry::Global().Register(
      "test.throws", [](ExternCall&) -> Status { throw std::runtime_error("boom"); });
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2}));
  auto cc = b.CustomCall("test.throws", {x}, F32({2}));
  auto r = Run1(b, cc, {F32Lit({2}, {1, 2})});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(HasAll(r.status().message(), {"custom-call %", "boom"})) << r.status().message();
}

TEST(InterpreterTest, EvaluateNodeRunsAValidNode) {
  Node n;
  n.id = 3;
  n.op = OpKind::kTranspose;
  n.shape = F32({3, 2});
  n.operands = {0};
  n.attrs.Set("dimensions", std::vector<int64_t>{1, 0});
  Literal x = F32Lit({2, 3}, {1, 2, 3, 4, 5, 6});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, EvaluateNode(n, {&x}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(InterpreterTest, EvaluateNodeRejectsInconsistentNodes) {
  Literal x = F32Lit({2, 3}, {1, 2, 3, 4, 5, 6});
  {
    Node n;  // shape disagrees with the operand
    n.id = 7;
    n.op = OpKind::kTranspose;
    n.shape = F32({2, 3});
    n.operands = {0};
    n.attrs.Set("dimensions", std::vector<int64_t>{1, 0});
    auto r = EvaluateNode(n, {&x});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("%7"), std::string::npos) << r.status().message();
  }
  {
    Node n;  // missing attribute
    n.id = 8;
    n.op = OpKind::kSlice;
    n.shape = F32({1, 1});
    n.operands = {0};
    EXPECT_FALSE(EvaluateNode(n, {&x}).ok());
  }
  {
    Node n;  // operand count
    n.id = 9;
    n.op = OpKind::kAdd;
    n.shape = F32({2, 3});
    n.operands = {0, 1};
    EXPECT_FALSE(EvaluateNode(n, {&x}).ok());
    EXPECT_FALSE(EvaluateNode(n, {&x, nullptr}).ok());
  }
  {
    Node n;
    n.id = 0;
    n.op = OpKind::kParameter;
    n.shape = F32({2});
    EXPECT_FALSE(EvaluateNode(n, {}).ok());
  }
}

}  // namespace
}  // namespace ember
