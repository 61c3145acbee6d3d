// The storage of an ember tensor (docs/architecture.md, "Storage").
//
// A user's ember tensor is a FunctionalTensorWrapper; its `untyped_storage()` is the
// wrapper's FunctionalStorageImpl, shared by every view of one base exactly as eager
// shares a storage (identity: the StorageImpl, Python's `_cdata`). Its size in bytes and
// its device (ember) are metadata: reading them never syncs. Its data pointer is null
// until a byte-level access (`storage_data`) points it at the host bytes of the
// storage's base value, computing a pending value first; the pointer keeps those bytes
// alive (so a sync never donates them) until the tensor is written (the storage lets go
// of it: `release_storage_data`) or the storage is resized or dies.
#pragma once

#include <cstddef>
#include <vector>

#include "bridge.h"

namespace ember_torch {

// Whether `s` is the storage of an ember tensor (a functional storage on the ember
// device).
bool is_ember_storage(const c10::Storage& s);

// Points `s` at its bytes and returns their address (nullptr for a 0-byte storage).
// Applies the storage's queued functional writes, and computes its base when its value
// is pending: a sync counted as a value read (metrics().value_reads). Stable while the
// value lives: a later call returns the same address until the tensor is written.
// Raises for a storage that is not an ember tensor's.
void* storage_data(const c10::Storage& s);

// The bytes of `s`: a CPU uint8 tensor of s.nbytes() elements over them (no copy; it
// keeps them alive). Materializes as storage_data does.
at::Tensor storage_bytes(const c10::Storage& s);

// Replaces every byte of `s` with `bytes` (a CPU tensor of s.nbytes() bytes, any dtype,
// contiguous): the storage's base gets a new value of those bytes and every tensor on the
// storage (views included) sees it, as after an in-place write. Raises on a size mismatch.
void write_storage_bytes(const c10::Storage& s, const at::Tensor& bytes);

// A tensor on `s` with its base's sizes, strides, offset and dtype, sharing `s` as a view
// of the base does (writes through it reach every tensor on `s`): Tensor.set_(storage,
// ...) on ember takes a view of it.
at::Tensor storage_tensor(const c10::Storage& s);

// `storage.resize_(nbytes)` (PrivateUse1 hook): 0 frees the bytes (the tensors on the
// storage then raise when read, until it is resized back); the base's full size gives
// it a new, uninitialized buffer that the next write defines (FSDP2's free/alloc
// pattern). Any other size raises.
void resize_storage_bytes(const c10::Storage& s, size_t nbytes);

// The live states whose device data lies in `buffer` (a device buffer's storage).
// Defined with the state registry (lazy_tensor.cpp).
std::vector<StatePtr> states_on_buffer(const c10::StorageImpl* buffer);

// Called for each ember tensor an op writes: its storage no longer points at the old
// bytes (they are freed when nothing reads them, or donated), and the next byte-level
// access points it at the new value's. One load and compare when it points nowhere.
void release_storage_data_slow(c10::StorageImpl* s);
inline void release_storage_data(const at::Tensor& t) {
  c10::StorageImpl* s = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (s && C10_UNLIKELY(s->data_ptr().get() != nullptr) && s->device_type() == kDeviceType) {
    release_storage_data_slow(s);
  }
}

}  // namespace ember_torch
