// The reference interpreter's driver: argument checking, node-by-node
// evaluation in id order (values freed after their last use), and dispatch
// by op category to the evaluators of src/eval/ops.h. Tuples,
// get-tuple-element, optimization-barrier (identity into a tuple) and
// custom-call (through the ExternRegistry) are evaluated here.
#include "ember/eval/interpreter.h"

#include <algorithm>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>

#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "eval/eval_util.h"
#include "eval/ops.h"

namespace ember {
namespace {

// Attribute names of the ops handled in this file.
// The largest result the reference interpreter will allocate (64 GiB): a
// bigger one is a ResourceExhausted status before any allocation.
constexpr int64_t kMaxResultBytes = int64_t{1} << 36;

// Makes sure an evaluator's error names the op and node ("gather %7: ...").
Status NameNode(const Node& n, Status s) {
  if (s.ok()) return s;
  const std::string label = eval::NodeLabel(n);
  if (s.message().find(label) != std::string::npos) return s;
  return Status(s.code(), label + ": " + s.message());
}

StatusOr<Literal> EvalCustomCall(const Node& n, const eval::Operands& in) {
  const std::string& target = attr::CallTargetName(n);
  StatusOr<ExternKernel> kernel = ExternRegistry::Global().Lookup(target);
  if (!kernel.ok()) {
    return NotFound(eval::NodeLabel(n), ": unknown custom-call target '", target, "'");
  }
  ExternCall call;
  call.node = &n;
  call.inputs = in;
  Literal result(n.shape);  // zero-filled; a tuple shape gets one element per output
  if (n.shape.is_tuple()) {
    for (Literal& e : result.tuple_elements()) {
      if (e.shape().is_tuple())
        return eval::NodeInvalid(n, "nested tuple results are not supported");
      call.outputs.push_back(&e);
    }
  } else {
    call.outputs.push_back(&result);
  }
  Status st = (*kernel)(call);
  if (st.ok()) st = AdoptOutputs(call);
  if (!st.ok()) return NameNode(n, st);
  // A kernel must not change the shapes of its outputs.
  if (n.shape.is_tuple()) {
    for (size_t i = 0; i < result.tuple_elements().size(); ++i) {
      if (result.tuple_elements()[i].shape() != n.shape.tuple_shapes()[i]) {
        return eval::NodeInvalid(n, "kernel '", target, "' wrote output ", i, " with shape ",
                                 result.tuple_elements()[i].shape().ToString(), ", expected ",
                                 n.shape.tuple_shapes()[i].ToString());
      }
    }
  } else if (result.shape() != n.shape) {
    return eval::NodeInvalid(n, "kernel '", target, "' wrote shape ", result.shape().ToString(),
                             ", expected ", n.shape.ToString());
  }
  return result;
}

StatusOr<Literal> EvalTupleOp(const Node& n, const eval::Operands& in) {
  switch (n.op) {
    case OpKind::kTuple:
    case OpKind::kOptimizationBarrier: {
      std::vector<Literal> elems;
      elems.reserve(in.size());
      for (const Literal* x : in) elems.push_back(*x);
      return Literal::Tuple(std::move(elems));
    }
    case OpKind::kGetTupleElement: {
      if (in.size() != 1 || !in[0]->shape().is_tuple()) {
        return eval::NodeInvalid(n, "operand must be a tuple");
      }
      const int64_t i = attr::Index(n);
      const auto& elems = in[0]->tuple_elements();
      if (i < 0 || i >= static_cast<int64_t>(elems.size())) {
        return eval::NodeInvalid(n, "index ", i, " out of range for a tuple of ", elems.size());
      }
      return elems[static_cast<size_t>(i)];
    }
    default:
      return EMBER_INTERNAL_ERROR(eval::NodeLabel(n), " is not a tuple op");
  }
}

// A fusion evaluates its body on the operand values; errors inside the body
// name the body and its node.
StatusOr<Literal> EvalFusion(const Node& n, const eval::Operands& in) {
  if (!n.called) return eval::NodeInvalid(n, "fusion without a body graph");
  auto r = Evaluate(*n.called, std::vector<const Literal*>(in.begin(), in.end()));
  if (!r.ok()) {
    return Status(r.status().code(),
                  "in fusion body '" + n.called->name() + "': " + r.status().message());
  }
  if (r->size() != 1)
    return eval::NodeInvalid(n, "the body has ", r->size(), " outputs, expected 1");
  return std::move((*r)[0]);
}

// Dispatch without re-checking shapes (the node belongs to a verified graph
// or has been checked by EvaluateNode).
StatusOr<Literal> Dispatch(const Node& n, const eval::Operands& in) {
  if (n.shape.byte_size() > kMaxResultBytes) {
    return ResourceExhausted(eval::NodeLabel(n), ": result ", n.shape.ToString(), " needs ",
                             n.shape.byte_size(), " bytes, more than the interpreter's limit of ",
                             kMaxResultBytes);
  }
  auto run = [&]() -> StatusOr<Literal> {
    switch (OpCategory(n.op)) {
      case OpCategoryKind::kLeaf:
        if (n.op == OpKind::kParameter) {
          return eval::NodeInvalid(n, "a parameter has no value outside a graph evaluation");
        }
        return eval::EvalLeaf(n, in);
      case OpCategoryKind::kRng:
        return eval::EvalRng(n, in);
      case OpCategoryKind::kUnary:
      case OpCategoryKind::kBinary:
      case OpCategoryKind::kElementwiseOther:
        return eval::EvalElementwise(n, in);
      case OpCategoryKind::kDataMovement:
        return eval::EvalDataMovement(n, in);
      case OpCategoryKind::kReduction:
        return eval::EvalReduction(n, in);
      case OpCategoryKind::kContraction:
        return eval::EvalContraction(n, in);
      case OpCategoryKind::kIndexing:
        return eval::EvalIndexing(n, in);
      case OpCategoryKind::kOpaque:
        if (n.op == OpKind::kCustomCall) return EvalCustomCall(n, in);
        return EvalTupleOp(n, in);  // optimization-barrier: identity into a tuple
      case OpCategoryKind::kTuple:
        return EvalTupleOp(n, in);
      case OpCategoryKind::kFusion:
        return EvalFusion(n, in);
    }
    return EMBER_INTERNAL_ERROR("unknown op category for ", eval::NodeLabel(n));
  };
  // A result too large for memory is an error status, not an abort. (An
  // extern kernel's own exceptions are caught here too.)
  StatusOr<Literal> r = [&]() -> StatusOr<Literal> {
    try {
      return run();
    } catch (const std::bad_alloc&) {
      return ResourceExhausted(eval::NodeLabel(n), ": out of memory for result ",
                               n.shape.ToString());
    } catch (const std::length_error&) {
      return ResourceExhausted(eval::NodeLabel(n), ": result ", n.shape.ToString(),
                               " is too large");
    } catch (const std::exception& e) {
      return EMBER_INTERNAL_ERROR(eval::NodeLabel(n), ": exception: ", e.what());
    }
  }();
  if (!r.ok()) return NameNode(n, r.status());
  if (r->shape() != n.shape) {
    return EMBER_INTERNAL_ERROR(eval::NodeLabel(n), " produced ", r->shape().ToString(),
                                ", expected ", n.shape.ToString());
  }
  return r;
}

}  // namespace

StatusOr<Literal> EvaluateNode(const Node& n, const std::vector<const Literal*>& operands) {
  if (operands.size() != n.operands.size()) {
    return eval::NodeInvalid(n, "expected ", n.operands.size(), " operand values, got ",
                             operands.size());
  }
  std::vector<Shape> shapes;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i] == nullptr) return eval::NodeInvalid(n, "operand ", i, " is null");
    shapes.push_back(operands[i]->shape());
  }
  if (n.op == OpKind::kParameter) {
    return eval::NodeInvalid(n, "a parameter has no value outside a graph evaluation");
  }
  // The node may not come from a verified graph: check its shape first so no
  // evaluator can read out of bounds.
  StatusOr<Shape> inferred = InferShape(n.op, shapes, n.attrs, n.shape, n.literal.get());
  if (!inferred.ok()) return NameNode(n, inferred.status());
  if (*inferred != n.shape) {
    return eval::NodeInvalid(n, "node shape ", n.shape.ToString(), " but its operands give ",
                             inferred->ToString());
  }
  if (n.op == OpKind::kFusion) {
    Status body = CheckFusionBody(shapes, n.called.get(), n.shape, attr::Kind.Text(n.attrs));
    if (!body.ok()) return NameNode(n, body);
  }
  return Dispatch(n, operands);
}

