// The audit library: tolerances per output, determinism, warnings, and the example graphs.
#include "reference/audit.h"
#include "test_util.h"

#include "ir/parse.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::reference {
namespace {

using testing::parse_or_die;

ir::Graph example(const std::string& name) {
  auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/" + name + ".kg");
  EXPECT_TRUE(graph.ok()) << (graph.ok() ? "" : graph.error().message);
  return std::move(graph).value();
}

// An output whose fp32 storage of a large intermediate destroys it: fails even `highest`.
const char* k_lossy_graph =
    "graph lossy {\n input x: f32[4, 4]\n input w: f32[4, 4]\n"
    "  y = sub(add(matmul(x, w), 100000.0), 100000.0)\n output y\n}\n";

TEST(Tolerance, MatchesTheDocumentedValues) {
  EXPECT_EQ(tolerance(ir::Precision::highest), 1e-5);
  EXPECT_EQ(tolerance(ir::Precision::tf32x3), 2e-5);
  EXPECT_EQ(tolerance(ir::Precision::high), 2e-3);
  EXPECT_EQ(tolerance(ir::Precision::medium), 1.5e-2);
}

TEST(OutputTolerance, FollowsEachOutputsOwnMatmulPrecision) {
  ir::Graph graph = example("mixed_head");
  ir::NodeId policy = graph.outputs()[0];
  ir::NodeId value = graph.outputs()[1];
  EXPECT_EQ(output_tolerance(graph, policy, ir::Precision::high), 2e-3);
  EXPECT_EQ(output_tolerance(graph, value, ir::Precision::high), 1e-5);  // precision=highest
  EXPECT_EQ(output_tolerance(graph, policy, ir::Precision::medium), 1.5e-2);
  EXPECT_EQ(output_tolerance(graph, policy, ir::Precision::tf32x3), 2e-5);
}

TEST(OutputTolerance, IsTheHalfToleranceWhenF16OrBf16Tensors) {
  ir::Graph graph = example("half_epilogue");
  EXPECT_EQ(output_tolerance(graph, graph.outputs()[0], ir::Precision::highest), 1.5e-2);
}

// f16/bf16 inputs read exactly into f32 values take fp32's tolerances, whatever the mode: a cast
// 1e-5, an out_dtype=f32 matmul's truncated fp32 sums k * 2^-24 (1.8e-4 here; a kernel that
// rounded them to bf16 would be near 1.1e-3). A value computed in bf16 takes the half tolerance.
TEST(OutputTolerance, HalfInputsReadIntoF32ValuesTakeFp32sTolerance) {
  ir::Graph graph = parse_or_die(
      "graph g {\n  input x: bf16[8, 3000]\n  input w: bf16[3000, 4]\n  input b: bf16[4]\n"
      "  p = matmul(x, w, out_dtype=f32)\n  c = relu(cast(b, to=f32))\n"
      "  r = cast(matmul(x, w), to=f32)\n  output p, c, r\n}\n");
  for (ir::Precision mode : {ir::Precision::high, ir::Precision::medium}) {
    EXPECT_EQ(output_tolerance(graph, graph.outputs()[0], mode), 3000 * std::ldexp(1.0, -24));
    EXPECT_EQ(output_tolerance(graph, graph.outputs()[1], mode), 1e-5);
    EXPECT_EQ(output_tolerance(graph, graph.outputs()[2], mode), 1.5e-2);
  }
}

TEST(Audit, MixedHeadUnderHighPassesWithTheValueHeadAtFp32Accuracy) {
  auto report = audit(example("mixed_head"), ir::Precision::high, 0);
  ASSERT_TRUE(report.ok()) << report.error().message;
  ASSERT_EQ(report->outputs.size(), 2u);
  EXPECT_EQ(report->outputs[0].name, "policy");
  EXPECT_EQ(report->outputs[1].name, "value");
  EXPECT_GT(report->outputs[0].rel_l2, 1e-5);  // TF32 shows
  EXPECT_LT(report->outputs[1].rel_l2, 1e-5);  // the override holds
  EXPECT_TRUE(report->outputs[0].ok);
  EXPECT_TRUE(report->outputs[1].ok);
  EXPECT_TRUE(report->warnings.empty());
}

TEST(Audit, IsDeterministicForASeedAndChangesWithIt) {
  ir::Graph graph = example("mixed_head");
  auto a = audit(graph, ir::Precision::high, 5);
  auto b = audit(graph, ir::Precision::high, 5);
  auto c = audit(graph, ir::Precision::high, 6);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->outputs[0].rel_l2, b->outputs[0].rel_l2);
  EXPECT_EQ(a->outputs[0].max_abs, b->outputs[0].max_abs);
  EXPECT_NE(a->outputs[0].rel_l2, c->outputs[0].rel_l2);
  EXPECT_EQ(a->seed, 5u);
}

TEST(Audit, WarnsWhenAnOutputPassesItsTolerance) {
  auto report = audit(parse_or_die(k_lossy_graph), ir::Precision::highest, 0);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->outputs.size(), 1u);
  EXPECT_FALSE(report->outputs[0].ok);
  EXPECT_GT(report->outputs[0].rel_l2, 1e-4);
  ASSERT_EQ(report->warnings.size(), 1u);
  EXPECT_NE(report->warnings[0].find("output 'y'"), std::string::npos) << report->warnings[0];
  EXPECT_NE(report->warnings[0].find("exceeds the tolerance"), std::string::npos);
}

TEST(Audit, RejectsAnUnresolvedPrecision) {
  auto report = audit(parse_or_die(k_lossy_graph), ir::Precision::automatic, 0);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().message.find("auto"), std::string::npos);
}

TEST(Audit, PassesTheMemoryLimitOnToRun) {
  RunLimits limits;
  limits.max_bytes = 64;
  auto report = audit(parse_or_die(k_lossy_graph), ir::Precision::highest, 0, limits);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().message.find("limit of 64 bytes"), std::string::npos);
}

class ExampleAudit
    : public ::testing::TestWithParam<std::tuple<const char*, ir::Precision>> {};

TEST_P(ExampleAudit, StaysWithinTolerance) {
  auto [name, precision] = GetParam();
  auto report = audit(example(name), precision, 1);
  ASSERT_TRUE(report.ok()) << report.error().message;
  for (const OutputAudit& out : report->outputs)
    EXPECT_TRUE(out.ok) << name << " " << out.name << ": " << out.rel_l2 << " > " << out.tolerance;
  EXPECT_TRUE(report->warnings.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Examples, ExampleAudit,
    ::testing::Combine(::testing::Values("attention", "gated_mlp", "half_epilogue", "mixed_head",
                                         "mlp"),
                       ::testing::Values(ir::Precision::highest, ir::Precision::high,
                                         ir::Precision::tf32x3, ir::Precision::medium)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" +
             std::string(ir::to_string(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace kiln::reference
