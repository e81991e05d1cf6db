// The shim's tensor-core sums (kiln_emu_sum.h), written for speed with exponents from bits and
// scaled units, against a plain transcription of their definitions (compiler/KERNELS.md,
// "Accumulation model") in double arithmetic and libm: bit for bit on millions of slices whose
// addends share an exponent window (so alignment truncates), span the whole range, sit among
// the subnormals, cancel exactly, or are zeros, infinities and NaN.
#include "kiln_emu_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

namespace {

using kiln_emu::to_bits;
using kiln_emu::to_float;

// mma.sync's step: the addends aligned to the largest one's exponent E, truncated below
// 2^(E - 23), summed exactly, the sum truncated to fp32.
float defined_block_sum(float c, const float* products, int n) {
  double big = std::fabs(static_cast<double>(c));
  bool finite = std::isfinite(c);
  for (int i = 0; i < n; ++i) {
    big = std::fmax(big, std::fabs(static_cast<double>(products[i])));
    finite = finite && std::isfinite(products[i]);
  }
  if (!finite || big == 0.0) {
    for (int i = 0; i < n; ++i) c += products[i];
    return c;
  }
  double quantum = std::ldexp(1.0, std::ilogb(big) - 23);
  double sum = std::trunc(static_cast<double>(c) / quantum) * quantum;
  for (int i = 0; i < n; ++i) sum += std::trunc(static_cast<double>(products[i]) / quantum) * quantum;
  float f = static_cast<float>(sum);
  if (std::fabs(static_cast<double>(f)) > std::fabs(sum)) f = std::nextafter(f, 0.0f);
  return f;
}

// The H100's step: products aligned on their operands' exponent sums, E the largest of these and
// c's exponent, addends truncated below 2^(E - 25), summed exactly, the sum truncated to fp32.
float defined_slice_sum(float c, const float* a, const float* b, int n) {
  bool finite = std::isfinite(c), any = c != 0.0f;
  int e = any ? std::ilogb(c) : 0;
  double products[16];
  for (int i = 0; i < n; ++i) {
    products[i] = static_cast<double>(a[i]) * static_cast<double>(b[i]);
    finite = finite && std::isfinite(products[i]);
    if (a[i] == 0.0f || b[i] == 0.0f) continue;
    int ei = std::ilogb(a[i]) + std::ilogb(b[i]);
    e = any ? std::max(e, ei) : ei;
    any = true;
  }
  if (!finite || !any) {
    for (int i = 0; i < n; ++i) c += static_cast<float>(products[i]);
    return c;
  }
  double quantum = std::ldexp(1.0, e - 25);
  double total = std::trunc(static_cast<double>(c) / quantum) * quantum;
  for (int i = 0; i < n; ++i) total += std::trunc(products[i] / quantum) * quantum;
  float f = static_cast<float>(total);
  if (std::fabs(static_cast<double>(f)) > std::fabs(total)) f = std::nextafter(f, 0.0f);
  return f;
}

// Random floats of a few kinds, as the tensor cores' operands and sums meet them.
class Floats {
 public:
  explicit Floats(uint64_t seed) : m_rng(seed) {}

  // A window of exponents for one slice: narrow (alignment truncates) at a random place, the
  // subnormals and their edge, or the whole range.
  void new_slice() {
    int kind = pick(4);
    if (kind == 0) {
      m_low = 1, m_high = 254;
    } else if (kind == 1) {  // subnormals, alone or beside the smallest normals
      m_low = 0, m_high = pick(2) ? 1 : 12;
    } else {
      int center = 1 + pick(254);
      m_low = std::max(0, center - 1 - pick(30));
      m_high = std::min(254, center + pick(30));
    }
    m_mantissa_mask = pick(3) == 0 ? 0x7fffffu : pick(2) ? 0x7fe000u : 0x7f0000u;  // fp32, tf32, bf16
  }

  float next() {
    int kind = pick(100);
    if (kind < 4) return pick(2) ? 0.0f : -0.0f;
    if (kind == 4) return pick(2) ? INFINITY : -INFINITY;
    if (kind == 5) return NAN;
    uint32_t exponent = static_cast<uint32_t>(m_low + pick(m_high - m_low + 1));
    uint32_t bits = (static_cast<uint32_t>(pick(2)) << 31) | (exponent << 23) |
                    (static_cast<uint32_t>(m_rng()) & m_mantissa_mask);
    return to_float(bits);
  }

