// Seeded random inputs, storage rounding and the error metrics.
#include "reference/metrics.h"
#include "reference/tensor.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kiln::reference {
namespace {

using testing::parse_or_die;

TEST(Rng, SameSeedGivesTheSameStream) {
  Rng a(42);
  Rng b(42);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.next_symmetric(), b.next_symmetric());
}

TEST(Rng, DifferentSeedsGiveDifferentStreams) {
  Rng a(1);
  Rng b(2);
  int equal = 0;
  for (int i = 0; i < 100; ++i) equal += a.next_unit() == b.next_unit() ? 1 : 0;
  EXPECT_LT(equal, 3);
}

TEST(Rng, FirstValueIsPinnedAcrossPlatforms) {
  // std::mt19937_64 is fully specified: its 10000th output for the default seed is fixed by the
  // standard, so the mapping on top of it is portable. Seed 5489 is the default seed.
  std::mt19937_64 engine(5489u);
  engine.discard(9999);
  EXPECT_EQ(engine(), 9981545732273789042ull);
  Rng rng(5489u);
  std::mt19937_64 first(5489u);
  EXPECT_EQ(rng.next_unit(), static_cast<double>(first() >> 11) * 0x1p-53);
}

TEST(Rng, SymmetricValuesStayInMinusOneToOne) {
  Rng rng(3);
  double lo = 1.0;
  double hi = -1.0;
  for (int i = 0; i < 100000; ++i) {
    double x = rng.next_symmetric();
    ASSERT_GE(x, -1.0);
    ASSERT_LT(x, 1.0);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_LT(lo, -0.99);
  EXPECT_GT(hi, 0.99);
}

TEST(RandomInputs, AreRoundedToEachInputsDtypeAndDeterministic) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input a: f32[4, 8]\n input b: f16[4, 8]\n input c: bf16[4, 8]\n"
      " y = add(a, cast(add(b, cast(c, to=f16)), to=f32))\n output y\n}\n");
  std::vector<Tensor> inputs = random_inputs(graph, 9);
  ASSERT_EQ(inputs.size(), 3u);
  EXPECT_EQ(inputs[1].dtype, ir::DType::f16);
  for (size_t t = 0; t < 3; ++t) {
    ASSERT_EQ(inputs[t].values.size(), 32u);
    for (double v : inputs[t].values) ASSERT_EQ(v, store_value(inputs[t].dtype, v));
  }
  std::vector<Tensor> again = random_inputs(graph, 9);
  for (size_t t = 0; t < 3; ++t) EXPECT_EQ(inputs[t].values, again[t].values);
  EXPECT_NE(random_inputs(graph, 10)[0].values, inputs[0].values);
}

TEST(StoreValue, RoundsThroughFp32ToTheDtype) {
  EXPECT_EQ(store_value(ir::DType::f32, 1.0 + 0x1p-30), 1.0);
  EXPECT_EQ(store_value(ir::DType::bf16, 1.0 + 0x1p-8), 1.0);
  EXPECT_EQ(store_value(ir::DType::f16, 1.0 + 3 * 0x1p-11), 1.0 + 0x1p-9);
  EXPECT_TRUE(std::isinf(store_value(ir::DType::f16, 70000.0)));
}

TEST(Metrics, RelativeL2OfKnownVectors) {
  EXPECT_DOUBLE_EQ(relative_l2({3.0, 4.0}, {3.0, 4.0}), 0.0);
  EXPECT_DOUBLE_EQ(relative_l2({3.0, 5.0}, {3.0, 4.0}), 1.0 / 5.0);
  EXPECT_DOUBLE_EQ(relative_l2({0.0, 0.0}, {3.0, 4.0}), 1.0);
}

TEST(Metrics, RelativeL2FallsBackToAbsoluteForAZeroReference) {
  EXPECT_EQ(relative_l2({0.0, 0.0}, {0.0, 0.0}), 0.0);
  EXPECT_DOUBLE_EQ(relative_l2({3.0, 4.0}, {0.0, 0.0}), 5.0);
}

TEST(Metrics, MaxAbsErrorAndNanPropagation) {
  EXPECT_DOUBLE_EQ(max_abs_error({1.0, -2.0, 3.0}, {1.5, 2.0, 3.0}), 4.0);
  double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(max_abs_error({nan, 1.0}, {0.0, 1.0})));
  EXPECT_TRUE(std::isnan(relative_l2({nan, 1.0}, {0.0, 1.0})));
  EXPECT_TRUE(std::isnan(relative_l2({0.0, 1.0}, {nan, 1.0})));
  // A NaN where the reference has one matches, as equal infinities do.
  EXPECT_EQ(relative_l2({nan, 1.0}, {nan, 1.0}), 0.0);
  EXPECT_EQ(max_abs_error({nan, 1.0}, {nan, 1.5}), 0.5);
}

}  // namespace
}  // namespace kiln::reference
