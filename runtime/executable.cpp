// Executable and its CUDA backend: argument checks, modules loaded per context, per-run
// temporaries, kernel launches.
#include "runtime/executable_impl.h"

#include "runtime/backend.h"

#include "compiler/artifact.h"
#include "compiler/cubin_report.h"
#include "compiler/sizes.h"
#include "compiler/tensor_map.h"
#include "ir/types.h"
#include "runtime/compatibility.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "runtime/pool.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace kiln::runtime {

namespace {

// A CUtensorMap as the driver wants it: 128 bytes aligned to 64.
struct alignas(64) TensorMapBytes {
  unsigned char bytes[128] = {};
};

// Encodes tensor map `spec` (checked) of the buffer at `address`, which holds `holds` bytes.
Status encode_tensor_map(const DriverApi& cu, const compiler::TensorMapSpec& spec, void* address,
                         uint64_t holds, TensorMapBytes& out) {
  if (uint64_t reach = compiler::tensor_map_extent(spec); reach > holds)
    return make_error("its tensor map reaches ", std::to_string(reach), " bytes into a buffer of ",
                      std::to_string(holds));
  CuResult r = cu.tensor_map_encode_tiled(
      out.bytes, static_cast<int>(spec.type), spec.rank, address, spec.dims.data(),
      spec.strides.data(), spec.box.data(), spec.element_strides.data(), /*interleave=*/0,
      static_cast<int>(spec.swizzle), static_cast<int>(spec.l2), /*oob_fill=*/0);
  if (r != 0) return driver_error(cu, "cuTensorMapEncodeTiled", r);
  return Status::success();
}

// The kernels of one executable loaded in one context incarnation.
struct LoadedProgram {
  CuContext context = nullptr;
  std::vector<CuModule> modules;
  std::vector<CuFunction> functions;
  CuMemPool pool = nullptr;  // kiln's pool for temporaries; null: the device has no pools
  int sm_count = 1;          // the device's multiprocessors: a persistent kernel's blocks
  // [kernel][param]: each tensor map's description, read back and checked at load (a symbolic
  // graph's at the bucket's upper bounds)
  std::vector<std::vector<compiler::TensorMapSpec>> maps;
};

// A failed launch whose module handles may have died with their context (destroyed, or a primary
// context reset): the program is loaded again and the run retried once.
bool stale_modules(CuResult r) {
  return r == k_error_invalid_handle || r == k_error_context_destroyed;
}

class CudaBackend final : public Backend {
public:
  CudaBackend(const Executable& exe, compiler::Artifact artifact)
      : Backend(exe), m_artifact(std::move(artifact)) {
    m_offsets = temporary_offsets(m_artifact.temporary_bytes, &m_workspace_bytes);
  }

  // In each context the kernels were loaded in: wait for work still running there (stream-ordered
  // frees of temporaries included), then unload. A context already gone took its modules along.
  ~CudaBackend() override {
    if (m_programs.empty()) return;
    auto api = load_driver();
    if (!api) return;
    RelaxedCapture relaxed(**api);
    for (auto& [id, program] : m_programs) {
      auto scope = ScopedContext::enter(**api, program->context);
      if (!scope || scope->id() != id) continue;
      (*api)->ctx_synchronize();
      for (CuModule module : program->modules) (*api)->module_unload(module);
    }
  }

  Status prepare(void* stream) override {
    auto api = load_driver();
    if (!api) return api.error();
    auto cu_stream = static_cast<CuStream>(stream);
    auto scope = ScopedContext::for_device(**api, exe().device(), cu_stream);
    if (!scope) return scope.error();
    auto program = loaded_program(**api, *scope, Loading::prepare);
    if (!program) return program.error();
    return Status::success();
  }

