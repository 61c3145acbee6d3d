// AnalyzeFusion: the kind of a body (loop, input, row, scatter), the rows of
// a row fusion and why a body with reductions is no row fusion; the kind as
// the fusion node's `kind` attribute in the text form.
#include "ember/ir/fusion_analysis.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "ember/ir/builder.h"
#include "ember/ir/text.h"

namespace ember {
namespace {

Graph Parse(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : Graph();
}

constexpr char kSoftmax[] = R"(graph softmax(%p0: f32[16,32]) {
  %0 = f32[16,32] parameter(0)
  %1 = f32[16] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[16,32] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[16,32] subtract(%0, %2)
  %4 = f32[16,32] exponential(%3)
  %5 = f32[16] reduce(%4), dimensions={1}, to_apply=add
  %6 = f32[16,32] broadcast-in-dim(%5), dimensions={0}
  %7 = f32[16,32] divide(%4, %6)
  ROOT (%7)
}
)";

TEST(FusionAnalysisTest, ElementwiseChainIsLoop) {
  const Graph g = Parse(R"(graph g(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] multiply(%0, %1)
  %3 = f32[8] exponential(%2)
  ROOT (%3)
}
)");
  const FusionAnalysis a = AnalyzeFusion(g);
  EXPECT_EQ(a.kind, FusionKind::kLoop);
  EXPECT_TRUE(a.reduces.empty());
  EXPECT_EQ(a.row_passes(), 1);
}

TEST(FusionAnalysisTest, SoftmaxIsARowFusion) {
  const Graph g = Parse(kSoftmax);
  const FusionAnalysis a = AnalyzeFusion(g);
  EXPECT_EQ(a.kind, FusionKind::kRow) << a.not_row;
  EXPECT_EQ(a.reduces, (std::vector<NodeId>{1, 5}));
  EXPECT_EQ(a.row.outer_rank, 1);
  EXPECT_EQ(a.row.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(a.row.rows, 16);
  EXPECT_EQ(a.row.row_length, 32);
  EXPECT_TRUE(a.row_shaped_output);
  EXPECT_EQ(a.row_passes(), 3);  // max, sum, normalize
}

// A plain row sum is a row fusion of one pass (no row-shaped output).
TEST(FusionAnalysisTest, RowSumIsARowFusionOfOnePass) {
  const Graph g = Parse(R"(graph g(%p0: f32[4,8,16]) {
  %0 = f32[4,8,16] parameter(0)
  %1 = f32[4,8,16] exponential(%0)
  %2 = f32[4] reduce(%1), dimensions={2,1}, to_apply=add
  %3 = f32[4] multiply(%2, %2)
  ROOT (%3)
}
)");
  const FusionAnalysis a = AnalyzeFusion(g);
  EXPECT_EQ(a.kind, FusionKind::kRow) << a.not_row;
  EXPECT_EQ(a.row.outer_rank, 1);
  EXPECT_EQ(a.row.rows, 4);
  EXPECT_EQ(a.row.row_length, 128);
  EXPECT_FALSE(a.row_shaped_output);
  EXPECT_EQ(a.row_passes(), 1);
}

void ExpectInput(const std::string& text, const std::string& reason) {
  const Graph g = Parse(text);
  const FusionAnalysis a = AnalyzeFusion(g);
  EXPECT_EQ(a.kind, FusionKind::kInput);
  EXPECT_EQ(a.not_row, reason);
  EXPECT_EQ(a.row_passes(), 1);
}

