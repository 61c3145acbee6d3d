// Lowering a lazy graph to one core graph, compiling it with the core runtime and
// running it (see lower.h and docs/architecture.md, "Lowering").
#include "lower.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/ScalarType.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#include "../ir/log.h"
#include "dtype_map.h"
#include "ember/codegen/cpu.h"
#include "ember/eval/extern_registry.h"
#include "ember/ir/builder.h"
#include "ember/lowering/aten.h"
#include "ember/runtime/buffer.h"
#include "ember/runtime/executable.h"

namespace ember_torch {

const char* backend_name(int b) {
  switch (b) {
    case 0:
      return "cpu";
    case 1:
      return "interpreter";
    case 2:
      return "aten";
  }
  return "?";
}

int parse_backend(const std::string& s) {
  if (s == "cpu") return 0;
  if (s == "interpreter") return 1;
  if (s == "aten") return 2;
  return -1;
}

int backend_from_env() {
  // Default: cpu (lowered, fused, native kernels; docs/architecture.md, "Lowering").
  const char* e = std::getenv("EMBER_BACKEND");
  if (!e || !*e) return 0;
  int b = parse_backend(e);
  if (b < 0) {
    std::fprintf(stderr,
                 "ember: EMBER_BACKEND=%s is not one of cpu, interpreter, aten; using cpu\n", e);
    return 0;
  }
  return b;
}

namespace {

bool log_lowering() {
  static const bool on = [] {
    const char* e = std::getenv("EMBER_LOG");
    return e && std::strstr(e, "lowering") != nullptr;
  }();
  return on;
}

void log_line(const std::string& s) {
  if (log_lowering()) std::fprintf(stderr, "ember[lowering]: %s\n", s.c_str());
}

// ---------------------------------------------------------------- layouts
// Whether a tensor of `sizes` with `strides` is laid out densely row-major (strides of
// size-1 dimensions do not matter).
bool row_major(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t expect = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] != 1 && strides[d] != expect) return false;
    expect *= sizes[d];
  }
  return true;
}

bool row_major(const at::Tensor& t) { return row_major(t.sizes().vec(), t.strides().vec()); }

// When `t` is not row-major but its elements are a dense row-major block in another
// dimension order (e.g. `w.t()`, a permuted contiguous tensor): that order, outermost
// first (`order[j]` = the logical dimension stored j-th). Empty otherwise.
std::vector<int64_t> dense_permutation(const at::Tensor& t) {
  const int64_t r = t.dim();
  if (r < 2 || t.numel() == 0 || row_major(t)) return {};
  std::vector<int64_t> order(r);
  for (int64_t d = 0; d < r; ++d) order[d] = d;
  auto sizes = t.sizes();
  auto strides = t.strides();
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

// ---------------------------------------------------------------- runtime buffers as tensors
void delete_runtime_buffer(void* ctx) { delete static_cast<ember::BufferRef*>(ctx); }

// A CPU tensor over `buf`'s bytes (which it keeps alive) with sizes/strides of `m`.
at::Tensor wrap_buffer(const ember::BufferRef& buf, const TensorMeta& m) {
  void* data = buf->data();
  c10::DataPtr dp(data, new ember::BufferRef(buf), &delete_runtime_buffer, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), buf->literal().size_bytes(), std::move(dp),
                       nullptr, false);
  at::Tensor t = at::empty({0}, at::TensorOptions().dtype(m.dtype));
  t.set_(storage, 0, m.sizes, m.strides);
  return t;
}

