#include "ember/runtime/executable.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"

namespace ember {
namespace {

Shape F32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }
Shape S32(std::vector<int64_t> dims) { return Shape(DType::kS32, std::move(dims)); }

BufferRef FBuf(std::vector<int64_t> dims, std::vector<double> v) {
  return Buffer::FromLiteral(Literal::FromDoubles(F32(std::move(dims)), v));
}
BufferRef IBuf(std::vector<int64_t> dims, std::vector<int64_t> v) {
  return Buffer::FromLiteral(Literal::FromInts(S32(std::move(dims)), v));
}

std::vector<double> Values(const Literal& lit) {
  std::vector<double> v;
  for (int64_t i = 0; i < lit.num_elements(); ++i) v.push_back(lit.GetDouble(i));
  return v;
}

// Test externs, registered once per process.
//  test.add-one:   out = in + 1 (f32 arrays)
//  test.identity:  out = in (any array)
//  test.split2:    f32[2n] -> (f32[n], f32[n]) halves
//  test.fail:      always OutOfRange
//  test.accumulate: (a, b) -> (a + b, b) (f32 arrays), elementwise, so element 0 may be
//                  a's own buffer; g_accumulate_in_place says whether it was
bool g_accumulate_in_place = false;
// The vectors test.handover handed over in this process, in call order.
std::vector<std::shared_ptr<std::vector<float>>>& HandedOver() {
  static std::vector<std::shared_ptr<std::vector<float>>> v;
  return v;
}

void RegisterTestExterns() {
  static bool done = [] {
    auto& reg = ExternRegistry::Global();
    reg.Register("test.accumulate", [](ExternCall& c) -> Status {
      g_accumulate_in_place = c.outputs[0]->data() == c.inputs[0]->data();
      for (int64_t i = 0; i < c.inputs[0]->num_elements(); ++i) {
        c.outputs[0]->SetDouble(i, c.inputs[0]->GetDouble(i) + c.inputs[1]->GetDouble(i));
        c.outputs[1]->SetDouble(i, c.inputs[1]->GetDouble(i));
      }
      return OkStatus();
    });
    reg.Register("test.add-one", [](ExternCall& c) -> Status {
      for (int64_t i = 0; i < c.inputs[0]->num_elements(); ++i)
        c.outputs[0]->SetDouble(i, c.inputs[0]->GetDouble(i) + 1.0);
      return OkStatus();
    });
    reg.Register("test.identity", [](ExternCall& c) -> Status {
      if (c.outputs[0]->size_bytes() != c.inputs[0]->size_bytes())
        return InvalidArgument("test.identity: size mismatch");
      std::memcpy(c.outputs[0]->data(), c.inputs[0]->data(),
                  static_cast<size_t>(c.inputs[0]->size_bytes()));
      return OkStatus();
    });
    reg.Register("test.split2", [](ExternCall& c) -> Status {
      int64_t half = c.inputs[0]->num_elements() / 2;
      for (int64_t i = 0; i < half; ++i) {
        c.outputs[0]->SetDouble(i, c.inputs[0]->GetDouble(i));
        c.outputs[1]->SetDouble(i, c.inputs[0]->GetDouble(half + i));
      }
      return OkStatus();
    });
    // Hands its results over (ExternCall::adopted): input * 2 for output 0 (and, for a
    // tuple result, input * 3 for output 1), in vectors of its own that it records in
    // HandedOver() with their owners.
    reg.Register("test.handover", [](ExternCall& c) -> Status {
      c.adopted.resize(c.outputs.size());
      for (size_t k = 0; k < c.outputs.size(); ++k) {
        auto v = std::make_shared<std::vector<float>>();
        for (int64_t i = 0; i < c.inputs[0]->num_elements(); ++i)
          v->push_back(static_cast<float>(c.inputs[0]->GetDouble(i) * (2.0 + k)));
        c.adopted[k] = {v->data(), v};
        HandedOver().push_back(v);
      }
      return OkStatus();
    });
    reg.Register("test.bad-shape", [](ExternCall& c) -> Status {
      *c.outputs[0] = Literal(Shape(DType::kF32, {7}));  // a kernel bug
      return OkStatus();
    });
    reg.Register("test.fail", [](ExternCall& c) -> Status {
      return OutOfRange("test.fail: index 9 out of range [0, 4)");
    });
    return true;
  }();
  (void)done;
}

Graph BuildOrDie(GraphBuilder& b) {
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

int CountSteps(const Executable& exe, StepKind kind) {
  int n = 0;
  for (const Step& s : exe.steps()) n += s.kind == kind;
  return n;
}

// exp(x) * 0.5 -> dot with w -> custom-call add-one and tanh, plus a
// convolution reduced to a scalar.
Graph MixedGraph() {
  GraphBuilder b("mixed");
  NodeId x = b.Parameter(0, F32({2, 3}));
  NodeId w = b.Parameter(1, F32({3, 4}));
  NodeId img = b.Parameter(2, F32({1, 1, 5, 5}));
  NodeId ker = b.Parameter(3, F32({2, 1, 3, 3}));
  NodeId half = b.BroadcastInDim(b.ConstantScalar(DType::kF32, 0.5), {2, 3}, {});
  NodeId a = b.Multiply(b.Exp(x), half);
  NodeId d = b.DotGeneral(a, w, DotDims{{}, {}, {1}, {0}});
  NodeId plus1 = b.CustomCall("test.add-one", {d}, F32({2, 4}));
  NodeId e = b.Add(b.Unary(OpKind::kTanh, d), plus1);
  NodeId conv = b.Convolution(img, ker, ConvConfig{});
  NodeId s = b.Reduce(conv, {0, 1, 2, 3}, ReduceKind::kAdd);
  b.SetOutputs({e, s, conv});
  return BuildOrDie(b);
}

std::vector<Literal> MixedArgs(int variant) {
  std::vector<double> x, w, img, ker;
  for (int i = 0; i < 6; ++i) x.push_back(0.1 * i - 0.2 + variant);
  for (int i = 0; i < 12; ++i) w.push_back(((i * 7) % 5) * 0.25 - 0.5);
  for (int i = 0; i < 25; ++i) img.push_back((i % 6) - 2.0 + 0.5 * variant);
  for (int i = 0; i < 18; ++i) ker.push_back(((i * 3) % 4) - 1.5);
  return {Literal::FromDoubles(F32({2, 3}), x), Literal::FromDoubles(F32({3, 4}), w),
          Literal::FromDoubles(F32({1, 1, 5, 5}), img),
          Literal::FromDoubles(F32({2, 1, 3, 3}), ker)};
}

void ExpectSameAsInterpreter(const Executable& exe, const Graph& g,
                             const std::vector<Literal>& args) {
  auto want = Evaluate(g, args);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  auto got = exe.RunLiterals(args);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_TRUE((*got)[i].BitwiseEquals((*want)[i]))
        << "output " << i << ": runtime " << (*got)[i].ToString() << " vs interpreter "
        << (*want)[i].ToString();
  }
}

TEST(ExecutableTest, MixedGraphMatchesInterpreter) {
  RegisterTestExterns();
  Graph g = MixedGraph();
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  EXPECT_EQ(CountSteps(*exe, StepKind::kExtern), 3) << exe->DebugString();
  EXPECT_GE(CountSteps(*exe, StepKind::kInterpret), 2) << exe->DebugString();
  ExpectSameAsInterpreter(*exe, g, MixedArgs(0));
  ExpectSameAsInterpreter(*exe, g, MixedArgs(1));
}

TEST(ExecutableTest, ContractionsCanRunInTheInterpreter) {
  RegisterTestExterns();
  Graph g = MixedGraph();
  CompileOptions opts;
  opts.extern_contractions = false;
  auto exe = Compile(g, opts);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  EXPECT_EQ(CountSteps(*exe, StepKind::kExtern), 1) << exe->DebugString();  // the custom-call
  ExpectSameAsInterpreter(*exe, g, MixedArgs(0));
}

TEST(ExecutableTest, HandComputedDotPlusOne) {
  RegisterTestExterns();
  GraphBuilder b("dot");
  NodeId x = b.Parameter(0, F32({2, 2}));
  NodeId y = b.Parameter(1, F32({2, 2}));
  NodeId d = b.DotGeneral(x, y, DotDims{{}, {}, {1}, {0}});
  NodeId r = b.CustomCall("test.add-one", {d}, F32({2, 2}));
  b.SetOutputs({r, d});
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  auto out = exe->Run({FBuf({2, 2}, {1, 2, 3, 4}), FBuf({2, 2}, {5, 6, 7, 8})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]]
  EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{20, 23, 44, 51}));
  EXPECT_EQ(Values((*out)[1]->literal()), (std::vector<double>{19, 22, 43, 50}));
  EXPECT_EQ(CountSteps(*exe, StepKind::kInterpret), 0) << exe->DebugString();
}

