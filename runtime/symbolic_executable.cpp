// The Executable of a symbolic graph: one static-plan executable per bucket, compiled on first
// use through the runtime's cache, chosen per run from the input shapes.
#include "runtime/symbolic_executable.h"

#include "compiler/sizes.h"

#include <map>
#include <mutex>

namespace kiln::runtime {

namespace {

class SymbolicExecutable final : public Executable {
public:
  SymbolicExecutable(const ir::Graph& graph, CompileBucket compile, int device,
                      std::string arch, const compiler::CompileRequest& request,
                      std::string graph_hash)
      : m_compile(std::move(compile)) {
    describe_graph(graph, *this);
    m_device = device;
    m_arch = std::move(arch);
    m_on_cpu = m_arch.rfind("cpu:", 0) == 0;  // the CPU target's buckets take host pointers
    m_precision = std::string(ir::to_string(request.precision.graph_mode));
    m_fallbacks = request.fallbacks();
    m_graph_hash = std::move(graph_hash);
  }

  Status prepare(void*) override {
    return make_error("graph '", m_graph_name, "' has symbolic dims: prepare(values, stream) "
                      "names the sizes whose bucket to prepare");
  }

  Status prepare(const std::vector<int64_t>& values, void* stream) override {
    auto exe = bucket(values);
    if (!exe) return exe.error();
    return (*exe)->prepare(stream);
  }

  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             void* stream) override {
    if (Status s = check_tensor_count(inputs); !s) return s;
    std::vector<std::vector<int64_t>> shapes;
    for (const TensorRef& ref : inputs) shapes.push_back(ref.shape);
    auto values = m_graph->symbol_values(shapes);
    if (!values) return values.error();
    auto exe = bucket(*values);
    if (!exe) return exe.error();
    return (*exe)->run(inputs, outputs, stream);
  }

private:
  Status check_tensor_count(const std::vector<TensorRef>& inputs) const {
    if (inputs.size() == m_inputs.size()) return Status::success();
    return make_error("expected ", std::to_string(m_inputs.size()), " inputs, got ",
                      std::to_string(inputs.size()));
  }

  // The executable of the bucket holding `values`, compiled on first use.
  Expected<std::shared_ptr<Executable>> bucket(const std::vector<int64_t>& values) {
    if (values.size() != m_dims.size())
      return make_error("graph '", m_graph_name, "' has ", std::to_string(m_dims.size()),
                        " symbolic dims, got ", std::to_string(values.size()), " values");
    std::vector<compiler::DimRange> ranges;
    for (size_t i = 0; i < values.size(); ++i) {
      const ir::Symbol& symbol = m_graph->symbols()[i];
      if (values[i] < symbol.lo || values[i] > symbol.hi)
        return make_error(symbol.name, " = ", std::to_string(values[i]), " is outside its range ",
                          std::to_string(symbol.lo), "..", std::to_string(symbol.hi));
      ranges.push_back(compiler::bucket_of(values[i], symbol));
    }
    std::vector<std::pair<int64_t, int64_t>> key;
    for (const compiler::DimRange& r : ranges) key.emplace_back(r.lo, r.hi);
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard lock(m_mutex);
      auto& entry = m_buckets[key];
      if (!entry) entry = std::make_shared<Slot>();
      slot = entry;
    }
    // One compile per bucket; runs of other buckets go on meanwhile. The outcome, an error
    // included (a plan the bucket's sizes cannot launch), is kept for the executable's life.
    std::call_once(slot->once, [&] { slot->result = m_compile(ranges); });
    return slot->result;
  }

  struct Slot {
    std::once_flag once;
    Expected<std::shared_ptr<Executable>> result = Error{"not compiled"};
  };

  CompileBucket m_compile;
  std::mutex m_mutex;  // guards m_buckets only
  std::map<std::vector<std::pair<int64_t, int64_t>>, std::shared_ptr<Slot>> m_buckets;
};

}  // namespace

std::shared_ptr<Executable> make_symbolic_executable(const ir::Graph& graph,
                                                     CompileBucket compile, int device,
                                                     std::string arch,
                                                     const compiler::CompileRequest& request,
                                                     std::string graph_hash) {
  return std::make_shared<SymbolicExecutable>(graph, std::move(compile), device, std::move(arch),
                                              request, std::move(graph_hash));
}

}  // namespace kiln::runtime
