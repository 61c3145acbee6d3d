// Ember's program steps as torch.profiler events (docs/architecture.md, "Profiling").
//
// The runtime calls a StepObserver around every step it runs (native kernel, extern,
// interpreted run, copy); this one opens an at::RecordFunction (USER_SCOPE) named as
// StepDisplayName says — the fused kernel's name, the ATen op of an ATen extern, or
// "ember.dot-general" (whose own aten::mm call then nests inside it) — with the traced
// source lines of what the step computes as its "ember_source" keyword input. When no
// profiler is collecting, Begin returns at once: RecordFunction's own "any callbacks?"
// check is the whole cost.
#include <ATen/record_function.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "ember/runtime/executable.h"
#include "ember/runtime/step_observer.h"
#include "lower.h"

namespace ember_torch {
namespace {

class TorchProfilerObserver final : public ember::StepObserver {
 public:
  void* Begin(const ember::Executable& exe, size_t index) override {
    auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
    if (!callbacks) return nullptr;
    auto* rf = new at::RecordFunction(std::move(*callbacks));
    if (rf->isActive()) {
      std::unordered_map<std::string, c10::IValue> kw;
      kw.emplace("ember_source", c10::IValue(ember::StepSourceSummary(exe, index)));
      rf->before(ember::StepDisplayName(exe, index), &kw);
    }
    return rf;
  }
  void End(void* token) override { delete static_cast<at::RecordFunction*>(token); }
};

}  // namespace

void install_profiler_events() {
  static TorchProfilerObserver observer;
  ember::SetStepObserver(&observer);
}

}  // namespace ember_torch
