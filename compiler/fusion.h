// Pass: groups graph nodes into kernels (matmul + epilogue, softmax + epilogue, elementwise).
#pragma once

#include "ir/graph.h"

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

// Fuses greedily from the outputs back: a value with exactly one use that is not a graph output
// joins its consumer's group when the consumer is elementwise; a matmul or softmax joins only a
// group that has no anchor yet and whose result has the same shape. A graph output that is an
// input becomes a copy (an elementwise group whose root is the input). Groups come in an order
// where every leaf is produced by an earlier group (or is a graph input).
std::vector<KernelGroup> fuse(const ir::Graph& graph);

}  // namespace kiln::compiler
