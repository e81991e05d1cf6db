// The attention pass and its kernels: the op and the explicit chain become one kernel, a chain
// that cannot be fused is a fallback that names its reason and the scores' bytes (refused under
// the refuse policy), and the fused plan keeps no S_q x S_k buffer.
#include "compiler/attention.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::compiler {
namespace {

using test::count;
using test::example;
using test::options;
using test::parse;

// attention.kg's chain with `scores` and `tail` written in.
std::string chain(const std::string& scores, const std::string& second = "matmul(p, v)",
                  const std::string& k_type = "f32[16, 128, 64]") {
  return R"(graph chain {
    input q: f32[16, 128, 64]
    input k: )" + k_type + R"(
    input v: f32[16, 128, 64]
    input m: f32[128, 128]
    scores = )" + scores + R"(
    p = softmax(scores, axis=-1)
    o = )" + second + R"(
    output o
  })";
}

LoweredProgram lowered(const ir::Graph& g, int sm = 90, ir::Precision p = ir::Precision::high) {
  auto program = lower(g, options(sm, p));
  EXPECT_TRUE(program.ok()) << (program.ok() ? "" : program.error().message);
  return program.ok() ? std::move(*program) : LoweredProgram{};
}

TEST(Attention, EveryExampleAttentionIsOneKernelInEveryModeAndArch) {
  for (const char* name : {"attention", "attention_dynamic", "attention_causal"}) {
    ir::Graph g = example(name);
    for (int sm : {75, 80, 86, 90, 120}) {
      for (ir::Precision p : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                              ir::Precision::medium}) {
        if (sm < 80 && p != ir::Precision::highest) continue;  // no tf32/bf16 mma on sm_75
        auto program = lower(g, test::with_bucket(g, options(sm, p)));
        ASSERT_TRUE(program.ok()) << name << " sm_" << sm << ": " << program.error().message;
        ASSERT_EQ(program->plan.kernels.size(), 1u) << name << " sm_" << sm;
        EXPECT_EQ(program->plan.kernels[0].group.kind, GroupKind::attention);
        EXPECT_TRUE(program->diagnostics.fallbacks.empty());
        EXPECT_EQ(program->plan.workspace_bytes, 0u) << "no temporaries at all";
      }
    }
  }
}

TEST(Attention, TheChainIsFoundWithEitherScaleAndTheMaskOnEitherSide) {
  struct Form {
    std::string scores;
    double scale;
    bool mask;
  };
  const Form forms[] = {
      {"matmul(q, k, transpose_b=true)", 1.0, false},
      {"mul(matmul(q, k, transpose_b=true), 0.125)", 0.125, false},
      {"mul(0.25, matmul(q, k, transpose_b=true))", 0.25, false},
      {"div(matmul(q, k, transpose_b=true), 8.0)", 0.125, false},
      {"add(mul(matmul(q, k, transpose_b=true), 0.125), m)", 0.125, true},
      {"add(m, div(matmul(q, k, transpose_b=true), 4.0))", 0.25, true},
      {"add(matmul(q, k, transpose_b=true), m)", 1.0, true},
  };
  for (const Form& f : forms) {
    LoweredProgram program = lowered(parse(chain(f.scores)));
    ASSERT_EQ(program.plan.kernels.size(), 1u) << f.scores;
    const AttentionMatch& m = program.plan.kernels[0].group.attention;
    EXPECT_DOUBLE_EQ(m.scale, f.scale) << f.scores;
    EXPECT_EQ(m.mask >= 0, f.mask) << f.scores;
    EXPECT_FALSE(m.causal);
    EXPECT_EQ(m.path, MatmulPath::tf32);
    // q, k, v (and the mask) are the kernel's reads, in that order after the output.
    EXPECT_EQ(program.plan.kernels[0].params.size(), f.mask ? 5u : 4u) << f.scores;
  }
}

TEST(Attention, ValuesSomethingElseReadsAreNotAChain) {
  // The probabilities are an output, the softmax is not over keys: none is attention, and none
  // is recorded as a fallback. (Scores added to themselves or scaled by a tensor are attention
  // the kernel does not compute: fallbacks, see test_attention_casts.cpp.)
  const std::string graphs[] = {
      R"(graph g {
        input q: f32[4, 32, 64]
        input k: f32[4, 32, 64]
        input v: f32[4, 32, 64]
        p = softmax(matmul(q, k, transpose_b=true), axis=-1)
        o = matmul(p, v)
        output o
        output p
      })",
      R"(graph g {
        input q: f32[4, 32, 64]
        input k: f32[4, 32, 64]
        input v: f32[4, 32, 32]
        o = matmul(softmax(matmul(q, k, transpose_b=true), axis=1), v)
        output o
      })",
  };
  for (const std::string& text : graphs) {
    LoweredProgram program = lowered(parse(text));
    EXPECT_GT(program.plan.kernels.size(), 1u) << text;
    EXPECT_TRUE(program.diagnostics.fallbacks.empty()) << text;
    for (const KernelPlan& k : program.plan.kernels) EXPECT_NE(k.group.kind, GroupKind::attention);
  }
}

