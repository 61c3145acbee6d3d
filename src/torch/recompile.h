// The recompile report (docs/architecture.md, "Recompiles"): why a graph missed the
// cache, named against the nearest cached graph of its structure family. A family is a
// graph's structure with every value that specialises it left out: the dims, strides,
// offsets and dtypes of its inputs and outputs, the attributes baked into its ops (int,
// bool and float arguments: slice bounds, view sizes, dims) and the kinds of its Python
// scalar inputs. Two graphs of one family differ only in those values, and the report
// names the ones that differ: a dim of an input, a dtype, or a baked Python scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lazy_graph.h"

namespace ember_torch {

// One value of a graph that its family leaves out.
struct SpecItem {
  enum Kind : uint8_t {
    kInputDim,     // where = input, sub = dim
    kInputDtype,   // where = input
    kInputLayout,  // where = input, sub = stride index (rank: the offset)
    kAttr,         // where = op, sub = argument index, elem = element (-1: not a list)
    kScalarType,   // where = op, sub = argument index, elem = element; value = scalar_tag
    kOutputDim,    // where = op, sub = output, elem = dim (shapes set by Scalar values)
    kOutputDtype,  // where = op, sub = output
  };
  Kind kind;
  uint8_t vtype = 0;  // kAttr: 0 int, 1 bool, 2 double (bits)
  int32_t where = 0, sub = 0, elem = -1;
  int64_t value = 0;
};

struct Signature {
  uint64_t family = 0;
  std::vector<SpecItem> items;
};

// `g`'s family and its values (on a cache miss: one walk over the graph, shared by
// varying_input_dims and note_compile).
Signature signature_of(const LazyGraph& g);

// The report of one compile. `reason` is empty when the graph is not a recompile (its
// family and call site are new); else one of "dim", "dtype", "layout", "scalar"
// (a baked Python scalar, or one whose value set an op's output shape), "scalar_type"
// (a Python int became a float, ...) or "structure" (a call site that compiled before
// compiled a graph of a new family), and `text` the line naming what changed.
struct RecompileReport {
  std::string reason;
  std::string text;
  // The one-time warning of a call site past ember.config.recompile_warn_limit graphs.
  std::string warning;
};

// Records `g` (just compiled; `sig` its signature_of) in its family and reports what
// changed against the nearest earlier member, or, for a new family, against the last
// graph compiled at `site` (the Python line of the sync; may be empty). Caller holds
// the cache lock.
RecompileReport note_compile(const LazyGraph& g, const Signature& sig, const std::string& site);
// The input dims (input index, dim) in which `g` differs from the nearest compiled
// graph of its family: what shape bucketing pads (graph_cache.cpp). Empty for a new
// family. Caller holds the cache lock.
std::vector<std::pair<int, int>> varying_input_dims(const Signature& sig);
// Forgets every family (ember._C.clear_cache()). Caller holds the cache lock.
void clear_families();

}  // namespace ember_torch
