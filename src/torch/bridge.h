// The torch bridge: the `ember` device (PrivateUse1), its lazy tensors and sync.
//
// Model (see docs/architecture.md, "Torch bridge"):
//  * Users hold FunctionalTensorWrapper tensors; functionalization turns views and
//    in-place ops into functional ops on the inner tensors, which are LazyTensorImpl.
//  * A LazyTensorImpl shares a LazyState: device data (a CPU tensor whose storage
//    comes from the counting device allocator, laid out exactly as the tensor reports
//    it), a pending IR value (Node output), or an in-flight value: the future of a
//    program queued for asynchronous execution (execution_queue.h).
//  * Nodes are ATen-level: operator handle + boxed argument template + operands.
//    Output sizes/strides come from the op's Meta kernel, cached.
//  * sync() gathers the pending values of all live states into one graph, hashes
//    it structurally, finds or builds an Executable (ordered ATen extern steps over
//    slots) and runs it, binding results back as device data.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ember_torch {

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
inline c10::Device ember_device() { return c10::Device(kDeviceType, 0); }

// ---------------------------------------------------------------- metrics
struct Metrics {
  std::mutex mu;
  int64_t syncs = 0;
  int64_t graphs_compiled = 0;
  int64_t memory_cache_hits = 0;
  int64_t disk_cache_hits = 0;
  double compile_seconds = 0;
  double execute_seconds = 0;
  int64_t transfers_to_device = 0;
  int64_t transfers_to_host = 0;
  int64_t ops_traced = 0;
  int64_t value_reads = 0;
  int64_t nodes_executed = 0;
  int64_t extern_copies = 0;  // extern outputs without a usable .out overload
  int64_t meta_cache_hits = 0;
  int64_t meta_cache_misses = 0;
  int64_t early_syncs = 0;
  std::map<std::string, int64_t> fallbacks;
  std::map<std::string, int64_t> externs;  // ATen op -> executions as an extern (not lowered)
  // Lowered backends (docs/architecture.md, "Lowering"):
  std::map<std::string, int64_t> lowering_declined;  // ATen op -> calls a lowering declined
  std::map<std::string, int64_t> lowering_errors;    // ATen op -> lowerings that failed (bug)
  int64_t lowering_failed_graphs = 0;  // graphs that could not be lowered: run on `aten`
  int64_t input_copies = 0;            // graph inputs copied to row-major (not borrowed)
  int64_t output_copies = 0;           // results relaid out to eager's strides / offset
  int64_t relayout_copies = 0;         // extern operands relaid out to their recorded strides
  int64_t kernel_compiles = 0;         // system-compiler runs for native kernels (codegen)
  int64_t kernel_disk_hits = 0;        // native kernels loaded from the codegen disk cache
  int64_t donated_buffers = 0;         // inputs donated to an execution (written in place)
  int64_t recompiles = 0;              // compiles that the recompile report explained (recompile.h)
  std::map<std::string, int64_t> recompiles_by_reason;  // "dim", "dtype", "scalar", ...
  int64_t tail_ops = 0;  // ops run after a program as ATen calls (appends' tails: sync.cpp)
  // Shape bucketing (graph_cache.cpp): graphs run on a program padded to a bucket, those
  // of them that reused a program compiled for another length, and graphs compiled at
  // their exact shape because an op was not pad-safe.
  int64_t bucketed_graphs = 0, bucket_reuses = 0, bucket_refusals = 0;
  // Where values were read (.item(), bool(t), ...): user's "file:line" (when
  // config().record_source) -> count; "<unknown>" without a Python frame.
  std::map<std::string, int64_t> value_read_sites;
  void clear();
};
Metrics& metrics();

// ---------------------------------------------------------------- memory
c10::Allocator* device_allocator();  // host memory, counted
int64_t memory_allocated();
int64_t max_memory_allocated();
void reset_peak_memory_stats();
bool is_device_buffer(const at::Tensor& t);  // storage from device_allocator() or a runtime buffer
bool is_runtime_buffer(
    const at::Tensor& t);  // storage is an executable's output buffer (binding.cpp)
// A CPU tensor backed by the device allocator.
at::Tensor alloc_buffer(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dtype,
                        int64_t storage_offset = 0);
