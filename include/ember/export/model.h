// Running an exported model (an artifact written by Python's `ember.export`) from C++,
// with no Python in the process: libtorch and the ember runtime (the `ember_torch`
// library) only. docs/architecture.md, "Export artifacts", describes the file.
//
//   ember::Model model = ember::LoadModel("mlp.ember");
//   std::vector<at::Tensor> out = model.Run({x});   // x: CPU tensor, [batch, 32] f32
//
// LoadModel checks the whole file (magic, format version, IR text version, every
// entry's size and SHA-256, the torch version its ATen externs were recorded with)
// and refuses a truncated, corrupt or wrong-version artifact with an ember::ModelError
// whose message says which check failed. It picks the kernels compiled for this CPU
// when this CPU's features equal the exporting machine's, else the baseline x86-64-v3
// kernels (LoadOptions::target forces one); kernels are loaded from the artifact, not
// compiled, when the system C++ compiler's path and version equal the exporting
// machine's (the kernel cache key includes them). Otherwise they are rebuilt from the
// kernel sources the artifact holds, which needs a C++ compiler (`c++` on PATH or
// $EMBER_CXX); `Model::kernels_built_at_load()` says how many were.
//
// Model::Run is safe to call from several threads at once (one compiled program per
// batch bucket, run with per-call state only; the weights are read-only). Inputs are
// CPU tensors of the signature's dtypes and sizes (any strides); a dynamic batch dim
// takes any size in [min_batch, max_batch]: the batch is padded with zeros to the
// smallest compiled bucket that holds it and the results are sliced back. Outputs are
// new CPU tensors (dense row-major). A wrong count, dtype, rank, size or a batch out of
// range throws ember::ModelError naming the input and what was expected; a run's own
// error (an ATen extern's exception, an out-of-range index) throws ember::ModelError
// naming the op.
//
// ATen externs (ops the lowering table does not lower) are recorded by ATen schema
// (`aten::name.overload`) and resolved through the c10 dispatcher when loading; a
// schema this libtorch lacks is a ModelError at load.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember {

class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One input or output of the exported signature. When dynamic_dim >= 0 that dim takes
// any size in [min, max] (sizes[dynamic_dim] is min).
struct TensorSpec {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes;
  int dynamic_dim = -1;
  int64_t min = 0, max = 0;
};

struct LoadOptions {
  // "auto" (this CPU's kernels if its features match the exporter's, else baseline),
  // "native" or "x86-64-v3" (ModelError if this CPU cannot run them).
  std::string target = "auto";
};

class Model {
 public:
  Model();  // empty: Run throws
  // inputs[i] is signature input i (CPU, dtype and sizes as inputs()[i]); returns one
  // CPU tensor per output. Thread-safe.
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) const;

  const std::vector<TensorSpec>& inputs() const;
  const std::vector<TensorSpec>& outputs() const;
  // The compiled batch sizes (ascending; one entry, the example's, without a dynamic dim).
  std::vector<int64_t> batch_buckets() const;
  // "native" or "x86-64-v3": which kernels were loaded.
  const std::string& target() const;
  // Kernels the system compiler built while loading (0 when every kernel came from
  // the artifact).
  int64_t kernels_built_at_load() const;

  struct Impl;

 private:
  friend Model LoadModel(const std::string& path, const LoadOptions& options);
  std::shared_ptr<const Impl> impl_;
};

// Reads and compiles the artifact at `path`. Throws ModelError (see the file comment).
Model LoadModel(const std::string& path, const LoadOptions& options = {});

// Tensors in a safetensors file (https://github.com/huggingface/safetensors: an 8-byte
// little-endian header length, a JSON header of name -> dtype, shape, data offsets,
// then the bytes), e.g. a served model's inputs. Dtypes F32, F64, F16, BF16, I64, I32,
// I16, I8, U8, BOOL. Load throws ModelError naming the file and what is wrong; Save
// writes CPU tensors (any strides) to a temporary name and renames it into place.
std::map<std::string, at::Tensor> LoadSafetensors(const std::string& path);
void SaveSafetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors);

}  // namespace ember
