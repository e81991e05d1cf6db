// kiln._kiln: the Python extension over kiln/kiln.h. Graphs, runtimes and executables; arrays
// cross as DLPack tensors (nanobind ndarray, no copy); the GIL is released while kiln compiles
// and runs. The classes in kiln/__init__.py wrap these and own the array conventions.
#include "kiln/kiln.h"

#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace {

// Raises kiln.<kind> (kiln/_errors.py) with kiln's own message.
[[noreturn]] void raise(const char* kind, const std::string& message) {
  nb::object cls = nb::module_::import_("kiln._errors").attr(kind);
  PyErr_SetObject(cls.ptr(), nb::str(message.c_str(), message.size()).ptr());
  throw nb::python_error();
}

// (name, dtype, shape, dims) of each spec; dims holds a symbolic dim's name, else None.
using SpecTuple =
    std::tuple<std::string, std::string, std::vector<int64_t>, std::vector<std::optional<std::string>>>;

SpecTuple spec_tuple(const std::string& name, kiln::DType dtype, const std::vector<int64_t>& shape,
                     const std::vector<std::string>& dims) {
  std::vector<std::optional<std::string>> names(shape.size());
  for (size_t i = 0; i < dims.size() && i < names.size(); ++i)
    if (!dims[i].empty()) names[i] = dims[i];
  return {name, std::string(kiln::ir::to_string(dtype)), shape, names};
}

std::vector<SpecTuple> spec_tuples(const std::vector<kiln::TensorSpec>& specs) {
  std::vector<SpecTuple> out;
  for (const kiln::TensorSpec& s : specs) out.push_back(spec_tuple(s.name, s.dtype, s.shape, s.dims));
  return out;
}

std::vector<SpecTuple> node_specs(const kiln::ir::Graph& graph,
                                  const std::vector<kiln::ir::NodeId>& ids) {
  std::vector<SpecTuple> out;
  for (kiln::ir::NodeId id : ids) {
    const kiln::ir::Node& node = graph.node(id);
    std::vector<std::string> dims;
    for (const kiln::ir::SymbolicDim& d : node.type.shape.symbols()) dims.push_back(d.name);
    out.push_back(spec_tuple(node.name, node.type.dtype, node.type.shape.dims(), dims));
  }
  return out;
}

struct PyGraph {
  kiln::ir::Graph graph;
};

PyGraph parse(const std::string& text, const std::string& file) {
  auto graph = kiln::ir::parse_graph(text, file);
  if (!graph) raise("GraphError", graph.error().message);
  return PyGraph{std::move(*graph)};
}

// The DLPack dtype of each kiln dtype.
bool same_dtype(kiln::DType dtype, nb::dlpack::dtype d) {
  using Code = nb::dlpack::dtype_code;
  auto is = [&](Code code, int bits) {
    return d.code == static_cast<uint8_t>(code) && d.bits == bits && d.lanes == 1;
  };
  switch (dtype) {
    case kiln::DType::f32: return is(Code::Float, 32);
    case kiln::DType::f16: return is(Code::Float, 16);
    case kiln::DType::bf16: return is(Code::Bfloat, 16);
    case kiln::DType::i32: return is(Code::Int, 32);
    case kiln::DType::i64: return is(Code::Int, 64);
    case kiln::DType::boolean: return is(Code::Bool, 8) || is(Code::UInt, 8);
  }
  return false;
}

// Inputs are read only; outputs must be writable (nanobind refuses a read-only array there).
using Array = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// Whether `exe` takes host memory: the CPU target, and the emulated CUDA kernels.
bool on_host(const kiln::Executable& exe) {
  return exe.on_cpu() || exe.arch().rfind("emulate", 0) == 0;
}

class PyExecutable {
public:
  explicit PyExecutable(std::shared_ptr<kiln::Executable> exe) : m_exe(std::move(exe)) {}

  const kiln::Executable& exe() const { return *m_exe; }

  // The dims' values that inputs of `shapes` give (empty for a static graph).
  std::vector<int64_t> dim_values(const std::vector<std::vector<int64_t>>& shapes) const {
    auto values = m_exe->dims_of(shapes);
    if (!values) raise("RuntimeError", values.error().message);
    return *values;
  }

  // The outputs' specs for inputs of `shapes`.
  std::vector<SpecTuple> outputs_for(const std::vector<std::vector<int64_t>>& shapes) const {
    if (m_exe->dims().empty()) return spec_tuples(m_exe->outputs());
    auto specs = m_exe->outputs_at(dim_values(shapes));
    if (!specs) raise("RuntimeError", specs.error().message);
    return spec_tuples(*specs);
  }

