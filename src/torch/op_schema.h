// Schema and boxed-argument helpers shared by tracing (trace.cpp), Meta inference
// (meta.cpp), the eager fallback (eager.cpp) and the explicit kernels (kernels.cpp):
// argument type kinds, integer lists, tensors inside a boxed argument, the arguments an
// op writes, and printable calls.
#pragma once

#include <torch/library.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bridge.h"

namespace ember_torch {

// The type kind of an argument, looking through Optional (`Tensor?` -> TensorType).
c10::TypeKind base_kind(const c10::TypePtr& t);
// Whether `t` is a (optional) list whose (optional) elements are of kind `k`.
bool is_list_of(const c10::TypePtr& t, c10::TypeKind k);
// An `int[]` or concrete `SymInt[]` argument.
std::vector<int64_t> int_vec(const c10::IValue& v);
std::vector<c10::SymInt> sym_vec(const c10::IValue& v);
// A `ScalarType?` argument.
std::optional<at::ScalarType> opt_dtype(const c10::IValue& v);

// "aten::add.Tensor" ("aten::relu" for the default overload): the name counters, logs
// and error messages use.
std::string op_name(const c10::FunctionSchema& schema);

// `v` with `f` applied to each tensor of a Tensor, Tensor[] or Tensor?[] value (None
// elements stay None); any other value unchanged.
c10::IValue convert_tensors(const c10::IValue& v,
                            const std::function<at::Tensor(const at::Tensor&)>& f);

// Whether no argument is a tensor (a factory op: arange, zeros, ...).
bool is_factory(const std::vector<c10::IValue>& args);

// The argument indices the schema marks written (`(a!)`).
std::vector<int> marked_written_args(const c10::FunctionSchema& schema);
// Whether the schema marks arguments written and each of them is a tensor list (the
// in-place fused optimizers and `_foreach_*_` ops).
bool writes_only_tensor_lists(const c10::FunctionSchema& schema);
// The argument indices the op writes: those its schema marks, plus the ones the schema
// fails to mark (meta_corrections.h, `extra_written`).
std::vector<int> written_args(const c10::FunctionSchema& schema,
                              const std::vector<c10::IValue>& args);

// "aten::add.Tensor(Float[2, 3]@ember:0, Int, ...)": the call as a user reads it.
std::string describe_args(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args);

// Whether the base of a view op (its first tensor argument) is a normal (not an
// inference) tensor.
bool view_base_is_normal(const std::vector<c10::IValue>& args);

// Removes and returns the op's arguments from the top of a boxed stack.
std::vector<c10::IValue> pop_args(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A boxed kernel function as a registration argument (`m.impl(name, boxed<&f>())`).
template <void (*F)(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack*)>
torch::CppFunction boxed() {
  return torch::CppFunction::makeFromBoxedFunction<F>();
}

// The seed of the CPU generator a random op runs with, for its (seed, offset) pair from
// the ember generator, and that generator.
uint64_t cpu_seed_for(uint64_t seed, uint64_t offset);
at::Generator cpu_generator_for(uint64_t seed, uint64_t offset);

}  // namespace ember_torch
