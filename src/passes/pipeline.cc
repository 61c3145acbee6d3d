// The pass pipeline (DESIGN §4): a readable list of passes, the verifier
// between passes, EMBER_DUMP_PASSES / EMBER_SKIP_PASSES from the environment.
// The registry of pass names is AllPassNames() and CreatePass() below; adding a pass:
// CONTRIBUTING.md, "Walkthrough: adding a pass" (pass file, registry, lit test, fuzzer).
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>
#include <utility>

#include "ember/ir/text.h"
#include "ember/passes/pass.h"
#include "passes/constant_folding.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/fusion.h"
#include "passes/memory_scheduling.h"
#include "passes/simplify.h"

namespace ember {
namespace {

// Names listed in EMBER_SKIP_PASSES (comma-separated; spaces ignored).
std::set<std::string> SkippedPasses() {
  std::set<std::string> out;
  const char* env = std::getenv("EMBER_SKIP_PASSES");
  if (env == nullptr) return out;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::string name;
    for (char c : item) {
      if (c != ' ' && c != '\t') name += c;
    }
    if (!name.empty()) out.insert(name);
  }
  return out;
}

bool DumpEnabled() {
  const char* env = std::getenv("EMBER_DUMP_PASSES");
  return env != nullptr && env[0] != '\0' && std::string(env) != "0";
}

Status WithPassName(const std::string& pass, const Status& s) {
  return Status(s.code(), "pass '" + pass + "': " + s.message());
}

}  // namespace

Pipeline::Pipeline(std::vector<std::unique_ptr<Pass>> passes, int max_rounds)
    : passes_(std::move(passes)), max_rounds_(max_rounds < 1 ? 1 : max_rounds) {}

std::vector<std::string> Pipeline::pass_names() const {
  std::vector<std::string> names;
  for (const auto& p : passes_) names.push_back(p->name());
  return names;
}

StatusOr<bool> Pipeline::Run(Graph& g) const {
  const std::set<std::string> skipped = SkippedPasses();
  const bool dump = DumpEnabled();
  bool any_changed = false;
  for (int round = 1; round <= max_rounds_; ++round) {
    bool round_changed = false;
    for (const auto& pass : passes_) {
      const std::string name = pass->name();
      if (skipped.count(name)) {
        if (dump) std::cerr << "// pass " << name << ": skipped (EMBER_SKIP_PASSES)\n";
        continue;
      }
      Graph before = g;
      StatusOr<bool> changed = pass->Run(g);
      if (!changed.ok()) {
        g = std::move(before);
        return WithPassName(name, changed.status());
      }
      Status verified = Verify(g);
      if (!verified.ok()) {
        g = std::move(before);
        return EMBER_INTERNAL_ERROR("pass '", name,
                                    "' produced an invalid graph: ", verified.ToString());
      }
      round_changed = round_changed || *changed;
      if (dump) {
        std::cerr << "// after pass " << name << " (round " << round << ", "
                  << (*changed ? "changed" : "unchanged") << ")\n"
                  << PrintGraph(g);
      }
    }
    any_changed = any_changed || round_changed;
    if (!round_changed) break;
  }
  return any_changed;
}

std::vector<std::string> AllPassNames() {
  return {"simplify", "constant-folding", "cse", "dce", "fusion", "memory-scheduling"};
}

bool PassSkippedByEnv(const std::string& name) { return SkippedPasses().count(name) != 0; }

StatusOr<std::unique_ptr<Pass>> CreatePass(const std::string& name) {
  std::unique_ptr<Pass> p;
  if (name == "simplify") p = std::make_unique<passes::SimplifyPass>();
  if (name == "constant-folding") p = std::make_unique<passes::ConstantFoldingPass>();
  if (name == "cse") p = std::make_unique<passes::CsePass>();
  if (name == "dce") p = std::make_unique<passes::DcePass>();
  if (name == "fusion") p = std::make_unique<passes::FusionPass>();
  if (name == "memory-scheduling") p = std::make_unique<passes::MemorySchedulingPass>();
  if (!p) {
    std::string known;
    for (const auto& n : AllPassNames()) known += (known.empty() ? "" : ", ") + n;
    return NotFound("unknown pass '", name, "' (known passes: ", known, ")");
  }
  return p;
}

Pipeline DefaultPipeline() {
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(std::make_unique<passes::SimplifyPass>());
  passes.push_back(std::make_unique<passes::ConstantFoldingPass>());
  passes.push_back(std::make_unique<passes::CsePass>());
  passes.push_back(std::make_unique<passes::DcePass>());
  return Pipeline(std::move(passes), /*max_rounds=*/4);
}

}  // namespace ember
