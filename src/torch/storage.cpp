// The storage of an ember tensor (storage.h).
#include "storage.h"

#include <ATen/EmptyTensor.h>
#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>

#include "execution_queue.h"

namespace ember_torch {
namespace {

using at::functionalization::FunctionalStorageImpl;

// Guards the data pointers of ember storages (several Python threads may access or
// write tensors on one storage). Never held across a sync.
std::mutex g_pin_mu;

// The data pointer's context: the device buffer's own storage, kept alive.
void release_pin(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

FunctionalStorageImpl* functional_storage(const c10::Storage& s) {
  c10::StorageImpl* impl = s.unsafeGetStorageImpl();
  if (!impl || impl->device_type() != kDeviceType) return nullptr;
  return dynamic_cast<FunctionalStorageImpl*>(impl);
}

FunctionalStorageImpl& checked_storage(const c10::Storage& s, const char* what) {
  FunctionalStorageImpl* fs = functional_storage(s);
  TORCH_CHECK(fs, "ember: ", what, " expects the storage of an ember tensor, got a storage on ",
              s.device());
  return *fs;
}

// The storage's base (the inner tensor below functionalization) with every queued
// write applied.
at::Tensor current_base(FunctionalStorageImpl& fs) {
  fs.apply_updates();
  const at::Tensor& base = fs.base();
  TORCH_INTERNAL_ASSERT(lazy_impl(base), "ember: an ember storage whose base is not ember's");
  return base;
}

bool value_pending(const at::Tensor& inner) {
  std::lock_guard<std::mutex> g(state_mutex());
  return lazy_impl(inner)->state()->ir.has_value();
}

// Whether reading the value computes it (pending) or waits for it (in flight): a value
// read, as `.item()` of it would be.
bool must_compute_or_wait(const at::Tensor& inner) {
  std::lock_guard<std::mutex> g(state_mutex());
  const LazyState& s = *lazy_impl(inner)->state();
  return s.ir.has_value() || (s.future && !s.future->ready());
}

void count_value_read() {
  std::string site = current_source();
  std::lock_guard<std::mutex> g(metrics().mu);
  metrics().value_reads++;
  metrics().value_read_sites[site.empty() ? "<unknown>" : site]++;
}

void unpin_locked(c10::StorageImpl& s) {
  if (s.data_ptr().get()) s.set_data_ptr_noswap(c10::DataPtr(nullptr, ember_device()));
}

// The device buffer holding the storage's bytes, with the storage pointing at it.
c10::Storage pin(FunctionalStorageImpl& fs) {
  at::Tensor base = current_base(fs);
  if (must_compute_or_wait(base)) count_value_read();
  at::Tensor data = materialize(base);  // computes a pending value (a sync)
  c10::Storage bytes = data.storage();
  std::lock_guard<std::mutex> g(g_pin_mu);
  void* p = const_cast<void*>(bytes.data());
  if (fs.data_ptr().get() != p) {
    fs.set_data_ptr_noswap(c10::DataPtr(p, new c10::Storage(bytes), &release_pin, ember_device()));
  }
  // A base rebound to a value laid out in fewer bytes (a write to a base at an offset
  // gives a value at offset 0): the storage is that value's bytes.
  if (bytes.nbytes() < fs.nbytes()) fs.set_nbytes(bytes.nbytes());
  return bytes;
}

// A new inner tensor like `base` whose value is unavailable, with `why` as its error.
at::Tensor unavailable_like(const at::Tensor& base, const std::string& why) {
  StatePtr s = new_state();
  {
    std::lock_guard<std::mutex> g(state_mutex());
    s->error = why;
  }
  return at::Tensor(c10::make_intrusive<LazyTensorImpl>(lazy_impl(base)->meta(), std::move(s)));
}

// Gives the storage's base the value `value` (an inner tensor of its layout), as an
// in-place write of the whole base would: the base's state is rebound (so its old
// buffer is released now, not when each tensor on the storage is next used) and a
// functional update makes every tensor on the storage regenerate from it.
void rebind_base(FunctionalStorageImpl& fs, const at::Tensor& base, const at::Tensor& value) {
  assign_state(base, value);
  fs.add_update(base, {});
  fs.apply_updates();
  std::lock_guard<std::mutex> g(g_pin_mu);
  unpin_locked(fs);
}

size_t full_nbytes(const at::Tensor& base) {
  TensorMeta m = lazy_impl(base)->meta();
  return at::detail::computeStorageNbytes(m.sizes, m.strides, c10::elementSize(m.dtype), m.offset);
}

}  // namespace

bool is_ember_storage(const c10::Storage& s) { return functional_storage(s) != nullptr; }

void* storage_data(const c10::Storage& s) {
  FunctionalStorageImpl& fs = checked_storage(s, "UntypedStorage.data_ptr()");
  if (fs.nbytes() == 0) return nullptr;
  return const_cast<void*>(pin(fs).data());
}

at::Tensor storage_bytes(const c10::Storage& s) {
  FunctionalStorageImpl& fs = checked_storage(s, "a byte-level storage access");
  if (fs.nbytes() == 0) return at::empty({0}, at::TensorOptions().dtype(at::kByte));
  const int64_t n = static_cast<int64_t>(fs.nbytes());
  return tensor_over(pin(fs), 0, {n}, {1}, at::kByte);
}

void write_storage_bytes(const c10::Storage& s, const at::Tensor& bytes) {
  FunctionalStorageImpl& fs = checked_storage(s, "a storage write");
  TORCH_CHECK(bytes.device().is_cpu() && bytes.is_contiguous(),
              "ember: internal error: storage bytes must be a contiguous CPU tensor");
  const size_t n = fs.nbytes();
  TORCH_CHECK(static_cast<size_t>(bytes.nbytes()) == n, "ember: writing ", bytes.nbytes(),
              " bytes into an ember storage of ", n, " bytes");
  if (n == 0) return;
  at::Tensor base = current_base(fs);
  TensorMeta m = lazy_impl(base)->meta();
  at::Tensor buf = alloc_buffer(m.sizes, m.strides, m.dtype, m.offset);
  TORCH_INTERNAL_ASSERT(buf.storage().nbytes() >= n);
  std::memcpy(buf.storage().mutable_data(), bytes.const_data_ptr(), n);
  rebind_base(fs, base, make_lazy_data(buf));
}

void resize_storage_bytes(const c10::Storage& s, size_t nbytes) {
  FunctionalStorageImpl& fs = checked_storage(s, "UntypedStorage.resize_()");
  if (nbytes == fs.nbytes()) return;
  at::Tensor base = current_base(fs);
  const size_t full = full_nbytes(base);
  TORCH_CHECK(nbytes == 0 || nbytes == full, "ember: resize_(", nbytes,
              ") of an ember tensor's storage: ember storages resize only to 0 bytes (freeing "
              "them) and back to their tensor's full size (",
              full, " bytes), as FSDP2 does");
  if (nbytes == 0) {
    const std::string why =
        "ember: this tensor has no value: its storage was resized to 0 bytes "
        "(untyped_storage().resize_(0)); resize it back to its full size and write the "
        "tensor before reading it";
    c10::Storage buffer;  // held, so its address names it until the aliases are found
    // A value still in flight: its program finishes first (the bytes it writes are the
    // ones freed).
    if (!value_pending(base)) materialize(base);
    {
      std::lock_guard<std::mutex> g(state_mutex());
      const at::Tensor& d = lazy_impl(base)->state()->data;
      if (d.defined()) buffer = d.storage();
    }
    rebind_base(fs, base, unavailable_like(base, why));
    // Tensors on the storage whose values alias the buffer (a view's, a Parameter's
    // made from a temporary base) let go of it too: the bytes are freed now, not when
    // each of them is next used (they regenerate from the freed base then).
    if (buffer) {
      std::vector<at::Tensor> released;
      for (const StatePtr& st : states_on_buffer(buffer.unsafeGetStorageImpl())) {
        std::lock_guard<std::mutex> g(state_mutex());
        released.push_back(std::move(st->data));
        st->data = at::Tensor();
        st->error = why;
      }
    }
  } else {
    TensorMeta m = lazy_impl(base)->meta();
    rebind_base(fs, base, make_lazy_data(alloc_buffer(m.sizes, m.strides, m.dtype, m.offset)));
  }
  fs.set_nbytes(nbytes);
}

at::Tensor storage_tensor(const c10::Storage& s) {
  FunctionalStorageImpl& fs = checked_storage(s, "Tensor.set_(storage)");
  at::Tensor w = at::functionalization::impl::to_functional_tensor(current_base(fs));
  // Its own functional storage replaced by `s`: the wrapper is the base of `s` (it
  // regenerates from the storage's base on first use, as any tensor on it does).
  w.unsafeGetTensorImpl()->set_storage_keep_dtype(s);
  return w;
}

const c10::Storage& LazyTensorImpl::storage() const {
  std::lock_guard<std::mutex> g(g_pin_mu);
  if (!storage_) {
    TensorMeta m = meta();
    const size_t n =
        at::detail::computeStorageNbytes(m.sizes, m.strides, c10::elementSize(m.dtype), m.offset);
    const_cast<c10::Storage&>(storage_) =
        c10::Storage(c10::Storage::use_byte_size_t(), n, c10::DataPtr(nullptr, ember_device()),
                     /*allocator=*/nullptr, /*resizable=*/false);
  }
  return storage_;
}

void release_storage_data_slow(c10::StorageImpl* s) {
  std::lock_guard<std::mutex> g(g_pin_mu);
  unpin_locked(*s);
}

}  // namespace ember_torch
