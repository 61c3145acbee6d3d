// ATen ops on the core IR: the lowering table. No torch dependency: ops are
// named by their schema strings and arguments arrive as plain values.
//
// The torch bridge records ATen-level lazy nodes (src/torch/bridge.h). On a
// graph-cache miss it lowers the whole pending graph into one core graph
// (docs/architecture.md, "Lowering"). For every lazy node it builds an
// AtenCall — op name, arguments as plain values, operands already present in
// the graph being built, output metadata from the op's Meta kernel — and asks
// the table:
//   * a lowering appends core ops through the GraphBuilder and returns one
//     NodeId per output (kInvalidNode for an output the call leaves
//     undefined, e.g. a backward op's output_mask), each of shape
//     (outputs[i].dtype, outputs[i].sizes);
//   * or it declines this particular call (a dtype, an argument it does not
//     handle) by returning Declined("reason"); the bridge then emits an ATen
//     extern (a custom-call that runs ATen's CPU kernel inside the
//     executable). Declining is explicit and per call: a lowering never
//     appends nodes and then declines (the bridge checks the builder grew
//     only on success), and an op without a table entry is an extern.
//
// Values are dense row-major arrays: a TensorArg's `value` has shape
// (dtype, sizes) whatever strides eager reports for that tensor; the bridge
// handles layouts at the graph's edges and around externs.
//
// Scalars: every argument typed `Scalar`, `float` or `Scalar[]` is a graph
// input (ScalarArg: a 0-d parameter), never a constant, so one graph serves
// every value (lr = 0 during warm-up must not recompile) and two equal
// scalars never merge. A lowering must never depend on a scalar's value
// (it is not given one). Plain arguments (ints, bools, int lists, strings,
// dtypes) are part of the graph key and may be read freely.
//
// Type promotion follows eager (torch.result_type): wrapped numbers
// (TensorArg::wrapped_number) and ScalarArgs take part only by category
// (bool < integral < floating). Output dtypes are given by the Meta kernel
// (AtenCall::outputs), so a lowering never has to guess them.
//
// Errors: a lowering returns InvalidArgument/Internal for a genuine bug
// (the bridge then reports it, names the op and falls back to the extern);
// Declined is not an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ember/ir/builder.h"
#include "ember/ir/dtype.h"
#include "ember/status.h"

namespace ember::lowering {

// A tensor operand: a value already in the graph being built.
struct TensorArg {
  NodeId value = kInvalidNode;  // shape (dtype, sizes), dense row-major
  DType dtype = DType::kF32;
  std::vector<int64_t> sizes;
  bool wrapped_number = false;  // a Python number wrapped as a 0-d CPU tensor
};

// A `Scalar` / `float` / `Scalar[]` element: a 0-d graph input.
struct ScalarArg {
  enum class Kind : uint8_t { kBool, kInt, kFloat };
  NodeId value = kInvalidNode;  // 0-d: pred (kBool), s64 (kInt), f64 (kFloat)
  Kind kind = Kind::kFloat;
};

// One argument of the schema, in schema order.
struct Arg {
  enum class Kind : uint8_t {
    kNone,  // None (an absent optional of any type)
    kBool,
    kInt,
    kIntList,
    kBoolList,
    kDoubleList,
    kString,
    kDType,  // ScalarType (an IR dtype); torch dtypes without one: kOther
    kTensor,
    kTensorList,  // Tensor[] and Tensor?[] (absent elements: nullopt)
    kScalar,      // Scalar, float (graph inputs)
    kScalarList,  // Scalar[] (graph inputs)
    kOther,       // layout, device, memory format, generator, ...: ignored
  };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  std::vector<int64_t> ints;
  std::vector<bool> bools;
  std::vector<double> doubles;
  std::string s;
  DType dtype = DType::kF32;
  TensorArg tensor;
  std::vector<std::optional<TensorArg>> tensors;
  ScalarArg scalar;
  std::vector<ScalarArg> scalars;

  bool is_none() const { return kind == Kind::kNone; }
};

// Output metadata from the op's Meta kernel.
struct OutputMeta {
  DType dtype = DType::kF32;
  std::vector<int64_t> sizes;
  bool defined = true;
};

struct AtenCall {
  // "aten::add.Tensor", "aten::relu" (no overload: no dot), "aten::_foreach_add.List".
  std::string op;
  std::vector<Arg> args;            // schema order; defaults filled in
  std::vector<OutputMeta> outputs;  // one per returned tensor (Tensor[] returns flattened)
  // Random ops: (seed, offset) as 0-d u64 graph inputs, and a stream number
  // unique to this op within the graph (for RngUniform/RngNormal).
  std::optional<std::pair<NodeId, NodeId>> rng;
  int64_t rng_stream = 0;
  // The user's source line ("file.py:12"), for node metadata; may be empty.
  std::string source;
};

using LowerResult = StatusOr<std::vector<NodeId>>;
using LowerFn = LowerResult (*)(GraphBuilder& b, const AtenCall& call);

// A Status meaning "this call is not lowered; run it as an extern".
Status Declined(std::string reason);
bool IsDeclined(const Status& s);

class LoweringTable {
 public:
  // The process-wide table, filled on first use by the Register* functions
  // of src/lowering/ (explicit calls, no static registrars).
  static const LoweringTable& Get();
  // nullptr when the op has no entry.
  LowerFn Find(const std::string& op) const;
  std::vector<std::string> ops() const;         // sorted
  void Add(const std::string& op, LowerFn fn);  // replaces an earlier entry

 private:
  std::vector<std::pair<std::string, LowerFn>> entries_;  // sorted by op
};

}  // namespace ember::lowering
