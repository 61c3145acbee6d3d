// Binding between torch values and the core runtime's (binding.h), and a lowered run:
// the program's parameters bound to this sync's tensors and scalars, the executable run,
// its failure turned into eager's exception, its results bound with eager's layouts
// (run_lowered, lower.h).
#include "binding.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/flat_hash_map.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <unordered_map>

#include "../ir/log.h"
#include "aten_extern.h"
#include "execution_queue.h"
#include "lower.h"
#include "lowered_program.h"
#include "op_schema.h"

namespace ember_torch {
namespace {

void delete_runtime_buffer(void* ctx) { delete static_cast<ember::BufferRef*>(ctx); }

std::shared_ptr<void> keep_alive(const at::Tensor& t) { return std::make_shared<at::Tensor>(t); }

}  // namespace

// ---------------------------------------------------------------- layouts
// Whether a tensor of `sizes` with `strides` is laid out densely row-major (strides of
// size-1 dimensions do not matter).
bool row_major(at::IntArrayRef sizes, at::IntArrayRef strides) {
  int64_t expect = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] != 1 && strides[d] != expect) return false;
    expect *= sizes[d];
  }
  return true;
}

bool row_major(const at::Tensor& t) { return row_major(t.sizes(), t.strides()); }

// When `t` is not row-major but its elements are a dense row-major block in another
// dimension order (e.g. `w.t()`, a permuted contiguous tensor): that order, outermost
// first (`order[j]` = the logical dimension stored j-th). Empty otherwise.
std::vector<int64_t> dense_permutation(const TensorMeta& m) {
  const int64_t r = static_cast<int64_t>(m.sizes.size());
  int64_t numel = 1;
  for (int64_t s : m.sizes) numel *= s;
  if (r < 2 || numel == 0 || row_major(m.sizes, m.strides)) return {};
  std::vector<int64_t> order(r);
  for (int64_t d = 0; d < r; ++d) order[d] = d;
  const auto& sizes = m.sizes;
  const auto& strides = m.strides;
  // Size-1 dimensions have no meaningful stride: they go innermost, in logical order.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool a1 = sizes[a] == 1, b1 = sizes[b] == 1;
    if (a1 != b1) return b1;
    return !a1 && strides[a] > strides[b];
  });
  std::vector<int64_t> ps(r), pst(r);
  for (int64_t j = 0; j < r; ++j) {
    ps[j] = sizes[order[j]];
    pst[j] = strides[order[j]];
  }
  if (!row_major(ps, pst)) return {};
  return order;
}

std::vector<int64_t> dense_permutation(const at::Tensor& t) {
  return dense_permutation(meta_of(t));
}

// ---------------------------------------------------------------- runtime buffers as tensors
// A CPU tensor over `buf`'s bytes (which it keeps alive) with sizes/strides of `m`.
TensorMeta row_major_meta(const TensorMeta& m) {
  TensorMeta r = m;
  auto cs = c10::contiguous_strides(r.sizes);
  r.strides.assign(cs.begin(), cs.end());
  r.offset = 0;
  return r;
}

at::Tensor wrap_buffer(const ember::BufferRef& buf, const TensorMeta& m) {
  void* data = buf->data();
  c10::DataPtr dp(data, new ember::BufferRef(buf), &delete_runtime_buffer, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), buf->literal().size_bytes(), std::move(dp),
                       nullptr, false);
  return tensor_over(std::move(storage), 0, m.sizes, m.strides, m.dtype);
}

// A device buffer laid out exactly as `m` holding the values of `src` (same sizes).
// Broadcast (stride-0) dimensions take the first element along them; a layout whose
// elements still overlap cannot be written and gets a dense copy instead.
at::Tensor relayout(const at::Tensor& src, const TensorMeta& m) {
  at::Tensor r = alloc_buffer(m.sizes, m.strides, m.dtype, m.offset);
  at::Tensor s = src, d = r;
  for (int64_t i = 0; i < static_cast<int64_t>(m.sizes.size()); ++i) {
    if (m.strides[i] == 0 && m.sizes[i] > 1) {
      s = s.narrow(i, 0, 1);
      d = d.narrow(i, 0, 1);
    }
  }
  if (at::has_internal_overlap(d) == at::MemOverlap::Yes) {
    at::Tensor dense = alloc_buffer(m.sizes, c10::contiguous_strides(m.sizes), m.dtype, 0);
    dense.copy_(src);
    return dense;
  }
  d.copy_(s);
  return r;
}

