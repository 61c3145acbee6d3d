// Kernel names, one scheme for fusion bodies and native kernels:
// `fused_<ops>_<n>`, <ops> being the distinct short names (ShortOpName,
// ember/ir/opcode.h) of the nodes that compute, in node order — parameters,
// constants, tuple and get-tuple-element left out — at most six of them, then
// `_etc` if there are more, and `copy` if there are none. The fusion pass
// names each fusion body so (<n>: the fusion's position among its graph's
// fusions); the CPU code generator names a kernel's exported entry `ember_`
// followed by the name of the kernel's graph (<n>: the kernel's index in its
// executable), e.g. `ember_fused_reduce_bcast_sub_exp_div_0` for a softmax.
#pragma once

#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember {

// The name of `g` (all its nodes) with index `n`.
std::string KernelName(const Graph& g, int n);
// The name of the nodes `nodes` (increasing ids) of `g` with index `n`.
std::string KernelName(const Graph& g, const std::vector<NodeId>& nodes, int n);
// The name of the graphs side by side (all nodes of each, in order).
std::string KernelName(const std::vector<const Graph*>& graphs, int n);

}  // namespace ember
