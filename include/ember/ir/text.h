// Text form of the IR, which round-trips: Print(Parse(s)) == canonical s.
//
//   graph main(%p0: f32[8,16], %p1: f32[8,16]) {
//     %0 = f32[8,16] parameter(0)
//     %1 = f32[8,16] parameter(1)
//     %2 = f32[8,16] add(%0, %1)
//     %3 = f32[16,8] transpose(%2), dimensions={1,0}
//     %4 = f32[] constant({2.5})
//     ROOT (%3, %2)
//   }
//
// The exact grammar is documented at the top of src/ir/text.cc and in
// docs/ir.md. Parse errors are InvalidArgument naming the line and column.
#pragma once

#include <string>
#include <string_view>

#include "ember/ir/graph.h"

namespace ember {

// Version of the text form, bumped when a text the previous version printed
// may no longer parse or verify (docs/ir.md "Text form versions"). 2: the
// fusion `kind` is the body's kind by AnalyzeFusion (loop|input|row|scatter);
// version 1 printed kind=input for a row fusion.
inline constexpr int kIrTextVersion = 2;

std::string PrintGraph(const Graph& g);
StatusOr<Graph> ParseGraph(std::string_view text);

}  // namespace ember
