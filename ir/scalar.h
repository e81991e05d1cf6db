// Each pointwise op's per-element formula, written once over a Math that renders primitives:
// the CUDA emitter renders C++ text, the CPU target LLVM IR, the reference computes in fp64 or
// fp32. A new unary or binary op is one case here and, when it needs a primitive no Math has
// yet, one line in each Math (the CUDA text, LLVM and reference ones).
#pragma once

#include "ir/graph.h"

#include <cassert>
#include <cstdlib>

namespace kiln::ir {

// A Math has a copyable `Value` and these members, each returning a Value:
//   constant(double value, const char* text)  a float constant; `text` is its decimal spelling
//                                             (the CUDA renderer writes it, with an f suffix)
//   add sub mul div max min pow (a, b)        max/min as PyTorch's maximum/minimum (a NaN
//                                             operand gives NaN, where fmaxf would drop it)
//   neg exp erf tanh sqrt abs cos sin log (x)
//   group(x)                                  x as one term: parenthesised in CUDA text, the
//                                             identity elsewhere
// A call's arguments are evaluated in an order C++ leaves open, so a formula names every
// intermediate that emits something before the call that takes it, leaving at most one emitting
// argument per call: each Math then sees its primitives in one order whatever the host compiler
// (an LLVM builder emits instructions in call order).

// The value of pointwise op `kind` (OpCategory::unary or binary) at (a, b); a unary op reads a
// only. Callers pass only those kinds.
template <class Math>
typename Math::Value pointwise_formula(Math& m, OpKind kind, typename Math::Value a,
                                       typename Math::Value b) {
  using Value = typename Math::Value;
  switch (kind) {
    case OpKind::add:
      return m.add(a, b);
    case OpKind::sub:
      return m.sub(a, b);
    case OpKind::mul:
      return m.mul(a, b);
    case OpKind::div:
      return m.div(a, b);
    case OpKind::pow:
      return m.pow(a, b);
    case OpKind::maximum:
      return m.max(a, b);
    case OpKind::minimum:
      return m.min(a, b);
    case OpKind::relu:  // max(0, x) in this order: NaN stays NaN and -0.0 stays -0.0, as in PyTorch
      return m.max(m.constant(0.0, "0.0"), a);
    case OpKind::gelu: {  // the exact (erf) form
      Value erf = m.erf(m.mul(a, m.constant(0.70710678118654752, "0.70710678118654752")));
      Value one_plus_erf = m.add(m.constant(1.0, "1.0"), erf);
      return m.mul(m.mul(m.constant(0.5, "0.5"), a), one_plus_erf);
    }
    case OpKind::gelu_tanh: {  // the tanh approximation, as PyTorch's gelu(approximate="tanh")
      Value square = m.mul(a, a);
      Value cube = m.mul(square, a);
      Value inner = m.add(a, m.mul(m.constant(0.044715, "0.044715"), cube));
      Value t = m.tanh(m.mul(m.constant(0.79788456080286536, "0.79788456080286536"), inner));
      Value one_plus_t = m.add(m.constant(1.0, "1.0"), t);
      return m.mul(m.mul(m.constant(0.5, "0.5"), a), one_plus_t);
    }
    case OpKind::silu:
      return m.div(a, m.add(m.constant(1.0, "1.0"), m.exp(m.neg(a))));
    case OpKind::sigmoid:
      return m.div(m.constant(1.0, "1.0"), m.add(m.constant(1.0, "1.0"), m.exp(m.neg(a))));
    case OpKind::tanh:
      return m.tanh(a);
    case OpKind::exp:
      return m.exp(a);
    case OpKind::neg:
      return m.neg(a);
    case OpKind::sqrt:
      return m.sqrt(a);
    case OpKind::rsqrt:
      return m.group(m.div(m.constant(1.0, "1.0"), m.sqrt(a)));
    case OpKind::abs:
      return m.abs(a);
    case OpKind::cos:
      return m.cos(a);
    case OpKind::sin:
      return m.sin(a);
    case OpKind::erf:
      return m.erf(a);
    case OpKind::log:
      return m.log(a);
    // Exact ops on any dtype, each backend's typed layer (comparisons, logical ops, where,
    // integer arithmetic and casts): CUDA's emit_typed.cpp, the CPU's typed.cpp, the reference's
    // typed.cpp.
    case OpKind::eq:
    case OpKind::ne:
    case OpKind::lt:
    case OpKind::le:
    case OpKind::gt:
    case OpKind::ge:
    case OpKind::logical_and:
    case OpKind::logical_or:
    case OpKind::logical_not:
    case OpKind::where:
    case OpKind::arange:
    case OpKind::floor_divide:
    case OpKind::remainder:
    // Not pointwise formulas.
    case OpKind::embedding:
    case OpKind::expand:
    case OpKind::cumsum:
    case OpKind::roll:
    case OpKind::input:
    case OpKind::matmul:
    case OpKind::cast:
    case OpKind::softmax:
    case OpKind::sum:
    case OpKind::mean:
    case OpKind::max:
    case OpKind::rms_norm:
    case OpKind::layer_norm:
    case OpKind::reshape:
    case OpKind::permute:
    case OpKind::slice:
    case OpKind::concat:
    case OpKind::attention:
      break;
  }
  assert(false && "pointwise_formula: not a unary or binary op");
  std::abort();
}

template <class Math>
typename Math::Value unary_formula(Math& m, OpKind kind, typename Math::Value x) {
  assert(category(kind) == OpCategory::unary);
  return pointwise_formula(m, kind, x, x);
}

template <class Math>
typename Math::Value binary_formula(Math& m, OpKind kind, typename Math::Value a,
                                    typename Math::Value b) {
  assert(category(kind) == OpCategory::binary);
  return pointwise_formula(m, kind, a, b);
}

// Row ops' per-element math (softmax, mean, the norms), also written once: each code generator
// keeps its own loops over a row (a warp per row in CUDA, a loop per row on the CPU) and its own
// accumulations, and computes what it keeps per row and per element with these.

// A row's mean from its sum and its length (a float).
template <class Math>
typename Math::Value row_mean(Math& m, typename Math::Value sum, typename Math::Value len) {
  return m.div(sum, len);
}

// softmax: each element's exponential against the row's maximum, and the reciprocal of their sum
// that scales it.
template <class Math>
typename Math::Value softmax_exp(Math& m, typename Math::Value x, typename Math::Value max) {
  typename Math::Value shifted = m.sub(x, max);
  return m.exp(shifted);
}
template <class Math>
typename Math::Value reciprocal(Math& m, typename Math::Value x) {
  return m.div(m.constant(1.0, "1.0"), x);
}

// rms_norm and layer_norm: the scale from the row's sum of squared deviations from its mean (from
// 0 for rms_norm), 1 / sqrt(squares / len + eps); each element's output (x - mean) * scale *
// weight, plus bias for layer_norm (`has_bias`). `weight()` and `bias()` load the element's weight
// and bias, called where they enter (after the centred value, in that order).
template <class Math>
typename Math::Value norm_scale(Math& m, typename Math::Value squares, typename Math::Value len,
                                typename Math::Value eps) {
  typename Math::Value variance = m.add(m.div(squares, len), eps);
  typename Math::Value root = m.sqrt(variance);
  return reciprocal(m, root);
}
template <class Math, class Weight, class Bias>
typename Math::Value norm_output(Math& m, typename Math::Value x, typename Math::Value mean,
                                 typename Math::Value scale, Weight weight, Bias bias,
                                 bool has_bias) {
  typename Math::Value centred = m.mul(m.sub(x, mean), scale);
  typename Math::Value w = weight();
  typename Math::Value y = m.mul(centred, w);
  if (!has_bias) return y;
  typename Math::Value b = bias();
  return m.add(y, b);
}

}  // namespace kiln::ir
