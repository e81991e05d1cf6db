// Bit patterns of the tf32, bf16 and fp16 roundings, checked by hand, and the tf32x3 split.
#include "reference/rounding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace kiln::reference {
namespace {

TEST(Tf32Rna, KeepsValuesThatAreAlreadyTf32) {
  EXPECT_EQ(tf32_rna_bits(0x3f800000u), 0x3f800000u);  // 1.0
  EXPECT_EQ(tf32_rna_bits(0x3f802000u), 0x3f802000u);
  EXPECT_EQ(tf32_rna_bits(0x80000000u), 0x80000000u);  // -0
}

TEST(Tf32Rna, RoundsBelowHalfDownAndAboveHalfUp) {
  EXPECT_EQ(tf32_rna_bits(0x3f800fffu), 0x3f800000u);
  EXPECT_EQ(tf32_rna_bits(0x3f801001u), 0x3f802000u);
  EXPECT_EQ(tf32_rna_bits(0xbf800fffu), 0xbf800000u);
}

TEST(Tf32Rna, RoundsTiesAwayFromZeroNotToEven) {
  // Kept LSB even: nearest-even would stay at 1.0, rna goes away from zero.
  EXPECT_EQ(tf32_rna_bits(0x3f801000u), 0x3f802000u);
  EXPECT_EQ(tf32_rna_bits(0xbf801000u), 0xbf802000u);
  EXPECT_EQ(tf32_rna_bits(0x3f803000u), 0x3f804000u);
  EXPECT_EQ(round_tf32_rna(1.0f + 0x1p-11f), 1.0f + 0x1p-10f);
}

TEST(Tf32Rna, CarriesIntoTheExponent) {
  EXPECT_EQ(tf32_rna_bits(0x3fffffffu), 0x40000000u);  // just below 2.0 -> 2.0
  EXPECT_EQ(tf32_rna_bits(0x3ffff000u), 0x40000000u);  // the tie below 2.0 -> 2.0
}

TEST(Tf32Rna, OverflowsToInfinityAndKeepsInfinities) {
  EXPECT_EQ(tf32_rna_bits(0x7f7fffffu), 0x7f800000u);  // FLT_MAX rounds up past tf32's max
  EXPECT_EQ(tf32_rna_bits(0x7f7ff000u), 0x7f800000u);  // tie at the top goes away: infinity
  EXPECT_EQ(tf32_rna_bits(0x7f7fefffu), 0x7f7fe000u);  // tf32's largest finite value
  EXPECT_EQ(tf32_rna_bits(0xff7fffffu), 0xff800000u);
  EXPECT_EQ(tf32_rna_bits(0x7f800000u), 0x7f800000u);
  EXPECT_EQ(tf32_rna_bits(0xff800000u), 0xff800000u);
}

TEST(Tf32Rna, TurnsEveryNanIntoTheCanonicalNan) {
  EXPECT_EQ(tf32_rna_bits(0x7fc00000u), k_canonical_nan_f32);
  EXPECT_EQ(tf32_rna_bits(0x7f800001u), k_canonical_nan_f32);  // payload only in dropped bits
  EXPECT_EQ(tf32_rna_bits(0xffc00123u), k_canonical_nan_f32);
}

TEST(Tf32Rna, RoundsSubnormalsAndCarriesIntoTheSmallestNormal) {
  EXPECT_EQ(tf32_rna_bits(0x00000fffu), 0x00000000u);
  EXPECT_EQ(tf32_rna_bits(0x00001000u), 0x00002000u);
  EXPECT_EQ(tf32_rna_bits(0x007ff000u), 0x00800000u);
  EXPECT_EQ(tf32_rna_bits(0x80001000u), 0x80002000u);
}

TEST(Tf32Truncate, DropsTheLowThirteenBits) {
  EXPECT_EQ(tf32_truncate_bits(0x3f801fffu), 0x3f800000u);
  EXPECT_EQ(tf32_truncate_bits(0xbfffffffu), 0xbfffe000u);
  EXPECT_EQ(tf32_truncate_bits(0x7f7fffffu), 0x7f7fe000u);  // never overflows
  EXPECT_EQ(tf32_truncate_bits(0x00001fffu), 0x00000000u);
  EXPECT_EQ(tf32_truncate_bits(0x7f800000u), 0x7f800000u);
  EXPECT_EQ(tf32_truncate_bits(0x7f800001u), k_canonical_nan_f32);
  EXPECT_EQ(truncate_tf32(1.0f + 0x1p-11f), 1.0f);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_from_float(bits_float(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(bf16_from_float(bits_float(0x3f818000u)), 0x3f82);  // tie, odd goes up
  EXPECT_EQ(bf16_from_float(bits_float(0x3f808001u)), 0x3f81);
  EXPECT_EQ(bf16_from_float(bits_float(0xbf808001u)), 0xbf81);
  EXPECT_EQ(bf16_from_float(bits_float(0x3fffffffu)), 0x4000);  // carry into the exponent
}

TEST(Bf16, HandlesOverflowInfinityNanAndSubnormals) {
  EXPECT_EQ(bf16_from_float(bits_float(0x7f7fffffu)), 0x7f80);
  EXPECT_EQ(bf16_from_float(bits_float(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(bf16_from_float(INFINITY), 0x7f80);
  EXPECT_EQ(bf16_from_float(-INFINITY), 0xff80);
  EXPECT_EQ(bf16_from_float(NAN), k_canonical_nan_16);
  EXPECT_EQ(bf16_from_float(bits_float(0x7f800001u)), k_canonical_nan_16);
  EXPECT_EQ(bf16_from_float(bits_float(0x00008000u)), 0x0000);
  EXPECT_EQ(bf16_from_float(bits_float(0x00018000u)), 0x0002);
  EXPECT_EQ(float_from_bf16(0x3f81), 1.0f + 0x1p-7f);
}

TEST(Bf16, EveryFiniteBf16RoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    auto bits = static_cast<uint16_t>(b);
    if ((bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0) continue;  // NaN
    ASSERT_EQ(bf16_from_float(float_from_bf16(bits)), bits) << std::hex << b;
  }
}

TEST(F16, RoundsNormalsToNearestEven) {
  EXPECT_EQ(f16_from_float(1.0f), 0x3c00);
  EXPECT_EQ(f16_from_float(1.0f + 0x1p-11f), 0x3c00);             // tie, even stays
  EXPECT_EQ(f16_from_float(1.0f + 3 * 0x1p-11f), 0x3c02);         // tie, odd goes up
  EXPECT_EQ(f16_from_float(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie
  EXPECT_EQ(f16_from_float(-1.5f), 0xbe00);
  EXPECT_EQ(f16_from_float(2.0f - 0x1p-12f), 0x4000);  // carry into the exponent
}

TEST(F16, OverflowsAtTheMidpointAboveTheLargestHalf) {
  EXPECT_EQ(f16_from_float(65504.0f), 0x7bff);
  EXPECT_EQ(f16_from_float(65519.0f), 0x7bff);
  EXPECT_EQ(f16_from_float(65520.0f), 0x7c00);
  EXPECT_EQ(f16_from_float(-65520.0f), 0xfc00);
  EXPECT_EQ(f16_from_float(1e10f), 0x7c00);
  EXPECT_EQ(f16_from_float(INFINITY), 0x7c00);
  EXPECT_EQ(f16_from_float(NAN), k_canonical_nan_16);
}

TEST(F16, RoundsSubnormalsToNearestEven) {
  EXPECT_EQ(f16_from_float(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(f16_from_float(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_from_float(-0x1p-24f), 0x8001);
  EXPECT_EQ(f16_from_float(0x1p-25f), 0x0000);  // tie between 0 and 2^-24: even
  EXPECT_EQ(f16_from_float(bits_float(0x33000001u)), 0x0001);
  EXPECT_EQ(f16_from_float(3 * 0x1p-25f), 0x0002);  // tie between 1 and 2 units: even
  EXPECT_EQ(f16_from_float(0x1p-14f - 0x1p-25f), 0x0400);  // tie up into the smallest normal
  EXPECT_EQ(f16_from_float(0x1p-26f), 0x0000);
  EXPECT_EQ(f16_from_float(-0.0f), 0x8000);
}

TEST(F16, DecodesEveryClassOfBitPattern) {
  EXPECT_EQ(float_from_f16(0x0001), 0x1p-24f);
  EXPECT_EQ(float_from_f16(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(float_from_f16(0x7bff), 65504.0f);
  EXPECT_EQ(float_bits(float_from_f16(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(float_from_f16(0x7c00)));
  EXPECT_TRUE(std::isnan(float_from_f16(0x7e00)));
}

TEST(F16, EveryFiniteHalfRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    auto bits = static_cast<uint16_t>(b);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0) continue;  // NaN
    ASSERT_EQ(f16_from_float(float_from_f16(bits)), bits) << std::hex << b;
  }
}

#ifdef __FLT16_MAX__
TEST(F16, AgreesWithTheCompilersConversionOnRandomFloats) {
  std::mt19937 engine(12345);
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns with exponents around the half range, finite only.
    uint32_t bits = (engine() & 0x80ffffffu) | ((96u + engine() % 48u) << 23);
    float x = bits_float(bits);
    auto expected = static_cast<_Float16>(x);
    uint16_t expected_bits = 0;
    static_assert(sizeof expected == sizeof expected_bits);
    std::memcpy(&expected_bits, &expected, sizeof expected_bits);
    ASSERT_EQ(f16_from_float(x), expected_bits) << std::hex << bits;
  }
}
#endif

TEST(Tf32x3Split, BothHalvesAreTf32AndTheirSumIsWithin2ToTheMinus22) {
  std::mt19937_64 engine(7);
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = static_cast<uint32_t>(engine()) & 0x807fffffu;
    bits |= (64u + static_cast<uint32_t>(engine() % 128u)) << 23;  // exponents 2^-63..2^64
    float x = bits_float(bits);
    Tf32Split split = split_tf32x3(x);
    ASSERT_EQ(float_bits(split.big) & 0x1fffu, 0u);
    ASSERT_EQ(float_bits(split.small) & 0x1fffu, 0u);
    double sum = static_cast<double>(split.big) + static_cast<double>(split.small);
    ASSERT_LE(std::fabs(sum - x), std::ldexp(std::fabs(static_cast<double>(x)), -22)) << x;
  }
}

TEST(Tf32x3Split, RecoversBitsThatPlainTf32Loses) {
  float x = 1.0f + 0x1p-12f;
  Tf32Split split = split_tf32x3(x);
  EXPECT_EQ(split.big, 1.0f);
  EXPECT_EQ(split.small, 0x1p-12f);
  Tf32Split one = split_tf32x3(1.0f);
  EXPECT_EQ(tf32x3_accumulate(0.0f, split, one), x);
  EXPECT_EQ(round_tf32_rna(x) * round_tf32_rna(1.0f), 1.0f);  // what plain tf32 gives
}

// An infinity splits into ±1 and itself, so that no cross product is inf x 0: times a tf32-exact
// value (small part 0) it is the infinity, times 0 NaN, times the other infinity the product's.
// A NaN splits into ±1 and NaN: its small part makes every product with it NaN.
TEST(Tf32x3Split, AnInfinitySplitsIntoOneAndItselfAndMultipliesAsInFp32) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {inf, -inf}) {
    Tf32Split split = split_tf32x3(x);
    EXPECT_EQ(split.big, std::copysign(1.0f, x));
    EXPECT_EQ(split.small, x);
    for (float y : {0.5f, -3.0f, 1.0f + 0x1p-12f, inf, -inf}) {
      EXPECT_EQ(tf32x3_accumulate(0.0f, split, split_tf32x3(y)), x * y) << x << " x " << y;
      EXPECT_EQ(tf32x3_accumulate(0.0f, split_tf32x3(y), split), x * y) << y << " x " << x;
    }
    EXPECT_TRUE(std::isnan(tf32x3_accumulate(0.0f, split, split_tf32x3(0.0f))));
    EXPECT_TRUE(std::isnan(tf32x3_accumulate(0.0f, split, split_tf32x3(std::nanf("")))));
  }
  Tf32Split nan = split_tf32x3(std::nanf(""));
  EXPECT_EQ(nan.big, 1.0f);
  EXPECT_TRUE(std::isnan(nan.small));
  for (float y : {0.0f, 2.0f, 1.0f + 0x1p-12f, inf}) {
    EXPECT_TRUE(std::isnan(tf32x3_accumulate(0.0f, nan, split_tf32x3(y)))) << y;
    EXPECT_TRUE(std::isnan(tf32x3_accumulate(0.0f, split_tf32x3(y), nan))) << y;
  }
}

TEST(FmaF32, RoundsOnceWhereDoubleRoundingWouldGoWrong) {
  // a * b = 64 + 4688 * 2^-40: the double sum 2^30 + 64 would be an fp32 tie (to even: 2^30);
  // the exact sum lies just above it, so a single rounding gives 2^30 + 128.
  float a = 64.0f * (1.0f + 2896 * 0x1p-23f);
  float b = 1.0f - 2895 * 0x1p-23f;
  float c = 0x1p30f;
  EXPECT_EQ(static_cast<float>(static_cast<double>(a) * b + c), 0x1p30f);  // twice rounded
  EXPECT_EQ(fma_f32(a, b, c), 0x1p30f + 128.0f);
  EXPECT_EQ(std::fma(a, b, c), 0x1p30f + 128.0f);
}

TEST(FmaF32, AgreesWithTheLibraryFmaOnRandomOperands) {
  std::mt19937 engine(99);
  auto random_float = [&](uint32_t exponent_lo, uint32_t exponent_span) {
    uint32_t bits = (engine() & 0x807fffffu) | ((exponent_lo + engine() % exponent_span) << 23);
    return bits_float(bits);
  };
  for (int i = 0; i < 300000; ++i) {
    float a = random_float(100, 50);
    float b = random_float(100, 50);
    float c = random_float(80, 90);
    ASSERT_EQ(float_bits(fma_f32(a, b, c)), float_bits(std::fma(a, b, c)))
        << a << " * " << b << " + " << c;
  }
}

TEST(FmaF32, AgreesWithTheLibraryFmaWhenTheDoubleSumIsAnFp32Tie) {
  // a = 2^e (1 + (n + d) 2^-23) and b = 1 - n 2^-23 with n (n + d) just off d 2^23 make a * b
  // = 2^e (1 + tiny): half an ulp of c = 2^(e + 24) (1 + r 2^-23) plus or minus far less than a
  // double ulp of c, the case where rounding through double goes wrong.
  std::mt19937 engine(5);
  int ties = 0;
  for (int d = 1; d <= 200; ++d) {
    auto n = static_cast<int64_t>(std::sqrt(d * 8388608.0));
    for (int64_t m = n - 3; m <= n + 3; ++m) {
      if (m <= 0 || m + d >= 8388608) continue;
      for (int trial = 0; trial < 20; ++trial) {
        int e = static_cast<int>(engine() % 60) - 40;
        float a = std::ldexp(1.0f + static_cast<float>(m + d) * 0x1p-23f, e);
        float b = 1.0f - static_cast<float>(m) * 0x1p-23f;
        float c = std::ldexp(1.0f + static_cast<float>(engine() % 8388608) * 0x1p-23f, e + 24);
        if (engine() & 1) c = -c, a = -a;
        float naive = static_cast<float>(static_cast<double>(a) * b + c);
        ties += naive != std::fma(a, b, c) ? 1 : 0;
        ASSERT_EQ(float_bits(fma_f32(a, b, c)), float_bits(std::fma(a, b, c)))
            << a << " * " << b << " + " << c;
      }
    }
  }
  EXPECT_GT(ties, 100);  // the slow path really ran
}

TEST(FmaF32, PropagatesInfinityAndNan) {
  EXPECT_TRUE(std::isinf(fma_f32(INFINITY, 1.0f, 1.0f)));
  EXPECT_TRUE(std::isnan(fma_f32(INFINITY, 0.0f, 1.0f)));
  EXPECT_TRUE(std::isnan(fma_f32(NAN, 1.0f, 1.0f)));
  EXPECT_TRUE(std::isinf(fma_f32(0x1p127f, 4.0f, 0.0f)));  // overflows fp32 only
}

}  // namespace
}  // namespace kiln::reference
