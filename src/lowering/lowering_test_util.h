// Test harness for ATen lowerings: builds an AtenCall by hand over graph
// parameters (as the bridge would), lowers it through the table and runs the
// graph with the reference interpreter.
//
// A compact spec describes a call's arguments, used by the coverage test
// and by value tests:
//   T:f32[2,3]  tensor          W:f64   wrapped number (0-d)
//   S:f / S:i / S:b  Scalar      SL:f,f  Scalar[]
//   I:3  int   L:1,2  int[]  BL:1,0  bool[]  DL:0.5,1  float[]
//   B:1  bool  Str:floor  D:f32 dtype  N  None  O  other (device, layout)
//   TL:f32[2]|f32[3]|N  Tensor[] (N: an absent element)
// and outputs as shapes separated by ';' ("_" = undefined).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"
#include "ember/lowering/aten.h"

namespace ember::lowering::testing {

inline std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> r;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) r.push_back(cur);
  if (!s.empty() && s.back() == sep) r.push_back("");
  return r;
}

inline std::string Trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

inline Shape ParseShapeSpec(const std::string& spec) {
  std::string s = Trim(spec);
  auto lb = s.find('[');
  std::string dt = lb == std::string::npos ? s : s.substr(0, lb);
  auto t = ParseDType(dt);
  EXPECT_TRUE(t.has_value()) << "bad dtype in " << spec;
  std::vector<int64_t> dims;
  if (lb != std::string::npos) {
    std::string inner = s.substr(lb + 1, s.size() - lb - 2);
    if (!inner.empty())
      for (const auto& d : Split(inner, ',')) dims.push_back(std::stoll(d));
  }
  return Shape(t.value_or(DType::kF32), dims);
}

// Builds calls and their inputs.
class CallHarness {
 public:
  explicit CallHarness(std::string op) { call.op = std::move(op); }

  // A tensor parameter holding `value`.
  TensorArg Tensor(const Literal& value, bool wrapped = false) {
    TensorArg t;
    t.value = b.Parameter(static_cast<int64_t>(inputs.size()), value.shape());
    t.dtype = value.dtype();
    t.sizes = value.shape().dims();
    t.wrapped_number = wrapped;
    inputs.push_back(value);
    return t;
  }
  ScalarArg Scalar(ScalarArg::Kind kind, double v) {
    DType t = kind == ScalarArg::Kind::kBool  ? DType::kPred
              : kind == ScalarArg::Kind::kInt ? DType::kS64
                                              : DType::kF64;
    ScalarArg s;
    s.kind = kind;
    s.value = b.Parameter(static_cast<int64_t>(inputs.size()), Shape(t, {}));
    inputs.push_back(Literal::ScalarDouble(t, v));
    return s;
  }

