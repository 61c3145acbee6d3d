// Private: the loop IR of a CPU kernel, between the planners (plan_*.cc:
// which loops, in which order, with which vector widths) and the C++ printer
// (loop_printer.cc, the only place that spells C++).
//
// A kernel (LKernel) is a set of buffers, constant tables, phases and the
// entry's launch list. A phase (LFunction) is a function over work items
// [begin, end) that the entry hands to the parallel-for; its body is a tree
// of statements (loops, branches, lets, stores, accumulator updates) over
// shallow value expressions (LExpr). Element values are in the compute type
// of their dtype (c_types.h: bf16/f16 compute as float); loads decode the
// buffer's storage type and stores encode it. Indices are IndexExprs
// (index_expr.h), simplified as they are built.
//
// Statements live in an arena owned by the function and refer to their
// child blocks by number, so nesting depth costs no stack anywhere (the
// builder, the printer and destruction are iterative): kernels as deep as
// CheckKernelSupported allows are built on the caller's stack.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/cpu/index_expr.h"
#include "ember/ir/graph.h"

namespace ember::codegen {

// ---- values ----

struct LExpr;
using LValue = std::shared_ptr<const LExpr>;

enum class LExprKind : uint8_t {
  kVar,       // `name`: a local (let-bound value, loop counter, accumulator)
  kLiteral,   // `text`: a C++ literal of `type`
  kIndex,     // `index`: an int64 value
  kLoad,      // element `index` of buffer `buffer`, decoded to `type`'s compute type
  kArray,     // `name`[`index`]: an element of a local array
  kOp,        // elementwise `op` on args of dtype `operand_type` (HLO semantics), result `type`
  kConvert,   // args[0] of dtype `operand_type` converted to `type`
  kSelect,    // args[0] ? args[1] : args[2]
  kCombine,   // reduction combine `reduce` of args[0], args[1] in `type` (no rounding)
  kCmp,       // args[0] `cmp` args[1] on int64 or compute values: a C++ bool
  kAnd,       // args[0] && args[1] (bools)
  kOr,        // args[0] || args[1] (bools)
  kNot,       // !args[0]
  kFinish,    // pairwise accumulator `name`'s result (identity args[0]); with args[1],
              // element args[1] of the array of accumulators `name`
  kMisalign,  // the byte offset of &buffer[index] within its 64-byte line (int64)
};

// The C++ comparison of kCmp.
enum class LCmp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };

struct LExpr {
  LExprKind kind = LExprKind::kLiteral;
  DType type = DType::kS64;          // result dtype (kS64 for indices; kPred for kCmp/kAnd/kNot)
  bool constant = false;             // a compile-time constant (no index, load or variable read)
  std::string name;                  // kVar, kArray, kFinish
  std::string text;                  // kLiteral
  IndexExpr index;                   // kIndex, kLoad, kArray
  int buffer = -1;                   // kLoad, kMisalign
  OpKind op = OpKind::kAdd;          // kOp
  DType operand_type = DType::kS64;  // kOp, kConvert
  ComparisonKind direction = ComparisonKind::kEq;  // kOp compare
  ReduceKind reduce = ReduceKind::kAdd;            // kCombine, kFinish
  LCmp cmp = LCmp::kEq;                            // kCmp
  std::vector<LValue> args;
};

// Constructors (the args' order is the op's operand order).
LValue LVar(const std::string& name, DType type, bool constant = false);
LValue LLit(const std::string& text, DType type);  // constant
LValue LIndex(const IndexExpr& e);
LValue LInt(int64_t v);
LValue LLoad(int buffer, const IndexExpr& index, DType type);
LValue LArray(const std::string& name, const IndexExpr& index, DType type);
LValue LOpExpr(OpKind op, DType type, DType operand_type, std::vector<LValue> args,
               ComparisonKind direction = ComparisonKind::kEq);
