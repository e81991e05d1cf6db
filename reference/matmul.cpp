// Reference matmul: 2-D to 6-D with broadcasting batch dims and transpose flags, in fp64 or with
// the operand rounding and fp32 accumulation of each precision mode.
#include "reference/kernels.h"

#include "reference/rounding.h"

#include <cassert>

namespace kiln::reference::detail {
namespace {

struct MatmulDims {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
};

// Copies one rows x cols matrix (stored transposed when `transposed`) into row-major order,
// converting every element with `convert`.
template <typename Elem, typename Convert>
std::vector<Elem> load(const Tensor& t, int64_t offset, int64_t rows, int64_t cols,
                       bool transposed, Convert convert) {
  std::vector<Elem> out(static_cast<size_t>(rows * cols));
  const double* src = t.values.data() + offset;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      double value = transposed ? src[c * rows + r] : src[r * cols + c];
      out[static_cast<size_t>(r * cols + c)] = convert(value);
    }
  }
  return out;
}

// C[m, n] = fold over k in order of step(acc, A[m, k], B[k, n]). The i-k-j loop order keeps the
// k order of every output element's accumulation while walking B and C row by row.
template <typename Acc, typename Elem, typename Step>
std::vector<Acc> gemm(const std::vector<Elem>& a, const std::vector<Elem>& b, const MatmulDims& g,
                      Step step) {
  std::vector<Acc> c(static_cast<size_t>(g.m * g.n), Acc(0));
  for (int64_t i = 0; i < g.m; ++i) {
    Acc* c_row = c.data() + i * g.n;
    for (int64_t kk = 0; kk < g.k; ++kk) {
      const Elem& a_ik = a[static_cast<size_t>(i * g.k + kk)];
      const Elem* b_row = b.data() + kk * g.n;
      for (int64_t j = 0; j < g.n; ++j) c_row[j] = step(c_row[j], a_ik, b_row[j]);
    }
  }
  return c;
}

// Runs one batch with element type Elem (after `convert`) and accumulator Acc, storing into out.
template <typename Acc, typename Elem, typename Convert, typename Step>
void run_batches(const ir::Node& node, const Tensor& a, const Tensor& b, const MatmulDims& g,
                 Tensor& out, bool round_store, Convert convert, Step step) {
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    std::vector<Elem> am = load<Elem>(a, batch_offset(a, node.type.shape, batch, g.m * g.k), g.m, g.k,
                                      node.attrs.transpose_a, convert);
    std::vector<Elem> bm = load<Elem>(b, batch_offset(b, node.type.shape, batch, g.k * g.n), g.k, g.n,
                                      node.attrs.transpose_b, convert);
    std::vector<Acc> c = gemm<Acc>(am, bm, g, step);
    double* dst = out.values.data() + batch * g.m * g.n;
    for (size_t i = 0; i < c.size(); ++i) {
      auto value = static_cast<double>(c[i]);
      dst[i] = round_store ? store_value(node.type.dtype, value) : value;
    }
  }
}

float to_float(double x) { return static_cast<float>(x); }

// fp32 accumulation of products that are exact in fp32 (tf32, bf16 and fp16 operands).
float add_exact_product(float acc, float x, float y) { return acc + x * y; }

}  // namespace

int64_t batch_offset(const Tensor& t, const ir::Shape& out, int64_t b, int64_t matrix_elements) {
  int out_batch = out.rank() - 2, t_batch = t.shape.rank() - 2;
  int64_t offset = 0, stride = matrix_elements;
  for (int d = out_batch - 1; d >= 0; --d) {
    int64_t coord = b % out.dim(d);
    b /= out.dim(d);
    int td = d - (out_batch - t_batch);
    if (td < 0) break;
    // A dim of 1 broadcasts; one that divides the result's groups it (grouped-query attention's
    // kv heads: result head h reads head h / (H_q / H_kv)).
    if (t.shape.dim(td) != 1) offset += coord / (out.dim(d) / t.shape.dim(td)) * stride;
    stride *= t.shape.dim(td);
  }
  return offset;
}

Tensor run_matmul(const ir::Node& node, const Tensor& a, const Tensor& b, const RunMode& mode) {
  Tensor out = zeros(node.type);
  const ir::Shape& shape = node.type.shape;
  MatmulDims g;
  for (int d = 0; d < shape.rank() - 2; ++d) g.batch *= shape.dim(d);
  g.m = shape.dim(shape.rank() - 2);
  g.n = shape.dim(shape.rank() - 1);
  g.k = node.attrs.transpose_a ? a.shape.dim(a.shape.rank() - 2) : a.shape.dim(a.shape.rank() - 1);

  if (mode.arithmetic == Arithmetic::fp64) {
    run_batches<double, double>(node, a, b, g, out, false, [](double x) { return x; },
                                [](double acc, double x, double y) { return acc + x * y; });
    return out;
  }
  if (a.dtype != ir::DType::f32) {
    // f16/bf16 tensor-core MMA: operands already at their 16-bit dtype, exact fp32 products,
    // fp32 accumulation, the result stored at the output dtype.
    run_batches<float, float>(node, a, b, g, out, true, to_float, add_exact_product);
    return out;
  }
  ir::Precision precision = node.attrs.precision.value_or(mode.precision);
  switch (precision) {
    case ir::Precision::highest:
      // FFMA: each step is a bit-exact fused multiply-add; only the k order is a choice.
      run_batches<float, float>(node, a, b, g, out, true, to_float,
                                [](float acc, float x, float y) { return fma_f32(x, y, acc); });
      break;
    case ir::Precision::high:
      run_batches<float, float>(node, a, b, g, out, true,
                                [](double x) { return round_tf32_rna(static_cast<float>(x)); },
                                add_exact_product);
      break;
    case ir::Precision::medium:
      run_batches<float, float>(node, a, b, g, out, true,
                                [](double x) { return round_bf16(static_cast<float>(x)); },
                                add_exact_product);
      break;
    case ir::Precision::tf32x3:
      run_batches<float, Tf32Split>(node, a, b, g, out, true,
                                    [](double x) { return split_tf32x3(static_cast<float>(x)); },
                                    tf32x3_accumulate);
      break;
    case ir::Precision::automatic:
      assert(false && "run() rejects an unresolved precision before any kernel runs");
      break;
  }
  return out;
}

}  // namespace kiln::reference::detail