// A CPU tensor of `dtype` over `storage` (shared, not copied) with the given geometry,
// made without a dispatcher call (what `at::empty({0}).set_(...)` gives, at a fraction
// of its cost: the sync binds every result this way).
at::Tensor tensor_over(c10::Storage storage, int64_t storage_offset, at::IntArrayRef sizes,
                       at::IntArrayRef strides, at::ScalarType dtype);

// ---------------------------------------------------------------- RNG
// The device generator hands out (seed, offset) pairs; a random op runs with a CPU
// generator seeded from that pair at execution time.
std::pair<uint64_t, uint64_t> next_rng_pair(const std::optional<at::Generator>& gen,
                                            uint64_t draws);
at::Generator default_generator();
at::Generator make_generator();
bool in_bad_fork();
void check_not_forked();  // raises in a forked child
bool is_ember_generator(const at::Generator& g);

// ---------------------------------------------------------------- IR
struct TensorMeta {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  at::ScalarType dtype = at::kFloat;
  bool operator==(const TensorMeta& o) const {
    return sizes == o.sizes && strides == o.strides && offset == o.offset && dtype == o.dtype;
  }
};
TensorMeta meta_of(const at::Tensor& t);

struct Node;
using NodePtr = std::shared_ptr<Node>;
struct FutureData;  // execution_queue.h
using FuturePtr = std::shared_ptr<FutureData>;
struct Value {
  NodePtr node;
  int index = 0;
  bool operator==(const Value& o) const { return node == o.node && index == o.index; }
};

// kFuture: a leaf whose device data a queued program will produce (`future`).
enum class NodeKind { kData, kHost, kOp, kFuture };

// How one boxed argument of an op node is rebuilt at execution time.
enum class ArgKind : uint8_t {
  kPlain,       // attribute, used as recorded (hashed by value)
  kTensor,      // operand
  kTensorList,  // list of operands
  kOptTensorList,
  kScalar,      // Scalar / float argument: a graph input (hashed by type)
  kScalarList,  // Scalar[]: graph inputs
  kGenerator,   // Generator?: seeded from (seed, offset) graph inputs
  kDevice,      // Device?: rewritten to cpu / meta
};

struct ArgSpec {
  ArgKind kind = ArgKind::kPlain;
  std::vector<int> operands;  // operand indices (-1: None element)
};

struct Node {
  NodeKind kind = NodeKind::kOp;
  // kData: device buffer. kHost: CPU tensor snapshot (e.g. a wrapped number).
  at::Tensor data;
  FuturePtr future;  // kFuture
  // kOp:
  std::optional<c10::OperatorHandle> op;
  std::vector<c10::IValue> args;  // tensor positions hold None
  std::vector<ArgSpec> specs;
  std::vector<Value> operands;
  std::vector<int> written;  // argument indices the op mutates (cloned first)
  std::vector<TensorMeta> outputs;
  std::vector<bool> output_is_view;
  uint64_t rng_seed = 0, rng_offset = 0;
  bool seeded_default = false;  // random op without a Generator argument
  std::string source;           // user's Python file:line when traced
  // Output k's claim: set when a sync claims a state holding (this node, k)
  // (claim_pending_states), the future that value became and the claiming sync's
  // number. A node traced from a value read before that claim but registered after it
  // reaches this node through an operand; a later graph reads the future there instead
  // of recomputing the value from leaves the earlier program may have donated and
  // overwritten (docs/architecture.md, "Donation").
  struct Claim {
    FuturePtr future;
    uint64_t gen = 0;  // 0: not claimed
  };
  std::vector<Claim> claims;  // per output; empty until one is claimed
  // Output k's claim, or null when a sync has not claimed it.
  const Claim* claim(int k) const {
    return static_cast<size_t>(k) < claims.size() && claims[k].gen != 0 ? &claims[k] : nullptr;
  }
  // Per schema return: -1 one tensor, n >= 0 a list of n, -2 undefined, -3 an alias
  // of a (written) argument. Empty: every output defined, in order.
  std::vector<int> ret_shape;
  uint64_t seq = 0;             // trace order (op nodes): sync runs ops in this order
  uint64_t structure_hash = 0;  // op nodes: structure_hash(*this), set when traced (lazy_graph.h)
  const char* name() const;
};

