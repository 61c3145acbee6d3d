// One batch bucket's program in an export artifact (docs/architecture.md, "Export
// artifacts"): how each parameter of the optimized core graph is fed (a view of a
// weight or of a user input, a constant of the trace, a scalar), which lowered root
// each output is, and the ATen externs by schema. The export side writes it from a
// captured program (export_program.cpp); the loader (model.cpp) reads it and compiles
// the graph text with it. Text, one record per line:
//
//   ember-program 1
//   param input <fx> <permuted 0|1> <sizes> <strides> <storage offset delta>
//   param constant <j> <sizes> <dtype>       dense row-major, the artifact's constant j
//   param scalar <tag> <value>                binding.h's scalar tags; value encoded
//   output <root> <dtype> <sizes> <strides> <offset>
//   extern <custom-call target> <encoded ATen step: schema, arguments, layouts>
//
// `fx` numbers the exported graph's flattened inputs (weights, buffers and constants
// first, then the user's inputs: the manifest's `fx` lines); lists are
// comma-separated ("-" when empty); dtypes are c10::ScalarType numbers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aten_extern.h"
#include "bridge.h"
#include "capture.h"
#include "ember/runtime/executable.h"

namespace ember_torch::exporting {

struct ProgramParam {
  enum Kind { kInput, kConstant, kScalar } kind = kInput;
  int index = 0;  // fx input / constant index
  bool permuted = false;
  std::vector<int64_t> sizes, strides;
  int64_t offset_delta = 0;
  at::ScalarType dtype = at::kFloat;  // kConstant
  int tag = 0;                        // kScalar
  c10::IValue value;                  // kScalar
};

struct ProgramOutput {
  int root = 0;
  TensorMeta meta;
};

struct Program {
  std::vector<ProgramParam> params;
  std::vector<ProgramOutput> outputs;
  std::map<std::string, std::shared_ptr<ExternState>> externs;  // by custom-call target
  std::string Print() const;
  // Parses the text; externs are resolved through the c10 dispatcher (an unknown schema
  // is an error naming it). Throws std::runtime_error naming the line.
  static Program Parse(const std::string& text);
};

// What ember.export stores for one captured program (export_program.cpp).
struct ExportedParts {
  std::string program;                // Program::Print()
  std::string ir;                     // the optimized core graph (ember IR text)
  std::vector<at::Tensor> constants;  // dense row-major, numbered as `param constant j`
  std::vector<std::string> schemas;   // the ATen externs' schemas (aten::name.overload)
};
// Throws std::runtime_error naming what cannot be exported (an output that is an input
// itself, an extern argument of a type the program text cannot hold).
ExportedParts export_parts(const CapturedProgram& p);

// Kernel target of a compile: "native" (this CPU, -march=native) or "x86-64-v3".
struct KernelTarget {
  std::string name = "native";
  std::string cache_dir;  // the codegen disk cache to load from / build into
  bool fast = false, vector_math = true;
};
// The CPU feature string the native kernels' cache keys hold (codegen's CpuFeatures()).
std::string native_cpu_features();
// Whether this CPU runs x86-64-v3 code (AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE).
bool cpu_supports_baseline();
// Parses `ir` and compiles it (kCpu, no optimization passes: the text is already
// optimized) with the program's externs. Throws std::runtime_error.
std::shared_ptr<ember::Executable> compile_program(const std::string& ir, const Program& prog,
                                                   const KernelTarget& target);

// The codegen disk-cache files of `exe`'s kernels (each kernel's .meta, .so and .cc,
// absolute paths, no repeats): what an artifact stores per kernel target.
std::vector<std::string> kernel_files(const ember::Executable& exe);

}  // namespace ember_torch::exporting
