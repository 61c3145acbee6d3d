// ember-example: the compiler core's C++ API end to end (docs/cpp_api.md).
//
//  1. build a graph with GraphBuilder (a dense layer with ReLU and a sum),
//     written with a few redundancies the passes remove;
//  2. print it, run DefaultPipeline(), print it again;
//  3. compile it into a runtime Executable and print its steps;
//  4. run it on host buffers and print the outputs (checked against the
//     reference interpreter).
#include <iostream>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"
#include "ember/ir/text.h"
#include "ember/passes/pass.h"
#include "ember/runtime/executable.h"

namespace {

int Fail(const ember::Status& st) {
  std::cerr << "ember-example: " << st.ToString() << "\n";
  return 1;
}

}  // namespace

int main() {
  using namespace ember;

  // ---- 1. Build: y = relu(x @ w + b) * 1, plus (y + y) computed twice. ----
  GraphBuilder b("dense_relu");
  NodeId x = b.Parameter(0, Shape(DType::kF32, {2, 3}));
  NodeId w = b.Parameter(1, Shape(DType::kF32, {3, 4}));
  NodeId bias = b.Parameter(2, Shape(DType::kF32, {4}));
  NodeId xw = b.DotGeneral(x, w,
                           DotDims{/*lhs_batch=*/{}, /*rhs_batch=*/{},
                                   /*lhs_contracting=*/{1}, /*rhs_contracting=*/{0}});
  NodeId h = b.Add(xw, b.BroadcastInDim(bias, {2, 4}, {1}));
  NodeId zero = b.BroadcastInDim(b.ConstantScalar(DType::kF32, 0), {2, 4}, {});
  NodeId one = b.BroadcastInDim(b.ConstantScalar(DType::kF32, 1), {2, 4}, {});
  NodeId y = b.Multiply(b.Maximum(h, zero), one);  // simplify: x*1 => x
  NodeId twice_a = b.Add(y, y);
  NodeId twice_b = b.Add(y, y);  // cse merges it with twice_a
  NodeId total = b.Reduce(b.Add(twice_a, twice_b), {0, 1}, ReduceKind::kAdd);
  b.Negate(total);  // unused: dce removes it
  b.SetOutputs({y, total});
  StatusOr<Graph> built = b.Build();  // verifies the graph
  if (!built.ok()) return Fail(built.status());
  Graph g = std::move(built).value();
  const Graph original = g;
  std::cout << "== built graph ==\n" << PrintGraph(g);

  // ---- 2. Optimize. ----
  StatusOr<bool> changed = DefaultPipeline().Run(g);
  if (!changed.ok()) return Fail(changed.status());
  std::cout << "\n== after the default pipeline (changed: " << (*changed ? "yes" : "no") << ") ==\n"
            << PrintGraph(g);

  // ---- 3. Compile into runtime steps. ----
  StatusOr<Executable> exe = Compile(g);
  if (!exe.ok()) return Fail(exe.status());
  std::cout << "\n== executable ==\n" << exe->DebugString();

  // ---- 4. Run on host buffers. ----
  std::vector<BufferRef> args = {
      Buffer::FromLiteral(Literal::FromDoubles(Shape(DType::kF32, {2, 3}), {1, 2, 3, -1, 0, 1})),
      Buffer::FromLiteral(Literal::FromDoubles(Shape(DType::kF32, {3, 4}),
                                               {1, 0, -1, 0.5, 0, 1, 0, 0.5, 1, 1, 1, -2})),
      Buffer::FromLiteral(Literal::FromDoubles(Shape(DType::kF32, {4}), {0.5, -4, 0, 1})),
  };
  StatusOr<std::vector<BufferRef>> outs = exe->Run(args);
  if (!outs.ok()) return Fail(outs.status());
  std::cout << "\n== outputs ==\n";
  for (size_t i = 0; i < outs->size(); ++i) {
    std::cout << "output " << i << ": " << (*outs)[i]->literal().ToString() << "\n";
  }

  // The reference interpreter on the unoptimized graph is the oracle.
  std::vector<const Literal*> arg_values;
  for (const BufferRef& a : args) arg_values.push_back(&a->literal());
  StatusOr<std::vector<Literal>> want = Evaluate(original, arg_values);
  if (!want.ok()) return Fail(want.status());
  for (size_t i = 0; i < want->size(); ++i) {
    if (!(*want)[i].BitwiseEquals((*outs)[i]->literal())) {
      std::cerr << "ember-example: output " << i
                << " differs from the interpreter: " << (*want)[i].ToString() << "\n";
      return 1;
    }
  }
  std::cout << "outputs match the reference interpreter on the unoptimized graph\n";
  const BufferStats stats = GetBufferStats();
  std::cout << "buffers: " << stats.live_buffers << " live, " << stats.bytes_in_use
            << " bytes in use, peak " << stats.peak_bytes_in_use << " bytes\n";
  return 0;
}
