// Loop IR -> C++ (loop_printer.h).
#include "codegen/cpu/loop_printer.h"

#include <algorithm>
#include <map>
#include <set>

#include "codegen/cpu/c_types.h"

namespace ember::codegen {
namespace {

// C++ of each elementwise op over the prelude's helpers. Placeholders: $0 $1
// $2 the operands, $F the libm suffix of the compute type ("f" for float,
// "" for double), $T the compute type. `libm`: constant operands are wrapped
// in ember_opaque() (no compile-time folding of the call).
struct OpSpelling {
  OpKind op;
  const char* float_form;  // operands of a float dtype
  const char* int_form;    // operands of an integer or pred dtype
  bool libm;
};

constexpr OpSpelling kOpSpellings[] = {
    {OpKind::kNegate, "-$0", "ember_neg($0)", false},
    {OpKind::kAbs, "__builtin_fabs$F($0)", "ember_iabs($0)", false},
    {OpKind::kSign, "ember_fsign($0)", "ember_isign($0)", false},
    {OpKind::kFloor, "__builtin_floor$F($0)", "$0", false},
    {OpKind::kCeil, "__builtin_ceil$F($0)", "$0", false},
    {OpKind::kRoundNearestEven, "__builtin_nearbyint$F($0)", "$0", false},
    {OpKind::kNot, "$0", "($T)(~$0)", false},
    {OpKind::kExp, "__builtin_exp$F($0)", "$0", true},
    {OpKind::kLog, "__builtin_log$F($0)", "$0", true},
    {OpKind::kLog1p, "__builtin_log1p$F($0)", "$0", true},
    {OpKind::kExpm1, "__builtin_expm1$F($0)", "$0", true},
    {OpKind::kSqrt, "__builtin_sqrt$F($0)", "$0", false},
    {OpKind::kRsqrt, "(($T)1 / __builtin_sqrt$F($0))", "$0", false},
    {OpKind::kTanh, "__builtin_tanh$F($0)", "$0", true},
    {OpKind::kLogistic, "ember_logistic($0)", "$0", true},
    {OpKind::kSin, "__builtin_sin$F($0)", "$0", true},
    {OpKind::kCos, "__builtin_cos$F($0)", "$0", true},
    {OpKind::kErf, "__builtin_erf$F($0)", "$0", true},
    {OpKind::kAdd, "($0 + $1)", "ember_add($0, $1)", false},
    {OpKind::kSubtract, "($0 - $1)", "ember_sub($0, $1)", false},
    {OpKind::kMultiply, "($0 * $1)", "ember_mul($0, $1)", false},
    // Integer divide/remainder: the planner flags a zero divisor and passes 1.
    {OpKind::kDivide, "($0 / $1)", "ember_idiv($0, $1)", false},
    {OpKind::kRemainder, "ember_frem($0, $1)", "ember_irem($0, $1)", true},
    {OpKind::kPower, "ember_pow$F($0, $1)", "ember_ipow($0, $1)", true},  // vector_math.h
    {OpKind::kMaximum, "ember_fmax($0, $1)", "ember_imax($0, $1)", false},
    {OpKind::kMinimum, "ember_fmin($0, $1)", "ember_imin($0, $1)", false},
    {OpKind::kAtan2, "__builtin_atan2$F($0, $1)", "$0", true},
    {OpKind::kAnd, "($T)($0 & $1)", "($T)($0 & $1)", false},
    {OpKind::kOr, "($T)($0 | $1)", "($T)($0 | $1)", false},
    {OpKind::kXor, "($T)($0 ^ $1)", "($T)($0 ^ $1)", false},
    {OpKind::kShiftLeft, "$0", "ember_shl($0, $1)", false},
    {OpKind::kShiftRightLogical, "$0", "ember_shrl($0, $1)", false},
    {OpKind::kShiftRightArithmetic, "$0", "ember_shra($0, $1)", false},
    // Operands x, y, z: x * y + z rounded once (the FMA instruction under -march=native).
    {OpKind::kFma, "__builtin_fma$F($0, $1, $2)", "$0", false},
    // Operands lo, x, hi.
    {OpKind::kClamp, "ember_fmin(ember_fmax($1, $0), $2)", "ember_imin(ember_imax($1, $0), $2)",
     false},
};

const OpSpelling* FindSpelling(OpKind op) {
  for (const OpSpelling& s : kOpSpellings) {
    if (s.op == op) return &s;
  }
  return nullptr;
}

std::string Expand(const char* form, const std::vector<std::string>& args, DType t) {
  std::string s;
  for (const char* p = form; *p; ++p) {
    if (*p != '$') {
      s += *p;
      continue;
    }
    ++p;
    if (*p >= '0' && *p <= '9') {
      s += args.at(static_cast<size_t>(*p - '0'));
    } else if (*p == 'F') {
      if (t != DType::kF64) s += "f";
    } else if (*p == 'T') {
      s += ComputeType(t);
    }
  }
  return s;
}

const char* CmpText(LCmp c) {
  static const char* kText[] = {"==", "!=", "<", "<=", ">", ">="};
  return kText[static_cast<int>(c)];
}

// The reduction combine (the interpreter's Combine) in compute type `t`.
std::string CombineText(ReduceKind k, DType t, const std::string& a, const std::string& b) {
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

std::string CombineLambda(ReduceKind k, DType t) {
  const std::string ct = ComputeType(t);
  return "[](" + ct + " a, " + ct + " b) { return " + CombineText(k, t, "a", "b") + "; }";
}

std::string ConvertText(DType from, DType to, const std::string& v) {
  const std::string ct = ComputeType(to);
  if (to == DType::kPred) return "(uint8_t)(" + v + " != 0)";
  if (IsFloat(from) && IsInteger(to)) {
    if (to == DType::kS32) return "ember_f2s32((double)" + v + ")";
    if (to == DType::kU64) return "ember_f2u64((double)" + v + ")";
    if (to == DType::kS64) return "ember_f2s64((double)" + v + ")";
    // s8/s16/u8/u16 through int32, as torch; u32 through int64.
    if (DTypeSize(to) <= 2) return "(" + ct + ")(uint32_t)ember_f2s32((double)" + v + ")";
    return "(" + ct + ")(uint64_t)ember_f2s64((double)" + v + ")";
  }
  if (to == DType::kF16 || to == DType::kBF16) return RoundExpr(to, "(float)" + v);
  return "(" + ct + ")" + v;
}

// The C++ declaration type of a local of dtype `t` (int64 indices included).
std::string LocalType(DType t) { return ComputeType(t); }

class Printer {
 public:
  explicit Printer(const LKernel& k) : k_(k) {}

  std::string Expr(const LExpr& e) {
    switch (e.kind) {
      case LExprKind::kVar:
        return e.name;
      case LExprKind::kLiteral:
        return e.text;
      case LExprKind::kIndex:
        return e.index.ToString();
      case LExprKind::kLoad:
        return LoadExpr(e.type, k_.buffers.at(e.buffer).name + "[" + Bracket(e.index) + "]");
      case LExprKind::kArray:
        return e.name + "[" + Bracket(e.index) + "]";
      case LExprKind::kOp:
        return OpText(e);
      case LExprKind::kConvert:
        return ConvertText(e.operand_type, e.type, Expr(*e.args[0]));
      case LExprKind::kSelect:
        return SelectExpr(e.type, Expr(*e.args[0]), Expr(*e.args[1]), Expr(*e.args[2]));
      case LExprKind::kCombine:
        return CombineText(e.reduce, e.type, Expr(*e.args[0]), Expr(*e.args[1]));
      case LExprKind::kCmp:
        return "(" + Expr(*e.args[0]) + " " + CmpText(e.cmp) + " " + Expr(*e.args[1]) + ")";
      case LExprKind::kAnd:
        return "(" + Expr(*e.args[0]) + " && " + Expr(*e.args[1]) + ")";
      case LExprKind::kOr:
        return "(" + Expr(*e.args[0]) + " || " + Expr(*e.args[1]) + ")";
      case LExprKind::kMisalign:
        return "(int64_t)((uintptr_t)(" + k_.buffers.at(e.buffer).name + " + " +
               e.index.ToString() + ") & 63)";
      case LExprKind::kNot:
        return "!" + Expr(*e.args[0]);
      case LExprKind::kFinish:
        return e.name + (e.args.size() > 1 ? "[" + Expr(*e.args[1]) + "]" : std::string()) +
               ".Finish(" + Expr(*e.args[0]) + ", " + CombineLambda(e.reduce, e.type) + ")";
    }
    return "";
  }

  std::string Function(const LFunction& f) {
    std::string s;
    if (!f.comment.empty()) s += "// " + f.comment + "\n";
    s += "void " + f.name + "(void* vctx, int64_t begin, int64_t end) {\n";
    s += "  EmberCtx* c = (EmberCtx*)vctx;\n";
    s += BufferDecls(f);
    s += Block(f, 0, 1);
    s += "}\n\n";
    return s;
  }

  PrintedKernel Kernel() {
    PrintedKernel pk;
    std::string& s = pk.body;
    s += "namespace {\n\n";
    for (size_t i = 0; i < k_.tables.size(); ++i) s += Table(static_cast<int>(i));
    s += "struct EmberCtx {\n  const void* const* in;\n  void* const* out;\n";
    s += "  void* tmp[" + std::to_string(std::max<size_t>(1, k_.temp_bytes.size())) + "];\n";
    s += "  int zero_div[" + std::to_string(std::max<size_t>(1, k_.error_sites.size())) +
         "];\n};\n\n";
    for (const LFunction& f : k_.phases) s += Function(f);
    s += "}  // namespace\n\n";
    pk.entry = Entry();
    return pk;
  }

 private:
  // An index inside brackets: no outer parentheses needed.
  static std::string Bracket(const IndexExpr& e) {
    std::string s = e.ToString();
    if (s.size() > 2 && s.front() == '(' && s.back() == ')') {
      int depth = 0;
      bool outer = true;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        depth += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 0;
        if (depth == 0) outer = false;
      }
      if (outer) return s.substr(1, s.size() - 2);
    }
    return s;
  }

  std::string OpText(const LExpr& e) {
    const DType t = e.operand_type;
    const bool fl = IsFloat(t);
    const OpSpelling* sp = FindSpelling(e.op);
    std::vector<std::string> args;
    for (const LValue& a : e.args) {
      std::string x = Expr(*a);
      if (sp && sp->libm && fl && a->constant) x = "ember_opaque(" + x + ")";
      args.push_back(std::move(x));
    }
    if (e.op == OpKind::kCompare) {
      static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">="};
      return "(uint8_t)(" + args[0] + " " + kOps[static_cast<int>(e.direction)] + " " + args[1] +
             ")";
    }
    if (e.op == OpKind::kNot && t == DType::kPred) return "(uint8_t)(" + args[0] + " == 0)";
    if (!sp) return args.empty() ? "0" : args[0];  // CheckKernelSupported refuses the rest
    const std::string text = Expand(fl ? sp->float_form : sp->int_form, args, t);
    return fl ? RoundExpr(e.type, text) : text;
  }