// ---------------------------------------------------------------- scalars
std::optional<ember::DType> scalar_dtype(int tag) {
  switch (tag) {
    case 1:
      return ember::DType::kF64;
    case 2:
      return ember::DType::kS64;
    case 3:
      return ember::DType::kPred;
    case 4:
      return ember::DType::kC128;
    case kRngTag:
      return ember::DType::kU64;
  }
  return std::nullopt;
}

ember::Literal scalar_literal(const c10::IValue& v, int tag) {
  switch (tag) {
    case 1:
      return ember::Literal::ScalarDouble(ember::DType::kF64, v.toDouble());
    case 2:
      return ember::Literal::ScalarInt(ember::DType::kS64, v.toInt());
    case 3:
      return ember::Literal::ScalarInt(ember::DType::kPred, v.toBool() ? 1 : 0);
    case 4: {
      ember::Literal lit(ember::Shape(ember::DType::kC128, {}));
      auto c = v.toComplexDouble();
      double parts[2] = {c.real(), c.imag()};
      std::memcpy(lit.data(), parts, sizeof(parts));
      return lit;
    }
    default:
      return ember::Literal::ScalarInt(ember::DType::kU64, v.toInt());
  }
}

c10::IValue scalar_ivalue(const ember::Literal& lit, int tag) {
  switch (tag) {
    case 1:
      return c10::IValue(lit.GetDouble(0));
    case 2:
      return c10::IValue(lit.GetInt(0));
    case 3:
      return c10::IValue(lit.GetInt(0) != 0);
    case 4:
      return c10::IValue(c10::complex<double>(lit.GetComplex(0).real(), lit.GetComplex(0).imag()));
    default:
      return c10::IValue(lit.GetInt(0));
  }
}

