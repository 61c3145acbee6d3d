// Reference-interpreter tests for the elementwise ops, iota and constant:
// every unary and binary op on the dtypes it accepts, checked against
// hand-computed values, including PyTorch's edge cases (floor-mod signs,
// half-to-even ties, NaN-propagating max/min, shifts out of range, NaN->int,
// INT_MIN / -1, integer division by zero, bf16/f16 rounding ties, integer
// power with negative exponents, wrapping arithmetic at INT_MIN).
// Expected values for ambiguous cases were checked against torch 2.13 CPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"
#include "eval/ops.h"

namespace ember {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kS32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kS32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kS64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kS64Max = std::numeric_limits<int64_t>::max();

Shape Vec(DType t, size_t n) { return Shape(t, {static_cast<int64_t>(n)}); }
Literal F(DType t, const std::vector<double>& v) {
  return Literal::FromDoubles(Vec(t, v.size()), v);
}
Literal I(DType t, const std::vector<int64_t>& v) { return Literal::FromInts(Vec(t, v.size()), v); }

// Builds one node over parameters shaped like `args` with `add` and evaluates
// it with eval::EvalElementwise (or EvalLeaf for leaves).
template <typename AddFn>
StatusOr<Literal> EvalOne(const std::vector<const Literal*>& args, AddFn add) {
  GraphBuilder b;
  std::vector<NodeId> params;
  for (size_t i = 0; i < args.size(); ++i) {
    params.push_back(b.Parameter(static_cast<int64_t>(i), args[i]->shape()));
  }
  NodeId r = add(b, params);
  b.SetOutputs({r});
  EMBER_ASSIGN_OR_RETURN(Graph g, b.Build());
  const Node& n = g.node(r);
  if (IsElementwise(n.op)) return eval::EvalElementwise(n, args);
  return eval::EvalLeaf(n, args);
}

StatusOr<Literal> Unary(OpKind op, const Literal& x) {
  return EvalOne({&x},
                 [&](GraphBuilder& b, const std::vector<NodeId>& p) { return b.Unary(op, p[0]); });
}
StatusOr<Literal> Binary(OpKind op, const Literal& x, const Literal& y) {
  return EvalOne({&x, &y}, [&](GraphBuilder& b, const std::vector<NodeId>& p) {
    return b.Binary(op, p[0], p[1]);
  });
}
StatusOr<Literal> Cmp(ComparisonKind dir, const Literal& x, const Literal& y) {
  return EvalOne({&x, &y}, [&](GraphBuilder& b, const std::vector<NodeId>& p) {
    return b.Compare(p[0], p[1], dir);
  });
}
StatusOr<Literal> Cvt(const Literal& x, DType to) {
  return EvalOne(
      {&x}, [&](GraphBuilder& b, const std::vector<NodeId>& p) { return b.Convert(p[0], to); });
}

// Exact comparison, NaN equal to NaN; signed zeros must match too.
void ExpectValues(const StatusOr<Literal>& got, DType t, const std::vector<double>& want) {
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->dtype(), t);
  ASSERT_EQ(got->num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got->GetDouble(static_cast<int64_t>(i));
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i << ": got " << g << ", want nan";
    } else {
      EXPECT_EQ(g, want[i]) << "element " << i;
      EXPECT_EQ(std::signbit(g), std::signbit(want[i]))
          << "sign of element " << i << " (" << g << ")";
    }
  }
}
void ExpectInts(const StatusOr<Literal>& got, DType t, const std::vector<int64_t>& want) {
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->dtype(), t);
  ASSERT_EQ(got->num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got->GetInt(static_cast<int64_t>(i)), want[i]) << "element " << i;
  }
}
void ExpectNear(const StatusOr<Literal>& got, const std::vector<double>& want, double rel) {
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got->GetDouble(static_cast<int64_t>(i));
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i;
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(g, want[i]) << "element " << i;
    } else {
      EXPECT_NEAR(g, want[i], rel * std::max(1.0, std::fabs(want[i]))) << "element " << i;
    }
  }
}

const DType kFloats[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
// Relative tolerance that each float type's rounding allows.
double Tol(DType t) {
  switch (t) {
    case DType::kF64:
      return 1e-14;
    case DType::kF32:
      return 1e-6;
    case DType::kF16:
      return 1e-3;
    default:
      return 8e-3;  // bf16
  }
}

// ---- unary, floats ----------------------------------------------------------

TEST(ElementwiseUnary, TranscendentalOnEveryFloatType) {
  struct Case {
    OpKind op;
    std::vector<double> in, want;
  };
  const double e = std::exp(1.0);
  const std::vector<Case> cases = {
      {OpKind::kExp, {0, 1, -1, -kInf, kNaN}, {1, e, 1 / e, 0, kNaN}},
      {OpKind::kLog, {1, 0.5, 0, -1, kInf}, {0, -0.69314718055994531, -kInf, kNaN, kInf}},
      {OpKind::kLog1p, {0, 1, -1, -2}, {0, 0.69314718055994531, -kInf, kNaN}},
      {OpKind::kExpm1, {0, 1, -kInf}, {0, e - 1, -1}},
      {OpKind::kSqrt, {4, 2, 0, -1, kInf}, {2, 1.4142135623730951, 0, kNaN, kInf}},
      {OpKind::kRsqrt, {4, 0.25, 0, -1, kInf}, {0.5, 2, kInf, kNaN, 0}},
      {OpKind::kTanh, {0, 1, -1, 50, -kInf}, {0, 0.76159415595576489, -0.76159415595576489, 1, -1}},
      {OpKind::kLogistic,
       {0, 2, -2, 200, -200, kNaN},
       {0.5, 0.88079707797788244, 0.11920292202211755, 1, 0, kNaN}},
      {OpKind::kSin, {0, 0.5, -1.5}, {0, 0.47942553860420301, -0.99749498660405445}},
      {OpKind::kCos, {0, 0.5, -1.5}, {1, 0.87758256189037276, 0.070737201667702906}},
      {OpKind::kErf, {0, 0.5, -1, 6}, {0, 0.52049987781304654, -0.84270079294971487, 1}},
  };
  for (DType t : kFloats) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(OpName(c.op)) + " on " + std::string(DTypeName(t)));
      // Compare against the expected value as rounded to t.
      std::vector<double> want;
      Literal rounded = F(t, c.want);
      for (int64_t i = 0; i < rounded.num_elements(); ++i) want.push_back(rounded.GetDouble(i));
      ExpectNear(Unary(c.op, F(t, c.in)), want, Tol(t));
    }
  }
}

