// Every elementwise op and softmax in fp64 against hand-computed values.
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::reference {
namespace {

using testing::f32;
using testing::parse_or_die;
using testing::run_values;

std::vector<double> unary(const std::string& op, std::vector<double> x) {
  ir::Graph graph = parse_or_die("graph g {\n input x: f32[" + std::to_string(x.size()) +
                                 "]\n y = " + op + "(x)\n output y\n}\n");
  auto n = static_cast<int64_t>(x.size());
  return run_values(graph, {f32({n}, std::move(x))});
}

TEST(Fp64Ops, AddBroadcastsARowAcrossRows) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input a: f32[2, 3]\n input b: f32[3]\n y = add(a, b)\n output y\n}\n");
  auto y = run_values(graph, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3}, {10, 20, 30})});
  EXPECT_EQ(y, (std::vector<double>{11, 22, 33, 14, 25, 36}));
}

TEST(Fp64Ops, SubBroadcastsAColumnAgainstARow) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input a: f32[2, 1]\n input b: f32[1, 3]\n y = sub(a, b)\n output y\n}\n");
  auto y = run_values(graph, {f32({2, 1}, {10, 20}), f32({1, 3}, {1, 2, 3})});
  EXPECT_EQ(y, (std::vector<double>{9, 8, 7, 19, 18, 17}));
}

TEST(Fp64Ops, MulBroadcastsAcrossTheMiddleOfRankThree) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input a: f32[2, 2, 2]\n input b: f32[2, 1, 2]\n y = mul(a, b)\n"
      " output y\n}\n");
  auto y = run_values(graph, {f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}),
                              f32({2, 1, 2}, {1, 10, 100, 1000})});
  EXPECT_EQ(y, (std::vector<double>{1, 20, 3, 40, 500, 6000, 700, 8000}));
}

TEST(Fp64Ops, DivWithTheLiteralOnTheRight) {
  ir::Graph graph =
      parse_or_die("graph g {\n input x: f32[3]\n y = div(x, 4.0)\n output y\n}\n");
  EXPECT_EQ(run_values(graph, {f32({3}, {1, 2, -8})}), (std::vector<double>{0.25, 0.5, -2}));
}

TEST(Fp64Ops, SubAndDivWithTheLiteralOnTheLeft) {
  ir::Graph sub =
      parse_or_die("graph g {\n input x: f32[3]\n y = sub(1.5, x)\n output y\n}\n");
  EXPECT_EQ(run_values(sub, {f32({3}, {1, 2, -8})}), (std::vector<double>{0.5, -0.5, 9.5}));
  ir::Graph div =
      parse_or_die("graph g {\n input x: f32[3]\n y = div(2.0, x)\n output y\n}\n");
  EXPECT_EQ(run_values(div, {f32({3}, {1, 4, -8})}), (std::vector<double>{2, 0.5, -0.25}));
}

TEST(Fp64Ops, ReluAndNeg) {
  EXPECT_EQ(unary("relu", {-2, 0, 3}), (std::vector<double>{0, 0, 3}));
  EXPECT_EQ(unary("neg", {-2, 0.5}), (std::vector<double>{2, -0.5}));
}

TEST(Fp64Ops, GeluIsTheExactErfForm) {
  auto y = unary("gelu", {1.0, -1.0, 0.0, 3.0});
  EXPECT_NEAR(y[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(y[1], -0.15865525393145707, 1e-15);
  EXPECT_EQ(y[2], 0.0);
  EXPECT_NEAR(y[3], 2.99595030590511, 1e-14);  // the tanh approximation gives 2.99636...
}

TEST(Fp64Ops, SiluSigmoidTanhExp) {
  EXPECT_NEAR(unary("silu", {1.0})[0], 0.7310585786300049, 1e-15);
  EXPECT_NEAR(unary("silu", {-2.0})[0], -0.23840584404423515, 1e-15);
  EXPECT_EQ(unary("sigmoid", {0.0})[0], 0.5);
  EXPECT_NEAR(unary("sigmoid", {2.0})[0], 0.8807970779778823, 1e-15);
  EXPECT_NEAR(unary("tanh", {0.5})[0], 0.46211715726000974, 1e-15);
  EXPECT_NEAR(unary("exp", {1.0})[0], 2.718281828459045, 1e-15);
}

TEST(Fp64Ops, SoftmaxAlongTheLastAxis) {
  ir::Graph graph =
      parse_or_die("graph g {\n input x: f32[2, 2]\n y = softmax(x)\n output y\n}\n");
  auto y = run_values(graph, {f32({2, 2}, {0.0, std::log(3.0), 5.0, 5.0})});
  EXPECT_NEAR(y[0], 0.25, 1e-15);
  EXPECT_NEAR(y[1], 0.75, 1e-15);
  EXPECT_NEAR(y[2], 0.5, 1e-15);
  EXPECT_NEAR(y[3], 0.5, 1e-15);
}

TEST(Fp64Ops, SoftmaxAlongTheFirstAxis) {
  ir::Graph graph =
      parse_or_die("graph g {\n input x: f32[2, 2]\n y = softmax(x, axis=0)\n output y\n}\n");
  // Columns: [0, ln 3] -> [1/4, 3/4]; [7, 7] -> [1/2, 1/2].
  auto y = run_values(graph, {f32({2, 2}, {0.0, 7.0, std::log(3.0), 7.0})});
  EXPECT_NEAR(y[0], 0.25, 1e-15);
  EXPECT_NEAR(y[1], 0.5, 1e-15);
  EXPECT_NEAR(y[2], 0.75, 1e-15);
  EXPECT_NEAR(y[3], 0.5, 1e-15);
}

TEST(Fp64Ops, SoftmaxAlongTheMiddleAxisOfRankThree) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input x: f32[2, 2, 2]\n y = softmax(x, axis=1)\n output y\n}\n");
  // x[b, i, j]: each (b, j) pair is one softmax over i.
  double l3 = std::log(3.0);
  auto y = run_values(graph, {f32({2, 2, 2}, {0, 1, l3, 1, l3, 2, 0, 2})});
  std::vector<double> expected{0.25, 0.5, 0.75, 0.5, 0.75, 0.5, 0.25, 0.5};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-15) << i;
}

