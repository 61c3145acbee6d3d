// Kernel assembly (emitter.h): support check, kernel naming, the plan of
// materialized values, one phase function per materialized value (reduce
// phases with blocked lane accumulators and pairwise combination; elementwise
// phases as vectorizable row loops) and the exported entry function.
#include "codegen/cpu/emitter.h"

#include <pthread.h>

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

#include "codegen/cpu/c_types.h"
#include "codegen/cpu/expr_emitter.h"
#include "codegen/cpu/f32_muladd.h"
#include "codegen/cpu/prelude.h"
#include "codegen/cpu/vector_math.h"
#include "ember/ir/attributes.h"
#include "ember/ir/fusion_analysis.h"
#include "ember/ir/kernel_name.h"
#include "ember/ir/text.h"

namespace ember::codegen {
namespace {

// Reduction lanes (vector accumulators) and lane blocks per pairwise chunk.
constexpr int kLanes32 = 16;
constexpr int kLanes64 = 8;
constexpr int kBlocksPerChunk = 16;
// Longest operand chain a kernel may have: emission recurses along it, so
// deeper graphs are refused (Unimplemented). Kernels deeper than
// kInlineEmitDepth are emitted on a thread with a kEmitStackBytes stack
// (a level takes up to ~6 KB of stack under ASan).
constexpr int kMaxKernelDepth = 10000;
constexpr int kInlineEmitDepth = 200;
constexpr size_t kEmitStackBytes = size_t{256} << 20;
// Float reductions of at most this many elements replicate the interpreter's
// pairwise order exactly (see ExactTreeReduce).
constexpr int64_t kExactTreeMax = 128;

bool SupportedOpImpl(OpKind op) {
  if (IsElementwise(op)) return true;
  switch (op) {
    case OpKind::kParameter:
    case OpKind::kConstant:
    case OpKind::kIota:
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kReverse:
    case OpKind::kConcatenate:
    case OpKind::kPad:
    case OpKind::kReduce:
    case OpKind::kGather:
    case OpKind::kScatter:
    case OpKind::kTuple:
    case OpKind::kGetTupleElement:  // tuple only as gte's operand
      return true;
    default:
      return false;
  }
}

// The finished value of a non-empty float sum combined with +0.0, as the
// interpreter (ReduceFromIdentity) and torch.sum do: turns a sum of -0.0s
// into +0.0 and leaves every other value unchanged.
std::string FromIdentity(ReduceKind k, DType t, const std::string& v) {
  if (!IsFloat(t) || k != ReduceKind::kAdd) return v;
  return "((" + ComputeType(t) + ")0 + (" + v + "))";
}

std::string Indent(int n) { return std::string(static_cast<size_t>(n) * 2, ' '); }

// Nodes computed into a buffer by a phase of their own (read through it by later phases).
bool Materialized(OpKind op) { return op == OpKind::kReduce || op == OpKind::kScatter; }

// "(uint8_t)1"-style identity of a reduction in the accumulator type.
std::string ReduceIdentity(ReduceKind k, DType t, bool empty) {
  const std::string ct = ComputeType(t);
  const bool fl = IsFloat(t);
  switch (k) {
    case ReduceKind::kAdd:
      // -0 is the exact identity of IEEE addition (x + -0 == x for every x,
      // -0 included); an empty sum is +0 as in the interpreter.
      if (fl) return empty ? "(" + ct + ")0" : "(" + ct + ")-0.0";
      return "(" + ct + ")0";
    case ReduceKind::kMultiply:
      return "(" + ct + ")1";
    case ReduceKind::kMaximum:
      if (fl) return "-__builtin_inf" + std::string(t == DType::kF64 ? "" : "f") + "()";
      if (IsUnsignedInt(t)) return "(" + ct + ")0";
      return "(" + ct + ")((" + ct + ")1 << (sizeof(" + ct + ") * 8 - 1))";
    case ReduceKind::kMinimum:
      if (fl) return "__builtin_inf" + std::string(t == DType::kF64 ? "" : "f") + "()";
      if (IsUnsignedInt(t)) return "(" + ct + ")~(" + ct + ")0";
      return "(" + ct + ")~((" + ct + ")1 << (sizeof(" + ct + ") * 8 - 1))";
    case ReduceKind::kAnd:
      return t == DType::kPred ? "(uint8_t)1" : "(" + ct + ")~(" + ct + ")0";
    case ReduceKind::kOr:
      return "(" + ct + ")0";
    case ReduceKind::kAssign:
      break;
  }
  return "(" + ct + ")0";
}

// C++ expression combining accumulators a and b (the interpreter's Combine).
std::string Combine(ReduceKind k, DType t, const std::string& a, const std::string& b) {
  const std::string ct = ComputeType(t);
  const bool fl = IsFloat(t);
  switch (k) {
    case ReduceKind::kAdd:
      return fl ? "(" + a + " + " + b + ")" : "ember_add(" + a + ", " + b + ")";
    case ReduceKind::kMultiply:
      return fl ? "(" + a + " * " + b + ")" : "ember_mul(" + a + ", " + b + ")";
    case ReduceKind::kMaximum:
      return (fl ? "ember_fmax(" : "ember_imax(") + a + ", " + b + ")";
    case ReduceKind::kMinimum:
      return (fl ? "ember_fmin(" : "ember_imin(") + a + ", " + b + ")";
    case ReduceKind::kAnd:
      return "(" + ct + ")(" + a + " & " + b + ")";
    case ReduceKind::kOr:
      return "(" + ct + ")(" + a + " | " + b + ")";
    case ReduceKind::kAssign:
      break;
  }
  return b;
}

class KernelEmitter {
 public:
  KernelEmitter(const Graph& g, int kernel_index, bool vector_math)
      : g_(g), kernel_index_(kernel_index), vector_math_(vector_math) {}

  StatusOr<KernelSource> Emit() {
    EMBER_RETURN_IF_ERROR(CheckKernelSupported(g_));
    Plan();
    KernelSource ks;
    ks.name = KernelEntryName(g_, kernel_index_);
    for (NodeId id : plan_.error_sites) {
      const OpKind op = g_.node(id).op;
      // Gather/scatter: the runtime re-runs the node in the interpreter for its
      // message (the index, its range and position).
      ks.error_messages.push_back(std::string(OpName(op)) + " %" + std::to_string(id) +
                                  (op == OpKind::kGather || op == OpKind::kScatter
                                       ? ": start index out of range"
                                       : ": integer division by zero"));
    }
    std::ostringstream os;
    os << "// " << ks.name << ": generated by Ember (src/codegen/cpu), do not edit.\n";
    os << "// Fused from these IR nodes:\n";
    std::istringstream lines(PrintGraph(g_));
    for (std::string line; std::getline(lines, line);) {
      std::replace(line.begin(), line.end(), '\\', '/');
      if (line.size() > 160) line = line.substr(0, 157) + "...";
      os << "//   " << line << "\n";
    }
    os << "// Phases: ";
    if (row_.ok) {
      os << "one row phase over " << row_.rows << " rows of " << row_.K << " elements: passes";
      for (NodeId id : row_.reduces) os << " %" << id << " (reduce),";
      os << " then the outputs";
    }
    for (size_t k = 0; k < phases_.size() && !row_.ok; ++k) {
      os << (k ? ", " : "") << "%" << phases_[k].node
         << (g_.node(phases_[k].node).op == OpKind::kReduce ? " (reduce)" : "") << " -> "
         << phases_[k].dest;
    }
    os << "\n\n";
    std::ostringstream pre;
    pre << KernelPrelude() << "\n";
    pre << (vector_math_ ? VectorMathDeclarations() : ScalarMathDefinitions()) << "\n";
    ks.preamble = pre.str();
    std::ostringstream ns;
    ns << "namespace {\n\n";
    EmitConstantTables(ns);
    ns << "struct EmberCtx {\n  const void* const* in;\n  void* const* out;\n";
    ns << "  void* tmp[" << std::max<size_t>(1, temps_.size()) << "];\n";
    ns << "  int zero_div[" << std::max<size_t>(1, plan_.error_sites.size()) << "];\n};\n\n";
    for (size_t k = 0; k < phases_.size(); ++k) ns << EmitPhase(static_cast<int>(k));
    ns << "}  // namespace\n\n";
    std::ostringstream entry;
    EmitEntry(entry, ks.name);
    ks.body = ns.str() + entry.str();
    ks.code = os.str() + ks.preamble + ns.str() + AbiVersionFunction() + entry.str();
    return ks;
  }

