// The lowerer (lower.h; docs/architecture.md, "Lowering"): one lazy graph -> one core
// graph. Each lazy op node is lowered through the LoweringTable or becomes an ATen
// custom-call (aten_extern.h); the graph is then compiled by the core runtime.
#include "lower.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "aten_extern.h"
#include "binding.h"
#include "donation.h"
#include "dtype_map.h"
#include "ember/codegen/cpu.h"
#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ember/lowering/aten.h"
#include "ember/runtime/executable.h"
#include "ember/runtime/executable_cache.h"
#include "lowered_program.h"

namespace ember_torch {
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
      const TensorMeta& t = g.input_metas[i];  // in-flight inputs have no tensor yet
      auto d = to_ir_dtype(t.dtype);
      if (!d) return std::string("input of dtype ") + c10::toString(t.dtype) + " has no IR dtype";
      std::vector<int64_t> order = dense_permutation(t);
      if (order.empty()) {
        slot_param[g.input_slots[i]] = new_param(
            ember::Shape(*d, t.sizes), ParamSrc{ParamSrc::kInput, static_cast<int>(i), 0});
        continue;
      }
      // Borrowed in its stored order, read through a transpose (which simplify folds
      // into a dot-general's dimension numbers): no copy per run.
      std::vector<int64_t> stored(order.size()), perm(order.size());
      for (size_t j = 0; j < order.size(); ++j) {
        stored[j] = t.sizes[order[j]];
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
      std::string target = extern_target(st.name, k);
      ember::Shape result = shapes.size() == 1 ? shapes[0] : ember::Shape::Tuple(shapes);
      // A functional variant run as its in-place op (aten_step.h): each written
      // argument's result element (of its argument's shape: find_inplace_variant) may
      // be that argument's own buffer.
      std::vector<int64_t> aliasing;
      if (es->step.inplace_op && shapes.size() > 1) {
        int64_t e = 0;
        for (int i : es->step.inplace_args) {
          for (int r : es->step.refs[i]) {
            if (r >= 0) aliasing.insert(aliasing.end(), {e, r});
            ++e;
          }
        }
      }
      ember::NodeId cc = b.CustomCall(target, operands, result, st.name, std::move(aliasing));
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

}  // namespace

namespace {

// `m` with dim `d` of length `n` instead, row-major: an extern's operand or result as the
// core buffer holds it (the flash kernel takes any strides, so it needs no relayout).
TensorMeta padded_meta(const TensorMeta& m, int64_t d, int64_t n) {
  TensorMeta p = m;
  p.sizes[d] = n;
  return row_major_meta(p);
}

// The attention extern (attention.cpp's flash forward) padded along the sequence dim (2)
// of q, k and v alike: padded keys must get no weight. Causal attention gives them none
// already for real query rows (a real row attends only to keys before it, all real); a
// mask operand gets -inf (false) at padded keys; without either, the call gets a key
// mask [1, 1, 1, N] of 0 and -inf. The kernel then runs at the padded length.
constexpr const char* kFlashForward = "ember::sdpa_flash_forward";

// The padded form of `built` for `req`, or nullopt with *why. `kernels` gets the
// graph's extern kernels, made for the padded shapes.
std::optional<ember::passes::PaddedGraph> pad_for_bucket(
    const ember::Graph& built, const Lowerer& lw, const BucketRequest& req,
    std::map<std::string, ember::ExternKernel>* kernels, std::string* why) {
  std::map<std::string, std::shared_ptr<const ExternState>> flash;  // target -> state
  for (const auto& es : lw.externs) {
    const std::string target = extern_target(es->step.name, es->op_index);
    if (es->step.name != kFlashForward) {
      *why =
          es->step.name + " runs as an ATen extern, whose kernel is bound to this graph's shapes";
      return std::nullopt;
    }
    flash[target] = es;
  }
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (auto [input, dim] : req.dims) {
    int64_t param = -1;
    for (size_t i = 0; i < lw.params.size(); ++i) {
      const ParamSrc& src = lw.params[i];
      if (src.kind == ParamSrc::kInput && src.index == input) {
        if (src.permuted) {
          *why = "input " + std::to_string(input) + " is read in a transposed layout";
          return std::nullopt;
        }
        param = static_cast<int64_t>(i);
      }
    }
    if (param < 0) continue;  // an input the graph does not read
    dims.emplace_back(param, dim);
  }
  std::map<std::string, std::shared_ptr<const ExternState>> padded_states;
  ember::passes::CustomCallPadding attention =
      [&](const ember::Node& call, const std::vector<std::vector<ember::passes::DimPadding>>& ops)
      -> ember::StatusOr<ember::passes::CustomCallPads> {
    auto it = flash.find(ember::attr::CallTargetName(call));
    if (it == flash.end()) return ember::Unimplemented("an extern reads the padded dim");
    const ExternState& es = *it->second;
    const AtenStep& step = es.step;
    if (step.args.size() < 6 || step.refs.size() < 4 || !step.args[4].isBool())
      return ember::Unimplemented("attention with arguments bucketing does not know");
    const bool causal = step.args[4].toBool();
    const int mask = step.refs[3].size() == 1 ? step.refs[3][0] : -1;
    for (int i = 0; i < 3; ++i) {
      for (size_t d = 0; d < ops[i].size(); ++d) {
        const auto& p = ops[i][d];
        if (p.padded != (d == 2) || (p.padded && (p.outer != 1 || p.inner != 1)))
          return ember::Unimplemented("attention padded along a dim other than the sequence");
      }
    }
    auto st = std::make_shared<ExternState>(es);
    ember::passes::CustomCallPads r;
    std::ostringstream config;
    config << step.name << " padded to " << req.bucket;
    for (int i = 0; i < 3; ++i)
      st->operand_metas[i] = padded_meta(es.operand_metas[i], 2, req.bucket);
    for (auto& om : st->step.out_metas) om = padded_meta(om, 2, req.bucket);
    const TensorMeta& qm = es.operand_metas[0];
    // Padded keys and values hold zeros: a NaN or infinity computed there (a log, a
    // division on zero-padded rows) cannot reach a real row through a zero weight.
    for (int i = 1; i < 3; ++i) {
      auto dt = to_ir_dtype(es.operand_metas[i].dtype);
      if (!dt) return ember::Unimplemented("attention of a dtype without IR dtype");
      r.fills.push_back({i, {2}, ember::Literal::ScalarDouble(*dt, 0)});
    }
    if (mask >= 0) {
      std::vector<ember::passes::DimPadding> mp = ops[mask];
      const int64_t last = static_cast<int64_t>(mp.size()) - 1;
      if (last < 0 || !mp[last].padded || mp[last].outer != 1 || mp[last].inner != 1)
        return ember::Unimplemented("attention whose mask is not padded along the keys");
      TensorMeta mm = es.operand_metas[mask];
      // The query dim: padded, of size 1 (broadcast by the kernel), or a broadcast of
      // length n computed in the graph (a causal tril), recomputed at the padded length.
      if (last >= 1 && !mp[last - 1].padded && mm.sizes[last - 1] != 1) {
        if (mm.sizes[last - 1] != req.length)
          return ember::Unimplemented("attention whose mask's query dim is not the sequence");
        mp[last - 1].padded = true;
        r.widen.emplace_back(mask, mp);
      }
      for (int64_t d = 0; d <= last; ++d) {
        if (!mp[d].padded) continue;
        if (mp[d].outer != 1 || mp[d].inner != 1)
          return ember::Unimplemented("attention whose mask merges the padded dim");
        mm = padded_meta(mm, d, req.bucket);
      }
      st->operand_metas[mask] = mm;
      auto dt = to_ir_dtype(mm.dtype);
      if (!dt) return ember::Unimplemented("attention mask of a dtype without IR dtype");
      r.fills.push_back(
          {mask,
           {last},
           mm.dtype == at::kBool
               ? ember::Literal::ScalarInt(*dt, 0)
               : ember::Literal::ScalarDouble(*dt, -std::numeric_limits<double>::infinity())});
      config << " mask";
    } else if (!causal) {
      // No mask: argument 3 is None (a plain argument, or a tensor argument without
      // operand), and the new operand goes after q, k, v.
      const bool none = (step.kinds[3] == ArgKind::kPlain && step.args[3].isNone()) ||
                        (step.kinds[3] == ArgKind::kTensor && step.refs[3] == std::vector<int>{-1});
      if (es.num_tensors != 3 || !none)
        return ember::Unimplemented("attention with arguments bucketing does not know");
      auto dt = to_ir_dtype(qm.dtype);
      if (!dt) return ember::Unimplemented("attention of a dtype without IR dtype");
      ember::passes::CustomCallPads::KeyMask km;
      km.position = 3;
      km.dims = {1, 1, 1, req.bucket};
      km.dim = 3;
      km.on_real = ember::Literal::ScalarDouble(*dt, 0);
      km.on_padded = ember::Literal::ScalarDouble(*dt, -std::numeric_limits<double>::infinity());
      r.key_mask = km;
      TensorMeta mm = qm;
      mm.sizes = {1, 1, 1, req.bucket};
      st->operand_metas.insert(st->operand_metas.begin() + 3, padded_meta(mm, 3, req.bucket));
      st->num_tensors = 4;
      st->step.kinds[3] = ArgKind::kTensor;
      st->step.refs[3] = {3};
      config << " key mask";
    }
    for (size_t a = 4; a < step.args.size(); ++a) config << " " << step.args[a];
    padded_states[it->first] = st;
    r.results.resize(st->step.out_metas.size());
    for (size_t k = 0; k < r.results.size(); ++k) {
      r.results[k].assign(st->step.out_metas[k].sizes.size(), {});
      r.results[k][2].padded = true;
    }
    r.backend_config = config.str();
    return r;
  };
  auto r = ember::passes::PadDimensions(built, dims, req.length, req.bucket, attention);
  if (!r.ok()) {
    *why = r.status().message();
    return std::nullopt;
  }
  for (const auto& [target, es] : flash) {
    // An attention call that reads nothing padded would be shared between lengths with
    // its arguments (causal, scale) outside the graph's text.
    if (!padded_states.count(target)) {
      *why = std::string(kFlashForward) +
             " reads no padded value (its arguments are not in the "
             "padded graph's identity)";
      return std::nullopt;
    }
    auto ps = padded_states[target];
    (*kernels)[target] = [ps](ember::ExternCall& c) { return run_extern(*ps, c); };
  }
  return std::move(r).value();
}

}  // namespace

std::shared_ptr<LoweredProgram> lower_graph(const LazyGraph& g, Backend backend, std::string* error,
                                            const BucketRequest* bucket, std::string* bucket_why,
                                            bool* reused) {
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
  {
    std::vector<const Node*> output_nodes;
    std::vector<int> output_index;
    for (int s : g.output_slots) {
      output_nodes.push_back(slot_value.at(s).second);
      output_index.push_back(slot_index.at(s));
    }
    pair_donations(g, outputs, output_metas, output_nodes, output_index, lw.slot_param,
                   lw.permuted_inputs, lw.b);
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
  std::optional<ember::passes::PaddedGraph> padded;
  std::map<std::string, ember::ExternKernel> padded_kernels;
  if (bucket) padded = pad_for_bucket(*built, lw, *bucket, &padded_kernels, bucket_why);
  ember::CompileOptions opts;
  opts.backend = backend == Backend::kCpu ? ember::Backend::kCpu : ember::Backend::kInterpreter;
  opts.optimize = true;
  if (padded) {
    // The graph's text is its whole identity (pad_for_bucket names an extern's padded
    // state in its backend_config), and lengths of one bucket give one text.
    opts.externs = std::move(padded_kernels);
    auto exe = ember::GlobalExecutableCache().GetOrCompile(padded->graph, opts, reused);
    if (exe.ok()) {
      p->exe = std::move(exe).value();
      p->pad_length = bucket->length;
      p->param_pads = std::move(padded->parameters);
      p->output_pads = std::move(padded->outputs);
      p->params.push_back(ParamSrc{ParamSrc::kLength, 0, 0});
    } else {
      *bucket_why = "compiling the padded graph failed: " + exe.status().message();
    }
  }
  if (!p->exe) {
    opts.externs = std::move(lw.kernels);
    auto exe = ember::Compile(*built, opts);
    if (!exe.ok()) {
      *error = "compiling the core graph failed: " + exe.status().message();
      return nullptr;
    }
    p->exe = std::make_shared<const ember::Executable>(std::move(exe).value());
  }
  const ember::Graph& compiled = p->pad_length ? padded->graph : *built;
  for (ember::NodeId id : compiled.parameters()) p->param_shapes.push_back(compiled.node(id).shape);
  p->externs = std::move(lw.externs);
  GraphStats& st = lw.stats;
  st.backend = backend_name(static_cast<int>(backend));
  st.lazy_ops = static_cast<int64_t>(g.ops.size());
  st.core_nodes = p->exe->graph().num_nodes();
  st.parameters = static_cast<int64_t>(p->params.size());
  const ember::MemoryPlan plan = p->exe->memory_plan();
  st.planned_peak_bytes = plan.peak_bytes;
  st.planned_buffer_bytes = plan.planned_bytes;
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

}  // namespace ember_torch
