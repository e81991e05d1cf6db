// The reference executor's per-op kernels (internal to kiln_reference).
#pragma once

#include "ir/graph.h"
#include "reference/execute.h"
#include "reference/tensor.h"

namespace kiln::reference::detail {

// Each kernel computes `node` (whose type is the result type) from its operand tensors.
Tensor run_matmul(const ir::Node& node, const Tensor& a, const Tensor& b, const RunMode& mode);
// `b` is null when the node has a literal operand.
Tensor run_binary(const ir::Node& node, const Tensor& a, const Tensor* b, const RunMode& mode);
Tensor run_unary(const ir::Node& node, const Tensor& x, const RunMode& mode);
Tensor run_cast(const ir::Node& node, const Tensor& x, const RunMode& mode);
// Integer and bool values and comparisons (reference/typed.cpp): integers exact (int64_t, past
// 2^53 too) with two's complement wrapping, comparisons of the values as they stand (fp64's full
// precision, or the mode's stored floats) with a literal in the operands' dtype.
Tensor run_exact_binary(const ir::Node& node, const Tensor& a, const Tensor* b, const RunMode& mode);
Tensor run_exact_unary(const ir::Node& node, const Tensor& x);
// A cast to or from an integer or bool dtype, in both modes: float -> integer truncates toward
// zero and saturates, NaN -> 0; -> bool is != 0; integer -> float rounds as the target stores it;
// i64 -> i32 wraps.
Tensor run_exact_cast(const ir::Node& node, const Tensor& x);
// where(cond, a, b) with a or b null for a literal (node.attrs).
Tensor run_where(const ir::Node& node, const Tensor& cond, const Tensor* a, const Tensor* b,
                 const RunMode& mode);
// Element strides of `operand` seen through numpy broadcasting to `out`: 0 on every dim that the
// operand lacks or has as 1.
std::vector<int64_t> broadcast_strides(const ir::Shape& out, const ir::Shape& operand);
Tensor run_softmax(const ir::Node& node, const Tensor& x, const RunMode& mode);
// A tensor seen as [outer, count, inner] around one axis.
struct Line {
  int64_t outer = 1, count = 1, inner = 1;
};
Line line_of(const ir::Shape& shape, int axis);
// sum, mean, max along node.attrs.axis.
Tensor run_reduce(const ir::Node& node, const Tensor& x, const RunMode& mode);
// cumsum along node.attrs.axis: integers wrapped as their dtype, exact; floats summed in order,
// in fp64 (Arithmetic::fp64) or fp32 with each result stored as its dtype (emulated).
Tensor run_scan(const ir::Node& node, const Tensor& x, const RunMode& mode);
// rms_norm (bias null) or layer_norm over the last axis.
Tensor run_norm(const ir::Node& node, const Tensor& x, const Tensor& weight, const Tensor* bias,
                const RunMode& mode);
// reshape, permute, slice, concat: values moved, never rounded.
Tensor run_layout(const ir::Node& node, const std::vector<const Tensor*>& operands);
// softmax(q k^T * scale + mask, causal) v per batch; `mask` is null when the node has none.
Tensor run_attention(const ir::Node& node, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor* mask, const RunMode& mode);

// Element offset of batch `b` (row-major over the batch dims of `out`, all but its last two)
// inside the matrix operand `t` of matmul or attention: each of t's batch dims, aligned at the
// last, counts unless it is 1 (broadcast); one smaller than the result's groups it (attention's
// kv heads: coordinate c reads c / (result dim / t's dim)).
int64_t batch_offset(const Tensor& t, const ir::Shape& out, int64_t b, int64_t matrix_elements);

}  // namespace kiln::reference::detail