 private:
  struct Phase {
    NodeId node;
    std::string dest;  // "c->out[2]" or "c->tmp[0]"
    int64_t count;     // elements written
  };

  void Plan() {
    plan_.graph = &g_;
    for (size_t i = 0; i < g_.parameters().size(); ++i) {
      plan_.parameter_index[g_.parameters()[i]] = static_cast<int>(i);
    }
    for (const Node& n : g_.nodes()) {
      if (((n.op == OpKind::kDivide || n.op == OpKind::kRemainder) && IsInteger(n.shape.dtype())) ||
          n.op == OpKind::kGather || n.op == OpKind::kScatter) {
        plan_.error_sites.push_back(n.id);
      }
      if (n.op == OpKind::kConstant && n.literal && n.literal->num_elements() > 1) {
        const int64_t es = DTypeSize(n.shape.dtype());
        const auto* p = static_cast<const uint8_t*>(n.literal->data());
        bool splat = true;
        for (int64_t i = 1; splat && i < n.literal->num_elements(); ++i) {
          splat = std::equal(p, p + es, p + i * es);
        }
        if (!splat) plan_.constant_tables[n.id] = "cst" + std::to_string(n.id);
      }
    }
    const auto& outs = g_.outputs();
    row_ = PlanRows();
    if (row_.ok) {  // one phase over the rows (see RowPhaseBody)
      phases_.push_back({outs[0], "rows", row_.rows});
      return;
    }
    // Every reduce and scatter is materialized: into the first output that is
    // it, else a temp. A scatter is one work item (its updates apply in order).
    for (const Node& n : g_.nodes()) {
      if (!Materialized(n.op)) continue;
      auto it = std::find(outs.begin(), outs.end(), n.id);
      std::string dest;
      if (it != outs.end()) {
        const int j = static_cast<int>(it - outs.begin());
        dest = "c->out[" + std::to_string(j) + "]";
        written_outputs_.insert(j);
      } else {
        dest = "c->tmp[" + std::to_string(temps_.size()) + "]";
        temps_.push_back(n.id);
      }
      const int64_t count = n.shape.num_elements();
      phases_.push_back(
          {n.id, dest, n.op == OpKind::kScatter ? std::min<int64_t>(count, 1) : count});
    }
    for (size_t j = 0; j < outs.size(); ++j) {
      if (written_outputs_.count(static_cast<int>(j))) continue;
      phases_.push_back(
          {outs[j], "c->out[" + std::to_string(j) + "]", g_.node(outs[j]).shape.num_elements()});
    }
  }

  void EmitConstantTables(std::ostringstream& os) {
    for (const auto& [id, name] : plan_.constant_tables) {
      const Literal& lit = *g_.node(id).literal;
      os << "const " << StorageType(lit.dtype()) << " " << name << "[" << lit.num_elements()
         << "] = {";
      for (int64_t i = 0; i < lit.num_elements(); ++i) {
        os << (i % 8 == 0 ? "\n    " : " ") << StorageInitializer(lit, i) << ",";
      }
      os << "\n};\n\n";
    }
  }

  // Declarations of the buffers (parameters, earlier materialized values)
  // that the phase's expressions read.
  std::string BufferDecls(const ExprEmitter& e, int indent) {
    return BufferDeclsOf(e.used_buffers(), indent);
  }
  std::string BufferDeclsOf(const std::set<NodeId>& ids, int indent) {
    std::string s;
    for (NodeId id : ids) {
      const Node& n = g_.node(id);
      const std::string st = StorageType(n.shape.dtype());
      auto pi = plan_.parameter_index.find(id);
      if (pi != plan_.parameter_index.end()) {
        s += Indent(indent) + "const " + st + "* p" + std::to_string(pi->second) + " = (const " +
             st + "*)c->in[" + std::to_string(pi->second) + "];\n";
      } else {
        const std::string& dest = DestOf(id);
        s += Indent(indent) + "const " + st + "* m" + std::to_string(id) + " = (const " + st +
             "*)" + dest + ";\n";
      }
    }
    return s;
  }

  const std::string& DestOf(NodeId id) {
    for (const Phase& p : phases_) {
      if (p.node == id && Materialized(g_.node(id).op)) return p.dest;
    }
    static const std::string kNone = "nullptr";
    return kNone;
  }

  static std::string FlagDecls(const ExprEmitter& e, int indent) {
    return FlagDeclsOf(e.used_sites(), indent);
  }
  static std::string FlagDeclsOf(const std::set<int>& sites, int indent) {
    std::string s;
    for (int site : sites) s += Indent(indent) + "int zd" + std::to_string(site) + " = 0;\n";
    return s;
  }
  static std::string FlagStores(const ExprEmitter& e, int indent) {
    return FlagStoresOf(e.used_sites(), indent);
  }
  static std::string FlagStoresOf(const std::set<int>& sites, int indent) {
    std::string s;
    for (int site : sites) {
      s += Indent(indent) + "if (zd" + std::to_string(site) + ") __atomic_store_n(&c->zero_div[" +
           std::to_string(site) + "], 1, __ATOMIC_RELAXED);\n";
    }
    return s;
  }
  static std::string SimdPragma(const ExprEmitter& e) {
    std::string s = "#pragma omp simd";
    if (!e.used_sites().empty()) {
      s += " reduction(|:";
      bool first = true;
      for (int site : e.used_sites()) {
        s += (first ? "" : ",") + std::string("zd") + std::to_string(site);
        first = false;
      }
      s += ")";
    }
    return s;
  }

  std::string EmitPhase(int k) {
    const Phase& ph = phases_[k];
    // Materialized values visible to this phase: reduces of earlier phases.
    plan_.materialized.clear();
    for (int i = 0; i < k; ++i) {
      if (Materialized(g_.node(phases_[i].node).op)) {
        plan_.materialized[phases_[i].node] = "m" + std::to_string(phases_[i].node);
      }
    }
    const Node& n = g_.node(ph.node);
    // An empty value is never computed (the entry does not call its phase).
    std::string body = ph.count == 0              ? "  (void)c;\n"
                       : row_.ok                  ? RowPhaseBody()
                       : n.op == OpKind::kScatter ? ScatterPhaseBody(ph)
                       : n.op == OpKind::kReduce && !plan_.materialized.count(n.id)
                           ? ReducePhaseBody(ph)
                           : ElementwisePhaseBody(ph);
    std::string s = row_.ok ? "// Phase " + std::to_string(k) + ": rows (" +
                                  std::to_string(row_.rows) + " x " + std::to_string(row_.K) + ")\n"
                            : "// Phase " + std::to_string(k) + ": %" + std::to_string(ph.node) +
                                  " " + std::string(OpName(n.op)) + " -> " + ph.dest + " (" +
                                  n.shape.ToString() + ")\n";
    s += "void ember_phase_" + std::to_string(k) + "(void* vctx, int64_t begin, int64_t end) {\n";
    s += "  EmberCtx* c = (EmberCtx*)vctx;\n";
    s += body;
    s += "}\n\n";
    return s;
  }

  // An elementwise phase. When it evaluates f32 multiply-adds with a
  // loop-invariant factor (f32_muladd.h), the loop is emitted twice: a copy
  // computing them in f32, run when every such factor is +-1 (checked once
  // per call from the element at index 0, the same at every index), and the
  // loop as written otherwise.
  std::string ElementwisePhaseBody(const Phase& ph) {
    const std::vector<F32MulAdd> mas = FindF32MulAdds(g_, ph.node);
    if (mas.empty()) return ElementwiseLoop(ph);
    const std::string general = ElementwiseLoop(ph);
    ExprEmitter ge(plan_, &var_counter_, 1);
    std::string cond;
    for (const F32MulAdd& m : mas) {
      const std::string v = ge.Value(m.s, Index::Linear("0"));
      cond += std::string(cond.empty() ? "" : " && ") + "(" + v + " == 1.0f || " + v + " == -1.0f)";
    }
    for (const F32MulAdd& m : mas) plan_.f32_muladds[m.root] = m;
    const std::string fast = ElementwiseLoop(ph);
    plan_.f32_muladds.clear();
    std::string s = "  // f32 multiply-adds with factors of +-1 in f32 (f32_muladd.h)\n";
    s += BufferDecls(ge, 1) + FlagDecls(ge, 1) + ge.code();
    s += "  if (" + cond + ") {\n" + fast + "  } else {\n" + general + "  }\n";
    s += FlagStores(ge, 1);
    return s;
  }