TEST(Attention, AChainThatCannotBeFusedIsAFallbackWithItsReasonAndBytes) {
  struct Case {
    std::string text;
    std::string reason;
  };
  const Case cases[] = {
      {chain("mul(matmul(q, k), 0.125)", "matmul(p, v)", "f32[16, 64, 128]"),
       "k is read as [..., D, S_k]"},
      {chain("mul(matmul(q, k, transpose_b=true), 0.125)", "matmul(p, v, precision=highest)"),
       "its two matmuls run different paths (tf32 and ffma)"},
      {R"(graph chain {
        input q: f32[16, 128, 320]
        input k: f32[16, 128, 320]
        input v: f32[16, 128, 64]
        p = softmax(matmul(q, k, transpose_b=true), axis=-1)
        o = matmul(p, v)
        output o
      })",
       "head dim 320 > 256"},
      // The scores of one batch entry broadcast to a mask of 16: q, k and v would be reread.
      {R"(graph chain {
        input q: f32[1, 128, 64]
        input k: f32[1, 128, 64]
        input v: f32[16, 128, 64]
        input m: f32[16, 128, 128]
        p = softmax(add(matmul(q, k, transpose_b=true), m), axis=-1)
        o = matmul(p, v)
        output o
      })",
       "its mask [16, 128, 128] is larger than the scores [1, 128, 128]"},
  };
  for (const Case& c : cases) {
    LoweredProgram program = lowered(parse(c.text));
    EXPECT_EQ(program.plan.kernels.size(), 3u) << c.reason;
    ASSERT_EQ(program.diagnostics.fallbacks.size(), 1u) << c.reason;
    const std::string& line = program.diagnostics.fallbacks[0];
    EXPECT_NE(line.find("attention at matmul 'o' runs unfused: " + c.reason), std::string::npos)
        << line;
    // The scores: 16 (or 1) x 128 x 128 fp32.
    bool one = c.text.find("f32[1, 128, 64]") != std::string::npos;
    EXPECT_NE(line.find(one ? "[1, 128, 128] f32, 65536 bytes (64.0 KiB)"
                            : "[16, 128, 128] f32, 1048576 bytes (1.0 MiB)"),
              std::string::npos)
        << line;
    // The unfused plan does hold them.
    EXPECT_GE(program.plan.workspace_bytes, one ? 65536u : 1048576u) << c.reason;

    CompileOptions refuse = options(90, ir::Precision::high);
    refuse.fusion_fallback = FallbackPolicy::refuse;
    auto refused = lower(parse(c.text), refuse);
    ASSERT_FALSE(refused.ok()) << c.reason;
    EXPECT_NE(refused.error().message.find(c.reason), std::string::npos);
    EXPECT_NE(refused.error().message.find("refused by the fallback policy"), std::string::npos);
  }
}

TEST(Attention, TheFusedPlanHoldsNoScoresAtAnySequenceLength) {
  // 8 heads of 4096 queries and keys: the scores would be 512 MiB; the fused kernel keeps
  // O(S * D) per head in flight and the plan has no temporary at all.
  ir::Graph g = parse(R"(graph long {
    input q: f16[8, 4096, 64]
    input k: f16[8, 4096, 64]
    input v: f16[8, 4096, 64]
    p = softmax(mul(matmul(q, k, transpose_b=true), 0.125), axis=-1)
    o = matmul(p, v)
    output o
  })");
  LoweredProgram program = lowered(g, 80);
  ASSERT_EQ(program.plan.kernels.size(), 1u);
  EXPECT_TRUE(program.plan.temporary_bytes.empty());
  EXPECT_EQ(program.plan.workspace_bytes, 0u);
  const KernelPlan& k = program.plan.kernels[0];
  // Shared memory per block: a query tile and the key/value stages, O(tile * D).
  EXPECT_LE(k.launch.dynamic_smem_bytes, 96u * 1024);
  EXPECT_EQ(k.launch.grid[0], 4096u / k.attention_tile.br);
  EXPECT_EQ(k.launch.grid[2], 8u);
}