TEST(FusionAnalysisTest, WhyABodyWithReductionsIsNoRowFusion) {
  ExpectInput(R"(graph g(%p0: f32[8,4]) {
  %0 = f32[8,4] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={0}, to_apply=add
  ROOT (%1)
}
)",
              "reduce %1 reduces dims {0} of f32[8,4]; a row fusion needs reductions over the "
              "innermost dims, keeping at least one");
  ExpectInput(R"(graph g(%p0: f32[8,4]) {
  %0 = f32[8,4] parameter(0)
  %1 = f32[] reduce(%0), dimensions={0,1}, to_apply=add
  ROOT (%1)
}
)",
              "reduce %1 reduces dims {0,1} of f32[8,4]; a row fusion needs reductions over the "
              "innermost dims, keeping at least one");
  ExpectInput(R"(graph g(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1}, to_apply=add
  %2 = f32[8,4] transpose(%0), dimensions={1,0}
  %3 = f32[8] reduce(%2), dimensions={1}, to_apply=maximum
  %4 = f32[8,4] broadcast-in-dim(%3), dimensions={0}
  %5 = f32[8,4] subtract(%2, %4)
  ROOT (%5, %1)
}
)",
              "reduce %1 (dims {1} of f32[4,8]) and reduce %3 (dims {1} of f32[8,4]) reduce "
              "different rows");
  ExpectInput(R"(graph g(%p0: f32[8,8]) {
  %0 = f32[8,8] parameter(0)
  %1 = f32[8] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[8,8] broadcast-in-dim(%1), dimensions={1}
  %3 = f32[8,8] subtract(%0, %2)
  ROOT (%3)
}
)",
              "broadcast-in-dim %2 broadcasts a value computed from reduce %1 other than back "
              "along the rows of f32[8,8] (dims {0})");
  ExpectInput(R"(graph g(%p0: f32[8,8]) {
  %0 = f32[8,8] parameter(0)
  %1 = f32[8] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[8,8] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[8,8] transpose(%2), dimensions={1,0}
  ROOT (%3)
}
)",
              "transpose %3 consumes reduce %1's rows other than elementwise per row (a row "
              "fusion allows elementwise ops of shape f32[8,8] or f32[8] and broadcasts back)");
  ExpectInput(R"(graph g(%p0: f32[8,8], %p1: f32[3]) {
  %0 = f32[8,8] parameter(0)
  %1 = f32[3] parameter(1)
  %2 = f32[8] reduce(%0), dimensions={1}, to_apply=add
  %3 = f32[3] negate(%1)
  ROOT (%2, %3)
}
)",
              "output negate %3 has shape f32[3]; a row fusion's outputs have the rows' shape "
              "f32[8,8] or their outer shape f32[8]");
}

TEST(FusionAnalysisTest, ScatterIsAScatterFusion) {
  GraphBuilder b("s");
  NodeId x = b.Parameter(0, Shape(DType::kF32, {6, 4}));
  NodeId idx = b.Parameter(1, Shape(DType::kS64, {3, 1}));
  NodeId upd = b.Parameter(2, Shape(DType::kF32, {3, 4}));
  ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  NodeId s = b.Scatter(x, idx, upd, d, ReduceKind::kAdd);
  b.SetOutputs({b.Reduce(s, {1}, ReduceKind::kAdd)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(AnalyzeFusion(*g).kind, FusionKind::kScatter);
}

// The fusion pass's question (members of a larger graph, before a body
// exists) has the body's answer.
TEST(FusionAnalysisTest, MembersOfAGraphAnalyzeAsTheirBody) {
  const Graph g = Parse(kSoftmax);
  std::vector<NodeId> members(g.num_nodes() - 1);
  std::iota(members.begin(), members.end(), 1);  // all but the parameter
  const FusionAnalysis a = AnalyzeFusion(g, members, {7});
  const FusionAnalysis body = AnalyzeFusion(g);
  EXPECT_EQ(a.kind, body.kind);
  EXPECT_EQ(a.reduces, body.reduces);
  EXPECT_EQ(a.row.rows, body.row.rows);
  EXPECT_EQ(a.row_passes(), body.row_passes());
  // Without the normalize step the row-shaped output is exp(x - max).
  const FusionAnalysis part = AnalyzeFusion(g, {1, 2, 3, 4, 5}, {5, 4});
  EXPECT_EQ(part.kind, FusionKind::kRow) << part.not_row;
  EXPECT_EQ(part.row_passes(), 3);
  // Only the max: one pass.
  EXPECT_EQ(AnalyzeFusion(g, {1}, {1}).row_passes(), 1);
}

// `kind=row` is printed for a softmax fusion and parsed back; a kind other
// than the body's does not verify.
TEST(FusionAnalysisTest, KindIsTheFusionNodesAttribute) {
  const Graph body = Parse(kSoftmax);
  GraphBuilder b("main");
  NodeId p = b.Parameter(0, Shape(DType::kF32, {16, 32}));
  b.SetOutputs({b.Fusion({p}, std::make_shared<const Graph>(body))});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::string text = PrintGraph(*g);
  EXPECT_NE(text.find("%1 = f32[16,32] fusion(%0), calls=softmax, kind=row\n"), std::string::npos)
      << text;
  auto parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(PrintGraph(*parsed), text);
  std::string wrong = text;
  wrong.replace(wrong.find("kind=row"), 8, "kind=input");
  auto bad = ParseGraph(wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kind=input but the body's kind is row"), std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace ember