TEST(ExecutableTest, CancelFlagStopsTheRunBeforeTheNextStep) {
  RegisterTestExterns();
  GraphBuilder b("cancel");
  NodeId x = b.Parameter(0, F32({2, 2}));
  NodeId y = b.Parameter(1, F32({2, 2}));
  NodeId d = b.DotGeneral(x, y, DotDims{{}, {}, {1}, {0}});
  NodeId r = b.CustomCall("test.add-one", {d}, F32({2, 2}));
  b.SetOutputs({r});
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  std::atomic<bool> cancel{false};
  ExecuteOptions opts;
  opts.cancel = &cancel;
  auto ok = exe->Run({FBuf({2, 2}, {1, 2, 3, 4}), FBuf({2, 2}, {5, 6, 7, 8})}, opts);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(Values((*ok)[0]->literal()), (std::vector<double>{20, 23, 44, 51}));
  cancel = true;
  BufferRef a = FBuf({2, 2}, {1, 2, 3, 4});
  auto stopped = exe->Run({a, FBuf({2, 2}, {5, 6, 7, 8})}, opts);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.status().code(), StatusCode::kCancelled);
  EXPECT_NE(stopped.status().message().find("cancelled before step 0"), std::string::npos)
      << stopped.status().message();
  EXPECT_EQ(Values(a->literal()), (std::vector<double>{1, 2, 3, 4}));
}

