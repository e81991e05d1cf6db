// CpuExecutable: TensorRefs checked against the specs, then the CpuProgram on their host pointers.
#include "runtime/cpu_executable.h"

#include "runtime/cpu_program.h"
#include "runtime/executable_impl.h"

namespace kiln::runtime {

namespace {

class CpuExecutable final : public Executable {
public:
  CpuExecutable(const ir::Graph& graph, CompileResult& result,
                std::unique_ptr<CpuProgram> program)
      : m_program(std::move(program)), m_symbolic(graph.symbolic()), m_graph_copy(graph) {
    describe_graph(graph, *this);
    ExecutableAccess::describe_compile(result, m_program->artifact(), *this);
    m_on_cpu = true;
  }

  Status prepare(void*) override { return Status::success(); }
  Status prepare(const std::vector<int64_t>&, void*) override { return Status::success(); }

  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             void*) override {
    std::vector<int64_t> values;
    if (m_symbolic) {
      std::vector<std::vector<int64_t>> shapes;
      for (const TensorRef& ref : inputs) shapes.push_back(ref.shape);
      auto found = m_graph_copy.symbol_values(shapes);
      if (!found) return found.error();
      values = std::move(*found);
    }
    auto in_specs = inputs_at(values);
    if (!in_specs) return in_specs.error();
    auto out_specs = outputs_at(values);
    if (!out_specs) return out_specs.error();
    if (Status s = check_tensors(*in_specs, inputs, "input"); !s) return s;
    if (Status s = check_tensors(*out_specs, outputs, "output"); !s) return s;
    std::vector<const void*> in;
    std::vector<void*> out;
    for (const TensorRef& ref : inputs) in.push_back(ref.data);
    for (const TensorRef& ref : outputs) out.push_back(ref.data);
    return m_program->run(in, out, values);
  }

private:
  std::unique_ptr<CpuProgram> m_program;
  bool m_symbolic = false;
  ir::Graph m_graph_copy;
};

}  // namespace

Expected<std::shared_ptr<Executable>> make_cpu_executable(const ir::Graph& graph,
                                                          CompileResult result) {
  auto program = CpuProgram::load(std::move(result.artifact));
  if (!program) return program.error();
  return std::shared_ptr<Executable>(new CpuExecutable(graph, result, std::move(*program)));
}

}  // namespace kiln::runtime
