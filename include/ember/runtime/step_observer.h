// StepObserver: a process-wide hook around every step an Executable runs, so a
// profiler can show a program's steps as events (the torch bridge reports them to
// torch.profiler: docs/architecture.md, "Profiling").
//
// Run() calls Begin before a step and End after it (also when the step fails),
// on the thread that runs the step. With no observer installed the cost is one
// relaxed atomic load per step.
#pragma once

#include <cstddef>
#include <string>

namespace ember {

class Executable;

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Before step `index` of `exe` runs. Returns a token passed to End (may be null).
  virtual void* Begin(const Executable& exe, size_t index) = 0;
  virtual void End(void* token) = 0;
};

// Installs `observer` (not owned; null removes it). Thread-safe.
void SetStepObserver(StepObserver* observer);
StepObserver* GetStepObserver();

// The name a profiler shows for step `index`: a native kernel's name, the ATen op
// of an ATen custom-call ("aten::add.Tensor"), the extern's name
// ("ember.dot-general"), or "ember.interpret" / "ember.copy".
std::string StepDisplayName(const Executable& exe, size_t index);
// What the step computes, for a profiler's metadata: the metadata of its nodes
// (the torch bridge records "aten::op #k @ file.py:line"), "; "-separated,
// duplicates dropped, at most `max_items` entries (then "...").
std::string StepSourceSummary(const Executable& exe, size_t index, size_t max_items = 8);

}  // namespace ember
