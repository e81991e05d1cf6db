// Pass: groups graph nodes into kernels (matmul + epilogue, softmax + epilogue, elementwise).
#pragma once

#include "ir/graph.h"

#include <cstddef>
#include <vector>

namespace kiln::compiler {

enum class GroupKind : uint8_t { matmul, softmax, elementwise };

// One future kernel. Its value is `root`'s; `anchor` is the matmul or softmax it is built around
// (-1 for elementwise). Every other member is an elementwise op evaluated per output element.
struct KernelGroup {
  GroupKind kind = GroupKind::elementwise;
  ir::NodeId root = -1;
  ir::NodeId anchor = -1;
  std::vector<ir::NodeId> nodes;   // members in node order (the anchor included)
  std::vector<ir::NodeId> leaves;  // values read per element from buffers, in first-use order
};

// The most buffers one kernel reads (its leaves and its anchor's operands). NVRTC's time grows
// about quadratically with the buffers one kernel reads (sm_90: about 1 ms per buffer at 256,
// 3 ms at 2,000, 5 ms at 4,000), so a wide sum is cut into kernels of this size: each cut costs
// one store and one load of an intermediate value. It also keeps every kernel's parameters (an
// 8-byte pointer per buffer) far inside CUDA's 32764 bytes.
inline constexpr size_t k_max_kernel_reads = 256;

// Fuses greedily from the outputs back: a value with exactly one use that is not a graph output
// joins its consumer's group when the consumer is elementwise; a matmul or softmax joins only a
// group that has no anchor yet and whose result has the same shape. A group that would read more
// than `max_reads` buffers (at least 2) is then cut, bottom-up, into groups that read at most
// that many: a chain into kernels that each read close to the limit, a balanced tree into full
// subtrees. A graph output that is an input becomes a copy (an elementwise group whose root is
// the input). Groups come in an order where every leaf is produced by an earlier group (or is a
// graph input). Linear in the size of the graph.
std::vector<KernelGroup> fuse(const ir::Graph& graph, size_t max_reads = k_max_kernel_reads);

}  // namespace kiln::compiler
