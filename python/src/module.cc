// anvil._anvil: the C++ side of the Python module. Sessions, numpy arrays in
// and out, the GIL released while a run computes, and anvil::Error raised as
// one Python exception class per kind. python/anvil/__init__.py builds the
// onnxruntime-shaped API on top.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "anvil/cpu.h"
#include "anvil/error.h"
#include "anvil/session.h"
#include "arrays.h"

namespace anvil::python {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorKind::kInvalidArgument, message); }

// A str from bytes a model file gave (invalid UTF-8 replaced, never an error).
py::str text_of(const std::string& s) {
  PyObject* text = PyUnicode_DecodeUTF8(s.data(), static_cast<py::ssize_t>(s.size()), "replace");
  if (!text) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

py::object dim_of(const ValueInfo& info, size_t d) {
  if (info.shape[d] >= 0) return py::int_(info.shape[d]);
  if (d < info.dim_names.size() && !info.dim_names[d].empty()) return text_of(info.dim_names[d]);
  return py::none();
}

// (name, element type, kind, shape): shape is None when the rank is unknown,
// symbolic dimensions are their names (or None when they have none).
py::tuple describe(const ValueInfo& info) {
  py::object shape = py::none();
  if (info.rank_known) {
    py::list dims;
    for (size_t d = 0; d < info.shape.size(); ++d) dims.append(dim_of(info, d));
    shape = dims;
  }
  return py::make_tuple(text_of(info.name), dtype_name(info.dtype), value_kind_name(info.kind), shape);
}

py::dict profile_to_python(const RunProfile& run) {
  py::list nodes;
  for (const NodeProfile& n : run.nodes) {
    py::dict d;
    d["node"] = text_of(n.node);
    d["op"] = n.op;
    d["impl"] = n.impl;
    d["layout"] = n.layout;
    d["output_shape"] = n.output_shape;
    d["start_us"] = n.start_us;
    d["duration_us"] = n.duration_us;
    nodes.append(d);
  }
  py::dict out;
  out["total_us"] = run.total_us;
  out["nodes"] = nodes;
  return out;
}

// What an asynchronous run keeps for its callback. The Python objects are
// dropped under the GIL, on whichever thread finishes the run.
struct AsyncCall {
  py::function callback;
  std::vector<py::object> keep;  // the input arrays the run reads in place
  std::vector<int> selected;
};

class PySession {
 public:
  PySession(py::object model, int threads, int opt_level, const std::string& mode, int streams, int plan_cache,
            bool tune, const std::string& tune_cache) {
    SessionOptions options;
    options.num_threads = threads;
    options.tune = tune;
    options.tune_cache = tune_cache;
    options.optimization_level = opt_level;
    options.plan_cache_size = plan_cache;
    options.streams = streams;
    if (mode == "throughput")
      options.mode = ExecutionMode::kThroughput;
    else if (mode != "latency")
      invalid("execution mode must be 'latency' or 'throughput', got '" + mode + "'");
    if (opt_level < 0 || opt_level > 3) invalid("graph optimization level must be 0..3, got " + std::to_string(opt_level));
    if (py::isinstance<py::bytes>(model) || py::isinstance<py::bytearray>(model) ||
        py::isinstance<py::memoryview>(model)) {
      std::string bytes = py::module_::import("builtins").attr("bytes")(model).cast<std::string>();
      session_ = std::make_unique<Session>(load_bytes(std::move(bytes), options));
    } else if (py::isinstance<py::str>(model) || py::hasattr(model, "__fspath__")) {
      std::string path = py::module_::import("os").attr("fsencode")(model).cast<std::string>();
      py::gil_scoped_release nogil;
      session_ = std::make_unique<Session>(Session::from_file(path, options));
    } else {
      invalid("a model must be a file path or the model's bytes, got " +
              std::string(py::str(py::type::of(model).attr("__name__"))));
    }
  }

  ~PySession() {
    if (Session::on_stream_thread()) {
      // The last reference went inside a run_async callback, on one of this
      // session's streams: its destructor would wait for this very thread.
      std::thread([s = std::move(session_)]() mutable { s.reset(); }).detach();
      return;
    }
    // The streams may be waiting for the GIL to call back into Python.
    py::gil_scoped_release nogil;
    session_.reset();
  }

  // Waits (without the GIL) until every run_async request has finished.
  void wait_idle() {
    py::gil_scoped_release nogil;
    session_->wait_idle();
  }

  py::list inputs() const { return describe_all(session_->inputs()); }
  py::list outputs() const { return describe_all(session_->outputs()); }
  int streams() const { return session_->streams(); }
  int threads_per_stream() const { return session_->threads_per_stream(); }

  py::list run(py::handle feed, py::handle output_indices, bool profile) {
    std::vector<py::object> keep;
    std::map<std::string, Tensor> inputs = convert_feed(feed, keep);
    std::vector<int> selected = select_outputs(output_indices);
    std::vector<Tensor> outputs;
    RunProfile run_profile;
    {
      py::gil_scoped_release nogil;
      outputs = session_->run(inputs, profile ? &run_profile : nullptr);
    }
    if (profile) {
      std::lock_guard<std::mutex> lock(profiles_mutex_);
      profiles_.push_back(std::move(run_profile));
    }
    return pick(std::move(outputs), selected);
  }

  // `callback(outputs, error)`: a list of outputs and None, or None and the exception.
  void run_async(py::handle feed, py::handle output_indices, py::function callback) {
    auto call = std::make_shared<AsyncCall>();
    call->callback = std::move(callback);
    std::map<std::string, Tensor> inputs = convert_feed(feed, call->keep);
    call->selected = select_outputs(output_indices);
    session_->run_async(inputs, [call](std::vector<Tensor> outputs, std::exception_ptr error) {
      py::gil_scoped_acquire gil;
      try {
        py::object results = py::none();
        if (!error) {
          try {
            results = pick(std::move(outputs), call->selected);
          } catch (...) {  // e.g. an output numpy has no type for: the callback gets that error
            error = std::current_exception();
          }
        }
        if (error) {
          try {
            std::rethrow_exception(error);
          } catch (py::error_already_set& e) {
            e.restore();
          } catch (...) {
            translate_current_exception();
          }
          py::error_already_set raised;  // fetches the exception just set
          call->callback(py::none(), raised.value());
        } else {
          call->callback(results, py::none());
        }
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("anvil run_async callback");
      } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        PyErr_WriteUnraisable(call->callback.ptr());
      }
      call->callback = py::function();
      call->keep.clear();
    });
  }

  // The per-node profiles recorded since the last call, oldest first.
  py::list take_profiles() {
    std::vector<RunProfile> runs;
    {
      std::lock_guard<std::mutex> lock(profiles_mutex_);
      runs.swap(profiles_);
    }
    py::list out;
    for (const RunProfile& r : runs) out.append(profile_to_python(r));
    return out;
  }

  static void translate_current_exception();

 private:
  static Session load_bytes(std::string bytes, const SessionOptions& options) {
    py::gil_scoped_release nogil;
    return Session::from_bytes(bytes, options);
  }

  static py::list describe_all(const std::vector<ValueInfo>& infos) {
    py::list out;
    for (const ValueInfo& i : infos) out.append(describe(i));
    return out;
  }

  std::map<std::string, Tensor> convert_feed(py::handle feed, std::vector<py::object>& keep) const {
    if (!py::isinstance<py::dict>(feed))
      invalid("the inputs must be a dict of input name to numpy array, got " +
              std::string(py::str(py::type::of(feed).attr("__name__"))));
    std::map<std::string, Tensor> inputs;
    for (auto item : py::reinterpret_borrow<py::dict>(feed)) {
      if (!py::isinstance<py::str>(item.first)) invalid("input names must be strings, got " + std::string(py::repr(item.first)));
      const std::string name = item.first.cast<std::string>();
      ValueInfo info;  // an unknown name is reported by the session, with the model's input names
      info.name = name;
      for (const ValueInfo& i : session_->inputs())
        if (i.name == name) info = i;
      inputs[name] = tensor_from_python(info, item.second, keep);
    }
    return inputs;
  }

  std::vector<int> select_outputs(py::handle indices) const {
    std::vector<int> selected;
    const int count = static_cast<int>(session_->outputs().size());
    if (indices.is_none()) {
      for (int i = 0; i < count; ++i) selected.push_back(i);
      return selected;
    }
    for (py::handle h : indices) {
      const int i = h.cast<int>();
      if (i < 0 || i >= count) invalid("output index " + std::to_string(i) + " out of range");
      selected.push_back(i);
    }
    return selected;
  }

  static py::list pick(std::vector<Tensor> outputs, const std::vector<int>& selected) {
    py::list out;
    for (int i : selected) {
      // The same output asked for twice shares its bytes: the second one is copied.
      Tensor t = outputs[static_cast<size_t>(i)];
      bool again = std::count(selected.begin(), selected.end(), i) > 1;
      if (!again) outputs[static_cast<size_t>(i)] = Tensor();
      out.append(tensor_to_python(again ? t.clone() : std::move(t)));
    }
    return out;
  }

  std::unique_ptr<Session> session_;
  std::mutex profiles_mutex_;
  std::vector<RunProfile> profiles_;
};

