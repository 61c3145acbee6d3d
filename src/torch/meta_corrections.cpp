// The per-op corrections table (meta_corrections.h): where eager's CPU kernel writes an
// argument its schema does not mark, or returns outputs of another shape, dtype or
// layout than the op's Meta kernel says. Each entry says which eager behaviour it
// follows; docs/architecture.md ("Where DESIGN.md §7 proved wrong or incomplete for
// torch 2.13") lists the ones that come from torch itself.
#include "meta_corrections.h"

#include <ATen/native/ConvUtils.h>

#include <algorithm>
#include <string>
#include <unordered_map>

#include "op_schema.h"

namespace ember_torch {
namespace {

// ---------------------------------------------------------------- batch norm
// native_batch_norm updates running_mean/running_var (args 3, 4) in training mode
// although its schema does not say so: treat them as written.
void batch_norm_writes_running_stats(const std::vector<c10::IValue>& args, std::vector<int>& w) {
  if (args.size() >= 6 && args[5].isBool() && args[5].toBool()) {
    for (int i : {3, 4}) {
      if (args[i].isTensor() && args[i].toTensor().defined()) w.push_back(i);
    }
  }
}

// Batch norm in eval mode: the Meta kernels return save_mean/save_invstd (returns 1
// and 2) of shape [C] where the CPU kernel returns empty tensors; ember follows the CPU
// kernel (with [C] the buffers were left uninitialized).
bool batch_norm_in_eval_mode(const c10::FunctionSchema& schema,
                             const std::vector<c10::IValue>& args) {
  const auto& n = schema.name();
  if (n == "aten::_native_batch_norm_legit_no_training" || n == "aten::_batch_norm_no_update") {
    return true;
  }
  if (n != "aten::native_batch_norm" && n != "aten::_native_batch_norm_legit_functional" &&
      !(n == "aten::_native_batch_norm_legit" && schema.overload_name().empty())) {
    return false;
  }
  return args.size() > 5 && args[5].isBool() && !args[5].toBool();
}

void eval_batch_norm_saves_nothing(const c10::FunctionSchema& schema,
                                   const std::vector<c10::IValue>& args, torch::jit::Stack& rets) {
  if (!batch_norm_in_eval_mode(schema, args)) return;
  for (size_t r : {1, 2}) {
    if (r < rets.size() && rets[r].isTensor()) {
      rets[r] = at::empty({0}, rets[r].toTensor().options());  // save_mean/save_invstd, as on CPU
    }
  }
}

// Batch/layer norm on float16/bfloat16 input: the Meta kernels return the statistics
// (save_mean, rstd, updated running stats) in float32, as CUDA does; the CPU kernel
// returns them in the input's dtype unless a parameter (weight, bias, running stats) is
// of another dtype ("mixed type", then float32).
void norm_stats_in_input_dtype(const c10::FunctionSchema& schema,
                               const std::vector<c10::IValue>& args, torch::jit::Stack& rets) {
  if (args.empty() || !args[0].isTensor()) return;
  const auto in = args[0].toTensor().scalar_type();
  if (in != at::kHalf && in != at::kBFloat16) return;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].isTensor() && args[i].toTensor().defined() &&
        args[i].toTensor().scalar_type() != in) {
      return;  // mixed type: float32 statistics, as Meta says
    }
  }
  for (size_t r = 1; r < rets.size(); ++r) {
    auto& v = rets[r];
    if (v.isTensor() && v.toTensor().scalar_type() == at::kFloat) {
      const auto& t = v.toTensor();
      v = at::empty_strided(t.sizes(), t.strides(), t.options().dtype(in));
    }
  }
}