  Status prepare(const std::vector<int64_t>& values, void* stream) override {
    if (!values.empty()) return make_error("graph '", graph_name(), "' has no symbolic dims");
    return prepare(stream);
  }

  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             const std::vector<int64_t>& values, void* stream) override {
    // A symbolic graph's entry runs at the sizes the inputs give, inside its bucket.
    Sizes sizes;
    if (graph()) {
      auto at = sizes_of(values);
      if (!at) return at.error();
      sizes = std::move(*at);
    }
    if (Status s = check_alignment(exe().inputs(), inputs, "input"); !s) return s;
    if (Status s = check_alignment(exe().outputs(), outputs, "output"); !s) return s;
    auto api = load_driver();
    if (!api) return api.error();
    const DriverApi& cu = **api;
    auto cu_stream = static_cast<CuStream>(stream);
    auto scope = ScopedContext::for_device(cu, exe().device(), cu_stream);
    if (!scope) return scope.error();
    for (int attempt = 0;; ++attempt) {
      auto program = loaded_program(cu, *scope, attempt > 0 ? Loading::run_reloading
                                                             : Loading::run, cu_stream);
      if (!program) return program.error();
      CuResult first_launch = 0;
      Status s = launch_all(cu, **program, inputs, outputs, sizes, cu_stream, &first_launch);
      if (s || attempt > 0 || !stale_modules(first_launch)) return s;
      forget_program(cu, scope->id(), *program);
    }
  }

private:
  enum class Loading { prepare, run, run_reloading };

  // A symbolic graph's run: the dims' values (checked inside this entry's bucket) and the
  // temporaries' layout at them.
  struct Sizes {
    std::vector<int64_t> values;
    std::vector<uint64_t> offsets;
    uint64_t workspace_bytes = 0;
    std::vector<uint64_t> input_bytes, output_bytes, temporary_bytes;  // each buffer's, at values
  };

  // The bytes buffer `ref` holds in a run at `sizes` (a static graph's: the artifact's).
  uint64_t bytes_at(const compiler::BufferRef& ref, const Sizes& sizes) const {
    if (!graph()) return buffer_bytes(m_artifact, ref);
    const std::vector<uint64_t>& list = ref.role == compiler::BufferRole::input ? sizes.input_bytes
                                        : ref.role == compiler::BufferRole::output
                                            ? sizes.output_bytes
                                            : sizes.temporary_bytes;
    return ref.index < list.size() ? list[ref.index] : 0;
  }

  Expected<Sizes> sizes_of(const std::vector<int64_t>& values) const {
    Sizes sizes;
    sizes.values = values;
    for (size_t i = 0; i < sizes.values.size(); ++i) {
      const auto& range = m_artifact.bucket[i];
      if (sizes.values[i] < range[0] || sizes.values[i] > range[1])
        return make_error(exe().dims()[i].name, " = ", std::to_string(sizes.values[i]),
                          " is outside this entry's bucket [", std::to_string(range[0]), ", ",
                          std::to_string(range[1]), "]");
    }
    auto bytes = compiler::sizes_at(m_artifact.temporary_sizes, sizes.values);
    auto in = compiler::sizes_at(m_artifact.input_sizes, sizes.values);
    auto out = compiler::sizes_at(m_artifact.output_sizes, sizes.values);
    if (!bytes || !in || !out)
      return make_error("entry ", exe().key(), ": a buffer's size term is out of range");
    sizes.offsets = temporary_offsets(*bytes, &sizes.workspace_bytes);
    sizes.temporary_bytes = std::move(*bytes);
    sizes.input_bytes = std::move(*in);
    sizes.output_bytes = std::move(*out);
    return sizes;
  }