  void AddTensor(const Literal& v, bool wrapped = false) {
    Arg a;
    a.kind = Arg::Kind::kTensor;
    a.tensor = Tensor(v, wrapped);
    call.args.push_back(a);
  }
  void AddScalar(ScalarArg::Kind k, double v) {
    Arg a;
    a.kind = Arg::Kind::kScalar;
    a.scalar = Scalar(k, v);
    call.args.push_back(a);
  }
  void AddInt(int64_t v) {
    Arg a;
    a.kind = Arg::Kind::kInt;
    a.i = v;
    call.args.push_back(a);
  }
  void AddInts(std::vector<int64_t> v) {
    Arg a;
    a.kind = Arg::Kind::kIntList;
    a.ints = std::move(v);
    call.args.push_back(a);
  }
  void AddBool(bool v) {
    Arg a;
    a.kind = Arg::Kind::kBool;
    a.b = v;
    call.args.push_back(a);
  }
  void AddString(std::string s) {
    Arg a;
    a.kind = Arg::Kind::kString;
    a.s = std::move(s);
    call.args.push_back(a);
  }
  void AddDType(DType t) {
    Arg a;
    a.kind = Arg::Kind::kDType;
    a.dtype = t;
    call.args.push_back(a);
  }
  void AddBools(std::vector<bool> v) {
    Arg a;
    a.kind = Arg::Kind::kBoolList;
    a.bools = std::move(v);
    call.args.push_back(a);
  }
  void AddScalarList(std::vector<double> v) {
    Arg a;
    a.kind = Arg::Kind::kScalarList;
    for (double d : v) a.scalars.push_back(Scalar(ScalarArg::Kind::kFloat, d));
    call.args.push_back(a);
  }
  void AddTensorList(std::vector<std::optional<Literal>> v) {
    Arg a;
    a.kind = Arg::Kind::kTensorList;
    for (auto& l : v) {
      if (l)
        a.tensors.push_back(Tensor(*l));
      else
        a.tensors.push_back(std::nullopt);
    }
    call.args.push_back(a);
  }
  void AddNone() { call.args.push_back(Arg()); }
  void AddOther() {
    Arg a;
    a.kind = Arg::Kind::kOther;
    call.args.push_back(a);
  }
  void Out(DType t, std::vector<int64_t> sizes) {
    OutputMeta o;
    o.dtype = t;
    o.sizes = std::move(sizes);
    call.outputs.push_back(o);
  }
  void Rng() {
    ScalarArg seed, off;
    NodeId s = b.Parameter(static_cast<int64_t>(inputs.size()), Shape(DType::kU64, {}));
    inputs.push_back(Literal::ScalarInt(DType::kU64, 1234));
    NodeId o = b.Parameter(static_cast<int64_t>(inputs.size()), Shape(DType::kU64, {}));
    inputs.push_back(Literal::ScalarInt(DType::kU64, 0));
    call.rng = {s, o};
  }

  // Adds arguments from the spec (see the file comment); tensor values are
  // pseudo-random: floats in [-2, 2], ints in [0, 3], bools alternating.
  void AddSpec(const std::string& args_spec) {
    if (Trim(args_spec).empty()) return;
    for (std::string tok : Split(args_spec, ' ')) {
      tok = Trim(tok);
      if (tok.empty()) continue;
      auto colon = tok.find(':');
      std::string kind = tok.substr(0, colon),
                  v = colon == std::string::npos ? "" : tok.substr(colon + 1);
      if (kind == "T" || kind == "W") {
        AddTensor(Sample(ParseShapeSpec(v)), kind == "W");
      } else if (kind == "S") {
        AddScalar(v == "b"   ? ScalarArg::Kind::kBool
                  : v == "i" ? ScalarArg::Kind::kInt
                             : ScalarArg::Kind::kFloat,
                  v == "f" ? 0.75 : 1);
      } else if (kind == "SL") {
        Arg a;
        a.kind = Arg::Kind::kScalarList;
        for (const auto& e : Split(v, ','))
          a.scalars.push_back(
              Scalar(e == "i" ? ScalarArg::Kind::kInt : ScalarArg::Kind::kFloat, 0.5));
        call.args.push_back(a);
      } else if (kind == "I") {
        AddInt(std::stoll(v));
      } else if (kind == "L") {
        std::vector<int64_t> ints;
        if (!v.empty())
          for (const auto& e : Split(v, ',')) ints.push_back(std::stoll(e));
        AddInts(ints);
      } else if (kind == "BL") {
        Arg a;
        a.kind = Arg::Kind::kBoolList;
        for (const auto& e : Split(v, ',')) a.bools.push_back(e == "1");
        call.args.push_back(a);
      } else if (kind == "DL") {
        Arg a;
        a.kind = Arg::Kind::kDoubleList;
        for (const auto& e : Split(v, ',')) a.doubles.push_back(std::stod(e));
        call.args.push_back(a);
      } else if (kind == "B") {
        AddBool(v == "1");
      } else if (kind == "Str") {
        AddString(v);
      } else if (kind == "D") {
        AddDType(*ParseDType(v));
      } else if (kind == "N") {
        AddNone();
      } else if (kind == "O") {
        AddOther();
      } else if (kind == "TL") {
        Arg a;
        a.kind = Arg::Kind::kTensorList;
        for (const auto& e : Split(v, '|')) {
          if (e == "N")
            a.tensors.push_back(std::nullopt);
          else
            a.tensors.push_back(Tensor(Sample(ParseShapeSpec(e))));
        }
        call.args.push_back(a);
      } else if (kind == "RNG") {
        Rng();
      } else {
        ADD_FAILURE() << "bad spec token " << tok;
      }
    }
  }
  void OutSpec(const std::string& spec) {
    for (const auto& o : Split(spec, ';')) {
      if (Trim(o) == "_") {
        OutputMeta m;
        m.defined = false;
        call.outputs.push_back(m);
        continue;
      }
      Shape s = ParseShapeSpec(o);
      Out(s.dtype(), s.dims());
    }
  }

