// Executable: a compiled graph as an ordered list of Steps over numbered
// buffer slots (DESIGN §6). A step is
// one of
//   kExtern    - a kernel looked up by name in the ExternRegistry: every
//                dot-general (`ember.dot-general`), convolution
//                (`ember.convolution`) and custom-call (its
//                call_target_name) node;
//   kInterpret - a run of consecutive other nodes, extracted into its own
//                Graph whose parameters are the values it reads from other
//                steps, run by the reference interpreter (ember::Evaluate);
//   kCopy      - copies one buffer into another: writes an output into a
//                donated input's buffer (after every computing step, so a
//                failed run never changes an argument), or snapshots a
//                donated input that is also returned as an output;
//   kKernel    - (CompileOptions::backend = kCpu) a native kernel from the
//                CPU code generator (include/ember/codegen/cpu.h): one per
//                fusion node (its body), or, for nodes outside fusions, one
//                per maximal run of codegen-supported nodes. A kernel the
//                code generator cannot build (Unimplemented) stays a
//                kInterpret step (logged under EMBER_LOG=runtime). All of a
//                graph's kernels are compiled in parallel (CompileKernels).
//                Kernels run on the runtime parallel-for (thread_pool.h). A
//                kernel's data error (integer division by zero) is an
//                OutOfRange status naming the step and the node.
//
// Buffers (CompileOptions::backend = kCpu): Compile runs buffer assignment
// (src/passes/buffer_assignment.h) over the step schedule. Values written by
// a kernel and read only by kernels are "planned": Run allocates each
// planned buffer once, and kernels write into (and read from) that storage;
// dead buffers of the same byte size are reused and elementwise loop
// kernels may write in place over an input that dies there. Parameters,
// outputs and values that interpreter / extern steps touch are never
// shared.
//
// EMBER_DEBUG_DIR=dir: each Compile writes dir/<hash>.before.ir (the graph
// given), dir/<hash>.after.ir (after CompileOptions::optimize's passes) and
// dir/<hash>.<kernel name>.cc (each kernel's generated source), <hash> being
// HashGraph of the given graph; every file is written atomically. The .ir
// files end with the comment `// ember IR text version N (ember V)` (kIrTextVersion,
// ember/ir/text.h; V: ember::Version(), ember/version.h).
// Extern kernels are looked up when compiling (NotFound for an unknown
// name); an executable keeps the kernel it found even if the name is later
// registered again. Each step declares the slots it reads and writes. Slots 0..P-1 hold the
// parameters; each value that crosses a step boundary has one slot.
//
// Donation: the graph's alias map (output o may overwrite parameter p) is
// honoured only when ExecuteOptions::donated[p] is true. kCpu: the native
// kernel computing output o writes it straight into p's buffer when that is
// safe (Step::write_into_param: the kernel reads p only elementwise into it,
// nothing reads p later, no step from that kernel on can fail), and output o
// is then that same BufferRef (an extern's tuple element declared aliasing its
// operand: Step::element_into_param, the element's bytes are p's); otherwise output o
// keeps a buffer of its own
// (nothing is copied). kInterpreter: output o is copied into p's buffer
// after every computing step. Either way a failing run leaves every argument
// untouched, and a run that wrote one finishes even if cancelled. An
// argument passed twice is never donated. If a step fails after one was
// written (out of memory), the error names the overwritten parameters.
//
// Run() keeps all per-run state on its own stack: one Executable may be run
// from several threads at once.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ember/codegen/cpu.h"
#include "ember/eval/extern_registry.h"
#include "ember/ir/graph.h"
#include "ember/runtime/buffer.h"

namespace ember {

enum class StepKind : uint8_t { kExtern, kInterpret, kCopy, kKernel };
// "extern", "interpret", "copy", "kernel"
std::string_view StepKindName(StepKind k);

struct BufferAssignment;  // src/passes/buffer_assignment.h

// A value a step reads: the buffer in `slot`, or (tuple_index >= 0) element
// `tuple_index` of the tuple held there.
struct SlotRead {
  int slot = -1;
  int tuple_index = -1;
};

struct Step {
  StepKind kind = StepKind::kInterpret;
  std::vector<SlotRead> reads;
  std::vector<int> writes;
  // Original graph nodes this step computes (kCopy: the node whose value is copied).
  std::vector<NodeId> nodes;