// ---------------------------------------------------------------- tensor state
struct LazyState : std::enable_shared_from_this<LazyState> {
  uint64_t id = 0;
  std::optional<Value> ir;  // pending value
  at::Tensor data;          // device data
  // In flight: the value a queued program will produce (set by the sync that queued
  // it, replaced by `data` on first use after it resolved). Guarded by state_mutex(). A
  // view op traced on an in-flight tensor gives a state holding a view future
  // (execution_queue.h).
  FuturePtr future;
  bool is_view = false;  // produced by an inner view op (must not be mutated)
  std::string error;     // set when the sync that should have computed it failed
  // Index in the pending list (set_pending), or kUnlisted; guarded by state_mutex().
  static constexpr size_t kUnlisted = static_cast<size_t>(-1);
  size_t pending_slot = kUnlisted;
  LazyState *live_prev = nullptr, *live_next = nullptr;  // the live-state list; state_mutex()
  explicit LazyState(uint64_t id_) : id(id_) {}
  ~LazyState();
};
using StatePtr = std::shared_ptr<LazyState>;

// The registry of live tensor states; guarded by a mutex that is never held across a
// dispatcher or Python call.
std::mutex& state_mutex();
// A new live state; with `ir`, pending with that value.
StatePtr new_state(std::optional<Value> ir = std::nullopt);
// Makes `s` pending with value `v` (state_mutex() held). A sync gathers its roots from the
// list of states made pending since the last gather, not from every live state: its cost
// follows what was traced, not the model's size.
void set_pending(const StatePtr& s, Value v);
std::vector<std::pair<StatePtr, Value>> pending_states();  // creation order
// Gathers the pending states (as pending_states) and, under the same lock, makes each an
// in-flight state holding a new future (pushed to *futures in the same order; states
// holding one value share one future): from then on no thread can reach their pending nodes through
// a state (docs/architecture.md, "Execution model"). Each root value's node records the
// claim (Node::claims, with this claim's number); a state holding a value an earlier
// sync claimed (traced from a read made before that sync) takes that sync's future and
// is no root.
std::vector<std::pair<StatePtr, Value>> claim_pending_states(std::vector<FuturePtr>* futures);
// Makes the claimed states pending again (a sync failed before queueing its job).
void unclaim_states(const std::vector<std::pair<StatePtr, Value>>& roots,
                    const std::vector<FuturePtr>& futures);
// Under state_mutex(): a future resolved with a value becomes the state's data (a failed
// one stays, so reads raise its error).
void settle_future(LazyState& s);
int64_t pending_op_count();
void add_pending_ops(int64_t n);  // n < 0: reset to 0 (a sync took every pending op)
uint64_t next_node_seq();         // trace order of a new op node (Node::seq)

class LazyTensorImpl : public c10::TensorImpl {
 public:
  LazyTensorImpl(const TensorMeta& meta, StatePtr state);
  const StatePtr& state() const { return state_; }
  void set_meta(const TensorMeta& meta);
  TensorMeta meta() const;

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;
  // A storage of the tensor's size in bytes on the ember device, without data, made on
  // first access (storage.cpp): FakeTensor describes inner tensors through it.
  const c10::Storage& storage() const override;

 private:
  const char* tensorimpl_type_name() const override { return "EmberLazyTensorImpl"; }
  StatePtr state_;
};

LazyTensorImpl* lazy_impl(const at::Tensor& t);  // nullptr if not an inner lazy tensor
// `view_of_normal`: the result is a view of a normal (non-inference) tensor, so it is a
// normal tensor even inside torch.inference_mode(), as in eager.
at::Tensor make_lazy(const TensorMeta& meta, Value v, bool view_of_normal = false);
at::Tensor make_lazy_data(at::Tensor data, bool view_of_normal = false);
// An in-flight tensor: its state holds `f` (a view future, from an eager view op).
at::Tensor make_lazy_future(FuturePtr f, bool view_of_normal = false);
// Wraps in a FunctionalTensorWrapper unless the caller is the functionalization layer.
at::Tensor maybe_wrap(at::Tensor t);
at::Tensor unwrap(const at::Tensor& t);  // inner tensor (syncs functional updates)