  // This executable's kernels in the context of `scope`, loaded on first use (checking first
  // that the driver and device can run them). A run on a stream being captured does not load:
  // it says to prepare() first. Loads in relaxed capture mode, so that another thread's capture
  // is not broken.
  Expected<std::shared_ptr<LoadedProgram>> loaded_program(const DriverApi& cu,
                                                          const ScopedContext& scope,
                                                          Loading why, CuStream stream = nullptr) {
    std::lock_guard lock(m_mutex);
    if (auto it = m_programs.find(scope.id()); it != m_programs.end()) return it->second;
    if (why != Loading::prepare) {
      if (Status s = refuse_during_capture(cu, stream, why == Loading::run_reloading); !s) {
        return s.error();
      }
    }
    if (Status s = check_loadable(cu, exe().device(), m_artifact); !s) return s.error();
    // A dead context's entry at this handle: its modules went with it.
    std::erase_if(m_programs, [&](const auto& entry) {
      return entry.second->context == scope.context();
    });
    RelaxedCapture relaxed(cu);
    auto program = std::make_shared<LoadedProgram>();
    program->context = scope.context();
    auto device = device_handle(cu, exe().device());
    if (!device) return device.error();
    int pools = 0;
    if (CuResult r = cu.device_get_attribute(&pools, k_attr_memory_pools, *device); r != 0) {
      return driver_error(cu, "cuDeviceGetAttribute (memory pools)", r);
    }
    if (CuResult r = cu.device_get_attribute(&program->sm_count, k_attr_sm_count, *device);
        r != 0 || program->sm_count < 1) {
      return r != 0 ? driver_error(cu, "cuDeviceGetAttribute (multiprocessors)", r)
                    : make_error("CUDA device ", std::to_string(exe().device()),
                                 " reports no multiprocessors");
    }
    if (pools) {
      auto pool = temporaries_pool(cu, exe().device());
      if (!pool) return pool.error();
      program->pool = *pool;
    }
    const std::vector<compiler::KernelArtifact>& kernels = m_artifact.kernels;
    program->maps.resize(kernels.size());
    for (size_t k = 0; k < kernels.size(); ++k)
      if (Status s = check_launchable(kernels[k], m_artifact, &program->maps[k]); !s)
        return s.error();
    std::vector<uint32_t> smem_allowed(kernels.size(), 0);  // per kernel that loaded its module
    // A kernel that runs an earlier kernel's binary (binary_of) uses its module and function.
    std::vector<size_t> owners = compiler::binary_owners(kernels);
    // Every cubin a whole CUDA ELF of the artifact's arch whose entry takes the parameters this
    // launcher passes, before the driver reads any (compiler/cubin_report.h says why).
    if (Status s = compiler::check_cubins(m_artifact); !s)
      return make_error("entry ", exe().key(), ": ", s.error().message);
    for (size_t i = 0; i < kernels.size(); ++i) {
      const compiler::KernelArtifact& kernel = kernels[i];
      CuModule module = nullptr;
      CuFunction function = nullptr;
      CuResult r = 0;
      size_t owner = owners[i];
      if (owner == i) {
        r = cu.module_load_data(&module, kernel.cubin.data());
        if (r == 0) r = cu.module_get_function(&function, module, kernel.entry.c_str());
      } else {
        function = program->functions[owner];
      }
      if (r == 0 && kernel.launch.dynamic_smem_bytes > smem_allowed[owner]) {
        r = cu.func_set_attribute(function, k_func_attr_max_dynamic_smem,
                                  static_cast<int>(kernel.launch.dynamic_smem_bytes));
        if (r == 0) smem_allowed[owner] = kernel.launch.dynamic_smem_bytes;
      }
      if (r != 0) {
        Error error = driver_error(cu, ("loading kernel " + kernel.name).c_str(), r);
        if (module) cu.module_unload(module);
        for (CuModule m : program->modules) cu.module_unload(m);
        return error;
      }
      if (module) program->modules.push_back(module);
      program->functions.push_back(function);
    }
    m_programs.emplace(scope.id(), program);
    return program;
  }

  // Refuses to load kernels for a run on a stream being captured (or on the legacy stream while
  // a blocking stream of its context is: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
  Status refuse_during_capture(const DriverApi& cu, CuStream stream, bool reloading) {
    int capturing = 0;
    CuResult r = cu.stream_is_capturing(stream, &capturing);
    if (r == k_error_capture_implicit) {
      return make_error("run() on the legacy default stream while a blocking stream of its "
                        "context is being captured: pass that stream, a created one, or "
                        "CU_STREAM_PER_THREAD");
    }
    if (r != 0) return driver_error(cu, "cuStreamIsCapturing", r);
    if (!capturing) return Status::success();
    if (reloading) {
      return make_error("the kernels prepare() loaded in this context are gone (the context was "
                        "reset); call Executable::prepare() again before capturing");
    }
    return make_error("run() on a stream being captured needs Executable::prepare() first: "
                      "loading kernels is not allowed during stream capture");
  }

  // Drops a program whose modules failed as stale; unloading them is best effort (in a context
  // that was reset they are gone already).
  void forget_program(const DriverApi& cu, unsigned long long id,
                      const std::shared_ptr<LoadedProgram>& program) {
    std::lock_guard lock(m_mutex);
    auto it = m_programs.find(id);
    if (it == m_programs.end() || it->second != program) return;
    RelaxedCapture relaxed(cu);
    for (CuModule module : program->modules) cu.module_unload(module);
    m_programs.erase(it);
  }

