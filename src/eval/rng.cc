// Reference semantics of rng-uniform and rng-normal: Philox-4x32-10 draws
// under the counter scheme documented in philox.h.
//
// Operands: seed (u64 scalar), offset (u64 scalar); attribute `stream` (int).
// Result: f16, bf16, f32 or f64 of any shape. Uniform is in [0, 1); normal is
// standard normal (mean 0, variance 1) by Box-Muller.
#include <cmath>

#include "ember/ir/attributes.h"
#include "eval/element_access.h"
#include "eval/ops.h"
#include "eval/philox.h"

namespace ember::eval {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

// Reads the flat word sequence of one draw, caching the current block.
class WordReader {
 public:
  WordReader(uint64_t seed, uint64_t offset, int64_t stream)
      : seed_(seed), offset_(offset), stream_(stream) {}
  uint32_t Word(uint64_t j) {
    uint64_t b = j / 4;
    if (!have_block_ || b != block_index_) {
      block_ = EmberRngBlock(seed_, offset_, stream_, b);
      block_index_ = b;
      have_block_ = true;
    }
    return block_[j % 4];
  }

 private:
  uint64_t seed_, offset_;
  int64_t stream_;
  bool have_block_ = false;
  uint64_t block_index_ = 0;
  PhiloxCounter block_{};
};

// The largest value below 1 of a 16-bit float type (as float).
template <DType D>
float LargestBelowOne() {
  if constexpr (D == DType::kBF16) {
    return BF16ToFloat(0x3F7F);  // 1 - 2^-8
  } else {
    return F16ToFloat(0x3BFF);  // 1 - 2^-11
  }
}

template <DType D>
void Draw(bool normal, uint64_t seed, uint64_t offset, int64_t stream, Literal& out) {
  StorageT<D>* op = out.data_as<StorageT<D>>();
  const uint64_t count = static_cast<uint64_t>(out.num_elements());
  WordReader r(seed, offset, stream);
  if constexpr (D == DType::kF64) {
    for (uint64_t i = 0; i < count; ++i) {
      if (!normal) {
        op[i] = UniformDoubleFromBits(r.Word(2 * i), r.Word(2 * i + 1));
      } else {
        double u1 = 1.0 - UniformDoubleFromBits(r.Word(4 * i), r.Word(4 * i + 1));  // (0, 1]
        double u2 = UniformDoubleFromBits(r.Word(4 * i + 2), r.Word(4 * i + 3));
        op[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
      }
    }
  } else {
    for (uint64_t i = 0; i < count; ++i) {
      float v;
      if (!normal) {
        v = UniformFloatFromBits(r.Word(i));
      } else {
        float u1 = 1.0f - UniformFloatFromBits(r.Word(2 * i));  // (0, 1], exact
        float u2 = UniformFloatFromBits(r.Word(2 * i + 1));
        v = std::sqrt(-2.0f * std::log(u1)) * std::cos(static_cast<float>(kTwoPi) * u2);
      }
      StorageT<D> s = Store<D>(v);
      if constexpr (D == DType::kF16 || D == DType::kBF16) {
        // Rounding may carry a uniform up to 1.0; keep [0, 1).
        if (!normal && Load<D>(s) >= 1.0f) s = Store<D>(LargestBelowOne<D>());
      }
      op[i] = s;
    }
  }
}

}  // namespace

StatusOr<Literal> EvalRng(const Node& n, const Operands& in) {
  if (n.op != OpKind::kRngUniform && n.op != OpKind::kRngNormal) {
    return InvalidArgument(OpName(n.op), " %", n.id, ": not an rng op");
  }
  if (in.size() != 2 || in[0] == nullptr || in[1] == nullptr) {
    return InvalidArgument(OpName(n.op), " %", n.id, ": expected operands (seed, offset)");
  }
  for (int i = 0; i < 2; ++i) {
    const Shape& s = in[i]->shape();
    if (!s.is_scalar() || !IsInteger(s.dtype())) {
      return InvalidArgument(OpName(n.op), " %", n.id, ": ", i == 0 ? "seed" : "offset",
                             " must be an integer scalar (u64[]), got ", s.ToString());
    }
  }
  const DType t = n.shape.dtype();
  if (n.shape.is_tuple() || !IsFloat(t)) {
    return InvalidArgument(OpName(n.op), " %", n.id, ": result must be f16, bf16, f32 or f64, got ",
                           n.shape.ToString());
  }
  // GetInt returns the bits of a u64 above 2^63 as a negative int64; casting back is exact.
  const uint64_t seed = static_cast<uint64_t>(in[0]->GetInt(0));
  const uint64_t offset = static_cast<uint64_t>(in[1]->GetInt(0));
  const int64_t stream = attr::Stream(n, 0);
  const bool normal = n.op == OpKind::kRngNormal;
  Literal out(n.shape);
  switch (t) {
    case DType::kF16:
      Draw<DType::kF16>(normal, seed, offset, stream, out);
      break;
    case DType::kBF16:
      Draw<DType::kBF16>(normal, seed, offset, stream, out);
      break;
    case DType::kF32:
      Draw<DType::kF32>(normal, seed, offset, stream, out);
      break;
    case DType::kF64:
      Draw<DType::kF64>(normal, seed, offset, stream, out);
      break;
    default:
      break;
  }
  return out;
}

}  // namespace ember::eval
