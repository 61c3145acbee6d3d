// Device registration: allocator (counted host memory), generator, guard, hooks; the
// process-wide settings (Config), Python hooks and metrics.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <pthread.h>
#include <torch/library.h>

#include <unordered_set>

#include "bridge.h"
#include "ember/runtime/buffer.h"
#include "storage.h"

namespace ember_torch {

// ---------------------------------------------------------------- settings, hooks
std::function<std::string()> g_source_hook;
std::function<void(const std::string&)> g_warn_hook;
std::function<void(const std::string&, const std::string&)> g_log_hook;

Config& config() {
  static Config* c = [] {
    auto* cfg = new Config();
    cfg->backend = backend_from_env();
    return cfg;
  }();
  return *c;
}

std::string current_source() {
  if (!config().record_source.load() || !g_source_hook) return "";
  return g_source_hook();
}

// ---------------------------------------------------------------- metrics
Metrics& metrics() {
  static Metrics* m = new Metrics();
  return *m;
}

void Metrics::clear() {
  std::lock_guard<std::mutex> g(mu);
  syncs = graphs_compiled = memory_cache_hits = disk_cache_hits = 0;
  compile_seconds = execute_seconds = 0;
  transfers_to_device = transfers_to_host = ops_traced = value_reads = 0;
  nodes_executed = extern_copies = meta_cache_hits = meta_cache_misses = early_syncs = 0;
  fallbacks.clear();
  externs.clear();
  value_read_sites.clear();
  lowering_declined.clear();
  lowering_errors.clear();
  lowering_failed_graphs = input_copies = output_copies = relayout_copies = 0;
  kernel_compiles = kernel_disk_hits = donated_buffers = recompiles = tail_ops = 0;
  bucketed_graphs = bucket_reuses = bucket_refusals = 0;
  recompiles_by_reason.clear();
}

// ---------------------------------------------------------------- memory
namespace {
// Device data is counted in the runtime's buffer counters (ember/runtime/buffer.h), so
// one figure covers tensors' device buffers and the executables' own buffers.
void note_alloc(int64_t n) { ember::NoteExternalBytes(n); }

struct Block {
  void* ptr;
  size_t size;
};

void delete_block(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  ember::NoteExternalBytes(-static_cast<int64_t>(b->size));
  c10::free_cpu(b->ptr);
  delete b;
}

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = n ? c10::alloc_cpu(n) : nullptr;  // throws c10::OutOfMemoryError
    auto* b = new Block{p, n};
    note_alloc(static_cast<int64_t>(n));
    // The data lives in host memory; the DataPtr says `cpu` because the buffers are
    // used as CPU tensors by the ATen extern steps. The ember-facing tensors never
    // expose this storage.
    return {p, b, &delete_block, c10::Device(c10::DeviceType::CPU)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// The pinned host allocator for DataLoader(pin_memory=True): plain host memory whose
// blocks are remembered, so `t.is_pinned()` is true for them (and only for them).
std::mutex g_pinned_mu;
std::unordered_set<const void*> g_pinned;

void free_pinned(void* p) {
  {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    g_pinned.erase(p);
  }
  c10::free_cpu(p);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = n ? c10::alloc_cpu(n) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> g(g_pinned_mu);
      g_pinned.insert(p);
    }
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};
}  // namespace

namespace {
// Allocator for storages created directly on ember (torch.UntypedStorage(n, device="ember"),
// storage clones): host memory, counted, with an ember device tag. Without one, torch
// dereferences a null allocator.
struct StorageAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = n ? c10::alloc_cpu(n) : nullptr;
    auto* b = new Block{p, n};
    note_alloc(static_cast<int64_t>(n));
    return {p, b, &delete_block, ember_device()};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};
StorageAllocator g_storage_allocator;
}  // namespace
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_storage_allocator);

c10::Allocator* device_allocator() {
  static DeviceAllocator a;
  return &a;
}
static c10::Allocator* pinned_allocator() {
  static PinnedAllocator a;
  return &a;
}
bool is_device_buffer(const at::Tensor& t) {
  return t.storage().data_ptr().get_deleter() == &delete_block || is_runtime_buffer(t);
}
int64_t memory_allocated() { return ember::GetBufferStats().bytes_in_use; }
int64_t max_memory_allocated() { return ember::GetBufferStats().peak_bytes_in_use; }
void reset_peak_memory_stats() { ember::ResetPeakBufferBytes(); }

at::Tensor alloc_buffer(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dtype,
                        int64_t storage_offset) {
  if (storage_offset == 0) {
    return at::detail::empty_strided_generic(sizes, strides, device_allocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::CPU), dtype);
  }
  // Storage large enough for offset + extent, then restrided.
  int64_t extent = 1;
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) empty = true;
    extent += (sizes[i] - 1) * strides[i];
  }
  int64_t n = empty ? storage_offset : storage_offset + extent;
  auto base = at::detail::empty_generic(
      {n}, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::CPU), dtype, std::nullopt);
  return at::Tensor(base).as_strided(sizes, strides, storage_offset);
}

