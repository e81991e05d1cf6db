// Reference attention: softmax(q k^T * scale + mask, causal) v one query row at a time, the batch
// dims broadcast as matmul's, in fp64, or emulated in fp32 (FFMA dot products in head and key
// order, probabilities in fp32, the operands of both products rounded as the mode's tensor-core
// path rounds them) with the result stored at its dtype.
#include "reference/kernels.h"

#include "reference/rounding.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::reference::detail {
namespace {

// One attention's sizes: `queries` rows of q and `keys` rows of k and v, q and k of head dim
// `head`, v of width `width`; `batch` of them.
struct AttentionGeometry {
  int64_t batch = 1;
  int64_t queries = 0;
  int64_t keys = 0;
  int64_t head = 0;
  int64_t width = 0;
};

// One batch's operands, row-major: q [queries, head], k [keys, head], v [keys, width], out
// [queries, width]; the mask's score (i, j) at mask[i * mask_row + j * mask_col], no mask when
// null.
struct Batch {
  const double* q = nullptr;
  const double* k = nullptr;
  const double* v = nullptr;
  const double* mask = nullptr;
  int64_t mask_row = 0;
  int64_t mask_col = 0;
  bool mask_is_bool = false;  // true keeps a key; a float mask is added
  double* out = nullptr;
};

// Element strides of `mask` seen through broadcasting to the scores' dims [batch..., Sq, Sk]:
// 0 on every dim that the mask lacks or has as 1. (The scores need not form a valid Shape: they
// may hold more than 2^31 - 1 elements in all.)
std::vector<int64_t> mask_strides(const std::vector<int64_t>& scores, const ir::Shape& mask) {
  int offset = static_cast<int>(scores.size()) - mask.rank();
  std::vector<int64_t> strides(scores.size(), 0);
  int64_t stride = 1;
  for (int i = mask.rank() - 1; i >= 0; --i) {
    if (mask.dim(i) != 1) strides[static_cast<size_t>(i + offset)] = stride;
    stride *= mask.dim(i);
  }
  return strides;
}

// Element offset of batch `b` (row-major over the scores' batch dims) inside the mask.
int64_t mask_offset(const std::vector<int64_t>& scores, const std::vector<int64_t>& strides,
                    int64_t b) {
  int64_t offset = 0;
  for (size_t d = scores.size() - 2; d-- > 0;) {
    offset += (b % scores[d]) * strides[d];
    b /= scores[d];
  }
  return offset;
}

// acc + x * y: exact fp64 arithmetic, or one fused multiply-add rounded once in fp32 (FFMA).
double multiply_add(double x, double y, double acc) { return acc + x * y; }
float multiply_add(float x, float y, float acc) { return fma_f32(x, y, acc); }

// Every query row of one batch: its scores against all keys (-inf past the query when causal),
// their softmax (the max subtracted first; a row whose every score is -inf is zeros: the attention
// op's rule, as PyTorch's scaled_dot_product_attention, where softmax would give NaN), then the probability-weighted sum of v's
// rows, in T; stored at `dtype` when `store`.
// `operand` rounds a value entering a product: q, k, v and the probabilities (the identity in
// fp64, `highest` and `tf32x3`, whose split keeps about fp32's precision).
template <typename T, typename Round>
void run_batch(const ir::Node& node, const AttentionGeometry& g, const Batch& b, bool store,
               Round operand) {
  const T scale = static_cast<T>(node.attrs.scale);
  const bool causal = node.attrs.causal;
  std::vector<T> p(static_cast<size_t>(g.keys));
  std::vector<T> acc(static_cast<size_t>(g.width));
  for (int64_t i = 0; i < g.queries; ++i) {
    const double* q_row = b.q + i * g.head;
    for (int64_t j = 0; j < g.keys; ++j) {
      T score = -std::numeric_limits<T>::infinity();
      if (!causal || j <= i) {
        const double* k_row = b.k + j * g.head;
        T dot(0);
        for (int64_t d = 0; d < g.head; ++d)
          dot = multiply_add(operand(static_cast<T>(q_row[d])), operand(static_cast<T>(k_row[d])),
                             dot);
        score = dot * scale;
        if (b.mask) {
          double mv = b.mask[i * b.mask_row + j * b.mask_col];
          if (!b.mask_is_bool) score += static_cast<T>(mv);
          else if (mv == 0.0) score += -std::numeric_limits<T>::infinity();  // false: -inf added
        }
      }
      p[static_cast<size_t>(j)] = score;
    }
    T max_score = p[0];
    for (T score : p) max_score = std::max(max_score, score);
    double* out_row = b.out + i * g.width;
    // Every score -inf (a NaN score is not: its row is NaN, as softmax's).
    bool masked_out = std::all_of(p.begin(), p.end(), [](T score) {
      return score == -std::numeric_limits<T>::infinity();
    });
    if (masked_out) {
      // Every key masked out (or an infinite q or k): the row is zeros (the kernels' rule, where
      // softmax gives NaN).
      std::fill(out_row, out_row + g.width, 0.0);
      continue;
    }
    T sum(0);
    for (T& e : p) {
      e = std::exp(e - max_score);
      sum += e;
    }
    for (T& e : p) e /= sum;
    std::fill(acc.begin(), acc.end(), T(0));
    for (int64_t j = 0; j < g.keys; ++j) {
      const double* v_row = b.v + j * g.width;
      T weight = operand(p[static_cast<size_t>(j)]);
      for (int64_t e = 0; e < g.width; ++e)
        acc[static_cast<size_t>(e)] =
            multiply_add(weight, operand(static_cast<T>(v_row[e])), acc[static_cast<size_t>(e)]);
    }
    for (int64_t e = 0; e < g.width; ++e) {
      auto value = static_cast<double>(acc[static_cast<size_t>(e)]);
      out_row[e] = store ? store_value(node.type.dtype, value) : value;
    }
  }
}

}  // namespace