  // kExtern: kernel name and the resolved kernel; nodes[0] is the node.
  std::string kernel_name;
  ExternKernel kernel;
  Node extern_node;  // copy of the graph node handed to the kernel

  // kInterpret: the extracted subgraph; parameter(i) is reads[i], output j
  // goes to writes[j].
  std::shared_ptr<const Graph> subgraph;
  // For error reports: the original nodes of the subgraph, in order, so a
  // failing node can be named by its id in the compiled graph.
  std::vector<Node> original_nodes;
  std::vector<NodeId> read_nodes;  // read_nodes[i]: original node whose value reads[i] is

  // Slots whose last reader this step is: dropped after it, so dead
  // intermediate buffers are freed early.
  std::vector<int> release_after;

  // kCopy: `donation_param` >= 0 makes the copy depend on whether that
  // parameter is donated. into_param: if donated, copy reads[0] into the
  // parameter's buffer and write that buffer to writes[0]; otherwise
  // writes[0] shares reads[0]. !into_param (a snapshot): if donated,
  // writes[0] gets a fresh copy of reads[0], otherwise shares it.
  // donation_param < 0: always a fresh copy.
  int donation_param = -1;
  bool into_param = false;

  // kKernel: the native kernel; parameter i is reads[i], output j goes to
  // writes[j]. `fusion`: the step runs one fusion node (nodes[0]) and
  // original_nodes[0] is that node. in_place_read: index into reads of the
  // value the kernel's single output may overwrite (elementwise, same
  // shape), or -1.
  std::shared_ptr<codegen::CompiledKernel> compiled;
  bool fusion = false;
  int in_place_read = -1;
  // kKernel (kCpu): per write (empty: none), the parameter whose buffer the
  // kernel writes it into when that parameter is donated, or -1. Set for a
  // donated output whose kernel reads the parameter only elementwise into it,
  // after the parameter's last reader, with nothing from it on that can fail.
  std::vector<int> write_into_param;
  // kExtern (kCpu): per element of the tuple result (empty: none), the parameter whose
  // buffer holds it when that parameter is donated, or -1: an element the custom-call
  // declares aliasing that parameter's operand (output_to_operand_aliasing), a donated
  // output read through, with no later reader of the parameter and nothing after the
  // extern that can fail. The extern finds the element's bytes to be its operand's.
  std::vector<int> element_into_param;
};

// Memory figures of an executable's buffer plan (Executable::memory_plan; kCpu,
// zeros for the interpreter backend), in bytes:
//   peak_bytes      - the most bytes of slot buffers live at once over the step
//                     schedule (outputs included, arguments excluded): what a run
//                     needs beside its arguments if every buffer lived exactly as
//                     long as its values;
//   planned_bytes   - the planned (kernel-only) buffers, which Run allocates once at
//                     its start and holds to its end;
//   planned_buffers - how many there are.
// A run's actual peak above its arguments is at least peak_bytes' planned part plus
// the other live buffers: planned buffers live for the whole run.
struct MemoryPlan {
  int64_t peak_bytes = 0;
  int64_t planned_bytes = 0;
  int64_t planned_buffers = 0;
};

enum class Backend : uint8_t { kInterpreter, kCpu };

struct CompileOptions {
  // Verify the graph first (Compile needs a valid graph; turn off only for
  // graphs just produced by a verifying pipeline).
  bool verify = true;
  // Run dot-general and convolution as extern steps (the reference kernels);
  // false runs them in interpreter steps.
  bool extern_contractions = true;
  // kInterpreter: extern / interpret / copy steps only. kCpu: native
  // kernel steps (see above) plus buffer assignment.
  Backend backend = Backend::kInterpreter;
  // Options for the code generator (kCpu): fast (-O1) mode, cache dir, ...
  codegen::CodegenOptions codegen;
  // Up to this many system-compiler runs at once (<= 0: hardware concurrency).
  int max_parallel_compiles = 0;
  // Run the optimization pipeline on the graph first: CpuPipeline() (the
  // DefaultPipeline passes, then fusion) for kCpu, DefaultPipeline() for
  // kInterpreter; then barrier-expansion (src/passes/barrier_expansion.h), so
  // an optimization-barrier costs nothing at run time.
  bool optimize = false;
  // kCpu: fusions that do not read each other's results and sit between
  // the same readers run as one kernel (horizontal fusion, compile.cc
  // MergeFusionGroups): e.g. the per-parameter pieces of a foreach optimizer
  // update or of clip_grad_norm. Values are unchanged (each fusion's code is
  // the same, side by side). false, or EMBER_MERGE_FUSIONS=0: one kernel
  // per fusion.
  bool merge_fusions = true;
  // Extern kernels private to this compilation, looked up by custom-call
  // target name before the global ExternRegistry (the torch bridge gives
  // each ATen extern node its own kernel closure this way, without growing
  // the process-wide registry).
  std::map<std::string, ExternKernel> externs;
};

struct ExecuteOptions {
  // donated[p]: the caller gives up parameter p's buffer; the executable may
  // overwrite it in place when the alias map pairs an output with p. Shorter
  // than the parameter list (or empty) means "not donated" for the rest.
  std::vector<bool> donated;
  // When set, Run checks it before every step and stops with a Cancelled status once it
  // is true (a KeyboardInterrupt in the torch bridge), until the run writes its first
  // donated argument: from then on only steps that cannot fail remain (the final
  // copies, or the kernels after one that wrote in place), so it finishes and a
  // cancelled run never leaves an argument half-updated.
  const std::atomic<bool>* cancel = nullptr;
};

class Executable {
 public:
  // args[i] is parameter i; shapes must match exactly (InvalidArgument).
  // Returns one buffer per graph output. Errors from a step keep the step's
  // status code and read `step K (<kind> [kernel]): <op> %<node>: <message>`;
  // a failed allocation is ResourceExhausted ("out of memory ...").
  StatusOr<std::vector<BufferRef>> Run(const std::vector<BufferRef>& args,
                                       const ExecuteOptions& options = {}) const;