  void prepare(const std::vector<int64_t>& values, uintptr_t stream) {
    kiln::Status status;
    {
      nb::gil_scoped_release unlocked;
      status = m_exe->dims().empty() ? m_exe->prepare(reinterpret_cast<void*>(stream))
                                     : m_exe->prepare(values, reinterpret_cast<void*>(stream));
    }
    if (!status) raise("RuntimeError", status.error().message);
  }

  // Runs with inputs and outputs the caller made: C-contiguous arrays on this executable's
  // device (host memory for the CPU and emulate targets).
  void run(const std::vector<Array>& inputs, const std::vector<OutArray>& outputs,
           uintptr_t stream) {
    std::vector<kiln::TensorRef> in, out;
    refs(inputs, "input", m_exe->inputs(), in);
    refs(outputs, "output", m_exe->outputs(), out);
    kiln::Status status;
    {
      nb::gil_scoped_release unlocked;
      status = m_exe->run(in, out, reinterpret_cast<void*>(stream));
    }
    if (!status) raise("RuntimeError", status.error().message);
  }

private:
  template <typename A>
  void refs(const std::vector<A>& arrays, const char* role,
            const std::vector<kiln::TensorSpec>& specs, std::vector<kiln::TensorRef>& out) const {
    if (arrays.size() != specs.size())
      raise("RuntimeError", "the graph takes " + std::to_string(specs.size()) + " " + role +
                                "s, got " + std::to_string(arrays.size()));
    for (size_t i = 0; i < arrays.size(); ++i) {
      const A& a = arrays[i];
      const std::string what = std::string(role) + " '" + specs[i].name + "'";
      bool host = a.device_type() == nb::device::cpu::value;
      bool cuda = a.device_type() == nb::device::cuda::value;
      bool host_memory = on_host(*m_exe);
      if (host_memory ? !host : !cuda || a.device_id() != m_exe->device())
        raise("RuntimeError", what + " is on the wrong device: this executable runs on " +
                                  (host_memory ? std::string("the host (CPU arrays)")
                                           : "CUDA device " + std::to_string(m_exe->device())));
      if (!same_dtype(specs[i].dtype, a.dtype()))
        raise("RuntimeError", what + " has the wrong dtype: expected " +
                                  std::string(kiln::ir::to_string(specs[i].dtype)));
      kiln::TensorRef ref{const_cast<void*>(a.data()), specs[i].dtype, {}};
      int64_t expect = 1;
      for (size_t d = a.ndim(); d-- > 0;) {
        if (a.shape(d) != 1 && a.stride(d) != expect)
          raise("RuntimeError", what + " is not C-contiguous");
        expect *= static_cast<int64_t>(a.shape(d));
      }
      for (size_t d = 0; d < a.ndim(); ++d) ref.shape.push_back(static_cast<int64_t>(a.shape(d)));
      out.push_back(std::move(ref));
    }
  }

  std::shared_ptr<kiln::Executable> m_exe;
};

kiln::FallbackPolicy fallback_policy(const std::string& text) {
  if (text == "warn") return kiln::FallbackPolicy::warn;
  if (text == "refuse") return kiln::FallbackPolicy::refuse;
  if (text == "allow") return kiln::FallbackPolicy::allow;
  throw nb::value_error(("fallbacks='" + text + "': expected 'warn', 'refuse' or 'allow'").c_str());
}

class PyRuntime {
public:
  PyRuntime(const std::string& target, const std::string& precision,
            std::optional<std::string> cache_dir, std::optional<std::string> remote,
            const std::string& fallbacks, int device, bool allow_fallback, bool check_indices,
            bool use_cache) {
    kiln::RuntimeOptions options;
    options.target = target;
    auto mode = kiln::ir::parse_precision(precision);
    if (!mode)
      throw nb::value_error(("precision='" + precision +
                             "': expected 'highest', 'high', 'tf32x3', 'medium' or 'auto'")
                                .c_str());
    options.precision = *mode;
    if (cache_dir) options.cache_dir = *cache_dir;
    options.use_cache = use_cache;
    options.remote_cache = remote;
    options.fallbacks = fallback_policy(fallbacks);
    options.device = device;
    options.allow_fallback = allow_fallback;
    options.check_indices = check_indices;
    kiln::Expected<std::unique_ptr<kiln::Runtime>> runtime = kiln::Error{""};
    {
      nb::gil_scoped_release unlocked;
      runtime = kiln::Runtime::create(std::move(options));
    }
    if (!runtime) {
      // An unusable remote-cache secret is the cache's error; the rest (target, arch, device)
      // are the runtime's.
      const std::string& why = runtime.error().message;
      bool cache = why.rfind("KILN_REMOTE_KEY", 0) == 0 || why.rfind("the remote cache", 0) == 0;
      raise(cache ? "CacheError" : "RuntimeError", why);
    }
    m_runtime = std::move(*runtime);
  }

  std::string arch() const { return m_runtime->arch(); }

