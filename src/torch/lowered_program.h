// A lowered program (lower.h): the core executable compiled from one lazy graph and
// how its parameters and results map onto the lazy graph's inputs and roots. Shared by
// the lowerer (lower.cpp), the binding of a run (binding.cpp) and donation
// (donation.cpp).
#pragma once

#include <memory>
#include <vector>

#include "../passes/pad_dimensions.h"
#include "backend.h"
#include "bridge.h"
#include "ember/runtime/executable.h"
#include "graph_stats.h"

namespace ember_torch {

struct ExternState;

// Where one core graph parameter comes from at each run.
struct ParamSrc {
  // kLength: the real length of a program padded to a shape bucket (LoweredProgram).
  enum Kind : uint8_t { kInput, kScalar, kLength } kind = kInput;
  int index = 0;  // g.inputs / g.scalars
  int tag = 0;    // scalar kind (kScalar; binding.h)
  // kInput: the tensor is a dense permutation of a row-major layout (a transposed
  // weight): the parameter is that row-major layout, borrowed as is, and a transpose
  // node gives the graph the logical order (see dense_permutation).
  bool permuted = false;
};

struct LoweredProgram {
  Backend backend = Backend::kCpu;
  std::shared_ptr<const ember::Executable> exe;
  std::vector<ParamSrc> params;
  std::vector<ember::Shape> param_shapes;
  std::vector<TensorMeta> output_metas;  // per root: eager's layout of the result
  // Per root: eager returns a view (detach, reshape, ...): when the executable hands
  // out one buffer for several roots, a view shares the first root's storage and any
  // other root gets its own copy (as eager's clone does).
  std::vector<bool> output_views;
  GraphStats stats;
  std::vector<std::shared_ptr<ExternState>> externs;  // kept alive with the executable
  // Shape bucketing (ember.config.shape_buckets; graph_cache.cpp): the executable computes
  // on inputs whose varying dim is padded from pad_length to a bucket, shared by every
  // length of that bucket (pad_dimensions.h). 0: not padded. The binding pads the
  // inputs of param_pads (per parameter, per dim; empty when none), feeds pad_length as
  // the kLength parameter and keeps the real positions of each output (output_pads).
  int64_t pad_length = 0;
  std::vector<std::vector<ember::passes::DimPadding>> param_pads, output_pads;
};

}  // namespace ember_torch