TEST(Fp64Ops, SoftmaxIsStableForLargeInputs) {
  ir::Graph graph =
      parse_or_die("graph g {\n input x: f32[3]\n y = softmax(x)\n output y\n}\n");
  auto y = run_values(graph, {f32({3}, {1000.0, 1000.0, -1000.0})});
  EXPECT_EQ(y[0], 0.5);
  EXPECT_EQ(y[1], 0.5);
  EXPECT_EQ(y[2], 0.0);
  auto emulated = run_values(graph, {f32({3}, {1000.0, 1000.0, -1000.0})},
                             RunMode::emulate(ir::Precision::highest));
  EXPECT_EQ(emulated[0], 0.5);
}

TEST(Fp64Ops, CastKeepsFullPrecisionInFp64AndRoundsWhenEmulated) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input x: f32[3]\n y = cast(x, to=bf16)\n output y\n}\n");
  std::vector<double> x{1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 1e38};
  EXPECT_EQ(run_values(graph, {f32({3}, x)}), x);
  auto emulated = run_values(graph, {f32({3}, x)}, RunMode::emulate(ir::Precision::highest));
  EXPECT_EQ(emulated[0], 1.0);                // tie to even
  EXPECT_EQ(emulated[1], 1.0 + 0x1p-6);       // tie to even, upward
  EXPECT_EQ(emulated[2], 150 * 0x1p+119);    // 1e38 = 150.46 * 2^119
}

TEST(Fp64Ops, CastToF16OverflowsToInfinityWhenEmulated) {
  ir::Graph graph =
      parse_or_die("graph g {\n input x: f32[2]\n y = cast(x, to=f16)\n output y\n}\n");
  auto y = run_values(graph, {f32({2}, {70000.0, 0x1p-25 * 3})},
                      RunMode::emulate(ir::Precision::highest));
  EXPECT_TRUE(std::isinf(y[0]));
  EXPECT_EQ(y[1], 0x1p-23);  // 3 * 2^-25 is a tie between 1 and 2 units of 2^-24: even
}

TEST(EmulatedOps, F16ResultsAreStoredAtF16AfterEveryOp) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input a: f16[2]\n input b: f16[2]\n y = add(a, b)\n output y\n}\n");
  std::vector<Tensor> inputs{testing::make_tensor(ir::DType::f16, {2}, {1.0, 1.0}),
                             testing::make_tensor(ir::DType::f16, {2}, {0x1p-11, 0x1p-10})};
  EXPECT_EQ(run_values(graph, inputs), (std::vector<double>{1.0 + 0x1p-11, 1.0 + 0x1p-10}));
  auto y = run_values(graph, inputs, RunMode::emulate(ir::Precision::high));
  EXPECT_EQ(y, (std::vector<double>{1.0, 1.0 + 0x1p-10}));
}

TEST(EmulatedOps, F32IntermediatesAreRoundedToFloat) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input x: f32[1]\n y = sub(add(x, 1.0), 1.0)\n output y\n}\n");
  std::vector<double> x{0x1p-30};
  EXPECT_EQ(run_values(graph, {f32({1}, x)}), x);
  EXPECT_EQ(run_values(graph, {f32({1}, x)}, RunMode::emulate(ir::Precision::highest))[0], 0.0);
}

}  // namespace
}  // namespace kiln::reference
