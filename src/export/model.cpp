// The C++ loader of export artifacts (include/ember/export/model.h).
#include "ember/export/model.h"

#include <ftw.h>
#include <sys/stat.h>
#include <torch/headeronly/version.h>  // TORCH_VERSION_MAJOR/MINOR
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "artifact_file.h"
#include "binding.h"
#include "codegen/cpu/disk_cache.h"
#include "ember/codegen/cpu.h"
#include "ember/ir/text.h"
#include "ember/runtime/buffer.h"
#include "ember_torch.h"
#include "program.h"

namespace ember {

using ember_torch::exporting::KernelTarget;
using ember_torch::exporting::Program;
using ember_torch::exporting::ProgramParam;

namespace {

[[noreturn]] void fail(const std::string& msg) { throw ModelError(msg); }

constexpr int kManifestVersion = 1;

const std::map<std::string, at::ScalarType>& dtype_names() {
  static const std::map<std::string, at::ScalarType> m = {
      {"float32", at::kFloat},     {"float64", at::kDouble}, {"float16", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"int64", at::kLong},     {"int32", at::kInt},
      {"int16", at::kShort},       {"int8", at::kChar},      {"uint8", at::kByte},
      {"bool", at::kBool}};
  return m;
}
at::ScalarType parse_dtype(const std::string& s) {
  auto it = dtype_names().find(s);
  if (it == dtype_names().end()) fail("ember artifact: unknown dtype '" + s + "'");
  return it->second;
}
std::string dtype_name(at::ScalarType t) {
  for (const auto& kv : dtype_names())
    if (kv.second == t) return kv.first;
  return c10::toString(t);
}

std::vector<int64_t> parse_ints(const std::string& s) {
  std::vector<int64_t> v;
  if (s == "-") return v;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) v.push_back(std::stoll(t));
  return v;
}
std::string sizes_str(at::IntArrayRef s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

// ------------------------------------------------------------ safetensors
// A minimal JSON reader for a safetensors header: objects, arrays, strings, integers.
struct Json {
  enum Kind { kNull, kStr, kNum, kArr, kObj } kind = kNull;
  std::string s;
  int64_t n = 0;
  std::vector<Json> a;
  std::map<std::string, Json> o;
};
struct JsonReader {
  const std::string& t;
  size_t i = 0;
  void ws() {
    while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
  }
  char peek() {
    ws();
    if (i >= t.size()) fail("safetensors: the weights' safetensors header is cut short");
    return t[i];
  }
  void expect(char c) {
    if (peek() != c)
      fail(std::string("safetensors: bad safetensors header (expected '") + c + "')");
    ++i;
  }
  std::string str() {
    expect('"');
    std::string o;
    while (i < t.size() && t[i] != '"') {
      if (t[i] == '\\' && i + 1 < t.size()) ++i;
      o += t[i++];
    }
    ++i;
    return o;
  }
  Json value() {
    Json j;
    char c = peek();
    if (c == '{') {
      j.kind = Json::kObj;
      ++i;
      if (peek() == '}') return ++i, j;
      for (;;) {
        std::string k = str();
        expect(':');
        j.o[k] = value();
        if (peek() == ',') {
          ++i;
          continue;
        }
        expect('}');
        return j;
      }
    }
    if (c == '[') {
      j.kind = Json::kArr;
      ++i;
      if (peek() == ']') return ++i, j;
      for (;;) {
        j.a.push_back(value());
        if (peek() == ',') {
          ++i;
          continue;
        }
        expect(']');
        return j;
      }
    }
    if (c == '"') {
      j.kind = Json::kStr;
      j.s = str();
      return j;
    }
    size_t start = i;
    while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '-')) ++i;
    if (start == i) fail("safetensors: bad safetensors header (unexpected character)");
    j.kind = Json::kNum;
    j.n = std::stoll(t.substr(start, i - start));
    return j;
  }
};

