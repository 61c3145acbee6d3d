// Generated CPU kernels vs the reference interpreter for every elementwise
// op (unary, binary, compare, convert, select, clamp), on f32, s32, bf16 and
// pred, including PyTorch's edge cases (NaN, +-inf, +-0, half-even ties,
// INT_MIN, shifts out of range, float->int conversions out of range). Many
// ops share one kernel (one output each) to keep the compile count low.
#include <cmath>
#include <limits>

#include "codegen/cpu/codegen_test_util.h"

namespace ember::codegen {
namespace {

using testing::ExpectMatchesInterpreter;
using testing::FastOptions;
using testing::RandomLiteral;
using testing::TempDir;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<double> kFloatSpecials = {
    kNaN,          -kNaN,  kInf,    -kInf,  0.0,     -0.0,   0.5,   -0.5,         1.5,
    2.5,           -2.5,   3.5,     1e-40,  -1e-40,  3e38,   -3e38, 2147483647.0, 2147483648.0,
    -2147483649.0, 9.3e18, -9.3e18, 1.8e19, 255.5,   -1.0,   1.0,   0.1,          100.0,
    -100.0,        1e-3,   7.0,     -7.0,   65504.0, 70000.0};

const std::vector<double> kIntSpecials = {
    -2147483648.0, 2147483647.0, -1,    0,      1, 2, -2, 31, 32, 33, -31, 7, -7, 3, -3,
    100,           -100,         65536, 1 << 30};

std::vector<OpKind> FloatUnaryOps() {
  return {OpKind::kNegate, OpKind::kAbs,      OpKind::kExp,  OpKind::kLog,
          OpKind::kLog1p,  OpKind::kExpm1,    OpKind::kSqrt, OpKind::kRsqrt,
          OpKind::kTanh,   OpKind::kLogistic, OpKind::kSin,  OpKind::kCos,
          OpKind::kErf,    OpKind::kFloor,    OpKind::kCeil, OpKind::kRoundNearestEven,
          OpKind::kSign};
}

std::vector<DType> ConvertTargets() {
  return {DType::kPred, DType::kS8,  DType::kS16, DType::kS32, DType::kS64,
          DType::kU8,   DType::kU16, DType::kU32, DType::kU64, DType::kF16,
          DType::kBF16, DType::kF32, DType::kF64};
}

// Every float unary op and every convert on one operand of dtype t.
void CheckFloatUnary(DType t, bool fast = true) {
  TempDir dir;
  std::mt19937_64 rng(1);
  Shape s(t, {96});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  std::vector<NodeId> outs;
  for (OpKind op : FloatUnaryOps()) outs.push_back(b.Unary(op, x));
  for (DType to : ConvertTargets()) {
    if (to != t) outs.push_back(b.Convert(x, to));
  }
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  CodegenOptions opts = FastOptions(dir.path());
  opts.fast = fast;
  ExpectMatchesInterpreter(*g, {RandomLiteral(s, rng, kFloatSpecials)}, opts);
}

// Float -> narrow int converts (through int32, as torch) on the values where
// the int32 and int64 routes differ, compiled vs the interpreter.
TEST(CodegenElementwise, NarrowIntConvertsMatchInterpreter) {
  TempDir dir;
  const Shape s(DType::kF32, {8});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  std::vector<NodeId> outs;
  for (DType to : {DType::kS8, DType::kS16, DType::kU8, DType::kU16, DType::kU32})
    outs.push_back(b.Convert(x, to));
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Literal arg = Literal::FromDoubles(s, {3e9, -3e9, 300.7, -1.5, 70000, std::nan(""), 5e18, 4e9});
  ExpectMatchesInterpreter(*g, {arg}, FastOptions(dir.path()));
}

TEST(CodegenElementwise, UnaryAndConvertF32) { CheckFloatUnary(DType::kF32); }
// -O3 -march=native (vectorized, FMA available): still bit-exact, because
// kernels are compiled with -ffp-contract=off and call the same libm.
TEST(CodegenElementwise, UnaryAndConvertF32Optimized) { CheckFloatUnary(DType::kF32, false); }
TEST(CodegenElementwise, UnaryAndConvertBF16) { CheckFloatUnary(DType::kBF16); }

TEST(CodegenElementwise, UnaryAndConvertS32) {
  TempDir dir;
  std::mt19937_64 rng(2);
  Shape s(DType::kS32, {64});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  std::vector<NodeId> outs = {b.Unary(OpKind::kNegate, x), b.Unary(OpKind::kAbs, x),
                              b.Unary(OpKind::kSign, x), b.Unary(OpKind::kNot, x)};
  for (DType to : ConvertTargets()) {
    if (to != DType::kS32) outs.push_back(b.Convert(x, to));
  }
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExpectMatchesInterpreter(*g, {RandomLiteral(s, rng, kIntSpecials)}, FastOptions(dir.path()));
}

// Every binary op (and the six compares) valid on dtype t.
void CheckBinary(DType t, const std::vector<double>& specials_a,
                 const std::vector<double>& specials_b, bool nonzero_divisor) {
  TempDir dir;
  std::mt19937_64 rng(3);
  Shape s(t, {128});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  NodeId y = b.Parameter(1, s);
  std::vector<OpKind> ops = {OpKind::kAdd,     OpKind::kSubtract,  OpKind::kMultiply,
                             OpKind::kDivide,  OpKind::kRemainder, OpKind::kPower,
                             OpKind::kMaximum, OpKind::kMinimum};
  if (IsFloat(t)) {
    ops.push_back(OpKind::kAtan2);
  } else {
    for (OpKind op : {OpKind::kAnd, OpKind::kOr, OpKind::kXor, OpKind::kShiftLeft,
                      OpKind::kShiftRightArithmetic, OpKind::kShiftRightLogical}) {
      ops.push_back(op);
    }
  }
  std::vector<NodeId> outs;
  for (OpKind op : ops) outs.push_back(b.Binary(op, x, y));
  for (int d = 0; d < 6; ++d) outs.push_back(b.Compare(x, y, static_cast<ComparisonKind>(d)));
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  // Pair every special with every other in the first specials^2 elements.
  std::vector<double> a, c;
  for (double u : specials_a) {
    for (double v : specials_b) {
      if (a.size() >= 128) break;
      a.push_back(u);
      c.push_back(v);
    }
  }
  Literal la = RandomLiteral(s, rng, a), lb = RandomLiteral(s, rng, c);
  if (nonzero_divisor) {
    for (int64_t i = 0; i < lb.num_elements(); ++i) {
      if (lb.GetInt(i) == 0) lb.SetInt(i, 3);
    }
  }
  ExpectMatchesInterpreter(*g, {la, lb}, FastOptions(dir.path()));
}

TEST(CodegenElementwise, BinaryF32) {
  CheckBinary(DType::kF32, {kNaN, kInf, -kInf, 0.0, -0.0, 5.5, -5.5, 2.0, -3.0, 1e-40, 0.5},
              {kNaN, kInf, -kInf, 0.0, -0.0, 2.0, -2.0, 0.5, 3.0, -1e-40, 7.25}, false);
}
TEST(CodegenElementwise, BinaryBF16) {
  CheckBinary(DType::kBF16, {kNaN, kInf, -kInf, 0.0, -0.0, 5.5, -5.5, 2.0, -3.0, 1.0 / 3, 0.5},
              {kNaN, kInf, -kInf, 0.0, -0.0, 2.0, -2.0, 0.5, 3.0, 7.0, 1.0 / 7}, false);
}
TEST(CodegenElementwise, BinaryS32) {
  CheckBinary(DType::kS32, {-2147483648.0, 2147483647.0, -7, 7, 1, -1, 0, 5, 100},
              {-1, 1, 2, -2, 3, -3, 31, 32, 33, -5, 64, 2147483647.0}, true);
}

// a*b+c at -O3 -march=native: an FMA would round once and differ from the
// interpreter's two roundings in most elements.
TEST(CodegenElementwise, NoFloatContractionAtO3) {
  TempDir dir;
  std::mt19937_64 rng(6);
  Shape s(DType::kF32, {256});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s), y = b.Parameter(1, s), z = b.Parameter(2, s);
  NodeId xy = b.Multiply(x, y);
  b.SetOutputs({b.Add(xy, z), b.Subtract(z, xy), b.Subtract(xy, z)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Literal> args;
  for (int i = 0; i < 3; ++i) {
    std::vector<double> v;
    for (int j = 0; j < 256; ++j) v.push_back(u(rng));
    args.push_back(Literal::FromDoubles(s, v));
  }
  CodegenOptions opts = FastOptions(dir.path());
  opts.fast = false;
  ExpectMatchesInterpreter(*g, args, opts);
}

// fma rounds once, in kernels as in the interpreter: x = y = 1 + 2^-12 and
// z = -(1 + 2^-11) give 2^-24 (x * y rounded first would give 0), in f32 and f64
// (f64: x = y = 1 + 2^-27, z = -(1 + 2^-26), 2^-54); random operands match too.
TEST(CodegenElementwise, FmaRoundsOnce) {
  {
    GraphBuilder b;  // integers have no fma
    Shape s(DType::kS32, {4});
    b.SetOutputs({b.Fma(b.Parameter(0, s), b.Parameter(1, s), b.Parameter(2, s))});
    auto bad = b.Build();
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("expected f32 or f64"), std::string::npos);
  }
  TempDir dir;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (DType t : {DType::kF32, DType::kF64}) {
    const int bits = t == DType::kF32 ? 12 : 27;
    const double x0 = 1 + std::ldexp(1.0, -bits), z0 = -(1 + std::ldexp(1.0, 1 - bits));
    Shape s(t, {64});
    GraphBuilder b;
    b.SetOutputs({b.Fma(b.Parameter(0, s), b.Parameter(1, s), b.Parameter(2, s))});
    auto g = b.Build();
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    std::vector<std::vector<double>> v(3);
    for (int j = 0; j < 64; ++j) {
      for (int i = 0; i < 3; ++i) v[i].push_back(j == 5 ? (i == 2 ? z0 : x0) : u(rng));
    }
    std::vector<Literal> args;
    for (int i = 0; i < 3; ++i) args.push_back(Literal::FromDoubles(s, v[i]));
    auto want = Evaluate(*g, args);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    EXPECT_EQ((*want)[0].GetDouble(5), std::ldexp(1.0, -2 * bits)) << DTypeName(t);
    // The product rounded first (volatile: no contraction) loses the 2^-2bits.
    double twice = 0;
    if (t == DType::kF32) {
      volatile float p = static_cast<float>(x0) * static_cast<float>(x0);
      twice = p + static_cast<float>(z0);
    } else {
      volatile double p = x0 * x0;
      twice = p + z0;
    }
    EXPECT_EQ(twice, 0.0) << DTypeName(t);
    CodegenOptions opts = FastOptions(dir.path());
    opts.fast = false;
    ExpectMatchesInterpreter(*g, args, opts);
  }
}

TEST(CodegenElementwise, IntegerDivisionByZeroIsOutOfRange) {
  TempDir dir;
  Shape s(DType::kS32, {40});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  NodeId y = b.Parameter(1, s);
  NodeId q = b.Divide(x, y);
  NodeId r = b.Binary(OpKind::kRemainder, x, y);
  b.SetOutputs({b.Add(q, r)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto k = CompileKernel(*g, FastOptions(dir.path()));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  std::vector<int64_t> xv(40, 9), yv(40, 2);
  yv[37] = 0;
  Literal lx = Literal::FromInts(s, xv), ly = Literal::FromInts(s, yv);
  auto got = testing::RunKernel(**k, {lx, ly});
  auto want = Evaluate(*g, {lx, ly});
  ASSERT_FALSE(got.ok());
  ASSERT_FALSE(want.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(got.status().message(), want.status().message());
  // No zero divisor: fine, and equal to the interpreter.
  yv[37] = -1;
  testing::ExpectMatchesInterpreter(*g, {lx, Literal::FromInts(s, yv)}, FastOptions(dir.path()));
}

TEST(CodegenElementwise, PredLogicSelectClamp) {
  TempDir dir;
  std::mt19937_64 rng(4);
  Shape ps(DType::kPred, {50}), fs(DType::kF32, {50}), is(DType::kS32, {50});
  GraphBuilder b;
  NodeId p = b.Parameter(0, ps);
  NodeId q = b.Parameter(1, ps);
  NodeId x = b.Parameter(2, fs);
  NodeId y = b.Parameter(3, fs);
  NodeId i = b.Parameter(4, is);
  NodeId sp = b.Parameter(5, Shape(DType::kPred, {}));
  NodeId lo = b.ConstantScalar(DType::kF32, -1.5);
  NodeId hi = b.ConstantScalar(DType::kF32, 2.0);
  NodeId ilo = b.ConstantScalar(DType::kS32, -3);
  std::vector<NodeId> outs = {b.Binary(OpKind::kAnd, p, q),
                              b.Binary(OpKind::kOr, p, q),
                              b.Binary(OpKind::kXor, p, q),
                              b.Unary(OpKind::kNot, p),
                              b.Compare(p, q, ComparisonKind::kLt),
                              b.Convert(p, DType::kF32),
                              b.Convert(p, DType::kS32),
                              b.Convert(p, DType::kBF16),
                              b.Select(p, x, y),
                              b.Select(sp, x, y),
                              b.Select(p, i, b.Negate(i)),
                              b.Clamp(lo, x, hi),
                              b.Clamp(y, x, hi),
                              b.Clamp(ilo, i, b.Parameter(6, is)),
                              b.Select(b.Compare(x, y, ComparisonKind::kNe), x, y)};
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExpectMatchesInterpreter(
      *g,
      {RandomLiteral(ps, rng), RandomLiteral(ps, rng),
       RandomLiteral(fs, rng, {kNaN, 0.0, -0.0, 5, -5, 1.5, -1.5, kInf}),
       RandomLiteral(fs, rng, {1.0, kNaN, 0.0, -4, 3, -2, 1, -kInf}),
       RandomLiteral(is, rng, kIntSpecials), Literal::ScalarInt(DType::kPred, 1),
       RandomLiteral(is, rng, {5, -5, 0, 2147483647.0})},
      FastOptions(dir.path()));
}

// A long fused chain with data movement and broadcasts: no intermediate
// buffers, identical results serially and with threads.
TEST(CodegenElementwise, FusedChainNeedsNoBuffersAndRunsInParallel) {
  TempDir dir;
  std::mt19937_64 rng(5);
  Shape xs(DType::kF32, {64, 48}), ys(DType::kF32, {48});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId y = b.Parameter(1, ys);
  NodeId yb = b.BroadcastInDim(y, {64, 48}, {1});
  NodeId m = b.Multiply(x, yb);
  NodeId a = b.Add(m, b.BroadcastInDim(b.ConstantScalar(DType::kF32, 0.25), {64, 48}, {}));
  NodeId e = b.Exp(b.Maximum(a, b.Negate(a)));
  NodeId t = b.Transpose(e, {1, 0});
  b.SetOutputs({t, b.Reshape(e, {48, 64})});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<Literal> args = {RandomLiteral(xs, rng), RandomLiteral(ys, rng)};
  auto k = ExpectMatchesInterpreter(*g, args, FastOptions(dir.path()));
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->source().find("malloc"), std::string::npos) << "no temporaries expected";
  EXPECT_EQ(k->name(), "ember_fused_bcast_mul_add_neg_max_exp_etc_0");
  ExpectMatchesInterpreter(*g, args, FastOptions(dir.path()), ThreadParallelFor(4));
}

// Outputs of one shape share one loop (OutputLoops): an optimizer update's new moment
// m = m*b + g and the parameter w - m*lr read from it are stored by one iteration, m
// computed once, and so is a reshape of m*m to [4,16,48] (the same rows); a transpose
// to [48,64], and a sine and a cosine of one value, get loops of their own. Bit for bit against the
// interpreter, in rows (the [64,48] transpose) and flat, serially and on threads.
TEST(CodegenElementwise, OutputsOfOneShapeShareOneLoop) {
  TempDir dir;
  std::mt19937_64 rng(9);
  Shape s(DType::kF32, {64, 48});
  GraphBuilder b;
  NodeId w = b.Parameter(0, s);
  NodeId m = b.Parameter(1, s);
  NodeId gr = b.Parameter(2, s);
  auto splat = [&](double v) {
    return b.BroadcastInDim(b.ConstantScalar(DType::kF32, v), {64, 48}, {});
  };
  NodeId m_new = b.Add(b.Multiply(m, splat(0.9)), gr);
  NodeId w_new = b.Subtract(w, b.Multiply(m_new, splat(0.01)));
  NodeId t = b.Transpose(b.Exp(m_new), {1, 0});  // [48,64]: a loop of its own
  NodeId sn = b.Unary(OpKind::kSin, w);
  NodeId cs = b.Unary(OpKind::kCos, w);
  NodeId r = b.Reshape(b.Multiply(m_new, m_new), {4, 16, 48});  // same rows: loop 0
  // A transposed read makes loop 0 a loop over rows (the reshape: by its linear index).
  const Shape xt(DType::kF32, {48, 64});
  NodeId u = b.Add(m_new, b.Transpose(b.Parameter(3, xt), {1, 0}));
  b.SetOutputs({m_new, t, w_new, sn, cs, r, u});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(OutputLoops(*g), (std::vector<int>{0, 1, 0, 0, 2, 0, 0}));
  std::vector<Literal> args = {RandomLiteral(s, rng), RandomLiteral(s, rng), RandomLiteral(s, rng),
                               RandomLiteral(xt, rng)};
  auto k = ExpectMatchesInterpreter(*g, args, FastOptions(dir.path()));
  ASSERT_NE(k, nullptr);
  const std::string& src = k->source();
  EXPECT_NE(src.find("c->out[0]+c->out[2]+c->out[3]+c->out[5]+c->out[6] ("), std::string::npos)
      << src;
  EXPECT_NE(src.find("for (int64_t row ="), std::string::npos) << src;
  EXPECT_NE(src.find("-> c->out[1] ("), std::string::npos) << src;
  EXPECT_NE(src.find("-> c->out[4] ("), std::string::npos) << src;
  ExpectMatchesInterpreter(*g, args, FastOptions(dir.path()), ThreadParallelFor(3));
}

TEST(CodegenElementwise, TooDeepKernelIsUnimplementedNotACrash) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {4}));
  for (int i = 0; i < 10005; ++i) x = b.Negate(x);
  b.SetOutputs({x});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto src = EmitKernelSource(*g);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(src.status().message().find("split the kernel"), std::string::npos);
}

// 3000 levels: emitted on the big-stack thread, compiled, and still exact.
TEST(CodegenElementwise, DeepChainIsEmittedOnABigStack) {
  TempDir dir;
  std::mt19937_64 rng(8);
  Shape s(DType::kF32, {3, 5});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  NodeId y = x;
  for (int i = 0; i < 1000; ++i) {
    y = b.Transpose(b.Negate(b.Transpose(y, {1, 0})), {1, 0});
  }
  b.SetOutputs({b.Add(y, x)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  ExpectMatchesInterpreter(*g, {RandomLiteral(s, rng)}, FastOptions(dir.path()));
}

TEST(CodegenElementwise, UnsupportedOpIsUnimplemented) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {4, 4}));
  DotDims d;
  d.lhs_contracting = {1};
  d.rhs_contracting = {0};
  b.SetOutputs({b.DotGeneral(x, x, d)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto k = CompileKernel(*g, CodegenOptions());
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(k.status().message().find("dot-general"), std::string::npos);

  GraphBuilder c;
  NodeId z = c.Parameter(0, Shape(DType::kC64, {4}));
  c.SetOutputs({c.Reverse(z, {0})});
  auto gc = c.Build();
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(CompileKernel(*gc, CodegenOptions()).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace ember::codegen
