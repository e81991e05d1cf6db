// Reference kernels for reductions (sum, mean, max), the norms, and the layout ops (reshape,
// permute, expand, roll, slice, concat).
#include "reference/kernels.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace kiln::reference::detail {
namespace {

template <typename T>
T reduce_line(ir::OpKind kind, const double* in, int64_t count, int64_t stride) {
  if (kind == ir::OpKind::max) {
    T best = static_cast<T>(in[0]);
    for (int64_t i = 1; i < count; ++i) {  // a NaN anywhere is the result, as PyTorch's amax
      T x = static_cast<T>(in[i * stride]);
      if (x > best || x != x) best = x;  // nothing is greater than a NaN best: it stays
    }
    return best;
  }
  T sum(0);
  for (int64_t i = 0; i < count; ++i) sum += static_cast<T>(in[i * stride]);
  return kind == ir::OpKind::mean ? sum / static_cast<T>(count) : sum;
}

// One row of a norm: two passes for layer_norm (the mean, then the mean squared deviation),
// one for rms_norm (the mean square). layer_norm works on the row less its first element x0, as
// the kernels do (compiler/KERNELS.md, "Norms"), so the emulated modes round as they do.
template <typename T>
void norm_line(ir::OpKind kind, const double* x, const double* w, const double* b, double* out,
               int64_t count, double eps, ir::DType dtype, bool store) {
  T n = static_cast<T>(count);
  bool layer = kind == ir::OpKind::layer_norm;
  T x0 = layer && count > 0 ? static_cast<T>(x[0]) : T(0);
  auto at = [&](int64_t i) { return layer ? static_cast<T>(x[i]) - x0 : static_cast<T>(x[i]); };
  T mean(0);
  if (layer) {
    for (int64_t i = 0; i < count; ++i) mean += at(i);
    mean /= n;
  }
  T squares(0);
  for (int64_t i = 0; i < count; ++i) {
    T d = at(i) - mean;
    squares += d * d;
  }
  T scale = T(1) / std::sqrt(squares / n + static_cast<T>(eps));
  for (int64_t i = 0; i < count; ++i) {
    T y = (at(i) - mean) * scale * static_cast<T>(w[i]);
    if (b) y += static_cast<T>(b[i]);
    out[i] = store ? store_value(dtype, static_cast<double>(y)) : static_cast<double>(y);
  }
}

// Row-major strides of a shape.
std::vector<int64_t> strides_of(const ir::Shape& shape) {
  std::vector<int64_t> strides(static_cast<size_t>(shape.rank()), 1);
  for (int d = shape.rank() - 2; d >= 0; --d)
    strides[static_cast<size_t>(d)] = strides[static_cast<size_t>(d + 1)] * shape.dim(d + 1);
  return strides;
}

// Calls visit(flat, coords) for every element of `shape` in row-major order.
template <typename Visit>
void for_each_index(const ir::Shape& shape, Visit visit) {
  std::vector<int64_t> index(static_cast<size_t>(shape.rank()), 0);
  for (int64_t flat = 0; flat < shape.elements(); ++flat) {
    visit(flat, index);
    for (int d = shape.rank() - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < shape.dim(d)) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace

Tensor run_reduce(const ir::Node& node, const Tensor& x, const RunMode& mode) {
  Tensor out = zeros(node.type);
  Line l = line_of(x.shape, node.attrs.axis);
  bool fp64 = mode.arithmetic == Arithmetic::fp64;
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t i = 0; i < l.inner; ++i) {
      const double* in = x.values.data() + o * l.count * l.inner + i;
      double& result = out.values[static_cast<size_t>(o * l.inner + i)];
      if (fp64) {
        result = reduce_line<double>(node.kind, in, l.count, l.inner);
      } else {
        result = store_value(node.type.dtype,
                             static_cast<double>(reduce_line<float>(node.kind, in, l.count,
                                                                    l.inner)));
      }
    }
  }
  return out;
}

Tensor run_norm(const ir::Node& node, const Tensor& x, const Tensor& weight, const Tensor* bias,
                const RunMode& mode) {
  Tensor out = zeros(node.type);
  int64_t count = x.shape.dim(x.shape.rank() - 1);
  int64_t rows = count ? x.shape.elements() / count : 0;
  bool fp64 = mode.arithmetic == Arithmetic::fp64;
  const double* b = bias ? bias->values.data() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const double* in = x.values.data() + r * count;
    double* result = out.values.data() + r * count;
    if (fp64) {
      norm_line<double>(node.kind, in, weight.values.data(), b, result, count, node.attrs.eps,
                        node.type.dtype, false);
    } else {
      norm_line<float>(node.kind, in, weight.values.data(), b, result, count, node.attrs.eps,
                       node.type.dtype, true);
    }
  }
  return out;
}