LValue LConvert(DType from, DType to, LValue x);
LValue LSelect(LValue c, LValue a, LValue b, DType type);
LValue LCombine(ReduceKind k, DType type, LValue a, LValue b);
LValue LCmpExpr(LCmp c, LValue a, LValue b);
LValue LAnd(LValue a, LValue b);
LValue LOr(LValue a, LValue b);
LValue LNot(LValue a);
LValue LFinish(const std::string& pairwise, ReduceKind k, DType type, LValue identity,
               LValue element = nullptr);
LValue LMisalign(int buffer, const IndexExpr& index);

// ---- statements ----

enum class LStmtKind : uint8_t {
  kLet,       // const T name = value;
  kDecl,      // T name[extent] (extent 0: a scalar), = value if given
  kAssign,    // target = value (or_assign: target |= value)
  kStore,     // buffer[index] = value (encoded to the buffer's storage type)
  kFor,       // for (int64_t var = begin; var < end; var += step) body
  kIf,        // if (cond) body else orelse
  kPush,      // pairwise accumulator `name`.Push(value) with combine `reduce` in `type`
              // (`name`[target].Push when target is set: an array of them)
  kStream,    // 64 bytes of local array `name` to buffer[index] with a non-temporal store
  kFence,     // orders the phase's non-temporal stores
  kPrefetch,  // a hint to fetch the cache line of buffer[index] (no effect on values)
  kFlag,      // data-error flag variable `name` (site `site`) into the kernel's context
  kComment,   // // text
  kSeq,       // the statements of block `body`, in place (no scope of its own)
};

// What a kDecl declares.
enum class LDeclKind : uint8_t {
  kValue,     // compute type of `type`
  kStorage,   // storage type of `type` (blocks for non-temporal stores)
  kFlag,      // int data-error flag, starts at 0
  kPairwise,  // EmberPairwise<compute type of `type`, depth> (depth 0: 64 levels); an
              // array of `extent` of them when extent > 0
};

struct LStmt {
  LStmtKind kind = LStmtKind::kComment;
  std::string name;  // kLet/kDecl/kFlag/kPush/kStream: the variable; kFor: the counter
  DType type = DType::kS64;
  LDeclKind decl = LDeclKind::kValue;
  int64_t extent = 0;  // kDecl: array length (0: scalar)
  int64_t depth = 0;   // kDecl of kPairwise: the counter's levels (0: the default, 64)
  LValue value;        // kLet, kDecl (init, may be null), kAssign, kStore, kPush
  LValue target;       // kAssign: a kVar or kArray; kPush: the element index (or null)
  bool or_assign = false;
  int buffer = -1;  // kStore, kStream, kPrefetch
  IndexExpr index;  // kStore, kStream, kPrefetch
  // kFor
  LValue begin, end;
  int64_t step = 1;
  bool simd = false;                      // `#pragma omp simd`
  std::vector<std::string> simd_or_vars;  // reduction(|: ...) clauses
  LValue cond;                            // kIf
  int body = -1;                          // kFor, kIf: a block of the function
  int orelse = -1;                        // kIf: a block, or -1
  ReduceKind reduce = ReduceKind::kAdd;   // kPush
  int64_t level = 0;                      // kPush: the value covers 2^level blocks
  int site = 0;                           // kFlag
  std::string text;                       // kComment
};

// A buffer a phase reads or writes.
struct LBuffer {
  enum Kind : uint8_t { kInput, kOutput, kTemp, kTable } kind = kInput;
  int slot = 0;  // c->in[slot], c->out[slot], c->tmp[slot], table number
  DType type = DType::kF32;
  std::string name;  // p0, out1, m5, cst3
};

// A phase: `void name(void* vctx, int64_t begin, int64_t end)`.
class LFunction {
 public:
  LFunction();
  // The top-level block is block 0.
  int NewBlock();
  void Append(int block, LStmt s);
  void Insert(int block, size_t pos, LStmt s);
  const std::vector<int>& block(int b) const { return blocks_[b]; }
  const LStmt& stmt(int s) const { return stmts_[s]; }
  LStmt& mutable_stmt(int s) { return stmts_[s]; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }

  std::string name;
  std::string comment;  // the line above the function

 private:
  std::vector<LStmt> stmts_;
  std::vector<std::vector<int>> blocks_;  // statement numbers
};

// Builds a function's statements at an insertion point (a stack of blocks).
class LBuilder {
 public:
  // Statements go into `block` (a detached block: attach it with Seq).
  LBuilder(LFunction* f, int* var_counter, int block = 0);

  // `const T v<n> = value;` (a literal or a variable is returned as is).
  LValue Let(DType type, LValue value);
  // `const T name = value;` under a given name.
  LValue LetNamed(const std::string& name, DType type, LValue value);
  // `const int64_t name = index;`: a variable with `index`'s range.
  IndexExpr LetIndex(const std::string& name, const IndexExpr& index);
  // A mutable local; returns a kVar of it.
  LValue Decl(const std::string& name, DType type, LValue init = nullptr,
              LDeclKind kind = LDeclKind::kValue);
  void DeclArray(const std::string& name, DType type, int64_t extent,
                 LDeclKind kind = LDeclKind::kValue, int64_t depth = 0);
  void Assign(LValue target, LValue value, bool or_assign = false);
  void Store(int buffer, const IndexExpr& index, DType type, LValue value);
  void Push(const std::string& pairwise, ReduceKind k, DType type, LValue value,
            LValue element = nullptr, int64_t level = 0);
  void Stream(int buffer, const IndexExpr& index, const std::string& array);
  void Fence();
  void Prefetch(int buffer, const IndexExpr& index);
  void Flag(const std::string& var, int site);
  void Comment(const std::string& text);

  // Opens `for (int64_t var = begin; var < end; var += step)`; the counter's
  // range is [lo, hi] (for its IndexExpr). Statements go into its body until
  // Close().
  IndexExpr For(const std::string& var, LValue begin, LValue end, int64_t lo, int64_t hi,
                int64_t step = 1, bool simd = false, std::vector<std::string> or_vars = {});
  // Opens `if (cond)`; Else() switches to its else branch; Close() ends it.
  void If(LValue cond);
  void Else();
  void Close();
  // Block `block`'s statements here, in place.
  void Seq(int block);
  // The statement number of the innermost open loop or branch (a loop's simd
  // clause is amended once its body is known: LFunction::mutable_stmt).
  int current() const { return stack_.back().stmt; }

  std::string NewName(const char* prefix = "v");
  int depth() const { return static_cast<int>(stack_.size()); }
  LFunction* function() { return f_; }

 private:
  struct Open {
    int block;
    int stmt;  // the loop / if that owns the block, or -1 for the root
  };
  int Emit(LStmt s);
  LFunction* f_;
  int* var_counter_;
  std::vector<Open> stack_;
};

// A kernel: what the printer needs for the whole translation unit.
struct LKernel {
  std::string name;                 // ember_fused_..._<n>
  std::vector<std::string> header;  // comment lines (without "// ")
  std::vector<LBuffer> buffers;     // by number (LExpr::buffer, LStmt::buffer)
  std::vector<NodeId> tables;       // constant nodes with a table (LBuffer::kTable slot)
  const Graph* graph = nullptr;     // for the tables' literals
  std::vector<int64_t> temp_bytes;  // c->tmp[i], allocated by the entry
  std::vector<NodeId> error_sites;  // c->zero_div[i]; the entry returns i + 1
  std::vector<LFunction> phases;
  struct Launch {
    int phase;
    int64_t count, grain;
  };
  std::vector<Launch> launches;  // in order
};

// The buffer number of `b` in `k` (added if new; equal kind and slot = same).
int AddBuffer(LKernel* k, LBuffer b);

}  // namespace ember::codegen