// ---------------------------------------------------------------- a lowered run
namespace {

// Input `t` (the real length n along its padded dims) in a zero-filled row-major tensor
// of the padded parameter shape `shape`.
at::Tensor pad_input(const at::Tensor& t, const ember::Shape& shape, int64_t n) {
  at::Tensor padded = at::zeros(shape.dims(), t.options().device(at::kCPU));
  at::Tensor real = padded;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (shape.dim(static_cast<int>(d)) != t.size(d)) real = real.narrow(d, 0, t.size(d));
  real.copy_(t);
  return padded;
}

// The real positions of a padded output `buf` (a dim padded as outer * N * inner keeps
// (p / inner) % N < n), a CPU tensor of `m`'s sizes (not yet `m`'s strides).
at::Tensor real_positions(const ember::BufferRef& buf,
                          const std::vector<ember::passes::DimPadding>& pads, const TensorMeta& m,
                          int64_t n) {
  const ember::Shape& s = buf->literal().shape();
  TensorMeta padded = m;
  padded.sizes = s.dims();
  at::Tensor t = wrap_buffer(buf, row_major_meta(padded));
  // Split each padded dim into [outer, N, inner] and narrow N to n.
  std::vector<int64_t> split;
  std::vector<std::pair<int64_t, int64_t>> narrow;  // (dim of `split`, n)
  for (size_t d = 0; d < pads.size(); ++d) {
    if (!pads[d].padded) {
      split.push_back(s.dim(static_cast<int>(d)));
      continue;
    }
    const int64_t N = s.dim(static_cast<int>(d)) / (pads[d].outer * pads[d].inner);
    split.insert(split.end(), {pads[d].outer, N, pads[d].inner});
    narrow.emplace_back(static_cast<int64_t>(split.size()) - 2, n);
  }
  t = t.view(split);
  for (auto [d, len] : narrow) t = t.narrow(d, 0, len);
  return t.reshape(m.sizes);
}

// Fills `out` for a run that failed with `s`: the lazy op that failed (an extern's
// stashed exception, or the core node the status names, through its metadata), the
// roots that depend on it, and the exception to raise: eager's type naming the op.
void fail_run(const LoweredProgram& p, const LazyGraph& g, const ember::Status& s,
              LoweredRun& out) {
  auto [stashed, op] = take_extern_error();
  if (!stashed) {
    // A core kernel failed: the message names the node ("gather %12: ..."); its
    // metadata names the lazy op ("aten::gather.default #3 @ file.py:7").
    const ember::Graph& cg = p.exe->graph();
    const std::string& m = s.message();
    auto op_from_meta = [](const std::string& md) -> int {
      auto h = md.find(" #");
      if (h == std::string::npos) return -1;
      return std::atoi(md.c_str() + h + 2);
    };
    for (size_t pos = m.find('%'); pos != std::string::npos && op < 0; pos = m.find('%', pos + 1)) {
      int id = std::atoi(m.c_str() + pos + 1);
      if (id < 0 || id >= cg.num_nodes()) continue;
      const ember::Node& nd = cg.node(id);
      if (out.root_failed.empty()) {
        // The roots that depend on the failing node, by the compiled graph's edges.
        std::vector<bool> dep(cg.num_nodes(), false);
        for (const ember::Node& x : cg.nodes()) {
          dep[x.id] = x.id == id;
          for (ember::NodeId o : x.operands) dep[x.id] = dep[x.id] || dep[o];
        }
        for (ember::NodeId o : cg.outputs()) out.root_failed.push_back(dep[o]);
      }
      op = op_from_meta(nd.metadata);
      if (op < 0 && nd.called) {
        // A fusion: the first body node whose op the message names.
        for (const ember::Node& inner : nd.called->nodes()) {
          if (inner.metadata.empty()) continue;
          if (m.find(std::string(ember::OpName(inner.op)) + " ") != std::string::npos ||
              m.find(std::string(ember::OpName(inner.op)) + ":") != std::string::npos) {
            op = op_from_meta(inner.metadata);
            if (op >= 0) break;
          }
        }
        if (op < 0 && !nd.called->outputs().empty()) {
          // Otherwise the op whose value the fusion computes (its body's output).
          op = op_from_meta(nd.called->node(nd.called->outputs()[0]).metadata);
        }
      }
    }
  }
  out.failed_op = op;
  const Node* n = op >= 0 && op < static_cast<int>(g.ops.size()) ? g.ops[op] : nullptr;
  std::string name = n ? op_name(n->op->schema()) : "the compiled graph";
  try {
    if (stashed) {
      try {
        std::rethrow_exception(stashed);
      } catch (const std::exception& e) {
        rethrow_at(e, name, n);
      }
    }
    // Eager raises IndexError for bad indices, except in these ops (RuntimeError).
    static const std::set<std::string> runtime_error_ops = {
        "aten::gather",         "aten::scatter",   "aten::scatter_add",
        "aten::scatter_reduce", "aten::index_add", "aten::index_reduce"};
    if (s.code() == ember::StatusCode::kOutOfRange &&
        !(n && runtime_error_ops.count(n->op->schema().name()))) {
      c10::IndexError ie({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, s.message());
      rethrow_at(ie, name, n);
    }
    if (s.code() == ember::StatusCode::kResourceExhausted) {
      throw c10::OutOfMemoryError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
          "ember: out of memory while running " + name +
              (n && !n->source.empty() ? " (traced at " + n->source + ")" : "") + ": " +
              s.message());
    }
    std::string msg = s.message();
    if (msg.find("donated parameters already overwritten") != std::string::npos) {
      msg +=
          " [ember: those parameters are inputs whose device buffers no live tensor "
          "referenced (donated for an in-place update); every tensor you hold is intact]";
    }
    c10::Error ce({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
    rethrow_at(ce, name, n);
  } catch (...) {
    out.error = std::current_exception();
  }
}

}  // namespace

thread_local RunTiming g_run_timing;

LoweredRun run_lowered(const LoweredProgram& p, const LazyGraph& g,
                       const std::vector<bool>& donated, const std::vector<bool>& wanted) {
  static const bool timed = ember::LogEnabled("sync");
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  Clock::time_point t0, t1, t2;
  if (timed) t0 = Clock::now();
  LoweredRun out;
  std::vector<ember::BufferRef> args;
  std::vector<at::Tensor> arg_tensors(p.params.size());  // the tensor each input borrows
  args.reserve(p.params.size());
  int64_t input_copies = 0;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const ParamSrc& src = p.params[i];
    if (src.kind == ParamSrc::kScalar) {
      args.push_back(ember::Buffer::FromLiteral(scalar_literal(g.scalars[src.index], src.tag)));
      continue;
    }
    if (src.kind == ParamSrc::kLength) {
      args.push_back(
          ember::Buffer::FromLiteral(ember::Literal::ScalarInt(ember::DType::kS64, p.pad_length)));
      continue;
    }
    at::Tensor t = g.inputs[src.index];
    if (p.pad_length && ember::passes::AnyPadded(p.param_pads[i])) {
      t = pad_input(t, p.param_shapes[i], p.pad_length);
      input_copies++;
    } else if (!src.permuted && !row_major(t)) {
      t = t.contiguous();
      input_copies++;
    }
    arg_tensors[i] = t;
    auto buf =
        ember::Buffer::Borrow(p.param_shapes[i], t.numel() ? t.data_ptr() : nullptr, keep_alive(t));
    if (!buf.ok()) {
      out.error =
          std::make_exception_ptr(c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                             "ember: internal error: " + buf.status().message()));
      return out;
    }
    args.push_back(std::move(buf).value());
  }
  clear_extern_error();
  ember::ExecuteOptions eo;
  // On the queue's worker a KeyboardInterrupt during a wait stops the run between steps.
  if (ExecutionQueue::on_worker()) eo.cancel = ExecutionQueue::get().cancel_flag();
  std::vector<int> param_of_input(g.inputs.size(), -1);
  for (size_t i = 0; i < p.params.size(); ++i) {
    if (p.params[i].kind == ParamSrc::kInput)
      param_of_input[p.params[i].index] = static_cast<int>(i);
  }
  int64_t donated_n = 0;
  if (!donated.empty() && !p.pad_length) {  // a padded program aliases nothing
    eo.donated.assign(p.params.size(), false);
    for (size_t i = 0; i < donated.size(); ++i) {
      if (donated[i] && param_of_input[i] >= 0) {
        eo.donated[param_of_input[i]] = true;
        donated_n++;
      }
    }
  }
  const int64_t relayout0 = extern_relayout_copies(), extern0 = extern_result_copies();
  ember::StatusOr<std::vector<ember::BufferRef>> res =
      ember::Status(ember::StatusCode::kInternal, "not run");
  if (timed) t1 = Clock::now();
  try {
    res = p.exe->Run(args, eo);
  } catch (const std::bad_alloc&) {
    res = ember::Status(ember::StatusCode::kResourceExhausted, "out of memory");
  }
  if (timed) {
    t2 = Clock::now();
    g_run_timing = RunTiming{us(t0, t1), us(t1, t2), 0};
  }
  {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().input_copies += input_copies;
    metrics().relayout_copies += extern_relayout_copies() - relayout0;
    metrics().extern_copies += extern_result_copies() - extern0;
    metrics().donated_buffers += donated_n;
    if (res.ok()) {
      for (const auto& kv : p.stats.externs) metrics().externs[kv.first] += kv.second;
      metrics().nodes_executed += static_cast<int64_t>(p.exe->steps().size());
    }
  }
  if (!res.ok()) {
    fail_run(p, g, res.status(), out);
    return out;
  }
  // Bind: exactly eager's sizes / strides / offset.
  int64_t out_copies = 0;
  // One buffer returned for several roots (one core value: detach, clone, values CSE
  // merged): only one tensor storage may wrap it. Two storages over one buffer would
  // each look unreferenced to a later sync, which could then donate one and so
  // overwrite the other's values. A view root shares the storage of the root that
  // wraps the buffer (as eager's view shares its base's); any other root is copied.
  // Buffers are compared by their bytes: an extern's tuple element comes back as a
  // buffer of its own (its bytes moved out of the tuple, or over a donated argument it
  // was written in, or borrowed from a tuple that is also returned whole).
  ska::flat_hash_map<const void*, size_t> wrapped_by;  // bytes -> root wrapping them
  wrapped_by.reserve(res->size());
  // The tensor argument whose bytes start at an address (an output there is that
  // argument, returned or, donated, written in place).
  ska::flat_hash_map<const void*, size_t> arg_at;
  arg_at.reserve(args.size());
  for (size_t a = 0; a < args.size(); ++a) {
    if (arg_tensors[a].defined() && args[a]->literal().size_bytes() > 0)
      arg_at.emplace(args[a]->data(), a);
  }
  out.outputs.reserve(res->size());
  for (size_t i = 0; i < res->size(); ++i) {
    if (!wanted.empty() && !wanted[i]) {
      out.outputs.emplace_back();  // not read by the caller: bound to nothing
      continue;
    }
    const ember::BufferRef& buf = (*res)[i];
    const TensorMeta* m = &p.output_metas[i];
    if (p.pad_length && ember::passes::AnyPadded(p.output_pads[i])) {
      out_copies++;
      out.outputs.push_back(relayout(real_positions(buf, p.output_pads[i], *m, p.pad_length), *m));
      continue;
    }
    // (Empty buffers can report one address, seen on the interpreter backend for empty
    // LU pivots and their LU: they share nothing.)
    const void* bytes = buf->literal().size_bytes() > 0 ? buf->data() : nullptr;
    // Borrowed: an argument's bytes (an input returned, or a donated one written in
    // place), or a tuple element left in its tuple (copied out below: a tensor over it
    // would keep the whole tuple alive).
    const bool borrowed = buf->literal().is_borrowed();
    auto at_arg = borrowed && bytes ? arg_at.find(bytes) : arg_at.end();
    auto w = bytes ? wrapped_by.find(bytes) : wrapped_by.end();
    if (w != wrapped_by.end()) {
      const at::Tensor& base = out.outputs[w->second];
      if (p.output_views[i] && m->offset == 0 && row_major(m->sizes, m->strides) &&
          base.scalar_type() == m->dtype) {
        out.outputs.push_back(tensor_over(base.storage(), 0, m->sizes, m->strides, m->dtype));
      } else {
        out_copies++;
        out.outputs.push_back(relayout(wrap_buffer(buf, row_major_meta(*m)), *m));
      }
      continue;
    }
    const bool donated_out = at_arg != arg_at.end() && eo.donated.size() > at_arg->second &&
                             eo.donated[at_arg->second] &&
                             arg_tensors[at_arg->second].scalar_type() == m->dtype;
    // An extern's result handed over (ember::Buffer::adopted) is borrowed too, but its
    // bytes are its own: wrapped like an owned buffer.
    if (m->offset == 0 && row_major(m->sizes, m->strides) &&
        (!borrowed || donated_out || buf->adopted())) {
      if (borrowed && !buf->adopted()) {
        // A donated input written in place: its tensor is the result, a tensor of its
        // own over the input's storage, not a view of the input tensor (a view would
        // keep the input alive as its base: one more storage reference, and the next
        // step could not donate the buffer).
        const at::Tensor& t = arg_tensors[at_arg->second];
        out.outputs.push_back(
            tensor_over(t.storage(), t.storage_offset(), m->sizes, m->strides, t.scalar_type()));
      } else {
        out.outputs.push_back(wrap_buffer(buf, *m));
        if (bytes) wrapped_by[bytes] = i;
      }
      continue;
    }
    out_copies++;
    out.outputs.push_back(relayout(wrap_buffer(buf, row_major_meta(*m)), *m));
  }
  if (out_copies) {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().output_copies += out_copies;
  }
  if (timed) g_run_timing.outputs_us = us(t2, Clock::now());
  return out;
}

bool is_runtime_buffer(const at::Tensor& t) {
  return t.has_storage() && t.storage().data_ptr().get_deleter() == &delete_runtime_buffer;
}

bool is_exclusive_runtime_buffer(const at::Tensor& t) {
  if (!is_runtime_buffer(t)) return false;
  const auto* ref = static_cast<const ember::BufferRef*>(t.storage().data_ptr().get_context());
  return ref && ref->use_count() == 1 && !(*ref)->literal().is_borrowed();
}

}  // namespace ember_torch
