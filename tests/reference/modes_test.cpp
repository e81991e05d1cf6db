// The emulated precision modes: operand rounding, fp32 accumulation, overrides, and run()'s
// input checks and limits.
#include "reference/metrics.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace kiln::reference {
namespace {

using testing::f32;
using testing::make_tensor;
using testing::parse_or_die;
using testing::run_values;

ir::Graph dot_graph(int k, const std::string& dtype = "f32", const std::string& flags = "") {
  std::string n = std::to_string(k);
  return parse_or_die("graph g {\n input a: " + dtype + "[1, " + n + "]\n input b: " + dtype +
                      "[" + n + ", 1]\n y = matmul(a, b" + flags + ")\n output y\n}\n");
}

double dot(const ir::Graph& graph, std::vector<double> a, RunMode mode,
           ir::DType dtype = ir::DType::f32) {
  auto k = static_cast<int64_t>(a.size());
  std::vector<double> ones(a.size(), 1.0);
  return run_values(graph, {make_tensor(dtype, {1, k}, std::move(a)),
                            make_tensor(dtype, {k, 1}, std::move(ones))},
                    mode)[0];
}

TEST(EmulatedMatmul, HighLosesWhatTf32x3AndHighestKeepInACancellingProduct) {
  ir::Graph graph = dot_graph(2);
  std::vector<double> a{1.0 + 0x1p-12, -1.0};
  EXPECT_EQ(dot(graph, a, RunMode::fp64()), 0x1p-12);
  EXPECT_EQ(dot(graph, a, RunMode::emulate(ir::Precision::highest)), 0x1p-12);
  EXPECT_EQ(dot(graph, a, RunMode::emulate(ir::Precision::tf32x3)), 0x1p-12);
  EXPECT_EQ(dot(graph, a, RunMode::emulate(ir::Precision::high)), 0.0);  // 100% error
  EXPECT_EQ(dot(graph, a, RunMode::emulate(ir::Precision::medium)), 0.0);
}

TEST(EmulatedMatmul, HighHasLargeRelativeErrorOnWideDynamicRangeWhileTf32x3StaysSmall) {
  // Rows of pairs (v, -w) with v in [100, 1000] and w = v + d, d in [-1, 1]: a sum of small
  // differences of large numbers, like the small eigenvalues of Q^T L Q.
  const int pairs = 64;
  ir::Graph graph = parse_or_die(
      "graph g {\n input a: f32[8, 128]\n input b: f32[128, 4]\n y = matmul(a, b)\n"
      " output y\n}\n");
  Rng rng(11);
  Tensor a = zeros(graph.node(graph.inputs()[0]).type);
  for (int row = 0; row < 8; ++row) {
    for (int p = 0; p < pairs; ++p) {
      double v = store_value(ir::DType::f32, 550.0 + 450.0 * rng.next_symmetric());
      a.values[static_cast<size_t>(row * 128 + 2 * p)] = v;
      a.values[static_cast<size_t>(row * 128 + 2 * p + 1)] =
          -store_value(ir::DType::f32, v + rng.next_symmetric());
    }
  }
  Tensor b = zeros(graph.node(graph.inputs()[1]).type);
  for (int k = 0; k < 128; ++k)
    for (int col = 0; col < 4; ++col)  // equal weights within a pair, so the pairs cancel
      b.values[static_cast<size_t>(k * 4 + col)] =
          store_value(ir::DType::f32, 1.0 + 0.25 * col + 0.01 * (k / 2 % 7));
  std::vector<double> truth = run_values(graph, {a, b});
  auto error = [&](ir::Precision p) {
    return relative_l2(run_values(graph, {a, b}, RunMode::emulate(p)), truth);
  };
  EXPECT_GT(error(ir::Precision::high), 0.05);
  EXPECT_LT(error(ir::Precision::tf32x3), 1e-3);
  EXPECT_LT(error(ir::Precision::highest), 1e-3);
}

TEST(EmulatedMatmul, HighRoundsOperandsTiesAwayFromZero) {
  ir::Graph graph = dot_graph(1);
  EXPECT_EQ(dot(graph, {1.0 + 0x1p-11}, RunMode::emulate(ir::Precision::high)), 1.0 + 0x1p-10);
  EXPECT_EQ(dot(graph, {-1.0 - 0x1p-11}, RunMode::emulate(ir::Precision::high)),
            -1.0 - 0x1p-10);
}

TEST(EmulatedMatmul, MediumRoundsOperandsToBf16NearestEven) {
  ir::Graph graph = dot_graph(1);
  EXPECT_EQ(dot(graph, {1.0 + 0x1p-8}, RunMode::emulate(ir::Precision::medium)), 1.0);
  EXPECT_EQ(dot(graph, {1.0 + 3 * 0x1p-8}, RunMode::emulate(ir::Precision::medium)),
            1.0 + 0x1p-6);
}

TEST(EmulatedMatmul, HighestAccumulatesInFp32InKOrder) {
  ir::Graph graph = dot_graph(3);
  RunMode highest = RunMode::emulate(ir::Precision::highest);
  EXPECT_EQ(dot(graph, {0x1p24, 1.0, 1.0}, RunMode::fp64()), 0x1p24 + 2);
  EXPECT_EQ(dot(graph, {0x1p24, 1.0, 1.0}, highest), 0x1p24);      // each +1 is a tie to even
  EXPECT_EQ(dot(graph, {1.0, 1.0, 0x1p24}, highest), 0x1p24 + 2);  // 1 + 1 first, then exact
}

TEST(EmulatedMatmul, AMatmulsOwnPrecisionOverridesTheGraphMode) {
  ir::Graph graph = dot_graph(2, "f32", ", precision=highest");
  EXPECT_EQ(dot(graph, {1.0 + 0x1p-12, -1.0}, RunMode::emulate(ir::Precision::high)), 0x1p-12);
}

TEST(EmulatedMatmul, F16AccumulatesInFp32AndStoresAtF16) {
  ir::Graph graph = dot_graph(3, "f16");
  RunMode mode = RunMode::emulate(ir::Precision::high);
  // f16 accumulation would lose each 2^-11; fp32 keeps both, and 1 + 2^-10 is a half.
  EXPECT_EQ(dot(graph, {1.0, 0x1p-11, 0x1p-11}, mode, ir::DType::f16), 1.0 + 0x1p-10);
  ir::Graph pair = dot_graph(2, "f16");
  EXPECT_EQ(dot(pair, {1.0, 0x1p-11}, mode, ir::DType::f16), 1.0);  // stored: tie to even
  EXPECT_EQ(dot(pair, {1.0, 0x1p-11}, RunMode::fp64(), ir::DType::f16), 1.0 + 0x1p-11);
}

TEST(EmulatedMatmul, Bf16AccumulatesInFp32AndStoresAtBf16) {
  ir::Graph graph = dot_graph(3, "bf16");
  RunMode mode = RunMode::emulate(ir::Precision::highest);
  EXPECT_EQ(dot(graph, {1.0, 0x1p-8, 0x1p-8}, mode, ir::DType::bf16), 1.0 + 0x1p-7);
  EXPECT_EQ(dot(graph, {1.0, 0x1p-8, 0.0}, mode, ir::DType::bf16), 1.0);
}

TEST(Run, RejectsAnUnresolvedPrecision) {
  ir::Graph graph = dot_graph(1);
  auto out = run(graph, {f32({1, 1}, {1}), f32({1, 1}, {1})},
                 RunMode::emulate(ir::Precision::automatic));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("auto"), std::string::npos);
}