  std::string ElementwiseLoop(const Phase& ph) {
    const Node& n = g_.node(ph.node);
    const DType t = n.shape.dtype();
    const std::string st = StorageType(t);
    std::string out_decl = "  " + st + "* out = (" + st + "*)" + ph.dest + ";\n";
    // First try: everything from the linear index (one flat loop).
    {
      int vc = var_counter_;
      ExprEmitter e(plan_, &vc, 2);
      std::string v = e.Value(ph.node, Index::Linear("i"));
      if (!e.derived_multi_from_linear() || n.shape.rank() == 0) {
        var_counter_ = vc;
        std::string s = BufferDecls(e, 1) + out_decl + FlagDecls(e, 1);
        s += "  " + SimdPragma(e) + "\n";
        s += "  for (int64_t i = begin; i < end; ++i) {\n";
        s += e.code();
        s += "    out[i] = " + StoreExpr(t, v) + ";\n";
        s += "  }\n";
        s += FlagStores(e, 1);
        return s;
      }
    }
    // Row loop: outer dims from the row number, the last dim vectorized;
    // row broadcasts' operands computed once per row (HoistRowInvariants).
    const int r = n.shape.rank();
    const int64_t inner = n.shape.dim(r - 1);
    std::vector<std::string> ix(r);
    for (int d = 0; d < r; ++d) ix[d] = "i" + std::to_string(d);
    Index idx = Index::Multi(ix);
    idx.lin = "lin";
    std::set<NodeId> hoist_buffers;
    std::set<int> hoist_sites;
    plan_.scalars.clear();
    plan_.scalar_index.clear();
    const std::string hoisted = HoistRowInvariants(
        {ph.node}, n.shape.dims(), std::vector<std::string>(ix.begin(), ix.end() - 1), 2,
        &hoist_buffers, &hoist_sites);
    ExprEmitter e(plan_, &var_counter_, 3);
    std::string v = e.Value(ph.node, idx);
    plan_.scalars.clear();
    plan_.scalar_index.clear();
    std::set<NodeId> all_buffers = e.used_buffers();
    all_buffers.insert(hoist_buffers.begin(), hoist_buffers.end());
    std::set<int> all_sites = e.used_sites();
    all_sites.insert(hoist_sites.begin(), hoist_sites.end());
    std::string s = BufferDeclsOf(all_buffers, 1) + out_decl + FlagDeclsOf(all_sites, 1);
    s += "  for (int64_t i = begin; i < end;) {\n";
    s += "    const int64_t row = i / " + IntLiteral(inner) + ";\n";
    s += "    const int64_t row_base = row * " + IntLiteral(inner) + ";\n";
    s += "    const int64_t j1 = end - row_base < " + IntLiteral(inner) +
         " ? end - row_base : " + IntLiteral(inner) + ";\n";
    int64_t stride = 1;
    for (int d = r - 2; d >= 0; --d) {
      std::string e2 = "row";
      if (stride != 1) e2 = "(row / " + IntLiteral(stride) + ")";
      if (d > 0) e2 = "(" + e2 + " % " + IntLiteral(n.shape.dim(d)) + ")";
      s += "    const int64_t i" + std::to_string(d) + " = " + e2 + ";\n";
      stride *= n.shape.dim(d);
    }
    s += hoisted;
    s += "    " + SimdPragma(e) + "\n";
    s += "    for (int64_t i" + std::to_string(r - 1) + " = i - row_base; i" +
         std::to_string(r - 1) + " < j1; ++i" + std::to_string(r - 1) + ") {\n";
    s += "      const int64_t lin = row_base + i" + std::to_string(r - 1) + ";\n";
    s += e.code();
    s += "      out[lin] = " + StoreExpr(t, v) + ";\n";
    s += "    }\n";
    s += "    i = row_base + j1;\n";
    s += "  }\n";
    s += FlagStoresOf(all_sites, 1);
    return s;
  }