  // Convenience for tools and tests: wraps/unwraps Literals (copies them).
  StatusOr<std::vector<Literal>> RunLiterals(const std::vector<Literal>& args) const;

  const std::vector<Step>& steps() const { return steps_; }
  int num_slots() const { return num_slots_; }
  const std::vector<Shape>& parameter_shapes() const { return parameter_shapes_; }
  const std::vector<int>& output_slots() const { return output_slots_; }
  // Per output: the element of its slot's tuple it is (an extern's tuple result read
  // in place: Run returns a buffer over that element's bytes, kept alive by the tuple),
  // or -1 for the slot's whole value.
  const std::vector<int>& output_tuple_indices() const { return output_tuple_indices_; }
  const Graph& graph() const { return *graph_; }
  // The buffer plan (kCpu; null for the interpreter backend).
  const BufferAssignment* assignment() const { return assignment_.get(); }
  // buffer assignment's DebugString, or "" without one.
  std::string AssignmentDebugString() const;
  // The plan's memory figures (see MemoryPlan).
  MemoryPlan memory_plan() const;
  // Per-slot: the planned buffer id (kCpu) or -1.
  const std::vector<int>& planned_buffer_of() const { return planned_buffer_of_; }

  // One line per step: `step 2: extern ember.dot-general %5 reads [s1,s3] writes [s4]`.
  std::string DebugString() const;

 private:
  friend StatusOr<Executable> Compile(const Graph& g, const CompileOptions& options);
  std::shared_ptr<const Graph> graph_;
  std::vector<Step> steps_;
  int num_slots_ = 0;
  std::vector<Shape> parameter_shapes_;
  std::vector<int> output_slots_;
  std::vector<int> output_tuple_indices_;
  // Per output reading a tuple element: an earlier output reading the same element
  // (Run returns that buffer again), else -1; and whether the tuple's slot is also
  // returned whole (its elements then stay in it). Derived from the two above at compile.
  std::vector<int> output_repeats_;
  std::vector<char> output_in_whole_tuple_;
  std::vector<std::string> slot_names_;  // for DebugString: "%5" / "%5.1" / "out0"
  std::shared_ptr<const BufferAssignment> assignment_;
  // slot -> buffer id in assignment_ if the slot is planned raw storage, else -1.
  std::vector<int> planned_buffer_of_;
  std::vector<int64_t> planned_bytes_;  // buffer id -> bytes (planned buffers only > 0)
};

// Partitions a (verified) graph into steps. Nodes no output depends on are
// dropped. NotFound if an extern kernel (custom-call target) is not
// registered; InvalidArgument if the graph does not verify.
StatusOr<Executable> Compile(const Graph& g, const CompileOptions& options = {});

// Name of the extern kernel that runs `n` (dot-general, convolution,
// custom-call), or "" if `n` is not run as an extern step.
std::string ExternKernelName(const Node& n);

}  // namespace ember
