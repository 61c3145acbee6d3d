// Loop IR construction (loop_ir.h): value constructors, the statement arena
// and the builder's insertion point.
#include "codegen/cpu/loop_ir.h"

#include <algorithm>

#include "codegen/cpu/c_types.h"

namespace ember::codegen {
namespace {

bool AllConstant(const std::vector<LValue>& args) {
  for (const LValue& a : args) {
    if (!a->constant) return false;
  }
  return true;
}

std::shared_ptr<LExpr> Make(LExprKind k, DType t) {
  auto e = std::make_shared<LExpr>();
  e->kind = k;
  e->type = t;
  return e;
}

}  // namespace

LValue LVar(const std::string& name, DType type, bool constant) {
  auto e = Make(LExprKind::kVar, type);
  e->name = name;
  e->constant = constant;
  return e;
}

LValue LLit(const std::string& text, DType type) {
  auto e = Make(LExprKind::kLiteral, type);
  e->text = text;
  e->constant = true;
  return e;
}

LValue LIndex(const IndexExpr& index) {
  auto e = Make(LExprKind::kIndex, DType::kS64);
  e->index = index;
  e->constant = index.IsConstant();
  return e;
}

LValue LInt(int64_t v) { return LIndex(IndexExpr::Constant(v)); }

LValue LLoad(int buffer, const IndexExpr& index, DType type) {
  auto e = Make(LExprKind::kLoad, type);
  e->buffer = buffer;
  e->index = index;
  return e;
}

LValue LArray(const std::string& name, const IndexExpr& index, DType type) {
  auto e = Make(LExprKind::kArray, type);
  e->name = name;
  e->index = index;
  return e;
}

LValue LOpExpr(OpKind op, DType type, DType operand_type, std::vector<LValue> args,
               ComparisonKind direction) {
  auto e = Make(LExprKind::kOp, type);
  e->op = op;
  e->operand_type = operand_type;
  e->direction = direction;
  e->constant = AllConstant(args);
  e->args = std::move(args);
  return e;
}

LValue LConvert(DType from, DType to, LValue x) {
  auto e = Make(LExprKind::kConvert, to);
  e->operand_type = from;
  e->constant = x->constant;
  e->args = {std::move(x)};
  return e;
}

LValue LSelect(LValue c, LValue a, LValue b, DType type) {
  auto e = Make(LExprKind::kSelect, type);
  e->args = {std::move(c), std::move(a), std::move(b)};
  e->constant = AllConstant(e->args);
  return e;
}

LValue LCombine(ReduceKind k, DType type, LValue a, LValue b) {
  auto e = Make(LExprKind::kCombine, type);
  e->reduce = k;
  e->args = {std::move(a), std::move(b)};
  e->constant = AllConstant(e->args);
  return e;
}

LValue LCmpExpr(LCmp c, LValue a, LValue b) {
  auto e = Make(LExprKind::kCmp, DType::kPred);
  e->cmp = c;
  e->args = {std::move(a), std::move(b)};
  e->constant = AllConstant(e->args);
  return e;
}

LValue LAnd(LValue a, LValue b) {
  auto e = Make(LExprKind::kAnd, DType::kPred);
  e->args = {std::move(a), std::move(b)};
  e->constant = AllConstant(e->args);
  return e;
}

LValue LOr(LValue a, LValue b) {
  auto e = Make(LExprKind::kOr, DType::kPred);
  e->args = {std::move(a), std::move(b)};
  e->constant = AllConstant(e->args);
  return e;
}

LValue LMisalign(int buffer, const IndexExpr& index) {
  auto e = Make(LExprKind::kMisalign, DType::kS64);
  e->buffer = buffer;
  e->index = index;
  return e;
}

LValue LNot(LValue a) {
  auto e = Make(LExprKind::kNot, DType::kPred);
  e->constant = a->constant;
  e->args = {std::move(a)};
  return e;
}

LValue LFinish(const std::string& pairwise, ReduceKind k, DType type, LValue identity,
               LValue element) {
  auto e = Make(LExprKind::kFinish, type);
  e->name = pairwise;
  e->reduce = k;
  e->args = {std::move(identity)};
  if (element) e->args.push_back(std::move(element));
  return e;
}

LFunction::LFunction() { blocks_.emplace_back(); }

int LFunction::NewBlock() {
  blocks_.emplace_back();
  return static_cast<int>(blocks_.size()) - 1;
}

void LFunction::Append(int block, LStmt s) {
  stmts_.push_back(std::move(s));
  blocks_[block].push_back(static_cast<int>(stmts_.size()) - 1);
}

void LFunction::Insert(int block, size_t pos, LStmt s) {
  stmts_.push_back(std::move(s));
  auto& b = blocks_[block];
  b.insert(b.begin() + static_cast<std::ptrdiff_t>(std::min(pos, b.size())),
           static_cast<int>(stmts_.size()) - 1);
}

LBuilder::LBuilder(LFunction* f, int* var_counter, int block) : f_(f), var_counter_(var_counter) {
  stack_.push_back({block, -1});
}

std::string LBuilder::NewName(const char* prefix) {
  return prefix + std::to_string((*var_counter_)++);
}

int LBuilder::Emit(LStmt s) {
  f_->Append(stack_.back().block, std::move(s));
  return f_->block(stack_.back().block).back();
}

LValue LBuilder::Let(DType type, LValue value) {
  if (value->kind == LExprKind::kVar || value->kind == LExprKind::kLiteral) return value;
  return LetNamed(NewName(), type, std::move(value));
}

LValue LBuilder::LetNamed(const std::string& name, DType type, LValue value) {
  const bool constant = value->constant;
  LStmt s;
  s.kind = LStmtKind::kLet;
  s.name = name;
  s.type = type;
  s.value = std::move(value);
  Emit(std::move(s));
  return LVar(name, type, constant);
}

IndexExpr LBuilder::LetIndex(const std::string& name, const IndexExpr& index) {
  if (index.IsConstant()) return index;
  const IndexRange r = index.Range();
  LetNamed(name, DType::kS64, LIndex(index));
  return IndexExpr::Variable(name, r.lo, r.hi);
}

LValue LBuilder::Decl(const std::string& name, DType type, LValue init, LDeclKind kind) {
  LStmt s;
  s.kind = LStmtKind::kDecl;
  s.name = name;
  s.type = type;
  s.decl = kind;
  s.value = std::move(init);
  Emit(std::move(s));
  return LVar(name, type);
}

void LBuilder::DeclArray(const std::string& name, DType type, int64_t extent, LDeclKind kind,
                         int64_t depth) {
  LStmt s;
  s.kind = LStmtKind::kDecl;
  s.name = name;
  s.type = type;
  s.decl = kind;
  s.extent = extent;
  s.depth = depth;
  Emit(std::move(s));
}

void LBuilder::Assign(LValue target, LValue value, bool or_assign) {
  LStmt s;
  s.kind = LStmtKind::kAssign;
  s.target = std::move(target);
  s.value = std::move(value);
  s.or_assign = or_assign;
  Emit(std::move(s));
}

void LBuilder::Store(int buffer, const IndexExpr& index, DType type, LValue value) {
  LStmt s;
  s.kind = LStmtKind::kStore;
  s.buffer = buffer;
  s.index = index;
  s.type = type;
  s.value = std::move(value);
  Emit(std::move(s));
}

void LBuilder::Push(const std::string& pairwise, ReduceKind k, DType type, LValue value,
                    LValue element, int64_t level) {
  LStmt s;
  s.kind = LStmtKind::kPush;
  s.level = level;
  s.target = std::move(element);
  s.name = pairwise;
  s.reduce = k;
  s.type = type;
  s.value = std::move(value);
  Emit(std::move(s));
}

void LBuilder::Stream(int buffer, const IndexExpr& index, const std::string& array) {
  LStmt s;
  s.kind = LStmtKind::kStream;
  s.buffer = buffer;
  s.index = index;
  s.name = array;
  Emit(std::move(s));
}

void LBuilder::Prefetch(int buffer, const IndexExpr& index) {
  LStmt s;
  s.kind = LStmtKind::kPrefetch;
  s.buffer = buffer;
  s.index = index;
  Emit(std::move(s));
}

void LBuilder::Fence() {
  LStmt s;
  s.kind = LStmtKind::kFence;
  Emit(std::move(s));
}

void LBuilder::Flag(const std::string& var, int site) {
  LStmt s;
  s.kind = LStmtKind::kFlag;
  s.name = var;
  s.site = site;
  Emit(std::move(s));
}

void LBuilder::Comment(const std::string& text) {
  LStmt s;
  s.kind = LStmtKind::kComment;
  s.text = text;
  Emit(std::move(s));
}

IndexExpr LBuilder::For(const std::string& var, LValue begin, LValue end, int64_t lo, int64_t hi,
                        int64_t step, bool simd, std::vector<std::string> or_vars) {
  LStmt s;
  s.kind = LStmtKind::kFor;
  s.name = var;
  s.begin = std::move(begin);
  s.end = std::move(end);
  s.step = step;
  s.simd = simd;
  s.simd_or_vars = std::move(or_vars);
  s.body = f_->NewBlock();
  const int body = s.body;
  const int id = Emit(std::move(s));
  stack_.push_back({body, id});
  return IndexExpr::Variable(var, lo, hi < lo ? lo : hi);
}

void LBuilder::If(LValue cond) {
  LStmt s;
  s.kind = LStmtKind::kIf;
  s.cond = std::move(cond);
  s.body = f_->NewBlock();
  const int body = s.body;
  const int id = Emit(std::move(s));
  stack_.push_back({body, id});
}

void LBuilder::Else() {
  const int id = stack_.back().stmt;
  stack_.pop_back();
  const int b = f_->NewBlock();
  f_->mutable_stmt(id).orelse = b;
  stack_.push_back({b, id});
}

void LBuilder::Close() { stack_.pop_back(); }

void LBuilder::Seq(int block) {
  LStmt s;
  s.kind = LStmtKind::kSeq;
  s.body = block;
  Emit(std::move(s));
}

int AddBuffer(LKernel* k, LBuffer b) {
  for (size_t i = 0; i < k->buffers.size(); ++i) {
    const LBuffer& x = k->buffers[i];
    if (x.kind == b.kind && x.slot == b.slot && x.name == b.name) return static_cast<int>(i);
  }
  k->buffers.push_back(std::move(b));
  return static_cast<int>(k->buffers.size()) - 1;
}

}  // namespace ember::codegen
