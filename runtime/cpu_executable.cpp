// The CPU target's backend: TensorRefs checked against the specs, then the CpuProgram on their
// host pointers.
#include "runtime/cpu_executable.h"

#include "runtime/cpu_program.h"
#include "runtime/executable_impl.h"

namespace kiln::runtime {

namespace {

class CpuBackend final : public Backend {
public:
  CpuBackend(const Executable& exe, const ir::Graph& graph, std::unique_ptr<CpuProgram> program)
      : Backend(exe), m_program(std::move(program)), m_symbolic(graph.symbolic()),
        m_graph_copy(graph) {}

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
    auto in_specs = exe().inputs_at(values);
    if (!in_specs) return in_specs.error();
    auto out_specs = exe().outputs_at(values);
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

// What the artifact says of its buffers and work, against the graph it claims to run: only a
// damaged or foreign entry fails here.
Status check_cpu_artifact(const compiler::Artifact& a, const ir::Graph& graph) {
  auto bad = [&](const char* what) {
    return make_error("entry ", a.arch, " of graph '", graph.name(), "': ", what,
                      " do not match the graph");
  };
  size_t symbols = graph.symbols().size();
  if (a.bucket.size() != symbols) return bad("the bucket's dims");
  if (a.input_bytes.size() != graph.inputs().size() ||
      a.output_bytes.size() != graph.outputs().size())
    return bad("the inputs and outputs");
  if (symbols == 0) {
    for (size_t i = 0; i < a.input_bytes.size(); ++i)
      if (a.input_bytes[i] != static_cast<uint64_t>(graph.node(graph.inputs()[i]).type.bytes()))
        return bad("the input sizes");
    for (size_t i = 0; i < a.output_bytes.size(); ++i)
      if (a.output_bytes[i] != static_cast<uint64_t>(graph.node(graph.outputs()[i]).type.bytes()))
        return bad("the output sizes");
  } else if (a.input_sizes.size() != a.input_bytes.size() ||
             a.output_sizes.size() != a.output_bytes.size() ||
             a.temporary_sizes.size() != a.temporary_bytes.size()) {
    return bad("the buffers' size terms");
  }
  auto in_range = [&](const std::vector<compiler::SizeTerm>& terms) {
    for (const compiler::SizeTerm& t : terms)
      for (uint32_t s : t.symbols)
        if (s >= symbols) return false;
    return true;
  };
  for (const auto* terms : {&a.input_sizes, &a.output_sizes, &a.temporary_sizes})
    if (!in_range(*terms)) return bad("the buffers' size terms");
  for (const compiler::KernelArtifact& k : a.kernels)
    if (!in_range(k.items)) return bad("a kernel's work items");
  return Status::success();
}

}  // namespace

Expected<std::shared_ptr<Executable>> make_cpu_executable(const ir::Graph& graph,
                                                          CompileResult result) {
  if (Status s = check_cpu_artifact(result.artifact, graph); !s) return s.error();
  auto program = CpuProgram::load(std::move(result.artifact));
  if (!program) return program.error();
  std::shared_ptr<Executable> exe = ExecutableAccess::create();
  describe_graph(graph, *exe);
  ExecutableAccess::describe_compile(result, (*program)->artifact(), *exe);
  ExecutableAccess::set_on_cpu(*exe);
  ExecutableAccess::attach(*exe, std::make_unique<CpuBackend>(*exe, graph, std::move(*program)));
  return exe;
}

}  // namespace kiln::runtime
