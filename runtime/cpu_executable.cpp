// The CPU target's backend: TensorRefs checked against the specs, then the CpuProgram on their
// host pointers.
#include "runtime/cpu_executable.h"

#include "runtime/cpu_program.h"
#include "runtime/executable_impl.h"

namespace kiln::runtime {

namespace {

class CpuBackend final : public Backend {
public:
  CpuBackend(const Executable& exe, std::unique_ptr<CpuProgram> program)
      : Backend(exe), m_program(std::move(program)) {}

  Status prepare(void*) override { return Status::success(); }
  Status prepare(const std::vector<int64_t>&, void*) override { return Status::success(); }

  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             const std::vector<int64_t>& values, void*) override {
    return run_program(inputs, outputs, values, nullptr);
  }

  Status run_timed(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
                   const std::vector<int64_t>& values, std::vector<KernelTime>& kernels) override {
    std::vector<double> us;
    Status s = run_program(inputs, outputs, values, &us);
    const auto& artifact_kernels = m_program->artifact().kernels;
    for (size_t i = 0; i < us.size() && i < artifact_kernels.size(); ++i)
      kernels.push_back({artifact_kernels[i].name, us[i]});
    return s;
  }

private:
  // The program on the tensors' host pointers; with `kernel_us`, each kernel timed.
  Status run_program(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
                     const std::vector<int64_t>& values, std::vector<double>* kernel_us) {
    std::vector<const void*> in;
    std::vector<void*> out;
    for (const TensorRef& ref : inputs) in.push_back(ref.data);
    for (const TensorRef& ref : outputs) out.push_back(ref.data);
    return m_program->run(in, out, values, 0, kernel_us);
  }

  std::unique_ptr<CpuProgram> m_program;
};

}  // namespace

Expected<std::shared_ptr<Executable>> make_cpu_executable(const ir::Graph& graph,
                                                          CompileResult result) {
  if (Status s = check_artifact_fits(result.artifact, graph); !s) return s.error();
  auto program = CpuProgram::load(std::move(result.artifact));
  if (!program) return program.error();
  std::shared_ptr<Executable> exe = ExecutableAccess::create();
  describe_graph(graph, *exe);
  ExecutableAccess::describe_compile(result, (*program)->artifact(), *exe);
  ExecutableAccess::set_on_cpu(*exe);
  ExecutableAccess::attach(*exe, std::make_unique<CpuBackend>(*exe, std::move(*program)));
  return exe;
}

}  // namespace kiln::runtime