// The operand a tensor contributes to a new node.
Value value_of(const at::Tensor& inner);
// A leaf reading in-flight value `f` (hashed like a data leaf).
Value future_leaf(const FuturePtr& f);
// Device data of an inner tensor, syncing if needed.
at::Tensor materialize(const at::Tensor& inner);
// Rebinds inner tensor `dst` to the current value (pending or data) and metadata of `src`.
void assign_state(const at::Tensor& dst, const at::Tensor& src);

// ---------------------------------------------------------------- tracing
// The boxed PrivateUse1 kernel of every traced op (trace.cpp): records the call as a
// Node, or runs it eagerly (eager.cpp). Throws the user's error at the user's line.
void trace_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);
// Test hook (ember._C._pause_trace_after_operands): armed, the next op any thread traces
// stops after reading its operands' values and before binding its results, until
// disarmed; wait_for_trace_pause() returns once a tracer stopped there. Forces the
// interleaving of a read made before another thread's sync and a node registered after.
void trace_pause_after_operands(bool arm);
void wait_for_trace_pause();
// Registers the kernels that need the dispatcher fully loaded (kernels.cpp); idempotent.
void register_kernels();

// ---------------------------------------------------------------- sync
struct Config {
  std::atomic<int64_t> max_pending_ops{100000};
  std::atomic<int64_t> recompile_warn_limit{8};
  std::atomic<bool> record_source{true};
  std::atomic<bool> log_recompiles{true};
  // 0 cpu (lowered, native kernels), 1 interpreter (lowered, reference
  // interpreter), 2 aten (one ATen step per node). Initial value: $EMBER_BACKEND.
  std::atomic<int> backend{0};
  // kAsyncOn: syncs queue their programs on the execution queue and return
  // (execution_queue.h); kAsyncOff: each sync runs its program before returning;
  // kAsyncAuto (the default): queued only when the machine has a CPU beyond the
  // program's ATen threads for the tracer, else a program whose last run was short runs
  // within its sync (docs/architecture.md, "Threads on 2 cores").
  std::atomic<int> async_execution{kAsyncAuto};
  static constexpr int kAsyncOff = 0, kAsyncOn = 1, kAsyncAuto = 2;
  // ember.config.shape_buckets: ascending lengths a varying input dim is padded to
  // (graph_cache.cpp); empty: off. Read with shape_buckets().
  std::vector<int64_t> shape_buckets() const {
    std::lock_guard<std::mutex> l(buckets_mu);
    return buckets;
  }
  void set_shape_buckets(std::vector<int64_t> b) {
    std::lock_guard<std::mutex> l(buckets_mu);
    buckets = std::move(b);
  }

 private:
  mutable std::mutex buckets_mu;
  std::vector<int64_t> buckets;
};
Config& config();
int backend_from_env();  // $EMBER_BACKEND: cpu (default), interpreter, aten (backend.cpp)

// Queues (or, without async_execution, runs) one program computing every pending value.
// Raises an error of an earlier queued program that nothing has reported yet.
void sync(const std::string& reason);
// sync() before the caller waits for one of its values (a value read): with nothing
// else queued, a short program runs on the calling thread (docs/architecture.md,
// "Execution model").
void sync_for_read(const std::string& reason);
// sync(), then waits until every queued program has run.
void sync_and_wait(const std::string& reason);
void maybe_sync_early();
std::string graph_debug_text();  // lazy IR of the pending graph (for debugging)
int64_t cache_size();
int64_t sync_generation();  // number of syncs that ran work (never reset)
// Forgets every compiled graph: the graph cache, the recompile families and the padded
// programs shape bucketing shares between lengths (the disk cache stays).
void clear_cache();

// Hooks set by the Python binding (the core never includes Python.h).
extern std::function<std::string()> g_source_hook;
extern std::function<void(const std::string&)> g_warn_hook;
extern std::function<void(const std::string&, const std::string&)> g_log_hook;  // (kind, text)
std::string current_source();

}  // namespace ember_torch
