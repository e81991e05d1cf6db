// fuse(): which nodes end up in which kernel.
#include "compiler/fusion.h"

#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln::compiler {
namespace {

using test::example;
using test::kinds;
using test::parse;

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
        // A view is its operand's buffer read in another shape.
        while (is_view(g, leaf)) leaf = g.node(leaf).operands[0];
        if (g.node(leaf).kind == ir::OpKind::input) continue;
        bool earlier = false;
        for (size_t j = 0; j < i; ++j) earlier |= groups[j].root == leaf;
        EXPECT_TRUE(earlier) << name << " group " << i;
      }
    }
  }
}

// The buffers a group's kernel reads: its leaves and its anchor's operands.
size_t reads(const ir::Graph& g, const KernelGroup& group) {
  std::vector<ir::NodeId> read = group.leaves;
  if (group.anchor >= 0) {
    for (ir::NodeId op : g.node(group.anchor).operands) {
      if (std::find(read.begin(), read.end(), op) == read.end()) read.push_back(op);
    }
  }
  return read.size();
}

TEST(Fusion, AChainThatWouldReadTooManyBuffersIsCutWhereTheLimitIsReached) {
  // s5 = ((((x0 + x1) + x2) + x3) + x4) + x5, at most 3 buffers read per kernel.
  ir::Graph g = parse(test::wide_sum(6, "f32[8]"));
  auto groups = fuse(g, 3);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].nodes.size(), 2u);  // s1, s2: read x0, x1, x2
  EXPECT_EQ(groups[1].nodes.size(), 2u);  // s3, s4: read s2, x3, x4
  EXPECT_EQ(groups[2].nodes.size(), 1u);  // s5: reads s4, x5
  EXPECT_EQ(groups[2].root, g.outputs()[0]);
  for (const KernelGroup& group : groups) EXPECT_LE(reads(g, group), 3u);
  EXPECT_EQ(groups[1].leaves[0], groups[0].root);
  EXPECT_EQ(groups[2].leaves[0], groups[1].root);
}

TEST(Fusion, ABalancedTreeIsCutIntoFullSubtrees) {
  // 16 inputs summed pairwise, level by level; at most 4 buffers read per kernel.
  std::string text = "graph tree {\n";
  std::vector<std::string> level;
  for (int i = 0; i < 16; ++i) {
    text += "  input x" + std::to_string(i) + ": f32[8]\n";
    level.push_back("x" + std::to_string(i));
  }
  int next = 0;
  while (level.size() > 1) {
    std::vector<std::string> sums;
    for (size_t i = 0; i < level.size(); i += 2) {
      sums.push_back("t" + std::to_string(next++));
      text += "  " + sums.back() + " = add(" + level[i] + ", " + level[i + 1] + ")\n";
    }
    level = sums;
  }
  ir::Graph g = parse(text + "  output " + level[0] + "\n}\n");
  auto groups = fuse(g, 4);
  // Four kernels each sum four inputs (3 adds); one adds their four sums (3 adds).
  ASSERT_EQ(groups.size(), 5u);
  for (const KernelGroup& group : groups) {
    EXPECT_EQ(group.nodes.size(), 3u);
    EXPECT_EQ(reads(g, group), 4u);
  }
  EXPECT_EQ(groups.back().root, g.outputs()[0]);
}

TEST(Fusion, AMatmulEpilogueIsCutWhereItWouldReadTooManyBuffers) {
  ir::Graph g = parse(R"(graph g {
    input a: f32[16, 16]
    input b: f32[16, 16]
    input c: f32[16, 16]
    input d: f32[16, 16]
    y = add(add(matmul(a, b), c), d)
    output y
  })");
  auto unlimited = fuse(g);
  ASSERT_EQ(unlimited.size(), 1u);
  EXPECT_EQ(reads(g, unlimited[0]), 4u);  // a, b, c, d
  auto groups = fuse(g, 3);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].kind, GroupKind::matmul);  // matmul(a, b) + c
  EXPECT_EQ(groups[0].nodes.size(), 2u);
  EXPECT_EQ(groups[1].kind, GroupKind::elementwise);  // that + d
  EXPECT_EQ(groups[1].nodes.size(), 1u);
  for (const KernelGroup& group : groups) EXPECT_LE(reads(g, group), 3u);
}

TEST(Fusion, TheIssuesFourThousandFiveHundredInputSumFitsEveryKernelUnderTheLimit) {
  ir::Graph g = parse(test::wide_sum(4500, "f32[8]"));
  auto groups = fuse(g);
  EXPECT_EQ(groups.size(), 18u);  // 4,500 reads in kernels of 256, each after the first reading
                                  // the previous kernel's sum
  std::vector<int> read_by(g.nodes().size(), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    EXPECT_LE(reads(g, groups[i]), k_max_kernel_reads) << "group " << i;
    for (ir::NodeId leaf : groups[i].leaves) {
      ++read_by[static_cast<size_t>(leaf)];
      if (g.node(leaf).kind == ir::OpKind::input) continue;
      EXPECT_TRUE(i > 0 && groups[i - 1].root == leaf) << "group " << i;
    }
  }
  for (ir::NodeId input : g.inputs()) EXPECT_EQ(read_by[static_cast<size_t>(input)], 1);
}

}  // namespace
}  // namespace kiln::compiler