TEST(ElementwiseUnary, F32ComputesInSinglePrecision) {
  // Bit-identical to the float overloads (expf, not exp rounded to float).
  // -0x1.3eaf4cp+4: logistic in f32 differs from the f64 result rounded to f32.
  const std::vector<double> in = {0.1, 1.1, -3.7, 10.5, -0x1.3eaf4cp+4};
  struct Case {
    OpKind op;
    float (*fn)(float);
  };
  const Case cases[] = {
      {OpKind::kExp, [](float v) { return std::exp(v); }},
      {OpKind::kSin, [](float v) { return std::sin(v); }},
      {OpKind::kTanh, [](float v) { return std::tanh(v); }},
      {OpKind::kErf, [](float v) { return std::erf(v); }},
      {OpKind::kRsqrt, [](float v) { return 1.0f / std::sqrt(v); }},
      {OpKind::kLogistic, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
  };
  for (const Case& c : cases) {
    auto got = Unary(c.op, F(DType::kF32, in));
    ASSERT_TRUE(got.ok());
    for (size_t i = 0; i < in.size(); ++i) {
      float want = c.fn(static_cast<float>(in[i]));
      float g = got->data_as<float>()[i];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(g));
      } else {
        EXPECT_EQ(g, want) << OpName(c.op) << "(" << in[i] << ")";
      }
    }
  }
}

TEST(ElementwiseUnary, RoundingOps) {
  const std::vector<double> in = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.7, -2.7, kNaN, -kInf};
  for (DType t : kFloats) {
    SCOPED_TRACE(DTypeName(t));
    // Half to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0.
    ExpectValues(Unary(OpKind::kRoundNearestEven, F(t, in)), t,
                 {0, 2, 2, -0.0, -2, -2, 3, -3, kNaN, -kInf});
    ExpectValues(Unary(OpKind::kFloor, F(t, in)), t, {0, 1, 2, -1, -2, -3, 2, -3, kNaN, -kInf});
    ExpectValues(Unary(OpKind::kCeil, F(t, in)), t, {1, 2, 3, -0.0, -1, -2, 3, -2, kNaN, -kInf});
  }
  // Large f64 values are already integral.
  ExpectValues(
      Unary(OpKind::kRoundNearestEven, F(DType::kF64, {4503599627370497.0, 0.49999999999999994})),
      DType::kF64, {4503599627370497.0, 0});
}

TEST(ElementwiseUnary, NegateAbsSignFloats) {
  for (DType t : kFloats) {
    SCOPED_TRACE(DTypeName(t));
    ExpectValues(Unary(OpKind::kNegate, F(t, {1.5, -2, 0, -0.0, kInf, kNaN})), t,
                 {-1.5, 2, -0.0, 0, -kInf, kNaN});
    ExpectValues(Unary(OpKind::kAbs, F(t, {1.5, -2, -0.0, -kInf, kNaN})), t,
                 {1.5, 2, 0, kInf, kNaN});
    // torch: sign(NaN) = 0, sign(-0.) = +0.
    ExpectValues(Unary(OpKind::kSign, F(t, {3, -0.25, 0, -0.0, kNaN, -kInf, kInf})), t,
                 {1, -1, 0, 0, 0, -1, 1});
  }
}

// ---- unary, integers and pred ---------------------------------------------------

TEST(ElementwiseUnary, IntegerNegateAbsWrap) {
  ExpectInts(Unary(OpKind::kNegate, I(DType::kS32, {5, -7, 0, kS32Min, kS32Max})), DType::kS32,
             {-5, 7, 0, kS32Min, -kS32Max});
  ExpectInts(Unary(OpKind::kAbs, I(DType::kS32, {5, -7, 0, kS32Min})), DType::kS32,
             {5, 7, 0, kS32Min});
  ExpectInts(Unary(OpKind::kNegate, I(DType::kS64, {kS64Min, 3})), DType::kS64, {kS64Min, -3});
  ExpectInts(Unary(OpKind::kAbs, I(DType::kS64, {kS64Min, -3})), DType::kS64, {kS64Min, 3});
  ExpectInts(Unary(OpKind::kAbs, I(DType::kS8, {-128, -127})), DType::kS8, {-128, 127});
  // Unsigned: negate wraps modulo 2^n, abs is the identity.
  ExpectInts(Unary(OpKind::kNegate, I(DType::kU8, {1, 0, 255})), DType::kU8, {255, 0, 1});
  ExpectInts(Unary(OpKind::kAbs, I(DType::kU8, {255, 0})), DType::kU8, {255, 0});
}

TEST(ElementwiseUnary, IntegerSignAndNot) {
  ExpectInts(Unary(OpKind::kSign, I(DType::kS32, {-3, 0, 4, kS32Min})), DType::kS32,
             {-1, 0, 1, -1});
  ExpectInts(Unary(OpKind::kSign, I(DType::kS64, {kS64Min, kS64Max})), DType::kS64, {-1, 1});
  ExpectInts(Unary(OpKind::kSign, I(DType::kU8, {0, 200})), DType::kU8, {0, 1});
  ExpectInts(Unary(OpKind::kNot, I(DType::kS32, {0, -1, 5})), DType::kS32, {-1, 0, -6});
  ExpectInts(Unary(OpKind::kNot, I(DType::kU8, {0, 0xF0})), DType::kU8, {255, 0x0F});
  ExpectInts(Unary(OpKind::kNot, I(DType::kS64, {0})), DType::kS64, {-1});
  // pred: logical not.
  auto got = Unary(OpKind::kNot, I(DType::kPred, {0, 1}));
  ExpectInts(got, DType::kPred, {1, 0});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->data_as<uint8_t>()[0], 1);  // stored as one byte 0/1
}

TEST(ElementwiseUnary, BuilderRejectsWrongDTypes) {
  EXPECT_FALSE(Unary(OpKind::kExp, I(DType::kS32, {1})).ok());
  EXPECT_FALSE(Unary(OpKind::kNot, F(DType::kF32, {1})).ok());
  EXPECT_FALSE(Unary(OpKind::kNegate, I(DType::kPred, {1})).ok());
}

// ---- binary arithmetic ------------------------------------------------------------

