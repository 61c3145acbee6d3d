// ember._C: Python bindings (pybind11 as shipped inside torch).
#include <ATen/FunctionalTensorWrapper.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/extension.h>

#include <unordered_map>

#include "../export/program.h"
#include "bridge.h"
#include "capture.h"
#include "donation.h"
#include "dtype_map.h"
#include "ember/version.h"
#include "execution_queue.h"
#include "graph_cache.h"
#include "lower.h"
#include "storage.h"

namespace py = pybind11;
using namespace ember_torch;

namespace {

std::vector<std::string> g_internal_prefixes;
PyObject* g_warn_fn = nullptr;  // intentionally leaked: must outlive static destruction
PyObject* g_log_fn = nullptr;

bool is_internal(const char* file) {
  for (const auto& p : g_internal_prefixes) {
    if (std::strncmp(file, p.c_str(), p.size()) == 0) return true;
  }
  return file[0] == '<';  // <frozen ...>, <string> helpers
}

// The innermost Python frame outside torch and ember: "file:line". Called for every
// traced op, so per-code-object results are cached: whether a code object is internal,
// and the text for each (code object, instruction offset). Cached code objects are
// kept alive (a bounded set: the functions that trace ops), so addresses never recycle.
struct CodeInfo {
  bool internal = false;
  std::string file;
  std::unordered_map<int, std::string> lines;  // lasti -> "file:line"
};
std::unordered_map<PyCodeObject*, CodeInfo>* g_code_cache = nullptr;

std::string python_source() {
  if (!Py_IsInitialized()) return "";
  py::gil_scoped_acquire gil;
  if (!g_code_cache) g_code_cache = new std::unordered_map<PyCodeObject*, CodeInfo>();
  PyFrameObject* f = PyEval_GetFrame();
  if (!f) return "";
  Py_INCREF(f);
  std::string out;
  while (f) {
    PyCodeObject* code = PyFrame_GetCode(f);  // new reference
    auto it = g_code_cache->find(code);
    if (it == g_code_cache->end()) {
      CodeInfo info;
      const char* file = PyUnicode_AsUTF8(code->co_filename);
      info.file = file ? file : "?";
      info.internal = !file || is_internal(file);
      Py_INCREF(code);  // kept alive by the cache
      it = g_code_cache->emplace(code, std::move(info)).first;
    }
    Py_DECREF(code);
    if (!it->second.internal) {
      int lasti = PyFrame_GetLasti(f);
      auto& lines = it->second.lines;
      auto lt = lines.find(lasti);
      if (lt == lines.end()) {
        lt = lines.emplace(lasti, it->second.file + ":" + std::to_string(PyFrame_GetLineNumber(f)))
                 .first;
      }
      out = lt->second;
      Py_DECREF(f);
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return out;
}

void call_py(PyObject* fn, const std::string& a, const std::string* b) {
  if (!fn || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  try {
    py::handle h(fn);
    if (b)
      h(a, *b);
    else
      h(a);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("ember callback");
  }
}

at::Tensor inner_of(const at::Tensor& t) {
  if (at::functionalization::impl::isFunctionalTensor(t)) {
    at::functionalization::impl::sync(t);
    return at::functionalization::impl::from_functional_tensor(t);
  }
  return t;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ember: lazy tensors for PyTorch (C++ bridge)";
  // ember.__version__ (ember/version.h: decided in pyproject.toml, compiled in by CMake).
  m.attr("__version__") = ember::Version();
  register_kernels();
  register_aten_externs();

  m.def("_init", [](std::vector<std::string> prefixes, py::object warn, py::object log) {
    g_internal_prefixes = std::move(prefixes);
    Py_XINCREF(warn.ptr());
    Py_XINCREF(log.ptr());
    g_warn_fn = warn.ptr();
    g_log_fn = log.ptr();
    g_source_hook = &python_source;
    g_warn_hook = [](const std::string& msg) { call_py(g_warn_fn, msg, nullptr); };
    g_log_hook = [](const std::string& kind, const std::string& msg) {
      call_py(g_log_fn, kind, &msg);
    };
    // Waits for queued programs release the GIL (the worker may need it for these hooks)
    // and let Ctrl-C through: a KeyboardInterrupt cancels the running program and is
    // raised at the wait (docs/architecture.md, "Execution model").
    g_wait_hook = [](const std::function<void(const InterruptCheck&)>& body) {
      if (!Py_IsInitialized()) {
        body(InterruptCheck());
        return;
      }
      std::optional<py::error_already_set> raised;
      auto interrupted = [&raised]() -> bool {
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() == 0) return false;
        raised.emplace();  // fetches the pending Python error (KeyboardInterrupt)
        return true;
      };
      if (PyGILState_Check()) {
        py::gil_scoped_release nogil;
        body(interrupted);
      } else {
        body(interrupted);
      }
      if (raised) throw *raised;
    };
  });

  m.def(
      "sync",
      [](const std::string& reason, bool wait) {
        if (wait) {
          sync_and_wait(reason);
        } else {
          sync(reason);
        }
      },
      py::arg("reason") = "ember.sync()", py::arg("wait") = false,
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "drain", [] { ExecutionQueue::get().drain(); }, py::call_guard<py::gil_scoped_release>());
  m.def(
      "shutdown_queue", [] { ExecutionQueue::get().shutdown(); },
      py::call_guard<py::gil_scoped_release>());
  m.def("queued_programs", [] { return ExecutionQueue::get().queued(); });
  m.def("_pause_queue", [](bool p) { ExecutionQueue::get().set_paused(p); });
  m.def("_pause_trace_after_operands", &trace_pause_after_operands,
        py::call_guard<py::gil_scoped_release>());
  m.def("_wait_for_trace_pause", &wait_for_trace_pause, py::call_guard<py::gil_scoped_release>());
  m.def("pending_graph_text", &graph_debug_text, py::call_guard<py::gil_scoped_release>());
  m.def("pending_ops", &pending_op_count);
  m.def("cache_size", &cache_size);
  m.def("sync_generation", &sync_generation);
  m.def("clear_cache", &clear_cache);

  m.def("counters", []() {
    auto& mt = metrics();
    std::lock_guard<std::mutex> g(mt.mu);
    py::dict d;
    d["syncs"] = mt.syncs;
    d["graphs_compiled"] = mt.graphs_compiled;
    d["memory_cache_hits"] = mt.memory_cache_hits;
    d["disk_cache_hits"] = mt.disk_cache_hits;
    d["compile_seconds"] = mt.compile_seconds;
    d["execute_seconds"] = mt.execute_seconds;
    d["transfers_to_device"] = mt.transfers_to_device;
    d["transfers_to_host"] = mt.transfers_to_host;
    d["ops_traced"] = mt.ops_traced;
    d["value_reads"] = mt.value_reads;
    d["fallbacks"] = mt.fallbacks;
    d["externs"] = mt.externs;
    d["value_read_sites"] = mt.value_read_sites;
    d["nodes_executed"] = mt.nodes_executed;
    d["extern_copies"] = mt.extern_copies;
    d["meta_cache_hits"] = mt.meta_cache_hits;
    d["meta_cache_misses"] = mt.meta_cache_misses;
    d["early_syncs"] = mt.early_syncs;
    d["lowering_declined"] = mt.lowering_declined;
    d["lowering_errors"] = mt.lowering_errors;
    d["lowering_failed_graphs"] = mt.lowering_failed_graphs;
    d["input_copies"] = mt.input_copies;
    d["output_copies"] = mt.output_copies;
    d["relayout_copies"] = mt.relayout_copies;
    d["kernel_compiles"] = mt.kernel_compiles;
    d["kernel_disk_hits"] = mt.kernel_disk_hits;
    d["donated_buffers"] = mt.donated_buffers;
    d["recompiles"] = mt.recompiles;
    d["recompiles_by_reason"] = mt.recompiles_by_reason;
    d["tail_ops"] = mt.tail_ops;
    d["bucketed_graphs"] = mt.bucketed_graphs;
    d["bucket_reuses"] = mt.bucket_reuses;
    d["bucket_refusals"] = mt.bucket_refusals;
    return d;
  });
  m.def("last_graph", []() {
    GraphStats s = last_graph();
    py::dict d;
    d["backend"] = s.backend;
    d["lazy_ops"] = s.lazy_ops;
    d["lowered_ops"] = s.lowered_ops;
    d["extern_ops"] = s.extern_ops;
    d["kernels"] = s.kernels;
    d["interpreted"] = s.interpreted;
    d["extern_steps"] = s.extern_steps;
    d["copy_steps"] = s.copy_steps;
    d["kernel_ops"] = s.kernel_ops;
    d["core_nodes"] = s.core_nodes;
    d["parameters"] = s.parameters;
    d["planned_peak_bytes"] = s.planned_peak_bytes;
    d["planned_buffer_bytes"] = s.planned_buffer_bytes;
    d["externs"] = s.externs;
    d["core_externs"] = s.core_externs;
    d["declined"] = s.declined;
    d["lowering_errors"] = s.lowering_errors;
    return d;
  });
  m.def("clear_counters", []() { metrics().clear(); });
  m.def("get_backend", []() { return std::string(backend_name(config().backend.load())); });

  m.def("memory_allocated", &memory_allocated);
  m.def("max_memory_allocated", &max_memory_allocated);
  m.def("reset_peak_memory_stats", &reset_peak_memory_stats);

  m.def("set_config", [](const std::string& key, py::object v) {
    auto& c = config();
    if (key == "max_pending_ops")
      c.max_pending_ops = v.cast<int64_t>();
    else if (key == "recompile_warn_limit")
      c.recompile_warn_limit = v.cast<int64_t>();
    else if (key == "record_source")
      c.record_source = v.cast<bool>();
    else if (key == "log_recompiles")
      c.log_recompiles = v.cast<bool>();
    else if (key == "shape_buckets") {
      std::vector<int64_t> b;
      if (!v.is_none()) {
        for (py::handle x : v) b.push_back(x.cast<int64_t>());
      }
      c.set_shape_buckets(std::move(b));
    } else if (key == "donate_buffers")
      donate_buffers() = v.cast<bool>();
    else if (key == "async_execution") {
      if (py::isinstance<py::str>(v)) {
        if (v.cast<std::string>() != "auto")
          throw py::value_error("ember.config.async_execution must be True, False or 'auto'");
        c.async_execution = Config::kAsyncAuto;
      } else {
        c.async_execution = v.cast<bool>() ? Config::kAsyncOn : Config::kAsyncOff;
      }
    } else if (key == "backend") {
      int b = parse_backend(v.cast<std::string>());
      if (b < 0)
        throw py::value_error("ember.config.backend must be 'cpu', 'interpreter' or 'aten'");
      c.backend = b;
    } else
      throw py::key_error("unknown ember config key: " + key);
  });

  // RNG
  m.def("manual_seed", [](uint64_t seed) {
    auto g = default_generator();
    std::lock_guard<std::mutex> l(g.mutex());
    g.set_current_seed(seed);
  });
  m.def("seed", []() {
    auto g = default_generator();
    std::lock_guard<std::mutex> l(g.mutex());
    return g.seed();
  });
  m.def("initial_seed", []() {
    auto g = default_generator();
    std::lock_guard<std::mutex> l(g.mutex());
    return g.current_seed();
  });
  m.def("get_rng_state", []() {
    auto g = default_generator();
    std::lock_guard<std::mutex> l(g.mutex());
    return at::Tensor(g.get_state());
  });
  m.def("set_rng_state", [](const at::Tensor& state) {
    auto g = default_generator();
    std::lock_guard<std::mutex> l(g.mutex());
    g.set_state(state);
  });
  m.def("default_generator", []() {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator()));
  });
  m.def("is_in_bad_fork", &in_bad_fork);
  m.def("ir_dtype", [](py::object dtype) {
    // torch.dtype -> IR dtype name ("" when the IR has none; see dtype_map.h)
    auto st = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
    return std::string(ir_dtype_name(st));
  });

  // Introspection for tests and debugging.
  m.def("is_pending", [](const at::Tensor& t) {
    auto in = inner_of(t);
    auto* impl = lazy_impl(in);
    if (!impl) return false;
    std::lock_guard<std::mutex> g(state_mutex());
    return impl->state()->ir.has_value();
  });
  m.def("is_functional",
        [](const at::Tensor& t) { return at::functionalization::impl::isFunctionalTensor(t); });
  m.def("wrap_host", [](const at::Tensor& t) {
    // An ember tensor whose device data is `t`'s memory (no copy): same sizes, strides,
    // storage offset and dtype. The torch.compile backend (ember/dynamo.py) hands its
    // CPU inputs to the lazy graph this way. The memory is only read: ops never write
    // device data in place, and donation only takes buffers of the device allocator.
    TORCH_CHECK(t.device().type() == at::kCPU && t.layout() == at::kStrided,
                "ember.wrap_host: expected a strided CPU tensor, got ", t.device(), " ", t.layout(),
                " (", t.scalar_type(), t.sizes(), ")");
    TORCH_CHECK(!t.is_conj() && !t.is_neg(), "ember.wrap_host: resolve the conj/neg bit first (",
                t.scalar_type(), t.sizes(), ")");
    return maybe_wrap(make_lazy_data(t.detach()));
  });
  // torch.compile backend (ember/dynamo.py): rerun a traced FX graph's program.
  py::class_<CapturedProgram, std::shared_ptr<CapturedProgram>>(m, "CapturedProgram")
      .def(
          "run",
          [](const CapturedProgram& p, const std::vector<std::optional<at::Tensor>>& ins,
             const std::vector<std::pair<int, int>>& writes) -> py::object {
            // None (another signature), or (outputs, buffers moved into inputs, inputs
            // the program wrote in place).
            std::vector<at::Tensor> v;
            v.reserve(ins.size());
            for (const auto& t : ins) v.push_back(t ? *t : at::Tensor());
            std::vector<InputWrite> w;
            for (const auto& [j, k] : writes) {
              TORCH_CHECK(j >= 0 && j < static_cast<int>(v.size()),
                          "ember: CapturedProgram.run: no input ", j);
              w.push_back({j, k, exclusive_storage_uses(v[j])});
            }
            std::optional<std::vector<at::Tensor>> out;
            int64_t moved = 0, in_place = 0;
            {
              py::gil_scoped_release nogil;
              out = p.run(v, w, &moved, &in_place);
            }
            if (!out) return py::none();
            return py::make_tuple(py::cast(*out), moved, in_place);
          },
          py::arg("inputs"), py::arg("writes") = std::vector<std::pair<int, int>>{})
      .def_property_readonly("runs", &CapturedProgram::runs);
  m.def("pending_state_ids", &pending_state_ids);
  m.def("capture",
        [](const std::vector<std::optional<at::Tensor>>& ins, const std::vector<at::Tensor>& outs,
           int64_t generation, const std::vector<uint64_t>& foreign, const std::string& reason) {
          std::vector<at::Tensor> in, inner;
          for (const auto& t : ins) in.push_back(t ? *t : at::Tensor());
          for (const auto& t : outs) inner.push_back(inner_of(t));
          std::string why;
          std::shared_ptr<CapturedProgram> p;
          {
            py::gil_scoped_release nogil;
            p = CapturedProgram::capture(in, inner, generation, foreign, reason, &why);
          }
          return py::make_tuple(p ? py::cast(p) : py::none(), why);
        });
  // ember.export (ember/export.py, src/export/program.h).
  m.def("export_parts", [](const std::shared_ptr<CapturedProgram>& p) {
    exporting::ExportedParts r = exporting::export_parts(*p);
    return py::make_tuple(r.program, r.ir, r.constants, r.schemas);
  });
  m.def(
      "export_compile",
      [](const std::string& ir, const std::string& program, const std::string& target, bool fast,
         bool vector_math) {
        exporting::KernelTarget t;
        t.name = target;
        t.fast = fast;
        t.vector_math = vector_math;
        auto exe = exporting::compile_program(ir, exporting::Program::Parse(program), t);
        return exporting::kernel_files(*exe);
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("export_cpu_features", &exporting::native_cpu_features);
  m.def(
      "_buffer_address",
      [](const at::Tensor& t) {
        // The address of the device buffer behind a tensor, without a Python handle on
        // it (one would keep the buffer referenced: tests of donation).
        auto in = inner_of(t);
        TORCH_CHECK(lazy_impl(in), "not an ember tensor");
        return reinterpret_cast<uintptr_t>(materialize(in).data_ptr());
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "data_of",
      [](const at::Tensor& t) {
        // The device buffer behind a tensor (a CPU tensor sharing its memory).
        auto in = inner_of(t);
        TORCH_CHECK(lazy_impl(in), "not an ember tensor");
        return materialize(in);
      },
      py::call_guard<py::gil_scoped_release>());

  // Storages of ember tensors (storage.h; the UntypedStorage methods in
  // ember/_storage.py call these).
  m.def("is_ember_storage", [](py::handle s) {
    return THPStorage_Check(s.ptr()) && is_ember_storage(THPStorage_Unpack(s.ptr()));
  });
  m.def("storage_data_ptr", [](py::handle s) {
    c10::Storage st = THPStorage_Unpack(s.ptr());
    py::gil_scoped_release nogil;
    return reinterpret_cast<uintptr_t>(storage_data(st));
  });
  m.def("tensor_data_ptr", [](const at::Tensor& t) {
    // Tensor.data_ptr() of an ember tensor: its storage's bytes at its offset.
    py::gil_scoped_release nogil;
    if (at::functionalization::impl::isFunctionalTensor(t)) at::functionalization::impl::sync(t);
    auto* p = static_cast<char*>(storage_data(t.storage()));
    return p ? reinterpret_cast<uintptr_t>(p + t.storage_offset() * t.element_size()) : 0;
  });
  m.def("storage_bytes", [](py::handle s) {
    c10::Storage st = THPStorage_Unpack(s.ptr());
    py::gil_scoped_release nogil;
    return storage_bytes(st);
  });
  m.def("resize_storage_bytes", [](py::handle s, size_t nbytes) {
    c10::Storage st = THPStorage_Unpack(s.ptr());
    py::gil_scoped_release nogil;
    resize_storage_bytes(st, nbytes);
  });
  m.def("storage_tensor", [](py::handle s) {
    c10::Storage st = THPStorage_Unpack(s.ptr());
    py::gil_scoped_release nogil;
    return storage_tensor(st);
  });
  m.def("write_storage_bytes", [](py::handle s, const at::Tensor& bytes) {
    c10::Storage st = THPStorage_Unpack(s.ptr());
    py::gil_scoped_release nogil;
    write_storage_bytes(st, bytes);
  });
}