// ---------------------------------------------------------------- embedding bag
// _embedding_bag / _embedding_bag_forward_only: the CPU kernel (EmbeddingBag.cpp) leaves
// offset2bag (return 1) empty on its "fast path" (mode sum, float/half/bfloat16 weight
// with unit inner stride, unit-stride per_sample_weights, no padding_idx), sizes bag_size
// (return 2) by the number of bags (one less than offsets with include_last_offset, except
// in _embedding_bag_forward_only's mode sum), and
// gives max_indices (return 3) bag_size's shape unless mode is max; the Meta kernel sizes
// offset2bag [num_indices], bag_size [len(offsets)] and max_indices [0]. The CPU length
// of return `r`, or nullopt where Meta agrees.
std::optional<int64_t> embedding_bag_cpu_numel(const c10::FunctionSchema& schema,
                                               const std::vector<c10::IValue>& args, size_t r) {
  const auto& n = schema.name();
  if (args.size() < 9 || r < 1 || r > 3 || !args[0].isTensor() || !args[4].isInt()) {
    return std::nullopt;
  }
  const int64_t mode = args[4].toInt();
  if (r == 2 || r == 3) {
    if ((r == 3 && mode == 2) || !args[2].isTensor() || args[2].toTensor().dim() != 1) {
      return std::nullopt;
    }
    // _embedding_bag_forward_only in mode sum keeps one entry per offset.
    const bool last = args[7].isBool() && args[7].toBool() &&
                      !(mode == 0 && n == "aten::_embedding_bag_forward_only");
    return std::max<int64_t>(args[2].toTensor().size(0) - (last ? 1 : 0), 0);
  }
  const auto& w = args[0].toTensor();
  const auto t = w.scalar_type();
  bool fast = mode == 0 && (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) &&
              w.dim() == 2 && w.stride(1) == 1 && args[8].isInt() && args[8].toInt() < 0;
  if (fast && args[6].isTensor() && args[6].toTensor().defined()) {
    fast = args[6].toTensor().stride(0) == 1;
  }
  if (!fast) return std::nullopt;
  return 0;
}

void embedding_bag_cpu_sizes(const c10::FunctionSchema& schema,
                             const std::vector<c10::IValue>& args, torch::jit::Stack& rets) {
  for (size_t r = 0; r < rets.size(); ++r) {
    if (auto n = embedding_bag_cpu_numel(schema, args, r)) {
      rets[r] = at::empty({*n}, rets[r].toTensor().options());
    }
  }
}