TEST(ElementwiseBinary, FloatArithmetic) {
  for (DType t : kFloats) {
    SCOPED_TRACE(DTypeName(t));
    Literal a = F(t, {1.5, -2, 0.25, 1, -1, 0, kInf, kNaN});
    Literal b = F(t, {2, 0.5, -4, 0, 0, 0, kInf, 1});
    ExpectValues(Binary(OpKind::kAdd, a, b), t, {3.5, -1.5, -3.75, 1, -1, 0, kInf, kNaN});
    ExpectValues(Binary(OpKind::kSubtract, a, b), t, {-0.5, -2.5, 4.25, 1, -1, 0, kNaN, kNaN});
    ExpectValues(Binary(OpKind::kMultiply, a, b), t, {3, -1, -1, 0, -0.0, 0, kInf, kNaN});
    // Float division by zero is IEEE (no error).
    ExpectValues(Binary(OpKind::kDivide, a, b), t,
                 {0.75, -4, -0.0625, kInf, -kInf, kNaN, kNaN, kNaN});
  }
}

TEST(ElementwiseBinary, FloatRemainderIsFloorMod) {
  for (DType t : kFloats) {
    SCOPED_TRACE(DTypeName(t));
    // Sign of the divisor, as torch.remainder / Python %.
    Literal a = F(t, {5, -5, 5, -5, 0, -0.0, 5.5, 5, -5, 1, kInf});
    Literal b = F(t, {3, 3, -3, -3, -3, 3, 2, kInf, kInf, 0, 2});
    ExpectValues(Binary(OpKind::kRemainder, a, b), t,
                 {2, 1, -1, -2, 0, -0.0, 1.5, 5, kInf, kNaN, kNaN});
  }
}

TEST(ElementwiseBinary, FloatPowerAndAtan2) {
  for (DType t : kFloats) {
    SCOPED_TRACE(DTypeName(t));
    ExpectNear(Binary(OpKind::kPower, F(t, {2, 4, 2, -8, 0, kNaN, 1, -2}),
                      F(t, {10, 0.5, -1, 1.0 / 3, -1, 0, kNaN, 3})),
               {1024, 2, 0.5, kNaN, kInf, 1, 1, -8}, Tol(t));
    const double pi = 3.14159265358979323846;
    ExpectNear(Binary(OpKind::kAtan2, F(t, {0, -0.0, 1, 1, -1}), F(t, {-1, -1, 0, 1, -1})),
               {pi, -pi, pi / 2, pi / 4, -3 * pi / 4}, Tol(t) * 2);
  }
}

TEST(ElementwiseBinary, FloatMaxMinPropagateNaN) {
  for (DType t : kFloats) {
    SCOPED_TRACE(DTypeName(t));
    Literal a = F(t, {kNaN, 1, kNaN, 3, -kInf, -0.0, 0});
    Literal b = F(t, {1, kNaN, kNaN, -3, 2, 0, -0.0});
    // Ties return the first operand: maximum(-0., 0.) = -0. (torch's scalar path;
    // its vectorized path returns the second, so +-0 ties are our choice).
    ExpectValues(Binary(OpKind::kMaximum, a, b), t, {kNaN, kNaN, kNaN, 3, 2, -0.0, 0});
    ExpectValues(Binary(OpKind::kMinimum, a, b), t, {kNaN, kNaN, kNaN, -3, -kInf, -0.0, 0});
  }
}

TEST(ElementwiseBinary, SixteenBitRoundingTiesToEven) {
  // bf16 has 8 significant bits: spacing 2^-7 at 1.
  ExpectValues(Binary(OpKind::kAdd, F(DType::kBF16, {1, 1 + 0x1p-7, 1, 256}),
                      F(DType::kBF16, {0x1p-8, 0x1p-8, 0x1p-9, 1})),
               DType::kBF16, {1, 1 + 0x1p-6, 1, 256});
  ExpectValues(Binary(OpKind::kSubtract, F(DType::kBF16, {257 + 1}), F(DType::kBF16, {1})),
               DType::kBF16, {256});
  // f16 has 11: spacing 2^-10 at 1; overflow at 65520 rounds to inf.
  ExpectValues(Binary(OpKind::kAdd, F(DType::kF16, {1, 1 + 0x1p-10, 65504, 65504}),
                      F(DType::kF16, {0x1p-11, 0x1p-11, 8, 16})),
               DType::kF16, {1, 1 + 0x1p-9, 65504, kInf});
  // 3 * (1 + 2^-7) = 3.0234375 is a tie between 3.015625 and 3.03125 -> even 3.03125.
  ExpectValues(Binary(OpKind::kMultiply, F(DType::kBF16, {3}), F(DType::kBF16, {1 + 0x1p-7})),
               DType::kBF16, {3.03125});
}

TEST(ElementwiseBinary, IntegerArithmeticWraps) {
  Literal a = I(DType::kS32, {kS32Max, kS32Min, kS32Min, 7, 65536});
  Literal b = I(DType::kS32, {1, 1, -1, -3, 65536});
  ExpectInts(Binary(OpKind::kAdd, a, b), DType::kS32, {kS32Min, kS32Min + 1, kS32Max, 4, 131072});
  ExpectInts(Binary(OpKind::kSubtract, a, b), DType::kS32,
             {kS32Max - 1, kS32Max, kS32Min + 1, 10, 0});
  ExpectInts(Binary(OpKind::kMultiply, a, b), DType::kS32, {kS32Max, kS32Min, kS32Min, -21, 0});
  ExpectInts(Binary(OpKind::kAdd, I(DType::kS64, {kS64Max}), I(DType::kS64, {1})), DType::kS64,
             {kS64Min});
  ExpectInts(Binary(OpKind::kMultiply, I(DType::kS64, {kS64Min, 3037000500}),
                    I(DType::kS64, {-1, 3037000500})),
             DType::kS64, {kS64Min, static_cast<int64_t>(3037000500ULL * 3037000500ULL)});
  ExpectInts(Binary(OpKind::kAdd, I(DType::kU8, {250, 0}), I(DType::kU8, {10, 0})), DType::kU8,
             {4, 0});
  ExpectInts(Binary(OpKind::kSubtract, I(DType::kU8, {3}), I(DType::kU8, {5})), DType::kU8, {254});
  ExpectInts(Binary(OpKind::kMultiply, I(DType::kU8, {16, 255}), I(DType::kU8, {16, 255})),
             DType::kU8, {0, 1});
  ExpectInts(Binary(OpKind::kMultiply, I(DType::kU16, {65535}), I(DType::kU16, {65535})),
             DType::kU16, {1});
  ExpectInts(Binary(OpKind::kMultiply, I(DType::kS8, {-128, 100}), I(DType::kS8, {-1, 3})),
             DType::kS8, {-128, 44});
}

// The value v wrapped to integer type t, as GetInt reads it back.
int64_t WrapTo(DType t, int64_t v) { return I(t, {v}).GetInt(0); }

