// Registry of extern kernels by name: what a custom-call (and an extern step
// of the runtime) runs. The torch bridge registers ATen-backed kernels; the
// core registers reference kernels (`ember.dot-general`, `ember.convolution`)
// used by tests and by the runtime before native code generation exists.
//
// A kernel reads its inputs and writes its already-allocated outputs (one per
// array result, in tuple order): every element of them, since their bytes are
// unspecified when the kernel starts (the runtime does not zero-fill them). It returns a non-OK
// Status on bad data; it must never abort.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember {

struct ExternCall {
  const Node* node = nullptr;  // the custom-call (or op) being run
  std::vector<const Literal*> inputs;
  std::vector<Literal*> outputs;  // preallocated (bytes unspecified), shapes from the node

  // Output bytes handed over instead of written. A kernel whose result k already lies
  // in memory of its own (an ATen op's freshly allocated tensor) may set adopted[k]
  // (resizing `adopted` to outputs.size()) rather than copy it into *outputs[k]:
  // `data` holds output k's dense row-major bytes, 64-byte aligned, aliasing no input
  // and no other output, and stays valid while `owner` lives; the owner accounts the
  // bytes (NoteExternalBytes). Never for an output that is itself borrowed
  // (Literal::is_borrowed: a donated parameter's buffer the result must be written
  // into). The caller takes them without a copy (AdoptOutputs, or the runtime's
  // buffers); *outputs[k] is then unused.
  struct Adopted {
    void* data = nullptr;
    std::shared_ptr<void> owner;
  };
  std::vector<Adopted> adopted;
};

// Internal error when `call.adopted` breaks its contract: more entries than outputs, or
// an output handed over that the kernel must write in place (a borrowed output).
Status CheckAdopted(const ExternCall& call);

// Makes every adopted output of `call` its output literal (a borrowed literal over the
// handed-over bytes), after CheckAdopted.
Status AdoptOutputs(ExternCall& call);

using ExternKernel = std::function<Status(ExternCall&)>;

class ExternRegistry {
 public:
  static ExternRegistry& Global();
  // Replaces any earlier kernel of that name.
  void Register(const std::string& name, ExternKernel kernel);
  // NotFound if no kernel has that name.
  StatusOr<ExternKernel> Lookup(const std::string& name) const;
  bool Has(const std::string& name) const;
};

}  // namespace ember
