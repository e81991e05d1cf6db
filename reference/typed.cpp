// Reference kernels for integer and bool values: integer arithmetic with two's complement
// wrapping, comparisons, logical ops, where, and casts to or from integer and bool dtypes.
// Values are held as doubles (reference/tensor.h): integers are exact up to 2^53.
#include "reference/kernels.h"

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

// A whole double's two's-complement bits, saturated past int64.
uint64_t bits(double x) { return static_cast<uint64_t>(saturated_int64(x)); }

// floor_divide or remainder of integers as Python's // and %: 0 for a zero divisor; by -1, the
// wrapped negation and remainder 0.
double floor_division(ir::OpKind kind, ir::DType dtype, double a, double b) {
  int64_t x = wrap(dtype, bits(a)), y = wrap(dtype, bits(b));
  if (y == 0) return 0.0;
  if (y == -1) {
    return kind == ir::OpKind::floor_divide ? static_cast<double>(wrap(dtype, 0 - bits(a))) : 0.0;
  }
  int64_t q = x / y, r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) {
    --q;
    r += y;
  }
  return static_cast<double>(kind == ir::OpKind::floor_divide ? q : r);
}

// The integer op `kind` (add, sub, mul, maximum, minimum, floor_divide, remainder) on integer
// operands of `dtype`, wrapped.
double integer_binary(ir::OpKind kind, ir::DType dtype, double a, double b) {
  if (kind == ir::OpKind::add) return static_cast<double>(wrap(dtype, bits(a) + bits(b)));
  if (kind == ir::OpKind::sub) return static_cast<double>(wrap(dtype, bits(a) - bits(b)));
  if (kind == ir::OpKind::mul) return static_cast<double>(wrap(dtype, bits(a) * bits(b)));
  if (kind == ir::OpKind::floor_divide || kind == ir::OpKind::remainder)
    return floor_division(kind, dtype, a, b);
  if (kind == ir::OpKind::maximum) return a > b ? a : b;
  assert(kind == ir::OpKind::minimum);
  return a < b ? a : b;
}

// A comparison or logical op, 1 or 0.
double compare(ir::OpKind kind, double a, double b) {
  if (kind == ir::OpKind::eq) return a == b;
  if (kind == ir::OpKind::ne) return a != b;  // true where either is NaN
  if (kind == ir::OpKind::lt) return a < b;
  if (kind == ir::OpKind::le) return a <= b;
  if (kind == ir::OpKind::gt) return a > b;
  if (kind == ir::OpKind::ge) return a >= b;
  if (kind == ir::OpKind::logical_and) return a != 0.0 && b != 0.0;
  assert(kind == ir::OpKind::logical_or);
  return a != 0.0 || b != 0.0;
}

// One element of an exact binary op whose operands have `operand_dtype`.
double exact_binary(ir::OpKind kind, ir::DType operand_dtype, double a, double b) {
  if (ir::is_integer(operand_dtype) &&
      (kind == ir::OpKind::add || kind == ir::OpKind::sub || kind == ir::OpKind::mul ||
       kind == ir::OpKind::maximum || kind == ir::OpKind::minimum ||
       kind == ir::OpKind::floor_divide || kind == ir::OpKind::remainder))
    return integer_binary(kind, operand_dtype, a, b);
  return compare(kind, a, b);
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
double float_to_integer(ir::DType to, double x) {
  if (std::isnan(x)) return 0.0;
  double lo = to == ir::DType::i32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = to == ir::DType::i32 ? 2147483647.0 : 9223372036854775807.0;
  double t = std::trunc(x);
  return t < lo ? lo : t > hi ? hi : t;
}

}  // namespace

Tensor run_exact_binary(const ir::Node& node, const Tensor& a, const Tensor* b,
                        const RunMode& /*mode: exact, so the same in every mode*/) {
  Tensor out = zeros(node.type);
  ir::DType dtype = a.dtype;
  if (b == nullptr) {
    bool left = node.attrs.literal_side == ir::LiteralSide::lhs;
    double literal = literal_as(dtype, node.attrs.literal);
    for (size_t i = 0; i < a.values.size(); ++i) {
      double x = a.values[i];
      out.values[i] = left ? exact_binary(node.kind, dtype, literal, x)
                           : exact_binary(node.kind, dtype, x, literal);
    }
    return out;
  }
  const ir::Shape& shape = node.type.shape;
  std::vector<std::vector<int64_t>> strides = {broadcast_strides(shape, a.shape),
                                               broadcast_strides(shape, b->shape)};
  for_each_element(shape, strides, [&](int64_t o, const std::vector<int64_t>& at) {
    out.values[static_cast<size_t>(o)] =
        exact_binary(node.kind, dtype, a.values[static_cast<size_t>(at[0])],
                     b->values[static_cast<size_t>(at[1])]);
  });
  return out;
}

Tensor run_exact_unary(const ir::Node& node, const Tensor& x) {
  Tensor out = zeros(node.type);
  for (size_t i = 0; i < x.values.size(); ++i) {
    double v = x.values[i];
    if (node.kind == ir::OpKind::neg) {
      out.values[i] = static_cast<double>(wrap(x.dtype, 0 - bits(v)));
    } else if (node.kind == ir::OpKind::abs) {
      out.values[i] = v < 0 ? static_cast<double>(wrap(x.dtype, 0 - bits(v))) : v;
    } else {
      assert(node.kind == ir::OpKind::logical_not);
      out.values[i] = v == 0.0;
    }
  }
  return out;
}

Tensor run_exact_cast(const ir::Node& node, const Tensor& x) {
  Tensor out = zeros(node.type);
  ir::DType from = x.dtype, to = node.type.dtype;
  for (size_t i = 0; i < x.values.size(); ++i) {
    double v = x.values[i];
    double r = 0.0;
    if (to == ir::DType::boolean) {
      r = v != 0.0;  // NaN is nonzero: true
    } else if (ir::is_integer(to)) {
      r = ir::is_float(from) ? float_to_integer(to, v)
                             : static_cast<double>(wrap(to, bits(v)));  // i64 -> i32 wraps
    } else {
      r = store_value(to, v);  // integer or bool -> float, rounded as the target stores it
    }
    out.values[i] = r;
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
  const ir::Shape& shape = node.type.shape;
  std::vector<std::vector<int64_t>> strides = {broadcast_strides(shape, cond.shape)};
  if (a) strides.push_back(broadcast_strides(shape, a->shape));
  if (b) strides.push_back(broadcast_strides(shape, b->shape));
  for_each_element(shape, strides, [&](int64_t o, const std::vector<int64_t>& at) {
    bool c = cond.values[static_cast<size_t>(at[0])] != 0.0;
    double va = a ? a->values[static_cast<size_t>(at[1])] : la;
    double vb = b ? b->values[static_cast<size_t>(at[a ? 2 : 1])] : lb;
    out.values[static_cast<size_t>(o)] = c ? va : vb;
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
          wrapped += bits(v);
          y = static_cast<double>(wrap(dtype, wrapped));
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
