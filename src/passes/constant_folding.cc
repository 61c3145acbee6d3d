#include "passes/constant_folding.h"

#include <vector>

#include "ember/eval/interpreter.h"
#include "passes/rewriter.h"

namespace ember::passes {
namespace {

bool MayFold(const Node& n) {
  if (n.operands.empty() || IsOpaqueToPasses(n.op)) return false;
  if (n.op == OpKind::kParameter || n.op == OpKind::kConstant) return false;
  if (n.shape.is_tuple() || n.shape.num_elements() > kMaxFoldedElements) return false;
  return true;
}

}  // namespace

StatusOr<bool> ConstantFoldingPass::Run(Graph& g) {
  return RewriteGraph(g, [&](const Node& n, Rewriter& rw) -> StatusOr<NodeId> {
    if (!MayFold(n)) return kCopyNode;
    std::vector<const Literal*> values;
    int64_t operand_elements = 0;
    for (size_t i = 0; i < n.operands.size(); ++i) {
      const Node& operand = rw.Operand(n, static_cast<int>(i));
      if (operand.op != OpKind::kConstant || !operand.literal) return kCopyNode;
      values.push_back(operand.literal.get());
      operand_elements += operand.shape.num_elements();
    }
    if (operand_elements > kMaxFoldedOperandElements) return kCopyNode;
    if (n.op == OpKind::kBroadcastInDim && values[0]->shape().is_scalar()) return kCopyNode;
    StatusOr<Literal> folded = EvaluateNode(n, values);
    // A data error (division by zero, bad index) must surface at run time.
    if (!folded.ok()) return kCopyNode;
    if (folded->shape() != n.shape) {
      return EMBER_INTERNAL_ERROR("constant-folding: %", n.id, " (", OpName(n.op),
                                  ") evaluated to ", folded->shape().ToString(), ", expected ",
                                  n.shape.ToString());
    }
    return rw.builder().Constant(std::move(folded).value());
  });
}

}  // namespace ember::passes
