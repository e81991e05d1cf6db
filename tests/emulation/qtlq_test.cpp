// The qtlq demo's property: TF32 (high) destroys the smallest eigenvalues of diag(Q^T L Q),
// highest and tf32x3 keep them.
#include "examples/qtlq/qtlq.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace kiln::examples::qtlq {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

TEST(QtlqDemo, OrthogonalQIsOrthogonalToFp64Accuracy) {
  std::vector<double> q = random_orthogonal(0);
  double worst = 0.0;
  for (int i = 0; i < k_size; ++i)
    for (int j = 0; j < k_size; ++j) {
      double dot = 0.0;
      for (int r = 0; r < k_size; ++r) dot += q[r * k_size + i] * q[r * k_size + j];
      worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, 1e-13);
}

TEST(QtlqDemo, SpectrumSpansTopToTail) {
  std::vector<double> lambda = eigenvalues();
  ASSERT_EQ(lambda.size(), 128u);
  EXPECT_EQ(lambda[0], 2.5e6);
  EXPECT_DOUBLE_EQ(lambda[4], 2.3e6);
  EXPECT_DOUBLE_EQ(lambda[5], 2.25e6);
  EXPECT_NEAR(lambda[127], 0.1, 1e-15);
}

// The same story from the emulated CUDA kernels and from the CPU target, whose modes round as
// the GPU's do.
class QtlqDemoOn : public ::testing::TestWithParam<Device> {};

TEST_P(QtlqDemoOn, HighDestroysTheSmallEigenvaluesWhileHighestAndTf32x3KeepThem) {
  auto rows = run_demo(0, 90, GetParam());
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 128u);
  std::vector<double> highest, high, tf32x3;
  for (int i = 120; i < 128; ++i) {  // the eight smallest, 0.1 to 0.26
    const Row& r = (*rows)[static_cast<size_t>(i)];
    highest.push_back(std::fabs(r.highest - r.truth) / r.truth);
    high.push_back(std::fabs(r.high - r.truth) / r.truth);
    tf32x3.push_back(std::fabs(r.tf32x3 - r.truth) / r.truth);
  }
  EXPECT_GT(median(high), 1.0);  // far above 100%
  EXPECT_LT(median(highest), 0.1);
  EXPECT_LT(median(tf32x3), 0.1);
  // The top of the spectrum survives every mode.
  const Row& top = (*rows)[0];
  EXPECT_LT(std::fabs(top.high - top.truth) / top.truth, 1e-3);
  EXPECT_LT(std::fabs(top.highest - top.truth) / top.truth, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(QtlqDemo, QtlqDemoOn, ::testing::Values(Device::emulated, Device::cpu),
                         [](const auto& info) {
                           return info.param == Device::cpu ? "cpu_target" : "emulated";
                         });

}  // namespace
}  // namespace kiln::examples::qtlq