  std::string BufferDecls(const LFunction& f) {
    std::map<int, bool> used;  // buffer -> written
    std::vector<const LExpr*> stack;
    auto scan = [&](const LValue& v) {
      if (v) stack.push_back(v.get());
      while (!stack.empty()) {
        const LExpr* e = stack.back();
        stack.pop_back();
        if (e->kind == LExprKind::kLoad || e->kind == LExprKind::kMisalign) {
          used.emplace(e->buffer, false);
        }
        for (const LValue& a : e->args) stack.push_back(a.get());
      }
    };
    // The blocks reachable from the body (a planner's discarded attempt is not).
    std::vector<int> blocks = {0};
    while (!blocks.empty()) {
      const int b = blocks.back();
      blocks.pop_back();
      for (int id : f.block(b)) {
        const LStmt& st = f.stmt(id);
        if (st.body >= 0) blocks.push_back(st.body);
        if (st.orelse >= 0) blocks.push_back(st.orelse);
        if (st.kind == LStmtKind::kStore || st.kind == LStmtKind::kStream) used[st.buffer] = true;
        if (st.kind == LStmtKind::kPrefetch) used.emplace(st.buffer, false);
        scan(st.value);
        scan(st.target);
        scan(st.begin);
        scan(st.end);
        scan(st.cond);
      }
    }
    std::string s;
    for (const auto& [id, written] : used) {
      const LBuffer& b = k_.buffers.at(id);
      if (b.kind == LBuffer::kTable) continue;  // file scope
      const std::string st = StorageType(b.type);
      const std::string src = b.kind == LBuffer::kInput ? "c->in[" + std::to_string(b.slot) + "]"
                              : b.kind == LBuffer::kOutput
                                  ? "c->out[" + std::to_string(b.slot) + "]"
                                  : "c->tmp[" + std::to_string(b.slot) + "]";
      if (written) {
        s += "  " + st + "* " + b.name + " = (" + st + "*)" + src + ";\n";
      } else {
        s += "  const " + st + "* " + b.name + " = (const " + st + "*)" + src + ";\n";
      }
    }
    return s;
  }