py::object g_error, g_invalid_model, g_unsupported, g_invalid_argument, g_out_of_memory, g_internal;

// Sets the Python error for the C++ exception being handled.
void PySession::translate_current_exception() {
  try {
    throw;
  } catch (const Error& e) {
    py::object type = g_internal;
    switch (e.kind()) {
      case ErrorKind::kInvalidModel: type = g_invalid_model; break;
      case ErrorKind::kUnsupported: type = g_unsupported; break;
      case ErrorKind::kInvalidArgument: type = g_invalid_argument; break;
      case ErrorKind::kOutOfMemory: type = g_out_of_memory; break;
      case ErrorKind::kInternal: break;
    }
    PyErr_SetString(type.ptr(), e.what());
  } catch (const std::bad_alloc&) {
    PyErr_SetString(g_out_of_memory.ptr(), "out of memory");
  } catch (const std::exception& e) {
    PyErr_SetString(g_internal.ptr(), e.what());
  } catch (...) {
    PyErr_SetString(g_internal.ptr(), "unknown C++ exception");
  }
}

py::object new_exception(py::module_& m, const char* name, py::object bases, const char* doc) {
  const std::string qualified = std::string("anvil.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  py::object t = py::reinterpret_steal<py::object>(type);
  m.attr(name) = t;
  return t;
}

py::dict cpu_summary() {
  const CpuInfo& cpu = cpu_info();
  py::dict d;
  d["vendor"] = cpu.vendor;
  d["model_name"] = cpu.model_name;
  d["logical_cores"] = cpu.logical_cores;
  d["physical_cores"] = cpu.physical_cores;
  d["isa"] = cpu.isa_list();
  d["dnnl_isa"] = dnnl_isa_name();
  d["dnnl_version"] = dnnl_version();
  return d;
}

}  // namespace

