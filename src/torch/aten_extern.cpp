// The ATen extern (aten_extern.h).
#include "aten_extern.h"

#include <atomic>
#include <mutex>

#include "binding.h"
#include "lower.h"

namespace ember_torch {
namespace {

std::atomic<int64_t> g_relayout_copies{0};
std::atomic<int64_t> g_extern_copies{0};

// ---------------------------------------------------------------- extern errors
// The exception an ATen custom-call raised in the current run (syncs are serialized).
struct ExternError {
  std::mutex mu;
  std::exception_ptr error;
  int op = -1;
};
ExternError& extern_error() {
  static ExternError* e = new ExternError();
  return *e;
}

// [begin, end) of the bytes `t` reads.
std::pair<uintptr_t, uintptr_t> byte_range(const at::Tensor& t) {
  const auto b = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {b, b + static_cast<uintptr_t>(t.nbytes())};
}

bool overlap(std::pair<uintptr_t, uintptr_t> a, std::pair<uintptr_t, uintptr_t> b) {
  return a.first < b.second && b.first < a.second;
}

// Whether result k can become output k's bytes without a copy (ExternCall::adopted): a
// fresh tensor of exactly the output's dtype, sizes and row-major layout at a 64-byte
// boundary (c10's CPU allocator aligns so), whose bytes alias no input and no other
// result, for an output that is not written in place (a borrowed, donated buffer).
bool can_hand_over(const std::vector<at::Tensor>& results, size_t k, const TensorMeta& m,
                   const ember::ExternCall& call) {
  const at::Tensor& r = results[k];
  if (call.outputs[k]->is_borrowed() || r.scalar_type() != m.dtype || r.sizes() != m.sizes ||
      !r.is_contiguous() || reinterpret_cast<uintptr_t>(r.data_ptr()) % 64 != 0) {
    return false;
  }
  const auto mine = byte_range(r);
  for (const ember::Literal* in : call.inputs) {
    const auto b = reinterpret_cast<uintptr_t>(in->data());
    if (overlap(mine, {b, b + static_cast<uintptr_t>(in->size_bytes())})) return false;
  }
  for (size_t j = 0; j < results.size(); ++j) {
    if (j != k && results[j].defined() && results[j].numel() > 0 &&
        overlap(mine, byte_range(results[j])))
      return false;
  }
  return true;
}

// Keeps `t`'s storage alive for a buffer that borrows it, its bytes counted as device
// data (ember.memory_allocated) while they live.
std::shared_ptr<void> accounted_owner(const at::Tensor& t) {
  const auto n = static_cast<int64_t>(t.storage().nbytes());
  ember::NoteExternalBytes(n);
  return std::shared_ptr<void>(new at::Tensor(t), [n](void* p) {
    delete static_cast<at::Tensor*>(p);
    ember::NoteExternalBytes(-n);
  });
}

}  // namespace

ember::Status run_extern(const ExternState& es, ember::ExternCall& call) {
  try {
    AtenStepIO io;
    // torch's `flexible_layout` tag: the op takes inputs of any strides, so it reads the
    // row-major buffers as they are.
    const bool flexible = es.step.op.hasTag(at::Tag::flexible_layout);
    io.tensor = [&](int o) -> at::Tensor {
      const ember::Literal* in = call.inputs[o];
      const TensorMeta& m = es.operand_metas[o];
      at::Tensor t =
          at::from_blob(const_cast<void*>(in->data()), m.sizes, at::TensorOptions().dtype(m.dtype));
      if (flexible) return t;
      if (m.offset == 0 && row_major(m.sizes, m.strides)) {
        if (m.strides != t.strides().vec()) t = t.as_strided(m.sizes, m.strides);
        return t;
      }
      // Eager had another layout (transposed, expanded, offset): give the op exactly
      // that, in case it reads strides (as_strided and friends).
      g_relayout_copies++;
      return relayout(t, m);
    };
    io.scalar = [&](int j) -> c10::IValue {
      return scalar_ivalue(*call.inputs[es.num_tensors + j], es.scalar_tags[j]);
    };
    io.out_buffer = [&](size_t k) -> at::Tensor {
      const TensorMeta& m = es.step.out_metas[k];
      // A flexible-layout op writes through its outputs' strides too: it gets the
      // row-major buffer whatever layout eager's result has.
      if (flexible) {
        return at::from_blob(call.outputs[k]->data(), m.sizes, at::TensorOptions().dtype(m.dtype));
      }
      if (m.offset != 0 || !row_major(m.sizes, m.strides)) return at::Tensor();
      return at::from_blob(call.outputs[k]->data(), m.sizes, m.strides,
                           at::TensorOptions().dtype(m.dtype));
    };
    io.out_data = [&](size_t k) -> const void* { return call.outputs[k]->data(); };
    io.any_memory = true;  // copied into the outputs or handed over below
    int64_t copies = 0;
    std::vector<at::Tensor> results = run_aten_step(es.step, io, &copies);
    g_extern_copies += copies;  // relaid out to eager's layout, or restrided back
    for (size_t k = 0; k < results.size(); ++k) {
      const TensorMeta& m = es.step.out_metas[k];
      void* dst = call.outputs[k]->data();
      if (results[k].numel() == 0 || results[k].data_ptr() == dst) continue;
      if (can_hand_over(results, k, m, call)) {
        call.adopted.resize(results.size());
        call.adopted[k] = {results[k].data_ptr(), accounted_owner(results[k])};
        continue;
      }
      at::from_blob(dst, m.sizes, at::TensorOptions().dtype(m.dtype)).copy_(results[k]);
      g_extern_copies++;
    }
    return ember::OkStatus();
  } catch (const std::exception& e) {
    auto& ee = extern_error();
    std::lock_guard<std::mutex> l(ee.mu);
    if (!ee.error) {
      ee.error = std::current_exception();
      ee.op = es.op_index;
    }
    std::string msg = es.step.name + ": ";
    if (auto* ce = dynamic_cast<const c10::Error*>(&e))
      msg += ce->what_without_backtrace();
    else
      msg += e.what();
    return ember::Status(ember::StatusCode::kInternal, msg);
  }
}

void clear_extern_error() {
  auto& ee = extern_error();
  std::lock_guard<std::mutex> l(ee.mu);
  ee.error = nullptr;
  ee.op = -1;
}

std::pair<std::exception_ptr, int> take_extern_error() {
  auto& ee = extern_error();
  std::lock_guard<std::mutex> l(ee.mu);
  std::pair<std::exception_ptr, int> r{ee.error, ee.op};
  ee.error = nullptr;
  return r;
}

int64_t extern_relayout_copies() { return g_relayout_copies.load(); }
int64_t extern_result_copies() { return g_extern_copies.load(); }

void register_aten_externs() {
  register_aten_dot_general();
  install_profiler_events();
  // Native kernels split their loops on ATen's intra-op pool (OpenMP in torch's CPU
  // wheels, torch.set_num_threads threads): the pool ATen externs, eager ops and
  // Inductor's kernels use. With the runtime's own pool beside it, two pools share the
  // cores: after each ATen op OpenMP's workers spin-wait for more work while ember's
  // workers need the cores, and the kernel's second half waits on a descheduled thread
  // (docs/performance.md, "Memory-bound kernels in the bridge").
  use_aten_parallel_for();
}

}  // namespace ember_torch
