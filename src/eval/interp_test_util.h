// Test helpers for the interpreter tests: literals from value lists, and
// building + evaluating a small graph in one call.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"

namespace ember::testing {

inline Literal Lit(DType t, std::vector<int64_t> dims, std::vector<double> v) {
  return Literal::FromDoubles(Shape(t, std::move(dims)), v);
}
inline Literal F32Lit(std::vector<int64_t> dims, std::vector<double> v) {
  return Lit(DType::kF32, std::move(dims), std::move(v));
}
inline Literal IntLit(DType t, std::vector<int64_t> dims, std::vector<int64_t> v) {
  return Literal::FromInts(Shape(t, std::move(dims)), v);
}

inline std::vector<double> Doubles(const Literal& l) {
  std::vector<double> v;
  for (int64_t i = 0; i < l.num_elements(); ++i) v.push_back(l.GetDouble(i));
  return v;
}
inline std::vector<int64_t> Ints(const Literal& l) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < l.num_elements(); ++i) v.push_back(l.GetInt(i));
  return v;
}

// Builds the graph with `outputs` and evaluates it on `args`.
inline StatusOr<std::vector<Literal>> BuildAndRun(GraphBuilder& b, std::vector<NodeId> outputs,
                                                  const std::vector<Literal>& args) {
  b.SetOutputs(std::move(outputs));
  StatusOr<Graph> g = b.Build();
  if (!g.ok()) return g.status();
  return Evaluate(*g, args);
}

// Single-output version; on error returns the status.
inline StatusOr<Literal> Run1(GraphBuilder& b, NodeId out, const std::vector<Literal>& args) {
  auto r = BuildAndRun(b, {out}, args);
  if (!r.ok()) return r.status();
  return std::move(r->at(0));
}

inline bool HasAll(const std::string& s, const std::vector<std::string>& frags) {
  for (const auto& f : frags)
    if (s.find(f) == std::string::npos) return false;
  return true;
}

}  // namespace ember::testing

#define EMBER_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  EMBER_ASSERT_OK_AND_ASSIGN_IMPL(EMBER_CONCAT(_ember_t_, __LINE__), lhs, expr)
#define EMBER_ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();     \
  lhs = std::move(tmp).value()