TEST(Attention, TilesFitSharedMemoryOnEveryArchAndPipelineOnAmpere) {
  for (MatmulPath path : {MatmulPath::ffma, MatmulPath::tf32, MatmulPath::tf32x3,
                          MatmulPath::bf16_of_f32, MatmulPath::f16, MatmulPath::bf16}) {
    for (int sm : {75, 80, 86, 90, 120}) {
      if (sm < 80 && path != MatmulPath::ffma && path != MatmulPath::f16) continue;
      for (int64_t d : {16, 32, 64, 80, 96, 128}) {
        AttentionTile t = choose_attention_tile(path, d, d, sm);
        EXPECT_LE(t.smem_bytes(), smem_budget(sm)) << to_string(path) << " sm_" << sm << " d " << d;
        EXPECT_EQ(t.d % 16, 0);
        EXPECT_EQ(t.dv_slabs, 1);
        EXPECT_EQ(t.stages, sm >= 80 ? 2 : 1) << to_string(path) << " sm_" << sm << " d " << d;
      }
      // Past 128 up to k_max_attention_head_dim: still a tile that fits (fewer keys or stages),
      // and v's head dim in slabs of at most 128 that cover it.
      for (int64_t d = 129; d <= k_max_attention_head_dim; d += 7) {
        for (int64_t dv : {int64_t{32}, d}) {
          AttentionTile t = choose_attention_tile(path, d, dv, sm);
          std::string what = std::string(to_string(path)) + " sm_" + std::to_string(sm) + " d " +
                             std::to_string(d) + " dv " + std::to_string(dv);
          EXPECT_LE(t.smem_bytes(), smem_budget(sm)) << what;
          EXPECT_GE(t.d, d) << what;
          EXPECT_LE(t.dv, 128) << what;
          EXPECT_EQ(t.dv % 16, 0) << what;
          EXPECT_GE(t.dv * t.dv_slabs, dv) << what;
          EXPECT_LT(t.dv * (t.dv_slabs - 1), dv) << what << ": a slab with nothing to do";
        }
      }
    }
  }
}

TEST(Attention, HeadDimsPast128SplitTheOutputOverTheGridsY) {
  ir::Graph g = parse(R"(graph wide {
    input q: f16[2, 8, 100, 256]
    input k: f16[2, 8, 120, 256]
    input v: f16[2, 8, 120, 160]
    o = attention(q, k, v, causal=true)
    output o
  })");
  for (int sm : {75, 80, 90}) {
    LoweredProgram program = lowered(g, sm);
    ASSERT_EQ(program.plan.kernels.size(), 1u);
    const KernelPlan& k = program.plan.kernels[0];
    EXPECT_EQ(k.attention_tile.dv_slabs, 2);
    EXPECT_EQ(k.attention_tile.dv, 80);
    EXPECT_EQ(k.launch.grid[1], 2u) << "sm_" << sm;
    EXPECT_EQ(k.launch.grid[2], 16u);
    EXPECT_NE(program.kernel_sources[0].find("const int n0 = (int)blockIdx.y * 80;"),
              std::string::npos);
  }
}

TEST(Attention, KernelsOfEveryPathCarryTheirArithmetic) {
  ir::Graph g = example("attention");
  struct Want {
    ir::Precision p;
    const char* mma;
    size_t mmas;  // mma calls in the kernel text (QK^T and PV)
  };
  const Want wants[] = {{ir::Precision::highest, "kiln_mma", 0},
                        {ir::Precision::high, "kiln_mma_m16n8k8_tf32", 2},
                        {ir::Precision::tf32x3, "kiln_mma_m16n8k8_tf32", 6},
                        {ir::Precision::medium, "kiln_mma_m16n8k16_bf16", 2}};
  for (const Want& w : wants) {
    LoweredProgram program = lowered(g, 80, w.p);
    ASSERT_EQ(program.kernel_sources.size(), 1u);
    const std::string& text = program.kernel_sources[0];
    EXPECT_EQ(count(text, w.mma), w.mmas) << ir::to_string(w.p);
    EXPECT_EQ(count(text, "kiln_cp_async_wait"), 1u) << "double-buffered key tiles on sm_80";
    EXPECT_EQ(count(text, "exp2f("), 2u) << "the rescale factor and p, once per key tile";
    EXPECT_EQ(count(text, "expf("), 0u) << "scores in base 2: exp2f, no expf";
  }
  LoweredProgram sm75 = lowered(parse(R"(graph h {
    input q: f16[4, 40, 64]
    input k: f16[4, 40, 64]
    input v: f16[4, 40, 64]
    o = matmul(softmax(matmul(q, k, transpose_b=true), axis=-1), v)
    output o
  })"), 75);
  ASSERT_EQ(sm75.kernel_sources.size(), 1u);
  EXPECT_EQ(count(sm75.kernel_sources[0], "kiln_mma_m16n8k8_f16"), 4u);
  EXPECT_EQ(count(sm75.kernel_sources[0], "cp_async"), 0u) << "no cp.async before sm_80";
}

}  // namespace
}  // namespace kiln::compiler
