// Bit-level implementations of the tf32, bf16 and fp16 roundings; integer arithmetic only, so the
// results never depend on the host's floating-point environment.
#include "reference/rounding.h"

#include <cmath>
#include <cstring>

namespace kiln::reference {
namespace {

constexpr uint32_t k_exponent_mask = 0x7f800000u;
constexpr uint32_t k_mantissa_mask = 0x007fffffu;
constexpr uint32_t k_tf32_drop_mask = 0x00001fffu;  // the 13 mantissa bits tf32 does not keep

bool is_nan_bits(uint32_t bits) {
  return (bits & k_exponent_mask) == k_exponent_mask && (bits & k_mantissa_mask) != 0;
}

bool is_inf_or_nan_bits(uint32_t bits) { return (bits & k_exponent_mask) == k_exponent_mask; }

}  // namespace

uint32_t float_bits(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

float bits_float(uint32_t bits) {
  float x = 0.0f;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

uint32_t tf32_rna_bits(uint32_t bits) {
  if (is_nan_bits(bits)) return k_canonical_nan_f32;
  if (is_inf_or_nan_bits(bits)) return bits;
  // Sign-magnitude: adding half of the kept LSB to the magnitude rounds ties away from zero, and
  // a carry out of the mantissa increments the exponent (up to infinity) by itself.
  return (bits + 0x1000u) & ~k_tf32_drop_mask;
}

float round_tf32_rna(float x) { return bits_float(tf32_rna_bits(float_bits(x))); }

uint32_t tf32_truncate_bits(uint32_t bits) {
  if (is_nan_bits(bits)) return k_canonical_nan_f32;
  return bits & ~k_tf32_drop_mask;
}

float truncate_tf32(float x) { return bits_float(tf32_truncate_bits(float_bits(x))); }

uint16_t bf16_from_float(float x) {
  uint32_t bits = float_bits(x);
  if (is_nan_bits(bits)) return k_canonical_nan_16;
  if (is_inf_or_nan_bits(bits)) return static_cast<uint16_t>(bits >> 16);
  uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;  // ties go to the even upper half; a carry reaches infinity at the top
  return static_cast<uint16_t>(bits >> 16);
}

float float_from_bf16(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

float round_bf16(float x) { return float_from_bf16(bf16_from_float(x)); }

uint16_t f16_from_float(float x) {
  uint32_t bits = float_bits(x);
  auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (is_nan_bits(bits)) return k_canonical_nan_16;
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (or inf): infinity
  if (magnitude >= 0x38800000u) {                      // >= 2^-14: a normal half
    uint32_t rebased = magnitude - (112u << 23);       // exponent bias 127 -> 15
    uint32_t lsb = (rebased >> 13) & 1u;
    rebased += 0x0fffu + lsb;
    return sign | static_cast<uint16_t>(rebased >> 13);
  }
  if (magnitude < 0x33000000u) return sign;  // below 2^-25: rounds to zero
  // A subnormal half counts units of 2^-24: the significand shifted right by 14..24 bits.
  uint32_t exponent = magnitude >> 23;  // biased, 102..112
  uint32_t significand = (magnitude & k_mantissa_mask) | 0x00800000u;
  uint32_t shift = 126u - exponent;
  uint32_t quotient = significand >> shift;
  uint32_t remainder = significand & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (remainder > half || (remainder == half && (quotient & 1u) != 0)) ++quotient;
  return sign | static_cast<uint16_t>(quotient);  // 0x400 (the smallest normal) is exact too
}

float float_from_f16(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x03ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_float(sign);
  // Subnormal: mantissa * 2^-24, exact in fp32.
  float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

float round_f16(float x) { return float_from_f16(f16_from_float(x)); }

float fma_f32(float a, float b, float c) {
  double product = static_cast<double>(a) * static_cast<double>(b);  // exact: 48 bits at most
  double addend = c;
  double sum = product + addend;
  uint64_t bits = 0;
  std::memcpy(&bits, &sum, sizeof bits);
  // Rounding the double sum to fp32 can differ from rounding the exact value only when the sum
  // landed exactly on an fp32 midpoint, whose low 28 double mantissa bits are zero: rare, so the
  // exact error is computed only then.
  if ((bits & 0x0fffffffu) != 0) return static_cast<float>(sum);
  double back = sum - product;  // TwoSum: the exact rounding error of the double sum
  double error = (product - (sum - back)) + (addend - back);
  if (error == 0.0 || !std::isfinite(error) || (bits & 1u) != 0) return static_cast<float>(sum);
  // Round to odd: step to the odd neighbour on the side of the exact value; rounding that to
  // fp32 is then exact.
  bool magnitude_grows = (error > 0.0) == (sum > 0.0);
  bits = magnitude_grows ? bits + 1 : bits - 1;
  std::memcpy(&sum, &bits, sizeof sum);
  return static_cast<float>(sum);
}

Tf32Split split_tf32x3(float x) {
  Tf32Split split;
  split.big = std::isfinite(x) ? round_tf32_rna(x) : std::copysign(1.0f, x);
  split.small = round_tf32_rna(x - split.big);
  return split;
}

float tf32x3_accumulate(float acc, const Tf32Split& a, const Tf32Split& b) {
  acc += a.big * b.small;
  acc += a.small * b.big;
  acc += a.big * b.big;
  return acc;
}

}  // namespace kiln::reference
