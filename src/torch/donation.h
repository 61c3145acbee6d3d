// Donation (docs/architecture.md, "Donation"): a lowered graph pairs outputs with the
// tensor inputs whose buffers they may be written into (at lowering), and a sync donates
// the inputs no live tensor refers to (at run time). ember.config.donate_buffers
// switches it.
#pragma once

#include <atomic>
#include <set>
#include <unordered_map>
#include <vector>

#include "ember/ir/builder.h"
#include "lazy_graph.h"

namespace ember_torch {

// ember.config.donate_buffers: donate inputs no live tensor refers to (a parameter
// updated in place) so the lowered executable writes the new value into the old buffer.
std::atomic<bool>& donate_buffers();

// Per input of `g`: whether its buffer may be overwritten by this sync (donated): device
// data that no live tensor, view or other handle refers to — only the graph's own leaves.
// EMBER_LOG=donation prints each input's reference counts.
std::vector<bool> donatable_inputs(const LazyGraph& g);

// Pairs each tensor input with an output of the same shape (GraphBuilder::SetAlias;
// parameter i is input i): first the input's own new value, then any unpaired output.
// `outputs[o]` is root o's core value, computed as output `output_index[o]` of lazy node
// `output_nodes[o]`, laid out as `output_metas[o]`; `slot_param` maps a leaf slot to its
// parameter (or the transpose of a permuted input, listed in `permuted_inputs`: never
// paired).
void pair_donations(const LazyGraph& g, const std::vector<ember::NodeId>& outputs,
                    const std::vector<TensorMeta>& output_metas,
                    const std::vector<const Node*>& output_nodes,
                    const std::vector<int>& output_index,
                    const std::unordered_map<int, ember::NodeId>& slot_param,
                    const std::set<size_t>& permuted_inputs, ember::GraphBuilder& b);

}  // namespace ember_torch