std::shared_ptr<void> keep_alive(const at::Tensor& t) {
  return std::shared_ptr<void>(new at::Tensor(t),
                               [](void* p) { delete static_cast<at::Tensor*>(p); });
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

// ---------------------------------------------------------------- scalars
// Scalar parameter kinds: 1 double (f64), 2 int (s64), 3 bool (pred), 4 complex (c128),
// 6 an rng seed or offset (u64).
constexpr int kRngTag = 6;

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

// ---------------------------------------------------------------- ATen custom-calls
struct ExternState {
  explicit ExternState(AtenStep s) : step(std::move(s)) {}
  AtenStep step;                          // tensor refs: operand index; scalar refs: local index
  int op_index = -1;                      // in LazyGraph::ops
  std::vector<TensorMeta> operand_metas;  // recorded layout of each tensor operand
  int num_tensors = 0;                    // custom-call operands [0, n) are tensors
  std::vector<int> scalar_tags;           // per local scalar (operand num_tensors + j)
};

ember::Status run_extern(const ExternState& es, ember::ExternCall& call) {
  try {
    AtenStepIO io;
    io.tensor = [&](int o) -> at::Tensor {
      const ember::Literal* in = call.inputs[o];
      const TensorMeta& m = es.operand_metas[o];
      at::Tensor t =
          at::from_blob(const_cast<void*>(in->data()), m.sizes, at::TensorOptions().dtype(m.dtype));
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
      if (m.offset != 0 || !row_major(m.sizes, m.strides)) return at::Tensor();
      return at::from_blob(call.outputs[k]->data(), m.sizes, m.strides,
                           at::TensorOptions().dtype(m.dtype));
    };
    int64_t copies = 0;
    std::vector<at::Tensor> results = run_aten_step(es.step, io, &copies);
    for (size_t k = 0; k < results.size(); ++k) {
      const TensorMeta& m = es.step.out_metas[k];
      void* dst = call.outputs[k]->data();
      if (results[k].numel() == 0 || results[k].data_ptr() == dst) continue;
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

// ---------------------------------------------------------------- argument conversion
namespace L = ember::lowering;

c10::TypePtr unwrap_optional(c10::TypePtr t) {
  if (auto o = t->cast<c10::OptionalType>()) return o->getElementType();
  return t;
}

L::Arg plain_arg(const c10::IValue& v, const c10::Argument& schema_arg) {
  L::Arg a;
  if (v.isNone()) return a;
  auto type = unwrap_optional(schema_arg.type());
  auto kind = type->kind();
  if (kind == c10::TypeKind::ScalarTypeType && v.isInt()) {
    auto d = to_ir_dtype(static_cast<c10::ScalarType>(v.toInt()));
    if (d) {
      a.kind = L::Arg::Kind::kDType;
      a.dtype = *d;
    } else {
      a.kind = L::Arg::Kind::kOther;
    }
    return a;
  }
  if (kind == c10::TypeKind::LayoutType || kind == c10::TypeKind::MemoryFormatType ||
      kind == c10::TypeKind::DeviceObjType || kind == c10::TypeKind::GeneratorType) {
    a.kind = L::Arg::Kind::kOther;
    return a;
  }
  if (v.isBool()) {
    a.kind = L::Arg::Kind::kBool;
    a.b = v.toBool();
  } else if (v.isInt()) {
    a.kind = L::Arg::Kind::kInt;
    a.i = v.toInt();
  } else if (v.isSymInt()) {
    a.kind = L::Arg::Kind::kInt;
    a.i = v.toSymInt().expect_int();
  } else if (v.isIntList()) {
    a.kind = L::Arg::Kind::kIntList;
    a.ints = v.toIntVector();
  } else if (v.isSymIntList()) {
    a.kind = L::Arg::Kind::kIntList;
    auto l = v.toSymIntList();
    for (size_t i = 0; i < l.size(); ++i) a.ints.push_back(l.get(i).expect_int());
  } else if (v.isBoolList()) {
    a.kind = L::Arg::Kind::kBoolList;
    for (bool b : v.toBoolList()) a.bools.push_back(b);
  } else if (v.isDoubleList()) {
    a.kind = L::Arg::Kind::kDoubleList;
    a.doubles = v.toDoubleVector();
  } else if (v.isString()) {
    a.kind = L::Arg::Kind::kString;
    a.s = v.toStringRef();
  } else if (v.isDouble()) {
    a.kind = L::Arg::Kind::kDoubleList;  // a plain float attribute (not a Scalar input)
    a.doubles = {v.toDouble()};
  } else {
    a.kind = L::Arg::Kind::kOther;
  }
  return a;
}

std::string shape_str(const ember::Shape& s) { return s.ToString(); }

}  // namespace

// ---------------------------------------------------------------- the program
struct ParamSrc {
  enum Kind : uint8_t { kInput, kScalar } kind = kInput;
  int index = 0;  // g.inputs / g.scalars
  int tag = 0;    // scalar kind (kScalar)
  // kInput: the tensor is a dense permutation of a row-major layout (a transposed
  // weight): the parameter is that row-major layout, borrowed as is, and a transpose
  // node gives the graph the logical order (see dense_permutation).
  bool permuted = false;
};

struct LoweredProgram {
  Backend backend = Backend::kCpu;
  std::shared_ptr<ember::Executable> exe;
  std::vector<ParamSrc> params;
  std::vector<ember::Shape> param_shapes;
  std::vector<TensorMeta> output_metas;  // per root: eager's layout of the result
  // Per root: eager returns a view (detach, reshape, ...): when the executable hands
  // out one buffer for several roots, a view shares the first root's storage and any
  // other root gets its own copy (as eager's clone does).
  std::vector<bool> output_views;
  GraphStats stats;
  std::vector<std::shared_ptr<ExternState>> externs;  // kept alive with the executable
};

const GraphStats& program_stats(const LoweredProgram& p) { return p.stats; }

namespace {

struct Lowerer {
  const LazyGraph& g;
  ember::GraphBuilder b;
  std::vector<ParamSrc> params;
  std::unordered_map<int, ember::NodeId> slot_param;    // leaf slot -> parameter (or its transpose)
  std::set<size_t> permuted_inputs;                     // g.inputs read through a transpose
  std::unordered_map<int, ember::NodeId> scalar_param;  // scalar index -> parameter
  std::unordered_map<const Node*, std::vector<ember::NodeId>> values;  // per output
  std::map<std::string, ember::ExternKernel> kernels;
  std::vector<std::shared_ptr<ExternState>> externs;
  GraphStats stats;

  explicit Lowerer(const LazyGraph& graph) : g(graph), b("ember_lazy") {}

  ember::NodeId new_param(const ember::Shape& shape, ParamSrc src) {
    ember::NodeId id = b.Parameter(static_cast<int64_t>(params.size()), shape);
    params.push_back(src);
    return id;
  }

  ember::NodeId scalar(int j, int tag) {
    auto it = scalar_param.find(j);
    if (it != scalar_param.end()) return it->second;
    ember::NodeId id =
        new_param(ember::Shape(*scalar_dtype(tag), {}), ParamSrc{ParamSrc::kScalar, j, tag});
    scalar_param[j] = id;
    return id;
  }

  int tag_of(int j) const { return static_cast<int>(scalar_tag(g.scalars[j])); }

  ember::NodeId value(const Value& v) {
    if (v.node->kind != NodeKind::kOp) return slot_param.at(slot_of(g, v));
    return values.at(v.node.get()).at(v.index);
  }

  // Inputs and scalars first, so parameter numbers follow the graph's order.
  std::string lower_inputs() {
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const at::Tensor& t = g.inputs[i];
      auto d = to_ir_dtype(t.scalar_type());
      if (!d)
        return std::string("input of dtype ") + c10::toString(t.scalar_type()) + " has no IR dtype";
      std::vector<int64_t> order = dense_permutation(t);
      if (order.empty()) {
        slot_param[g.input_slots[i]] = new_param(
            ember::Shape(*d, t.sizes().vec()), ParamSrc{ParamSrc::kInput, static_cast<int>(i), 0});
        continue;
      }
      // Borrowed in its stored order, read through a transpose (which simplify folds
      // into a dot-general's dimension numbers): no copy per run.
      std::vector<int64_t> stored(order.size()), perm(order.size());
      for (size_t j = 0; j < order.size(); ++j) {
        stored[j] = t.size(order[j]);
        perm[order[j]] = static_cast<int64_t>(j);
      }
      ember::NodeId pid = new_param(ember::Shape(*d, stored),
                                    ParamSrc{ParamSrc::kInput, static_cast<int>(i), 0, true});
      slot_param[g.input_slots[i]] = b.Transpose(pid, perm);
      permuted_inputs.insert(i);
    }
    return "";
  }

  std::string lower_op(int k, int* next_scalar, const std::set<int>& force_extern) {
    Node* n = g.ops[k];
    const int s0 = *next_scalar;
    AtenStep st = make_aten_step(
        *n, [](int o) { return o; }, next_scalar);
    const auto& schema = n->op->schema();
    // Which scalar indices are rng (seed, offset) pairs.
    std::set<int> rng_scalars;
    for (size_t i = 0; i < st.kinds.size(); ++i) {
      if (st.kinds[i] == ArgKind::kGenerator) {
        rng_scalars.insert(st.refs[i][0]);
        rng_scalars.insert(st.refs[i][0] + 1);
      }
    }
    if (st.seed_idx >= 0) {
      rng_scalars.insert(st.seed_idx);
      rng_scalars.insert(st.seed_idx + 1);
    }
    auto tag = [&](int j) { return rng_scalars.count(j) ? kRngTag : tag_of(j); };
    for (int j = s0; j < *next_scalar; ++j) {
      if (!scalar_dtype(tag(j))) {
        return st.name + ": a Scalar argument of kind " + g.scalars[j].tagKind() +
               " has no IR dtype";
      }
    }
    // Output metadata: written arguments first, then the returns.
    std::vector<L::OutputMeta> outs;
    std::vector<int> out_of_node;  // per AtenCall output: node output index or -1
    for (const auto& m : n->outputs) {
      auto d = to_ir_dtype(m.dtype);
      if (!d)
        return st.name + ": an output of dtype " + c10::toString(m.dtype) + " has no IR dtype";
    }
    {
      size_t written_outs = n->outputs.size();
      if (!n->ret_shape.empty()) {
        size_t ret_outs = 0;
        for (int r : n->ret_shape) ret_outs += r == -1 ? 1 : (r >= 0 ? r : 0);
        written_outs = n->outputs.size() - ret_outs;
      }
      int oi = 0;
      auto push = [&](bool defined) {
        L::OutputMeta om;
        om.defined = defined;
        if (defined) {
          const auto& m = n->outputs[oi];
          om.dtype = *to_ir_dtype(m.dtype);
          om.sizes = m.sizes;
          out_of_node.push_back(oi++);
        } else {
          out_of_node.push_back(-1);
        }
        outs.push_back(std::move(om));
      };
      for (size_t w = 0; w < written_outs; ++w) push(true);
      for (int r : n->ret_shape) {
        if (r == -1)
          push(true);
        else if (r == -2)
          push(false);
        else if (r >= 0)
          for (int j = 0; j < r; ++j) push(true);
      }
    }
    std::string meta = st.name + " #" + std::to_string(k);
    if (!n->source.empty()) meta += " @ " + n->source;
    b.SetDefaultMetadata(meta);

    auto fn = L::LoweringTable::Get().Find(st.name);
    if (fn && !force_extern.count(k)) {
      L::AtenCall call;
      call.op = st.name;
      call.source = n->source;
      for (size_t i = 0; i < st.kinds.size(); ++i) {
        L::Arg a;
        const auto& refs = st.refs[i];
        auto targ = [&](int o) {
          L::TensorArg ta;
          const Value& v = n->operands[o];
          const TensorMeta& m = v.node->outputs[v.index];
          ta.value = value(v);
          ta.dtype = *to_ir_dtype(m.dtype);
          ta.sizes = m.sizes;
          ta.wrapped_number = v.node->kind == NodeKind::kHost &&
                              v.node->data.unsafeGetTensorImpl()->is_wrapped_number();
          return ta;
        };
        auto sarg = [&](int j) {
          L::ScalarArg sa;
          int t = tag(j);
          sa.value = scalar(j, t);
          sa.kind = t == 1 ? L::ScalarArg::Kind::kFloat
                           : (t == 3 ? L::ScalarArg::Kind::kBool : L::ScalarArg::Kind::kInt);
          return sa;
        };
        switch (st.kinds[i]) {
          case ArgKind::kPlain:
            a = plain_arg(n->args[i], schema.arguments()[i]);
            break;
          case ArgKind::kTensor:
            if (refs[0] >= 0) {
              a.kind = L::Arg::Kind::kTensor;
              a.tensor = targ(refs[0]);
            }
            break;
          case ArgKind::kTensorList:
          case ArgKind::kOptTensorList:
            a.kind = L::Arg::Kind::kTensorList;
            for (int o : refs) {
              if (o < 0)
                a.tensors.push_back(std::nullopt);
              else
                a.tensors.push_back(targ(o));
            }
            break;
          case ArgKind::kScalar:
            a.kind = L::Arg::Kind::kScalar;
            a.scalar = sarg(refs[0]);
            break;
          case ArgKind::kScalarList:
            a.kind = L::Arg::Kind::kScalarList;
            for (int j : refs) a.scalars.push_back(sarg(j));
            break;
          case ArgKind::kGenerator:
            a.kind = L::Arg::Kind::kOther;
            call.rng = std::make_pair(scalar(refs[0], kRngTag), scalar(refs[0] + 1, kRngTag));
            break;
          case ArgKind::kDevice:
            a.kind = L::Arg::Kind::kOther;
            break;
        }
        call.args.push_back(std::move(a));
      }
      if (st.seed_idx >= 0) {
        call.rng = std::make_pair(scalar(st.seed_idx, kRngTag), scalar(st.seed_idx + 1, kRngTag));
      }
      // The draws are a function of (seed, offset) alone, as on the aten backend: equal
      // pairs (torch.manual_seed replayed) give equal numbers. Distinct ops never merge:
      // each has its own seed/offset parameters.
      call.rng_stream = 0;
      call.outputs = outs;
      const int before = b.num_nodes();
      L::LowerResult r = fn(b, call);
      ember::Status bs = b.TakeStatus();
      std::string problem;
      if (!r.ok() && L::IsDeclined(r.status())) {
        stats.declined[st.name]++;
        log_line("declined " + st.name + " (traced at " + n->source + "): " + r.status().message());
        if (b.num_nodes() != before) {
          problem = "declined after adding " + std::to_string(b.num_nodes() - before) + " nodes";
        }
        if (problem.empty()) problem = "-";  // declined: extern, not an error
      } else if (!r.ok()) {
        problem = r.status().message();
      } else if (!bs.ok()) {
        problem = "builder error: " + bs.message();
      } else if (r->size() != outs.size()) {
        problem = "returned " + std::to_string(r->size()) + " values for " +
                  std::to_string(outs.size()) + " outputs";
      } else {
        for (size_t i = 0; i < outs.size() && problem.empty(); ++i) {
          if (!outs[i].defined) continue;
          ember::NodeId id = (*r)[i];
          ember::Shape want(outs[i].dtype, outs[i].sizes);
          if (id < 0 || id >= b.num_nodes()) {
            problem = "output " + std::to_string(i) + " is not a node";
          } else if (b.shape(id) != want) {
            problem = "output " + std::to_string(i) + " has shape " + shape_str(b.shape(id)) +
                      ", the Meta kernel says " + shape_str(want);
          }
        }
      }
      if (problem.empty()) {
        std::vector<ember::NodeId> vals(n->outputs.size(), ember::kInvalidNode);
        for (size_t i = 0; i < outs.size(); ++i) {
          if (out_of_node[i] >= 0) vals[out_of_node[i]] = (*r)[i];
        }
        values[n] = std::move(vals);
        stats.lowered_ops++;
        b.SetDefaultMetadata("");
        return "";
      }
      if (problem != "-") {
        stats.lowering_errors[st.name]++;
        std::string msg =
            "lowering of " + st.name + " failed (running it as an ATen extern): " + problem;
        log_line(msg);
        if (!log_lowering()) {
          static std::atomic<bool> once{false};
          if (!once.exchange(true)) {
            std::fprintf(stderr, "ember: %s (further reports: EMBER_LOG=lowering)\n", msg.c_str());
          }
        }
      }
    }
    // ATen custom-call.
    auto es = std::make_shared<ExternState>(st);
    es->op_index = k;
    std::vector<ember::NodeId> operands;
    for (const Value& v : n->operands) {
      operands.push_back(value(v));
      es->operand_metas.push_back(v.node->outputs[v.index]);
    }
    es->num_tensors = static_cast<int>(n->operands.size());
    for (int j = s0; j < *next_scalar; ++j) {
      es->scalar_tags.push_back(tag(j));
      operands.push_back(scalar(j, tag(j)));
    }
    // Scalar refs become local (operand num_tensors + local).
    for (size_t i = 0; i < es->step.kinds.size(); ++i) {
      auto kd = es->step.kinds[i];
      if (kd == ArgKind::kScalar || kd == ArgKind::kScalarList || kd == ArgKind::kGenerator) {
        for (int& r : es->step.refs[i]) r -= s0;
      }
    }
    if (es->step.seed_idx >= 0) es->step.seed_idx -= s0;
    std::vector<ember::Shape> shapes;
    for (const auto& m : n->outputs) shapes.emplace_back(*to_ir_dtype(m.dtype), m.sizes);
    std::vector<ember::NodeId> vals;
    if (!shapes.empty()) {
      std::string target = "aten:" + st.name + "#" + std::to_string(k);
      ember::Shape result = shapes.size() == 1 ? shapes[0] : ember::Shape::Tuple(shapes);
      ember::NodeId cc = b.CustomCall(target, operands, result, st.name);
      if (shapes.size() == 1) {
        vals.push_back(cc);
      } else {
        for (size_t i = 0; i < shapes.size(); ++i)
          vals.push_back(b.GetTupleElement(cc, static_cast<int64_t>(i)));
      }
      std::shared_ptr<const ExternState> keep = es;
      kernels[target] = [keep](ember::ExternCall& c) { return run_extern(*keep, c); };
    }
    ember::Status bs = b.TakeStatus();
    b.SetDefaultMetadata("");
    if (!bs.ok()) return st.name + ": building its custom-call failed: " + bs.message();
    values[n] = std::move(vals);
    externs.push_back(es);
    stats.extern_ops++;
    return "";
  }
};

std::mutex g_last_mu;
GraphStats g_last;

}  // namespace

void set_last_graph(const GraphStats& s) {
  std::lock_guard<std::mutex> l(g_last_mu);
  g_last = s;
}

GraphStats last_graph() {
  std::lock_guard<std::mutex> l(g_last_mu);
  return g_last;
}

std::shared_ptr<LoweredProgram> lower_graph(const LazyGraph& g, Backend backend,
                                            std::string* error) {
  std::set<int> force_extern;
  Lowerer lw(g);
  std::string err = lw.lower_inputs();
  int next_scalar = 0;
  for (int k = 0; err.empty() && k < static_cast<int>(g.ops.size()); ++k) {
    err = lw.lower_op(k, &next_scalar, force_extern);
  }
  if (!err.empty()) {
    *error = err;
    return nullptr;
  }
  // Map each output slot (one per root) back to its node output.
  std::vector<ember::NodeId> outputs;
  std::vector<TensorMeta> output_metas;
  std::vector<bool> output_views;
  std::unordered_map<int, std::pair<ember::NodeId, const Node*>> slot_value;
  std::unordered_map<int, int> slot_index;
  for (Node* n : g.ops) {
    int first = g.first_slot.at(n);
    const auto& vals = lw.values.at(n);
    for (size_t i = 0; i < vals.size(); ++i) {
      slot_value[first + static_cast<int>(i)] = {vals[i], n};
      slot_index[first + static_cast<int>(i)] = static_cast<int>(i);
    }
  }
  for (int s : g.output_slots) {
    auto it = slot_value.find(s);
    if (it == slot_value.end() || it->second.first < 0) {
      *error = "internal error: a root has no lowered value";
      return nullptr;
    }
    const Node* n = it->second.second;
    const int k = slot_index.at(s);
    outputs.push_back(it->second.first);
    output_metas.push_back(n->outputs[k]);
    output_views.push_back(k < static_cast<int>(n->output_is_view.size()) && n->output_is_view[k]);
  }
  lw.b.SetOutputs(outputs);
  // Donation (issue 4): pair each tensor input with an output the runtime may write
  // into the input's buffer when the sync donates the input (no live tensor refers to
  // it). First the input's own new value: the root reached from the input through the
  // `self` operand of ops that functionalization substituted for in-place ones
  // (p.add_(g) -> add(p, g); _foreach_addcdiv_(ps, ...) -> output k from ps[k]), same
  // sizes and dtype all the way; then, for the inputs left, any unpaired output of the
  // same shape. Only row-major outputs at offset 0 qualify.
  {
    std::unordered_map<int, size_t> input_of_slot;
    for (size_t i = 0; i < g.input_slots.size(); ++i) input_of_slot[g.input_slots[i]] = i;
    auto self_input = [&](const Node* n, int k) -> int {
      for (int depth = 0; depth < 256 && n; ++depth) {
        if (n->kind != NodeKind::kOp) {
          auto it = input_of_slot.find(g.first_slot.at(n));
          return it == input_of_slot.end() || n->kind != NodeKind::kData
                     ? -1
                     : static_cast<int>(it->second);
        }
        if (n->specs.empty()) return -1;
        const ArgSpec& self = n->specs[0];
        int operand = -1;
        if (self.kind == ArgKind::kTensor && k == 0 && !self.operands.empty()) {
          operand = self.operands[0];
        } else if ((self.kind == ArgKind::kTensorList || self.kind == ArgKind::kOptTensorList) &&
                   k < static_cast<int>(self.operands.size())) {
          operand = self.operands[k];
        }
        if (operand < 0) return -1;
        const Value& v = n->operands[operand];
        const TensorMeta& from = v.node->outputs[v.index];
        if (from.sizes != n->outputs[k].sizes || from.dtype != n->outputs[k].dtype) return -1;
        n = v.node.get();
        k = v.index;
      }
      return -1;
    };
    std::vector<bool> paired(outputs.size(), false), input_paired(g.inputs.size(), false);
    auto can_pair = [&](size_t o, size_t i) {
      const TensorMeta& m = output_metas[o];
      ember::NodeId pid = lw.slot_param.at(g.input_slots[i]);
      return !paired[o] && !input_paired[i] && !lw.permuted_inputs.count(i) && outputs[o] != pid &&
             m.offset == 0 && row_major(m.sizes, m.strides) &&
             lw.b.shape(outputs[o]) == lw.b.shape(pid);
    };
    auto pair = [&](size_t o, size_t i) {
      lw.b.SetAlias(static_cast<int>(o), static_cast<int>(i));  // input i is parameter i
      paired[o] = input_paired[i] = true;
    };
    for (size_t o = 0; o < outputs.size(); ++o) {
      const auto& sv = slot_value.at(g.output_slots[o]);
      int i = self_input(sv.second, slot_index.at(g.output_slots[o]));
      if (i >= 0 && can_pair(o, static_cast<size_t>(i))) pair(o, static_cast<size_t>(i));
    }
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      for (size_t o = 0; o < outputs.size() && !input_paired[i]; ++o) {
        if (can_pair(o, i)) pair(o, i);
      }
    }
  }
  auto built = lw.b.Build();
  if (!built.ok()) {
    *error = "building the core graph failed: " + built.status().message();
    return nullptr;
  }
  auto p = std::make_shared<LoweredProgram>();
  p->backend = backend;
  p->params = lw.params;
  p->output_metas = std::move(output_metas);
  p->output_views = std::move(output_views);
  for (ember::NodeId id : built->parameters()) p->param_shapes.push_back(built->node(id).shape);
  ember::CompileOptions opts;
  opts.backend = backend == Backend::kCpu ? ember::Backend::kCpu : ember::Backend::kInterpreter;
  opts.optimize = true;
  opts.externs = std::move(lw.kernels);
  auto exe = ember::Compile(*built, opts);
  if (!exe.ok()) {
    *error = "compiling the core graph failed: " + exe.status().message();
    return nullptr;
  }
  p->exe = std::make_shared<ember::Executable>(std::move(exe).value());
  p->externs = std::move(lw.externs);
  GraphStats& st = lw.stats;
  st.backend = backend_name(static_cast<int>(backend));
  st.lazy_ops = static_cast<int64_t>(g.ops.size());
  st.core_nodes = p->exe->graph().num_nodes();
  st.parameters = static_cast<int64_t>(p->params.size());
  for (const ember::Step& s : p->exe->steps()) {
    switch (s.kind) {
      case ember::StepKind::kKernel: {
        st.kernels++;
        int64_t ops = 0;
        if (s.fusion) {
          const ember::Graph& body = *p->exe->graph().node(s.nodes[0]).called;
          for (ember::NodeId id = 0; id < body.num_nodes(); ++id) {
            ops += body.node(id).op != ember::OpKind::kParameter;
          }
        } else {
          ops = static_cast<int64_t>(s.nodes.size());
        }
        st.kernel_ops.push_back(ops);
        break;
      }
      case ember::StepKind::kInterpret:
        st.interpreted++;
        break;
      case ember::StepKind::kExtern: {
        st.extern_steps++;
        const std::string& name = s.kernel_name;
        if (name.rfind("aten:", 0) == 0) {
          std::string op = name.substr(5, name.rfind('#') - 5);
          st.externs[op]++;
        } else {
          st.core_externs[name]++;
        }
        break;
      }
      case ember::StepKind::kCopy:
        st.copy_steps++;
        break;
    }
  }
  p->stats = st;
  return p;
}

thread_local RunTiming g_run_timing;

LoweredRun run_lowered(const LoweredProgram& p, const LazyGraph& g,
                       const std::vector<bool>& donated) {
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
    at::Tensor t = g.inputs[src.index];
    if (!src.permuted && !row_major(t)) {
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
  {
    auto& ee = extern_error();
    std::lock_guard<std::mutex> l(ee.mu);
    ee.error = nullptr;
    ee.op = -1;
  }
  ember::ExecuteOptions eo;
  std::vector<int> param_of_input(g.inputs.size(), -1);
  for (size_t i = 0; i < p.params.size(); ++i) {
    if (p.params[i].kind == ParamSrc::kInput)
      param_of_input[p.params[i].index] = static_cast<int>(i);
  }
  int64_t donated_n = 0;
  if (!donated.empty()) {
    eo.donated.assign(p.params.size(), false);
    for (size_t i = 0; i < donated.size(); ++i) {
      if (donated[i] && param_of_input[i] >= 0) {
        eo.donated[param_of_input[i]] = true;
        donated_n++;
      }
    }
  }
  const int64_t relayout0 = g_relayout_copies.load(), extern0 = g_extern_copies.load();
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
    metrics().relayout_copies += g_relayout_copies.load() - relayout0;
    metrics().extern_copies += g_extern_copies.load() - extern0;
    metrics().donated_buffers += donated_n;
    if (res.ok()) {
      for (const auto& kv : p.stats.externs) metrics().externs[kv.first] += kv.second;
      metrics().nodes_executed += static_cast<int64_t>(p.exe->steps().size());
    }
  }
  if (!res.ok()) {
    const ember::Status& s = res.status();
    std::exception_ptr stashed;
    int op = -1;
    {
      auto& ee = extern_error();
      std::lock_guard<std::mutex> l(ee.mu);
      stashed = ee.error;
      op = ee.op;
      ee.error = nullptr;
    }
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
      for (size_t pos = m.find('%'); pos != std::string::npos && op < 0;
           pos = m.find('%', pos + 1)) {
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
    std::string name = "the compiled graph";
    if (n) {
      name = n->op->schema().name();
      if (!n->op->schema().overload_name().empty()) name += "." + n->op->schema().overload_name();
    }
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
    return out;
  }
  // Bind: exactly eager's sizes / strides / offset.
  int64_t out_copies = 0;
  // One buffer returned for several roots (one core value: detach, clone, values CSE
  // merged): only one tensor storage may wrap it. Two storages over one buffer would
  // each look unreferenced to a later sync, which could then donate one and so
  // overwrite the other's values. A view root shares the storage of the root that
  // wraps the buffer (as eager's view shares its base's); any other root is copied.
  std::unordered_map<const ember::Buffer*, size_t> wrapped_by;  // buffer -> root wrapping it
  for (size_t i = 0; i < res->size(); ++i) {
    const ember::BufferRef& buf = (*res)[i];
    const TensorMeta* m = &p.output_metas[i];
    bool borrowed = buf->literal().is_borrowed();
    auto w = wrapped_by.find(buf.get());
    if (w != wrapped_by.end()) {
      const at::Tensor& base = out.outputs[w->second];
      if (p.output_views[i] && m->offset == 0 && row_major(m->sizes, m->strides) &&
          base.scalar_type() == m->dtype) {
        at::Tensor t = at::empty({0}, at::TensorOptions().dtype(m->dtype));
        t.set_(base.storage(), 0, m->sizes, m->strides);
        out.outputs.push_back(t);
      } else {
        TensorMeta dense = *m;
        {
          auto cs = c10::contiguous_strides(m->sizes);
          dense.strides.assign(cs.begin(), cs.end());
        }
        dense.offset = 0;
        out_copies++;
        out.outputs.push_back(relayout(wrap_buffer(buf, dense), *m));
      }
      continue;
    }
    bool donated_out = false;
    if (borrowed && !donated.empty()) {
      for (size_t a = 0; a < args.size(); ++a)
        donated_out |= args[a] == buf && eo.donated.size() > a && eo.donated[a];
    }
    if (m->offset == 0 && row_major(m->sizes, m->strides) && (!borrowed || donated_out)) {
      if (borrowed) {
        // A donated input written in place: its tensor is the result.
        for (size_t a = 0; a < args.size(); ++a) {
          if (args[a] == buf && arg_tensors[a].defined()) {
            const at::Tensor& t = arg_tensors[a];
            out.outputs.push_back(t.as_strided(m->sizes, m->strides, t.storage_offset()));
            break;
          }
        }
      } else {
        out.outputs.push_back(wrap_buffer(buf, *m));
        wrapped_by[buf.get()] = i;
      }
      continue;
    }
    TensorMeta dense = *m;
    {
      auto cs = c10::contiguous_strides(m->sizes);
      dense.strides.assign(cs.begin(), cs.end());
    }
    dense.offset = 0;
    at::Tensor src = wrap_buffer(buf, dense);
    out_copies++;
    out.outputs.push_back(relayout(src, *m));
  }
  if (out_copies) {
    std::lock_guard<std::mutex> mg(metrics().mu);
    metrics().output_copies += out_copies;
  }
  if (timed) g_run_timing.outputs_us = us(t2, Clock::now());
  return out;
}

std::atomic<bool>& donate_buffers() {
  static std::atomic<bool> on{true};
  return on;
}

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

bool is_runtime_buffer(const at::Tensor& t) {
  return t.has_storage() && t.storage().data_ptr().get_deleter() == &delete_runtime_buffer;
}

}  // namespace ember_torch
