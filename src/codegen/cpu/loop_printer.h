// Private: the loop IR (loop_ir.h) as C++: the one place generated kernels
// are spelled. Elementwise ops print through a table (kOpSpellings in
// loop_printer.cc: a float form and an integer form per op, over the
// prelude's helpers), so each op's C++ mirrors the interpreter's formula;
// bf16/f16 results are rounded after every op, as the interpreter stores each
// node's value; a libm call's compile-time-constant operand goes through
// ember_opaque() so GCC cannot fold it with MPFR.
#pragma once

#include <string>

#include "codegen/cpu/loop_ir.h"

namespace ember::codegen {

struct PrintedKernel {
  // `namespace { constant tables, struct EmberCtx, the phases }`.
  std::string body;
  // The exported entry function: allocates temporaries, launches the phases
  // in order through the parallel-for (or serially when it is null), frees,
  // returns 0 / the first flagged data-error site + 1 / -1.
  std::string entry;
};

PrintedKernel PrintKernel(const LKernel& k);

// One value expression, one function (tests, debugging).
std::string PrintExpr(const LKernel& k, const LExpr& e);
std::string PrintFunction(const LKernel& k, const LFunction& f);

}  // namespace ember::codegen