// ---------------------------------------------------------------- convolution
// Convolutions: torch's Meta kernel leaves the output contiguous because a meta tensor
// does not say which backend would run (see meta_conv in torch/_meta_registrations.py);
// eager CPU picks channels_last when the input or the weight is channels_last. Ask
// ATen's own backend choice for a CPU stand-in with the operands' layout (as torch's
// FakeTensor convolution rule does) and restride the outputs to match eager.
// Stand-ins alias a dummy pointer: only metadata is read.
at::Tensor cpu_standin(const at::Tensor& t) {
  alignas(64) static char dummy[64];
  return at::from_blob(dummy, t.sizes(), t.strides(),
                       at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
}

std::vector<int64_t> strides_for(const std::vector<int64_t>& sizes, at::MemoryFormat mf) {
  if (mf == at::MemoryFormat::ChannelsLast && sizes.size() == 4) {
    return c10::get_channels_last_strides_2d(sizes);
  }
  if (mf == at::MemoryFormat::ChannelsLast3d && sizes.size() == 5) {
    return c10::get_channels_last_strides_3d(sizes);
  }
  auto st = c10::contiguous_strides(sizes);
  return std::vector<int64_t>(st.begin(), st.end());
}

void conv_output_layout(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                        torch::jit::Stack& rets) {
  const bool bwd = schema.name() == "aten::convolution_backward";
  const bool fwd = !bwd;         // convolution, _convolution
  const int base = bwd ? 1 : 0;  // index of `input`
  if (!args[base].isTensor() || !args[base + 1].isTensor()) return;
  const at::Tensor& input = args[base].toTensor();
  const at::Tensor& weight = args[base + 1].toTensor();
  if (!input.defined() || !weight.defined() || (weight.dim() != 4 && weight.dim() != 5)) return;
  at::MemoryFormat mf;
  try {
    std::optional<at::Tensor> bias;
    at::OptionalSymIntArrayRef bias_sizes;
    std::vector<c10::SymInt> bias_sizes_v;
    if (fwd && args[2].isTensor() && args[2].toTensor().defined()) {
      bias = cpu_standin(args[2].toTensor());
    }
    if (bwd && !args[3].isNone()) {
      bias_sizes_v = sym_vec(args[3]);
      bias_sizes = c10::SymIntArrayRef(bias_sizes_v);
    }
    int p = bwd ? 4 : 3;  // stride, padding, dilation, transposed, output_padding, groups
    auto stride = sym_vec(args[p]), padding = sym_vec(args[p + 1]), dilation = sym_vec(args[p + 2]);
    auto output_padding = sym_vec(args[p + 4]);
    at::Tensor in = cpu_standin(input), w = cpu_standin(weight);
    auto backend = at::native::select_conv_backend(in, w, bias, stride, padding, dilation,
                                                   args[p + 3].toBool(), output_padding,
                                                   c10::SymInt(args[p + 5].toInt()), bias_sizes);
    mf = at::native::_determine_backend_memory_format(in, w, backend);
  } catch (const std::exception&) {
    return;  // eager raises its own error at execution
  }
  // Outputs to restride: the result (forward); grad_input and grad_weight (backward).
  for (size_t r = 0; r < rets.size() && r < 2; ++r) {
    auto& v = rets[r];
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::Tensor& t = v.toTensor();
    if (t.dim() == 4 || t.dim() == 5) {
      std::vector<int64_t> sizes = t.sizes().vec();
      v = at::empty_strided(sizes, strides_for(sizes, mf), t.options());
    }
    if (fwd) break;
  }
}

// ---------------------------------------------------------------- the table
using Table = std::unordered_map<std::string, OpCorrection>;

const Table& table() {
  static const Table* t = [] {
    auto* tab = new Table();
    auto add = [&](const char* op, OpCorrection c) { tab->emplace(op, std::move(c)); };
    add("aten::native_batch_norm", {&batch_norm_writes_running_stats,
                                    {&eval_batch_norm_saves_nothing, &norm_stats_in_input_dtype}});
    for (const char* op :
         {"aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit_functional",
          "aten::_native_batch_norm_legit_no_training", "aten::_batch_norm_no_update"}) {
      add(op, {nullptr, {&eval_batch_norm_saves_nothing, &norm_stats_in_input_dtype}});
    }
    for (const char* op : {"aten::_batch_norm_with_update",
                           "aten::_batch_norm_with_update_functional", "aten::native_layer_norm"}) {
      add(op, {nullptr, {&norm_stats_in_input_dtype}});
    }
    for (const char* op : {"aten::_embedding_bag", "aten::_embedding_bag_forward_only"}) {
      add(op, {nullptr, {&embedding_bag_cpu_sizes}});
    }
    for (const char* op :
         {"aten::convolution", "aten::_convolution", "aten::convolution_backward"}) {
      add(op, {nullptr, {&conv_output_layout}});
    }
    return tab;
  }();
  return *t;
}

}  // namespace

const OpCorrection* find_op_correction(const c10::FunctionSchema& schema) {
  const Table& t = table();
  auto it = t.find(schema.name());
  return it == t.end() ? nullptr : &it->second;
}

void correct_meta_returns(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                          torch::jit::Stack& returns) {
  // Backward ops with an output_mask: Meta kernels may return defined tensors where the
  // CPU kernel returns undefined ones; follow the mask (docs/architecture.md, "Meta
  // kernels of backward ops ignore output_mask").
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (schema.arguments()[i].name() != "output_mask" || !args[i].isBoolList()) continue;
    auto mask = args[i].toBoolList();
    const auto& rets = schema.returns();
    for (size_t r = 0; r < mask.size() && r < returns.size(); ++r) {
      const auto* ai = rets[r].alias_info();
      if (!mask[r] && returns[r].isTensor() && !(ai && ai->isWrite())) returns[r] = at::Tensor();
    }
  }
  if (const OpCorrection* c = find_op_correction(schema)) {
    for (auto fix : c->fix_returns) fix(schema, args, returns);
  }
}

}  // namespace ember_torch
