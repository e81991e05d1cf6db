// The host memory of a `kiln run`, estimated from its graph before anything is allocated.
#include "tools/run_memory.h"

#include "compiler/compiler.h"
#include "compiler/request.h"
#include "compiler/target.h"
#include "reference/tensor.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kiln::tools {
namespace {

int64_t add(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}
int64_t times(int64_t a, int64_t b) {
  return b != 0 && a > std::numeric_limits<int64_t>::max() / b
             ? std::numeric_limits<int64_t>::max()
             : a * b;
}

// The host bytes of one reference::Tensor of node `id`: its doubles (an i64's exact values too).
int64_t tensor_bytes(const ir::Graph& graph, ir::NodeId id) {
  const ir::TensorType& type = graph.node(id).type;
  return times(type.shape.elements(), reference::host_bytes_per_element(type.dtype));
}

// The fp64 reference's peak as reference::run reaches it on `graph` (static), in doubles: its
// own copy of the inputs, each node's result allocated in order and each value freed after its
// last use (an output's never), a matmul's per-batch operand and result copies while it runs,
// and the outputs copied out at the end.
int64_t reference_peak_bytes(const ir::Graph& graph) {
  constexpr int64_t k_double = sizeof(double);
  std::vector<int> uses = graph.use_counts();
  int64_t live = 0, outputs = 0;
  for (ir::NodeId id : graph.inputs()) live = add(live, tensor_bytes(graph, id));
  for (ir::NodeId id : graph.outputs()) outputs = add(outputs, tensor_bytes(graph, id));
  int64_t peak = live;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const ir::Node& node = graph.nodes()[i];
    if (node.kind == ir::OpKind::input) continue;
    auto id = static_cast<ir::NodeId>(i);
    int64_t transient = 0;
    if (node.kind == ir::OpKind::matmul) {
      const ir::Shape& a = graph.node(node.operands[0]).type.shape;
      const ir::Shape& out = node.type.shape;
      int64_t m = out.dim(out.rank() - 2), n = out.dim(out.rank() - 1);
      int64_t k = node.attrs.transpose_a ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
      transient = times(add(add(times(m, k), times(k, n)), times(m, n)), k_double);
    }
    live = add(live, tensor_bytes(graph, id));
    peak = std::max(peak, add(live, transient));
    for (ir::NodeId operand : node.operands) {
      if (--uses[static_cast<size_t>(operand)] == 0) live -= tensor_bytes(graph, operand);
    }
  }
  return std::max(peak, add(live, outputs));
}

}  // namespace

int64_t run_host_bytes(const ir::Graph& graph, int64_t read_from_files, int64_t host_temporaries) {
  int64_t inputs = 0, outputs = 0, device_bytes = 0;
  for (ir::NodeId id : graph.inputs()) {
    inputs = add(inputs, tensor_bytes(graph, id));
    device_bytes = add(device_bytes, graph.node(id).type.bytes());
  }
  for (ir::NodeId id : graph.outputs()) {
    outputs = add(outputs, tensor_bytes(graph, id));
    device_bytes = add(device_bytes, graph.node(id).type.bytes());
  }
  int64_t drawn = add(inputs, read_from_files);
  int64_t reference = add(inputs, reference_peak_bytes(graph));
  int64_t kernels =
      add(add(add(inputs, outputs), add(device_bytes, host_temporaries)), outputs);
  return std::max({drawn, reference, kernels});
}

int64_t host_temporary_bytes(const ir::Graph& bound, const compiler::CompileOptions& options,
                             bool cpu) {
  compiler::CompileOptions static_options = options;
  static_options.bucket.clear();
  if (cpu) static_options.target.sm = compiler::k_cpu_modes_as_on_sm;
  auto request = compiler::check_request(bound, static_options);
  // The CUDA target's plan (emulated runs) holds split-K partials besides the values' own
  // temporaries; the CPU target's is the target-free plan.
  Expected<std::vector<uint64_t>> temporaries = Error{""};
  if (!request) {
    temporaries = request.error();
  } else if (cpu) {
    auto planned = compiler::plan_program(bound, *request);
    if (planned) temporaries = planned->plan.temporary_bytes;
    else temporaries = planned.error();
  } else {
    auto lowered = compiler::lower(bound, *request);
    if (lowered) temporaries = lowered->plan.temporary_bytes;
    else temporaries = lowered.error();
  }
  int64_t bytes = 0;
  if (temporaries) {
    // Each as CpuProgram allocates it: 64-byte aligned with a float and 64 bytes to spare.
    for (uint64_t t : *temporaries)
      bytes = add(bytes, static_cast<int64_t>((t + 4 + 63) / 64 * 64 + 64));
    return bytes;
  }
  std::vector<bool> inside(bound.nodes().size(), true);
  for (ir::NodeId id : bound.inputs()) inside[static_cast<size_t>(id)] = false;
  for (ir::NodeId id : bound.outputs()) inside[static_cast<size_t>(id)] = false;
  for (size_t i = 0; i < inside.size(); ++i)
    if (inside[i]) bytes = add(bytes, bound.nodes()[i].type.bytes());
  return bytes;
}

}  // namespace kiln::tools