  std::shared_ptr<PyExecutable> compile(const PyGraph& graph) {
    kiln::Expected<std::shared_ptr<kiln::Executable>> exe = kiln::Error{""};
    {
      nb::gil_scoped_release unlocked;
      exe = m_runtime->compile(graph.graph);
    }
    if (!exe) raise("CompileError", exe.error().message);
    return std::make_shared<PyExecutable>(std::move(*exe));
  }

private:
  std::unique_ptr<kiln::Runtime> m_runtime;
};

}  // namespace

NB_MODULE(_kiln, m) {
  m.doc() = "kiln's extension: graphs, runtimes and executables (see the kiln package)";
  // Executables held by module-level objects (kiln.torch.compiled, a traceback) are still alive
  // when the interpreter exits; that is not a leak worth a report.
  nb::set_leak_warnings(false);

  nb::class_<PyGraph>(m, "_Graph")
      .def_static("parse", &parse, nb::arg("text"), nb::arg("file"))
      .def_prop_ro("name", [](const PyGraph& g) { return g.graph.name(); })
      .def_prop_ro("text", [](const PyGraph& g) { return kiln::ir::print_graph(g.graph); })
      .def_prop_ro("hash", [](const PyGraph& g) { return kiln::ir::graph_hash(g.graph).hex(); })
      .def_prop_ro("inputs", [](const PyGraph& g) { return node_specs(g.graph, g.graph.inputs()); })
      .def_prop_ro("outputs",
                   [](const PyGraph& g) { return node_specs(g.graph, g.graph.outputs()); })
      .def_prop_ro("dims", [](const PyGraph& g) {
        std::vector<std::tuple<std::string, int64_t, int64_t>> dims;
        for (const kiln::ir::Symbol& s : g.graph.symbols()) dims.emplace_back(s.name, s.lo, s.hi);
        return dims;
      });

  nb::class_<PyExecutable>(m, "_Executable")
      .def_prop_ro("inputs", [](const PyExecutable& e) { return spec_tuples(e.exe().inputs()); })
      .def_prop_ro("outputs", [](const PyExecutable& e) { return spec_tuples(e.exe().outputs()); })
      .def_prop_ro("dims", [](const PyExecutable& e) {
        std::vector<std::tuple<std::string, int64_t, int64_t>> dims;
        for (const kiln::DimSpec& d : e.exe().dims()) dims.emplace_back(d.name, d.lo, d.hi);
        return dims;
      })
      .def_prop_ro("key", [](const PyExecutable& e) { return e.exe().key(); })
      .def_prop_ro("graph_hash", [](const PyExecutable& e) { return e.exe().graph_hash(); })
      .def_prop_ro("cache_hit", [](const PyExecutable& e) { return e.exe().cache_hit(); })
      .def_prop_ro("cache_tier", [](const PyExecutable& e) { return e.exe().cache_tier(); })
      .def_prop_ro("compile_ms", [](const PyExecutable& e) { return e.exe().compile_ms(); })
      .def_prop_ro("lookup_us", [](const PyExecutable& e) { return e.exe().lookup_us(); })
      .def_prop_ro("arch", [](const PyExecutable& e) { return e.exe().arch(); })
      .def_prop_ro("precision", [](const PyExecutable& e) { return e.exe().precision(); })
      .def_prop_ro("fallbacks", [](const PyExecutable& e) { return e.exe().fallbacks(); })
      .def_prop_ro("kernel_count", [](const PyExecutable& e) { return e.exe().kernel_count(); })
      .def_prop_ro("device", [](const PyExecutable& e) { return e.exe().device(); })
      .def_prop_ro("on_host", [](const PyExecutable& e) {
        return on_host(e.exe());
      })
      .def("dim_values", &PyExecutable::dim_values, nb::arg("shapes"))
      .def("outputs_for", &PyExecutable::outputs_for, nb::arg("shapes"))
      .def("prepare", &PyExecutable::prepare, nb::arg("values"), nb::arg("stream"))
      .def("run", &PyExecutable::run, nb::arg("inputs"), nb::arg("outputs"), nb::arg("stream"));

  nb::class_<PyRuntime>(m, "_Runtime")
      .def(nb::init<const std::string&, const std::string&, std::optional<std::string>,
                    std::optional<std::string>, const std::string&, int, bool, bool, bool>(),
           nb::arg("target"), nb::arg("precision"), nb::arg("cache_dir").none(),
           nb::arg("remote").none(), nb::arg("fallbacks"), nb::arg("device"),
           nb::arg("allow_fallback"), nb::arg("check_indices"), nb::arg("use_cache"))
      .def_prop_ro("arch", &PyRuntime::arch)
      .def("compile", &PyRuntime::compile, nb::arg("graph"));

  m.def("gpu_status", [] {
    kiln::Status status = kiln::gpu_status();
    return status ? std::string() : status.error().message;
  });
}