  // Statements of block `b` at indentation `ind`, iteratively (nesting costs
  // no stack): a work list of statements still to print and block closings.
  std::string Block(const LFunction& f, int b, int ind) {
    struct Item {
      int block;
      size_t pos;
      int ind;
      std::string close;  // printed when the block is done
    };
    std::string s;
    std::vector<Item> work = {{b, 0, ind, ""}};
    while (!work.empty()) {
      Item& it = work.back();
      const std::vector<int>& stmts = f.block(it.block);
      if (it.pos == stmts.size()) {
        s += it.close;
        work.pop_back();
        continue;
      }
      const LStmt& st = f.stmt(stmts[it.pos++]);
      const int in = it.ind;
      const std::string pad(static_cast<size_t>(in) * 2, ' ');
      switch (st.kind) {
        case LStmtKind::kFor: {
          if (st.simd) {
            s += pad + "#pragma omp simd";
            if (!st.simd_or_vars.empty()) {
              s += " reduction(|:";
              for (size_t i = 0; i < st.simd_or_vars.size(); ++i) {
                s += (i ? "," : "") + st.simd_or_vars[i];
              }
              s += ")";
            }
            s += "\n";
          }
          s += pad + "for (int64_t " + st.name + " = " + Expr(*st.begin) + "; " + st.name + " < " +
               Expr(*st.end) + "; " +
               (st.step == 1 ? "++" + st.name : st.name + " += " + IntLiteral(st.step)) + ") {\n";
          work.push_back({st.body, 0, in + 1, pad + "}\n"});
          break;
        }
        case LStmtKind::kIf: {
          s += pad + "if (" + Cond(*st.cond) + ") {\n";
          // An else branch that is one `if` prints as `} else if (...) {`.
          std::vector<std::pair<const LStmt*, int>> chain;  // else-ifs
          const LStmt* cur = &st;
          while (cur->orelse >= 0 && f.block(cur->orelse).size() == 1 &&
                 f.stmt(f.block(cur->orelse)[0]).kind == LStmtKind::kIf) {
            cur = &f.stmt(f.block(cur->orelse)[0]);
            chain.push_back({cur, 0});
          }
          // Pushed in reverse: the last branch prints first after its opener.
          std::vector<Item> items;
          const LStmt* owner = &st;
          items.push_back({st.body, 0, in + 1, ""});
          for (auto& [c, unused] : chain) {
            (void)unused;
            items.back().close = pad + "} else if (" + Cond(*c->cond) + ") {\n";
            items.push_back({c->body, 0, in + 1, ""});
            owner = c;
          }
          if (owner->orelse >= 0) {
            items.back().close = pad + "} else {\n";
            items.push_back({owner->orelse, 0, in + 1, ""});
          }
          items.back().close += pad + "}\n";
          for (auto r = items.rbegin(); r != items.rend(); ++r) work.push_back(*r);
          break;
        }
        case LStmtKind::kSeq:
          work.push_back({st.body, 0, in, ""});
          break;
        default:
          s += pad + Simple(st) + "\n";
          break;
      }
    }
    return s;
  }