TEST(ExecutableTest, CompileOptionExternsArePrivateToThatCompilation) {
  GraphBuilder b("private");
  NodeId x = b.Parameter(0, F32({3}));
  NodeId r = b.CustomCall("test.private-times-ten", {x}, F32({3}));
  b.SetOutputs({r});
  Graph g = BuildOrDie(b);
  // Not in the global registry: NotFound without the option.
  EXPECT_EQ(Compile(g).status().code(), StatusCode::kNotFound);
  CompileOptions opts;
  opts.externs["test.private-times-ten"] = [](ExternCall& c) {
    for (int64_t i = 0; i < 3; ++i) c.outputs[0]->SetDouble(i, 10 * c.inputs[0]->GetDouble(i));
    return OkStatus();
  };
  auto exe = Compile(g, opts);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  auto out = exe->Run({FBuf({3}, {1, 2, 3})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{10, 20, 30}));
  EXPECT_FALSE(ExternRegistry::Global().Has("test.private-times-ten"));
}

TEST(ExecutableTest, TupleFromExternReadThroughGetTupleElement) {
  RegisterTestExterns();
  GraphBuilder b("split");
  NodeId x = b.Parameter(0, F32({4}));
  NodeId t = b.CustomCall("test.split2", {x}, Shape::Tuple({F32({2}), F32({2})}));
  NodeId sum = b.Add(b.GetTupleElement(t, 0), b.GetTupleElement(t, 1));
  NodeId bar = b.OptimizationBarrier({sum, x});
  NodeId back = b.CustomCall("test.identity", {b.GetTupleElement(bar, 0)}, F32({2}));
  b.SetOutputs({back, t});
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  auto out = exe->Run({FBuf({4}, {1, 2, 10, 20})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{11, 22}));
  ASSERT_TRUE((*out)[1]->shape().is_tuple());
  EXPECT_EQ(Values((*out)[1]->literal().tuple_elements()[1]), (std::vector<double>{10, 20}));
  ExpectSameAsInterpreter(*exe, g, {Literal::FromDoubles(F32({4}), {-1, 0.5, 3, 8})});
}