  // Temporaries for this run only, stream-ordered; then every kernel in plan order. Sets
  // `first_launch` to the first kernel's launch result when that is what failed.
  Status launch_all(const DriverApi& cu, const LoadedProgram& program,
                    const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
                    const Sizes& sizes, CuStream stream, CuResult* first_launch) {
    CuDevicePtr workspace = 0;
    uint64_t workspace_bytes = graph() ? sizes.workspace_bytes : m_workspace_bytes;
    const std::vector<uint64_t>& offsets = graph() ? sizes.offsets : m_offsets;
    if (workspace_bytes) {
      if (program.pool) {
        if (CuResult r = cu.mem_alloc_from_pool_async(&workspace, workspace_bytes,
                                                      program.pool, stream);
            r != 0) {
          return driver_error(cu, "cuMemAllocFromPoolAsync (temporaries)", r);
        }
      } else if (Status s = allocate_without_pools(cu, stream, workspace_bytes, &workspace); !s) {
        return s;
      }
    }
    std::vector<int> dim_values(sizes.values.begin(), sizes.values.end());
    std::vector<void*> in_pointers, out_pointers, temp_pointers;
    for (const TensorRef& ref : inputs) in_pointers.push_back(ref.data);
    for (const TensorRef& ref : outputs) out_pointers.push_back(ref.data);
    for (uint64_t offset : offsets)
      temp_pointers.push_back(reinterpret_cast<void*>(workspace + offset));
    Status launched = Status::success();
    // Every kernel's buffers bound and tensor maps encoded before the first launch, so that a
    // map the driver refuses stops the run before any kernel of it has run.
    const auto& kernels = m_artifact.kernels;
    std::vector<std::vector<void*>> bound(kernels.size());
    std::vector<std::vector<TensorMapBytes>> maps(kernels.size());
    for (size_t k = 0; k < kernels.size() && launched; ++k) {
      auto pointers = compiler::bind_buffers(kernels[k], in_pointers, out_pointers, temp_pointers);
      if (!pointers) {
        launched = make_error("entry ", exe().key(), ": ", pointers.error().message);
        break;
      }
      bound[k] = std::move(*pointers);
      for (size_t i = 0; i < kernels[k].params.size() && launched; ++i) {
        if (kernels[k].params[i].kind != compiler::ParamKind::tensor_map) continue;
        if (maps[k].empty()) maps[k].resize(kernels[k].params.size());
        // A static graph's map as checked at load; a symbolic graph's at this run's sizes, into
        // its buffer as sized at them.
        const compiler::KernelParam& p = kernels[k].params[i];
        const compiler::TensorMapSpec& description = program.maps[k][i];
        auto spec = p.map_terms.empty()
                        ? Expected<compiler::TensorMapSpec>(description)
                        : compiler::tensor_map_at(description, p.map_terms, sizes.values);
        Status s = spec ? encode_tensor_map(cu, *spec, bound[k][i], bytes_at(p.buffer, sizes),
                                            maps[k][i])
                        : Status(spec.error());
        if (!s)
          launched = make_error("kernel '", kernels[k].name, "' parameter ", std::to_string(i),
                                ": ", s.error().message);
      }
    }
    for (size_t k = 0; k < kernels.size() && launched; ++k) {
      const compiler::KernelArtifact& kernel = kernels[k];
      // Each parameter's value, by kind (a dim's symbol was checked against the graph's when
      // the executable was made, a tensor map's description when the kernels were loaded).
      std::vector<CuDevicePtr> pointers(kernel.params.size(), 0);
      std::vector<void*> args;
      for (size_t i = 0; i < kernel.params.size(); ++i) {
        const compiler::KernelParam& p = kernel.params[i];
        switch (p.kind) {
          case compiler::ParamKind::pointer:
            pointers[i] = reinterpret_cast<CuDevicePtr>(bound[k][i]);
            args.push_back(&pointers[i]);
            break;
          case compiler::ParamKind::tensor_map:
            args.push_back(maps[k][i].bytes);
            break;
          case compiler::ParamKind::dim:
            args.push_back(&dim_values[p.symbol]);
            break;
        }
      }
      auto launch = compiler::launch_at(kernel.launch, kernel.grid, sizes.values);
      if (!launch) {
        launched = make_error("entry ", exe().key(), ": kernel '", kernel.name,
                              "' has a grid term out of range");
        break;
      }
      // A persistent kernel loops over its work tiles: one block per multiprocessor at most.
      if (launch->persistent)
        launch->grid[0] = std::min(launch->grid[0], static_cast<uint32_t>(program.sm_count));
      const compiler::LaunchShape& l = *launch;
      CuResult r = cu.launch_kernel(program.functions[k], l.grid[0], l.grid[1], l.grid[2],
                                    l.block[0], l.block[1], l.block[2], l.dynamic_smem_bytes,
                                    stream, args.data(), nullptr);
      if (r != 0) {
        if (k == 0) *first_launch = r;
        launched = driver_error(cu, ("cuLaunchKernel (" + kernel.name + ")").c_str(), r);
      }
    }
    if (!workspace) return launched;
    if (program.pool) {
      if (CuResult r = cu.mem_free_async(workspace, stream); r != 0 && launched) {
        return driver_error(cu, "cuMemFreeAsync (temporaries)", r);
      }
      return launched;
    }
    // Without pools: the kernels must finish before the temporaries can be freed.
    CuResult synced = cu.stream_synchronize(stream);
    RelaxedCapture relaxed(cu);
    cu.mem_free(workspace);
    if (synced != 0 && launched) return driver_error(cu, "cuStreamSynchronize", synced);
    return launched;
  }

