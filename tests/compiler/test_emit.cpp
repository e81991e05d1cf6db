// Emission: determinism, the prelude boundary, and what the kernels are built from.
#include "compiler/emit.h"

#include "compiler/compiler.h"
#include "compiler/prelude.h"
#include "test_support.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

using test::count;
using test::example;
using test::options;
using test::parse;

std::string source(const ir::Graph& g, int sm, ir::Precision p, Prelude prelude) {
  auto program = lower(g, test::with_bucket(g, options(sm, p)));
  EXPECT_TRUE(program.ok()) << (program.ok() ? "" : program.error().message);
  return program.ok() ? program_source(*program, prelude) : std::string();
}

TEST(Emit, SameInputsGiveTheSameBytes) {
  for (const std::string& name : test::example_names()) {
    std::string a = source(example(name), 90, ir::Precision::high, Prelude::include);
    std::string b = source(example(name), 90, ir::Precision::high, Prelude::include);
    EXPECT_EQ(a, b) << name;
    EXPECT_FALSE(a.empty());
  }
}

TEST(Emit, SourceDependsOnArchAndMode) {
  ir::Graph g = example("mlp");
  EXPECT_NE(source(g, 80, ir::Precision::high, Prelude::omit),
            source(g, 80, ir::Precision::tf32x3, Prelude::omit));
  EXPECT_NE(source(g, 75, ir::Precision::highest, Prelude::omit),
            source(g, 90, ir::Precision::highest, Prelude::omit));
}

TEST(Emit, AutoEmitsWhatItResolvesTo) {
  ir::Graph g = example("mlp");
  EXPECT_EQ(source(g, 90, ir::Precision::automatic, Prelude::omit),
            source(g, 90, ir::Precision::high, Prelude::omit));
  EXPECT_EQ(source(g, 75, ir::Precision::automatic, Prelude::omit),
            source(g, 75, ir::Precision::highest, Prelude::omit));
}

TEST(Emit, KernelsWithoutThePreludeHoldNoPtxAndNoIncludes) {
  for (const std::string& name : test::example_names()) {
    for (int sm : {75, 80, 90}) {
      ir::Precision p =
          name == "gated_mlp" && sm == 75 ? ir::Precision::highest : ir::Precision::automatic;
      ir::Graph g = example(name);
      auto program = lower(g, test::with_bucket(g, options(sm, p, FallbackPolicy::allow)));
      ASSERT_TRUE(program.ok()) << name;
      std::string text = program_source(*program, Prelude::omit);
      EXPECT_EQ(count(text, "asm"), 0u) << name << " sm_" << sm;
      EXPECT_EQ(count(text, "#include"), 0u) << name;
      EXPECT_EQ(count(text, "template"), 0u) << name;
      EXPECT_EQ(count(text, "__shared__"), 0u) << name;
      EXPECT_EQ(count(text, "extern \"C\" __global__"), program->plan.kernels.size()) << name;
    }
  }
}

