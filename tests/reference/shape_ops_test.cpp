// The transformer ops in fp64 against hand-computed values: reductions, norms, layout ops, the
// new elementwise ops and a 4-D matmul with broadcast batch dims.
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::reference {
namespace {

using testing::f32;
using testing::parse_or_die;
using testing::run_values;

const char* k_header = "graph g {\n input x: f32[2, 3]\n";

std::vector<double> on_x(const std::string& expr) {
  ir::Graph graph = parse_or_die(std::string(k_header) + " y = " + expr + "\n output y\n}\n");
  return run_values(graph, {f32({2, 3}, {1, -2, 3, 4, 5, -6})});
}

TEST(Fp64ShapeOps, Reductions) {
  EXPECT_EQ(on_x("sum(x)"), (std::vector<double>{2, 3}));
  EXPECT_EQ(on_x("sum(x, axis=0, keepdim=true)"), (std::vector<double>{5, 3, -3}));
  EXPECT_EQ(on_x("mean(x, axis=0)"), (std::vector<double>{2.5, 1.5, -1.5}));
  EXPECT_EQ(on_x("max(x)"), (std::vector<double>{3, 5}));
  EXPECT_EQ(on_x("max(x, axis=-2)"), (std::vector<double>{4, 5, 3}));
}

TEST(Fp64ShapeOps, ElementwiseAdditions) {
  EXPECT_EQ(on_x("abs(x)"), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(on_x("pow(x, 2.0)"), (std::vector<double>{1, 4, 9, 16, 25, 36}));
  EXPECT_EQ(on_x("maximum(x, 0.5)"), (std::vector<double>{1, 0.5, 3, 4, 5, 0.5}));
  EXPECT_EQ(on_x("minimum(x, 0.5)"), (std::vector<double>{0.5, -2, 0.5, 0.5, 0.5, -6}));
  auto s = on_x("sqrt(abs(x))");
  EXPECT_DOUBLE_EQ(s[1], std::sqrt(2.0));
  auto r = on_x("rsqrt(abs(x))");
  EXPECT_DOUBLE_EQ(r[3], 0.5);
}

TEST(Fp64ShapeOps, CosAndSinInRadians) {
  const double x[] = {1, -2, 3, 4, 5, -6};
  std::vector<double> c = on_x("cos(x)"), s = on_x("sin(x)");
  ASSERT_EQ(c.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_DOUBLE_EQ(c[i], std::cos(x[i])) << i;
    EXPECT_DOUBLE_EQ(s[i], std::sin(x[i])) << i;
  }
  // sin(-x) = -sin(x), cos(3) < 0: radians, not degrees.
  EXPECT_DOUBLE_EQ(s[1], -std::sin(2.0));
  EXPECT_LT(c[2], -0.98);
}

// erf and log against libm, and both gelu forms against their closed forms evaluated apart
// (Python's math: 0.5 x (1 + erf(x / sqrt 2)) and 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))).
TEST(Fp64ShapeOps, ErfLogAndBothGelus) {
  const double x[] = {1, -2, 3, 4, 5, -6};
  std::vector<double> e = on_x("erf(x)"), l = on_x("log(abs(x))");
  ASSERT_EQ(e.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_DOUBLE_EQ(e[i], std::erf(x[i])) << i;
    EXPECT_DOUBLE_EQ(l[i], std::log(std::fabs(x[i]))) << i;
  }
  std::vector<double> exact = on_x("gelu(x)"), tanh = on_x("gelu(x, approximate=\"tanh\")");
  EXPECT_NEAR(exact[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(tanh[0], 0.8411919906082768, 1e-15);
  EXPECT_NEAR(exact[1], -0.04550026389635842, 1e-15);
  EXPECT_NEAR(tanh[1], -0.04540230591222494, 1e-15);
  EXPECT_NEAR(tanh[2], 2.996362607918227, 1e-14);
  EXPECT_NEAR(tanh[5], -8.43964897967453e-11, 1e-22);
  EXPECT_NEAR(exact[5], -5.919525869479969e-09, 1e-20);
}

TEST(Fp64ShapeOps, LayoutOps) {
  EXPECT_EQ(on_x("permute(x, dims=[1, 0])"), (std::vector<double>{1, 4, -2, 5, 3, -6}));
  EXPECT_EQ(on_x("reshape(x, shape=[3, 2])"), (std::vector<double>{1, -2, 3, 4, 5, -6}));
  EXPECT_EQ(on_x("slice(x, start=1, end=3)"), (std::vector<double>{-2, 3, 5, -6}));
  EXPECT_EQ(on_x("slice(x, axis=0, start=1, end=2)"), (std::vector<double>{4, 5, -6}));
  EXPECT_EQ(on_x("concat(slice(x, start=2, end=3), x, axis=-1)"),
            (std::vector<double>{3, 1, -2, 3, -6, 4, 5, -6}));
  EXPECT_EQ(on_x("concat(x, neg(x), axis=0)"),
            (std::vector<double>{1, -2, 3, 4, 5, -6, -1, 2, -3, -4, -5, 6}));
}

TEST(Fp64ShapeOps, RmsNormByHand) {
  // Row [3, 4]: mean square 12.5, so x / sqrt(12.5 + eps) * w.
  ir::Graph graph = parse_or_die(
      "graph g {\n input x: f32[1, 2]\n input w: f32[2]\n y = rms_norm(x, w, eps=0.5)\n"
      " output y\n}\n");
  auto y = run_values(graph, {f32({1, 2}, {3, 4}), f32({2}, {1, 2})});
  EXPECT_DOUBLE_EQ(y[0], 3 / std::sqrt(13.0));
  EXPECT_DOUBLE_EQ(y[1], 8 / std::sqrt(13.0));
}

TEST(Fp64ShapeOps, LayerNormByHand) {
  // Row [1, 3]: mean 2, variance 1, so (x - 2) / sqrt(1 + eps) * w + b.
  ir::Graph graph = parse_or_die(
      "graph g {\n input x: f32[2, 2]\n input w: f32[2]\n input b: f32[2]\n"
      " y = layer_norm(x, w, b, eps=3.0)\n output y\n}\n");
  auto y = run_values(graph, {f32({2, 2}, {1, 3, 5, 5}), f32({2}, {2, 4}), f32({2}, {10, 20})});
  EXPECT_DOUBLE_EQ(y[0], 10 - 2 * 0.5);
  EXPECT_DOUBLE_EQ(y[1], 20 + 4 * 0.5);
  EXPECT_DOUBLE_EQ(y[2], 10);  // a constant row normalises to 0
  EXPECT_DOUBLE_EQ(y[3], 20);
}

TEST(Fp64ShapeOps, FourDimensionalMatmulBroadcastsBatches) {
  // a: [2, 1, 1, 2] (batch 2 x broadcast), b: [1, 3, 2, 1] (broadcast x batch 3).
  ir::Graph graph = parse_or_die(
      "graph g {\n input a: f32[2, 1, 1, 2]\n input b: f32[1, 3, 2, 1]\n y = matmul(a, b)\n"
      " output y\n}\n");
  auto y = run_values(graph, {f32({2, 1, 1, 2}, {1, 2, 10, 20}),
                              f32({1, 3, 2, 1}, {1, 0, 0, 1, 1, 1})});
  // y[i, j] = a_i . b_j: a_0 = (1, 2), a_1 = (10, 20); b = (1,0), (0,1), (1,1).
  EXPECT_EQ(y, (std::vector<double>{1, 2, 3, 10, 20, 30}));
}

}  // namespace
}  // namespace kiln::reference