TEST(ElementwiseBinary, SmallValuesOnEveryIntegerType) {
  const DType kInts[] = {DType::kS8, DType::kS16, DType::kS32, DType::kS64,
                         DType::kU8, DType::kU16, DType::kU32, DType::kU64};
  for (DType t : kInts) {
    SCOPED_TRACE(DTypeName(t));
    Literal a = I(t, {7, 12, 10, 0});
    Literal b = I(t, {3, 5, 9, 1});
    ExpectInts(Binary(OpKind::kAdd, a, b), t, {10, 17, 19, 1});
    ExpectInts(Binary(OpKind::kSubtract, a, b), t, {4, 7, 1, WrapTo(t, -1)});
    ExpectInts(Binary(OpKind::kMultiply, a, b), t, {21, 60, 90, 0});
    ExpectInts(Binary(OpKind::kDivide, a, b), t, {2, 2, 1, 0});
    ExpectInts(Binary(OpKind::kRemainder, a, b), t, {1, 2, 1, 0});
    ExpectInts(Binary(OpKind::kPower, a, b), t,
               {WrapTo(t, 343), WrapTo(t, 248832), WrapTo(t, 1000000000), 0});
    ExpectInts(Binary(OpKind::kMaximum, a, b), t, {7, 12, 10, 1});
    ExpectInts(Binary(OpKind::kMinimum, a, b), t, {3, 5, 9, 0});
    ExpectInts(Binary(OpKind::kAnd, a, b), t, {3, 4, 8, 0});
    ExpectInts(Binary(OpKind::kOr, a, b), t, {7, 13, 11, 1});
    ExpectInts(Binary(OpKind::kXor, a, b), t, {4, 9, 3, 1});
    // 10 << 9 is 0 for 8-bit types (shift >= width) and 5120 mod 2^n otherwise.
    ExpectInts(Binary(OpKind::kShiftLeft, a, b), t, {56, WrapTo(t, 384), WrapTo(t, 5120), 0});
    ExpectInts(Binary(OpKind::kShiftRightLogical, a, b), t, {0, 0, 0, 0});
    ExpectInts(Binary(OpKind::kShiftRightArithmetic, I(t, {64, 100, 1}), I(t, {3, 2, 0})), t,
               {8, 25, 1});
    ExpectInts(Cmp(ComparisonKind::kLt, a, b), DType::kPred, {0, 0, 0, 1});
    ExpectInts(Unary(OpKind::kNot, I(t, {0, 5})), t, {WrapTo(t, -1), WrapTo(t, -6)});
  }
}

TEST(ElementwiseBinary, IntegerDivideTruncatesAndRemainderIsFloorMod) {
  Literal a = I(DType::kS32, {7, -7, 7, -7, kS32Min, 6, -6, 0});
  Literal b = I(DType::kS32, {2, 2, -2, -2, -1, -3, 3, 5});
  ExpectInts(Binary(OpKind::kDivide, a, b), DType::kS32, {3, -3, -3, 3, kS32Min, -2, -2, 0});
  ExpectInts(Binary(OpKind::kRemainder, a, b), DType::kS32, {1, 1, -1, -1, 0, 0, 0, 0});
  ExpectInts(Binary(OpKind::kDivide, I(DType::kS64, {kS64Min, -9}), I(DType::kS64, {-1, 4})),
             DType::kS64, {kS64Min, -2});
  ExpectInts(
      Binary(OpKind::kRemainder, I(DType::kS64, {kS64Min, -9, 9}), I(DType::kS64, {-1, 4, -4})),
      DType::kS64, {0, 3, -3});
  ExpectInts(Binary(OpKind::kDivide, I(DType::kS8, {-128}), I(DType::kS8, {-1})), DType::kS8,
             {-128});
  ExpectInts(Binary(OpKind::kDivide, I(DType::kU8, {255, 7}), I(DType::kU8, {2, 7})), DType::kU8,
             {127, 1});
  ExpectInts(Binary(OpKind::kRemainder, I(DType::kU8, {255, 7}), I(DType::kU8, {2, 7})), DType::kU8,
             {1, 0});
}

TEST(ElementwiseBinary, IntegerDivisionByZeroIsOutOfRange) {
  for (OpKind op : {OpKind::kDivide, OpKind::kRemainder}) {
    for (DType t : {DType::kS32, DType::kS64, DType::kU8, DType::kS8, DType::kU64}) {
      auto got = Binary(op, I(t, {1, 2, 3}), I(t, {1, 0, 1}));
      ASSERT_FALSE(got.ok()) << OpName(op) << " " << DTypeName(t);
      EXPECT_EQ(got.status().code(), StatusCode::kOutOfRange);
      // Names the op and its node id (%2: parameters are %0 and %1).
      EXPECT_EQ(got.status().message(), std::string(OpName(op)) + " %2: integer division by zero");
    }
  }
}

TEST(ElementwiseBinary, IntegerPower) {
  // Negative exponents: base 1 -> 1, base -1 -> +-1 by parity, else 0.
  ExpectInts(Binary(OpKind::kPower, I(DType::kS32, {2, 1, -1, -1, 0, 2, 0, 3, -2, 5}),
                    I(DType::kS32, {-1, -3, -3, -2, -1, 10, 0, 4, 3, -7})),
             DType::kS32, {0, 1, -1, 1, 0, 1024, 1, 81, -8, 0});
  ExpectInts(Binary(OpKind::kPower, I(DType::kS64, {2, 3, -1}), I(DType::kS64, {63, 40, kS64Min})),
             DType::kS64, {kS64Min, static_cast<int64_t>(12157665459056928801ULL), 1});
  // Wraps: 2^31 in s32 is INT_MIN, 2^32 is 0; u8 3^5 = 243, 3^6 = 729 mod 256 = 217.
  ExpectInts(Binary(OpKind::kPower, I(DType::kS32, {2, 2}), I(DType::kS32, {31, 32})), DType::kS32,
             {kS32Min, 0});
  ExpectInts(Binary(OpKind::kPower, I(DType::kU8, {3, 3, 0}), I(DType::kU8, {5, 6, 0})), DType::kU8,
             {243, 217, 1});
}

TEST(ElementwiseBinary, IntegerMaxMin) {
  Literal a = I(DType::kS32, {kS32Min, 5, -1});
  Literal b = I(DType::kS32, {kS32Max, 5, -2});
  ExpectInts(Binary(OpKind::kMaximum, a, b), DType::kS32, {kS32Max, 5, -1});
  ExpectInts(Binary(OpKind::kMinimum, a, b), DType::kS32, {kS32Min, 5, -2});
  ExpectInts(Binary(OpKind::kMaximum, I(DType::kU8, {200, 3}), I(DType::kU8, {100, 4})), DType::kU8,
             {200, 4});
  ExpectInts(Binary(OpKind::kMinimum, I(DType::kS64, {kS64Min}), I(DType::kS64, {0})), DType::kS64,
             {kS64Min});
}

