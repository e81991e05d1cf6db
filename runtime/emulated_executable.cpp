// The emulate target's backend: the artifact's kernel text built for the host once, then each
// run on guarded host copies of the TensorRefs' host memory.
#include "runtime/emulated_executable.h"

#include "compiler/options.h"
#include "emulation/module.h"
#include "emulation/program.h"
#include "runtime/executable_impl.h"

#include <cstring>

namespace kiln::runtime {

namespace {

size_t ref_bytes(const TensorRef& ref) { return tensor_bytes(ref.dtype, ref.shape); }

class EmulatedBackend final : public Backend {
public:
  EmulatedBackend(const Executable& exe, std::unique_ptr<emulation::Module> module,
                  emulation::LaunchPlan plan, emulation::Schedule schedule)
      : Backend(exe), m_module(std::move(module)), m_plan(std::move(plan)),
        m_schedule(std::move(schedule)) {}

  Status prepare(void*) override { return Status::success(); }
  Status prepare(const std::vector<int64_t>&, void*) override { return Status::success(); }

  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             const std::vector<int64_t>& values, void*) override {
    std::vector<std::span<const unsigned char>> in;
    for (const TensorRef& ref : inputs)
      in.emplace_back(static_cast<const unsigned char*>(ref.data), ref_bytes(ref));
    auto out = emulation::run_launch_plan(*m_module, m_plan, in, values, m_schedule);
    if (!out) return out.error();
    if (out->size() != outputs.size())
      return make_error("emulation: the plan has ", std::to_string(out->size()), " outputs, the graph ",
                        std::to_string(outputs.size()));
    for (size_t i = 0; i < outputs.size(); ++i) {
      size_t bytes = ref_bytes(outputs[i]);
      if ((*out)[i].size() < bytes)
        return make_error("emulation: the plan holds no buffer for output #", std::to_string(i));
      if (bytes) std::memcpy(outputs[i].data, (*out)[i].data(), bytes);
    }
    return Status::success();
  }

private:
  std::unique_ptr<emulation::Module> m_module;
  emulation::LaunchPlan m_plan;
  emulation::Schedule m_schedule;
};

}  // namespace

Expected<std::shared_ptr<Executable>> make_emulated_executable(const ir::Graph& graph,
                                                               CompileResult result,
                                                               emulation::Schedule schedule) {
  const compiler::Artifact& artifact = result.artifact;
  if (!artifact.is_emulated())
    return make_error("entry ", result.key, " is for ", artifact.arch, ", not an emulate target");
  if (Status s = check_artifact_fits(artifact, graph); !s) return s.error();
  emulation::LaunchPlan plan = emulation::launch_plan(artifact);
  emulation::ModuleOptions options;
  options.sm = artifact.target.sm;
  options.arch_specific = artifact.target.arch_specific();
  options.entries = plan.entries();
  auto module = emulation::compile_module(artifact.source, options);
  if (!module) return module.error();
  std::shared_ptr<Executable> exe = ExecutableAccess::create();
  describe_graph(graph, *exe);
  ExecutableAccess::describe_compile(result, artifact, *exe);
  ExecutableAccess::set_on_cpu(*exe);
  ExecutableAccess::attach(*exe, std::make_unique<EmulatedBackend>(*exe, std::move(*module),
                                                                   std::move(plan),
                                                                   std::move(schedule)));
  return exe;
}

}  // namespace kiln::runtime
