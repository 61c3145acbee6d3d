// Schema and boxed-argument helpers (op_schema.h).
#include "op_schema.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <sstream>

#include "meta_corrections.h"

namespace ember_torch {

c10::TypeKind base_kind(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType) {
    return t->expectRef<c10::OptionalType>().getElementType()->kind();
  }
  return t->kind();
}

bool is_list_of(const c10::TypePtr& t, c10::TypeKind k) {
  const c10::TypePtr* tp = &t;
  c10::TypePtr inner;
  if (t->kind() == c10::TypeKind::OptionalType) {
    inner = t->expectRef<c10::OptionalType>().getElementType();
    tp = &inner;
  }
  if ((*tp)->kind() != c10::TypeKind::ListType) return false;
  auto el = (*tp)->expectRef<c10::ListType>().getElementType();
  if (el->kind() == c10::TypeKind::OptionalType) {
    el = el->expectRef<c10::OptionalType>().getElementType();
  }
  return el->kind() == k;
}

std::vector<int64_t> int_vec(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  auto l = v.toSymIntList();
  for (size_t i = 0; i < l.size(); ++i) out.push_back(l.get(i).expect_int());
  return out;
}

std::optional<at::ScalarType> opt_dtype(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  return v.toScalarType();
}

std::vector<c10::SymInt> sym_vec(const c10::IValue& v) {
  std::vector<c10::SymInt> out;
  for (int64_t x : int_vec(v)) out.emplace_back(x);
  return out;
}

std::string op_name(const c10::FunctionSchema& schema) {
  if (schema.overload_name().empty()) return schema.name();
  return schema.name() + "." + schema.overload_name();
}

c10::IValue convert_tensors(const c10::IValue& v,
                            const std::function<at::Tensor(const at::Tensor&)>& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& o : v.toOptionalTensorList()) {
      std::optional<at::Tensor> t = o;
      if (t && t->defined()) {
        out.push_back(f(*t));
      } else {
        out.push_back(std::nullopt);
      }
    }
    return out;
  }
  return v;
}

bool is_factory(const std::vector<c10::IValue>& args) {
  for (const auto& a : args) {
    if (a.isTensor() || a.isTensorList() || a.isOptionalTensorList()) return false;
  }
  return true;
}

std::string describe_args(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  std::ostringstream os;
  os << op_name(op.schema()) << "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) os << ", ";
    const auto& a = args[i];
    if (a.isTensor()) {
      const auto& t = a.toTensor();
      if (t.defined()) {
        os << t.scalar_type() << t.sizes() << "@" << t.device();
      } else {
        os << "None";
      }
    } else if (a.isTensorList()) {
      os << "[" << a.toTensorList().size() << " tensors]";
    } else {
      os << a.tagKind();
    }
  }
  os << ")";
  return os.str();
}

std::vector<int> marked_written_args(const c10::FunctionSchema& schema) {
  std::vector<int> w;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (ai && ai->isWrite()) w.push_back(static_cast<int>(i));
  }
  return w;
}

bool writes_only_tensor_lists(const c10::FunctionSchema& schema) {
  const std::vector<int> w = marked_written_args(schema);
  return !w.empty() && std::all_of(w.begin(), w.end(), [&](int i) {
    return schema.arguments()[i].type()->kind() == c10::TypeKind::ListType;
  });
}

std::vector<int> written_args(const c10::FunctionSchema& schema,
                              const std::vector<c10::IValue>& args) {
  std::vector<int> w = marked_written_args(schema);
  if (const OpCorrection* c = find_op_correction(schema)) {
    if (c->extra_written) c->extra_written(args, w);
  }
  return w;
}

bool view_base_is_normal(const std::vector<c10::IValue>& args) {
  for (const auto& a : args) {
    if (a.isTensor()) return a.toTensor().defined() && !a.toTensor().is_inference();
    if (a.isTensorList()) {
      auto l = a.toTensorList();
      return l.size() > 0 && !l.get(0).is_inference();
    }
  }
  return false;
}

std::vector<c10::IValue> pop_args(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - n),
                                std::make_move_iterator(stack->end()));
  stack->erase(stack->end() - n, stack->end());
  return args;
}

uint64_t cpu_seed_for(uint64_t seed, uint64_t offset) {
  return seed ^ (offset * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
}

at::Generator cpu_generator_for(uint64_t seed, uint64_t offset) {
  return at::make_generator<at::CPUGeneratorImpl>(cpu_seed_for(seed, offset));
}

}  // namespace ember_torch
