// fuse(): which nodes end up in which kernel.
#include "compiler/fusion.h"

#include "test_support.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

using test::example;
using test::parse;

std::vector<GroupKind> kinds(const std::vector<KernelGroup>& groups) {
  std::vector<GroupKind> k;
  for (const auto& g : groups) k.push_back(g.kind);
  return k;
}

TEST(Fusion, MlpFusesBiasGeluAndResidualIntoTwoMatmuls) {
  ir::Graph g = example("mlp");
  auto groups = fuse(g);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(kinds(groups), (std::vector<GroupKind>{GroupKind::matmul, GroupKind::matmul}));
  EXPECT_EQ(groups[0].nodes.size(), 3u);  // matmul, add, gelu
  EXPECT_EQ(groups[1].nodes.size(), 3u);  // matmul, add, add
  EXPECT_EQ(groups[1].root, g.outputs()[0]);
  EXPECT_EQ(groups[1].leaves.size(), 2u);  // b2 and the residual x
}

TEST(Fusion, AttentionScalesInTheMatmulThenSoftmaxThenMatmul) {
  auto groups = fuse(example("attention"));
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(kinds(groups),
            (std::vector<GroupKind>{GroupKind::matmul, GroupKind::softmax, GroupKind::matmul}));
  EXPECT_EQ(groups[0].nodes.size(), 2u);  // matmul(q, k^T) * 0.125
  EXPECT_TRUE(groups[0].leaves.empty());
}

TEST(Fusion, GatedMlpFusesTheGateIntoTheUpProjection) {
  ir::Graph g = example("gated_mlp");
  auto groups = fuse(g);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].nodes.size(), 1u);  // matmul(x, w_gate)
  EXPECT_EQ(groups[1].nodes.size(), 3u);  // mul(silu(gate), matmul(x, w_up))
  EXPECT_EQ(groups[1].kind, GroupKind::matmul);
  ASSERT_EQ(groups[1].leaves.size(), 1u);
  EXPECT_EQ(groups[1].leaves[0], groups[0].root);
  EXPECT_EQ(groups[2].root, g.outputs()[0]);
}

TEST(Fusion, HalfEpilogueIsOneKernel) {
  auto groups = fuse(example("half_epilogue"));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].nodes.size(), 4u);  // matmul, mul, add, cast
}

TEST(Fusion, SoftmaxAbsorbsAFollowingScaleAndCast) {
  auto groups = fuse(parse(R"(graph g {
    input x: f32[8, 100]
    y = cast(mul(softmax(x), 2.0), to=bf16)
    output y
  })"));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, GroupKind::softmax);
  EXPECT_EQ(groups[0].nodes.size(), 3u);
}

TEST(Fusion, StandaloneElementwiseChainIsOneKernel) {
  auto groups = fuse(parse(R"(graph g {
    input x: f32[4, 16]
    input b: f32[16]
    y = tanh(sub(exp(neg(x)), b))
    output y
  })"));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, GroupKind::elementwise);
  EXPECT_EQ(groups[0].nodes.size(), 4u);
  EXPECT_EQ(groups[0].leaves.size(), 2u);
}

TEST(Fusion, AValueUsedTwiceIsNotFused) {
  auto groups = fuse(parse(R"(graph g {
    input a: f32[16, 16]
    input b: f32[16, 16]
    h = matmul(a, b)
    y = add(relu(h), h)
    output y
  })"));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].kind, GroupKind::matmul);
  EXPECT_EQ(groups[0].nodes.size(), 1u);
  EXPECT_EQ(groups[1].kind, GroupKind::elementwise);
}

TEST(Fusion, AGraphOutputIsNotFusedIntoItsConsumer) {
  auto groups = fuse(parse(R"(graph g {
    input a: f32[16, 16]
    input b: f32[16, 16]
    h = matmul(a, b)
    y = relu(h)
    output h, y
  })"));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].nodes.size(), 1u);
}

TEST(Fusion, AMatmulIsNotFusedIntoABroadcastThatGrowsIt) {
  auto groups = fuse(parse(R"(graph g {
    input a: f32[16, 16]
    input b: f32[16, 16]
    input r: f32[4, 16, 16]
    y = add(matmul(a, b), r)
    output y
  })"));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].kind, GroupKind::elementwise);
}

TEST(Fusion, OnlyOneMatmulPerKernel) {
  auto groups = fuse(parse(R"(graph g {
    input a: f32[16, 16]
    input b: f32[16, 16]
    y = add(matmul(a, b), matmul(b, a))
    output y
  })"));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].kind, GroupKind::matmul);
  EXPECT_EQ(groups[1].leaves.size(), 1u);  // the other matmul's result
}

TEST(Fusion, LeavesAreProducedByEarlierGroups) {
  for (const std::string& name : test::example_names()) {
    ir::Graph g = example(name);
    auto groups = fuse(g);
    for (size_t i = 0; i < groups.size(); ++i) {
      for (ir::NodeId leaf : groups[i].leaves) {
        if (g.node(leaf).kind == ir::OpKind::input) continue;
        bool earlier = false;
        for (size_t j = 0; j < i; ++j) earlier |= groups[j].root == leaf;
        EXPECT_TRUE(earlier) << name << " group " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::compiler
