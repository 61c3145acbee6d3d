// Padding one varying length of a graph up to a bucket (docs/architecture.md,
// "Recompiles"; `ember.config.shape_buckets`).
//
// A graph whose inputs have a dim of length n (a sequence length that changes from step
// to step) is rewritten to compute on length N >= n: every value that carries that dim
// carries N positions, of which the first n are the original values (the *invariant*:
// restricted to the real positions, a padded value equals the original). Programs of
// lengths n and n' in one bucket are then one graph, compiled once; the length n is a
// runtime parameter (s64[]) appended after the original parameters.
//
// The padded dim propagates from the parameters named by the caller. A dim of length n
// that does not come from them (a bias broadcast over `[B*n, C]`, an `arange(n)` that
// indexes an embedding) is *widened* where it meets a padded operand: broadcasts, iotas,
// elementwise ops over them, size-1 reshapes and gathers indexed by them are recomputed
// at the padded length (their values at real positions are the originals'); a
// coincidental dim of length n elsewhere is left alone. A dim may be merged with others
// by reshape (`[B, n, C] -> [B*n, C]`): it is then `outer * N * inner` long and position
// p is real when (p / inner) % N < n.
//
// Each op either keeps the invariant as it is, or keeps it once padded positions are
// masked (select against iota < n, the *key mask*), or is refused:
//  - kept: elementwise ops (operands agree on the padded dims, after widening), convert,
//    broadcast-in-dim, transpose, reshape (the padded dim kept whole), slice (whole along
//    a padded dim, or within its real positions), concatenate and pad along other dims,
//    reduce-window with a window of 1 along it, a contraction's batch and free dims, and
//    a custom-call the caller's CustomCallPadding accepts (the torch bridge: causal
//    attention padded along its sequence dim);
//  - masked: reduce and argmax/argmin over a padded dim (padded positions hold the
//    reduction's identity), dot-general contracting over it (both operands zero there),
//    gather indices and scatter-add updates that are padded (indices 0, updates 0),
//    integer divisors (1: a zero would raise);
//  - refused (Status Unimplemented naming the op, its traced line when the node's
//    metadata has one, and why): random numbers over a dim of length n (padding moves
//    the draws), reverse, dynamic slices, concatenate or pad along a padded dim, a gather
//    or convolution reading a padded operand, a scatter into one or with another
//    combiner, other custom-calls and tuples of padded values, operands that disagree
//    and cannot be widened, a reshape that splits the padded dim, an argmax/argmin or
//    iota along a merged padded dim (their indices would count padded positions).
// This list is the one place that decides which ops are pad-safe.
//
// Results match the unpadded graph within float tolerance, not bit for bit: a masked
// reduction adds identities (zeros) in another order.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember::passes {

// How one dim of a value carries the padded length: not at all, or as the middle factor
// of `outer * N * inner`.
struct DimPadding {
  bool padded = false;
  int64_t outer = 1, inner = 1;
  bool operator==(const DimPadding& o) const {
    return padded == o.padded && (!padded || (outer == o.outer && inner == o.inner));
  }
  bool operator!=(const DimPadding& o) const { return !(*this == o); }
};

// Whether any dim of a value is padded.
inline bool AnyPadded(const std::vector<DimPadding>& dims) {
  for (const auto& d : dims)
    if (d.padded) return true;
  return false;
}

struct PaddedGraph {
  // Parameters 0..k-1 as in the input graph (padded where the length runs), then
  // parameter k: the length n (s64[]). No output aliases (donation is off).
  Graph graph;
  // Per parameter of the input graph, per dim: its padding.
  std::vector<std::vector<DimPadding>> parameters;
  // Per output, per dim: its padding (the caller keeps the first n positions).
  std::vector<std::vector<DimPadding>> outputs;
};

// The caller's rule for a custom-call that reads padded operands (the pass knows nothing
// of an extern's semantics): given the call and its operands' padding, the padding of
// each result (one per tuple element; one for an array result) and the padded call's
// backend_config (which must tell apart kernels that compute differently: the graph's
// text is its identity), or a refusal (a non-OK status whose message says why). The call
// is rebuilt with the padded result shape; the caller must make its kernel compute at
// that shape.
struct CustomCallPads {
  std::vector<std::vector<DimPadding>> results;
  std::string backend_config;
  // Operands recomputed with more dims padded first (an in-graph attention mask whose
  // query dim is a broadcast of length n), as the pass widens an elementwise operand.
  std::vector<std::pair<int64_t, std::vector<DimPadding>>> widen;
  // Operands whose padded positions along `dims` must hold `value` (an attention mask's
  // -inf, so that padded keys get no weight).
  struct Fill {
    int64_t operand = 0;
    std::vector<int64_t> dims;
    Literal value;
  };
  std::vector<Fill> fills;
  // An operand the call gets, inserted before operand `position`: `on_real` at the real
  // positions along `dim` of `dims` (padded sizes), `on_padded` at the others (a key mask
  // for attention that had none).
  struct KeyMask {
    int64_t position = 0;
    std::vector<int64_t> dims;
    int64_t dim = 0;
    Literal on_real, on_padded;
  };
  std::optional<KeyMask> key_mask;
};
using CustomCallPadding = std::function<StatusOr<CustomCallPads>(
    const Node& call, const std::vector<std::vector<DimPadding>>& operands)>;

// Pads `g`, whose parameter `p` dim `d` has length `length` for every (p, d) in `dims`,
// to `padded_length` (>= length > 1). Unimplemented when an op is not pad-safe;
// InvalidArgument when a named dim does not have that length. A custom-call reading a
// padded value is refused unless `custom_call` accepts it.
StatusOr<PaddedGraph> PadDimensions(const Graph& g,
                                    const std::vector<std::pair<int64_t, int64_t>>& dims,
                                    int64_t length, int64_t padded_length,
                                    const CustomCallPadding& custom_call = nullptr);

}  // namespace ember::passes