  // A scatter phase (one work item; XLA's dimension numbers, as
  // src/eval/indexing.cc): the operand into the destination, then the updates
  // combined in row-major order of the update index space, so duplicate
  // indices combine in the interpreter's order. An out-of-range start sets the
  // node's error flag (the element goes to start 0: the result is discarded).
  std::string ScatterPhaseBody(const Phase& ph) {
    const Node& n = g_.node(ph.node);
    const DType t = n.shape.dtype();
    const std::string st = StorageType(t);
    const ReduceKind kind = attr::ToApply(n);
    const auto& update_window_dims = attr::UpdateWindowDims(n);
    const auto& inserted = attr::InsertedWindowDims(n);
    const Shape& os = n.shape;
    const Shape& us = g_.node(n.operands[2]).shape;
    auto has = [](const std::vector<int64_t>& v, int64_t x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    ExprEmitter copy(plan_, &var_counter_, 2);
    const std::string v = copy.Value(n.operands[0], Index::Linear("i"));
    // Multi-index of update element u (row-major).
    const auto ustr = us.strides();
    std::vector<std::string> uix(us.rank());
    std::string uix_decls;
    for (int d = 0; d < us.rank(); ++d) {
      uix[d] = "u" + std::to_string(d);
      std::string e = "u";
      if (ustr[d] != 1) e = "(" + e + " / " + IntLiteral(ustr[d]) + ")";
      if (d > 0) e = "(" + e + " % " + IntLiteral(us.dim(d)) + ")";
      uix_decls += "    const int64_t " + uix[d] + " = " + e + ";\n";
    }
    std::vector<int64_t> window_operand_dims, window(os.rank(), 1);
    for (int d = 0; d < os.rank(); ++d) {
      if (!has(inserted, d)) window_operand_dims.push_back(d);
    }
    for (size_t k = 0; k < update_window_dims.size(); ++k) {
      window[window_operand_dims[k]] = us.dim(static_cast<int>(update_window_dims[k]));
    }
    std::vector<std::string> batch_ix;
    for (int d = 0; d < us.rank(); ++d) {
      if (!has(update_window_dims, d)) batch_ix.push_back(uix[d]);
    }
    ExprEmitter upd(plan_, &var_counter_, 2);
    const std::map<int64_t, std::string> starts = upd.IndexStarts(
        n, attr::IndexVectorDim(n), attr::ScatterDimsToOperandDims(n), window, batch_ix);
    std::vector<std::string> oix(os.rank());
    size_t k = 0;  // position among the window dims
    for (int d = 0; d < os.rank(); ++d) {
      std::string off = "0";
      if (!has(inserted, d)) off = uix[update_window_dims[k++]];
      auto s0 = starts.find(d);
      oix[d] = s0 == starts.end() ? off : "(" + s0->second + " + " + off + ")";
    }
    Index ui = Index::Multi(uix);
    ui.lin = "u";
    const std::string u = upd.Value(n.operands[2], ui);
    const std::string at = "out[" + upd.LinOf(os, Index::Multi(oix)) + "]";
    const std::string value =
        kind == ReduceKind::kAssign ? u : Combine(kind, t, LoadExpr(t, at), u);
    std::set<NodeId> buffers = copy.used_buffers();
    buffers.insert(upd.used_buffers().begin(), upd.used_buffers().end());
    std::set<int> sites = copy.used_sites();
    sites.insert(upd.used_sites().begin(), upd.used_sites().end());
    std::string s = BufferDeclsOf(buffers, 1) + FlagDeclsOf(sites, 1);
    s += "  " + st + "* out = (" + st + "*)" + ph.dest + ";\n";
    s += "  (void)begin;\n  (void)end;\n";
    s += "  for (int64_t i = 0; i < " + IntLiteral(os.num_elements()) + "; ++i) {\n" + copy.code();
    s += "    out[i] = " + StoreExpr(t, v) + ";\n  }\n";
    s += "  for (int64_t u = 0; u < " + IntLiteral(us.num_elements()) + "; ++u) {\n" + uix_decls;
    s += upd.code();
    s += "    " + at + " = " + StoreExpr(t, value) + ";\n  }\n";
    s += FlagStoresOf(sites, 1);
    return s;
  }

  // A reduce phase: for each output element o, the reduction of its row.
  std::string ReducePhaseBody(const Phase& ph) {
    const Node& n = g_.node(ph.node);
    const DType t = n.shape.dtype();
    const std::string st = StorageType(t);
    ReduceCode rc = ReduceOneOutput(n, 2);
    std::string s = BufferDeclsOf(rc.buffers, 1);
    s += "  " + st + "* out = (" + st + "*)" + ph.dest + ";\n";
    s += FlagDeclsOf(rc.sites, 1);
    s += "  for (int64_t o = begin; o < end; ++o) {\n";
    s += rc.code;
    s += "    out[o] = " + StoreExpr(t, rc.result) + ";\n";
    s += "  }\n";
    s += FlagStoresOf(rc.sites, 1);
    return s;
  }

  // Code computing reduce `n` for the output element `o` (a variable of the
  // enclosing loop), at indentation `ind`: statements, then `result` is a
  // compute-type expression of the finished value (before the store's
  // rounding). Also the buffers it reads and the zero-divisor flags it sets.
  struct ReduceCode {
    std::string code;
    std::string result;
    std::set<NodeId> buffers;
    std::set<int> sites;
  };
  // Row kernels: `stores` lists nodes of the reduce operand's shape whose
  // value at each element this pass also writes into its row buffer
  // (plan_.row_buffers-to-be: `scr<id>[lin - row_base]`).
  ReduceCode ReduceOneOutput(const Node& n, int ind, const std::vector<NodeId>& stores = {}) {
    ReduceCode rc;
    const NodeId x = n.operands[0];
    const Shape& xs = g_.node(x).shape;
    const DType t = n.shape.dtype();
    const std::string ct = ComputeType(t);
    const ReduceKind kind = attr::ToApply(n);
    std::vector<bool> reduced(xs.rank(), false);
    for (int64_t d : attr::Dimensions(n)) reduced[d] = true;
    std::vector<int> red_dims;
    int64_t nred = 1;
    for (int d = 0; d < xs.rank(); ++d) {
      if (reduced[d]) {
        red_dims.push_back(d);
        nred *= xs.dim(d);
      }
    }
    if (nred == 0) {
      rc.result = ReduceIdentity(kind, t, /*empty=*/true);
      return rc;
    }
    auto absorb = [&](const ExprEmitter& e) {
      rc.buffers.insert(e.used_buffers().begin(), e.used_buffers().end());
      rc.sites.insert(e.used_sites().begin(), e.used_sites().end());
    };
    // Kept multi-index from the output index o.
    std::vector<std::string> kept;
    {
      ExprEmitter tmp(plan_, &var_counter_, 0);
      kept = tmp.MultiOf(n.shape, Index::Linear("o"));
    }
    std::string& s = rc.code;
    std::vector<std::string> xix(xs.rank());
    {
      int kd = 0;
      for (int d = 0; d < xs.rank(); ++d) {
        if (reduced[d]) continue;
        const std::string name = "k" + std::to_string(d);
        s += Indent(ind) + "const int64_t " + name + " = " + kept[kd++] + ";\n";
        xix[d] = name;
      }
    }
    const std::string res = "red" + std::to_string(n.id);
    if (red_dims.empty()) {
      ExprEmitter e(plan_, &var_counter_, ind);
      std::string v = e.Value(x, Index::Multi(xix));
      absorb(e);
      s += e.code();
      rc.result = FromIdentity(kind, t, v);
      return rc;
    }
    if (IsFloat(t) && nred <= kExactTreeMax) {
      ExactTreeReduce(n, xs, reduced, xix, ind, &rc, stores);
      return rc;
    }
    const bool pairwise = IsFloat(t) && (kind == ReduceKind::kAdd || kind == ReduceKind::kMultiply);
    const int lanes = DTypeSize(t) == 8 ? kLanes64 : kLanes32;
    const int last = red_dims.back();
    const int64_t K = xs.dim(last);
    for (size_t i = 0; i + 1 < red_dims.size(); ++i)
      xix[red_dims[i]] = "r" + std::to_string(red_dims[i]);
    const std::string id = ReduceIdentity(kind, t, false);
    auto combine = [&](const std::string& a, const std::string& b) {
      return Combine(kind, t, a, b);
    };

    // The element expression, twice: full lane blocks and the tail.
    xix[last] = "(kb + l)";
    const int depth = static_cast<int>(red_dims.size()) - 1;
    ExprEmitter full(plan_, &var_counter_, ind + 3 + depth);
    std::string fv = full.Value(x, Index::Multi(xix));
    const std::string full_stores =
        StoreRowValues(full, stores, Index::Multi(xix), ind + 3 + depth);
    ExprEmitter tail(plan_, &var_counter_, ind + 3 + depth);
    std::string tv = tail.Value(x, Index::Multi(xix));
    const std::string tail_stores =
        StoreRowValues(tail, stores, Index::Multi(xix), ind + 3 + depth);
    absorb(full);
    absorb(tail);

    const std::string acc = "acc" + std::to_string(n.id);
    const std::string pw = "pw" + std::to_string(n.id);
    const std::string nb = "nb" + std::to_string(n.id);
    if (pairwise)
      s += Indent(ind) + "EmberPairwise<" + ct + "> " + pw + ";\n" + Indent(ind) + "int " + nb +
           " = 0;\n";
    s += Indent(ind) + ct + " " + acc + "[" + std::to_string(lanes) + "];\n";
    s += Indent(ind) + "for (int l = 0; l < " + std::to_string(lanes) + "; ++l) " + acc +
         "[l] = " + id + ";\n";
    // Pairwise fold of the lanes into acc[0]: acc[l] = acc[l] (+) acc[l + w].
    auto fold_lanes = [&](int in) {
      std::string f;
      for (int w = lanes / 2; w >= 1; w /= 2) {
        f += Indent(in) + "for (int l = 0; l < " + std::to_string(w) + "; ++l) " + acc +
             "[l] = " + combine(acc + "[l]", acc + "[l + " + std::to_string(w) + "]") + ";\n";
      }
      return f;
    };
    int in = ind;
    for (size_t i = 0; i + 1 < red_dims.size(); ++i) {
      const std::string r = "r" + std::to_string(red_dims[i]);
      s += Indent(in) + "for (int64_t " + r + " = 0; " + r + " < " +
           IntLiteral(xs.dim(red_dims[i])) + "; ++" + r + ") {\n";
      ++in;
    }
    const std::string L = std::to_string(lanes);
    s += Indent(in) + "for (int64_t kb = 0; kb < " + IntLiteral(K) + "; kb += " + L + ") {\n";
    s += Indent(in + 1) + "if (kb + " + L + " <= " + IntLiteral(K) + ") {\n";
    s += Indent(in + 2) + SimdPragma(full) + "\n";
    s += Indent(in + 2) + "for (int l = 0; l < " + L + "; ++l) {\n";
    s += full.code() + full_stores;
    s += Indent(in + 3) + acc + "[l] = " + combine(acc + "[l]", fv) + ";\n";
    s += Indent(in + 2) + "}\n";
    s += Indent(in + 1) + "} else {\n";
    s += Indent(in + 2) + "for (int l = 0; l < " + IntLiteral(K) + " - kb; ++l) {\n";
    s += tail.code() + tail_stores;
    s += Indent(in + 3) + acc + "[l] = " + combine(acc + "[l]", tv) + ";\n";
    s += Indent(in + 2) + "}\n";
    s += Indent(in + 1) + "}\n";
    const std::string lambda =
        "[](" + ct + " a, " + ct + " b) { return " + combine("a", "b") + "; }";
    if (pairwise) {
      s += Indent(in + 1) + "if (++" + nb + " == " + std::to_string(kBlocksPerChunk) + ") {\n";
      s += fold_lanes(in + 2);
      s += Indent(in + 2) + pw + ".Push(" + acc + "[0], " + lambda + ");\n";
      s += Indent(in + 2) + "for (int l = 0; l < " + L + "; ++l) " + acc + "[l] = " + id + ";\n";
      s += Indent(in + 2) + nb + " = 0;\n";
      s += Indent(in + 1) + "}\n";
    }
    s += Indent(in) + "}\n";
    for (size_t i = 0; i + 1 < red_dims.size(); ++i) {
      --in;
      s += Indent(in) + "}\n";
    }
    s += fold_lanes(ind);
    if (pairwise) {
      s += Indent(ind) + "if (" + nb + " > 0) " + pw + ".Push(" + acc + "[0], " + lambda + ");\n";
      s += Indent(ind) + "const " + ct + " " + res + " = " + pw + ".Finish(" + id + ", " + lambda +
           ");\n";
    } else {
      s += Indent(ind) + "const " + ct + " " + res + " = " + acc + "[0];\n";
    }
    rc.result = FromIdentity(kind, t, res);
    return rc;
  }

  // Small float reductions (n <= kExactTreeMax reduced elements) use the
  // interpreter's exact order (PairwiseReduce in src/eval/eval_util.h):
  // halve until a run has <= 8 elements, combine each run left to right,
  // then combine the halves. n is static, so the tree is emitted unrolled
  // over a local array of the n input values; results are bit-identical.
  void ExactTreeReduce(const Node& n, const Shape& xs, const std::vector<bool>& reduced,
                       std::vector<std::string> xix, int ind, ReduceCode* rc,
                       const std::vector<NodeId>& stores = {}) {
    const DType t = n.shape.dtype();
    const std::string ct = ComputeType(t);
    const ReduceKind kind = attr::ToApply(n);
    std::vector<int64_t> red_dims;
    std::vector<int> red_axes;
    for (int d = 0; d < xs.rank(); ++d) {
      if (reduced[d]) {
        red_dims.push_back(xs.dim(d));
        red_axes.push_back(d);
      }
    }
    const Shape red_shape(DType::kS64, red_dims);
    ExprEmitter e(plan_, &var_counter_, ind + 1);
    {
      auto rix = e.MultiOf(red_shape, Index::Linear("r"));
      for (size_t i = 0; i < red_axes.size(); ++i) xix[red_axes[i]] = rix[i];
    }
    std::string v = e.Value(n.operands[0], Index::Multi(xix));
    const std::string row_stores = StoreRowValues(e, stores, Index::Multi(xix), ind + 1);
    rc->buffers.insert(e.used_buffers().begin(), e.used_buffers().end());
    rc->sites.insert(e.used_sites().begin(), e.used_sites().end());
    const int64_t total = red_shape.num_elements();
    const std::string vals = "vals" + std::to_string(n.id);
    const std::string tp = "t" + std::to_string(n.id) + "_";
    std::string& s = rc->code;
    s += Indent(ind) + ct + " " + vals + "[" + IntLiteral(total) + "];\n";
    s += Indent(ind) + SimdPragma(e) + "\n";
    s += Indent(ind) + "for (int64_t r = 0; r < " + IntLiteral(total) + "; ++r) {\n";
    s += e.code() + row_stores;
    s += Indent(ind + 1) + vals + "[r] = " + v + ";\n";
    s += Indent(ind) + "}\n";
    int leaf = 0;
    std::function<std::string(int64_t, int64_t)> tree = [&](int64_t b, int64_t len) {
      if (len <= 8) {
        const std::string a = tp + std::to_string(leaf++);
        s += Indent(ind) + ct + " " + a + " = " + vals + "[" + IntLiteral(b) + "];\n";
        if (len > 1) {
          s += Indent(ind) + "for (int64_t i = " + IntLiteral(b + 1) + "; i < " +
               IntLiteral(b + len) + "; ++i) " + a + " = " + Combine(kind, t, a, vals + "[i]") +
               ";\n";
        }
        return a;
      }
      const int64_t half = len / 2;
      std::string lhs = tree(b, half);
      std::string rhs = tree(b + half, len - half);
      return Combine(kind, t, lhs, rhs);
    };
    rc->result = FromIdentity(kind, t, tree(0, total));
  }

  // `scr<id>[lin - row_base] = <value of id at idx>;` for each node of
  // `stores`, computed (or found memoized) by `e`.
  std::string StoreRowValues(ExprEmitter& e, const std::vector<NodeId>& stores, const Index& idx,
                             int ind) {
    std::string s;
    for (NodeId id : stores) {
      const std::string v = e.Value(id, idx);
      s += Indent(ind) + "scr" + std::to_string(id) + "[" + e.LinOf(g_.node(id).shape, idx) +
           " - " + plan_.row_base + "] = " + v + ";\n";
    }
    return s;
  }

  // Full-shaped nodes reached from `roots` through elementwise ops of shape
  // `full` (the values a pass over the row computes per element).
  std::set<NodeId> RowPassNodes(const std::vector<NodeId>& roots,
                                const std::vector<int64_t>& full) {
    std::set<NodeId> seen;
    std::vector<NodeId> stack(roots.begin(), roots.end());
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      const Node& n = g_.node(id);
      if (n.shape.is_tuple() || n.shape.dims() != full || !IsElementwise(n.op)) continue;
      if (!seen.insert(id).second) continue;
      for (NodeId o : n.operands) stack.push_back(o);
    }
    return seen;
  }