  // A device without stream-ordered memory pools: a synchronous allocation, which stream
  // capture does not allow.
  Status allocate_without_pools(const DriverApi& cu, CuStream stream, uint64_t bytes,
                                CuDevicePtr* workspace) {
    int capturing = 0;
    if (CuResult r = cu.stream_is_capturing(stream, &capturing); r != 0) {
      return driver_error(cu, "cuStreamIsCapturing", r);
    }
    if (capturing) {
      return make_error("CUDA device ", std::to_string(exe().device()), " has no stream-ordered ",
                        "memory pools, so run() cannot allocate its ",
                        std::to_string(bytes), " bytes of temporaries during stream "
                        "capture");
    }
    RelaxedCapture relaxed(cu);
    if (CuResult r = cu.mem_alloc(workspace, bytes); r != 0) {
      return driver_error(cu, "cuMemAlloc (temporaries)", r);
    }
    return Status::success();
  }

  compiler::Artifact m_artifact;
  std::vector<uint64_t> m_offsets;
  uint64_t m_workspace_bytes = 0;
  std::mutex m_mutex;
  // By context id (cuCtxGetId), never by handle: a new context may reuse a dead one's address.
  std::map<unsigned long long, std::shared_ptr<LoadedProgram>> m_programs;
};

}  // namespace

std::vector<uint64_t> temporary_offsets(const std::vector<uint64_t>& temporary_bytes,
                                        uint64_t* total) {
  std::vector<uint64_t> offsets;
  uint64_t at = 0;
  for (uint64_t bytes : temporary_bytes) {
    offsets.push_back(at);
    at += (bytes + 255) / 256 * 256;
  }
  *total = at;
  return offsets;
}

