// The extern-kernel registry and the core's reference kernels:
//   ember.dot-general  — inputs (lhs, rhs), attributes as dot-general's
//   ember.convolution  — inputs (lhs, rhs), attributes as convolution's
// Both run the interpreter's dot-general / convolution on the node's
// attributes, writing the single output; they check every shape first.
#include "ember/eval/extern_registry.h"

#include <map>
#include <mutex>

#include "eval/eval_util.h"
#include "eval/ops.h"

namespace ember {
namespace {

struct RegistryState {
  std::mutex mu;
  std::map<std::string, ExternKernel> kernels;
};

RegistryState& State() {
  static RegistryState* state = new RegistryState();  // never destroyed: safe at exit
  return *state;
}

// Runs `op` (dot-general or convolution) with the attributes of call.node.
Status RunAsOp(OpKind op, const char* name, ExternCall& call) {
  if (call.node == nullptr) return InvalidArgument(name, ": extern call without a node");
  const std::string label = internal::StrCat(eval::NodeLabel(*call.node), " (", name, ")");
  if (call.inputs.size() != 2 || call.outputs.size() != 1) {
    return InvalidArgument(label, ": expected 2 inputs and 1 output, got ", call.inputs.size(),
                           " and ", call.outputs.size());
  }
  for (const Literal* in : call.inputs) {
    if (in == nullptr) return InvalidArgument(label, ": null input");
  }
  if (call.outputs[0] == nullptr || call.outputs[0]->shape().is_tuple()) {
    return InvalidArgument(label, ": the output must be an array");
  }
  Node node = *call.node;
  node.op = op;
  node.shape = call.outputs[0]->shape();
  StatusOr<Literal> r = eval::EvalContraction(node, call.inputs);
  if (!r.ok()) return Status(r.status().code(), label + ": " + r.status().message());
  *call.outputs[0] = std::move(r).value();
  return OkStatus();
}

void RegisterReferenceKernels(RegistryState& s) {
  s.kernels["ember.dot-general"] = [](ExternCall& c) {
    return RunAsOp(OpKind::kDotGeneral, "ember.dot-general", c);
  };
  s.kernels["ember.convolution"] = [](ExternCall& c) {
    return RunAsOp(OpKind::kConvolution, "ember.convolution", c);
  };
}

}  // namespace

ExternRegistry& ExternRegistry::Global() {
  static ExternRegistry* registry = [] {
    RegisterReferenceKernels(State());
    return new ExternRegistry();
  }();
  return *registry;
}

void ExternRegistry::Register(const std::string& name, ExternKernel kernel) {
  RegistryState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.kernels[name] = std::move(kernel);
}

StatusOr<ExternKernel> ExternRegistry::Lookup(const std::string& name) const {
  RegistryState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.kernels.find(name);
  if (it == s.kernels.end() || !it->second) {
    return NotFound("no extern kernel named '", name, "'");
  }
  return it->second;
}

bool ExternRegistry::Has(const std::string& name) const {
  RegistryState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.kernels.find(name);
  return it != s.kernels.end() && it->second;
}

Status CheckAdopted(const ExternCall& call) {
  if (call.adopted.size() > call.outputs.size()) {
    return EMBER_INTERNAL_ERROR("extern call: ", call.adopted.size(), " adopted outputs for ",
                                call.outputs.size(), " outputs");
  }
  for (size_t k = 0; k < call.adopted.size(); ++k) {
    if (call.adopted[k].data != nullptr && call.outputs[k]->is_borrowed()) {
      return EMBER_INTERNAL_ERROR("extern call: output ", k,
                                  " is borrowed (written in place) but was handed over");
    }
  }
  return OkStatus();
}

Status AdoptOutputs(ExternCall& call) {
  EMBER_RETURN_IF_ERROR(CheckAdopted(call));
  for (size_t k = 0; k < call.adopted.size(); ++k) {
    ExternCall::Adopted& a = call.adopted[k];
    if (a.data == nullptr) continue;
    Literal& out = *call.outputs[k];
    EMBER_ASSIGN_OR_RETURN(out, Literal::Borrow(out.shape(), a.data, std::move(a.owner)));
    a = ExternCall::Adopted{};
  }
  return OkStatus();
}

}  // namespace ember