TEST(Run, RejectsTheWrongNumberOfInputs) {
  ir::Graph graph = dot_graph(1);
  auto out = run(graph, {f32({1, 1}, {1})}, RunMode::fp64());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("takes 2 inputs, got 1"), std::string::npos);
}

TEST(Run, RejectsAnInputOfTheWrongShapeOrDtype) {
  ir::Graph graph = dot_graph(2);
  auto shape = run(graph, {f32({2, 1}, {1, 1}), f32({2, 1}, {1, 1})}, RunMode::fp64());
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.error().message.find("input 'a' must be f32[1, 2]"), std::string::npos);
  auto dtype = run(graph, {make_tensor(ir::DType::f16, {1, 2}, {1, 1}), f32({2, 1}, {1, 1})},
                   RunMode::fp64());
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.error().message.find("f16[1, 2]"), std::string::npos);
}

TEST(Run, RejectsAnInputWithTheWrongNumberOfValues) {
  ir::Graph graph = dot_graph(2);
  auto out = run(graph, {f32({1, 2}, {1}), f32({2, 1}, {1, 1})}, RunMode::fp64());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("holds 1 values for 2 elements"), std::string::npos);
}

TEST(Run, RefusesAGraphAboveTheMemoryLimitNamingBothNumbers) {
  ir::Graph graph = dot_graph(2);  // (2 + 2 + 1) values of 8 bytes
  RunLimits limits;
  limits.max_bytes = 39;
  auto out = run(graph, {f32({1, 2}, {1, 1}), f32({2, 1}, {1, 1})}, RunMode::fp64(), limits);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("needs 40 bytes"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("limit of 39 bytes"), std::string::npos);
  limits.max_bytes = 40;
  EXPECT_TRUE(run(graph, {f32({1, 2}, {1, 1}), f32({2, 1}, {1, 1})}, RunMode::fp64(), limits));
}

TEST(Run, ReturnsEveryOutputInDeclarationOrder) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input x: f32[2]\n a = neg(x)\n b = relu(x)\n output b, a\n}\n");
  auto outputs = testing::run_ok(graph, {f32({2}, {-1, 2})}, RunMode::fp64());
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].values, (std::vector<double>{0, 2}));
  EXPECT_EQ(outputs[1].values, (std::vector<double>{1, -2}));
}

}  // namespace
}  // namespace kiln::reference