  // Operands of row broadcasts (broadcast-in-dim repeating its operand along
  // the innermost dims: operand = the leading k dims of the result, mapped to
  // dims {0..k-1}) reached from `roots` through elementwise ops of shape
  // `full` are the same along a row: they are computed once per row, before
  // the loop over the row, into locals that the loop reads (plan_.scalars).
  // `ix` names the row's leading indices (at least k of them); returns the
  // statements (at indentation `ind`).
  std::string HoistRowInvariants(const std::vector<NodeId>& roots, const std::vector<int64_t>& full,
                                 const std::vector<std::string>& ix, int ind,
                                 std::set<NodeId>* buffers, std::set<int>* sites) {
    std::vector<NodeId> stack(roots.begin(), roots.end());
    std::set<NodeId> seen;
    std::vector<NodeId> hoist;  // broadcast operands, in discovery order
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      if (!seen.insert(id).second) continue;
      const Node& n = g_.node(id);
      if (n.shape.is_tuple() || n.shape.dims() != full) continue;
      if (plan_.scalars.count(id) || plan_.materialized.count(id) || plan_.row_buffers.count(id))
        continue;
      if (n.op == OpKind::kBroadcastInDim) {
        const Node& op = g_.node(n.operands[0]);
        const auto& map = attr::Dimensions(n);
        const int k = op.shape.rank();
        bool row = k >= 1 && k < static_cast<int>(full.size()) && k <= static_cast<int>(ix.size());
        for (int i = 0; row && i < k; ++i) row = map[i] == i && op.shape.dim(i) == full[i];
        if (row && op.op != OpKind::kConstant && !plan_.scalars.count(op.id))
          hoist.push_back(op.id);
        continue;
      }
      if (!IsElementwise(n.op)) continue;
      for (NodeId o : n.operands) stack.push_back(o);
    }
    if (hoist.empty()) return "";
    std::sort(hoist.begin(), hoist.end());
    hoist.erase(std::unique(hoist.begin(), hoist.end()), hoist.end());
    ExprEmitter e(plan_, &var_counter_, ind);
    std::vector<std::pair<NodeId, std::string>> vals;
    for (NodeId id : hoist) {
      const int k = g_.node(id).shape.rank();
      Index idx = Index::Multi(std::vector<std::string>(ix.begin(), ix.begin() + k));
      vals.push_back({id, e.Value(id, idx)});
    }
    for (const auto& [id, v] : vals) {
      plan_.scalars[id] = v;
      plan_.scalar_index[id] =
          std::vector<std::string>(ix.begin(), ix.begin() + g_.node(id).shape.rank());
    }
    buffers->insert(e.used_buffers().begin(), e.used_buffers().end());
    sites->insert(e.used_sites().begin(), e.used_sites().end());
    return e.code();
  }

  // ---- row kernels ----
  //
  // A row fusion (ember/ir/fusion_analysis.h: reductions over the same
  // innermost dims {k..r-1} of operands of one shape S, everything computed
  // from them consumed per row, outputs of shape S or the outer shape) runs
  // as ONE phase over the rows: for each row, each reduction in node order is
  // one pass over the row (its value a local scalar), then the row's outputs
  // are written in one more pass. The row (K elements) stays in cache between
  // passes, so the input is read from memory once (softmax: max pass,
  // exp-sum pass, normalize pass). Values used by several passes are
  // recomputed in each (the fusion cost model bounds this, fusion_cost.h).
  // A row fusion of fewer than kMinRowKernelRows rows (too few to split
  // across threads) runs as phases, like an input fusion.
  static constexpr int64_t kMinRowKernelRows = 8;
  // Row buffers (see RowPhaseBody) live on the stack: at most this many bytes.
  static constexpr int64_t kRowBufferBytes = 64 << 10;
  // Row kernels whose row-shaped outputs total at least this many bytes
  // (beyond the caches) write them with non-temporal stores.
  static constexpr int64_t kStreamBytes = int64_t{4} << 20;