  int pick(int n) { return static_cast<int>(m_rng() % static_cast<uint64_t>(n)); }

  // A subnormal (m 2^-149, m of 1 to 23 bits) of either sign.
  float subnormal() {
    uint32_t mantissa = static_cast<uint32_t>(m_rng()) & 0x7fffffu >> pick(23);
    return to_float((static_cast<uint32_t>(pick(2)) << 31) | (mantissa ? mantissa : 1u));
  }

 private:
  std::mt19937_64 m_rng;
  int m_low = 1, m_high = 254;
  uint32_t m_mantissa_mask = 0x7fffffu;
};

// `x` scaled to exponent `e` where it is finite and non-zero.
float with_exponent(float x, int e) {
  return std::isfinite(x) && x != 0.0f ? std::ldexp(x, e - std::ilogb(x)) : x;
}

// Equal bits, or both NaN (the payload of a NaN that arithmetic made is the FPU's business).
bool same(float x, float y) { return to_bits(x) == to_bits(y) || (std::isnan(x) && std::isnan(y)); }

std::string show(float x) {
  char text[64];
  std::snprintf(text, sizeof text, "%a (0x%08x)", static_cast<double>(x), to_bits(x));
  return text;
}

TEST(EmulatorSums, TheBlockSumIsItsDefinitionBitForBit) {
  Floats floats(1);
  int mismatches = 0, truncated = 0;
  for (int trial = 0; trial < 1000000 && mismatches < 5; ++trial) {
    floats.new_slice();
    int n = floats.pick(2) ? 4 : 8;
    float products[8], c = floats.next();
    for (int i = 0; i < n; ++i) products[i] = floats.next();
    if (floats.pick(4) == 0) products[n - 1] = -products[0];  // exact cancellation
    if (floats.pick(8) == 0) c = floats.pick(2) ? 0.0f : -0.0f;
    float fast = kiln_emu::block_sum(c, products, n), defined = defined_block_sum(c, products, n);
    float nearest = c;
    for (int i = 0; i < n; ++i) nearest += products[i];
    truncated += !same(defined, nearest);
    if (!same(fast, defined)) {
      ++mismatches;
      ADD_FAILURE() << "trial " << trial << ": c " << show(c) << ", " << n << " products from "
                    << show(products[0]) << ": " << show(fast) << ", defined " << show(defined);
    }
  }
  EXPECT_GT(truncated, 100000) << "the slices exercise the truncation";
}

TEST(EmulatorSums, TheHopperSliceSumIsItsDefinitionBitForBit) {
  Floats floats(2);
  int mismatches = 0, truncated = 0, zeros = 0;
  for (int trial = 0; trial < 1000000 && mismatches < 5; ++trial) {
    floats.new_slice();
    int n = floats.pick(2) ? 8 : 16;
    float a[16], b[16], c = floats.next();
    for (int i = 0; i < n; ++i) a[i] = floats.next(), b[i] = floats.next();
    if (floats.pick(4) == 0) a[n - 1] = a[0], b[n - 1] = -b[0];  // exact cancellation
    if (floats.pick(8) == 0) c = floats.pick(2) ? 0.0f : -0.0f;
    if (floats.pick(8) == 0) {  // subnormal A times large B: E is a subnormal's exponent sum
      for (int i = 0; i < n; ++i) a[i] = floats.subnormal(), b[i] = with_exponent(b[i], 100);
      c = with_exponent(c, -140);
    }
    if (floats.pick(16) == 0)  // every product zero
      for (int i = 0; i < n; ++i) (floats.pick(2) ? a[i] : b[i]) = floats.pick(2) ? 0.0f : -0.0f;
    float fast = kiln_emu::slice_sum_hopper(c, a, b, n), defined = defined_slice_sum(c, a, b, n);
    // The prepared rows and columns that wgmma and mma.sync reuse give the same.
    kiln_emu::SliceOperands row, column;
    kiln_emu::prepare_slice(row, a, n);
    kiln_emu::prepare_slice(column, b, n);
    float prepared = kiln_emu::slice_sum_hopper(c, row, column, n);
    float nearest = c;
    for (int i = 0; i < n; ++i) nearest += static_cast<float>(static_cast<double>(a[i]) * b[i]);
    truncated += !same(defined, nearest);
    zeros += defined == 0.0f;
    if (!same(fast, defined) || !same(prepared, defined)) {
      ++mismatches;
      ADD_FAILURE() << "trial " << trial << ": c " << show(c) << ", " << n
                    << " products from a " << show(a[0]) << " b " << show(b[0]) << ": "
                    << show(fast) << " (prepared " << show(prepared) << "), defined "
                    << show(defined);
    }
  }
  EXPECT_GT(truncated, 100000) << "the slices exercise the truncation";
  EXPECT_GT(zeros, 10000) << "and zero sums of both signs";
}

// Hand-picked edges: the subnormals' exponents (ilogb from the leading bit), signed zeros from
// cancellation and from zeros alone, an overflow truncated to the largest float.
TEST(EmulatorSums, EdgesMatchTheDefinition) {
  const float max = 3.40282347e38f, tiny = to_float(1), sub = to_float(0x00400001);
  struct Case {
    float c;
    float a[8], b[8];
  };
  const Case cases[] = {
      {-0.0f, {0, 0, 0, 0, 0, 0, 0, 0}, {-1, 1, -1, 1, -1, 1, -1, 1}},
      {-0.0f, {-0.0f, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1}},
      {-0.0f, {1, -1, 0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0, 0, 0}},
      {-tiny, {tiny, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0}},
      {tiny, {tiny, sub, -sub, tiny, 0, 0, 0, 0}, {sub, tiny, tiny, -tiny, 0, 0, 0, 0}},
      {max, {max, max, 0, 0, 0, 0, 0, 0}, {1, 0.5f, 0, 0, 0, 0, 0, 0}},
      {-max, {max, 1, 0, 0, 0, 0, 0, 0}, {-1, -1, 0, 0, 0, 0, 0, 0}},
      {1, {1, 1, 1, 1, 1, 1, 1, 1}, {0x1p-24f, 0x1p-24f, 0x1p-24f, 0x1p-24f, 0x1p-24f, 0x1p-24f,
                                     0x1p-24f, 0x1p-24f}},
      {0, {0x1p-126f, 0x1p100f, 0, 0, 0, 0, 0, 0}, {0x1p-23f, 0x1p27f, 0, 0, 0, 0, 0, 0}},
  };
  for (const Case& k : cases) {
    for (int n : {4, 8}) {
      float products[8];
      for (int i = 0; i < n; ++i) products[i] = k.a[i] * k.b[i];
      EXPECT_TRUE(same(kiln_emu::block_sum(k.c, products, n), defined_block_sum(k.c, products, n)))
          << "block of " << n << " from c " << show(k.c) << ": "
          << show(kiln_emu::block_sum(k.c, products, n)) << ", defined "
          << show(defined_block_sum(k.c, products, n));
      EXPECT_TRUE(same(kiln_emu::slice_sum_hopper(k.c, k.a, k.b, n), defined_slice_sum(k.c, k.a, k.b, n)))
          << "slice of " << n << " from c " << show(k.c) << ": "
          << show(kiln_emu::slice_sum_hopper(k.c, k.a, k.b, n)) << ", defined "
          << show(defined_slice_sum(k.c, k.a, k.b, n));
    }
  }
  // Signed zeros: all-negative zero addends keep -0, a cancellation gives +0.
  float negative_zeros[4] = {-0.0f, -0.0f, -0.0f, -0.0f};
  EXPECT_EQ(to_bits(kiln_emu::block_sum(-0.0f, negative_zeros, 4)), 0x80000000u);
  float a[2] = {1, -1}, b[2] = {1, 1};
  EXPECT_EQ(to_bits(kiln_emu::slice_sum_hopper(-0.0f, a, b, 2)), 0u);
  // Subnormal exponents, from the leading bit.
  EXPECT_EQ(kiln_emu::exponent_of(tiny), -149);
  EXPECT_EQ(kiln_emu::exponent_of(sub), -127);
  EXPECT_EQ(kiln_emu::exponent_of(-max), 127);
}

}  // namespace