// An element of an extern's tuple that is a graph output (a convolution backward's
// weight gradient, live as .grad) is returned in place: no interpreted step copies it
// out, and the buffer returned owns the element's bytes, moved out of the tuple (it
// keeps no other element alive); an element returned twice is one buffer twice. On
// both backends, against the interpreter.
TEST(ExecutableTest, TupleElementOutputIsReturnedInPlace) {
  RegisterTestExterns();
  GraphBuilder b("split_out");
  NodeId x = b.Parameter(0, F32({4}));
  NodeId t = b.CustomCall("test.split2", {x}, Shape::Tuple({F32({2}), F32({2})}));
  NodeId sum = b.Add(b.GetTupleElement(t, 0), b.GetTupleElement(t, 1));
  b.SetOutputs({b.GetTupleElement(t, 1), sum, b.GetTupleElement(t, 0), b.GetTupleElement(t, 1)});
  Graph g = BuildOrDie(b);
  for (const Backend be : {Backend::kInterpreter, Backend::kCpu}) {
    CompileOptions opts;
    opts.backend = be;
    auto exe = Compile(g, opts);
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    for (const Step& st : exe->steps()) {
      for (NodeId id : st.nodes)
        EXPECT_NE(g.node(id).op, OpKind::kGetTupleElement) << exe->DebugString();
      if (be == Backend::kCpu) {
        EXPECT_NE(st.kind, StepKind::kInterpret) << exe->DebugString();
      }
    }
    EXPECT_EQ(exe->output_tuple_indices(), (std::vector<int>{1, -1, 0, 1})) << exe->DebugString();
    std::vector<BufferRef> out;
    {
      auto r = exe->Run({FBuf({4}, {1, 2, 10, 20})});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      out = *r;
    }
    EXPECT_EQ(Values(out[0]->literal()), (std::vector<double>{10, 20}));
    EXPECT_EQ(Values(out[1]->literal()), (std::vector<double>{11, 22}));
    EXPECT_EQ(Values(out[2]->literal()), (std::vector<double>{1, 2}));
    // The elements' own bytes (not borrowed from the tuple, not a copy).
    for (int o : {0, 2}) {
      EXPECT_FALSE(out[o]->literal().is_borrowed()) << o;
      EXPECT_EQ(out[o]->size_bytes(), 8) << o;
    }
    EXPECT_EQ(out[3], out[0]);
    ExpectSameAsInterpreter(*exe, g, {Literal::FromDoubles(F32({4}), {-1, 0.5, 3, 8})});
  }
}

// An extern that hands its results over: the run's buffers are the extern's own bytes
// (no copy), kept alive by its owners exactly as long as the results; a tuple element's
// comes out as a buffer of its own. Both backends, the interpreter copying nothing either.
TEST(ExecutableTest, HandedOverExternResultsAreTheResultsWithoutACopy) {
  RegisterTestExterns();
  GraphBuilder b("handover");
  NodeId x = b.Parameter(0, F32({4}));
  NodeId one = b.CustomCall("test.handover", {x}, F32({4}));
  NodeId two = b.CustomCall("test.handover", {x}, Shape::Tuple({F32({4}), F32({4})}));
  b.SetOutputs({one, b.GetTupleElement(two, 1), b.Add(one, b.GetTupleElement(two, 0))});
  Graph g = BuildOrDie(b);
  for (const Backend be : {Backend::kInterpreter, Backend::kCpu}) {
    CompileOptions opts;
    opts.backend = be;
    auto exe = Compile(g, opts);
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    HandedOver().clear();
    std::vector<BufferRef> out;
    {
      auto r = exe->Run({FBuf({4}, {1, 2, 3, 4})});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      out = *r;
    }
    ASSERT_EQ(HandedOver().size(), 3u);
    EXPECT_EQ(Values(out[0]->literal()), (std::vector<double>{2, 4, 6, 8}));
    EXPECT_EQ(Values(out[1]->literal()), (std::vector<double>{3, 6, 9, 12}));
    EXPECT_EQ(Values(out[2]->literal()), (std::vector<double>{4, 8, 12, 16}));
    if (be == Backend::kCpu) {
      EXPECT_EQ(out[0]->data(), HandedOver()[0]->data());  // the extern's bytes
      EXPECT_EQ(out[1]->data(), HandedOver()[2]->data());  // the tuple's element 1
      EXPECT_TRUE(out[0]->adopted());
      EXPECT_TRUE(out[1]->adopted());
      EXPECT_EQ(out[0]->size_bytes(), 0);  // its owner accounts the bytes
    }
    std::vector<std::weak_ptr<std::vector<float>>> alive(HandedOver().begin(), HandedOver().end());
    HandedOver().clear();
    if (be == Backend::kCpu) {
      EXPECT_TRUE(alive[0].lock() && alive[2].lock());  // held by the results
      EXPECT_FALSE(alive[1].lock());                    // element 0: read, then released
    }
    out.clear();
    for (const auto& w : alive) EXPECT_FALSE(w.lock());
  }
}