  // Values worth keeping in a row buffer rather than recomputing per pass:
  // float values of the expensive ops (element cost >= kExpensiveElementCost:
  // transcendental functions, division).
  static bool IsRowBufferWorthy(const Node& n) {
    return !n.shape.is_tuple() && IsFloat(n.shape.dtype()) && IsElementwise(n.op) &&
           ElementCost(n.op) >= kExpensiveElementCost;
  }

  struct RowPlan {
    bool ok = false;
    int k = 0;                  // outer rank
    std::vector<int64_t> full;  // S
    int64_t rows = 0, K = 0;
    std::vector<NodeId> reduces;  // node order
  };

  // The row plan when the kernel is a row fusion (AnalyzeFusion) of at
  // least kMinRowKernelRows non-empty rows.
  RowPlan PlanRows() const {
    RowPlan rp;
    const FusionAnalysis a = AnalyzeFusion(g_);
    if (a.kind != FusionKind::kRow || a.row.rows < kMinRowKernelRows || a.row.row_length == 0)
      return rp;
    rp.ok = true;
    rp.k = a.row.outer_rank;
    rp.full = a.row.shape;
    rp.rows = a.row.rows;
    rp.K = a.row.row_length;
    rp.reduces = a.reduces;
    return rp;
  }

  std::string RowPhaseBody() {
    const RowPlan& rp = row_;
    const int k = rp.k;
    const int r = static_cast<int>(rp.full.size());
    std::set<NodeId> buffers;
    std::set<int> sites;
    std::string body;
    // Outer index from the row number o.
    std::vector<std::string> outer_ix(k);
    {
      int64_t stride = 1;
      std::vector<std::string> tmp(k);
      for (int d = k - 1; d >= 0; --d) {
        std::string e = "o";
        if (stride != 1) e = "(o / " + IntLiteral(stride) + ")";
        if (d > 0) e = "(" + e + " % " + IntLiteral(rp.full[d]) + ")";
        tmp[d] = e;
        stride *= rp.full[d];
      }
      for (int d = 0; d < k; ++d) {
        outer_ix[d] = "q" + std::to_string(d);
        body += "    const int64_t " + outer_ix[d] + " = " + tmp[d] + ";\n";
      }
    }
    plan_.materialized.clear();
    plan_.scalars.clear();
    plan_.scalar_index.clear();
    plan_.row_buffers.clear();
    plan_.row_base = "o * " + IntLiteral(rp.K);
    // Row buffers: an expensive value (a transcendental, a division, ...)
    // that several passes compute is stored by the first of them into a
    // row-sized local array and read back by the later ones (softmax: the
    // exp-sum pass stores exp(x - max), the normalize pass divides it).
    const auto& outs = g_.outputs();
    std::vector<std::set<NodeId>> pass_nodes;
    for (NodeId id : rp.reduces)
      pass_nodes.push_back(RowPassNodes({g_.node(id).operands[0]}, rp.full));
    {
      std::vector<NodeId> full_roots;
      for (NodeId o : outs)
        if (g_.node(o).shape.dims() == rp.full) full_roots.push_back(o);
      pass_nodes.push_back(RowPassNodes(full_roots, rp.full));
    }
    std::vector<std::vector<NodeId>> stores(rp.reduces.size());
    int64_t scratch_bytes = 0;
    std::string scratch_decls;
    for (const Node& n : g_.nodes()) {
      if (!IsRowBufferWorthy(n)) continue;
      int first = -1, uses = 0;
      for (size_t p = 0; p < pass_nodes.size(); ++p) {
        if (!pass_nodes[p].count(n.id)) continue;
        if (first < 0) first = static_cast<int>(p);
        ++uses;
      }
      const int64_t bytes =
          rp.K * DTypeSize(n.shape.dtype() == DType::kF64 ? DType::kF64 : DType::kF32);
      if (uses < 2 || first >= static_cast<int>(rp.reduces.size()) ||
          scratch_bytes + bytes > kRowBufferBytes) {
        continue;
      }
      scratch_bytes += bytes;
      stores[first].push_back(n.id);
      scratch_decls += "  " + ComputeType(n.shape.dtype()) + " scr" + std::to_string(n.id) + "[" +
                       IntLiteral(rp.K) + "];\n";
    }
    for (size_t ri = 0; ri < rp.reduces.size(); ++ri) {
      const NodeId id = rp.reduces[ri];
      const Node& n = g_.node(id);
      const DType t = n.shape.dtype();
      body += HoistRowInvariants({n.operands[0]}, rp.full, outer_ix, 2, &buffers, &sites);
      ReduceCode rc = ReduceOneOutput(n, 3, stores[ri]);
      buffers.insert(rc.buffers.begin(), rc.buffers.end());
      sites.insert(rc.sites.begin(), rc.sites.end());
      const std::string v = "rv" + std::to_string(id);
      body +=
          "    // pass: %" + std::to_string(id) + " reduce (" + attr::ToApply.Text(n.attrs) + ")\n";
      body += "    " + ComputeType(t) + " " + v + ";\n    {\n" + rc.code;
      // The value later passes see is the stored one (bf16/f16 rounded).
      body += "      " + v + " = " + LoadExpr(t, StoreExpr(t, rc.result)) + ";\n    }\n";
      plan_.scalars[id] = v;
      for (NodeId st : stores[ri]) plan_.row_buffers[st] = "scr" + std::to_string(st);
    }
    // Output pass(es): outer-shaped outputs once per row, full-shaped ones
    // in one simd loop over the row.
    std::vector<size_t> full_outs;
    Index outer_idx = Index::Multi(outer_ix);
    outer_idx.lin = "o";
    {
      std::vector<NodeId> full_roots;
      for (NodeId o : outs)
        if (g_.node(o).shape.dims() == rp.full) full_roots.push_back(o);
      body += HoistRowInvariants(full_roots, rp.full, outer_ix, 2, &buffers, &sites);
      ExprEmitter e(plan_, &var_counter_, 2);
      std::string stores;
      for (size_t j = 0; j < outs.size(); ++j) {
        const Node& n = g_.node(outs[j]);
        if (n.shape.dims() == rp.full) {
          full_outs.push_back(j);
          continue;
        }
        stores += "    out" + std::to_string(j) +
                  "[o] = " + StoreExpr(n.shape.dtype(), e.Value(outs[j], outer_idx)) + ";\n";
      }
      if (!stores.empty()) {
        body += "    // outputs of the row's outer shape\n";
        body += e.code() + stores;
      }
      buffers.insert(e.used_buffers().begin(), e.used_buffers().end());
      sites.insert(e.used_sites().begin(), e.used_sites().end());
    }
    if (!full_outs.empty()) {
      std::vector<std::string> ix = outer_ix;
      int64_t stride = 1;
      std::vector<std::string> inner(r - k);
      for (int d = r - 1; d >= k; --d) {
        std::string e = "j";
        if (stride != 1) e = "(j / " + IntLiteral(stride) + ")";
        if (d > k) e = "(" + e + " % " + IntLiteral(rp.full[d]) + ")";
        inner[d - k] = e;
        stride *= rp.full[d];
      }
      ix.insert(ix.end(), inner.begin(), inner.end());
      Index idx = Index::Multi(ix);
      idx.lin = "lin";
      // Large outputs: the 64-byte-aligned middle of each row is written
      // with non-temporal stores (the destination lines are not read into
      // the cache before being overwritten: no write-allocate traffic); the
      // unaligned head and tail, and rows whose outputs are misaligned
      // differently, take the plain loop.
      int esize = 0;
      int64_t out_bytes = 0;
      bool stream = true;
      for (size_t j : full_outs) {
        const DType t = g_.node(outs[j]).shape.dtype();
        const int sz = static_cast<int>(DTypeSize(t));
        stream &= (sz == 4 || sz == 8) && (esize == 0 || esize == sz) && t != DType::kPred;
        esize = sz;
        out_bytes += rp.rows * rp.K * sz;
      }
      stream &= esize > 0 && out_bytes >= kStreamBytes;
      const std::string K = IntLiteral(rp.K);
      body += "    // outputs of the row's shape: one pass\n";
      body += "    {\n";
      body += "      int64_t h = " + K + ", m = " + K + ";  // [h, m): streamed\n";
      if (stream) {
        const int W = 64 / esize;
        const std::string a0 =
            "(uintptr_t)(out" + std::to_string(full_outs[0]) + " + o * " + K + ")";
        std::string same = "(" + a0 + " % " + std::to_string(esize) + " == 0)";
        for (size_t i = 1; i < full_outs.size(); ++i) {
          same += " && (((uintptr_t)(out" + std::to_string(full_outs[i]) + " + o * " + K +
                  ") & 63) == (" + a0 + " & 63))";
        }
        body += "      if (" + same + ") {\n";
        body += "        const int64_t mis = (int64_t)((" + a0 + " & 63) / " +
                std::to_string(esize) + ");\n";
        body += "        h = (" + std::to_string(W) + " - mis) % " + std::to_string(W) + ";\n";
        body += "        if (h > " + K + ") h = " + K + ";\n";
        body += "        m = h + ((" + K + " - h) / " + std::to_string(W) + ") * " +
                std::to_string(W) + ";\n";
        body += "      }\n";
        ExprEmitter en(plan_, &var_counter_, 5);
        std::vector<std::string> nvals;
        for (size_t j : full_outs) nvals.push_back(en.Value(outs[j], idx));
        body += "      for (int64_t jb = h; jb < m; jb += " + std::to_string(W) + ") {\n";
        for (size_t j : full_outs) {
          body += "        " + StorageType(g_.node(outs[j]).shape.dtype()) + " st" +
                  std::to_string(j) + "[" + std::to_string(W) + "];\n";
        }
        body += "        " + SimdPragma(en) + "\n";
        body += "        for (int64_t l = 0; l < " + std::to_string(W) + "; ++l) {\n";
        body += "          const int64_t j = jb + l;\n";
        body += "          const int64_t lin = o * " + K + " + j;\n";
        body += en.code();
        for (size_t i = 0; i < full_outs.size(); ++i) {
          body += "          st" + std::to_string(full_outs[i]) +
                  "[l] = " + StoreExpr(g_.node(outs[full_outs[i]]).shape.dtype(), nvals[i]) + ";\n";
        }
        body += "        }\n";
        for (size_t j : full_outs) {
          body += "        ember_stream64(out" + std::to_string(j) + " + o * " + K + " + jb, st" +
                  std::to_string(j) + ");\n";
        }
        body += "      }\n";
        body += "      if (m > h) streamed = 1;\n";
        buffers.insert(en.used_buffers().begin(), en.used_buffers().end());
        sites.insert(en.used_sites().begin(), en.used_sites().end());
        uses_stream_ = true;
      }
      ExprEmitter e(plan_, &var_counter_, 5);
      std::vector<std::string> vals;
      for (size_t j : full_outs) vals.push_back(e.Value(outs[j], idx));
      body += "      for (int part = 0; part < 2; ++part) {  // [0, h) and [m, K)\n";
      body += "        const int64_t j0 = part ? m : 0, j1 = part ? " + K + " : h;\n";
      body += "        " + SimdPragma(e) + "\n";
      body += "        for (int64_t j = j0; j < j1; ++j) {\n";
      body += "          const int64_t lin = o * " + K + " + j;\n";
      body += e.code();
      for (size_t i = 0; i < full_outs.size(); ++i) {
        body += "          out" + std::to_string(full_outs[i]) +
                "[lin] = " + StoreExpr(g_.node(outs[full_outs[i]]).shape.dtype(), vals[i]) + ";\n";
      }
      body += "        }\n      }\n    }\n";
      buffers.insert(e.used_buffers().begin(), e.used_buffers().end());
      sites.insert(e.used_sites().begin(), e.used_sites().end());
    }
    std::string s = BufferDeclsOf(buffers, 1);
    for (size_t j = 0; j < outs.size(); ++j) {
      const std::string st = StorageType(g_.node(outs[j]).shape.dtype());
      s += "  " + st + "* out" + std::to_string(j) + " = (" + st + "*)c->out[" + std::to_string(j) +
           "];\n";
    }
    s += FlagDeclsOf(sites, 1);
    s += scratch_decls;
    if (uses_stream_) s += "  int streamed = 0;\n";
    s += "  for (int64_t o = begin; o < end; ++o) {\n" + body + "  }\n";
    if (uses_stream_) s += "  if (streamed) ember_store_fence();\n";
    s += FlagStoresOf(sites, 1);
    return s;
  }

