// Pass: groups graph nodes into kernels (matmul + epilogue; a row op, softmax, reduction or
// norm, with the elementwise chain that feeds it and the one that follows; elementwise and
// layout chains). Reshapes are views: no kernel, the operand's buffer read in the new shape.
#pragma once

#include "compiler/attention.h"
#include "ir/graph.h"

#include <cstddef>
#include <vector>

namespace kiln::compiler {

enum class GroupKind : uint8_t {
  matmul, softmax, reduce, norm, elementwise, attention, gather, scan
};

// The anchor kind of an op (matmul, softmax, reduce, norm, attention, gather, scan), or
// elementwise for the rest.
GroupKind anchor_kind(ir::OpKind kind);
// True for the ops a group evaluates per element: binary, unary, cast, and the layout ops that
// move elements (permute, slice, concat, roll), whose operands are read at moved coordinates.
bool is_elementwise(ir::OpKind kind);
bool is_layout(ir::OpKind kind);
// Softmax, reductions, norms and scans: the row ops, whose first operand may carry a fused
// prologue.
bool is_row_op(GroupKind kind);
// True when node `id` is a view of its operand's buffer: a reshape that is not a graph output.
bool is_view(const ir::Graph& graph, ir::NodeId id);

// One future kernel. Its value is `root`'s; `anchor` is the matmul or row op it is built around
// (-1 for elementwise). Every other member is an elementwise or layout op: the anchor's
// epilogue (evaluated per output element), or for a row op its prologue (evaluated per element
// of the row it reads: the members under its first operand).
struct KernelGroup {
  GroupKind kind = GroupKind::elementwise;
  ir::NodeId root = -1;
  ir::NodeId anchor = -1;
  std::vector<ir::NodeId> nodes;   // members in node order (the anchor included)
  std::vector<ir::NodeId> leaves;  // values read per element from buffers, in first-use order
  // Attention groups: what the kernel computes. Their members are the chain it replaces (the
  // attention op alone, or the explicit chain), anchor and root its last node; no leaves.
  AttentionMatch attention;
};

// The most buffers one kernel reads (its leaves and its anchor's operands). NVRTC's time grows
// about quadratically with the buffers one kernel reads (sm_90: about 1 ms per buffer at 256,
// 3 ms at 2,000, 5 ms at 4,000), so a wide sum is cut into kernels of this size: each cut costs
// one store and one load of an intermediate value. It also keeps every kernel's parameters (an
// 8-byte pointer per buffer) far inside CUDA's 32764 bytes.
inline constexpr size_t k_max_kernel_reads = 256;

// Fuses greedily from the outputs back: a value with exactly one use that is not a graph output
// joins its consumer's group when both are elementwise (layout ops included), or when it is an
// elementwise first operand of a row op (its prologue); a matmul or row op joins only a group
// that has no anchor yet, through elementwise ops that move no elements, and whose result has
// the same shape. A reshape that is not an output joins nothing: it is a view. A group that would read more
// than `max_reads` buffers (at least 2) is then cut, bottom-up, into groups that read at most
// that many: a chain into kernels that each read close to the limit, a balanced tree into full
// subtrees. A graph output that is an input becomes a copy (an elementwise group whose root is
// the input). Groups come in an order where every leaf is produced by an earlier group (or is a
// graph input). Each of `attention` becomes a group of its own, first: nothing else joins it.
// Linear in the size of the graph.
std::vector<KernelGroup> fuse(const ir::Graph& graph, size_t max_reads = k_max_kernel_reads,
                              const std::vector<AttentionMatch>& attention = {});

}  // namespace kiln::compiler