  Literal Sample(const Shape& s) {
    Literal l(s);
    std::uniform_real_distribution<double> f(-2, 2);
    for (int64_t i = 0; i < l.num_elements(); ++i) {
      if (IsFloat(s.dtype()))
        l.SetDouble(i, f(rng_));
      else if (s.dtype() == DType::kPred)
        l.SetInt(i, i % 2);
      else if (!IsComplex(s.dtype()))
        l.SetInt(i, static_cast<int64_t>(rng_() % 3));
    }
    return l;
  }

  // Lowers through the table.
  LowerResult Lower() {
    LowerFn fn = LoweringTable::Get().Find(call.op);
    if (!fn) return NotFound("no table entry for ", call.op);
    return fn(b, call);
  }
  // Lowers, builds and evaluates; one Literal per output (defined ones).
  StatusOr<std::vector<Literal>> Run() {
    EMBER_ASSIGN_OR_RETURN(std::vector<NodeId> outs, Lower());
    std::vector<NodeId> defined;
    for (NodeId n : outs)
      if (n != kInvalidNode) defined.push_back(n);
    b.SetOutputs(defined);
    EMBER_ASSIGN_OR_RETURN(Graph g, b.Build());
    return Evaluate(g, inputs);
  }

  GraphBuilder b;
  AtenCall call;
  std::vector<Literal> inputs;

 private:
  std::mt19937_64 rng_{42};
};

// A literal from its dtype, sizes and values (as gen_golden.py prints them).
inline Literal L(DType t, std::vector<int64_t> sizes, std::vector<double> values) {
  return Literal::FromDoubles(Shape(t, std::move(sizes)), values);
}

inline std::vector<double> Values(const Literal& l) {
  std::vector<double> v;
  for (int64_t i = 0; i < l.num_elements(); ++i) v.push_back(l.GetDouble(i));
  return v;
}

// Exact comparison that treats NaN == NaN and tells -0.0 from 0.0.
inline void ExpectSameValues(const Literal& got, DType want_dtype, const std::vector<double>& want,
                             const std::string& what) {
  EXPECT_EQ(got.dtype(), want_dtype) << what;
  ASSERT_EQ(got.num_elements(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got.GetDouble(static_cast<int64_t>(i)), w = want[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " [" << i << "]: got " << g << ", want nan";
    } else {
      EXPECT_EQ(g, w) << what << " [" << i << "]";
      EXPECT_EQ(std::signbit(g), std::signbit(w)) << what << " [" << i << "]: sign of zero";
    }
  }
}

inline void ExpectNearValues(const Literal& got, const std::vector<double>& want, double rtol,
                             double atol, const std::string& what) {
  ASSERT_EQ(got.num_elements(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got.GetDouble(static_cast<int64_t>(i)), w = want[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " [" << i << "]";
    } else if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << " [" << i << "]";
    } else {
      EXPECT_NEAR(g, w, atol + rtol * std::fabs(w)) << what << " [" << i << "]";
    }
  }
}

}  // namespace ember::lowering::testing
