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
#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember {

struct ExternCall {
  const Node* node = nullptr;  // the custom-call (or op) being run
  std::vector<const Literal*> inputs;
  std::vector<Literal*> outputs;  // preallocated (bytes unspecified), shapes from the node
};

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
