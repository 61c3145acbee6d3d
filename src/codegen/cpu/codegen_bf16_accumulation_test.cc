// bf16 (and f16) reductions accumulate in f32 in generated kernels, as the IR
// specifies (docs/ir.md, "Reductions") and eager's CPU kernels do: a bf16
// running sum of ones stalls at 256 (256 + 1 rounds back to 256), an f32 one
// reaches n exactly. Covered: plain reduce kernels (whole and per row), a row
// fusion (the softmax shape: max, sum of exp), and a reduce fused with its
// bf16 producer, and softmax through the runtime's row kernels. Exact results,
// equal to the interpreter's.
#include "codegen/cpu/codegen_test_util.h"
#include "ember/ir/attributes.h"
#include "ember/runtime/executable.h"

namespace ember::codegen {
namespace {

using testing::ExpectMatchesInterpreter;
using testing::FastOptions;
using testing::RunKernel;
using testing::TempDir;

Literal Ones(DType t, std::vector<int64_t> dims) {
  Shape s(t, dims);
  return Literal::FromDoubles(s, std::vector<double>(static_cast<size_t>(s.num_elements()), 1.0));
}

TEST(CodegenBF16Accumulation, SumOfOnesIsExact) {
  TempDir dir;
  for (DType t : {DType::kBF16, DType::kF16}) {
    GraphBuilder b;
    NodeId x = b.Parameter(0, Shape(t, {3, 512}));
    NodeId all = b.Reduce(x, {0, 1}, ReduceKind::kAdd);           // 1536
    NodeId rows = b.Reduce(x, {1}, ReduceKind::kAdd);             // 512 each
    NodeId twice = b.Reduce(b.Add(x, x), {1}, ReduceKind::kAdd);  // fused producer
    NodeId wide = b.Reduce(b.Convert(x, DType::kF32), {1}, ReduceKind::kAdd);
    b.SetOutputs({all, rows, twice, wide});
    auto g = b.Build();
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    auto k = ExpectMatchesInterpreter(*g, {Ones(t, {3, 512})}, FastOptions(dir.path()));
    ASSERT_NE(k, nullptr);
    auto out = RunKernel(*k, {Ones(t, {3, 512})});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    // 1536, 1024 and 512 are exact in bf16 and f16; a bf16 running sum stops at 256.
    EXPECT_EQ((*out)[0].GetDouble(0), 1536) << DTypeName(t);
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ((*out)[1].GetDouble(r), 512) << DTypeName(t);
      EXPECT_EQ((*out)[2].GetDouble(r), 1024) << DTypeName(t);
      EXPECT_EQ((*out)[3].GetDouble(r), 512) << DTypeName(t);
    }
  }
}

TEST(CodegenBF16Accumulation, RowFusionSumsInF32) {
  // softmax over bf16 rows of 600 equal logits, through the runtime (CpuPipeline
  // makes it one row fusion, run as a row kernel): exp(x - max) = 1 per element,
  // so each row sum is 600 (exact in bf16; a bf16 accumulator stops at 256).
  const Shape s(DType::kBF16, {2, 600});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  NodeId m = b.Reduce(x, {1}, ReduceKind::kMaximum);
  NodeId e = b.Exp(b.Subtract(x, b.BroadcastInDim(m, {2, 600}, {0})));
  NodeId sum = b.Reduce(e, {1}, ReduceKind::kAdd);
  NodeId p = b.Divide(e, b.BroadcastInDim(sum, {2, 600}, {0}));
  b.SetOutputs({p});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  TempDir dir;
  CompileOptions o;
  o.backend = Backend::kCpu;
  o.optimize = true;
  o.codegen = FastOptions(dir.path());
  auto exe = Compile(*g, o);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  int row_kernels = 0;
  for (const Step& st : exe->steps()) {
    EXPECT_EQ(st.kind, StepKind::kKernel);
    if (st.fusion && attr::Kind(exe->graph().node(st.nodes[0])) == FusionKind::kRow) ++row_kernels;
  }
  EXPECT_GE(row_kernels, 1) << exe->DebugString();
  auto out = exe->RunLiterals({Ones(DType::kBF16, {2, 600})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // p = bf16(1/600) (a stalled sum would give 1/256), equal to the interpreter's.
  auto want = Evaluate(*g, {Ones(DType::kBF16, {2, 600})});
  ASSERT_TRUE(want.ok());
  for (int64_t i = 0; i < 1200; ++i) {
    ASSERT_EQ((*out)[0].GetDouble(i), (*want)[0].GetDouble(i)) << i;
    ASSERT_NEAR((*out)[0].GetDouble(i), 1.0 / 600, 1.0 / 600 / 256) << i;
  }
}

TEST(CodegenBF16Accumulation, RowKernelSumIsExact) {
  // The row sum itself as an output of a row fusion (CpuPipeline).
  const Shape s(DType::kBF16, {2, 600});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  NodeId sum = b.Reduce(x, {1}, ReduceKind::kAdd);
  NodeId c = b.Multiply(x, b.BroadcastInDim(sum, {2, 600}, {0}));  // 1 * 600
  b.SetOutputs({c});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  TempDir dir;
  CompileOptions o;
  o.backend = Backend::kCpu;
  o.optimize = true;
  o.codegen = FastOptions(dir.path());
  auto exe = Compile(*g, o);
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  for (const Step& st : exe->steps()) EXPECT_EQ(st.kind, StepKind::kKernel);
  auto out = exe->RunLiterals({Ones(DType::kBF16, {2, 600})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (int64_t i = 0; i < 1200; ++i) ASSERT_EQ((*out)[0].GetDouble(i), 600) << i;
}

}  // namespace
}  // namespace ember::codegen