PYBIND11_MODULE(_anvil, m) {
  m.doc() = "Anvil's C++ core (use the anvil package)";
  m.attr("__version__") = ANVIL_VERSION;
  py::object runtime_error = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  g_error = new_exception(m, "Error", runtime_error, "Base class of Anvil's errors.");
  g_invalid_model = new_exception(m, "InvalidModel", g_error, "The model file is malformed or inconsistent.");
  g_unsupported = new_exception(m, "Unsupported", g_error, "Valid ONNX that Anvil does not implement.");
  g_invalid_argument = new_exception(
      m, "InvalidArgument", py::make_tuple(g_error, py::reinterpret_borrow<py::object>(PyExc_ValueError)),
      "A bad argument: input names, shapes, dtypes, files, options.");
  g_out_of_memory = new_exception(
      m, "OutOfMemory", py::make_tuple(g_error, py::reinterpret_borrow<py::object>(PyExc_MemoryError)),
      "Memory ran out.");
  g_internal = new_exception(m, "InternalError", g_error, "A bug in Anvil.");

  // Local: applies to this module's functions only (a global translator would turn
  // other pybind11 modules' exceptions, e.g. onnx's, into ours).
  py::register_local_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;  // a Python exception passing through: pybind11 restores it
    } catch (const py::cast_error& e) {
      // Our own conversions of the caller's objects (e.g. a str that is not valid UTF-8).
      PyErr_SetString(g_invalid_argument.ptr(), (std::string("cannot convert an argument: ") + e.what()).c_str());
    } catch (const py::builtin_exception&) {
      throw;
    } catch (...) {
      PySession::translate_current_exception();
    }
  });

  py::class_<PySession>(m, "_Session")
      .def(py::init<py::object, int, int, const std::string&, int, int, bool, const std::string&>(), py::arg("model"),
           py::arg("threads"), py::arg("opt_level"), py::arg("mode"), py::arg("streams"), py::arg("plan_cache"),
           py::arg("tune"), py::arg("tune_cache"))
      .def("inputs", &PySession::inputs)
      .def("outputs", &PySession::outputs)
      .def("run", &PySession::run, py::arg("feed"), py::arg("output_indices"), py::arg("profile"))
      .def("run_async", &PySession::run_async, py::arg("feed"), py::arg("output_indices"), py::arg("callback"))
      .def("take_profiles", &PySession::take_profiles)
      .def("wait_idle", &PySession::wait_idle)
      .def_property_readonly("streams", &PySession::streams)
      .def_property_readonly("threads_per_stream", &PySession::threads_per_stream);
  m.def("cpu_info", &cpu_summary, "The CPU and what Anvil uses of it (as `anvil info` prints).");
}

}  // namespace anvil::python
