// Reference kernels for integer and bool values: integer arithmetic with two's complement
// wrapping, comparisons, logical ops, where, and casts to or from integer and bool dtypes.
// Integers are computed as int64_t, exactly: an i64 tensor's values past 2^53 are read from and
// written to its exact values (Tensor::integer, Tensor::set_integer), not its doubles.
#include "reference/kernels.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::reference::detail {
namespace {

// `x` (an integer's bits mod 2^64) as `dtype` holds it: i32 keeps the low 32 bits, signed.
int64_t wrap(ir::DType dtype, uint64_t x) {
  if (dtype == ir::DType::i32) return static_cast<int32_t>(static_cast<uint32_t>(x));
  return static_cast<int64_t>(x);
}

// An integer's two's-complement bits.
uint64_t bits(int64_t x) { return static_cast<uint64_t>(x); }

// floor_divide or remainder of integers as Python's // and %: 0 for a zero divisor; by -1, the
// wrapped negation and remainder 0.
int64_t floor_division(ir::OpKind kind, ir::DType dtype, int64_t a, int64_t b) {
  int64_t x = wrap(dtype, bits(a)), y = wrap(dtype, bits(b));
  if (y == 0) return 0;
  if (y == -1) return kind == ir::OpKind::floor_divide ? wrap(dtype, 0 - bits(a)) : 0;
  int64_t q = x / y, r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) {
    --q;
    r += y;
  }
  return kind == ir::OpKind::floor_divide ? q : r;
}

// The integer op `kind` (add, sub, mul, maximum, minimum, floor_divide, remainder) on integer
// operands of `dtype`, wrapped.
int64_t integer_binary(ir::OpKind kind, ir::DType dtype, int64_t a, int64_t b) {
  if (kind == ir::OpKind::add) return wrap(dtype, bits(a) + bits(b));
  if (kind == ir::OpKind::sub) return wrap(dtype, bits(a) - bits(b));
  if (kind == ir::OpKind::mul) return wrap(dtype, bits(a) * bits(b));
  if (kind == ir::OpKind::floor_divide || kind == ir::OpKind::remainder)
    return floor_division(kind, dtype, a, b);
  if (kind == ir::OpKind::maximum) return a > b ? a : b;
  assert(kind == ir::OpKind::minimum);
  return a < b ? a : b;
}

// Whether `kind` on integer operands is arithmetic (an integer result) rather than a compare.
bool is_integer_arithmetic(ir::OpKind kind) {
  return kind == ir::OpKind::add || kind == ir::OpKind::sub || kind == ir::OpKind::mul ||
         kind == ir::OpKind::maximum || kind == ir::OpKind::minimum ||
         kind == ir::OpKind::floor_divide || kind == ir::OpKind::remainder;
}

// A comparison or logical op, 1 or 0: of doubles (float operands) or of int64_t (integer and
// bool ones, exact past 2^53).
template <typename T>
double compare(ir::OpKind kind, T a, T b) {
  if (kind == ir::OpKind::eq) return a == b;
  if (kind == ir::OpKind::ne) return a != b;  // true where either is NaN
  if (kind == ir::OpKind::lt) return a < b;
  if (kind == ir::OpKind::le) return a <= b;
  if (kind == ir::OpKind::gt) return a > b;
  if (kind == ir::OpKind::ge) return a >= b;
  if (kind == ir::OpKind::logical_and) return a != T(0) && b != T(0);
  assert(kind == ir::OpKind::logical_or);
  return a != T(0) || b != T(0);
}

// A literal takes the dtype of the tensor it meets, in every mode: a float literal compared with
// or selected into an f32 tensor is the float the text's number rounds to (eq(x, 2.7) is true
// where x holds 2.7's float, in fp64 as in the kernels).
double literal_as(ir::DType dtype, double literal) {
  return ir::is_float(dtype) ? store_value(dtype, literal) : literal;
}

// Calls visit(out_index, operand_indices) over every element of `out`, row-major, each operand
// seen through broadcasting (strides from broadcast_strides).
template <typename Visit>
void for_each_element(const ir::Shape& out, const std::vector<std::vector<int64_t>>& strides,
                      Visit visit) {
  int rank = out.rank();
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  std::vector<int64_t> at(strides.size(), 0);
  for (int64_t flat = 0; flat < out.elements(); ++flat) {
    visit(flat, at);
    for (int d = rank - 1; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      ++index[du];
      for (size_t k = 0; k < strides.size(); ++k) at[k] += strides[k][du];
      if (index[du] < out.dim(d)) break;
      for (size_t k = 0; k < strides.size(); ++k) at[k] -= strides[k][du] * out.dim(d);
      index[du] = 0;
    }
  }
}

// float -> `to` (an integer dtype): toward zero, saturated, NaN -> 0.
int64_t float_to_integer(ir::DType to, double x) {
  if (std::isnan(x)) return 0;
  int64_t t = saturated_int64(std::trunc(x));
  if (to == ir::DType::i32) return std::clamp<int64_t>(t, INT32_MIN, INT32_MAX);
  return t;
}

}  // namespace

