// Captured programs: run a graph compiled by one sync again on new host tensors without
// re-tracing it (the torch.compile backend, python/ember/dynamo.py; docs/architecture.md,
// "Dynamo backend").
//
// The backend runs an FX graph's ATen ops on ember tensors that view its CPU inputs
// (wrap_host), then calls capture(): it syncs, and when that sync's graph is exactly the
// FX graph's work (nothing else pending, no sync during tracing, no random op, lowered
// backend) it records where each graph input comes from (a view of FX input j at a fixed
// geometry, or a constant the trace created) and which root each FX output is. A later
// call with inputs of the same sizes, strides and dtypes runs the same executable on them
// (run_lowered) and returns the outputs: no tracing, no graph building, no hashing.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lazy_graph.h"
#include "lower.h"

namespace ember_torch {

// What one sync compiled and ran: filled by sync_and_capture when the graph ran
// successfully on a lowered backend (program non-null), else left empty.
struct SyncCapture {
  std::shared_ptr<LoweredProgram> program;
  GraphStats stats;
  std::vector<std::pair<StatePtr, Value>> roots;
  LazyGraph graph;
};
// sync(reason), also handing back the graph and program it ran.
void sync_and_capture(const std::string& reason, SyncCapture* capture);
std::mutex& sync_mutex();                   // held by every sync (and by CapturedProgram::run)
std::vector<uint64_t> pending_state_ids();  // ids of the states with pending work

// An FX input the graph overwrites (CapturedProgram::run): output `output` is the new
// value of input `input`; `storage_uses` is exclusive_storage_uses(input), taken while
// the GIL is held.
struct InputWrite {
  int input = -1, output = -1;
  size_t storage_uses = 0;
};
// The use count of `t`'s storage when nothing but `t` refers to it: 1, or 2 when a
// Python storage object that no Python code holds keeps the other reference; else 0.
// Needs the GIL.
size_t exclusive_storage_uses(const at::Tensor& t);

class CapturedProgram {
 public:
  // Syncs all pending work (as sync(reason)) and returns a program that reruns it, or
  // null when the work cannot be replayed (see the file comment; `why` says which rule).
  // `inputs`: the FX graph's inputs, undefined for non-tensor ones; `outputs`: the
  // inner lazy tensors of its tensor outputs; `generation`: sync_generation() and
  // `foreign`: pending_state_ids(), both taken before the graph was traced.
  static std::shared_ptr<CapturedProgram> capture(const std::vector<at::Tensor>& inputs,
                                                  const std::vector<at::Tensor>& outputs,
                                                  int64_t generation,
                                                  const std::vector<uint64_t>& foreign,
                                                  const std::string& reason, std::string* why);
  // The outputs (CPU tensors) for new inputs, or nullopt when their sizes, strides or
  // dtypes differ from the captured ones or they share storages in another pattern
  // (which inputs, at which relative offsets). Throws the program's error (eager's
  // exception type, naming the ATen op), and then no input has been written.
  // `writes`: (FX input j, output k) pairs, output k being input j's new value (an input
  // mutation kept in the graph: AOTAutograd's trailing `copy_(input, value)`). After a
  // successful run each value is written into its input: a tensor that requires grad
  // (a parameter), covers its whole storage and shares it with no other tensor takes the
  // output's buffer instead of a copy (its storage's data pointer changes, its version
  // counter moves as copy_ would move it; `*moved` counts these); any other input gets
  // copy_ (under no_grad). Before that, the program may write the value straight into
  // the input's memory, as eager's in-place update does (the input is donated to the
  // run; `*in_place` counts these, and the input's version counter moves): when the
  // input reaches the program as itself (same sizes and strides, row-major, no other
  // FX input on its storage, no other graph input or output viewing it) and the
  // executable pairs output k with it (GraphBuilder::SetAlias at lowering; the kernel
  // computing it then writes into the input's buffer when nothing later reads or can
  // fail, Executable's "Donation"). A failing run still leaves every input untouched.
  // The returned outputs at written positions are unspecified.
  std::optional<std::vector<at::Tensor>> run(const std::vector<at::Tensor>& inputs,
                                             const std::vector<InputWrite>& writes = {},
                                             int64_t* moved = nullptr,
                                             int64_t* in_place = nullptr) const;
  int64_t runs() const { return runs_; }

 private:
  friend struct CapturedProgramAccess;  // src/export/export_program.cpp (ember.export)
  struct Source {  // a graph input or output: a view of FX input `fx`, or `constant`
    int fx = -1;
    int root = -1;  // outputs: root index of the program's results
    std::vector<int64_t> sizes, strides;
    int64_t offset_delta = 0;  // storage offset - the FX input's storage offset
    at::Tensor constant;
  };
  void find_in_place_inputs();  // fills in_place_input_, in_place_root_, root_uses_, wanted_roots_
  std::shared_ptr<LoweredProgram> program_;
  GraphStats stats_;
  std::vector<Value> keep_;  // the lazy nodes (error messages name them)
  std::vector<Node*> ops_;
  std::vector<c10::IValue> scalars_;
  std::vector<Source> graph_inputs_;
  std::vector<Source> outputs_;
  std::vector<TensorMeta> input_metas_;  // per FX input (offset ignored); sizes empty + dtype
  std::vector<bool> input_is_tensor_;    //   Undefined for non-tensors
  std::vector<int> alias_of_;            // per FX input: first input on its storage
  std::vector<int64_t> alias_delta_;     //   and its storage offset minus that one's
  // Per FX input: the graph input that is exactly it and that the executable may
  // overwrite with root `in_place_root_[j]` (see run's `in_place`), or -1.
  std::vector<int> in_place_input_;
  std::vector<int> in_place_root_;
  std::vector<int> root_uses_;      // per root of the program: FX outputs that are it
  std::vector<bool> wanted_roots_;  //   and whether there is one (run_lowered's `wanted`)
  mutable int64_t runs_ = 0;
};

}  // namespace ember_torch