Tensor run_attention(const ir::Node& node, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor* mask, const RunMode& mode) {
  Tensor out = zeros(node.type);
  const ir::Shape& shape = node.type.shape;
  int rank = shape.rank();
  AttentionGeometry g;
  for (int d = 0; d < rank - 2; ++d) g.batch *= shape.dim(d);
  g.queries = shape.dim(rank - 2);
  g.width = shape.dim(rank - 1);
  g.keys = k.shape.dim(k.shape.rank() - 2);
  g.head = q.shape.dim(q.shape.rank() - 1);
  std::vector<int64_t> scores(shape.dims().begin(), shape.dims().end() - 1);
  scores.push_back(g.keys);
  std::vector<int64_t> strides;
  if (mask) strides = mask_strides(scores, mask->shape);
  for (int64_t index = 0; index < g.batch; ++index) {
    Batch b;
    b.q = q.values.data() + batch_offset(q, shape, index, g.queries * g.head);
    b.k = k.values.data() + batch_offset(k, shape, index, g.keys * g.head);
    b.v = v.values.data() + batch_offset(v, shape, index, g.keys * g.width);
    b.out = out.values.data() + index * g.queries * g.width;
    if (mask) {
      b.mask = mask->values.data() + mask_offset(scores, strides, index);
      b.mask_row = strides[static_cast<size_t>(rank - 2)];
      b.mask_col = strides[static_cast<size_t>(rank - 1)];
      b.mask_is_bool = mask->dtype == ir::DType::boolean;
    }
    // fp64 keeps full precision, as every op's ground truth; emulated runs the kernel's fp32.
    if (mode.arithmetic == Arithmetic::fp64) {
      run_batch<double>(node, g, b, false, [](double x) { return x; });
    } else if (node.type.dtype == ir::DType::f16) {
      run_batch<float>(node, g, b, true, round_f16);
    } else if (node.type.dtype == ir::DType::bf16 || mode.precision == ir::Precision::medium) {
      run_batch<float>(node, g, b, true, round_bf16);
    } else if (mode.precision == ir::Precision::high) {
      run_batch<float>(node, g, b, true, round_tf32_rna);
    } else {
      run_batch<float>(node, g, b, true, [](float x) { return x; });
    }
  }
  return out;
}

}  // namespace kiln::reference::detail
