// Reference kernels for the elementwise ops (binary with broadcasting, unary, cast) and softmax.
#include "reference/kernels.h"
#include "ir/scalar.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace kiln::reference::detail {

std::vector<int64_t> broadcast_strides(const ir::Shape& out, const ir::Shape& operand) {
  int rank = out.rank();
  int offset = rank - operand.rank();
  assert(offset >= 0);
  std::vector<int64_t> strides(static_cast<size_t>(rank), 0);
  int64_t stride = 1;
  for (int i = operand.rank() - 1; i >= 0; --i) {
    if (operand.dim(i) != 1 || out.dim(i + offset) == 1)
      strides[static_cast<size_t>(i + offset)] = stride;
    stride *= operand.dim(i);
  }
  return strides;
}

namespace {

// Calls visit(out_index, a_index, b_index) for every element of `out`, in row-major order.
template <typename Visit>
void for_each_broadcast(const ir::Shape& out, const std::vector<int64_t>& a_strides,
                        const std::vector<int64_t>& b_strides, Visit visit) {
  int rank = out.rank();
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t a = 0;
  int64_t b = 0;
  for (int64_t flat = 0; flat < out.elements(); ++flat) {
    visit(flat, a, b);
    for (int d = rank - 1; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      ++index[du];
      a += a_strides[du];
      b += b_strides[du];
      if (index[du] < out.dim(d)) break;
      a -= a_strides[du] * out.dim(d);
      b -= b_strides[du] * out.dim(d);
      index[du] = 0;
    }
  }
}

// ir/scalar.h's Math in T (double for the fp64 reference, float for a mode's rounding).
template <typename T>
struct RefMath {
  using Value = T;
  T constant(double value, const char*) { return static_cast<T>(value); }
  T add(T a, T b) { return a + b; }
  T sub(T a, T b) { return a - b; }
  T mul(T a, T b) { return a * b; }
  T div(T a, T b) { return a / b; }
  // PyTorch's maximum and minimum: a NaN operand gives NaN (std::fmax would drop it).
  T max(T a, T b) { return (a > b || a != a) ? a : b; }
  T min(T a, T b) { return (a < b || a != a) ? a : b; }
  T pow(T a, T b) { return std::pow(a, b); }
  T neg(T x) { return -x; }
  T exp(T x) { return std::exp(x); }
  T erf(T x) { return std::erf(x); }
  T tanh(T x) { return std::tanh(x); }
  T sqrt(T x) { return std::sqrt(x); }
  T abs(T x) { return std::fabs(x); }
  T cos(T x) { return std::cos(x); }
  T sin(T x) { return std::sin(x); }
  T log(T x) { return std::log(x); }
  T group(T x) { return x; }
};

template <typename T>
T apply_binary(ir::OpKind kind, T x, T y) {
  RefMath<T> m;
  return ir::binary_formula(m, kind, x, y);
}

template <typename T>
T apply_unary(ir::OpKind kind, T x) {
  RefMath<T> m;
  return ir::unary_formula(m, kind, x);
}

bool is_fp64(const RunMode& mode) { return mode.arithmetic == Arithmetic::fp64; }

// Softmax of `count` values spaced `stride` apart, numerically stable (max subtracted first).
template <typename T>
void softmax_line(const double* in, double* out, int64_t count, int64_t stride, ir::DType dtype,
                  bool store) {
  T max_value = static_cast<T>(in[0]);
  for (int64_t i = 1; i < count; ++i)
    max_value = std::max(max_value, static_cast<T>(in[i * stride]));
  T sum(0);
  for (int64_t i = 0; i < count; ++i) {
    T e = std::exp(static_cast<T>(in[i * stride]) - max_value);
    out[i * stride] = static_cast<double>(e);
    sum += e;
  }
  for (int64_t i = 0; i < count; ++i) {
    T value = static_cast<T>(out[i * stride]) / sum;
    out[i * stride] = store ? store_value(dtype, value) : static_cast<double>(value);
  }
}

}  // namespace