TEST(Emit, ThePreludeHoldsAllInlinePtx) {
  std::string prelude(prelude_source());
  EXPECT_GT(count(prelude, "asm"), 10u);
  for (const char* name :
       {"kiln_mma_m16n8k8_tf32", "kiln_mma_m16n8k16_bf16", "kiln_mma_m16n8k16_f16",
        "kiln_mma_m16n8k8_f16", "kiln_ldmatrix_x4", "kiln_ldmatrix_x2", "kiln_ldmatrix_x4_trans",
        "kiln_ldmatrix_x2_trans", "kiln_cp_async_16", "kiln_cp_async_4", "kiln_cp_async_commit",
        "kiln_cp_async_wait", "kiln_cvt_rna_tf32", "kiln_pack_bf16x2", "kiln_float_to_bf16",
        "kiln_bf16_to_float", "kiln_float_to_f16", "kiln_f16_to_float", "kiln_dynamic_smem"}) {
    EXPECT_NE(prelude.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(count(prelude, "#include"), 0u);
}

TEST(Emit, Sm80KernelsUseCpAsyncAndLdmatrixTuringDoesNotUseCpAsync) {
  std::string ampere = source(example("mlp"), 80, ir::Precision::high, Prelude::omit);
  EXPECT_GT(count(ampere, "kiln_cp_async_16("), 0u);
  EXPECT_GT(count(ampere, "kiln_ldmatrix_x4("), 0u);
  EXPECT_GT(count(ampere, "kiln_cp_async_wait<"), 0u);
  std::string turing = source(example("half_epilogue"), 75, ir::Precision::highest, Prelude::omit);
  EXPECT_EQ(count(turing, "kiln_cp_async"), 0u);
  EXPECT_GT(count(turing, "kiln_ldmatrix_x4_trans("), 0u);
  EXPECT_GT(count(turing, "kiln_mma_m16n8k8_f16("), 0u);
}

TEST(Emit, DivisibleShapesSkipBoundsChecks) {
  std::string even = source(parse(R"(graph g {
    input a: f32[256, 256]
    input b: f32[256, 256]
    y = matmul(a, b)
    output y
  })"),
                            90, ir::Precision::high, Prelude::omit);
  EXPECT_EQ(count(even, "ok ?"), 0u);
  EXPECT_EQ(count(even, "continue;"), 0u);
  std::string ragged = source(parse(R"(graph g {
    input a: f32[250, 260]
    input b: f32[260, 252]
    y = matmul(a, b)
    output y
  })"),
                              90, ir::Precision::high, Prelude::omit);
  EXPECT_GT(count(ragged, "ok ?"), 0u);
  EXPECT_GT(count(ragged, "continue;"), 0u);
  EXPECT_GT(count(ragged, "kiln_cp_async_16("), 0u);  // rows of 260 floats still split in 16 bytes
}

TEST(Emit, UnalignedRowsCopyElementByElement) {
  std::string text = source(parse(R"(graph g {
    input a: f32[33, 35]
    input b: f32[35, 37]
    y = matmul(a, b)
    output y
  })"),
                            90, ir::Precision::high, Prelude::omit);
  EXPECT_EQ(count(text, "kiln_cp_async_16("), 0u);
  EXPECT_GT(count(text, "kiln_cp_async_4("), 0u);
}

TEST(Emit, TallGridsRunInGroupedOrder) {
  std::string tall = source(parse(R"(graph g {
    input a: f32[2048, 64]
    input b: f32[64, 2048]
    y = matmul(a, b)
    output y
  })"),
                            90, ir::Precision::high, Prelude::omit);
  EXPECT_NE(tall.find("const int in_group = pid % "), std::string::npos);
  std::string flat = source(example("mlp"), 90, ir::Precision::high, Prelude::omit);
  EXPECT_EQ(flat.find("in_group"), std::string::npos);
}

TEST(Emit, LiteralsAreExactHexFloats) {
  std::string text = source(example("attention"), 90, ir::Precision::high, Prelude::omit);
  // The scale 0.125 times log2(e) (scores in base 2), rounded once to fp32: 0.18033688.
  EXPECT_NE(text.find("* (0x1.715476p-3f)"), std::string::npos);
}

TEST(Emit, BroadcastOperandsAreIndexedThroughStrides) {
  std::string text = source(example("mlp"), 90, ir::Precision::high, Prelude::omit);
  EXPECT_NE(text.find("p3[n]"), std::string::npos);  // the bias b1 broadcast along rows
}

TEST(Emit, HalfResultsAreRoundedAtEveryNode) {
  std::string text = source(example("half_epilogue"), 80, ir::Precision::highest, Prelude::omit);
  EXPECT_GE(count(text, "kiln_round_f16("), 3u);     // matmul, mul, add
  EXPECT_EQ(count(text, "kiln_float_to_f16("), 0u);  // the cast makes the output f32
}

TEST(Emit, OnlyBatchedMatmulsDeclareTheBatchIndex) {
  // An unused `bz` is an NVRTC warning in every two-dimensional matmul kernel.
  for (int sm : {75, 90}) {
    ir::Precision p = sm == 75 ? ir::Precision::highest : ir::Precision::high;
    EXPECT_EQ(count(source(example("mlp"), sm, p, Prelude::omit), "bz"), 0u) << sm;
    EXPECT_GT(count(source(example("attention"), sm, p, Prelude::omit), "const int bz"), 0u) << sm;
  }
}

}  // namespace
}  // namespace kiln::compiler