at::Tensor tensor_over(c10::Storage storage, int64_t storage_offset, at::IntArrayRef sizes,
                       at::IntArrayRef strides, at::ScalarType dtype) {
  TORCH_INTERNAL_ASSERT(sizes.size() == strides.size(),
                        "tensor_over: sizes and strides differ in rank");
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage),
                                                   c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                   c10::scalarTypeToTypeMeta(dtype));
  impl->set_sizes_and_strides(sizes, strides, storage_offset);
  return at::Tensor(std::move(impl));
}

// ---------------------------------------------------------------- generator
namespace {
struct EmberGeneratorImpl final : c10::GeneratorImpl {
  EmberGeneratorImpl()
      : c10::GeneratorImpl(ember_device(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
  }
  // State: 16 bytes, (seed, offset) as two uint64.
  void set_state(const c10::TensorImpl& new_state) override {
    TORCH_CHECK(new_state.numel() == 16 && new_state.dtype() == at::kByte,
                "ember generator state must be a ByteTensor of 16 bytes");
    const uint64_t* p = static_cast<const uint64_t*>(new_state.data());
    seed_ = p[0];
    offset_ = p[1];
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto t = at::empty({16}, at::kByte);
    uint64_t* p = static_cast<uint64_t*>(t.data_ptr());
    p[0] = seed_;
    p[1] = offset_;
    return t.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return kDeviceType; }
  uint64_t seed_ = 67280421310721ULL;
  uint64_t offset_ = 0;

 private:
  EmberGeneratorImpl* clone_impl() const override {
    auto* g = new EmberGeneratorImpl();
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }
};
}  // namespace

at::Generator make_generator() { return at::make_generator<EmberGeneratorImpl>(); }

at::Generator default_generator() {
  static at::Generator g = make_generator();
  return g;
}

bool is_ember_generator(const at::Generator& g) {
  return g.defined() && g.device().type() == kDeviceType;
}

std::pair<uint64_t, uint64_t> next_rng_pair(const std::optional<at::Generator>& gen,
                                            uint64_t draws) {
  at::Generator g = (gen.has_value() && is_ember_generator(*gen)) ? *gen : default_generator();
  std::lock_guard<std::mutex> lock(g.mutex());
  auto* impl = static_cast<EmberGeneratorImpl*>(g.unsafeGetGeneratorImpl());
  uint64_t off = impl->offset_;
  impl->offset_ += (draws + 3) / 4 * 4;  // Philox-style: multiples of 4 draws
  return {impl->seed_, off};
}

// ---------------------------------------------------------------- guard
namespace {
struct EmberGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDeviceType; }
  c10::Device exchangeDevice(c10::Device d) const override { return ember_device(); }
  c10::Device getDevice() const override { return ember_device(); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kDeviceType && (!d.has_index() || d.index() == 0),
                "ember has one device (ember:0), got ", d);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, ember_device());
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, ember_device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {}
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {}
  bool queryStream(const c10::Stream& stream) const override { return true; }
  void synchronizeStream(const c10::Stream& stream) const override {}
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, EmberGuardImpl);

// ---------------------------------------------------------------- hooks
struct EmberHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    static at::Generator g = default_generator();
    return g;
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override { return make_generator(); }
  at::Device getDeviceFromPtr(void* data) const override { return ember_device(); }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    return data && g_pinned.count(data) > 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

std::atomic<bool> g_bad_fork{false};
void on_fork_child() { g_bad_fork.store(true); }

struct Registrar {
  Registrar() {
    at::RegisterPrivateUse1HooksInterface(new EmberHooks());
    pthread_atfork(nullptr, nullptr, &on_fork_child);
  }
} g_registrar;
}  // namespace

bool in_bad_fork() { return g_bad_fork.load(); }

}  // namespace ember_torch

// ---------------------------------------------------------------- autocast
// torch.autocast("ember"): the policy lists torch publishes for backends to reuse
// (lower precision for matmul/conv/linear, fp32 for reductions, softmax, norms, losses).
#include <ATen/autocast_mode.h>

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using at::IntArrayRef;
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;
#define EMBER_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define EMBER_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define EMBER_AUTOCAST_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_LOWER_PRECISION_FP(EMBER_AUTOCAST_LOWER)
  AT_FORALL_FP32(EMBER_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(EMBER_AUTOCAST_FP32_OPT)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#undef EMBER_AUTOCAST_LOWER
#undef EMBER_AUTOCAST_FP32
#undef EMBER_AUTOCAST_FP32_OPT
}
