// Bit-exact rounding primitives of the GPU number formats: tf32 (cvt.rna and MMA truncation),
// bf16 and fp16 round-to-nearest-even, and the tf32x3 big/small split.
#pragma once

#include <cstdint>

namespace kiln::reference {

// The bits of a float and back (memcpy, no aliasing games).
uint32_t float_bits(float x);
float bits_float(uint32_t bits);

// PTX's canonical NaNs, returned for any NaN input by the conversions below.
inline constexpr uint32_t k_canonical_nan_f32 = 0x7fffffffu;
inline constexpr uint16_t k_canonical_nan_16 = 0x7fffu;

// `cvt.rna.tf32.f32`: keeps 10 mantissa bits, rounding to nearest with ties away from zero; the
// result is an fp32 bit pattern whose low 13 bits are zero. A carry out of the mantissa moves into
// the exponent; finite values that round past the largest tf32 become infinity (no .satfinite);
// infinities pass through; any NaN becomes the canonical NaN. Subnormals are kept (no .ftz).
uint32_t tf32_rna_bits(uint32_t fp32_bits);
float round_tf32_rna(float x);

// What a tf32 MMA does to an operand that was not converted: the low 13 mantissa bits are dropped
// (round toward zero). Infinities pass through; any NaN becomes the canonical NaN.
uint32_t tf32_truncate_bits(uint32_t fp32_bits);
float truncate_tf32(float x);

// `cvt.rn.bf16.f32`: round to nearest even; overflow gives infinity, NaN the canonical NaN.
uint16_t bf16_from_float(float x);
float float_from_bf16(uint16_t bits);
float round_bf16(float x);

// `cvt.rn.f16.f32`: round to nearest even, with subnormals (down to 2^-24); values at or past
// 65520 (the midpoint above the largest finite half, 65504) give infinity; NaN the canonical NaN.
uint16_t f16_from_float(float x);
float float_from_f16(uint16_t bits);
float round_f16(float x);

// An fp32 fused multiply-add a * b + c rounded once to nearest even, as FFMA does; bit-exact
// (the exact product and sum are rounded to odd in double first, which makes the final rounding to
// fp32 exact) and faster than a software fmaf on hosts without an FMA instruction.
float fma_f32(float a, float b, float c);

// The tf32x3 split: big = rna_tf32(x), small = rna_tf32(x - big). x - big is exact in fp32, and
// big + small equals x to within 2^-22 relative (both halves are tf32 values, so products of
// halves are exact in fp32). An infinite or NaN x splits into big = ±1 and small = x (as the
// kernels' kiln_tf32x3_big): each cross product then holds one finite big part, so an infinity
// times a tf32-exact operand (small part 0) is an infinity as in fp32, where big = x would make
// big * 0 NaN; a NaN reaches every product through its small part.
struct Tf32Split {
  float big = 0.0f;
  float small = 0.0f;
};
Tf32Split split_tf32x3(float x);

// One tf32x3 product term sum a*b ~ a.big*b.small + a.small*b.big + a.big*b.big, added to `acc`
// in fp32, the small terms first (as the three MMAs of the kernel do).
float tf32x3_accumulate(float acc, const Tf32Split& a, const Tf32Split& b);

}  // namespace kiln::reference
