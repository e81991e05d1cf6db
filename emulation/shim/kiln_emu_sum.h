// The emulator's models of a tensor core's accumulation: mma.sync's block sum (block_sum) and the
// H100's whole-slice sum (slice_sum_hopper). Every emulated MMA and wgmma output goes through one
// of them, so they are written for speed at the -O1 the emulator compiles kernels with: exponents
// and powers of two from bits, products scaled to units of the truncation quantum by exact
// multiplications, no library calls where the FPU has the instruction. The arithmetic is exact
// (every scaling is by a power of two, every partial sum an integer below 2^33), and the results
// are those of the definitions in compiler/KERNELS.md ("Accumulation model") bit for bit,
// signed zeros included: tests/emulation/sum_test.cpp compares them with a plain transcription
// of the definitions in double arithmetic and libm.
//
// This header needs only the standard library: tests include it on its own.
#ifndef KILN_EMU_SUM_H
#define KILN_EMU_SUM_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln_emu {

inline float to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Infinity or NaN.
inline bool is_special(float x) { return (to_bits(x) & 0x7f800000u) == 0x7f800000u; }

// ilogb of a finite non-zero float (a subnormal m 2^-149, m below 2^23, has 31 - clz(m) - 149).
inline int exponent_of(float x) {
  uint32_t magnitude = to_bits(x) & 0x7fffffffu;
  int biased = static_cast<int>(magnitude >> 23);
  return biased ? biased - 127 : -118 - __builtin_clz(magnitude);
}

// 2^e for e in a double's normal range, -1022 to 1023.
inline double power_of_two(int e) {
  uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// The float nearest to the finite `x` toward zero: to nearest, then one step back toward zero
// where that rounded outward (the float is then non-zero, and an infinity steps back to the
// largest finite float).
inline float toward_zero(double x) {
  float f = static_cast<float>(x);
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = to_float(to_bits(f) - 1);
  return f;
}

// One step of a tensor core's accumulation: c plus `n` exact products. The model (Fasi, Higham,
// Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021): every
// addend is aligned to the largest one's exponent E and truncated below 2^(E - 23) (no guard
// bits), the aligned addends are summed exactly (carry-out bits), and the sum is truncated to
// fp32 (round toward zero). KILN_EMU_MMA_NEAREST instead adds the products one at a time in fp32
// with round-to-nearest, as the emulator did before.
inline float block_sum(float c, const float* products, int n) {
#ifdef KILN_EMU_MMA_NEAREST
  for (int i = 0; i < n; ++i) c += products[i];
  return c;
#else
  float big = std::fabs(c);
  bool special = is_special(c);
  for (int i = 0; i < n; ++i) {
    float magnitude = std::fabs(products[i]);
    big = magnitude > big ? magnitude : big;
    special = special || is_special(products[i]);
  }
  if (special || big == 0.0f) {  // infinities and NaN as fp32 adds them; zeros keep c's sign
    for (int i = 0; i < n; ++i) c += products[i];
    return c;
  }
  // In units of the quantum 2^(E - 23): each addend below 2^24 of them.
  int e = exponent_of(big);
  double to_units = power_of_two(23 - e);
  double block = std::trunc(static_cast<double>(c) * to_units);
  for (int i = 0; i < n; ++i) block += std::trunc(static_cast<double>(products[i]) * to_units);
  return toward_zero(block * power_of_two(e - 23));
#endif
}

// The H100's accumulation, measured on hardware (bench/RESULTS.md, 2026-11-25): a whole k-slice
// (8 tf32 products, 16 f16 or bf16 ones) and the accumulator in one step. Each product is aligned
// by the sum of its operands' exponents (the exact product may be up to twice that), E is the
// largest of these and the accumulator's exponent, every addend is truncated below 2^(E - 25)
// (two bits past fp32's 23), the truncated addends are summed exactly and the sum is truncated to
// fp32. Programs for sm_90 and sm_90a use it (KILN_EMU_MMA_HOPPER) unless a model is named.
//
// One row of A or column of B of a slice, prepared once for the many outputs that share it: each
// operand as a double, its exponent (k_zero_exponent for a zero), and whether any is an infinity
// or NaN. A product with a zero operand has an exponent sum below -700, every other one -298 or
// more, so the largest sum tells whether any product is non-zero.
constexpr int k_zero_exponent = -1000;
struct SliceOperands {
  double value[16];
  int exponent[16];
  bool special;
};

inline void prepare_slice(SliceOperands& s, const float* x, int n) {
  s.special = false;
  for (int i = 0; i < n; ++i) {
    s.value[i] = static_cast<double>(x[i]);
    s.exponent[i] = x[i] == 0.0f ? k_zero_exponent : exponent_of(x[i]);
    s.special = s.special || is_special(x[i]);
  }
}

inline float slice_sum_hopper(float c, const SliceOperands& a, const SliceOperands& b, int n) {
  if (a.special || b.special || is_special(c)) {  // infinities and NaN as fp32 adds them
    for (int i = 0; i < n; ++i) c += static_cast<float>(a.value[i] * b.value[i]);
    return c;
  }
  int e = c == 0.0f ? 2 * k_zero_exponent : exponent_of(c);
  for (int i = 0; i < n; ++i) {
    int ei = a.exponent[i] + b.exponent[i];
    e = ei > e ? ei : e;
  }
  if (e < k_zero_exponent / 2) {  // every addend is zero: as fp32 adds them, keeping c's sign
    for (int i = 0; i < n; ++i) c += static_cast<float>(a.value[i] * b.value[i]);
    return c;
  }
  // In units of the quantum 2^(E - 25): each addend below 2^27 of them; the products are exact.
  double to_units = power_of_two(25 - e);
  double slice = std::trunc(static_cast<double>(c) * to_units);
  for (int i = 0; i < n; ++i) slice += std::trunc(a.value[i] * b.value[i] * to_units);
  return toward_zero(slice * power_of_two(e - 25));
}

inline float slice_sum_hopper(float c, const float* a, const float* b, int n) {
  SliceOperands sa, sb;
  prepare_slice(sa, a, n);
  prepare_slice(sb, b, n);
  return slice_sum_hopper(c, sa, sb, n);
}

}  // namespace kiln_emu

#endif  // KILN_EMU_SUM_H