TEST(ElementwiseBinary, BitwiseAndLogical) {
  ExpectInts(Binary(OpKind::kAnd, I(DType::kS32, {12, -1}), I(DType::kS32, {10, 7})), DType::kS32,
             {8, 7});
  ExpectInts(Binary(OpKind::kOr, I(DType::kS32, {12, kS32Min}), I(DType::kS32, {10, 1})),
             DType::kS32, {14, kS32Min + 1});
  ExpectInts(Binary(OpKind::kXor, I(DType::kS32, {12, -1}), I(DType::kS32, {10, 1})), DType::kS32,
             {6, -2});
  ExpectInts(Binary(OpKind::kXor, I(DType::kU8, {0xFF}), I(DType::kU8, {0x0F})), DType::kU8,
             {0xF0});
  ExpectInts(Binary(OpKind::kAnd, I(DType::kS64, {kS64Min | 5}), I(DType::kS64, {kS64Min | 3})),
             DType::kS64, {kS64Min | 1});
  Literal p = I(DType::kPred, {0, 0, 1, 1});
  Literal q = I(DType::kPred, {0, 1, 0, 1});
  ExpectInts(Binary(OpKind::kAnd, p, q), DType::kPred, {0, 0, 0, 1});
  ExpectInts(Binary(OpKind::kOr, p, q), DType::kPred, {0, 1, 1, 1});
  ExpectInts(Binary(OpKind::kXor, p, q), DType::kPred, {0, 1, 1, 0});
}

TEST(ElementwiseBinary, ShiftsOutOfRangeAreDefined) {
  Literal a = I(DType::kS32, {1, -8, -8, 1, -8, 5, kS32Min});
  Literal s = I(DType::kS32, {3, 1, 40, 32, -1, 31, 31});
  ExpectInts(Binary(OpKind::kShiftLeft, a, s), DType::kS32, {8, -16, 0, 0, 0, kS32Min, 0});
  ExpectInts(Binary(OpKind::kShiftRightArithmetic, a, s), DType::kS32, {0, -4, -1, 0, -1, 0, -1});
  ExpectInts(Binary(OpKind::kShiftRightLogical, a, s), DType::kS32, {0, 0x7FFFFFFC, 0, 0, 0, 0, 1});
  // u8: arithmetic shift right of an unsigned value fills with 0.
  Literal ua = I(DType::kU8, {0x80, 0x80, 1, 0xFF});
  Literal us = I(DType::kU8, {7, 8, 7, 200});
  ExpectInts(Binary(OpKind::kShiftLeft, ua, us), DType::kU8, {0, 0, 0x80, 0});
  ExpectInts(Binary(OpKind::kShiftRightArithmetic, ua, us), DType::kU8, {1, 0, 0, 0});
  ExpectInts(Binary(OpKind::kShiftRightLogical, ua, us), DType::kU8, {1, 0, 0, 0});
  Literal la = I(DType::kS64, {1, -1, -1, -1});
  Literal ls = I(DType::kS64, {63, 63, 64, kS64Min});
  ExpectInts(Binary(OpKind::kShiftLeft, la, ls), DType::kS64, {kS64Min, kS64Min, 0, 0});
  ExpectInts(Binary(OpKind::kShiftRightArithmetic, la, ls), DType::kS64, {0, -1, -1, -1});
  ExpectInts(Binary(OpKind::kShiftRightLogical, la, ls), DType::kS64, {0, 1, 0, 0});
  ExpectInts(Binary(OpKind::kShiftLeft, I(DType::kS8, {1, 3}), I(DType::kS8, {7, 7})), DType::kS8,
             {-128, -128});
}

TEST(ElementwiseBinary, BuilderRejectsWrongDTypes) {
  EXPECT_FALSE(Binary(OpKind::kAtan2, I(DType::kS32, {1}), I(DType::kS32, {1})).ok());
  EXPECT_FALSE(Binary(OpKind::kShiftLeft, F(DType::kF32, {1}), F(DType::kF32, {1})).ok());
  EXPECT_FALSE(Binary(OpKind::kAdd, I(DType::kPred, {1}), I(DType::kPred, {1})).ok());
}

// ---- compare -----------------------------------------------------------------------

TEST(ElementwiseCompare, AllDirectionsWithNaN) {
  for (DType t : kFloats) {
    SCOPED_TRACE(DTypeName(t));
    Literal a = F(t, {1, 2, 3, kNaN, kNaN, -0.0, -kInf});
    Literal b = F(t, {2, 2, 2, 1, kNaN, 0, -kInf});
    ExpectInts(Cmp(ComparisonKind::kEq, a, b), DType::kPred, {0, 1, 0, 0, 0, 1, 1});
    ExpectInts(Cmp(ComparisonKind::kNe, a, b), DType::kPred, {1, 0, 1, 1, 1, 0, 0});
    ExpectInts(Cmp(ComparisonKind::kLt, a, b), DType::kPred, {1, 0, 0, 0, 0, 0, 0});
    ExpectInts(Cmp(ComparisonKind::kLe, a, b), DType::kPred, {1, 1, 0, 0, 0, 1, 1});
    ExpectInts(Cmp(ComparisonKind::kGt, a, b), DType::kPred, {0, 0, 1, 0, 0, 0, 0});
    ExpectInts(Cmp(ComparisonKind::kGe, a, b), DType::kPred, {0, 1, 1, 0, 0, 1, 1});
  }
}

TEST(ElementwiseCompare, IntegersAndPred) {
  Literal a = I(DType::kS32, {kS32Min, 0, 5});
  Literal b = I(DType::kS32, {kS32Max, 0, -5});
  ExpectInts(Cmp(ComparisonKind::kLt, a, b), DType::kPred, {1, 0, 0});
  ExpectInts(Cmp(ComparisonKind::kGe, a, b), DType::kPred, {0, 1, 1});
  // u64 compares unsigned: 2^64-1 > 1.
  ExpectInts(Cmp(ComparisonKind::kGt, I(DType::kU64, {-1, 1}), I(DType::kU64, {1, -1})),
             DType::kPred, {1, 0});
  ExpectInts(Cmp(ComparisonKind::kGt, I(DType::kS64, {-1, 1}), I(DType::kS64, {1, -1})),
             DType::kPred, {0, 1});
  ExpectInts(Cmp(ComparisonKind::kLt, I(DType::kU8, {200}), I(DType::kU8, {100})), DType::kPred,
             {0});
  ExpectInts(Cmp(ComparisonKind::kNe, I(DType::kPred, {0, 1, 1}), I(DType::kPred, {1, 1, 0})),
             DType::kPred, {1, 0, 1});
  ExpectInts(Cmp(ComparisonKind::kGt, I(DType::kPred, {0, 1, 1}), I(DType::kPred, {1, 1, 0})),
             DType::kPred, {0, 0, 1});
}