Status check_tensors(const std::vector<TensorSpec>& specs, const std::vector<TensorRef>& refs,
                     const char* role) {
  if (refs.size() != specs.size()) {
    return make_error("expected ", std::to_string(specs.size()), " ", role, "s, got ",
                      std::to_string(refs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    const TensorRef& ref = refs[i];
    std::string what = std::string(role) + " '" + spec.name + "'";
    if (!ref.data) return make_error(what, " is a null pointer");
    if (ref.dtype != spec.dtype) {
      return make_error(what, " has dtype ", std::string(ir::to_string(ref.dtype)),
                        ", expected ", std::string(ir::to_string(spec.dtype)));
    }
    if (ref.shape != spec.shape) {
      return make_error(what, " has shape ", ir::to_string_unchecked(ref.shape), ", expected ",
                        ir::to_string_unchecked(spec.shape));
    }
  }
  return Status::success();
}

Status check_alignment(const std::vector<TensorSpec>& specs, const std::vector<TensorRef>& refs,
                       const char* role) {
  for (size_t i = 0; i < specs.size() && i < refs.size(); ++i) {
    auto address = reinterpret_cast<uintptr_t>(refs[i].data);
    if (address % k_tensor_alignment == 0) continue;
    char hex[32];
    std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(address));
    return make_error(role, " '", specs[i].name, "' at ", hex, " is not 16-byte aligned: kiln's "
                      "kernels access tensors 16 bytes at a time; pass the start of an allocation "
                      "or copy the view to an aligned buffer");
  }
  return Status::success();
}

void describe_graph(const ir::Graph& graph, Executable& exe) {
  ExecutableAccess::describe(graph, exe);
}

std::vector<TensorSpec> tensor_specs(const ir::Graph& graph, const std::vector<ir::NodeId>& ids) {
  std::vector<TensorSpec> specs;
  for (ir::NodeId id : ids) {
    const ir::Node& node = graph.node(id);
    TensorSpec spec{node.name, node.type.dtype, node.type.shape.dims(), {}};
    for (const ir::SymbolicDim& d : node.type.shape.symbols()) spec.dims.push_back(d.name);
    specs.push_back(std::move(spec));
  }
  return specs;
}

const std::optional<ir::Graph>& Backend::graph() const { return ExecutableAccess::graph(m_exe); }

const std::string& Backend::graph_name() const { return ExecutableAccess::graph_name(m_exe); }

Expected<std::shared_ptr<Executable>> make_executable(const ir::Graph& graph,
                                                      CompileResult result, int device) {
  if (Status s = check_artifact_fits(result.artifact, graph); !s) return s.error();
  std::shared_ptr<Executable> exe = ExecutableAccess::create();
  ExecutableAccess::describe_compile(result, result.artifact, *exe);
  ExecutableAccess::set_device(*exe, device);
  describe_graph(graph, *exe);
  ExecutableAccess::attach(*exe, std::make_unique<CudaBackend>(*exe, std::move(result.artifact)));
  return exe;
}

}  // namespace kiln::runtime