TEST(ExecutableTest, DeadNodesAreNotCompiled) {
  RegisterTestExterns();
  GraphBuilder b("dead");
  NodeId x = b.Parameter(0, F32({2}));
  b.CustomCall("no.such.kernel", {x}, F32({2}));  // unused: never compiled
  b.SetOutputs({b.Negate(x)});
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  EXPECT_EQ(exe->steps().size(), 1u);
  auto out = exe->Run({FBuf({2}, {1, -2})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{-1, 2}));
}

TEST(ExecutableTest, IntegerDivisionByZeroIsOutOfRangeNamingStepAndNode) {
  RegisterTestExterns();
  GraphBuilder b("div");
  NodeId x = b.Parameter(0, S32({3}));
  NodeId y = b.Parameter(1, S32({3}));
  NodeId xi = b.CustomCall("test.identity", {x}, S32({3}));
  NodeId q = b.Divide(xi, y);
  NodeId r = b.Negate(q);
  b.SetOutputs({r});
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  auto good = exe->Run({IBuf({3}, {7, -7, 6}), IBuf({3}, {2, 2, -4})});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(Values((*good)[0]->literal()), (std::vector<double>{-3, 3, 1}));  // truncating

  auto bad = exe->Run({IBuf({3}, {7, -7, 6}), IBuf({3}, {2, 0, -4})});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange) << bad.status().ToString();
  const std::string& msg = bad.status().message();
  EXPECT_NE(msg.find("step 1 (interpret)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("divide %" + std::to_string(q) + ":"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("overwritten"), std::string::npos) << msg;
}

TEST(ExecutableTest, UnknownCustomCallTargetIsNotFound) {
  RegisterTestExterns();
  GraphBuilder b("unknown");
  NodeId x = b.Parameter(0, F32({2}));
  b.SetOutputs({b.CustomCall("no.such.kernel", {x}, F32({2}))});
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_FALSE(exe.ok());
  EXPECT_EQ(exe.status().code(), StatusCode::kNotFound);
  EXPECT_NE(exe.status().message().find("no.such.kernel"), std::string::npos)
      << exe.status().message();
}

TEST(ExecutableTest, ExternErrorPropagatesWithStepAndNode) {
  RegisterTestExterns();
  GraphBuilder b("fail");
  NodeId x = b.Parameter(0, F32({2}));
  NodeId y = b.Exp(x);
  NodeId f = b.CustomCall("test.fail", {y}, F32({2}));
  b.SetOutputs({b.Negate(f)});
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  auto out = exe->Run({FBuf({2}, {0, 1})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange);
  const std::string& msg = out.status().message();
  EXPECT_NE(msg.find("step 1 (extern test.fail)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("custom-call %" + std::to_string(f) + ":"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index 9 out of range"), std::string::npos) << msg;
}

TEST(ExecutableTest, ExternThatChangesItsOutputShapeIsAnInternalError) {
  RegisterTestExterns();
  for (bool tuple : {false, true}) {
    GraphBuilder b("bad-shape");
    NodeId x = b.Parameter(0, F32({2}));
    Shape result = tuple ? Shape::Tuple({F32({2})}) : F32({2});
    b.SetOutputs({b.CustomCall("test.bad-shape", {x}, result)});
    Graph g = BuildOrDie(b);
    auto exe = Compile(g);
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    auto out = exe->Run({FBuf({2}, {1, 2})});
    ASSERT_FALSE(out.ok()) << tuple;
    EXPECT_EQ(out.status().code(), StatusCode::kInternal) << out.status().ToString();
    EXPECT_NE(out.status().message().find("test.bad-shape"), std::string::npos);
  }
}

TEST(ExecutableTest, BadArgumentsAreInvalidArgument) {
  RegisterTestExterns();
  GraphBuilder b("args");
  NodeId x = b.Parameter(0, F32({2}));
  b.SetOutputs({b.Negate(x)});
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok());
  EXPECT_EQ(exe->Run({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(exe->Run({nullptr}).status().code(), StatusCode::kInvalidArgument);
  auto wrong = exe->Run({FBuf({3}, {1, 2, 3})});
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("f32[3]"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("f32[2]"), std::string::npos);
}

TEST(ExecutableTest, ConcurrentRunsFromTwoThreads) {
  RegisterTestExterns();
  Graph g = MixedGraph();
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  std::vector<std::vector<Literal>> want;
  for (int v = 0; v < 2; ++v) {
    auto w = Evaluate(g, MixedArgs(v));
    ASSERT_TRUE(w.ok());
    want.push_back(std::move(w).value());
  }
  const Executable& shared = *exe;
  int mismatches[2] = {0, 0};
  auto worker = [&](int v) {
    std::vector<BufferRef> args;
    for (Literal& l : MixedArgs(v)) args.push_back(Buffer::FromLiteral(std::move(l)));
    for (int iter = 0; iter < 25; ++iter) {
      auto out = shared.Run(args);
      if (!out.ok()) {
        ++mismatches[v];
        continue;
      }
      for (size_t i = 0; i < out->size(); ++i) {
        if (!(*out)[i]->literal().BitwiseEquals(want[v][i])) ++mismatches[v];
      }
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(mismatches[0], 0);
  EXPECT_EQ(mismatches[1], 0);
}

TEST(ExecutableTest, IntermediateBuffersAreFreed) {
  RegisterTestExterns();
  Graph g = MixedGraph();
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok());
  std::vector<BufferRef> args;
  for (Literal& l : MixedArgs(0)) args.push_back(Buffer::FromLiteral(std::move(l)));
  const BufferStats before = GetBufferStats();
  {
    auto out = exe->Run(args);
    ASSERT_TRUE(out.ok());
    // Only the three outputs are alive after the run.
    EXPECT_EQ(GetBufferStats().live_buffers - before.live_buffers, 3);
    EXPECT_EQ(GetBufferStats().bytes_in_use - before.bytes_in_use, 2 * 4 * 4 + 4 + 2 * 3 * 3 * 4);
  }
  EXPECT_EQ(GetBufferStats().live_buffers, before.live_buffers);
  EXPECT_EQ(GetBufferStats().bytes_in_use, before.bytes_in_use);
}

// ---- donation / alias map ----

Graph AddInPlaceGraph() {
  GraphBuilder b("axpy");
  NodeId x = b.Parameter(0, F32({4}));
  NodeId y = b.Parameter(1, F32({4}));
  b.SetOutputs({b.Add(x, y)});
  b.SetAlias(0, 0);
  return BuildOrDie(b);
}

TEST(ExecutableDonationTest, NotDonatedLeavesInputUntouched) {
  Graph g = AddInPlaceGraph();
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  BufferRef x = FBuf({4}, {1, 2, 3, 4}), y = FBuf({4}, {10, 20, 30, 40});
  auto out = exe->Run({x, y});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_NE((*out)[0].get(), x.get());
  EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{11, 22, 33, 44}));
  EXPECT_EQ(Values(x->literal()), (std::vector<double>{1, 2, 3, 4}));
}

TEST(ExecutableDonationTest, DonatedInputIsOverwrittenInPlace) {
  Graph g = AddInPlaceGraph();
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  EXPECT_EQ(CountSteps(*exe, StepKind::kCopy), 1) << exe->DebugString();
  BufferRef x = FBuf({4}, {1, 2, 3, 4}), y = FBuf({4}, {10, 20, 30, 40});
  const void* x_data = x->data();
  ExecuteOptions opts;
  opts.donated = {true, false};
  auto out = exe->Run({x, y}, opts);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].get(), x.get());
  EXPECT_EQ((*out)[0]->data(), x_data);
  EXPECT_EQ(Values(x->literal()), (std::vector<double>{11, 22, 33, 44}));
  EXPECT_EQ(Values(y->literal()), (std::vector<double>{10, 20, 30, 40}));
}

// kCpu: an extern's tuple element declared aliasing its operand
// (output_to_operand_aliasing) is written in the donated parameter's buffer and
// returned as that memory; undonated, the element has a buffer of its own and the
// argument is untouched. An element aliasing a parameter read after the extern keeps
// its own buffer.
TEST(ExecutableDonationTest, ExternElementAliasingItsOperandIsWrittenInPlace) {
  RegisterTestExterns();
  for (const bool read_after : {false, true}) {
    GraphBuilder b("accumulate");
    NodeId a = b.Parameter(0, F32({4}));
    NodeId g = b.Parameter(1, F32({4}));
    NodeId t =
        b.CustomCall("test.accumulate", {a, g}, Shape::Tuple({F32({4}), F32({4})}), "", {0, 0});
    NodeId sum = b.GetTupleElement(t, 0);
    std::vector<NodeId> outs = {sum, b.GetTupleElement(t, 1)};
    if (read_after) outs.push_back(b.Multiply(a, b.GetTupleElement(t, 1)));
    b.SetOutputs(outs);
    b.SetAlias(0, 0);
    Graph graph = BuildOrDie(b);
    CompileOptions opts;
    opts.backend = Backend::kCpu;
    auto exe = Compile(graph, opts);
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    EXPECT_EQ(CountSteps(*exe, StepKind::kInterpret), 0) << exe->DebugString();
    for (const bool donate : {false, true}) {
      BufferRef ab = FBuf({4}, {1, 2, 3, 4}), gb = FBuf({4}, {10, 20, 30, 40});
      ExecuteOptions eo;
      eo.donated = {donate, false};
      auto out = exe->Run({ab, gb}, eo);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      const bool in_place = donate && !read_after;
      EXPECT_EQ(g_accumulate_in_place, in_place) << donate << read_after;
      EXPECT_EQ((*out)[0]->data() == ab->data(), in_place) << donate << read_after;
      EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{11, 22, 33, 44}));
      EXPECT_EQ(Values((*out)[1]->literal()), (std::vector<double>{10, 20, 30, 40}));
      if (read_after) {
        EXPECT_EQ(Values((*out)[2]->literal()), (std::vector<double>{10, 40, 90, 160}));
      }
      if (!in_place) EXPECT_EQ(Values(ab->literal()), (std::vector<double>{1, 2, 3, 4}));
    }
  }
}

