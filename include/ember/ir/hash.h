// 128-bit structural hash of a graph (DESIGN §3): op, attributes, constants
// by value, shapes, operand structure, parameter order, which outputs are
// live, the alias map. Never the values of parameters, never node metadata.
// Two graphs that print identically hash identically.
#pragma once

#include <cstdint>
#include <string>

#include "ember/ir/graph.h"

namespace ember {

struct Hash128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Hash128& o) const { return lo == o.lo && hi == o.hi; }
  bool operator!=(const Hash128& o) const { return !(*this == o); }
  bool operator<(const Hash128& o) const { return hi != o.hi ? hi < o.hi : lo < o.lo; }
  std::string ToString() const;  // 32 hex digits
};

Hash128 HashGraph(const Graph& g);

}  // namespace ember
