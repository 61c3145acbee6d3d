// Shared helpers of the pass tests (header only; test binaries include it).
//
// ExpectRewrite(pass, in, out) (ExpectRewriteThenDce: dce before comparing):
// parses `in`, runs `pass` once, and expects the
// printed result to equal the canonical form of `out` and `changed` to be
// true; then evaluates both graphs on random inputs (several draws) and
// expects bit-identical outputs (any NaN equals any NaN). ExpectUnchanged
// expects `changed` false and the same printed graph.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>

#include "ember/eval/interpreter.h"
#include "ember/ir/text.h"
#include "ember/passes/pass.h"
#include "passes/dce.h"
#include "passes/random_graph.h"

namespace ember::passes {

inline Graph ParseOrDie(std::string_view text) {
  StatusOr<Graph> g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\nin:\n" << text;
  return g.ok() ? *g : Graph();
}

inline std::string Canonical(std::string_view text) { return PrintGraph(ParseOrDie(text)); }

// Evaluates `before` and `after` on the same random arguments and expects
// bit-identical outputs.
inline void ExpectSameValues(const Graph& before, const Graph& after, int draws = 8) {
  std::mt19937_64 rng(1234);
  for (int d = 0; d < draws; ++d) {
    std::vector<Literal> args = fuzz::RandomArguments(before, rng);
    StatusOr<std::vector<Literal>> want = Evaluate(before, args);
    StatusOr<std::vector<Literal>> got = Evaluate(after, args);
    // Only a data error (OutOfRange) may stop the original graph, and then
    // the optimized one must report it too.
    ASSERT_TRUE(want.ok() || want.status().code() == StatusCode::kOutOfRange)
        << want.status().ToString();
    ASSERT_EQ(want.ok(), got.ok())
        << "before: " << want.status().ToString() << "\nafter: " << got.status().ToString();
    if (!want.ok()) continue;
    ASSERT_EQ(want->size(), got->size());
    for (size_t i = 0; i < want->size(); ++i) {
      std::string why;
      EXPECT_TRUE(fuzz::BitIdentical((*want)[i], (*got)[i], &why))
          << "output " << i << ": " << why << "\nbefore:\n"
          << PrintGraph(before) << "after:\n"
          << PrintGraph(after);
    }
  }
}

// Runs `pass` once on `in` (expecting `changed_expected`), verifies, then, with
// `then_dce`, runs dce so that `out` shows only live nodes; compares the
// printed graph with `out` and the values with the input graph's.
inline void ExpectRewriteImpl(Pass& pass, std::string_view in, std::string_view out,
                              bool changed_expected, bool then_dce) {
  Graph g = ParseOrDie(in);
  const Graph before = g;
  StatusOr<bool> changed = pass.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(*changed, changed_expected) << "pass " << pass.name() << " change report";
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  if (then_dce) {
    DcePass dce;
    ASSERT_TRUE(dce.Run(g).ok());
  }
  EXPECT_EQ(PrintGraph(g), Canonical(out)) << "input:\n" << in;
  ExpectSameValues(before, g);
}

inline void ExpectRewrite(Pass& pass, std::string_view in, std::string_view out) {
  ExpectRewriteImpl(pass, in, out, /*changed_expected=*/true, /*then_dce=*/false);
}

// As ExpectRewrite, then dce before comparing (the pass may leave dead nodes).
inline void ExpectRewriteThenDce(Pass& pass, std::string_view in, std::string_view out,
                                 bool changed_expected = true) {
  ExpectRewriteImpl(pass, in, out, changed_expected, /*then_dce=*/true);
}

inline void ExpectUnchanged(Pass& pass, std::string_view in) {
  Graph g = ParseOrDie(in);
  const std::string before = PrintGraph(g);
  StatusOr<bool> changed = pass.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_FALSE(*changed) << "pass " << pass.name() << " reported a change";
  EXPECT_EQ(PrintGraph(g), before);
}

}  // namespace ember::passes