  // A condition without redundant outer parentheses.
  std::string Cond(const LExpr& e) {
    std::string s = Expr(e);
    if (e.kind == LExprKind::kCmp || e.kind == LExprKind::kAnd || e.kind == LExprKind::kOr) {
      return s.substr(1, s.size() - 2);
    }
    return s;
  }

  std::string Simple(const LStmt& st) {
    switch (st.kind) {
      case LStmtKind::kLet:
        return "const " + LocalType(st.type) + " " + st.name + " = " + Expr(*st.value) + ";";
      case LStmtKind::kDecl: {
        std::string t;
        switch (st.decl) {
          case LDeclKind::kValue:
            t = LocalType(st.type);
            break;
          case LDeclKind::kStorage:
            t = StorageType(st.type);
            break;
          case LDeclKind::kFlag:
            return "int " + st.name + " = 0;";
          case LDeclKind::kPairwise:
            return "EmberPairwise<" + ComputeType(st.type) +
                   (st.depth > 0 ? ", " + std::to_string(st.depth) : std::string()) + "> " +
                   st.name + (st.extent > 0 ? "[" + IntLiteral(st.extent) + "]" : std::string()) +
                   ";";
        }
        std::string s = t + " " + st.name;
        if (st.extent > 0) s += "[" + IntLiteral(st.extent) + "]";
        if (st.value) s += " = " + Expr(*st.value);
        return s + ";";
      }
      case LStmtKind::kAssign:
        return Expr(*st.target) + (st.or_assign ? " |= " : " = ") + Expr(*st.value) + ";";
      case LStmtKind::kStore:
        return k_.buffers.at(st.buffer).name + "[" + Bracket(st.index) +
               "] = " + StoreExpr(st.type, Expr(*st.value)) + ";";
      case LStmtKind::kPush:
        return st.name + (st.target ? "[" + Expr(*st.target) + "]" : std::string()) + ".Push(" +
               Expr(*st.value) + ", " + CombineLambda(st.reduce, st.type) +
               (st.level > 0 ? ", " + std::to_string(st.level) : std::string()) + ");";
      case LStmtKind::kStream:
        return "ember_stream64(" + k_.buffers.at(st.buffer).name + " + " + st.index.ToString() +
               ", " + st.name + ");";
      case LStmtKind::kFence:
        return "ember_store_fence();";
      case LStmtKind::kPrefetch:
        return "__builtin_prefetch(" + k_.buffers.at(st.buffer).name + " + " + st.index.ToString() +
               ");";
      case LStmtKind::kFlag:
        return "if (" + st.name + ") __atomic_store_n(&c->zero_div[" + std::to_string(st.site) +
               "], 1, __ATOMIC_RELAXED);";
      case LStmtKind::kComment:
        return "// " + st.text;
      default:
        return "";
    }
  }

