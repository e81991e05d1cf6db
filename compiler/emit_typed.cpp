// The typed layer of the CUDA emitter: values of the integer and bool dtypes, comparisons,
// logical ops, integer arithmetic (two's complement: computed unsigned, so it wraps without
// undefined behaviour) and casts between every pair of dtypes.
#include "compiler/emit_internal.h"

#include <cassert>
#include <cstdint>

namespace kiln::compiler::detail {

std::string value_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32:
    case ir::DType::f16:
    case ir::DType::bf16:
      return "float";
    case ir::DType::i32:
      return "int";
    case ir::DType::i64:
      return "long long";
    case ir::DType::boolean:
      return "bool";
  }
  return "float";
}

std::string load_value(ir::DType dtype, const std::string& element) {
  if (ir::is_float(dtype)) return load_as_float(dtype, element);
  if (dtype == ir::DType::boolean) return "(" + element + " != 0)";
  return element;
}

std::string store_value(ir::DType dtype, const std::string& value) {
  switch (dtype) {
    case ir::DType::f32:
    case ir::DType::i32:
    case ir::DType::i64:
      return value;
    case ir::DType::bf16:
      return "kiln_float_to_bf16(" + value + ")";
    case ir::DType::f16:
      return "kiln_float_to_f16(" + value + ")";
    case ir::DType::boolean:
      return "(unsigned char)(" + value + ")";
  }
  return value;
}

std::string typed_literal(ir::DType dtype, double value) {
  if (ir::is_float(dtype)) return literal(value);
  if (dtype == ir::DType::boolean) return value != 0.0 ? "true" : "false";
  auto v = static_cast<int64_t>(value);
  if (dtype == ir::DType::i32) {
    // -2147483648 is not a literal of int: it is the negation of a long.
    return v == INT32_MIN ? "(-2147483647 - 1)" : "(" + std::to_string(v) + ")";
  }
  return "(" + std::to_string(v) + "LL)";
}

namespace {

// The unsigned type integer arithmetic on `dtype` wraps in.
std::string unsigned_type(ir::DType dtype) {
  return dtype == ir::DType::i32 ? "unsigned" : "unsigned long long";
}

// `x` computed in `dtype`'s unsigned type, converted back (modulo 2^N).
std::string wrapped(ir::DType dtype, const std::string& unsigned_expr) {
  return "(" + value_type(dtype) + ")(" + unsigned_expr + ")";
}

std::string as_unsigned(ir::DType dtype, const std::string& x) {
  return "(" + unsigned_type(dtype) + ")(" + x + ")";
}

}  // namespace

std::string exact_binary(ir::OpKind kind, ir::DType dtype, const std::string& a,
                         const std::string& b) {
  if (kind == ir::OpKind::eq) return "(" + a + " == " + b + ")";
  if (kind == ir::OpKind::ne) return "(" + a + " != " + b + ")";
  if (kind == ir::OpKind::lt) return "(" + a + " < " + b + ")";
  if (kind == ir::OpKind::le) return "(" + a + " <= " + b + ")";
  if (kind == ir::OpKind::gt) return "(" + a + " > " + b + ")";
  if (kind == ir::OpKind::ge) return "(" + a + " >= " + b + ")";
  if (kind == ir::OpKind::logical_and) return "(" + a + " && " + b + ")";
  if (kind == ir::OpKind::logical_or) return "(" + a + " || " + b + ")";
  if (kind == ir::OpKind::maximum) return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
  if (kind == ir::OpKind::minimum) return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
  if (kind == ir::OpKind::floor_divide || kind == ir::OpKind::remainder) {
    // Each operand evaluated once (a lambda called in place), no division by 0 or of the
    // smallest value by -1 (undefined in C++): 0 for a zero divisor, the wrapped negation and
    // remainder 0 for -1; else C's truncated quotient less one (the remainder plus b) where
    // the remainder is nonzero and of the other sign than b.
    std::string t = value_type(dtype);
    bool floor = kind == ir::OpKind::floor_divide;
    return "([](" + t + " a, " + t + " b) -> " + t + " { if (b == 0) return 0; if (b == -1) " +
           "return " + (floor ? wrapped(dtype, "0u - " + as_unsigned(dtype, "a")) : "0") +
           "; " + t + " r = a % b; bool adjust = r != 0 && ((r < 0) != (b < 0)); return " +
           (floor ? "a / b - (adjust ? 1 : 0)" : "adjust ? r + b : r") + "; })(" + a + ", " + b +
           ")";
  }
  const char* op = kind == ir::OpKind::add ? " + " : kind == ir::OpKind::sub ? " - " : " * ";
  assert(kind == ir::OpKind::add || kind == ir::OpKind::sub || kind == ir::OpKind::mul);
  return wrapped(dtype, as_unsigned(dtype, a) + op + as_unsigned(dtype, b));
}

std::string exact_unary(ir::OpKind kind, ir::DType dtype, const std::string& x) {
  if (kind == ir::OpKind::logical_not) return "(!" + x + ")";
  std::string negated = wrapped(dtype, "0u - " + as_unsigned(dtype, x));
  if (kind == ir::OpKind::neg) return negated;
  assert(kind == ir::OpKind::abs);
  return "(" + x + " < 0 ? " + negated + " : " + x + ")";
}

std::string cast_value(ir::DType from, ir::DType to, const std::string& x) {
  if (to == ir::DType::boolean) {
    return ir::is_float(from) ? "(" + x + " != 0.0f)" : "(" + x + " != 0)";  // NaN: true
  }
  if (ir::is_float(to)) {
    if (ir::is_float(from)) return x;  // round_to rounds it
    return "(float)(" + x + ")";      // integers round to nearest; bool gives 1 or 0
  }
  // An integer type.
  if (ir::is_float(from)) {
    // Toward zero, saturated at the type's range, NaN -> 0. The bounds are exact floats.
    bool i32 = to == ir::DType::i32;
    std::string hi = i32 ? "2147483648.0f" : "9223372036854775808.0f";
    std::string max = i32 ? "2147483647" : "9223372036854775807LL";
    std::string min = i32 ? "(-2147483647 - 1)" : "(-9223372036854775807LL - 1)";
    return "(" + x + " != " + x + " ? (" + value_type(to) + ")0 : " + x + " >= " + hi + " ? " +
           max + " : " + x + " < -" + hi + " ? " + min + " : (" + value_type(to) + ")(" + x +
           "))";
  }
  if (from == ir::DType::boolean) return "(" + value_type(to) + ")(" + x + ")";
  if (from == ir::DType::i64 && to == ir::DType::i32) {
    return "(int)(unsigned)(" + x + ")";  // wraps: the low 32 bits
  }
  return "(" + value_type(to) + ")(" + x + ")";
}

}  // namespace kiln::compiler::detail