StatusOr<std::vector<Literal>> Evaluate(const Graph& g, const std::vector<const Literal*>& args) {
  const auto& params = g.parameters();
  if (args.size() != params.size()) {
    return InvalidArgument("Evaluate: graph '", g.name(), "' takes ", params.size(),
                           " arguments, got ", args.size());
  }
  const int n = g.num_nodes();
  std::vector<int> param_index(n, -1);
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& p = g.node(params[i]);
    if (args[i] == nullptr) {
      return InvalidArgument("Evaluate: argument ", i, " (parameter(", i, ") %", p.id, ") is null");
    }
    if (args[i]->shape() != p.shape) {
      return InvalidArgument("Evaluate: argument ", i, " for parameter(", i, ") %", p.id,
                             " has shape ", args[i]->shape().ToString(), ", expected ",
                             p.shape.ToString());
    }
    param_index[params[i]] = static_cast<int>(i);
  }
  // Last user of each node; outputs stay alive to the end.
  std::vector<int> last_use(n, -1);
  for (const Node& node : g.nodes()) {
    for (NodeId o : node.operands) last_use[o] = std::max(last_use[o], static_cast<int>(node.id));
  }
  for (NodeId o : g.outputs()) last_use[o] = n;

  std::vector<std::optional<Literal>> owned(n);
  std::vector<const Literal*> value(n, nullptr);
  eval::Operands in;
  for (const Node& node : g.nodes()) {
    const NodeId id = node.id;
    if (node.op == OpKind::kParameter) {
      if (param_index[id] < 0) {
        return EMBER_INTERNAL_ERROR(eval::NodeLabel(node), " is not among the graph's parameters");
      }
      value[id] = args[param_index[id]];
      continue;
    }
    in.clear();
    for (NodeId o : node.operands) in.push_back(value[o]);
    EMBER_ASSIGN_OR_RETURN(Literal r, Dispatch(node, in));
    if (last_use[id] < 0) continue;  // unused and not an output: drop it now
    owned[id] = std::move(r);
    value[id] = &*owned[id];
    for (NodeId o : node.operands) {
      if (last_use[o] == id && owned[o]) {
        owned[o].reset();
        value[o] = nullptr;
      }
    }
  }
  std::vector<Literal> outputs;
  outputs.reserve(g.outputs().size());
  for (NodeId o : g.outputs()) outputs.push_back(*value[o]);
  return outputs;
}

StatusOr<std::vector<Literal>> Evaluate(const Graph& g, const std::vector<Literal>& args) {
  std::vector<const Literal*> ptrs;
  ptrs.reserve(args.size());
  for (const Literal& a : args) ptrs.push_back(&a);
  return Evaluate(g, ptrs);
}

}  // namespace ember
