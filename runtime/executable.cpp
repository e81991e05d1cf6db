// Executable: argument checks, per-context module loading, workspace, kernel launches.
#include "runtime/executable_impl.h"

#include "ir/types.h"
#include "runtime/driver.h"

#include <map>
#include <mutex>
#include <utility>

namespace kiln::runtime {

namespace {

struct LoadedProgram {
  std::vector<CuModule> modules;
  std::vector<CuFunction> functions;
  std::map<CuStream, CuDevicePtr> workspaces;  // lookup only; one workspace per stream
};

class ExecutableImpl final : public Executable {
public:
  ExecutableImpl(const ir::Graph& graph, CompileResult result, int device)
      : m_artifact(std::move(result.artifact)), m_device(device) {
    m_cache_hit = result.hit;
    m_compile_ms = result.compile_ms;
    m_lookup_us = result.lookup_us;
    m_key = result.key;
    m_graph_hash = result.graph_hash;
    m_arch = m_artifact.arch;
    m_precision = m_artifact.precision;
    m_fallbacks = m_artifact.fallbacks;
    m_kernel_count = m_artifact.kernels.size();
    auto spec = [&](ir::NodeId id) {
      const ir::Node& node = graph.node(id);
      return TensorSpec{node.name, node.type.dtype, node.type.shape.dims()};
    };
    for (ir::NodeId id : graph.inputs()) m_inputs.push_back(spec(id));
    for (ir::NodeId id : graph.outputs()) m_outputs.push_back(spec(id));
    m_offsets = temporary_offsets(m_artifact, &m_workspace_bytes);
  }

  ~ExecutableImpl() override {
    if (m_programs.empty()) return;
    auto api = load_driver();
    if (!api) return;
    // Best effort: a context torn down before us has already released these.
    for (auto& [context, program] : m_programs) {
      for (auto& [stream, workspace] : program.workspaces) (*api)->mem_free(workspace);
      for (CuModule module : program.modules) (*api)->module_unload(module);
    }
  }

  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             void* stream) override {
    if (Status s = check_tensors(m_inputs, inputs, "input"); !s) return s;
    if (Status s = check_tensors(m_outputs, outputs, "output"); !s) return s;
    auto api = load_driver();
    if (!api) return api.error();
    const DriverApi& cu = **api;
    std::lock_guard lock(m_mutex);
    auto program = loaded_program(cu);
    if (!program) return program.error();
    auto cu_stream = static_cast<CuStream>(stream);
    CuDevicePtr workspace = 0;
    if (m_workspace_bytes) {
      auto [it, fresh] = (*program)->workspaces.try_emplace(cu_stream, 0);
      if (fresh) {
        if (CuResult r = cu.mem_alloc(&it->second, m_workspace_bytes); r != 0) {
          (*program)->workspaces.erase(it);
          return driver_error(cu, "cuMemAlloc (workspace)", r);
        }
      }
      workspace = it->second;
    }
    for (size_t k = 0; k < m_artifact.kernels.size(); ++k) {
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
      CuResult r = cu.launch_kernel((*program)->functions[k], l.grid[0], l.grid[1], l.grid[2],
                                    l.block[0], l.block[1], l.block[2], l.dynamic_smem_bytes,
                                    cu_stream, args.data(), nullptr);
      if (r != 0) return driver_error(cu, ("cuLaunchKernel (" + kernel.name + ")").c_str(), r);
    }
    return Status::success();
  }

private:
  // The modules of this executable in the calling thread's current context (the device's
  // primary context when none is current), loaded on first use.
  Expected<LoadedProgram*> loaded_program(const DriverApi& cu) {
    auto current = current_context(cu, m_device);
    if (!current) return current.error();
    CuContext context = *current;
    auto [it, fresh] = m_programs.try_emplace(context);
    if (!fresh) return &it->second;
    LoadedProgram& program = it->second;
    for (const compiler::KernelArtifact& kernel : m_artifact.kernels) {
      CuModule module = nullptr;
      CuFunction function = nullptr;
      CuResult r = cu.module_load_data(&module, kernel.cubin.data());
      if (r == 0) r = cu.module_get_function(&function, module, kernel.entry.c_str());
      if (r == 0 && kernel.launch.dynamic_smem_bytes > 48 * 1024) {
        r = cu.func_set_attribute(function, k_func_attr_max_dynamic_smem,
                                  static_cast<int>(kernel.launch.dynamic_smem_bytes));
      }
      if (r != 0) {
        Error error = driver_error(cu, ("loading kernel " + kernel.name).c_str(), r);
        if (module) cu.module_unload(module);
        for (CuModule m : program.modules) cu.module_unload(m);
        m_programs.erase(it);
        return error;
      }
      program.modules.push_back(module);
      program.functions.push_back(function);
    }
    return &program;
  }

  compiler::Artifact m_artifact;
  int m_device;
  std::vector<uint64_t> m_offsets;
  uint64_t m_workspace_bytes = 0;
  std::mutex m_mutex;
  std::map<CuContext, LoadedProgram> m_programs;  // lookup only, never printed
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

std::shared_ptr<Executable> make_executable(const ir::Graph& graph, CompileResult result,
                                            int device) {
  return std::make_shared<ExecutableImpl>(graph, std::move(result), device);
}

}  // namespace kiln::runtime
