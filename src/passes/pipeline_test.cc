// The pipeline: order, fixed point, verifier, EMBER_DUMP_PASSES,
// EMBER_SKIP_PASSES, CreatePass.
#include <gtest/gtest.h>

#include <cstdlib>

#include "ember/passes/pass.h"
#include "passes/pass_test_util.h"

namespace ember {
namespace {

using passes::Canonical;
using passes::ExpectSameValues;
using passes::ParseOrDie;

// Restores an environment variable when the test ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old;
    had_ = old != nullptr;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

constexpr const char* kInput = R"(
graph main(%p0: f32[4], %p1: f32[4]) {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %one = f32[] constant({1})
  %ones = f32[4] broadcast-in-dim(%one), dimensions={}
  %m = f32[4] multiply(%x, %ones)
  %c1 = f32[2] constant({2, 3})
  %c2 = f32[2] constant({4, 5})
  %c3 = f32[2] add(%c1, %c2)
  %cc = f32[4] concatenate(%c3, %c3), dimension=0
  %e1 = f32[4] exponential(%m)
  %e2 = f32[4] exponential(%x)
  %s = f32[4] add(%e1, %e2)
  %t = f32[4] add(%s, %cc)
  %dead = f32[4] tanh(%y)
  ROOT (%t)
})";

constexpr const char* kOptimized = R"(
graph main(%p0: f32[4], %p1: f32[4]) {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %cc = f32[4] constant({6, 8, 6, 8})
  %e = f32[4] exponential(%x)
  %s = f32[4] add(%e, %e)
  %t = f32[4] add(%s, %cc)
  ROOT (%t)
})";

TEST(Pipeline, DefaultOrderAndNames) {
  Pipeline p = DefaultPipeline();
  EXPECT_EQ(p.pass_names(),
            (std::vector<std::string>{"simplify", "constant-folding", "cse", "dce"}));
  EXPECT_EQ(p.max_rounds(), 4);
  // AllPassNames() also lists the target-specific fusion pass (CpuPipeline) and
  // memory-scheduling (Compile runs it after the pipeline).
  std::vector<std::string> all = AllPassNames();
  EXPECT_EQ(std::vector<std::string>(all.begin(), all.begin() + 4), p.pass_names());
  EXPECT_EQ(std::vector<std::string>(all.begin() + 4, all.end()),
            (std::vector<std::string>{"fusion", "memory-scheduling"}));
}

TEST(Pipeline, CreatePassByName) {
  for (const std::string& name : AllPassNames()) {
    StatusOr<std::unique_ptr<Pass>> p = CreatePass(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  StatusOr<std::unique_ptr<Pass>> bad = CreatePass("fold-everything");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("fold-everything"), std::string::npos);
}

TEST(Pipeline, DefaultPipelineOptimizesToFixedPoint) {
  Graph g = ParseOrDie(kInput);
  const Graph before = g;
  StatusOr<bool> changed = DefaultPipeline().Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(PrintGraph(g), Canonical(kOptimized));
  ExpectSameValues(before, g);
  // Running again changes nothing.
  StatusOr<bool> again = DefaultPipeline().Run(g);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_EQ(PrintGraph(g), Canonical(kOptimized));
}

TEST(Pipeline, SkipPassesByName) {
  ScopedEnv skip("EMBER_SKIP_PASSES", "cse, dce");
  Graph g = ParseOrDie(kInput);
  ASSERT_TRUE(DefaultPipeline().Run(g).ok());
  // Without cse both exponentials stay; without dce so does tanh.
  const std::string text = PrintGraph(g);
  size_t exps = 0;
  for (size_t pos = text.find("exponential"); pos != std::string::npos;
       pos = text.find("exponential", pos + 1)) {
    ++exps;
  }
  EXPECT_EQ(exps, 2u) << text;
  EXPECT_NE(text.find("tanh"), std::string::npos) << text;
}

TEST(Pipeline, DumpsAfterEachPass) {
  ScopedEnv dump("EMBER_DUMP_PASSES", "1");
  ScopedEnv skip("EMBER_SKIP_PASSES", "dce");
  Graph g = ParseOrDie(kInput);
  testing::internal::CaptureStderr();
  ASSERT_TRUE(DefaultPipeline().Run(g).ok());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("// after pass simplify (round 1, changed)"), std::string::npos) << err;
  EXPECT_NE(err.find("// after pass constant-folding (round 1"), std::string::npos) << err;
  EXPECT_NE(err.find("// after pass cse (round 1"), std::string::npos) << err;
  EXPECT_NE(err.find("// pass dce: skipped"), std::string::npos) << err;
  EXPECT_NE(err.find("graph main("), std::string::npos) << err;
}

TEST(Pipeline, NoDumpByDefault) {
  ScopedEnv dump("EMBER_DUMP_PASSES", "0");
  Graph g = ParseOrDie(kInput);
  testing::internal::CaptureStderr();
  ASSERT_TRUE(DefaultPipeline().Run(g).ok());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// A pass that always reports a change (without changing anything).
class AlwaysChanged : public Pass {
 public:
  explicit AlwaysChanged(int* runs) : runs_(runs) {}
  std::string name() const override { return "always-changed"; }
  StatusOr<bool> Run(Graph&) override {
    ++*runs_;
    return true;
  }

 private:
  int* runs_;
};

TEST(Pipeline, StopsAfterMaxRounds) {
  int runs = 0;
  std::vector<std::unique_ptr<Pass>> list;
  list.push_back(std::make_unique<AlwaysChanged>(&runs));
  Pipeline p(std::move(list), 4);
  Graph g = ParseOrDie(kInput);
  StatusOr<bool> changed = p.Run(g);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(runs, 4);
}

class Failing : public Pass {
 public:
  std::string name() const override { return "failing"; }
  StatusOr<bool> Run(Graph& g) override {
    g = Graph();  // a pass that fails may leave garbage behind
    return InvalidArgument("something is wrong");
  }
};

TEST(Pipeline, PassErrorNamesThePassAndRestoresTheGraph) {
  std::vector<std::unique_ptr<Pass>> list;
  list.push_back(std::make_unique<Failing>());
  Pipeline p(std::move(list));
  Graph g = ParseOrDie(kInput);
  const std::string before = PrintGraph(g);
  StatusOr<bool> r = p.Run(g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("failing"), std::string::npos);
  EXPECT_EQ(PrintGraph(g), before);
}

// Each pass alone, as ember-opt runs it, keeps the graph valid and its values.
TEST(Pipeline, EachPassAloneKeepsGraphValid) {
  Graph g = ParseOrDie(kInput);
  const Graph before = g;
  for (const std::string& name : DefaultPipeline().pass_names()) {
    std::vector<std::unique_ptr<Pass>> list;
    list.push_back(std::move(CreatePass(name)).value());
    StatusOr<bool> r = Pipeline(std::move(list)).Run(g);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_TRUE(Verify(g).ok());
  }
  EXPECT_EQ(PrintGraph(g), Canonical(kOptimized));
  ExpectSameValues(before, g);
}

}  // namespace
}  // namespace ember
