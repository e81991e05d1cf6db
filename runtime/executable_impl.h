// What the runtime's backends share: the CUDA executable's maker, tensor checks, and access to
// Executable's description.
#pragma once

#include "kiln/kiln.h"
#include "runtime/backend.h"
#include "runtime/compile_service.h"

#include <memory>

namespace kiln::runtime {

// Wraps a compile result; modules are loaded once per CUDA context (by context id), by prepare()
// or the first run in that context.
// Fails when a symbolic graph's artifact does not fit the graph (bucket, size terms, grids and
// dim parameters per kernel), which only a damaged or foreign entry can do.
Expected<std::shared_ptr<Executable>> make_executable(const ir::Graph& graph,
                                                      CompileResult result, int device);

// The byte offset of each temporary in the workspace (each 256-byte aligned) and the total.
std::vector<uint64_t> temporary_offsets(const std::vector<uint64_t>& temporary_bytes,
                                        uint64_t* total);

// The specs of `ids` (inputs or outputs) of `graph`, a symbolic dim named in TensorSpec::dims.
std::vector<TensorSpec> tensor_specs(const ir::Graph& graph, const std::vector<ir::NodeId>& ids);
// Fills what an Executable says about its graph: input and output specs, and for a symbolic
// graph its dims and the graph itself (for the specs at given sizes).
void describe_graph(const ir::Graph& graph, Executable& exe);

// Gives the runtime's backends access to Executable's private description.
struct ExecutableAccess {
  static std::shared_ptr<Executable> create() { return std::shared_ptr<Executable>(new Executable()); }
  // Hands `exe` the backend that runs it (made with `exe`, which it reads).
  static void attach(Executable& exe, std::unique_ptr<Backend> backend) {
    exe.m_backend = std::move(backend);
  }
  static const std::optional<ir::Graph>& graph(const Executable& exe) { return exe.m_graph; }
  // The backend of `exe`, for a backend that runs another executable's with arguments already
  // checked (a symbolic graph's bucket).
  static Backend& backend(Executable& exe) { return *exe.m_backend; }
  static const std::string& graph_name(const Executable& exe) { return exe.m_graph_name; }
  static void set_device(Executable& exe, int device) { exe.m_device = device; }
  static void set_on_cpu(Executable& exe) { exe.m_on_cpu = true; }
  // What a symbolic graph's executable says before any bucket compiles.
  // `on_host`: the target's buckets take host pointers (the CPU and emulate targets).
  static void describe_symbolic(Executable& exe, std::string arch, bool on_host,
                                std::string precision, std::vector<std::string> fallbacks,
                                std::string graph_hash) {
    exe.m_on_cpu = on_host;
    exe.m_arch = std::move(arch);
    exe.m_precision = std::move(precision);
    exe.m_fallbacks = std::move(fallbacks);
    exe.m_graph_hash = std::move(graph_hash);
  }
  static void set_check_indices(Executable& exe, bool check) { exe.m_check_indices = check; }
  static void describe(const ir::Graph& graph, Executable& exe) {
    exe.m_graph_name = graph.name();
    exe.m_index_checks.clear();
    for (const ir::EmbeddingIds& e : ir::embedding_ids(graph))
      exe.m_index_checks.push_back({e.input, e.rows, graph.node(e.table).name});
    exe.m_inputs = tensor_specs(graph, graph.inputs());
    exe.m_outputs = tensor_specs(graph, graph.outputs());
    exe.m_dims.clear();
    for (const ir::Symbol& s : graph.symbols()) exe.m_dims.push_back({s.name, s.lo, s.hi});
    if (graph.symbolic()) exe.m_graph = graph;
  }
  // What a compile says of its executable: hit or not, its times and key, and the artifact's
  // arch, resolved precision, fallbacks and kernel count.
  static void describe_compile(const CompileResult& result, const compiler::Artifact& artifact,
                               Executable& exe) {
    exe.m_cache_hit = result.hit;
    exe.m_cache_tier = !result.hit ? "" : result.remote_hit ? "remote" : "local";
    exe.m_compile_ms = result.compile_ms;
    exe.m_lookup_us = result.lookup_us;
    exe.m_key = result.key;
    exe.m_graph_hash = result.graph_hash;
    exe.m_arch = artifact.arch;
    exe.m_precision = artifact.precision;
    exe.m_fallbacks = artifact.fallbacks;
    exe.m_kernel_count = artifact.kernels.size();
  }
};

// Checks run() arguments against the specs: counts, null pointers, dtypes, shapes; the error
// names the tensor ("input 'x' has shape [4, 8], expected [4, 16]").
Status check_tensors(const std::vector<TensorSpec>& specs, const std::vector<TensorRef>& refs,
                     const char* role);

// The bytes of a tensor of `dtype` and `shape` (a TensorSpec's or a TensorRef's).
inline size_t tensor_bytes(DType dtype, const std::vector<int64_t>& shape) {
  size_t bytes = ir::byte_size(dtype);
  for (int64_t d : shape) bytes *= static_cast<size_t>(d);
  return bytes;
}

// The alignment every tensor pointer needs: tile loads and stores are 16 bytes wide.
inline constexpr uintptr_t k_tensor_alignment = 16;

// Checks each pointer's alignment; the error names the tensor and its address ("input 'x' at
// 0x7f0000000004 is not 16-byte aligned: ...").
Status check_alignment(const std::vector<TensorSpec>& specs, const std::vector<TensorRef>& refs,
                       const char* role);

}  // namespace kiln::runtime