// ---- convert ----------------------------------------------------------------------------

TEST(ElementwiseConvert, FloatToSignedInt) {
  const std::vector<double> in = {3.7,  -3.7,         kNaN,          1e20,         -1e20,
                                  kInf, 2147483647.0, -2147483648.0, 2147483648.0, 3e9};
  // s32: truncate; NaN and out of range -> INT32_MIN (x86 cvttss2si, as torch).
  ExpectInts(Cvt(F(DType::kF64, in), DType::kS32), DType::kS32,
             {3, -3, kS32Min, kS32Min, kS32Min, kS32Min, kS32Max, kS32Min, kS32Min, kS32Min});
  ExpectInts(
      Cvt(F(DType::kF64, in), DType::kS64), DType::kS64,
      {3, -3, kS64Min, kS64Min, kS64Min, kS64Min, 2147483647, kS32Min, 2147483648LL, 3000000000LL});
  ExpectInts(Cvt(F(DType::kF32, {kNaN, 1e20, 3.99f}), DType::kS32), DType::kS32,
             {kS32Min, kS32Min, 3});
  ExpectInts(Cvt(F(DType::kF32, {9.3e18, -9.3e18}), DType::kS64), DType::kS64, {kS64Min, kS64Min});
  // Narrow types: the s64 rule, then wrapped (torch: 300. -> int8 44, nan -> 0, 1e20 -> 0).
  ExpectInts(Cvt(F(DType::kF32, {kNaN, 300, -1, 3.7, -3.7, 1e20}), DType::kS8), DType::kS8,
             {0, 44, -1, 3, -3, 0});
  ExpectInts(Cvt(F(DType::kF32, {40000, -40000, kNaN, kInf}), DType::kS16), DType::kS16,
             {-25536, 25536, 0, 0});
  ExpectInts(Cvt(F(DType::kBF16, {-2.5, 128}), DType::kS8), DType::kS8, {-2, -128});
  ExpectInts(Cvt(F(DType::kF16, {-2.5, 65504}), DType::kS32), DType::kS32, {-2, 65504});
}

// 8- and 16-bit targets go through the int32 rule, as torch does: values in
// [2^31, 2^63) become INT32_MIN first and wrap to 0. Expected values are what
// torch 2.13 CPU printed for x.to(dtype) with these inputs (f32, f64 and bf16).
TEST(ElementwiseConvert, NarrowIntsGoThroughInt32LikeTorch) {
  const std::vector<double> in = {3e9, -3e9, 300.7, -1.5, 70000, kNaN, 5e18, 4e9};
  for (DType from : {DType::kF32, DType::kF64}) {
    ExpectInts(Cvt(F(from, in), DType::kS8), DType::kS8, {0, 0, 44, -1, 112, 0, 0, 0});
    ExpectInts(Cvt(F(from, in), DType::kS16), DType::kS16, {0, 0, 300, -1, 4464, 0, 0, 0});
    ExpectInts(Cvt(F(from, in), DType::kU8), DType::kU8, {0, 0, 44, 255, 112, 0, 0, 0});
    ExpectInts(Cvt(F(from, in), DType::kU16), DType::kU16, {0, 0, 300, 65535, 4464, 0, 0, 0});
  }
  // bf16(70000) is 70144, which wraps to 4608 in s16 (torch: 4608).
  ExpectInts(Cvt(F(DType::kBF16, in), DType::kS16), DType::kS16, {0, 0, 300, -1, 4608, 0, 0, 0});
}

TEST(ElementwiseConvert, FloatToUnsignedInt) {
  ExpectInts(Cvt(F(DType::kF32, {kNaN, 300, -1, 3.7, -3.7}), DType::kU8), DType::kU8,
             {0, 44, 255, 3, 253});
  ExpectInts(Cvt(F(DType::kF32, {70000, -1, kNaN}), DType::kU16), DType::kU16, {4464, 65535, 0});
  ExpectInts(Cvt(F(DType::kF64, {3e9, -1, 5e9}), DType::kU32), DType::kU32,
             {3000000000LL, 4294967295LL, 705032704});
  // u64: [2^63, 2^64) exact; above (and +inf) -> 0; NaN and -inf -> 2^63; -1 -> 2^64-1.
  auto got = Cvt(F(DType::kF64, {1e19, -1, 2e19, kNaN, kInf, -kInf, 1.8e19, 5}), DType::kU64);
  ASSERT_TRUE(got.ok());
  const uint64_t* u = got->data_as<uint64_t>();
  EXPECT_EQ(u[0], 10000000000000000000ULL);
  EXPECT_EQ(u[1], 18446744073709551615ULL);
  EXPECT_EQ(u[2], 0u);
  EXPECT_EQ(u[3], 9223372036854775808ULL);
  EXPECT_EQ(u[4], 0u);
  EXPECT_EQ(u[5], 9223372036854775808ULL);
  EXPECT_EQ(u[6], 18000000000000000000ULL);
  EXPECT_EQ(u[7], 5u);
  auto got32 = Cvt(F(DType::kF32, {1e19}), DType::kU64);
  ASSERT_TRUE(got32.ok());
  EXPECT_EQ(got32->data_as<uint64_t>()[0], 9999999980506447872ULL);
}

TEST(ElementwiseConvert, ToPred) {
  ExpectInts(Cvt(F(DType::kF32, {kNaN, 0, -0.0, 0.1, -kInf}), DType::kPred), DType::kPred,
             {1, 0, 0, 1, 1});
  ExpectInts(Cvt(I(DType::kS32, {0, 256, -1}), DType::kPred), DType::kPred, {0, 1, 1});
  ExpectInts(Cvt(F(DType::kBF16, {0, 2}), DType::kPred), DType::kPred, {0, 1});
}