  void EmitEntry(std::ostringstream& os, const std::string& name) {
    os << "EMBER_EXPORT int " << name
       << "(const void* const* inputs, void* const* outputs, void* pf_ctx, "
          "ember_parallel_for_fn pf) {\n";
    os << "  EmberCtx ctx;\n  EmberCtx* c = &ctx;\n  c->in = inputs;\n  c->out = outputs;\n";
    os << "  for (int i = 0; i < (int)(sizeof(c->zero_div) / sizeof(int)); ++i) c->zero_div[i] = "
          "0;\n";
    os << "  for (int i = 0; i < (int)(sizeof(c->tmp) / sizeof(void*)); ++i) c->tmp[i] = 0;\n";
    int rc_fail = -1;
    for (size_t i = 0; i < temps_.size(); ++i) {
      const Shape& s = g_.node(temps_[i]).shape;
      os << "  c->tmp[" << i << "] = __builtin_malloc(" << std::max<int64_t>(1, s.byte_size())
         << ");\n";
      os << "  if (!c->tmp[" << i << "]) {\n";
      for (size_t j = 0; j < i; ++j) os << "    __builtin_free(c->tmp[" << j << "]);\n";
      os << "    return " << rc_fail << ";\n  }\n";
    }
    for (size_t k = 0; k < phases_.size(); ++k) {
      const Phase& ph = phases_[k];
      if (ph.count == 0) continue;
      const Node& n = g_.node(ph.node);
      int64_t work = 1;
      if (row_.ok)
        work = row_.K * static_cast<int64_t>(row_.reduces.size() + 1);
      else if (n.op == OpKind::kReduce)
        work = std::max<int64_t>(
            1, g_.node(n.operands[0]).shape.num_elements() / std::max<int64_t>(1, ph.count));
      const int64_t grain = std::max<int64_t>(1, kGrainWork / work);
      os << "  if (pf) pf(pf_ctx, 0, " << IntLiteral(ph.count) << ", " << IntLiteral(grain)
         << ", c, ember_phase_" << k << ");\n";
      os << "  else ember_phase_" << k << "(c, 0, " << IntLiteral(ph.count) << ");\n";
    }
    for (size_t i = 0; i < temps_.size(); ++i) os << "  __builtin_free(c->tmp[" << i << "]);\n";
    for (size_t i = 0; i < plan_.error_sites.size(); ++i) {
      os << "  if (c->zero_div[" << i << "]) return " << i + 1 << ";\n";
    }
    os << "  return 0;\n}\n";
  }

  const Graph& g_;
  int kernel_index_;
  bool vector_math_;
  KernelPlan plan_;
  std::vector<Phase> phases_;
  RowPlan row_;
  bool uses_stream_ = false;
  std::vector<NodeId> temps_;
  std::set<int> written_outputs_;
  int var_counter_ = 0;
};

}  // namespace

bool CodegenSupportsOp(OpKind op) { return SupportedOpImpl(op); }