  std::string Table(int i) {
    const Literal& lit = *k_.graph->node(k_.tables[i]).literal;
    std::string name;
    for (const LBuffer& b : k_.buffers) {
      if (b.kind == LBuffer::kTable && b.slot == i) name = b.name;
    }
    std::string s = "const " + StorageType(lit.dtype()) + " " + name + "[" +
                    std::to_string(lit.num_elements()) + "] = {";
    for (int64_t j = 0; j < lit.num_elements(); ++j) {
      s += (j % 8 == 0 ? "\n    " : " ") + StorageInitializer(lit, j) + ",";
    }
    return s + "\n};\n\n";
  }

  std::string Entry() {
    std::string s = "EMBER_EXPORT int " + k_.name +
                    "(const void* const* inputs, void* const* outputs, void* pf_ctx, "
                    "ember_parallel_for_fn pf) {\n";
    s += "  EmberCtx ctx;\n  EmberCtx* c = &ctx;\n  c->in = inputs;\n  c->out = outputs;\n";
    s += "  for (int i = 0; i < (int)(sizeof(c->zero_div) / sizeof(int)); ++i) c->zero_div[i] = "
         "0;\n";
    s += "  for (int i = 0; i < (int)(sizeof(c->tmp) / sizeof(void*)); ++i) c->tmp[i] = 0;\n";
    for (size_t i = 0; i < k_.temp_bytes.size(); ++i) {
      const std::string t = "c->tmp[" + std::to_string(i) + "]";
      s += "  " + t + " = __builtin_malloc(" + IntLiteral(std::max<int64_t>(1, k_.temp_bytes[i])) +
           ");\n";
      s += "  if (!" + t + ") {\n";
      for (size_t j = 0; j < i; ++j)
        s += "    __builtin_free(c->tmp[" + std::to_string(j) + "]);\n";
      s += "    return -1;\n  }\n";
    }
    for (const LKernel::Launch& l : k_.launches) {
      const std::string& fn = k_.phases.at(l.phase).name;
      s += "  if (pf) pf(pf_ctx, 0, " + IntLiteral(l.count) + ", " + IntLiteral(l.grain) + ", c, " +
           fn + ");\n";
      s += "  else " + fn + "(c, 0, " + IntLiteral(l.count) + ");\n";
    }
    for (size_t i = 0; i < k_.temp_bytes.size(); ++i) {
      s += "  __builtin_free(c->tmp[" + std::to_string(i) + "]);\n";
    }
    for (size_t i = 0; i < k_.error_sites.size(); ++i) {
      s += "  if (c->zero_div[" + std::to_string(i) + "]) return " + std::to_string(i + 1) + ";\n";
    }
    s += "  return 0;\n}\n";
    return s;
  }

  const LKernel& k_;
};

}  // namespace

PrintedKernel PrintKernel(const LKernel& k) { return Printer(k).Kernel(); }

std::string PrintExpr(const LKernel& k, const LExpr& e) { return Printer(k).Expr(e); }

std::string PrintFunction(const LKernel& k, const LFunction& f) { return Printer(k).Function(f); }

}  // namespace ember::codegen
