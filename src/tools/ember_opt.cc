// ember-opt: reads text IR, runs passes, prints text IR.
//
//   ember-opt [--passes=a,b,...|--pipeline=default] [--print-hash] [--emit-kernel[=full]] FILE|-
//
// With neither --passes nor --pipeline the graph is parsed, verified and
// printed back (a round trip). --passes runs the named passes once each, in
// order, verifying after each (pass names: --list-passes). --pipeline=default
// runs DefaultPipeline(). --print-hash prints `// hash: <32 hex digits>` (the
// structural hash of the printed graph) before it. --emit-kernel prints, after
// the passes, the C++ kernel of every fusion node (its called body; kernel
// index = the fusion's position among the graph's fusions), or of the graph
// itself when it holds no fusion, instead of the IR: what the CPU code
// generator emits (docs/codegen.md), without the preamble that every kernel
// shares (prelude and vector-math declarations); --emit-kernel=full prints
// each as the complete translation unit the compiler gets. Every error goes to
// stderr with exit code 1. --version prints `ember-opt <version>`
// (ember/version.h).
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "ember/codegen/cpu.h"
#include "ember/ir/graph.h"
#include "ember/ir/hash.h"
#include "ember/ir/text.h"
#include "ember/passes/pass.h"
#include "ember/version.h"
#include "tool_util.h"

namespace {

constexpr const char* kUsage =
    "usage: ember-opt [--passes=a,b,...|--pipeline=default] [--print-hash] [--emit-kernel[=full]] "
    "FILE|-\n"
    "       ember-opt --list-passes\n"
    "       ember-opt --version\n";

int Fail(const std::string& msg) {
  std::cerr << "ember-opt: " << msg << "\n";
  return 1;
}

using ::ember::tools::ReadInput;

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

using ::ember::tools::StartsWith;

}  // namespace

int main(int argc, char** argv) {
  std::string file;
  std::vector<std::string> passes;
  bool have_passes = false, default_pipeline = false, print_hash = false, emit_kernel = false,
       full_kernel = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--version") {
      std::cout << "ember-opt " << ember::Version() << "\n";
      return 0;
    } else if (arg == "--list-passes") {
      for (const std::string& name : ember::AllPassNames()) std::cout << name << "\n";
      return 0;
    } else if (StartsWith(arg, "--passes=")) {
      passes = SplitCommas(arg.substr(9));
      have_passes = true;
    } else if (StartsWith(arg, "--pipeline=")) {
      std::string name = arg.substr(11);
      if (name != "default") return Fail("unknown pipeline '" + name + "' (known: default)");
      default_pipeline = true;
    } else if (arg == "--print-hash") {
      print_hash = true;
    } else if (arg == "--emit-kernel" || arg == "--emit-kernel=full") {
      emit_kernel = true;
      full_kernel = arg == "--emit-kernel=full";
    } else if (arg != "-" && StartsWith(arg, "-")) {
      return Fail("unknown option '" + arg + "'\n" + kUsage);
    } else if (!file.empty()) {
      return Fail("more than one input file\n" + std::string(kUsage));
    } else {
      file = arg;
    }
  }
  if (file.empty()) return Fail(std::string("no input file\n") + kUsage);
  if (have_passes && default_pipeline) return Fail("give either --passes or --pipeline, not both");

  std::string text, error;
  if (!ReadInput(file, &text, &error)) return Fail(error);
  ember::StatusOr<ember::Graph> parsed = ember::ParseGraph(text);
  if (!parsed.ok()) return Fail(file + ": " + parsed.status().ToString());
  ember::Graph g = std::move(parsed).value();

  if (default_pipeline || have_passes) {
    std::vector<std::unique_ptr<ember::Pass>> list;
    if (have_passes) {
      for (const std::string& name : passes) {
        auto pass = ember::CreatePass(name);
        if (!pass.ok()) return Fail(pass.status().ToString());
        list.push_back(std::move(pass).value());
      }
    }
    ember::StatusOr<bool> changed = default_pipeline ? ember::DefaultPipeline().Run(g)
                                                     : ember::Pipeline(std::move(list)).Run(g);
    if (!changed.ok()) return Fail(file + ": " + changed.status().ToString());
  } else {
    ember::Status st = ember::Verify(g);
    if (!st.ok()) return Fail(file + ": " + st.ToString());
  }

  if (emit_kernel) {
    std::vector<const ember::Graph*> kernels;
    for (const ember::Node& n : g.nodes()) {
      if (n.op == ember::OpKind::kFusion && n.called) kernels.push_back(n.called.get());
    }
    if (kernels.empty()) kernels.push_back(&g);
    for (size_t i = 0; i < kernels.size(); ++i) {
      auto ks = ember::codegen::EmitKernelSource(*kernels[i], static_cast<int>(i));
      if (!ks.ok()) return Fail(file + ": " + ks.status().ToString());
      // The header comment, then the kernel's own part (KernelSource::body).
      const std::string& code = ks->code;
      if (full_kernel) {
        std::cout << code;
        continue;
      }
      std::cout << code.substr(0, code.find(ks->preamble)) << "// [preamble left out]\n\n"
                << ks->body;
    }
    return 0;
  }

  if (print_hash) std::cout << "// hash: " << ember::HashGraph(g).ToString() << "\n";
  std::cout << ember::PrintGraph(g);
  return 0;
}