namespace {

// Gather/scatter whose dimension numbers and dtypes src/eval/indexing.cc
// accepts; anything else is Unimplemented, so the interpreter runs the node
// and reports the error.
Status CheckIndexingSupported(const Graph& g, const Node& n) {
  auto no = [&](const std::string& why) {
    return Unimplemented("cpu codegen: ", OpName(n.op), " %", n.id, ": ", why);
  };
  auto has = [](const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  const Shape& os = g.node(n.operands[0]).shape;
  const Shape& is = g.node(n.operands[1]).shape;
  if (!IsInteger(is.dtype())) return no("indices are not integers");
  const int64_t ivd = attr::IndexVectorDim(n);
  if (ivd < 0 || ivd > is.rank()) return no("bad index_vector_dim");
  const int64_t vec_len = ivd == is.rank() ? 1 : is.dim(static_cast<int>(ivd));
  const bool gather = n.op == OpKind::kGather;
  const auto& to_operand = gather ? attr::StartIndexMap(n) : attr::ScatterDimsToOperandDims(n);
  if (vec_len != static_cast<int64_t>(to_operand.size())) return no("index vector length");
  for (int64_t d : to_operand) {
    if (d < 0 || d >= os.rank()) return no("bad indexed operand dim");
  }
  int64_t batch = 1;
  for (int d = 0; d < is.rank(); ++d) batch *= d == ivd ? 1 : is.dim(d);
  std::vector<int64_t> window(os.rank(), 1);
  if (gather) {
    const auto& offset_dims = attr::OffsetDims(n);
    const auto& collapsed = attr::CollapsedSliceDims(n);
    const auto& slice_sizes = attr::SliceSizes(n);
    if (static_cast<int>(slice_sizes.size()) != os.rank()) return no("slice_sizes");
    int64_t window_dims = 0;
    for (int d = 0; d < os.rank(); ++d) {
      if (slice_sizes[d] < 0 || slice_sizes[d] > os.dim(d)) return no("slice size");
      if (has(collapsed, d) && slice_sizes[d] != 1) return no("collapsed dim of size != 1");
      window_dims += !has(collapsed, d);
      window[d] = slice_sizes[d];
    }
    if (window_dims != static_cast<int64_t>(offset_dims.size())) return no("offset_dims");
    int64_t rbatch = 1, k = 0;
    for (int d = 0; d < n.shape.rank(); ++d) {
      if (has(offset_dims, d)) continue;
      rbatch *= n.shape.dim(d);
    }
    for (int64_t d : offset_dims) {
      if (d < 0 || d >= n.shape.rank()) return no("bad offset dim");
    }
    for (int d = 0; d < os.rank(); ++d) {
      if (has(collapsed, d)) continue;
      if (n.shape.dim(static_cast<int>(offset_dims[k++])) != slice_sizes[d])
        return no("window size");
    }
    if (rbatch != batch) return no("result batch dims");
  } else {
    auto kind = attr::ToApply.Find(n.attrs);
    if (!kind) return no("unknown to_apply");
    const DType t = n.shape.dtype();
    if (*kind != ReduceKind::kAssign &&
        (IsPred(t) || (IsFloat(t) && (*kind == ReduceKind::kAnd || *kind == ReduceKind::kOr)))) {
      return no("to_apply on this dtype");
    }
    const Shape& us = g.node(n.operands[2]).shape;
    if (us.dtype() != t || os != n.shape) return no("dtypes");
    const auto& uwd = attr::UpdateWindowDims(n);
    const auto& inserted = attr::InsertedWindowDims(n);
    std::vector<int64_t> wod;
    for (int d = 0; d < os.rank(); ++d) {
      if (!has(inserted, d)) wod.push_back(d);
    }
    if (wod.size() != uwd.size()) return no("update_window_dims");
    int64_t ubatch = 1;
    for (int d = 0; d < us.rank(); ++d) ubatch *= has(uwd, d) ? 1 : us.dim(d);
    for (size_t k = 0; k < uwd.size(); ++k) {
      if (uwd[k] < 0 || uwd[k] >= us.rank()) return no("bad update window dim");
      window[wod[k]] = us.dim(static_cast<int>(uwd[k]));
      if (window[wod[k]] > os.dim(static_cast<int>(wod[k]))) return no("window exceeds operand");
    }
    if (ubatch != batch) return no("update scatter dims");
  }
  return OkStatus();
}

}  // namespace

Status CheckKernelSupported(const Graph& g) {
  const auto users = g.ComputeUsers();
  for (const Node& n : g.nodes()) {
    if (!CodegenSupportsOp(n.op)) {
      return Unimplemented("cpu codegen: ", OpName(n.op), " %", n.id,
                           " is not supported by the tier-1 code generator");
    }
    if (n.op == OpKind::kTuple) {
      // Only as the operand of get-tuple-element (which forwards the element).
      bool ok = std::find(g.outputs().begin(), g.outputs().end(), n.id) == g.outputs().end();
      for (NodeId u : users[n.id]) ok &= g.node(u).op == OpKind::kGetTupleElement;
      if (!ok) {
        return Unimplemented("cpu codegen: tuple %", n.id,
                             " is used other than by get-tuple-element");
      }
      continue;
    }
    if (n.op == OpKind::kGetTupleElement && g.node(n.operands[0]).op != OpKind::kTuple) {
      return Unimplemented("cpu codegen: get-tuple-element %", n.id, " of ",
                           OpName(g.node(n.operands[0]).op));
    }
    if (n.shape.is_tuple() || IsComplex(n.shape.dtype())) {
      return Unimplemented("cpu codegen: ", OpName(n.op), " %", n.id, " has result ",
                           n.shape.ToString(), " (tuples and complex dtypes are not supported)");
    }
    for (NodeId o : n.operands) {
      const Shape& s = g.node(o).shape;
      if ((s.is_tuple() && n.op != OpKind::kGetTupleElement) ||
          (!s.is_tuple() && IsComplex(s.dtype()))) {
        return Unimplemented("cpu codegen: ", OpName(n.op), " %", n.id, " has operand ",
                             s.ToString());
      }
    }
    if (n.op == OpKind::kConstant && n.literal == nullptr) {
      return InvalidArgument("cpu codegen: constant %", n.id, " has no literal");
    }
    if (n.op == OpKind::kGather || n.op == OpKind::kScatter) {
      EMBER_RETURN_IF_ERROR(CheckIndexingSupported(g, n));
    }
    if (n.op == OpKind::kReduce) {
      auto k = attr::ToApply.Find(n.attrs);
      if (!k || *k == ReduceKind::kAssign) {
        return Unimplemented("cpu codegen: reduce %", n.id, " with to_apply '",
                             attr::ToApply.Text(n.attrs), "'");
      }
    }
    if (n.op == OpKind::kParameter) {
      auto it = std::find(g.parameters().begin(), g.parameters().end(), n.id);
      if (it == g.parameters().end()) {
        return InvalidArgument("cpu codegen: parameter %", n.id, " is not in the parameter list");
      }
    }
  }
  for (NodeId o : g.outputs()) {
    if (g.node(o).shape.is_tuple()) return Unimplemented("cpu codegen: tuple output %", o);
  }
  std::vector<int> depth(g.num_nodes(), 0);
  for (const Node& n : g.nodes()) {
    for (NodeId o : n.operands) depth[n.id] = std::max(depth[n.id], depth[o] + 1);
    if (depth[n.id] > kMaxKernelDepth) {
      return Unimplemented("cpu codegen: ", OpName(n.op), " %", n.id, " is more than ",
                           kMaxKernelDepth, " ops deep; split the kernel");
    }
  }
  return OkStatus();
}

namespace {

int MaxDepth(const Graph& g) {
  std::vector<int> depth(g.num_nodes(), 0);
  int max_depth = 0;
  for (const Node& n : g.nodes()) {
    for (NodeId o : n.operands) depth[n.id] = std::max(depth[n.id], depth[o] + 1);
    max_depth = std::max(max_depth, depth[n.id]);
  }
  return max_depth;
}

struct EmitJob {
  const Graph* g;
  int kernel_index;
  bool vector_math;
  StatusOr<KernelSource> result = Status(StatusCode::kInternal, "emission did not run");
};

void* RunEmitJob(void* p) {
  auto* job = static_cast<EmitJob*>(p);
  job->result = KernelEmitter(*job->g, job->kernel_index, job->vector_math).Emit();
  return nullptr;
}

}  // namespace

std::string AbiVersionFunction() {
  return "EMBER_EXPORT int ember_kernel_abi_version(void) { return " +
         std::to_string(kKernelAbiVersion) + "; }\n\n";
}

std::string KernelEntryName(const Graph& g, int kernel_index) {
  return "ember_" + KernelName(g, kernel_index);
}

StatusOr<KernelSource> EmitKernelSourceLegacy(const Graph& g, int kernel_index, bool vector_math) {
  if (MaxDepth(g) <= kInlineEmitDepth) return KernelEmitter(g, kernel_index, vector_math).Emit();
  // Deep kernel: emit on a thread with a large stack (reserved, touched only
  // as deep as the recursion goes).
  EmitJob job{&g, kernel_index, vector_math};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kEmitStackBytes);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, &RunEmitJob, &job);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    return ResourceExhausted("cpu codegen: cannot start an emitter thread for a kernel ",
                             MaxDepth(g), " ops deep");
  }
  pthread_join(thread, nullptr);
  return std::move(job.result);
}

}  // namespace ember::codegen