Tensor run_layout(const ir::Node& node, const std::vector<const Tensor*>& operands) {
  Tensor out = zeros(node.type);
  const ir::Shape& shape = node.type.shape;
  const Tensor& x = *operands[0];
  // Element `flat` of the result is element `offset` of `src` (an i64's exact value too).
  bool integer = !ir::is_float(node.type.dtype);
  auto take = [&](int64_t flat, const Tensor& src, int64_t offset) {
    auto to = static_cast<size_t>(flat), from = static_cast<size_t>(offset);
    if (integer) {
      out.set_integer(to, src.integer(from));
    } else {
      out.values[to] = src.values[from];
    }
  };
  // Layout ops only (the callers send nothing else): an if chain, as the op table's other kinds
  // have no place here.
  if (node.kind == ir::OpKind::reshape) {
    out.values = x.values;
    out.exact = x.exact;
    return out;
  }
  if (node.kind == ir::OpKind::permute) {
    std::vector<int64_t> from = strides_of(x.shape);
    for_each_index(shape, [&](int64_t flat, const std::vector<int64_t>& index) {
      int64_t offset = 0;
      for (size_t d = 0; d < index.size(); ++d)
        offset += index[d] * from[static_cast<size_t>(node.attrs.dims[d])];
      take(flat, x, offset);
    });
    return out;
  }
  if (node.kind == ir::OpKind::expand) {
    // numpy broadcasting: x's dims aligned at the last; a dim of 1 (or none) repeats.
    std::vector<int64_t> from = broadcast_strides(shape, x.shape);
    for_each_index(shape, [&](int64_t flat, const std::vector<int64_t>& index) {
      int64_t offset = 0;
      for (size_t d = 0; d < index.size(); ++d) offset += index[d] * from[d];
      take(flat, x, offset);
    });
    return out;
  }
  if (node.kind == ir::OpKind::roll) {
    std::vector<int64_t> from = strides_of(x.shape);
    auto axis = static_cast<size_t>(node.attrs.axis);
    int64_t n = x.shape.dim(node.attrs.axis);
    int64_t k = (node.attrs.shift % n + n) % n;
    for_each_index(shape, [&](int64_t flat, const std::vector<int64_t>& index) {
      int64_t offset = 0;
      for (size_t d = 0; d < index.size(); ++d)
        offset += (d == axis ? (index[d] - k + n) % n : index[d]) * from[d];
      take(flat, x, offset);
    });
    return out;
  }
  if (node.kind == ir::OpKind::slice) {
    std::vector<int64_t> from = strides_of(x.shape);
    auto axis = static_cast<size_t>(node.attrs.axis);
    for_each_index(shape, [&](int64_t flat, const std::vector<int64_t>& index) {
      int64_t offset = node.attrs.start * from[axis];
      for (size_t d = 0; d < index.size(); ++d) offset += index[d] * from[d];
      take(flat, x, offset);
    });
    return out;
  }
  assert(node.kind == ir::OpKind::concat && "not a layout op");
  auto axis = static_cast<size_t>(node.attrs.axis);
  std::vector<std::vector<int64_t>> strides;
  for (const Tensor* t : operands) strides.push_back(strides_of(t->shape));
  for_each_index(shape, [&](int64_t flat, const std::vector<int64_t>& index) {
    int64_t c = index[axis];
    size_t which = 0;
    while (c >= operands[which]->shape.dim(static_cast<int>(axis))) {
      c -= operands[which]->shape.dim(static_cast<int>(axis));
      ++which;
    }
    const Tensor& src = *operands[which];
    const std::vector<int64_t>& from = strides[which];
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d) offset += (d == axis ? c : index[d]) * from[d];
    take(flat, src, offset);
  });
  return out;
}

Line line_of(const ir::Shape& shape, int axis) {
  Line l;
  for (int d = 0; d < axis; ++d) l.outer *= shape.dim(d);
  l.count = shape.dim(axis);
  for (int d = axis + 1; d < shape.rank(); ++d) l.inner *= shape.dim(d);
  return l;
}

}  // namespace kiln::reference::detail