Tensor run_binary(const ir::Node& node, const Tensor& a, const Tensor* b, const RunMode& mode) {
  // Integer and bool operands, and comparisons, compute exactly (reference/typed.cpp).
  if (!ir::is_float(a.dtype) || !ir::is_float(node.type.dtype)) return run_exact_binary(node, a, b, mode);
  Tensor out = zeros(node.type);
  const ir::Shape& shape = node.type.shape;
  bool fp64 = is_fp64(mode);
  ir::DType dtype = node.type.dtype;
  if (b == nullptr) {
    bool literal_left = node.attrs.literal_side == ir::LiteralSide::lhs;
    double literal = node.attrs.literal;
    auto literal_single = static_cast<float>(literal);
    for (size_t i = 0; i < a.values.size(); ++i) {
      double x = a.values[i];
      if (fp64) {
        out.values[i] = literal_left ? apply_binary(node.kind, literal, x)
                                     : apply_binary(node.kind, x, literal);
        continue;
      }
      auto xs = static_cast<float>(x);
      float r = literal_left ? apply_binary(node.kind, literal_single, xs)
                             : apply_binary(node.kind, xs, literal_single);
      out.values[i] = store_value(dtype, r);
    }
    return out;
  }
  std::vector<int64_t> a_strides = broadcast_strides(shape, a.shape);
  std::vector<int64_t> b_strides = broadcast_strides(shape, b->shape);
  const double* av = a.values.data();
  const double* bv = b->values.data();
  double* ov = out.values.data();
  if (fp64) {
    for_each_broadcast(shape, a_strides, b_strides, [&](int64_t o, int64_t i, int64_t j) {
      ov[o] = apply_binary(node.kind, av[i], bv[j]);
    });
    return out;
  }
  for_each_broadcast(shape, a_strides, b_strides, [&](int64_t o, int64_t i, int64_t j) {
    float r = apply_binary(node.kind, static_cast<float>(av[i]), static_cast<float>(bv[j]));
    ov[o] = store_value(dtype, r);
  });
  return out;
}

Tensor run_unary(const ir::Node& node, const Tensor& x, const RunMode& mode) {
  if (!ir::is_float(x.dtype)) return run_exact_unary(node, x);
  Tensor out = zeros(node.type);
  bool fp64 = is_fp64(mode);
  for (size_t i = 0; i < x.values.size(); ++i) {
    if (fp64) {
      out.values[i] = apply_unary(node.kind, x.values[i]);
      continue;
    }
    float r = apply_unary(node.kind, static_cast<float>(x.values[i]));
    out.values[i] = store_value(node.type.dtype, r);
  }
  return out;
}

Tensor run_cast(const ir::Node& node, const Tensor& x, const RunMode& mode) {
  if (!ir::is_float(x.dtype) || !ir::is_float(node.type.dtype)) return run_exact_cast(node, x);
  Tensor out = zeros(node.type);
  if (is_fp64(mode)) {
    out.values = x.values;  // the ground truth keeps full precision through a cast
    return out;
  }
  // The source value is exact in fp32 (it was stored at its dtype), so this rounds once.
  for (size_t i = 0; i < x.values.size(); ++i)
    out.values[i] = store_value(node.type.dtype, x.values[i]);
  return out;
}

Tensor run_softmax(const ir::Node& node, const Tensor& x, const RunMode& mode) {
  Tensor out = zeros(node.type);
  const ir::Shape& shape = node.type.shape;
  int axis = node.attrs.axis;
  assert(axis >= 0 && axis < shape.rank());
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= shape.dim(d);
  int64_t count = shape.dim(axis);
  int64_t inner = 1;
  for (int d = axis + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  bool fp64 = is_fp64(mode);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t base = o * count * inner + i;
      const double* in = x.values.data() + base;
      double* result = out.values.data() + base;
      if (fp64)
        softmax_line<double>(in, result, count, inner, node.type.dtype, false);
      else
        softmax_line<float>(in, result, count, inner, node.type.dtype, true);
    }
  }
  return out;
}

}  // namespace kiln::reference::detail