TEST(ExecutableDonationTest, OutputToOperandAliasingMustPairEqualShapes) {
  GraphBuilder b("bad_alias");
  NodeId a = b.Parameter(0, F32({4}));
  NodeId g = b.Parameter(1, F32({2}));
  NodeId t =
      b.CustomCall("test.accumulate", {a, g}, Shape::Tuple({F32({4}), F32({4})}), "", {0, 1});
  b.SetOutputs({b.GetTupleElement(t, 0)});
  auto built = b.Build();
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("output_to_operand_aliasing pair {0,1}"),
            std::string::npos)
      << built.status().ToString();
}

TEST(ExecutableDonationTest, ArgumentPassedTwiceIsNotDonated) {
  Graph g = AddInPlaceGraph();
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok());
  BufferRef x = FBuf({4}, {1, 2, 3, 4});
  ExecuteOptions opts;
  opts.donated = {true, false};
  auto out = exe->Run({x, x}, opts);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_NE((*out)[0].get(), x.get());
  EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{2, 4, 6, 8}));
  EXPECT_EQ(Values(x->literal()), (std::vector<double>{1, 2, 3, 4}));
}

TEST(ExecutableDonationTest, ReturnedDonatedParameterKeepsItsOldValue) {
  GraphBuilder b("ret");
  NodeId x = b.Parameter(0, F32({2}));
  NodeId y = b.Parameter(1, F32({2}));
  b.SetOutputs({b.Multiply(x, y), x});
  b.SetAlias(0, 0);
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  for (bool donate : {false, true}) {
    BufferRef xb = FBuf({2}, {3, 4}), yb = FBuf({2}, {5, 6});
    ExecuteOptions opts;
    opts.donated = {donate, false};
    auto out = exe->Run({xb, yb}, opts);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{15, 24})) << donate;
    EXPECT_EQ(Values((*out)[1]->literal()), (std::vector<double>{3, 4})) << donate;
    EXPECT_EQ((*out)[0].get() == xb.get(), donate);
  }
}