Tensor run_exact_binary(const ir::Node& node, const Tensor& a, const Tensor* b,
                        const RunMode& /*mode: exact, so the same in every mode*/) {
  Tensor out = zeros(node.type);
  ir::DType dtype = a.dtype;
  // Element o of the result from its operands' elements x and y (at their flat positions, or
  // the literal where the operand is none).
  auto element = [&](size_t o, const Tensor* p, size_t i, const Tensor* q, size_t j) {
    if (ir::is_float(dtype)) {  // a compare of floats
      double literal = literal_as(dtype, node.attrs.literal);
      out.values[o] = compare(node.kind, p ? p->values[i] : literal, q ? q->values[j] : literal);
      return;
    }
    int64_t literal = saturated_int64(node.attrs.literal);
    int64_t x = p ? p->integer(i) : literal, y = q ? q->integer(j) : literal;
    if (ir::is_integer(dtype) && is_integer_arithmetic(node.kind)) {
      out.set_integer(o, integer_binary(node.kind, dtype, x, y));
    } else {
      out.values[o] = compare(node.kind, x, y);
    }
  };
  if (b == nullptr) {
    bool left = node.attrs.literal_side == ir::LiteralSide::lhs;
    for (size_t i = 0; i < a.values.size(); ++i) {
      if (left) {
        element(i, nullptr, 0, &a, i);
      } else {
        element(i, &a, i, nullptr, 0);
      }
    }
    return out;
  }
  const ir::Shape& shape = node.type.shape;
  std::vector<std::vector<int64_t>> strides = {broadcast_strides(shape, a.shape),
                                               broadcast_strides(shape, b->shape)};
  for_each_element(shape, strides, [&](int64_t o, const std::vector<int64_t>& at) {
    element(static_cast<size_t>(o), &a, static_cast<size_t>(at[0]), b,
            static_cast<size_t>(at[1]));
  });
  return out;
}

Tensor run_exact_unary(const ir::Node& node, const Tensor& x) {
  Tensor out = zeros(node.type);
  for (size_t i = 0; i < x.values.size(); ++i) {
    int64_t v = x.integer(i);
    if (node.kind == ir::OpKind::neg) {
      out.set_integer(i, wrap(x.dtype, 0 - bits(v)));
    } else if (node.kind == ir::OpKind::abs) {
      out.set_integer(i, v < 0 ? wrap(x.dtype, 0 - bits(v)) : v);
    } else {
      assert(node.kind == ir::OpKind::logical_not);
      out.values[i] = v == 0;
    }
  }
  return out;
}

Tensor run_exact_cast(const ir::Node& node, const Tensor& x) {
  Tensor out = zeros(node.type);
  ir::DType from = x.dtype, to = node.type.dtype;
  for (size_t i = 0; i < x.values.size(); ++i) {
    double v = x.values[i];
    if (to == ir::DType::boolean) {
      out.values[i] = ir::is_float(from) ? v != 0.0 : x.integer(i) != 0;  // NaN is true
    } else if (ir::is_integer(to)) {
      out.set_integer(i, ir::is_float(from) ? float_to_integer(to, v)
                                            : wrap(to, bits(x.integer(i))));  // i64 -> i32 wraps
    } else {
      // Integer or bool -> float: rounded once to f32 (as a kernel's conversion does, where
      // the double would round an i64 past 2^53 first), then as the target stores it.
      out.values[i] = store_value(to, static_cast<float>(x.integer(i)));
    }
  }
  return out;
}

Tensor run_where(const ir::Node& node, const Tensor& cond, const Tensor* a, const Tensor* b,
                 const RunMode& /*mode: a choice, so the same in every mode*/) {
  Tensor out = zeros(node.type);
  ir::DType dtype = node.type.dtype;
  ir::LiteralSide side = node.attrs.literal_side;
  double la = literal_as(dtype, node.attrs.literal);
  double lb = literal_as(dtype, side == ir::LiteralSide::both ? node.attrs.literal2
                                                              : node.attrs.literal);
  bool integer = !ir::is_float(dtype);
  const ir::Shape& shape = node.type.shape;
  std::vector<std::vector<int64_t>> strides = {broadcast_strides(shape, cond.shape)};
  if (a) strides.push_back(broadcast_strides(shape, a->shape));
  if (b) strides.push_back(broadcast_strides(shape, b->shape));
  for_each_element(shape, strides, [&](int64_t o, const std::vector<int64_t>& at) {
    bool c = cond.values[static_cast<size_t>(at[0])] != 0.0;
    const Tensor* from = c ? a : b;
    auto i = from ? static_cast<size_t>(at[c ? 1 : (a ? 2 : 1)]) : 0;
    auto flat = static_cast<size_t>(o);
    if (integer) {
      out.set_integer(flat, from ? from->integer(i) : saturated_int64(c ? la : lb));
    } else {
      out.values[flat] = from ? from->values[i] : (c ? la : lb);
    }
  });
  return out;
}

Tensor run_scan(const ir::Node& node, const Tensor& x, const RunMode& mode) {
  Tensor out = zeros(node.type);
  const Line line = line_of(x.shape, node.attrs.axis);
  const int64_t count = line.count, inner = line.inner;
  ir::DType dtype = node.type.dtype;
  bool integer = ir::is_integer(dtype);
  bool fp64 = mode.arithmetic == Arithmetic::fp64;
  for (int64_t o = 0; o < line.outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return static_cast<size_t>((o * count + j) * inner + i); };
      uint64_t wrapped = 0;
      double sum64 = 0.0;
      float sum32 = 0.0f;
      for (int64_t j = 0; j < count; ++j) {
        double v = x.values[at(j)];
        double& y = out.values[at(j)];
        if (integer) {
          wrapped += bits(x.integer(at(j)));
          out.set_integer(at(j), wrap(dtype, wrapped));
        } else if (fp64) {
          y = sum64 += v;
        } else {
          sum32 += static_cast<float>(v);
          y = store_value(dtype, static_cast<double>(sum32));
        }
      }
    }
  }
  return out;
}

}  // namespace kiln::reference::detail