TEST(ElementwiseConvert, IntToIntWraps) {
  ExpectInts(Cvt(I(DType::kS32, {300, -1, 128, kS32Min}), DType::kS8), DType::kS8,
             {44, -1, -128, 0});
  ExpectInts(Cvt(I(DType::kS32, {-1, 256}), DType::kU8), DType::kU8, {255, 0});
  ExpectInts(Cvt(I(DType::kU8, {255, 0}), DType::kS32), DType::kS32, {255, 0});
  ExpectInts(Cvt(I(DType::kS8, {-1}), DType::kU64), DType::kU64, {-1});  // 2^64 - 1
  ExpectInts(Cvt(I(DType::kU32, {4294967295LL}), DType::kS64), DType::kS64, {4294967295LL});
  ExpectInts(Cvt(I(DType::kPred, {1, 0}), DType::kS32), DType::kS32, {1, 0});
  ExpectInts(Cvt(I(DType::kU64, {-1}), DType::kS32), DType::kS32, {-1});
}

TEST(ElementwiseConvert, ToFloats) {
  ExpectValues(Cvt(I(DType::kS32, {16777217, -3}), DType::kF32), DType::kF32, {16777216, -3});
  ExpectValues(Cvt(I(DType::kS64, {kS64Max}), DType::kF64), DType::kF64, {9223372036854775808.0});
  ExpectValues(Cvt(I(DType::kU64, {-1}), DType::kF32), DType::kF32, {18446744073709551616.0});
  ExpectValues(Cvt(I(DType::kPred, {1, 0}), DType::kF32), DType::kF32, {1, 0});
  // Integers and f64 reach bf16/f16 through f32: two roundings, as torch
  // (2^24 + 2^16 + 1 -> f32 2^24 + 2^16 -> bf16 tie -> 2^24).
  ExpectValues(Cvt(I(DType::kS32, {16777216 + 65536 + 1, 3}), DType::kBF16), DType::kBF16,
               {16777216, 3});
  ExpectValues(Cvt(F(DType::kF64, {1 + 0x1p-8 + 0x1p-30, 1 + 0x1p-8 + 0x1p-20}), DType::kBF16),
               DType::kBF16, {1, 1 + 0x1p-7});
  ExpectValues(Cvt(F(DType::kF64, {1 + 0x1p-11 + 0x1p-40, 1e6, -1e-9}), DType::kF16), DType::kF16,
               {1, kInf, -0.0});
  ExpectValues(Cvt(F(DType::kF32, {1 + 0x1p-8, 1 + 3 * 0x1p-8, kNaN, -kInf}), DType::kBF16),
               DType::kBF16, {1, 1 + 0x1p-6, kNaN, -kInf});
  ExpectValues(Cvt(F(DType::kF64, {0.1}), DType::kF32), DType::kF32, {static_cast<double>(0.1f)});
  ExpectValues(Cvt(F(DType::kF32, {0.1}), DType::kF64), DType::kF64, {static_cast<double>(0.1f)});
  ExpectValues(Cvt(F(DType::kBF16, {1.5, -0.0}), DType::kF16), DType::kF16, {1.5, -0.0});
  ExpectValues(Cvt(F(DType::kF16, {65504}), DType::kBF16), DType::kBF16, {65536});
}

TEST(ElementwiseConvert, Complex) {
  auto c = Cvt(F(DType::kF32, {1.5, -2}), DType::kC64);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->GetComplex(0), std::complex<double>(1.5, 0));
  EXPECT_EQ(c->GetComplex(1), std::complex<double>(-2, 0));
  auto c128 = Cvt(*c, DType::kC128);
  ASSERT_TRUE(c128.ok()) << c128.status().ToString();
  EXPECT_EQ(c128->GetComplex(1), std::complex<double>(-2, 0));
  Literal z(Shape(DType::kC128, {1}));
  z.data_as<double>()[0] = 0.1;
  z.data_as<double>()[1] = -0.3;
  auto c64 = Cvt(z, DType::kC64);
  ASSERT_TRUE(c64.ok());
  EXPECT_EQ(c64->data_as<float>()[0], 0.1f);
  EXPECT_EQ(c64->data_as<float>()[1], -0.3f);
  auto ci = Cvt(I(DType::kS32, {7}), DType::kC128);
  ASSERT_TRUE(ci.ok());
  EXPECT_EQ(ci->GetComplex(0), std::complex<double>(7, 0));
  EXPECT_FALSE(Cvt(z, DType::kF64).ok());  // complex -> real is rejected
}

// ---- select, clamp ------------------------------------------------------------------------

TEST(ElementwiseOther, Select) {
  Literal p = I(DType::kPred, {1, 0, 1});
  Literal t = F(DType::kF32, {1, 2, 3});
  Literal f = F(DType::kF32, {-1, -2, kNaN});
  auto sel = [](const Literal& pp, const Literal& tt, const Literal& ff) {
    return EvalOne({&pp, &tt, &ff}, [](GraphBuilder& b, const std::vector<NodeId>& x) {
      return b.Select(x[0], x[1], x[2]);
    });
  };
  ExpectValues(sel(p, t, f), DType::kF32, {1, -2, 3});
  Literal yes = Literal::ScalarInt(DType::kPred, 1);
  Literal no = Literal::ScalarInt(DType::kPred, 0);
  ExpectValues(sel(yes, t, f), DType::kF32, {1, 2, 3});
  ExpectValues(sel(no, t, f), DType::kF32, {-1, -2, kNaN});
  ExpectInts(sel(p, I(DType::kS64, {kS64Min, 1, 2}), I(DType::kS64, {0, 9, 0})), DType::kS64,
             {kS64Min, 9, 2});
  ExpectValues(sel(p, F(DType::kBF16, {1, 2, 3}), F(DType::kBF16, {4, 5, 6})), DType::kBF16,
               {1, 5, 3});
  ExpectInts(sel(p, I(DType::kPred, {0, 0, 0}), I(DType::kPred, {1, 1, 1})), DType::kPred,
             {0, 1, 0});
  // Complex values are carried through select.
  Literal ct(Shape(DType::kC64, {3}));
  Literal cf(Shape(DType::kC64, {3}));
  for (int i = 0; i < 6; ++i) {
    ct.data_as<float>()[i] = static_cast<float>(i);
    cf.data_as<float>()[i] = static_cast<float>(-i);
  }
  auto cs = sel(p, ct, cf);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  EXPECT_EQ(cs->GetComplex(1), std::complex<double>(-2, -3));
  EXPECT_EQ(cs->GetComplex(2), std::complex<double>(4, 5));
}