TEST(ExecutableDonationTest, OutputThatIsTheAliasedParameterNeedsNoCopy) {
  GraphBuilder b("same");
  NodeId x = b.Parameter(0, F32({2}));
  b.SetOutputs({x});
  b.SetAlias(0, 0);
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  EXPECT_EQ(exe->steps().size(), 0u) << exe->DebugString();
  BufferRef xb = FBuf({2}, {1, 2});
  auto out = exe->Run({xb}, ExecuteOptions{{true}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].get(), xb.get());
}

TEST(ExecutableDonationTest, FailedRunLeavesDonatedParametersIntact) {
  RegisterTestExterns();
  GraphBuilder b("late-fail");
  NodeId x = b.Parameter(0, F32({2}));
  NodeId n = b.Parameter(1, S32({2}));
  NodeId dnm = b.Parameter(2, S32({2}));
  NodeId x1 = b.Add(x, b.BroadcastInDim(b.ConstantScalar(DType::kF32, 1), {2}, {}));
  NodeId ni = b.CustomCall("test.identity", {n}, S32({2}));
  NodeId q = b.Divide(ni, dnm);
  b.SetOutputs({x1, q});
  b.SetAlias(0, 0);
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  // The copy into parameter 0 runs last, after the extern step and the division.
  ASSERT_EQ(exe->steps().size(), 4u) << exe->DebugString();
  EXPECT_EQ(exe->steps()[3].kind, StepKind::kCopy) << exe->DebugString();

  {  // donated: the division fails before the copy, so parameter 0 keeps its value
    BufferRef xb = FBuf({2}, {1, 2});
    auto out = exe->Run({xb, IBuf({2}, {4, 5}), IBuf({2}, {1, 0})}, ExecuteOptions{{true}});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange);
    const std::string& msg = out.status().message();
    EXPECT_NE(msg.find("divide %" + std::to_string(q) + ":"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("overwritten"), std::string::npos) << msg;
    if (getenv("EMBER_SHOW")) std::cerr << out.status().ToString() << "\n" << exe->DebugString();
    EXPECT_EQ(Values(xb->literal()), (std::vector<double>{1, 2}));  // intact
  }
  {  // not donated: the argument is untouched and the error says nothing of donation
    BufferRef xb = FBuf({2}, {1, 2});
    auto out = exe->Run({xb, IBuf({2}, {4, 5}), IBuf({2}, {1, 0})});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().message().find("overwritten"), std::string::npos);
    EXPECT_EQ(Values(xb->literal()), (std::vector<double>{1, 2}));
  }
  {  // donated, no error: both outputs right
    BufferRef xb = FBuf({2}, {1, 2});
    auto out = exe->Run({xb, IBuf({2}, {9, -9}), IBuf({2}, {2, 4})}, ExecuteOptions{{true}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ((*out)[0].get(), xb.get());
    EXPECT_EQ(Values(xb->literal()), (std::vector<double>{2, 3}));
    EXPECT_EQ(Values((*out)[1]->literal()), (std::vector<double>{4, -2}));
  }
}

TEST(ExecutableDonationTest, DonatedParameterIsWrittenOnlyAfterItsLastRead) {
  RegisterTestExterns();
  // out0 = x + 1 (aliases x) is computed first, but x is read again after an
  // extern step: the in-place write must wait for that read.
  GraphBuilder b("late-read");
  NodeId x = b.Parameter(0, F32({2}));
  NodeId x1 = b.Add(x, b.BroadcastInDim(b.ConstantScalar(DType::kF32, 1), {2}, {}));
  NodeId e = b.CustomCall("test.add-one", {x1}, F32({2}));
  NodeId late = b.Multiply(e, x);
  b.SetOutputs({x1, late});
  b.SetAlias(0, 0);
  Graph g = BuildOrDie(b);
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  BufferRef xb = FBuf({2}, {1, 2});
  auto out = exe->Run({xb}, ExecuteOptions{{true}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values((*out)[0]->literal()), (std::vector<double>{2, 3}));
  EXPECT_EQ(Values((*out)[1]->literal()), (std::vector<double>{3, 8}));  // (x+2)*x
  EXPECT_EQ((*out)[0].get(), xb.get());
}

TEST(ExecutableTest, DebugStringListsSteps) {
  RegisterTestExterns();
  Graph g = MixedGraph();
  auto exe = Compile(g);
  ASSERT_TRUE(exe.ok());
  std::string s = exe->DebugString();
  EXPECT_NE(s.find("extern ember.dot-general"), std::string::npos) << s;
  EXPECT_NE(s.find("extern ember.convolution"), std::string::npos) << s;
  EXPECT_NE(s.find("extern test.add-one"), std::string::npos) << s;
  EXPECT_NE(s.find("interpret"), std::string::npos) << s;
  EXPECT_NE(s.find("4 parameters"), std::string::npos) << s;
  if (getenv("EMBER_SHOW")) std::cerr << s;
}

}  // namespace
}  // namespace ember
