// The backend of a symbolic graph: one static-plan executable per bucket, compiled on first use
// through the runtime's cache, chosen per run from the input shapes.
#include "runtime/symbolic_executable.h"

#include "compiler/sizes.h"

#include <map>
#include <mutex>

namespace kiln::runtime {

namespace {

class SymbolicBackend final : public Backend {
public:
  SymbolicBackend(const Executable& exe, CompileBucket compile)
      : Backend(exe), m_compile(std::move(compile)) {}

  Status prepare(void*) override {
    return make_error("graph '", graph_name(), "' has symbolic dims: prepare(values, stream) "
                      "names the sizes whose bucket to prepare");
  }

  Status prepare(const std::vector<int64_t>& values, void* stream) override {
    auto runner = bucket(values);
    if (!runner) return runner.error();
    return (*runner)->prepare(stream);
  }

  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             const std::vector<int64_t>& values, void* stream) override {
    auto runner = bucket(values);
    if (!runner) return runner.error();
    // The bucket's executable serves the same graph: the arguments are checked already.
    return ExecutableAccess::backend(**runner).run(inputs, outputs, values, stream);
  }

  Status run_timed(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
                   const std::vector<int64_t>& values, std::vector<KernelTime>& kernels) override {
    auto runner = bucket(values);
    if (!runner) return runner.error();
    return ExecutableAccess::backend(**runner).run_timed(inputs, outputs, values, kernels);
  }

private:
  // The executable of the bucket holding `values`, compiled on first use.
  Expected<std::shared_ptr<Executable>> bucket(const std::vector<int64_t>& values) {
    if (values.size() != exe().dims().size())
      return make_error("graph '", graph_name(), "' has ", std::to_string(exe().dims().size()),
                        " symbolic dims, got ", std::to_string(values.size()), " values");
    std::vector<compiler::DimRange> ranges;
    for (size_t i = 0; i < values.size(); ++i) {
      const ir::Symbol& symbol = graph()->symbols()[i];
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
                                                     std::string arch, bool on_host,
                                                     const compiler::CompileRequest& request,
                                                     std::string graph_hash) {
  std::shared_ptr<Executable> exe = ExecutableAccess::create();
  describe_graph(graph, *exe);
  ExecutableAccess::set_device(*exe, device);
  ExecutableAccess::describe_symbolic(*exe, std::move(arch), on_host,
                                      std::string(ir::to_string(request.precision.graph_mode)),
                                      request.fallbacks(), std::move(graph_hash));
  ExecutableAccess::attach(*exe, std::make_unique<SymbolicBackend>(*exe, std::move(compile)));
  return exe;
}

}  // namespace kiln::runtime