TEST(ElementwiseOther, Clamp) {
  auto clamp = [](const Literal& lo, const Literal& x, const Literal& hi) {
    return EvalOne({&lo, &x, &hi}, [](GraphBuilder& b, const std::vector<NodeId>& p) {
      return b.Clamp(p[0], p[1], p[2]);
    });
  };
  for (DType t : kFloats) {
    SCOPED_TRACE(DTypeName(t));
    Literal lo = Literal::ScalarDouble(t, -1);
    Literal hi = Literal::ScalarDouble(t, 2);
    ExpectValues(clamp(lo, F(t, {-5, 0.5, 7, kNaN, -kInf}), hi), t, {-1, 0.5, 2, kNaN, -1});
    // Array bounds; NaN in a bound propagates; min > max gives max (torch.clamp).
    ExpectValues(clamp(F(t, {0, kNaN, 0, 3, 3}), F(t, {1, 1, 5, 1, 5}), F(t, {2, 2, kNaN, 2, 2})),
                 t, {1, kNaN, kNaN, 2, 2});
  }
  ExpectInts(clamp(Literal::ScalarInt(DType::kS32, -3), I(DType::kS32, {kS32Min, 0, kS32Max}),
                   Literal::ScalarInt(DType::kS32, 3)),
             DType::kS32, {-3, 0, 3});
  ExpectInts(
      clamp(I(DType::kU8, {10, 10}), I(DType::kU8, {0, 255}), Literal::ScalarInt(DType::kU8, 200)),
      DType::kU8, {10, 200});
  ExpectInts(clamp(Literal::ScalarInt(DType::kS64, kS64Min), I(DType::kS64, {kS64Min, 5}),
                   Literal::ScalarInt(DType::kS64, 4)),
             DType::kS64, {kS64Min, 4});
}

// ---- leaves -------------------------------------------------------------------------------------

TEST(Leaves, Iota) {
  auto iota = [](Shape s, int64_t dim) {
    return EvalOne({}, [&](GraphBuilder& b, const std::vector<NodeId>&) { return b.Iota(s, dim); });
  };
  ExpectValues(iota(Shape(DType::kF32, {2, 3}), 0), DType::kF32, {0, 0, 0, 1, 1, 1});
  ExpectValues(iota(Shape(DType::kF32, {2, 3}), 1), DType::kF32, {0, 1, 2, 0, 1, 2});
  ExpectInts(iota(Shape(DType::kS32, {2, 2, 2}), 1), DType::kS32, {0, 0, 1, 1, 0, 0, 1, 1});
  ExpectInts(iota(Shape(DType::kS64, {4}), 0), DType::kS64, {0, 1, 2, 3});
  auto u8 = iota(Shape(DType::kU8, {300}), 0);
  ASSERT_TRUE(u8.ok()) << u8.status().ToString();
  EXPECT_EQ(u8->GetInt(255), 255);
  EXPECT_EQ(u8->GetInt(299), 43);  // wraps like convert from s64
  ExpectInts(iota(Shape(DType::kPred, {3}), 0), DType::kPred, {0, 1, 1});
  // bf16 iota rounds large indices: 257 -> 256 (tie to even), 259 -> 260.
  auto big = iota(Shape(DType::kBF16, {260}), 0);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->GetDouble(255), 255);
  EXPECT_EQ(big->GetDouble(257), 256);
  EXPECT_EQ(big->GetDouble(259), 260);
  auto h = iota(Shape(DType::kF16, {3, 1}), 0);
  ExpectValues(h, DType::kF16, {0, 1, 2});
  ExpectValues(iota(Shape(DType::kF64, {0, 3}), 1), DType::kF64, {});
}

TEST(Leaves, Constant) {
  Literal c = Literal::FromDoubles(Shape(DType::kBF16, {2, 2}), {1, -2, 0.5, kNaN});
  auto got =
      EvalOne({}, [&](GraphBuilder& b, const std::vector<NodeId>&) { return b.Constant(c); });
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->BitwiseEquals(c));
}

// ---- whole graphs through the dispatcher
// ----------------------------------------------------------

TEST(ElementwiseGraph, ChainThroughEvaluate) {
  // y = clamp(0, round(x * 2) - 1, 5) as s32; errors carry the node id.
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {4}));
  NodeId two = b.Constant(Literal::FromDoubles(Shape(DType::kF32, {4}), {2, 2, 2, 2}));
  NodeId r = b.Unary(OpKind::kRoundNearestEven, b.Multiply(x, two));
  NodeId one = b.Constant(Literal::FromDoubles(Shape(DType::kF32, {4}), {1, 1, 1, 1}));
  NodeId y = b.Convert(b.Clamp(b.ConstantScalar(DType::kF32, 0), b.Subtract(r, one),
                               b.ConstantScalar(DType::kF32, 5)),
                       DType::kS32);
  b.SetOutputs({y});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Literal in = Literal::FromDoubles(Shape(DType::kF32, {4}), {0.25, 1.25, -3, 10});
  auto out = Evaluate(*g, std::vector<const Literal*>{&in});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 1u);
  // 0.5 -> 0 (even) - 1 = -1 -> 0; 2.5 -> 2 - 1 = 1; -6 - 1 -> 0; 20 - 1 -> 5.
  ExpectInts((*out)[0], DType::kS32, {0, 1, 0, 5});
}

TEST(ElementwiseGraph, DivisionByZeroThroughEvaluate) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kS32, {2}));
  NodeId y = b.Parameter(1, Shape(DType::kS32, {2}));
  NodeId q = b.Divide(x, y);
  b.SetOutputs({q});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Literal a = I(DType::kS32, {4, 5});
  Literal z = I(DType::kS32, {2, 0});
  auto out = Evaluate(*g, std::vector<const Literal*>{&a, &z});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(out.status().message().find("divide %2: integer division by zero"), std::string::npos)
      << out.status().message();
}

TEST(ElementwisePerf, MillionElementsIsFast) {
  // Not a benchmark: guards against per-element dispatch. 10^6 f32 adds and a
  // bf16 exp should take milliseconds; the bound is loose for sanitizer builds.
  const int64_t n = 1000000;
  Literal a(Shape(DType::kF32, {n}));
  Literal h(Shape(DType::kBF16, {n}));
  for (int64_t i = 0; i < n; ++i) a.data_as<float>()[i] = static_cast<float>(i % 1000) * 0.01f;
  auto start = std::chrono::steady_clock::now();
  auto sum = Binary(OpKind::kAdd, a, a);
  auto e = Unary(OpKind::kExp, h);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(sum.ok());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(sum->data_as<float>()[999], a.data_as<float>()[999] * 2);
  EXPECT_EQ(e->GetDouble(5), 1.0);
  EXPECT_LT(ms, 2000.0);
  std::printf("10^6 f32 add + 10^6 bf16 exp: %.1f ms\n", ms);
}

}  // namespace
}  // namespace ember
