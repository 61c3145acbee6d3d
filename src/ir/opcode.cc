#include "ember/ir/opcode.h"

namespace ember {

std::string_view OpName(OpKind op) {
  switch (op) {
#define EMBER_OP_NAME(e, name, cat) \
  case OpKind::e:                   \
    return name;
    EMBER_OPS(EMBER_OP_NAME)
#undef EMBER_OP_NAME
  }
  return "?";
}

std::optional<OpKind> ParseOpName(std::string_view name) {
#define EMBER_OP_PARSE(e, n, cat) \
  if (name == n) return OpKind::e;
  EMBER_OPS(EMBER_OP_PARSE)
#undef EMBER_OP_PARSE
  return std::nullopt;
}

OpCategoryKind OpCategory(OpKind op) {
  switch (op) {
#define EMBER_OP_CAT(e, name, cat) \
  case OpKind::e:                  \
    return OpCategoryKind::cat;
    EMBER_OPS(EMBER_OP_CAT)
#undef EMBER_OP_CAT
  }
  return OpCategoryKind::kOpaque;
}

const std::vector<OpKind>& AllOps() {
  static const std::vector<OpKind> all = {
#define EMBER_OP_LIST(e, name, cat) OpKind::e,
      EMBER_OPS(EMBER_OP_LIST)
#undef EMBER_OP_LIST
  };
  return all;
}

}  // namespace ember
