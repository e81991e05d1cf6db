// fuse() on the transformer ops: a norm is one kernel with its prologue and epilogue, a
// reduction fuses the chains around it, reshapes are views, layout ops fuse into their
// consumers, and the LLaMA and BERT layers compile to a fixed, small number of kernels.
#include "compiler/fusion.h"

#include "compiler/compiler.h"

#include "test_support.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

using test::example;
using test::kinds;
using test::parse;

TEST(FusionTransformer, ANormIsOneKernelWithItsResidualAndItsEpilogue) {
  ir::Graph g = parse(R"(graph g {
    input x: f32[4, 64]
    input r: f32[4, 64]
    input w: f32[64]
    y = mul(rms_norm(add(x, r), w), 2.0)
    output y
  })");
  auto groups = fuse(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, GroupKind::norm);
  EXPECT_EQ(groups[0].nodes.size(), 3u);  // add, rms_norm, mul
  EXPECT_EQ(groups[0].leaves.size(), 2u);  // x and r (w is the norm's own operand)
}

TEST(FusionTransformer, AReductionFusesWhatFeedsItAndWhatFollows) {
  ir::Graph g = parse(R"(graph g {
    input x: f32[4, 64]
    y = sqrt(mean(pow(x, 2.0), keepdim=true))
    output y
  })");
  auto groups = fuse(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, GroupKind::reduce);
  EXPECT_EQ(groups[0].nodes.size(), 3u);
}

TEST(FusionTransformer, AMatmulKeepsItsEpilogueBeforeANorm) {
  // The residual add joins the matmul (its epilogue), not the norm (its prologue): two kernels.
  ir::Graph g = parse(R"(graph g {
    input x: f32[4, 64]
    input w: f32[64, 64]
    input g: f32[64]
    y = rms_norm(add(x, matmul(x, w)), g)
    output y
  })");
  auto groups = fuse(g);
  EXPECT_EQ(kinds(groups), (std::vector<GroupKind>{GroupKind::matmul, GroupKind::norm}));
}

TEST(FusionTransformer, AReshapeIsAViewAndALayoutOpFusesIntoItsConsumer) {
  ir::Graph g = parse(R"(graph g {
    input x: f32[2, 8, 16]
    input w: f32[4, 4]
    h = reshape(gelu(x), shape=[2, 8, 4, 4])
    y = matmul(add(permute(h, dims=[0, 2, 1, 3]), 1.0), w)
    output y
  })");
  auto groups = fuse(g);
  // gelu; the permute and add read through h (a view of gelu's buffer); the matmul.
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(kinds(groups), (std::vector<GroupKind>{GroupKind::elementwise,
                                                   GroupKind::elementwise, GroupKind::matmul}));
  EXPECT_EQ(groups[1].nodes.size(), 2u);  // permute, add
  ASSERT_EQ(groups[1].leaves.size(), 1u);
  EXPECT_EQ(g.node(groups[1].leaves[0]).kind, ir::OpKind::reshape);
  EXPECT_TRUE(is_view(g, groups[1].leaves[0]));
}

TEST(FusionTransformer, AReshapeThatIsAnOutputIsACopy) {
  ir::Graph g = parse(R"(graph g {
    input x: f32[2, 8]
    y = reshape(x, shape=[16])
    output y
  })");
  auto groups = fuse(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].root, g.outputs()[0]);
  EXPECT_FALSE(is_view(g, g.outputs()[0]));
}

TEST(FusionTransformer, RotaryAndHeadSplitAreOneKernel) {
  ir::Graph g = parse(R"(graph g {
    input x: f32[2, 16, 4, 8]
    input rope_cos: f32[16, 1, 8]
    input rope_sin: f32[16, 1, 8]
    r = concat(neg(slice(x, start=4, end=8)), slice(x, start=0, end=4))
    y = permute(add(mul(x, rope_cos), mul(r, rope_sin)), dims=[0, 2, 1, 3])
    output y
  })");
  auto groups = fuse(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].nodes.size(), 8u);
  EXPECT_EQ(groups[0].leaves.size(), 3u);  // x, rope_cos, rope_sin
}

// The kernel counts README.md and KERNELS.md state for the example layers: greedy fusion alone,
// and after the attention pass (lower()), which makes the scores matmul, softmax and P V matmul
// one fused attention kernel.
struct LayerCount {
  const char* name;
  size_t greedy_kernels;
  int matmuls;  // greedy: every projection one kernel with its epilogue, plus the two attention ones
  size_t kernels;  // lowered
};

TEST(FusionTransformer, LlamaAndBertLayersCompileToFewKernels) {
  // LLaMA: 2 norms, 9 matmuls (q, k, v, scores, probabilities x v, out, gate, up, down), the
  // softmax, rotary+head split for q and k, the v head split, the head merge.
  // BERT: 2 norms, 8 matmuls, the softmax, head splits for q, k, v, the head merge.
  for (LayerCount c : {LayerCount{"llama_layer", 16, 9, 14}, LayerCount{"bert_layer", 15, 8, 13}}) {
    auto groups = fuse(example(c.name));
    EXPECT_EQ(groups.size(), c.greedy_kernels) << c.name;
    int norms = 0, matmuls = 0, softmaxes = 0;
    for (const auto& group : groups) {
      norms += group.kind == GroupKind::norm;
      matmuls += group.kind == GroupKind::matmul;
      softmaxes += group.kind == GroupKind::softmax;
    }
    EXPECT_EQ(norms, 2) << c.name;
    EXPECT_EQ(matmuls, c.matmuls) << c.name;
    EXPECT_EQ(softmaxes, 1) << c.name;

    // Lowered: the attention is one kernel, with no softmax and two matmuls fewer.
    for (ir::Precision p : {ir::Precision::highest, ir::Precision::high}) {
      auto program = lower(example(c.name), test::options(90, p));
      ASSERT_TRUE(program.ok()) << program.error().message;
      EXPECT_EQ(program->plan.kernels.size(), c.kernels) << c.name;
      EXPECT_TRUE(program->diagnostics.fallbacks.empty()) << c.name;
      int attention = 0, lowered_matmuls = 0, lowered_softmaxes = 0;
      for (const KernelPlan& k : program->plan.kernels) {
        attention += k.group.kind == GroupKind::attention;
        lowered_matmuls += k.group.kind == GroupKind::matmul;
        lowered_softmaxes += k.group.kind == GroupKind::softmax;
      }
      EXPECT_EQ(attention, 1) << c.name;
      EXPECT_EQ(lowered_matmuls, c.matmuls - 2) << c.name;
      EXPECT_EQ(lowered_softmaxes, 0) << c.name;
    }
  }
}

}  // namespace
}  // namespace kiln::compiler