std::map<std::string, at::Tensor> read_safetensors(const std::string& bytes) {
  static const std::map<std::string, at::ScalarType> st = {
      {"F32", at::kFloat}, {"F64", at::kDouble}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
      {"I64", at::kLong},  {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},   {"BOOL", at::kBool}};
  if (bytes.size() < 8) fail("safetensors: the weights file is too short");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (8 + n > bytes.size()) fail("safetensors: the weights' header is cut short");
  std::string header = bytes.substr(8, n);
  JsonReader r{header};
  Json h = r.value();
  if (h.kind != Json::kObj) fail("safetensors: the weights' header is not an object");
  const size_t data = 8 + n;
  std::map<std::string, at::Tensor> out;
  for (const auto& kv : h.o) {
    if (kv.first == "__metadata__") continue;
    const Json& e = kv.second;
    auto d = e.o.find("dtype");
    auto sh = e.o.find("shape");
    auto off = e.o.find("data_offsets");
    if (d == e.o.end() || sh == e.o.end() || off == e.o.end() || off->second.a.size() != 2) {
      fail("safetensors: weight " + kv.first + " lacks dtype, shape or data_offsets");
    }
    auto dt = st.find(d->second.s);
    if (dt == st.end()) fail("safetensors: weight " + kv.first + ": unknown dtype " + d->second.s);
    std::vector<int64_t> sizes;
    for (const Json& x : sh->second.a) sizes.push_back(x.n);
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dt->second));
    int64_t b0 = off->second.a[0].n, b1 = off->second.a[1].n;
    if (b1 - b0 != static_cast<int64_t>(t.nbytes()) || data + b1 > bytes.size() || b0 < 0) {
      fail("safetensors: weight " + kv.first + ": its bytes do not match its shape");
    }
    if (t.nbytes()) std::memcpy(t.data_ptr(), bytes.data() + data + b0, t.nbytes());
    out[kv.first] = t;
  }
  return out;
}

// ------------------------------------------------------------ helpers
int remove_entry(const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }

struct TempDir {
  std::string path;
  ~TempDir() {
    if (!path.empty()) nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
};

// A parameter's buffer for `base` viewed with the program's geometry: row-major of the
// view (or of its dense permutation when the lowering borrowed it permuted).
at::Tensor param_tensor(const at::Tensor& base, const ProgramParam& q) {
  at::Tensor v = base.as_strided(q.sizes, q.strides, base.storage_offset() + q.offset_delta);
  if (q.permuted) return v.permute(ember_torch::dense_permutation(v)).contiguous();
  return v.contiguous();
}

StatusOr<BufferRef> borrow(const Shape& shape, const at::Tensor& t) {
  return Buffer::Borrow(shape, t.numel() ? const_cast<void*>(t.const_data_ptr()) : nullptr,
                        std::make_shared<at::Tensor>(t));
}

}  // namespace

std::map<std::string, at::Tensor> LoadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("ember::LoadSafetensors: cannot open " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return read_safetensors(bytes);
  } catch (const ModelError& e) {
    fail(path + ": " + e.what());
  }
}

void SaveSafetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  static const std::map<at::ScalarType, std::string> names = {
      {at::kFloat, "F32"}, {at::kDouble, "F64"}, {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
      {at::kLong, "I64"},  {at::kInt, "I32"},    {at::kShort, "I16"}, {at::kChar, "I8"},
      {at::kByte, "U8"},   {at::kBool, "BOOL"}};
  std::string header = "{", data;
  bool first = true;
  for (const auto& kv : tensors) {
    at::Tensor t = kv.second.contiguous();
    auto it = names.find(t.scalar_type());
    if (it == names.end() || t.device().type() != at::kCPU) {
      fail("ember::SaveSafetensors: " + kv.first +
           ": a CPU tensor of a safetensors dtype is "
           "needed, got " +
           dtype_name(t.scalar_type()) + " on " + t.device().str());
    }
    std::string shape;
    for (int64_t d = 0; d < t.dim(); ++d) shape += (d ? "," : "") + std::to_string(t.size(d));
    header += std::string(first ? "" : ",") + "\"" + kv.first + "\":{\"dtype\":\"" + it->second +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(data.size()) +
              "," + std::to_string(data.size() + t.nbytes()) + "]}";
    first = false;
    data.append(static_cast<const char*>(t.const_data_ptr()), t.nbytes());
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  uint64_t n = header.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  bytes += header;
  bytes += data;
  Status s = codegen::WriteFileAtomic(path, bytes);
  if (!s.ok()) fail("ember::SaveSafetensors: " + s.message());
}

// ------------------------------------------------------------ the model
struct Model::Impl {
  std::vector<TensorSpec> inputs, outputs;
  // Per fx input (the exported graph's flat inputs): a weight (its tensor) or user input k.
  std::vector<at::Tensor> fx_weight;
  std::vector<int> fx_user;  // -1 for weights
  struct Bucket {
    int64_t batch = 0;
    Program program;
    std::shared_ptr<Executable> exe;
    std::vector<BufferRef> fixed;  // per parameter: weights, constants, scalars (else null)
  };
  std::vector<Bucket> buckets;  // ascending batch
  int64_t min_batch = 0, max_batch = 0;
  bool dynamic = false;
  std::string target;
  int64_t kernels_built = 0;
  std::string path;
};

Model::Model() = default;

const std::vector<TensorSpec>& Model::inputs() const {
  if (!impl_) fail("ember::Model: empty model (use ember::LoadModel)");
  return impl_->inputs;
}
const std::vector<TensorSpec>& Model::outputs() const {
  if (!impl_) fail("ember::Model: empty model (use ember::LoadModel)");
  return impl_->outputs;
}
std::vector<int64_t> Model::batch_buckets() const {
  std::vector<int64_t> b;
  if (impl_)
    for (const auto& k : impl_->buckets) b.push_back(k.batch);
  return b;
}
const std::string& Model::target() const {
  if (!impl_) fail("ember::Model: empty model (use ember::LoadModel)");
  return impl_->target;
}
int64_t Model::kernels_built_at_load() const { return impl_ ? impl_->kernels_built : 0; }

Model LoadModel(const std::string& path, const LoadOptions& options) {
  ember_torch::initialize();
  StatusOr<exporting::ArtifactFile> file = exporting::ArtifactFile::Open(path);
  if (!file.ok()) fail(file.status().message());
  auto entry = [&](const std::string& name) {
    StatusOr<std::string> s = file->Read(name);
    if (!s.ok()) fail(s.status().message());
    return std::move(s).value();
  };
  auto impl = std::make_shared<Model::Impl>();
  impl->path = path;
  const std::string where = "ember artifact " + path + ": ";

  // The manifest.
  std::istringstream ms(entry("manifest.txt"));
  std::string line;
  std::getline(ms, line);
  if (line != "ember-manifest " + std::to_string(kManifestVersion)) {
    fail(where + "manifest version line '" + line + "', this ember reads 'ember-manifest " +
         std::to_string(kManifestVersion) + "'");
  }
  std::map<std::string, std::string> kv;
  std::vector<int64_t> bucket_sizes;
  struct Fx {
    int index;
    std::string kind, name;
  };
  std::vector<Fx> fx;
  std::vector<std::string> externs;
  while (std::getline(ms, line)) {
    if (line.empty()) continue;
    auto sp = line.find(' ');
    std::string key = line.substr(0, sp), rest = sp == std::string::npos ? "" : line.substr(sp + 1);
    std::istringstream ls(rest);
    try {
      if (key == "input" || key == "output") {
        TensorSpec t;
        std::string dt, sizes;
        if (!(ls >> t.name >> dt >> sizes >> t.dynamic_dim))
          fail(where + "bad line '" + line + "'");
        t.dtype = parse_dtype(dt);
        t.sizes = parse_ints(sizes);
        (key == "input" ? impl->inputs : impl->outputs).push_back(t);
      } else if (key == "bucket") {
        bucket_sizes.push_back(std::stoll(rest));
      } else if (key == "fx") {
        Fx f;
        if (!(ls >> f.index >> f.kind >> f.name)) fail(where + "bad line '" + line + "'");
        fx.push_back(f);
      } else if (key == "extern_schema") {
        externs.push_back(rest);
      } else {
        kv[key] = rest;
      }
    } catch (const std::logic_error&) {
      fail(where + "bad manifest line '" + line + "'");
    }
  }
  const int ir_version = std::atoi(kv["ir_text_version"].c_str());
  if (ir_version != kIrTextVersion) {
    fail(where + "IR text version " + kv["ir_text_version"] + ", this ember reads version " +
         std::to_string(kIrTextVersion) + ": export the model again with this ember");
  }
  const std::string torch_version = kv["torch_version"];
  if (!externs.empty()) {
    // ATen externs are recorded against one torch's schemas and argument conventions.
    std::string here =
        std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
    if (torch_version.rfind(here + ".", 0) != 0 && torch_version != here) {
      fail(where + "its ATen externs were recorded with torch " + torch_version +
           ", this process has torch " + here + ".x");
    }
  }
  if (kv.count("batch")) {
    std::istringstream bs(kv["batch"]);
    std::string b;
    bs >> b;
    if (b != "none") {
      impl->dynamic = true;
      impl->min_batch = std::stoll(b);
      bs >> impl->max_batch;
    }
  }
  for (auto* specs : {&impl->inputs, &impl->outputs}) {
    for (auto& t : *specs) {
      if (t.dynamic_dim >= 0) {
        t.min = impl->min_batch;
        t.max = impl->max_batch;
      }
    }
  }

  // Weights and constants.
  std::map<std::string, at::Tensor> weights;
  try {
    weights = read_safetensors(entry("weights.safetensors"));
  } catch (const ModelError& e) {
    fail(where + "weights.safetensors: " + e.what());
  }
  impl->fx_weight.resize(fx.size());
  impl->fx_user.assign(fx.size(), -1);
  for (const auto& f : fx) {
    if (f.index < 0 || f.index >= static_cast<int>(fx.size())) fail(where + "bad fx index");
    if (f.kind == "weight") {
      auto it = weights.find(f.name);
      if (it == weights.end()) fail(where + "weight " + f.name + " is missing from the weights");
      impl->fx_weight[f.index] = it->second;
    } else {
      impl->fx_user[f.index] = std::stoi(f.name);
    }
  }

  // Kernel target.
  KernelTarget target;
  target.fast = kv["codegen_fast"] == "1";
  target.vector_math = kv["codegen_vector_math"] != "0";
  const bool native_ok = kv["native_cpu_features"] == ember_torch::exporting::native_cpu_features();
  if (options.target == "auto") {
    target.name = native_ok ? "native" : "x86-64-v3";
  } else {
    target.name = options.target;
  }
  if (target.name == "native" && !native_ok) {
    fail(where + "its native kernels need the exporting CPU's features (" +
         kv["native_cpu_features"] + "); this CPU has others: load the x86-64-v3 kernels");
  }
  if (target.name == "x86-64-v3" && !ember_torch::exporting::cpu_supports_baseline()) {
    fail(where + "this CPU cannot run x86-64-v3 code (AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE)");
  }
  if (target.name != "native" && target.name != "x86-64-v3") {
    fail("ember::LoadOptions::target: '" + options.target + "' (auto, native or x86-64-v3)");
  }
  impl->target = target.name;
  // The target's kernels, unpacked into a private codegen cache directory.
  auto tmp = std::make_shared<TempDir>();
  {
    const char* t = std::getenv("TMPDIR");
    std::string templ = std::string(t && *t ? t : "/tmp") + "/ember-model-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
      fail("ember::LoadModel: cannot create a temporary directory " + templ);
    tmp->path = buf.data();
  }
  const std::string prefix = "kernels/" + target.name + "/";
  for (const std::string& name : file->Names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    Status s = codegen::WriteFileAtomic(tmp->path + "/" + name.substr(prefix.size()), entry(name));
    if (!s.ok()) fail("ember::LoadModel: unpacking kernels: " + s.message());
  }
  target.cache_dir = tmp->path;

  const codegen::CodegenStats before = codegen::GetCodegenStats();
  std::sort(bucket_sizes.begin(), bucket_sizes.end());
  for (int64_t b : bucket_sizes) {
    Model::Impl::Bucket bk;
    bk.batch = b;
    const std::string dir = "buckets/" + std::to_string(b) + "/";
    try {
      bk.program = Program::Parse(entry(dir + "program.txt"));
      bk.exe = ember_torch::exporting::compile_program(entry(dir + "graph.ir"), bk.program, target);
    } catch (const ModelError&) {
      throw;
    } catch (const std::exception& e) {
      fail(where + "bucket " + std::to_string(b) + ": " + e.what());
    }
    const auto& shapes = bk.exe->parameter_shapes();
    if (shapes.size() != bk.program.params.size()) {
      fail(where + "bucket " + std::to_string(b) + ": the program has " +
           std::to_string(bk.program.params.size()) + " parameters, its graph " +
           std::to_string(shapes.size()));
    }
    bk.fixed.resize(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      const ProgramParam& q = bk.program.params[i];
      StatusOr<BufferRef> buf = Status(StatusCode::kInternal, "unset");
      if (q.kind == ProgramParam::kScalar) {
        bk.fixed[i] = Buffer::FromLiteral(ember_torch::scalar_literal(q.value, q.tag));
        continue;
      }
      if (q.kind == ProgramParam::kConstant) {
        std::string name = "__constant." + std::to_string(b) + "." + std::to_string(q.index);
        auto it = weights.find(name);
        if (it == weights.end()) fail(where + "constant " + name + " is missing");
        buf = borrow(shapes[i], it->second.contiguous());
      } else if (q.index < 0 || q.index >= static_cast<int>(fx.size())) {
        fail(where + "a parameter reads fx input " + std::to_string(q.index));
      } else if (impl->fx_user[q.index] < 0) {
        buf = borrow(shapes[i], param_tensor(impl->fx_weight[q.index], q));
      } else {
        continue;  // a user input: bound at each run
      }
      if (!buf.ok()) fail(where + "parameter " + std::to_string(i) + ": " + buf.status().message());
      bk.fixed[i] = std::move(buf).value();
    }
    impl->buckets.push_back(std::move(bk));
  }
  if (impl->buckets.empty()) fail(where + "no compiled bucket");
  const codegen::CodegenStats after = codegen::GetCodegenStats();
  impl->kernels_built = after.kernels_built - before.kernels_built;
  // Kernels are loaded (dlopen'ed) now: their files may go.
  tmp.reset();
  Model m;
  m.impl_ = impl;
  return m;
}

std::vector<at::Tensor> Model::Run(const std::vector<at::Tensor>& inputs) const {
  if (!impl_) fail("ember::Model::Run: empty model (use ember::LoadModel)");
  const Impl& im = *impl_;
  if (inputs.size() != im.inputs.size()) {
    fail("ember::Model::Run: expected " + std::to_string(im.inputs.size()) + " inputs, got " +
         std::to_string(inputs.size()));
  }
  int64_t batch = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& s = im.inputs[i];
    const at::Tensor& t = inputs[i];
    const std::string what = "ember::Model::Run: input " + std::to_string(i) + " (" + s.name + ")";
    if (!t.defined()) fail(what + " is an undefined tensor");
    if (t.device().type() != at::kCPU || t.layout() != at::kStrided) {
      fail(what + " must be a strided CPU tensor, got " + t.device().str());
    }
    if (t.scalar_type() != s.dtype) {
      fail(what + ": expected dtype " + dtype_name(s.dtype) + ", got " +
           dtype_name(t.scalar_type()));
    }
    if (t.dim() != static_cast<int64_t>(s.sizes.size())) {
      fail(what + ": expected " + std::to_string(s.sizes.size()) + " dims " + sizes_str(s.sizes) +
           ", got " + std::to_string(t.dim()) + " " + sizes_str(t.sizes()));
    }
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d == s.dynamic_dim) {
        int64_t b = t.size(d);
        if (b < s.min || b > s.max) {
          fail(what + ": batch size " + std::to_string(b) + " (dim " + std::to_string(d) +
               ") is outside the exported range [" + std::to_string(s.min) + ", " +
               std::to_string(s.max) + "]");
        }
        if (batch >= 0 && b != batch) {
          fail(what + ": batch size " + std::to_string(b) + " differs from an earlier input's " +
               std::to_string(batch));
        }
        batch = b;
      } else if (t.size(d) != s.sizes[d]) {
        fail(what + ": expected sizes " + sizes_str(s.sizes) + ", got " + sizes_str(t.sizes()) +
             " (dim " + std::to_string(d) + ")");
      }
    }
  }
  const Impl::Bucket* bk = &im.buckets.front();
  if (im.dynamic) {
    bk = nullptr;
    for (const auto& b : im.buckets) {
      if (b.batch >= batch) {
        bk = &b;
        break;
      }
    }
    if (!bk) fail("ember::Model::Run: no bucket holds batch " + std::to_string(batch));
  }
  // The user inputs, padded with zeros to the bucket's batch.
  std::vector<at::Tensor> padded(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& s = im.inputs[i];
    at::Tensor t = inputs[i];
    if (s.dynamic_dim >= 0 && t.size(s.dynamic_dim) < bk->batch) {
      std::vector<int64_t> sizes = t.sizes().vec();
      sizes[s.dynamic_dim] = bk->batch;
      at::Tensor p = at::zeros(sizes, t.options());
      p.narrow(s.dynamic_dim, 0, t.size(s.dynamic_dim)).copy_(t);
      t = p;
    }
    padded[i] = t;
  }
  const auto& shapes = bk->exe->parameter_shapes();
  std::vector<BufferRef> args(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (bk->fixed[i]) {
      args[i] = bk->fixed[i];
      continue;
    }
    const ProgramParam& q = bk->program.params[i];
    StatusOr<BufferRef> buf = borrow(shapes[i], param_tensor(padded[im.fx_user[q.index]], q));
    if (!buf.ok()) fail("ember::Model::Run: " + buf.status().message());
    args[i] = std::move(buf).value();
  }
  StatusOr<std::vector<BufferRef>> res = bk->exe->Run(args);
  if (!res.ok()) fail("ember::Model::Run (" + im.path + "): " + res.status().message());
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < bk->program.outputs.size(); ++k) {
    const auto& o = bk->program.outputs[k];
    const BufferRef& buf = res->at(o.root);
    ember_torch::TensorMeta dense = o.meta;
    auto cs = c10::contiguous_strides(dense.sizes);
    dense.strides.assign(cs.begin(), cs.end());
    dense.offset = 0;
    // A new tensor per output: a buffer may be shared by two outputs or borrowed.
    at::Tensor t = ember_torch::wrap_buffer(buf, dense);
    const bool shared = buf->literal().is_borrowed() ||
                        std::any_of(bk->program.outputs.begin(), bk->program.outputs.end(),
                                    [&](const auto& x) { return &x != &o && x.root == o.root; });
    const TensorSpec& s = im.outputs.at(k);
    if (s.dynamic_dim >= 0 && batch >= 0 && batch < bk->batch) {
      t = t.narrow(s.dynamic_dim, 0, batch).clone();  // not the padded buffer
    } else if (shared) {
      t = t.clone();
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace ember