namespace kiln {

namespace {

Expected<std::vector<TensorSpec>> specs_at(const std::optional<ir::Graph>& graph,
                                           const std::vector<TensorSpec>& specs,
                                           const std::vector<int64_t>& values, bool inputs) {
  if (!graph) {
    if (!values.empty()) return make_error("the graph has no symbolic dims; it takes no sizes");
    return specs;
  }
  auto bound = graph->bind(values);
  if (!bound) return bound.error();
  return runtime::tensor_specs(*bound, inputs ? bound->inputs() : bound->outputs());
}

// The bytes of device tensor `ref` for RuntimeOptions::check_indices on the GPU, read once the
// work queued on `stream` before the run is done (the stream is synchronised first). Refused on
// a stream being captured, which cannot wait.
Expected<std::vector<unsigned char>> read_device_ids(int device, const TensorRef& ref,
                                                     size_t bytes, void* stream) {
  auto api = runtime::load_driver();
  if (!api) return api.error();
  const runtime::DriverApi& cu = **api;
  auto cu_stream = static_cast<runtime::CuStream>(stream);
  auto scope = runtime::ScopedContext::for_device(cu, device, cu_stream);
  if (!scope) return scope.error();
  int capturing = 0;
  if (runtime::CuResult r = cu.stream_is_capturing(cu_stream, &capturing); r != 0 || capturing) {
    return make_error("check_indices reads embedding ids from device memory "
                      "before the run, which a stream being captured cannot do; turn it off "
                      "for a captured run");
  }
  if (runtime::CuResult r = cu.stream_synchronize(cu_stream); r != 0)
    return runtime::driver_error(cu, "cuStreamSynchronize", r);
  std::vector<unsigned char> host(bytes);
  if (bytes == 0) return host;
  if (runtime::CuResult r = cu.memcpy_dtoh(host.data(), reinterpret_cast<runtime::CuDevicePtr>(ref.data), bytes); r != 0)
    return runtime::driver_error(cu, "cuMemcpyDtoH", r);
  return host;
}

}  // namespace

Executable::Executable() = default;
Executable::~Executable() = default;

Status Executable::prepare(void* stream) { return m_backend->prepare(stream); }

Status Executable::prepare(const std::vector<int64_t>& values, void* stream) {
  return m_backend->prepare(values, stream);
}

Expected<std::vector<int64_t>> Executable::check_run(const std::vector<TensorRef>& inputs,
                                                     const std::vector<TensorRef>& outputs,
                                                     void* stream) {
  // The arguments are checked here once, whichever backend runs them: against the specs, or
  // for a symbolic graph against the specs at the symbols' values the input shapes give.
  std::vector<int64_t> values;
  if (m_graph) {
    if (inputs.size() != m_inputs.size())
      return runtime::check_tensors(m_inputs, inputs, "input").error();
    std::vector<std::vector<int64_t>> shapes;
    for (const TensorRef& ref : inputs) shapes.push_back(ref.shape);
    auto found = m_graph->symbol_values(shapes);
    if (!found) return found.error();
    values = std::move(*found);
    std::lock_guard<std::mutex> lock(m_bound_mutex);
    if (!m_bound || m_bound->values != values) {
      auto bound = m_graph->bind(values);  // once for both specs
      if (!bound) return bound.error();
      m_bound = BoundSpecs{values, runtime::tensor_specs(*bound, bound->inputs()),
                           runtime::tensor_specs(*bound, bound->outputs())};
    }
    if (Status s = runtime::check_tensors(m_bound->inputs, inputs, "input"); !s) return s.error();
    if (Status s = runtime::check_tensors(m_bound->outputs, outputs, "output"); !s) return s.error();
  } else {
    if (Status s = runtime::check_tensors(m_inputs, inputs, "input"); !s) return s.error();
    if (Status s = runtime::check_tensors(m_outputs, outputs, "output"); !s) return s.error();
  }
  if (m_check_indices) {
    std::vector<bool> checked(inputs.size(), false);  // an input two embeddings read: once
    for (const IndexCheck& c : m_index_checks) {
      if (checked[c.input]) continue;
      checked[c.input] = true;
      const TensorRef& ids = inputs[c.input];
      if (m_on_cpu) {  // host memory: the ids are read in place
        if (Status s = check_indices(c.input, ids.data, ids.shape); !s) return s.error();
        continue;
      }
      size_t bytes = runtime::tensor_bytes(m_inputs[c.input].dtype, ids.shape);
      auto host = read_device_ids(m_device, ids, bytes, stream);
      if (!host) return host.error();
      if (Status s = check_indices(c.input, host->data(), ids.shape); !s) return s.error();
    }
  }
  return values;
}

Status Executable::run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
                       void* stream) {
  auto values = check_run(inputs, outputs, stream);
  if (!values) return values.error();
  return m_backend->run(inputs, outputs, *values, stream);
}

Status Executable::run_timed(const std::vector<TensorRef>& inputs,
                             const std::vector<TensorRef>& outputs,
                             std::vector<KernelTime>& kernels) {
  kernels.clear();
  auto values = check_run(inputs, outputs, nullptr);
  if (!values) return values.error();
  return m_backend->run_timed(inputs, outputs, *values, kernels);
}

Status Executable::check_indices(size_t input, const void* ids,
                                 const std::vector<int64_t>& shape) const {
  const TensorSpec& spec = m_inputs[input];
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  for (const IndexCheck& c : m_index_checks) {
    if (c.input != input) continue;
    for (int64_t i = 0; i < count; ++i) {
      int64_t id = 0;
      if (spec.dtype == DType::i32) {
        int32_t v;
        std::memcpy(&v, static_cast<const unsigned char*>(ids) + 4 * i, 4);
        id = v;
      } else {
        std::memcpy(&id, static_cast<const unsigned char*>(ids) + 8 * i, 8);
      }
      if (id >= 0 && id < c.rows) continue;
      return make_error(ir::embedding_id_error(spec.name, id, i, shape, c.table, c.rows),
                        " (checked because check_indices is on)");
    }
  }
  return Status::success();
}

Expected<std::vector<TensorSpec>> Executable::inputs_at(const std::vector<int64_t>& values) const {
  return specs_at(m_graph, m_inputs, values, true);
}

Expected<std::vector<TensorSpec>> Executable::outputs_at(const std::vector<int64_t>& values) const {
  return specs_at(m_graph, m_outputs, values, false);
}

Expected<std::vector<int64_t>> Executable::dims_of(
    const std::vector<std::vector<int64_t>>& input_shapes) const {
  if (!m_graph) return std::vector<int64_t>{};
  return m_graph->symbol_values(input_shapes);
}

}  // namespace kiln
