// The memory model of the passes that plan memory (memory-scheduling,
// rematerialization): which buffers a graph's nodes define, read and hold, and how many
// bytes are live at each point of an order.
//
// Every node but the aliasing ones (DefinesNoBuffer: parameter, tuple,
// get-tuple-element, optimization-barrier) defines a buffer of its shape's byte_size(),
// live from its node to the last node reading it, directly or through an aliasing node;
// a buffer a graph output holds lives to the end. Parameters are the caller's and count
// 0. It approximates the runtime's plan (values fused into one kernel never
// materialize); buffer assignment (buffer_assignment.h) makes it exact over the order
// the passes choose. Bytes throughout.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/ir/graph.h"

namespace ember::passes {

bool DefinesNoBuffer(OpKind op);

struct MemoryModel {
  explicit MemoryModel(const Graph& g);
  std::vector<int64_t> bytes;                // node -> bytes of the buffer it defines
  std::vector<std::vector<NodeId>> roots;    // node -> the buffers its value is made of
  std::vector<std::vector<NodeId>> reads;    // node -> the buffers it reads (distinct)
  std::vector<std::vector<NodeId>> readers;  // buffer -> the nodes reading it, in id order
  std::vector<bool> output;                  // buffer -> held by a graph output
};

// Live bytes while each node of `order` (a permutation of all node ids, operands first;
// empty: node id order) runs: the buffers it reads, its own, and every other buffer
// defined before and read after it. `outputs`: whether buffers held by graph outputs
// count (false: the activation profile, outputs being the caller's results).
std::vector<int64_t> LiveBytesProfile(const MemoryModel& m, const std::vector<NodeId>& order = {},
                                      bool outputs = true);
// The largest entry of LiveBytesProfile (0 for an empty graph).
int64_t LiveBytesPeak(const MemoryModel& m, const std::vector<NodeId>& order = {},
                      bool outputs = true);

}  // namespace ember::passes
