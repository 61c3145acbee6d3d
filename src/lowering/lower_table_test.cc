// The table contract: for every entry and each of its sample calls, the
// lowering either returns one correctly shaped node per output (and the
// graph builds and verifies) or declines without having appended a node.
// Every table entry must have at least one sample here.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "lowering/lowering_test_util.h"

namespace ember::lowering {
namespace {

using testing::CallHarness;

struct Sample {
  std::string args;     // lowering_test_util.h spec
  std::string outputs;  // shapes separated by ';'
  bool expect_decline = false;
};

// op -> sample calls (argument lists as the bridge fills them, defaults included).
const std::multimap<std::string, Sample>& Samples() {
  static const auto* m = new std::multimap<std::string, Sample>{
      // ---- elementwise ----
      {"aten::exp", {"T:f32[2,3]", "f32[2,3]"}},
      {"aten::exp", {"T:s64[4]", "f32[4]"}},
      {"aten::exp", {"T:bf16[4]", "bf16[4]"}},
      {"aten::exp", {"T:c64[4]", "c64[4]", true}},
      {"aten::log", {"T:f32[3]", "f32[3]"}},
      {"aten::log1p", {"T:f64[3]", "f64[3]"}},
      {"aten::expm1", {"T:f16[3]", "f16[3]"}},
      {"aten::sqrt", {"T:f32[3]", "f32[3]"}},
      {"aten::rsqrt", {"T:f32[3]", "f32[3]"}},
      {"aten::tanh", {"T:bf16[3]", "bf16[3]"}},
      {"aten::sigmoid", {"T:f32[3]", "f32[3]"}},
      {"aten::sin", {"T:f32[3]", "f32[3]"}},
      {"aten::cos", {"T:f32[3]", "f32[3]"}},
      {"aten::erf", {"T:f32[3]", "f32[3]"}},
      {"aten::exp2", {"T:s32[3]", "f32[3]"}},
      {"aten::log2", {"T:f32[3]", "f32[3]"}},
      {"aten::log10", {"T:f32[3]", "f32[3]"}},
      {"aten::reciprocal", {"T:f32[3]", "f32[3]"}},
      {"aten::neg", {"T:s32[3]", "s32[3]"}},
      {"aten::neg", {"T:bf16[3]", "bf16[3]"}},
      {"aten::abs", {"T:s8[3]", "s8[3]"}},
      {"aten::sign", {"T:f32[3]", "f32[3]"}},
      {"aten::sign", {"T:pred[3]", "pred[3]"}},
      {"aten::sgn", {"T:f32[3]", "f32[3]"}},
      {"aten::floor", {"T:f32[3]", "f32[3]"}},
      {"aten::floor", {"T:s64[3]", "s64[3]"}},
      {"aten::ceil", {"T:f32[3]", "f32[3]"}},
      {"aten::round", {"T:f32[3]", "f32[3]"}},
      {"aten::trunc", {"T:f32[3]", "f32[3]"}},
      {"aten::frac", {"T:f32[3]", "f32[3]"}},
      {"aten::square", {"T:s32[3]", "s32[3]"}},
      {"aten::relu", {"T:f32[2,2]", "f32[2,2]"}},
      {"aten::relu", {"T:s64[2]", "s64[2]"}},
      {"aten::bitwise_not", {"T:s32[3]", "s32[3]"}},
      {"aten::bitwise_not", {"T:pred[3]", "pred[3]"}},
      {"aten::logical_not", {"T:f32[3]", "pred[3]"}},
      {"aten::isnan", {"T:f32[3]", "pred[3]"}},
      {"aten::isnan", {"T:s32[3]", "pred[3]"}},
      {"aten::isinf", {"T:bf16[3]", "pred[3]"}},
      {"aten::isfinite", {"T:f32[3]", "pred[3]"}},
      {"aten::isposinf", {"T:f32[3]", "pred[3]"}},
      {"aten::isneginf", {"T:f32[3]", "pred[3]"}},
      {"aten::signbit", {"T:f32[3]", "pred[3]"}},
      {"aten::signbit", {"T:s16[3]", "pred[3]"}},
      {"aten::add.Tensor", {"T:f32[2,3] T:f32[3] S:i", "f32[2,3]"}},
      {"aten::add.Tensor", {"T:s32[2,1] T:f32[4] S:f", "f32[2,4]"}},
      {"aten::add.Tensor", {"T:bf16[3] W:f64 S:i", "bf16[3]"}},
      {"aten::add.Tensor", {"T:pred[3] T:pred[3] S:i", "pred[3]"}},
      {"aten::add.Tensor", {"T:c64[3] T:c64[3] S:i", "c64[3]", true}},
      {"aten::add.Scalar", {"T:s64[3] S:i S:i", "s64[3]"}},
      {"aten::sub.Tensor", {"T:f32[3] T:f32[] S:f", "f32[3]"}},
      {"aten::sub.Scalar", {"T:f32[3] S:f S:i", "f32[3]"}},
      {"aten::rsub.Tensor", {"T:f32[3] T:f32[3] S:i", "f32[3]"}},
      {"aten::rsub.Scalar", {"T:s32[3] S:i S:i", "s32[3]"}},
      {"aten::mul.Tensor", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::mul.Scalar", {"T:bf16[3] S:f", "bf16[3]"}},
      {"aten::div.Tensor", {"T:s32[3] T:s32[3]", "f32[3]"}},
      {"aten::div.Scalar", {"T:f32[3] S:f", "f32[3]"}},
      {"aten::div.Tensor_mode", {"T:f32[3] T:f32[3] Str:floor", "f32[3]"}},
      {"aten::div.Tensor_mode", {"T:s32[3] T:s32[3] Str:trunc", "s32[3]"}},
      {"aten::div.Tensor_mode", {"T:f32[3] T:f32[3] N", "f32[3]"}},
      {"aten::div.Tensor_mode", {"T:f32[3] T:f32[3] Str:bogus", "f32[3]", true}},
      {"aten::div.Scalar_mode", {"T:s64[3] S:i Str:floor", "s64[3]"}},
      {"aten::floor_divide", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::floor_divide.Scalar", {"T:s32[3] S:i", "s32[3]"}},
      {"aten::remainder.Tensor", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::remainder.Scalar", {"T:s32[3] S:i", "s32[3]"}},
      {"aten::remainder.Scalar_Tensor", {"S:f T:f32[3]", "f32[3]"}},
      {"aten::fmod.Tensor", {"T:s32[3] T:s32[3]", "s32[3]"}},
      {"aten::fmod.Tensor", {"T:f32[3] T:f32[3]", "f32[3]", true}},
      {"aten::fmod.Scalar", {"T:s64[3] S:i", "s64[3]"}},
      {"aten::pow.Tensor_Tensor", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::pow.Tensor_Scalar", {"T:s32[3] S:f", "f32[3]"}},
      {"aten::pow.Scalar", {"S:f T:f32[3]", "f32[3]"}},
      {"aten::maximum", {"T:f32[3] T:bf16[3]", "f32[3]"}},
      {"aten::minimum", {"T:s32[2,3] T:s32[3]", "s32[2,3]"}},
      {"aten::atan2", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::logaddexp", {"T:f32[2,3] T:f32[3]", "f32[2,3]"}},
      {"aten::logaddexp", {"T:bf16[3] T:f32[3]", "f32[3]"}},
      {"aten::logaddexp", {"T:s64[3] T:s64[3]", "s64[3]", true}},
      {"aten::where.self", {"T:pred[2,3] T:f32[3] T:f32[2,1]", "f32[2,3]"}},
      {"aten::where.ScalarSelf", {"T:pred[3] S:f T:f32[3]", "f32[3]"}},
      {"aten::where.ScalarOther", {"T:pred[3] T:s64[3] S:i", "s64[3]"}},
      {"aten::where.Scalar", {"T:pred[3] S:f S:f", "f32[3]"}},
      {"aten::masked_fill.Scalar", {"T:f32[2,3] T:pred[3] S:f", "f32[2,3]"}},
      {"aten::masked_fill.Tensor", {"T:bf16[2,3] T:pred[2,3] T:f32[]", "bf16[2,3]"}},
      {"aten::clamp", {"T:f32[3] S:f S:f", "f32[3]"}},
      {"aten::clamp", {"T:f32[3] N S:f", "f32[3]"}},
      {"aten::clamp", {"T:f32[3] N N", "f32[3]", true}},
      {"aten::clamp.Tensor", {"T:f32[3] T:f32[3] N", "f32[3]"}},
      {"aten::clamp_min", {"T:f32[3] S:f", "f32[3]"}},
      {"aten::clamp_min.Tensor", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::clamp_max", {"T:s32[3] S:i", "s32[3]"}},
      {"aten::clamp_max.Tensor", {"T:f32[3] T:f32[]", "f32[3]"}},
      {"aten::lerp.Scalar", {"T:f32[3] T:f32[3] S:f", "f32[3]"}},
      {"aten::lerp.Tensor", {"T:bf16[3] T:bf16[3] T:bf16[3]", "bf16[3]"}},
      {"aten::addcmul", {"T:f32[3] T:f32[3] T:f32[3] S:f", "f32[3]"}},
      {"aten::addcdiv", {"T:f32[3] T:f32[3] T:f32[3] S:f", "f32[3]"}},
      {"aten::addcdiv", {"T:s32[3] T:s32[3] T:s32[3] S:i", "s32[3]", true}},
      {"aten::_to_copy", {"T:f32[2,3] D:bf16 O O O B:0 N", "bf16[2,3]"}},
      {"aten::_to_copy", {"T:f32[2,3] N O O O B:0 N", "f32[2,3]"}},
      {"aten::clone", {"T:s32[2,3] N", "s32[2,3]"}},
      {"aten::copy", {"T:f32[2,3] T:bf16[3] B:0", "f32[2,3]"}},
      // ---- comparison, logical, bitwise ----
      {"aten::eq.Tensor", {"T:f32[2,3] T:s64[3]", "pred[2,3]"}},
      {"aten::eq.Scalar", {"T:s32[3] S:f", "pred[3]"}},
      {"aten::ne.Tensor", {"T:bf16[3] T:bf16[3]", "pred[3]"}},
      {"aten::ne.Scalar", {"T:pred[3] S:b", "pred[3]"}},
      {"aten::lt.Tensor", {"T:f32[3] T:f32[]", "pred[3]"}},
      {"aten::lt.Scalar", {"T:s64[3] S:i", "pred[3]"}},
      {"aten::le.Tensor", {"T:u8[3] T:s8[3]", "pred[3]"}},
      {"aten::le.Scalar", {"T:f32[3] S:f", "pred[3]"}},
      {"aten::gt.Tensor", {"T:f32[3] T:f32[3]", "pred[3]"}},
      {"aten::gt.Scalar", {"T:f16[3] S:i", "pred[3]"}},
      {"aten::ge.Tensor", {"T:f32[3] T:f32[3]", "pred[3]"}},
      {"aten::ge.Scalar", {"T:f32[3] S:f", "pred[3]"}},
      {"aten::logical_and", {"T:f32[2,3] T:pred[3]", "pred[2,3]"}},
      {"aten::logical_or", {"T:s32[3] T:s32[3]", "pred[3]"}},
      {"aten::logical_xor", {"T:pred[3] T:pred[3]", "pred[3]"}},
      {"aten::bitwise_and.Tensor", {"T:s32[3] T:s32[3]", "s32[3]"}},
      {"aten::bitwise_and.Tensor", {"T:f32[3] T:f32[3]", "f32[3]", true}},
      {"aten::bitwise_and.Scalar", {"T:pred[3] S:b", "pred[3]"}},
      {"aten::bitwise_or.Tensor", {"T:u8[3] T:u8[3]", "u8[3]"}},
      {"aten::bitwise_or.Scalar", {"T:s64[3] S:i", "s64[3]"}},
      {"aten::bitwise_xor.Tensor", {"T:pred[3] T:pred[3]", "pred[3]"}},
      {"aten::bitwise_xor.Scalar", {"T:s16[3] S:i", "s16[3]"}},
      {"aten::bitwise_left_shift.Tensor", {"T:s32[3] T:s32[3]", "s32[3]"}},
      {"aten::bitwise_left_shift.Tensor_Scalar", {"T:s64[3] S:i", "s64[3]"}},
      {"aten::bitwise_left_shift.Scalar_Tensor", {"S:i T:s64[3]", "s64[3]"}},
      {"aten::bitwise_right_shift.Tensor", {"T:u8[3] T:u8[3]", "u8[3]"}},
      {"aten::bitwise_right_shift.Tensor_Scalar", {"T:s32[3] S:i", "s32[3]"}},
      {"aten::bitwise_right_shift.Scalar_Tensor", {"S:i T:s8[3]", "s8[3]"}},
      {"aten::__lshift__.Tensor", {"T:s32[3] T:s32[3]", "s32[3]"}},
      {"aten::__lshift__.Scalar", {"T:s32[3] S:i", "s32[3]"}},
      {"aten::__rshift__.Tensor", {"T:s32[3] T:s32[3]", "s32[3]"}},
      {"aten::__rshift__.Scalar", {"T:s32[3] S:i", "s32[3]"}},
      // ---- reductions ----
      {"aten::sum.dim_IntList", {"T:f32[2,3,4] L:1,-1 B:0 N", "f32[2]"}},
      {"aten::sum.dim_IntList", {"T:s32[2,3] L:0 B:1 N", "s64[1,3]"}},
      {"aten::sum.dim_IntList", {"T:bf16[2,3] N B:0 N", "bf16[]"}},
      {"aten::sum.dim_IntList", {"T:pred[2,3] L: B:0 N", "s64[]"}},
      {"aten::sum.dim_IntList", {"T:f32[2,3] L:1 B:0 D:f64", "f64[2]"}},
      {"aten::sum", {"T:f32[2,3] N", "f32[]"}},
      {"aten::mean.dim", {"T:f32[2,3] L:1 B:1 N", "f32[2,1]"}},
      {"aten::mean.dim", {"T:bf16[2,3] L:-1 B:0 N", "bf16[2]"}},
      {"aten::mean", {"T:f64[2,3] N", "f64[]"}},
      {"aten::prod.dim_int", {"T:s32[2,3] I:1 B:0 N", "s64[2]"}},
      {"aten::prod", {"T:f32[4] N", "f32[]"}},
      {"aten::amax", {"T:f32[2,3] L:1 B:0", "f32[2]"}},
      {"aten::amax", {"T:f32[2,3] L: B:1", "f32[1,1]"}},
      {"aten::amin", {"T:s64[2,3] L:0 B:0", "s64[3]"}},
      {"aten::max", {"T:f32[2,3]", "f32[]"}},
      {"aten::min", {"T:s32[2,3]", "s32[]"}},
      {"aten::max.dim", {"T:f32[2,3] I:1 B:0", "f32[2];s64[2]"}},
      {"aten::min.dim", {"T:f32[2,3] I:0 B:1", "f32[1,3];s64[1,3]"}},
      {"aten::argmax", {"T:f32[2,3] N B:0", "s64[]"}},
      {"aten::argmax", {"T:f32[2,3] I:1 B:1", "s64[2,1]"}},
      {"aten::argmin", {"T:s32[2,3] I:-1 B:0", "s64[2]"}},
      {"aten::any", {"T:f32[2,3]", "pred[]"}},
      {"aten::all", {"T:pred[2,3]", "pred[]"}},
      {"aten::any.dim", {"T:s32[2,3] I:1 B:0", "pred[2]"}},
      {"aten::all.dim", {"T:pred[2,3] I:0 B:1", "pred[1,3]"}},
      {"aten::any.dims", {"T:pred[2,3] L:0,1 B:0", "pred[]"}},
      {"aten::all.dims", {"T:f32[2,3] N B:0", "pred[]"}},
      {"aten::var.correction", {"T:f32[2,3] L:1 N B:0", "f32[2]"}},
      {"aten::var.correction", {"T:bf16[2,3] N S:i B:1", "bf16[1,1]"}},
      {"aten::std.correction", {"T:f32[2,3] L:0 S:f B:0", "f32[3]"}},
      {"aten::var_mean.correction", {"T:f32[2,3] L:1 N B:1", "f32[2,1];f32[2,1]"}},
      {"aten::std_mean.correction", {"T:f64[4] N N B:0", "f64[];f64[]"}},
      {"aten::logsumexp", {"T:f32[2,3] L:1 B:0", "f32[2]"}},
      {"aten::logsumexp", {"T:s64[2,3] L:1 B:1", "f32[2,1]"}},
      {"aten::linalg_vector_norm", {"T:f32[2,3] S:f N B:0 N", "f32[]"}},
      {"aten::linalg_vector_norm", {"T:bf16[2,3] S:i L:1 B:1 N", "bf16[2,1]"}},
      // ---- activations, softmax ----
      {"aten::gelu", {"T:f32[2,3] Str:none", "f32[2,3]"}},
      {"aten::gelu", {"T:bf16[2,3] Str:tanh", "bf16[2,3]"}},
      {"aten::gelu", {"T:f32[2,3] Str:erf", "f32[2,3]", true}},
      {"aten::gelu_backward", {"T:f32[2,3] T:f32[2,3] Str:none", "f32[2,3]"}},
      {"aten::gelu_backward", {"T:f32[2,3] T:f32[2,3] Str:tanh", "f32[2,3]"}},
      {"aten::silu", {"T:f32[3]", "f32[3]"}},
      {"aten::silu_backward", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::sigmoid_backward", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::tanh_backward", {"T:bf16[3] T:bf16[3]", "bf16[3]"}},
      {"aten::threshold", {"T:f32[3] S:f S:f", "f32[3]"}},
      {"aten::threshold_backward", {"T:f32[3] T:f32[3] S:i", "f32[3]"}},
      {"aten::hardtanh", {"T:f32[3] S:f S:f", "f32[3]"}},
      {"aten::hardtanh_backward", {"T:f32[3] T:f32[3] S:f S:f", "f32[3]"}},
      {"aten::leaky_relu", {"T:f32[3] S:f", "f32[3]"}},
      {"aten::leaky_relu_backward", {"T:f32[3] T:f32[3] S:f B:0", "f32[3]"}},
      {"aten::elu", {"T:f32[3] S:f S:i S:i", "f32[3]"}},
      {"aten::elu_backward", {"T:f32[3] S:f S:i S:i B:0 T:f32[3]", "f32[3]"}},
      {"aten::elu_backward", {"T:f32[3] S:f S:i S:i B:1 T:f32[3]", "f32[3]"}},
      {"aten::softplus", {"T:f32[3] S:i S:i", "f32[3]"}},
      {"aten::softplus_backward", {"T:f32[3] T:f32[3] S:i S:i", "f32[3]"}},
      {"aten::mish", {"T:f32[3]", "f32[3]"}},
      {"aten::mish_backward", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::hardsigmoid", {"T:f32[3]", "f32[3]"}},
      {"aten::hardswish", {"T:f32[3]", "f32[3]"}},
      {"aten::_softmax", {"T:f32[2,3] I:-1 B:0", "f32[2,3]"}},
      {"aten::_softmax", {"T:bf16[2,3] I:0 B:0", "bf16[2,3]"}},
      {"aten::_softmax", {"T:bf16[2,3] I:1 B:1", "f32[2,3]"}},
      {"aten::_log_softmax", {"T:f32[2,3] I:1 B:0", "f32[2,3]"}},
      {"aten::_softmax_backward_data", {"T:f32[2,3] T:f32[2,3] I:1 D:f32", "f32[2,3]"}},
      {"aten::_log_softmax_backward_data", {"T:bf16[2,3] T:bf16[2,3] I:1 D:bf16", "bf16[2,3]"}},
      // ---- norms ----
      {"aten::native_layer_norm",
       {"T:f32[2,3,4] L:4 T:f32[4] T:f32[4] S:f", "f32[2,3,4];f32[2,3,1];f32[2,3,1]"}},
      {"aten::native_layer_norm",
       {"T:bf16[2,3,4] L:3,4 N N S:f", "bf16[2,3,4];f32[2,1,1];f32[2,1,1]"}},
      {"aten::native_layer_norm_backward",
       {"T:f32[2,3,4] T:f32[2,3,4] L:4 T:f32[2,3,1] T:f32[2,3,1] T:f32[4] T:f32[4] BL:1,1,1",
        "f32[2,3,4];f32[4];f32[4]"}},
      {"aten::native_layer_norm_backward",
       {"T:f32[2,3,4] T:f32[2,3,4] L:4 T:f32[2,3,1] T:f32[2,3,1] N N BL:1,0,0", "f32[2,3,4];_;_"}},
      {"aten::native_group_norm",
       {"T:f32[2,4,3] T:f32[4] T:f32[4] I:2 I:4 I:3 I:2 S:f", "f32[2,4,3];f32[2,2];f32[2,2]"}},
      {"aten::native_group_norm_backward",
       {"T:f32[2,4,3] T:f32[2,4,3] T:f32[2,2] T:f32[2,2] T:f32[4] I:2 I:4 I:3 I:2 BL:1,1,1",
        "f32[2,4,3];f32[4];f32[4]"}},
      {"aten::_native_batch_norm_legit_functional",
       {"T:f32[2,3,4] T:f32[3] T:f32[3] T:f32[3] T:f32[3] B:1 S:f S:f",
        "f32[2,3,4];f32[3];f32[3];f32[3];f32[3]"}},
      {"aten::_native_batch_norm_legit_functional",
       {"T:f32[2,3,4] N N T:f32[3] T:f32[3] B:0 S:f S:f",
        "f32[2,3,4];f32[0];f32[0];f32[3];f32[3]"}},
      {"aten::native_batch_norm",
       {"T:f32[2,3,4] T:f32[3] T:f32[3] T:f32[3] T:f32[3] B:0 S:f S:f",
        "f32[2,3,4];f32[0];f32[0]"}},
      {"aten::native_batch_norm",
       {"T:f32[2,3,4] T:f32[3] T:f32[3] N N B:1 S:f S:f", "f32[2,3,4];f32[3];f32[3]"}},
      {"aten::native_batch_norm",
       {"T:f32[2,3,4] T:f32[3] T:f32[3] T:f32[3] T:f32[3] B:1 S:f S:f", "f32[2,3,4];f32[3];f32[3]",
        true}},
      {"aten::_native_batch_norm_legit_no_training",
       {"T:f32[2,3,4] T:f32[3] T:f32[3] T:f32[3] T:f32[3] S:f S:f", "f32[2,3,4];f32[0];f32[0]"}},
      {"aten::native_batch_norm_backward",
       {"T:f32[2,3,4] T:f32[2,3,4] T:f32[3] T:f32[3] T:f32[3] T:f32[3] T:f32[3] B:1 S:f BL:1,1,1",
        "f32[2,3,4];f32[3];f32[3]"}},
      {"aten::native_batch_norm_backward",
       {"T:f32[2,3,4] T:f32[2,3,4] T:f32[3] T:f32[3] T:f32[3] N N B:0 S:f BL:1,1,0",
        "f32[2,3,4];f32[3];_"}},
      // ---- losses ----
      {"aten::nll_loss_forward", {"T:f32[4,3] T:s64[4] N I:1 I:-100", "f32[];f32[]"}},
      {"aten::nll_loss_forward", {"T:f32[4,3] T:s64[4] T:f32[3] I:0 I:1", "f32[4];f32[]"}},
      {"aten::nll_loss_forward", {"T:bf16[3] T:s64[] N I:2 I:-100", "bf16[];bf16[]"}},
      {"aten::nll_loss2d_forward", {"T:f32[2,3,2,2] T:s64[2,2,2] N I:1 I:-100", "f32[];f32[]"}},
      {"aten::nll_loss_backward", {"T:f32[] T:f32[4,3] T:s64[4] N I:1 I:-100 T:f32[]", "f32[4,3]"}},
      {"aten::nll_loss_backward",
       {"T:f32[4] T:f32[4,3] T:s64[4] T:f32[3] I:0 I:2 T:f32[]", "f32[4,3]"}},
      {"aten::nll_loss2d_backward",
       {"T:f32[] T:f32[2,3,2,2] T:s64[2,2,2] N I:2 I:-100 T:f32[]", "f32[2,3,2,2]"}},
      {"aten::mse_loss", {"T:f32[2,3] T:f32[2,3] I:1", "f32[]"}},
      {"aten::mse_loss", {"T:f32[2,3] T:f32[2,3] I:0", "f32[2,3]"}},
      {"aten::mse_loss_backward", {"T:f32[] T:f32[2,3] T:f32[2,3] I:1", "f32[2,3]"}},
      {"aten::binary_cross_entropy_with_logits", {"T:f32[2,3] T:f32[2,3] N N I:1", "f32[]"}},
      {"aten::binary_cross_entropy_with_logits",
       {"T:f32[2,3] T:f32[2,3] T:f32[3] T:f32[3] I:0", "f32[2,3]"}},
      {"aten::_safe_softmax", {"T:f32[2,3] I:-1 N", "f32[2,3]"}},
      // ---- matmul ----
      {"aten::mm", {"T:f32[2,3] T:f32[3,4]", "f32[2,4]"}},
      {"aten::mm", {"T:bf16[2,3] T:bf16[3,4]", "bf16[2,4]"}},
      {"aten::bmm", {"T:f32[5,2,3] T:f32[5,3,4]", "f32[5,2,4]"}},
      {"aten::mv", {"T:f32[2,3] T:f32[3]", "f32[2]"}},
      {"aten::dot", {"T:f32[3] T:f32[3]", "f32[]"}},
      {"aten::addmm", {"T:f32[4] T:f32[2,3] T:f32[3,4] S:i S:i", "f32[2,4]"}},
      {"aten::addmm", {"T:bf16[2,4] T:bf16[2,3] T:bf16[3,4] S:f S:f", "bf16[2,4]"}},
      {"aten::baddbmm", {"T:f32[5,2,4] T:f32[5,2,3] T:f32[5,3,4] S:f S:i", "f32[5,2,4]"}},
      // ---- data movement ----
      {"aten::view", {"T:f32[2,3] L:3,-1", "f32[3,2]"}},
      {"aten::_unsafe_view", {"T:f32[2,3] L:6", "f32[6]"}},
      {"aten::view_copy", {"T:f32[2,3] L:6", "f32[6]"}},
      {"aten::reshape", {"T:f32[2,3] L:6", "f32[6]"}},
      {"aten::_reshape_alias", {"T:f32[2,3] L:6 L:1", "f32[6]"}},
      {"aten::_reshape_alias_copy", {"T:f32[2,3] L:6 L:1", "f32[6]"}},
      {"aten::unsqueeze", {"T:f32[2,3] I:1", "f32[2,1,3]"}},
      {"aten::unsqueeze_copy", {"T:f32[2,3] I:-1", "f32[2,3,1]"}},
      {"aten::squeeze", {"T:f32[2,1,3]", "f32[2,3]"}},
      {"aten::squeeze.dim", {"T:f32[2,1,3] I:1", "f32[2,3]"}},
      {"aten::squeeze.dims", {"T:f32[1,2,1] L:0,2", "f32[2]"}},
      {"aten::squeeze_copy", {"T:f32[2,1,3]", "f32[2,3]"}},
      {"aten::squeeze_copy.dim", {"T:f32[2,1,3] I:1", "f32[2,3]"}},
      {"aten::squeeze_copy.dims", {"T:f32[1,2,1] L:0,2", "f32[2]"}},
      {"aten::flatten.using_ints", {"T:f32[2,3,4] I:1 I:2", "f32[2,12]"}},
      {"aten::alias", {"T:f32[2,3]", "f32[2,3]"}},
      {"aten::alias_copy", {"T:f32[2,3]", "f32[2,3]"}},
      {"aten::detach", {"T:f32[2,3]", "f32[2,3]"}},
      {"aten::detach_copy", {"T:f32[2,3]", "f32[2,3]"}},
      {"aten::lift_fresh", {"T:f32[2,3]", "f32[2,3]"}},
      {"aten::lift_fresh_copy", {"T:f32[2,3]", "f32[2,3]"}},
      {"aten::expand", {"T:f32[3,1] L:2,3,4 B:0", "f32[2,3,4]"}},
      {"aten::expand_copy", {"T:f32[] L:2 B:0", "f32[2]"}},
      {"aten::t", {"T:f32[2,3]", "f32[3,2]"}},
      {"aten::t", {"T:f32[3]", "f32[3]"}},
      {"aten::t_copy", {"T:f32[2,3]", "f32[3,2]"}},
      {"aten::transpose.int", {"T:f32[2,3,4] I:0 I:-1", "f32[4,3,2]"}},
      {"aten::transpose_copy.int", {"T:f32[2,3] I:0 I:1", "f32[3,2]"}},
      {"aten::permute", {"T:f32[2,3,4] L:2,0,1", "f32[4,2,3]"}},
      {"aten::permute_copy", {"T:f32[2,3,4] L:-1,0,1", "f32[4,2,3]"}},
      {"aten::slice.Tensor", {"T:f32[5,3] I:0 I:1 I:100 I:2", "f32[2,3]"}},
      {"aten::slice.Tensor", {"T:f32[5,3] I:1 N I:-1 I:1", "f32[5,2]"}},
      {"aten::slice_copy.Tensor", {"T:f32[5,3] I:0 I:-2 N I:1", "f32[2,3]"}},
      {"aten::select.int", {"T:f32[5,3] I:0 I:-1", "f32[3]"}},
      {"aten::select_copy.int", {"T:f32[5,3] I:1 I:2", "f32[5]"}},
      {"aten::split.Tensor", {"T:f32[5,3] I:2 I:0", "f32[2,3];f32[2,3];f32[1,3]"}},
      {"aten::split_copy.Tensor", {"T:f32[4,3] I:2 I:0", "f32[2,3];f32[2,3]"}},
      {"aten::split_with_sizes", {"T:f32[5,3] L:1,4 I:0", "f32[1,3];f32[4,3]"}},
      {"aten::split_with_sizes_copy", {"T:f32[5,3] L:1,2 I:1", "f32[5,1];f32[5,2]"}},
      {"aten::unbind.int", {"T:f32[2,3] I:0", "f32[3];f32[3]"}},
      {"aten::unbind_copy.int", {"T:f32[2,3] I:1", "f32[2];f32[2];f32[2]"}},
      {"aten::cat", {"TL:f32[2,3]|s32[1,3] I:0", "f32[3,3]"}},
      {"aten::cat", {"TL:f32[2,3]|f32[0] I:-1", "f32[2,3]"}},
      {"aten::stack", {"TL:f32[2,3]|f32[2,3] I:1", "f32[2,2,3]"}},
      {"aten::flip", {"T:f32[2,3] L:0,-1", "f32[2,3]"}},
      {"aten::roll", {"T:f32[2,3] L:1 L:1", "f32[2,3]"}},
      {"aten::roll", {"T:f32[2,3] L:-4 L:", "f32[2,3]"}},
      {"aten::constant_pad_nd", {"T:f32[2,3] L:1,2 S:f", "f32[2,6]"}},
      {"aten::constant_pad_nd", {"T:s32[2,3] L:-1,0,1,1 S:i", "s32[4,2]"}},
      {"aten::triu", {"T:f32[3,4] I:1", "f32[3,4]"}},
      {"aten::tril", {"T:f32[2,3,3] I:0", "f32[2,3,3]"}},
      {"aten::slice_scatter", {"T:f32[6,3] T:f32[2,3] I:0 I:1 I:5 I:2", "f32[6,3]"}},
      {"aten::select_scatter", {"T:f32[4,3] T:f32[3] I:0 I:-1", "f32[4,3]"}},
      // ---- indexing ----
      {"aten::gather", {"T:f32[3,4] I:1 T:s64[3,2] B:0", "f32[3,2]"}},
      {"aten::scatter.src", {"T:f32[3,4] I:1 T:s64[3,2] T:f32[3,3]", "f32[3,4]"}},
      {"aten::scatter.value", {"T:f32[3,4] I:0 T:s64[2,4] S:f", "f32[3,4]"}},
      {"aten::scatter_add", {"T:f32[3,4] I:1 T:s64[3,2] T:f32[3,2]", "f32[3,4]"}},
      {"aten::index_select", {"T:f32[3,4] I:1 T:s64[5]", "f32[3,5]"}},
      {"aten::index_select", {"T:f32[3,4] I:0 T:s32[2]", "f32[2,4]"}},
      {"aten::index.Tensor", {"T:f32[3,4,5] TL:N|s64[2]", "f32[3,2,5]"}},
      {"aten::index.Tensor", {"T:f32[3,4,5] TL:s64[2,1]|N|s64[3]", "f32[2,3,4]"}},
      {"aten::index.Tensor", {"T:f32[3,4] TL:pred[3]", "f32[2,4]", true}},
      {"aten::_unsafe_index.Tensor", {"T:f32[3,4] TL:s64[2]", "f32[2,4]"}},
      {"aten::index_put", {"T:f32[3,4,5] TL:N|s64[2] T:f32[5] B:1", "f32[3,4,5]"}},
      {"aten::index_put", {"T:f32[3,4] TL:s64[2]|s64[2] T:f32[] B:0", "f32[3,4]"}},
      {"aten::_unsafe_index_put", {"T:f32[3,4] TL:s64[2] T:f32[2,4] B:0", "f32[3,4]"}},
      {"aten::embedding", {"T:f32[5,3] T:s64[2,4] I:-1 B:0 B:0", "f32[2,4,3]"}},
      {"aten::embedding_dense_backward", {"T:f32[2,4,3] T:s64[2,4] I:5 I:-1 B:0", "f32[5,3]"}},
      {"aten::embedding_dense_backward", {"T:f32[2,4,3] T:s64[2,4] I:5 I:0 B:1", "f32[5,3]", true}},
      // ---- factories ----
      {"aten::full", {"L:2,3 S:f D:f32 O O O", "f32[2,3]"}},
      {"aten::full_like", {"T:s32[2,3] S:f N O O O N", "s32[2,3]"}},
      {"aten::new_full", {"T:f32[2] L:3 S:i N O O O", "f32[3]"}},
      {"aten::scalar_tensor", {"S:f D:f32 O O O", "f32[]"}},
      {"aten::fill.Scalar", {"T:bf16[2,3] S:f", "bf16[2,3]"}},
      {"aten::fill.Tensor", {"T:f32[2,3] T:f32[]", "f32[2,3]"}},
      {"aten::zeros", {"L:2,3 D:f32 O O O", "f32[2,3]"}},
      {"aten::zeros_like", {"T:f32[2,3] N O O O N", "f32[2,3]"}},
      {"aten::new_zeros", {"T:f32[2] L:3 N O O O", "f32[3]"}},
      {"aten::zero", {"T:s64[2,3]", "s64[2,3]"}},
      {"aten::ones", {"L:2,3 D:f32 O O O", "f32[2,3]"}},
      {"aten::ones_like", {"T:f32[2,3] N O O O N", "f32[2,3]"}},
      {"aten::new_ones", {"T:f32[2] L:3 N O O O", "pred[3]"}},
      {"aten::arange", {"S:i D:s64 O O O", "s64[5]"}},
      {"aten::arange.start", {"S:f S:f N O O O", "f32[4]"}},
      {"aten::arange.start_step", {"S:i S:i S:i N O O O", "s64[3]"}},
      // ---- foreach ----
      {"aten::_foreach_add.List", {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] S:i", "f32[2];f32[3]"}},
      {"aten::_foreach_add.Scalar", {"TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_add.ScalarList", {"TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_add.Tensor", {"TL:f32[2]|f32[3] T:f32[] S:i", "f32[2];f32[3]"}},
      {"aten::_foreach_add.Scalar", {"TL:s64[2]|s64[3] S:i", "s64[2];s64[3]", true}},
      {"aten::_foreach_sub.List", {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] S:i", "f32[2];f32[3]"}},
      {"aten::_foreach_sub.Scalar", {"TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_sub.ScalarList", {"TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_mul.List", {"TL:f32[2]|f32[3] TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_mul.Scalar", {"TL:f32[2]|bf16[3] S:f", "f32[2];bf16[3]"}},
      {"aten::_foreach_mul.ScalarList", {"TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_mul.Tensor", {"TL:f32[2]|f32[3] T:f32[]", "f32[2];f32[3]"}},
      {"aten::_foreach_div.List", {"TL:f32[2]|f32[3] TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_div.Scalar", {"TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_div.ScalarList", {"TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_div.Tensor", {"TL:f32[2]|f32[3] T:f32[]", "f32[2];f32[3]"}},
      {"aten::_foreach_maximum.List", {"TL:f32[2]|f32[3] TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_minimum.List", {"TL:f32[2]|f32[3] TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_clamp_min.Scalar", {"TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_clamp_min.ScalarList", {"TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_clamp_max.Scalar", {"TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_clamp_max.ScalarList", {"TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_pow.List", {"TL:f32[2]|f32[3] TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_pow.Scalar", {"TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_pow.ScalarList", {"TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_pow.ScalarAndTensor", {"S:f TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_addcmul.Scalar",
       {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_addcmul.ScalarList",
       {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_addcmul.Tensor",
       {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] TL:f32[2]|f32[3] T:f32[2]", "f32[2];f32[3]"}},
      {"aten::_foreach_addcdiv.Scalar",
       {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_addcdiv.ScalarList",
       {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_addcdiv.Tensor",
       {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] TL:f32[2]|f32[3] T:f64[2]", "f32[2];f32[3]"}},
      {"aten::_foreach_lerp.Scalar", {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] S:f", "f32[2];f32[3]"}},
      {"aten::_foreach_lerp.List",
       {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_lerp.ScalarList",
       {"TL:f32[2]|f32[3] TL:f32[2]|f32[3] SL:f,f", "f32[2];f32[3]"}},
      {"aten::_foreach_sqrt", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_neg", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_abs", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_exp", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_log", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_reciprocal", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_sign", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_sigmoid", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_tanh", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_rsqrt", {"TL:f32[2]|f32[3]", "f32[2];f32[3]"}},
      {"aten::_foreach_zero", {"TL:f32[2]|s64[3]", "f32[2];s64[3]"}},
      {"aten::_foreach_norm.Scalar", {"TL:f32[2]|f32[3,2] S:i N", "f32[];f32[]"}},
      {"aten::_foreach_copy", {"TL:f32[2]|f32[3] TL:f32[2]|bf16[3] B:0", "f32[2];f32[3]"}},
      // ---- random ----
      {"aten::rand", {"L:2,3 N O O O RNG", "f32[2,3]"}},
      {"aten::rand", {"L:2,3 N O O O", "f32[2,3]", true}},
      {"aten::rand_like", {"T:bf16[2,3] N O O O N RNG", "bf16[2,3]"}},
      {"aten::randn", {"L:4 N O O O RNG", "f64[4]"}},
      {"aten::randn_like", {"T:f32[2,3] N O O O N RNG", "f32[2,3]"}},
      {"aten::uniform", {"T:f32[2,3] S:f S:f O RNG", "f32[2,3]"}},
      {"aten::normal_functional", {"T:f32[2,3] S:f S:f O RNG", "f32[2,3]"}},
      {"aten::bernoulli", {"T:f32[2,3] O RNG", "f32[2,3]"}},
      {"aten::bernoulli.p", {"T:f32[2,3] S:f O RNG", "f32[2,3]"}},
      {"aten::native_dropout", {"T:f32[2,3] S:f B:1 RNG", "f32[2,3];pred[2,3]"}},
      {"aten::native_dropout", {"T:f32[2,3] S:f B:0", "f32[2,3];pred[2,3]"}},
      {"aten::native_dropout_backward", {"T:f32[2,3] T:pred[2,3] S:f", "f32[2,3]"}},
      // ---- attention (ember:: ops, src/torch/attention.cpp) ----
      {"ember::sdpa_forward",
       {"T:f32[2,3,4,5] T:f32[2,3,6,5] T:f32[2,3,6,7] N T:s64[] T:s64[] B:1 DL:0.5,0",
        "f32[2,3,4,7]"}},
      {"ember::sdpa_forward",
       {"T:bf16[1,2,4,5] T:bf16[1,2,6,5] T:bf16[1,2,6,3] T:bf16[4,6] T:s64[] T:s64[] B:0 "
        "DL:0.25,0.1",
        "bf16[1,2,4,3]"}},
      {"ember::sdpa_forward",
       {"T:f32[1,2,4,5] T:f32[1,2,6,5] T:f32[1,2,6,3] T:pred[1,1,4,6] T:s64[] T:s64[] B:0 "
        "DL:0.25,0",
        "f32[1,2,4,3]"}},
      {"ember::sdpa_forward",
       {"T:f32[1,2,4,5] T:bf16[1,2,6,5] T:f32[1,2,6,3] N T:s64[] T:s64[] B:0 DL:0.25,0",
        "f32[1,2,4,3]", true}},
      {"ember::sdpa_backward",
       {"T:f32[2,3,4,7] T:f32[2,3,4,5] T:f32[2,3,6,5] T:f32[2,3,6,7] T:f32[1,4,6] T:s64[] T:s64[] "
        "B:0 DL:0.5,0.2",
        "f32[2,3,4,5];f32[2,3,6,5];f32[2,3,6,7];f32[1,4,6]"}},
      {"ember::sdpa_backward",
       {"T:f32[1,2,4,3] T:f32[1,2,4,5] T:f32[1,2,4,5] T:f32[1,2,4,3] N T:s64[] T:s64[] B:1 "
        "DL:0.5,0",
        "f32[1,2,4,5];f32[1,2,4,5];f32[1,2,4,3];f32[0]"}},
      {"ember::sdpa_backward",
       {"T:bf16[1,2,4,3] T:bf16[1,2,4,5] T:bf16[1,2,4,5] T:bf16[1,2,4,3] T:pred[4,4] T:s64[] "
        "T:s64[] B:0 DL:0.5,0.5",
        "bf16[1,2,4,5];bf16[1,2,4,5];bf16[1,2,4,3];bf16[0]"}},
      // ---- pooling ----
      {"aten::max_pool2d_with_indices",
       {"T:f32[2,3,6,6] L:2,2 L: L:0,0 L:1,1 B:0", "f32[2,3,3,3];s64[2,3,3,3]"}},
      {"aten::max_pool2d_with_indices",
       {"T:f32[3,5,5] L:3 L:2 L:1 L:1 B:1", "f32[3,3,3];s64[3,3,3]"}},
      {"aten::max_pool2d_with_indices_backward",
       {"T:f32[2,3,3,3] T:f32[2,3,6,6] L:2,2 L: L:0,0 L:1,1 B:0 T:s64[2,3,3,3]", "f32[2,3,6,6]"}},
      {"aten::hardsigmoid_backward", {"T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::hardswish_backward", {"T:bf16[3] T:bf16[3]", "bf16[3]"}},
      {"aten::log_sigmoid_forward", {"T:f32[3]", "f32[3];f32[3]"}},
      {"aten::log_sigmoid_backward", {"T:f32[3] T:f32[3] T:f32[3]", "f32[3]"}},
      {"aten::select_backward", {"T:f32[3] L:4,3 I:0 I:-1", "f32[4,3]"}},
      {"aten::slice_backward", {"T:f32[4,2] L:4,5 I:1 I:1 I:9223372036854775807 I:2", "f32[4,5]"}},
      {"aten::index_add", {"T:f32[4,3] I:0 T:s64[5] T:f32[5,3] S:f", "f32[4,3]"}},
      {"aten::randint", {"I:10 L:2,3 N O O O RNG", "s64[2,3]"}},
      {"aten::randint.low", {"I:-5 I:5 L:4 N O O O RNG", "s64[4]"}},
      {"aten::randint.low", {"I:5 I:5 L:4 N O O O RNG", "s64[4]", true}},
      // ---- GradScaler (amp.cc) and the checkpoint barrier (barrier.cc) ----
      {"aten::_amp_foreach_non_finite_check_and_unscale",
       {"TL:f32[2,3]|bf16[4]|f16[] T:f32[] T:f32[]", "f32[2,3];bf16[4];f16[];f32[]"}},
      {"aten::_amp_foreach_non_finite_check_and_unscale",
       {"TL:f32[2] T:f32[1] T:f32[1]", "f32[2];f32[1]"}},
      {"aten::_amp_foreach_non_finite_check_and_unscale",
       {"TL:s32[2] T:f32[] T:f32[]", "s32[2];f32[]", true}},
      {"aten::_amp_update_scale", {"T:f32[] T:s32[] T:f32[] S:f S:f I:2000", "f32[];s32[]"}},
      {"aten::_amp_update_scale", {"T:f32[1] T:s32[1] T:f32[1] S:f S:f I:2", "f32[1];s32[1]"}},
      {"aten::_amp_update_scale", {"T:f64[] T:s32[] T:f32[] S:f S:f I:2", "f64[];s32[]", true}},
      {"ember::optimization_barrier",
       {"TL:f32[2,3]|s64[4]|c64[2] TL:f32[1]", "f32[2,3];s64[4];c64[2]"}},
      {"ember::optimization_barrier", {"TL:bf16[5] TL:", "bf16[5]"}},
  };
  return *m;
}

TEST(LoweringTable, FindAndOrder) {
  const LoweringTable& t = LoweringTable::Get();
  EXPECT_NE(t.Find("aten::add.Tensor"), nullptr);
  EXPECT_EQ(t.Find("aten::add"), nullptr);
  EXPECT_EQ(t.Find("aten::no_such_op"), nullptr);
  auto ops = t.ops();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  LoweringTable local;
  local.Add("b", t.Find("aten::exp"));
  local.Add("a", t.Find("aten::exp"));
  local.Add("b", t.Find("aten::log"));
  EXPECT_EQ(local.ops(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(local.Find("b"), t.Find("aten::log"));
}

TEST(LoweringTable, DeclinedIsDistinct) {
  EXPECT_TRUE(IsDeclined(Declined("why")));
  EXPECT_FALSE(IsDeclined(InvalidArgument("declined: not really")));
  EXPECT_FALSE(IsDeclined(Unimplemented("something else")));
  EXPECT_FALSE(IsDeclined(OkStatus()));
}

TEST(LoweringTable, EveryEntryHasSamples) {
  std::set<std::string> missing;
  for (const auto& op : LoweringTable::Get().ops())
    if (!Samples().count(op)) missing.insert(op);
  std::string list;
  for (const auto& m : missing) list += m + " ";
  EXPECT_TRUE(missing.empty()) << "table entries without a sample call: " << list;
  for (const auto& [op, s] : Samples())
    EXPECT_NE(LoweringTable::Get().Find(op), nullptr)
        << "sample for an op not in the table: " << op;
}

TEST(LoweringTable, EachSampleLowersOrDeclinesCleanly) {
  for (const auto& [op, s] : Samples()) {
    SCOPED_TRACE(op + "(" + s.args + ") -> " + s.outputs);
    CallHarness h(op);
    h.AddSpec(s.args);
    h.OutSpec(s.outputs);
    int before = h.b.num_nodes();
    LowerResult r = h.Lower();
    if (!r.ok()) {
      EXPECT_TRUE(IsDeclined(r.status())) << "error instead of a result: " << r.status().ToString();
      EXPECT_EQ(h.b.num_nodes(), before) << "declined after appending nodes";
      EXPECT_TRUE(s.expect_decline) << "unexpected decline: " << r.status().ToString();
      continue;
    }
    EXPECT_FALSE(s.expect_decline) << "expected a decline";
    ASSERT_EQ(r->size(), h.call.outputs.size());
    for (size_t i = 0; i < r->size(); ++i) {
      const OutputMeta& o = h.call.outputs[i];
      if (!o.defined) continue;
      ASSERT_NE((*r)[i], kInvalidNode);
      EXPECT_EQ(h.b.shape((*r)[i]), Shape(o.dtype, o.sizes)) << "output " << i;
    }
    std::vector<NodeId> outs;
    for (NodeId n : *r)
      if (n != kInvalidNode) outs.push_back(n);
    h.b.SetOutputs(outs);
    auto g = h.b.Build();
    EXPECT_TRUE(g.ok()) << g.status().ToString();
  }
}

}  // namespace
}  // namespace ember::lowering
