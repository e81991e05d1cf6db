// Executable: argument checks, modules loaded per context, per-run temporaries, kernel launches.
#include "runtime/executable_impl.h"

#include "ir/types.h"
#include "runtime/compatibility.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "runtime/pool.h"

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace kiln::runtime {

namespace {

// The kernels of one executable loaded in one context incarnation.
struct LoadedProgram {
  CuContext context = nullptr;
  std::vector<CuModule> modules;
  std::vector<CuFunction> functions;
  CuMemPool pool = nullptr;  // kiln's pool for temporaries; null: the device has no pools
};

// A failed launch whose module handles may have died with their context (destroyed, or a primary
// context reset): the program is loaded again and the run retried once.
bool stale_modules(CuResult r) {
  return r == k_error_invalid_handle || r == k_error_context_destroyed;
}

class ExecutableImpl final : public Executable {
public:
  ExecutableImpl(const ir::Graph& graph, CompileResult result, int device)
      : m_artifact(std::move(result.artifact)) {
    m_cache_hit = result.hit;
    m_compile_ms = result.compile_ms;
    m_lookup_us = result.lookup_us;
    m_key = result.key;
    m_graph_hash = result.graph_hash;
    m_arch = m_artifact.arch;
    m_precision = m_artifact.precision;
    m_fallbacks = m_artifact.fallbacks;
    m_kernel_count = m_artifact.kernels.size();
    m_device = device;
    auto spec = [&](ir::NodeId id) {
      const ir::Node& node = graph.node(id);
      return TensorSpec{node.name, node.type.dtype, node.type.shape.dims()};
    };
    for (ir::NodeId id : graph.inputs()) m_inputs.push_back(spec(id));
    for (ir::NodeId id : graph.outputs()) m_outputs.push_back(spec(id));
    m_offsets = temporary_offsets(m_artifact, &m_workspace_bytes);
  }

  // In each context the kernels were loaded in: wait for work still running there (stream-ordered
  // frees of temporaries included), then unload. A context already gone took its modules along.
  ~ExecutableImpl() override {
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
    auto scope = ScopedContext::for_device(**api, m_device, cu_stream);
    if (!scope) return scope.error();
    auto program = loaded_program(**api, *scope, Loading::prepare);
    if (!program) return program.error();
    return Status::success();
  }

  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             void* stream) override {
    if (Status s = check_tensors(m_inputs, inputs, "input"); !s) return s;
    if (Status s = check_tensors(m_outputs, outputs, "output"); !s) return s;
    if (Status s = check_alignment(m_inputs, inputs, "input"); !s) return s;
    if (Status s = check_alignment(m_outputs, outputs, "output"); !s) return s;
    auto api = load_driver();
    if (!api) return api.error();
    const DriverApi& cu = **api;
    auto cu_stream = static_cast<CuStream>(stream);
    auto scope = ScopedContext::for_device(cu, m_device, cu_stream);
    if (!scope) return scope.error();
    for (int attempt = 0;; ++attempt) {
      auto program = loaded_program(cu, *scope, attempt > 0 ? Loading::run_reloading
                                                             : Loading::run, cu_stream);
      if (!program) return program.error();
      CuResult first_launch = 0;
      Status s = launch_all(cu, **program, inputs, outputs, cu_stream, &first_launch);
      if (s || attempt > 0 || !stale_modules(first_launch)) return s;
      forget_program(cu, scope->id(), *program);
    }
  }

private:
  enum class Loading { prepare, run, run_reloading };

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
    if (Status s = check_loadable(cu, m_device, m_artifact); !s) return s.error();
    // A dead context's entry at this handle: its modules went with it.
    std::erase_if(m_programs, [&](const auto& entry) {
      return entry.second->context == scope.context();
    });
    RelaxedCapture relaxed(cu);
    auto program = std::make_shared<LoadedProgram>();
    program->context = scope.context();
    auto device = device_handle(cu, m_device);
    if (!device) return device.error();
    int pools = 0;
    if (CuResult r = cu.device_get_attribute(&pools, k_attr_memory_pools, *device); r != 0) {
      return driver_error(cu, "cuDeviceGetAttribute (memory pools)", r);
    }
    if (pools) {
      auto pool = temporaries_pool(cu, m_device);
      if (!pool) return pool.error();
      program->pool = *pool;
    }
    for (const compiler::KernelArtifact& kernel : m_artifact.kernels) {
      CuModule module = nullptr;
      CuFunction function = nullptr;
      CuResult r = cu.module_load_data(&module, kernel.cubin.data());
      if (r == 0) r = cu.module_get_function(&function, module, kernel.entry.c_str());
      if (r == 0 && kernel.launch.dynamic_smem_bytes > 0) {
        r = cu.func_set_attribute(function, k_func_attr_max_dynamic_smem,
                                  static_cast<int>(kernel.launch.dynamic_smem_bytes));
      }
      if (r != 0) {
        Error error = driver_error(cu, ("loading kernel " + kernel.name).c_str(), r);
        if (module) cu.module_unload(module);
        for (CuModule m : program->modules) cu.module_unload(m);
        return error;
      }
      program->modules.push_back(module);
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
                    CuStream stream, CuResult* first_launch) {
    CuDevicePtr workspace = 0;
    if (m_workspace_bytes) {
      if (program.pool) {
        if (CuResult r = cu.mem_alloc_from_pool_async(&workspace, m_workspace_bytes,
                                                      program.pool, stream);
            r != 0) {
          return driver_error(cu, "cuMemAllocFromPoolAsync (temporaries)", r);
        }
      } else if (Status s = allocate_without_pools(cu, stream, &workspace); !s) {
        return s;
      }
    }
    Status launched = Status::success();
    for (size_t k = 0; k < m_artifact.kernels.size() && launched; ++k) {
      const compiler::KernelArtifact& kernel = m_artifact.kernels[k];
      std::vector<CuDevicePtr> pointers;
      for (const compiler::KernelParam& param : kernel.params) {
        const compiler::BufferRef& b = param.buffer;
        switch (b.role) {
          case compiler::BufferRole::input:
            pointers.push_back(reinterpret_cast<CuDevicePtr>(inputs[b.index].data));
            break;
          case compiler::BufferRole::output:
            pointers.push_back(reinterpret_cast<CuDevicePtr>(outputs[b.index].data));
            break;
          case compiler::BufferRole::temporary:
            pointers.push_back(workspace + m_offsets[b.index]);
            break;
        }
      }
      std::vector<void*> args;
      for (CuDevicePtr& p : pointers) args.push_back(&p);
      const compiler::LaunchShape& l = kernel.launch;
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
  Status allocate_without_pools(const DriverApi& cu, CuStream stream, CuDevicePtr* workspace) {
    int capturing = 0;
    if (CuResult r = cu.stream_is_capturing(stream, &capturing); r != 0) {
      return driver_error(cu, "cuStreamIsCapturing", r);
    }
    if (capturing) {
      return make_error("CUDA device ", std::to_string(m_device), " has no stream-ordered ",
                        "memory pools, so run() cannot allocate its ",
                        std::to_string(m_workspace_bytes), " bytes of temporaries during stream "
                        "capture");
    }
    RelaxedCapture relaxed(cu);
    if (CuResult r = cu.mem_alloc(workspace, m_workspace_bytes); r != 0) {
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

std::vector<uint64_t> temporary_offsets(const compiler::Artifact& artifact, uint64_t* total) {
  std::vector<uint64_t> offsets;
  uint64_t at = 0;
  for (uint64_t bytes : artifact.temporary_bytes) {
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

std::shared_ptr<Executable> make_executable(const ir::Graph& graph, CompileResult result,
                                            int device) {
  return std::make_shared<ExecutableImpl>(graph, std::move(result), device);
}

}  // namespace kiln::runtime
