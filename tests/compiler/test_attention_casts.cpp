// Casts in the explicit attention chain, and the rule that no attention-shaped chain runs
// unfused silently: in f32, f16 and bf16, with and without the scale, the mask, a cast of the
// scores to f32 and a cast of P to v's dtype, the chain is one fused kernel; a cast that rounds
// the scores or P, a step the kernel does not compute, or mixed dtypes is a fallback that names
// its reason and the scores' bytes, refused under the refuse policy.
#include "compiler/attention.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::compiler {
namespace {

using test::options;
using test::parse;

// Where the chain casts its scores to f32: nowhere, right after QK^T, or just before the softmax.
enum class ScoresCast { none, after_qk, before_softmax };

struct Form {
  std::string dtype;  // of q, k, v and the output
  bool scale = false;
  bool mask = false;
  ScoresCast scores_cast = ScoresCast::none;
  bool p_cast = false;  // cast(softmax(...), to=dtype)

  std::string describe() const {
    const char* where[] = {"", " cast-after-qk", " cast-before-softmax"};
    return dtype + (scale ? " scale" : "") + (mask ? " mask" : "") +
           where[static_cast<int>(scores_cast)] + (p_cast ? " p-cast" : "");
  }
  // Nodes the fused kernel replaces: two matmuls, the softmax and each step.
  size_t chain_size() const {
    return 3 + scale + mask + (scores_cast != ScoresCast::none) + p_cast;
  }
};

// The chain over q, k, v [2, 4, 64, 32] (scores [2, 4, 64, 64]); the mask [64, 64] has the
// dtype the scores have where it is added.
std::string chain_text(const Form& f) {
  std::string scores_dtype = f.dtype;
  std::string s = "matmul(q, k, transpose_b=true)";
  if (f.scores_cast == ScoresCast::after_qk) {
    s = "cast(" + s + ", to=f32)";
    scores_dtype = "f32";
  }
  if (f.scale) s = "mul(" + s + ", 0.125)";
  std::string mask_dtype = scores_dtype;
  if (f.mask) s = "add(" + s + ", m)";
  if (f.scores_cast == ScoresCast::before_softmax) s = "cast(" + s + ", to=f32)";
  std::string p = "softmax(scores, axis=-1)";
  if (f.p_cast) p = "cast(" + p + ", to=" + f.dtype + ")";
  std::string t = f.dtype;
  std::string text = "graph chain {\n  input q: " + t + "[2, 4, 64, 32]\n  input k: " + t +
                     "[2, 4, 64, 32]\n  input v: " + t + "[2, 4, 64, 32]\n";
  if (f.mask) text += "  input m: " + mask_dtype + "[64, 64]\n";
  return text + "  scores = " + s + "\n  p = " + p + "\n  o = matmul(p, v)\n  output o\n}\n";
}

std::vector<Form> every_form() {
  std::vector<Form> forms;
  for (const char* dtype : {"f32", "f16", "bf16"}) {
    for (int bits = 0; bits < 24; ++bits) {
      Form f;
      f.dtype = dtype;
      f.scale = bits & 1;
      f.mask = bits & 2;
      f.p_cast = bits & 4;
      f.scores_cast = static_cast<ScoresCast>(bits >> 3);
      // 16-bit scores widened to f32 give an f32 P, which an f16 or bf16 v needs cast back.
      bool needs_p_cast = f.dtype != "f32" && f.scores_cast != ScoresCast::none;
      if (needs_p_cast && !f.p_cast) continue;
      forms.push_back(f);
    }
  }
  return forms;
}

MatmulPath path_of(const std::string& dtype, ir::Precision p) {
  if (dtype == "f16") return MatmulPath::f16;
  if (dtype == "bf16") return MatmulPath::bf16;
  switch (p) {
    case ir::Precision::highest:
    case ir::Precision::automatic:
      return MatmulPath::ffma;
    case ir::Precision::high:
      return MatmulPath::tf32;
    case ir::Precision::tf32x3:
      return MatmulPath::tf32x3;
    case ir::Precision::medium:
      return MatmulPath::bf16_of_f32;
  }
  return MatmulPath::ffma;
}

TEST(AttentionCasts, EveryDtypeWithEveryOptionalStepIsOneFusedKernel) {
  for (const Form& f : every_form()) {
    ir::Graph g = parse(chain_text(f));
    for (int sm : {80, 90}) {
      for (ir::Precision p : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                              ir::Precision::medium}) {
        CompileOptions o = options(sm, p);
        o.fusion_fallback = FallbackPolicy::refuse;  // fused, or an error
        auto program = lower(g, o);
        std::string what = f.describe() + " sm_" + std::to_string(sm) + " " +
                           std::string(ir::to_string(p));
        ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
        ASSERT_EQ(program->plan.kernels.size(), 1u) << what;
        const KernelGroup& group = program->plan.kernels[0].group;
        EXPECT_EQ(group.kind, GroupKind::attention) << what;
        EXPECT_EQ(group.nodes.size(), f.chain_size()) << what;
        EXPECT_TRUE(program->diagnostics.fallbacks.empty()) << what;
        EXPECT_EQ(program->plan.workspace_bytes, 0u) << what << ": no scores buffer";
        const AttentionMatch& m = group.attention;
        EXPECT_DOUBLE_EQ(m.scale, f.scale ? 0.125 : 1.0) << what;
        EXPECT_EQ(m.mask >= 0, f.mask) << what;
        EXPECT_EQ(m.path, path_of(f.dtype, p)) << what;
        EXPECT_EQ(program->plan.kernels[0].params.size(), f.mask ? 5u : 4u) << what;
      }
    }
  }
}

// A kernel's text past its first line (a comment that writes out the chain it computes).
std::string body(const std::string& kernel) { return kernel.substr(kernel.find('\n')); }

TEST(AttentionCasts, ACastTheKernelDoesAnywayLeavesTheKernelUnchanged) {
  // Without a mask (whose dtype a cast before the add changes), every cast form compiles to the
  // very kernel of the chain without casts; only the comment naming the chain differs.
  for (const Form& f : every_form()) {
    if (f.mask) continue;
    Form plain = f;
    plain.scores_cast = ScoresCast::none;
    plain.p_cast = false;
    auto cast = lower(parse(chain_text(f)), options(90, ir::Precision::high));
    auto base = lower(parse(chain_text(plain)), options(90, ir::Precision::high));
    ASSERT_TRUE(cast.ok() && base.ok()) << f.describe();
    ASSERT_EQ(cast->kernel_sources.size(), 1u) << f.describe();
    ASSERT_EQ(base->kernel_sources.size(), 1u) << f.describe();
    EXPECT_EQ(body(cast->kernel_sources[0]), body(base->kernel_sources[0])) << f.describe();
  }
}

TEST(AttentionCasts, TheMixedPrecisionFormOfHalfAttentionIsFusedOnSm75Too) {
  // o = matmul(cast(softmax(cast(s, to=f32)), to=f16), v): scores widened, P rounded to v's f16.
  ir::Graph g = parse(R"(graph mixed {
    input q: f16[8, 100, 64]
    input k: f16[8, 120, 64]
    input v: f16[8, 120, 64]
    input m: f32[100, 120]
    s = add(mul(cast(matmul(q, k, transpose_b=true), to=f32), 0.125), m)
    o = matmul(cast(softmax(s, axis=-1), to=f16), v)
    output o
  })");
  for (int sm : {75, 80, 86, 90, 120}) {
    CompileOptions o = options(sm, ir::Precision::high, FallbackPolicy::allow);
    o.fusion_fallback = FallbackPolicy::refuse;
    auto program = lower(g, o);
    ASSERT_TRUE(program.ok()) << "sm_" << sm << ": " << program.error().message;
    ASSERT_EQ(program->plan.kernels.size(), 1u) << "sm_" << sm;
    EXPECT_EQ(program->plan.kernels[0].group.attention.path, MatmulPath::f16);
    // The f32 mask is read as f32 beside the f16 q, k and v.
    EXPECT_NE(program->kernel_sources[0].find("const float* M ="), std::string::npos)
        << program->kernel_sources[0];
  }
}

struct Unfused {
  std::string text;
  std::string reason;  // after "attention at matmul 'o' runs unfused: "
  std::string scores;  // the QK^T product's type and bytes
};

// Chains of the same shape that the fused kernel does not compute as written.
std::vector<Unfused> unfused_chains() {
  auto graph = [](const std::string& qk, const std::string& v, const std::string& scores,
                  const std::string& p) {
    bool t = scores.find(", t)") != std::string::npos;  // a tensor the scores step reads
    return "graph chain {\n  input q: " + qk + "[2, 4, 64, 32]\n  input k: " + qk +
           "[2, 4, 64, 32]\n  input v: " + v + "[2, 4, 64, 32]\n" +
           (t ? "  input t: f32[64, 64]\n" : "") + "  s = matmul(q, k, transpose_b=true)\n" +
           "  scores = " + scores + "\n  p = " + p + "\n  o = matmul(p, v)\n  output o\n}\n";
  };
  const std::string f32_bytes = "its scores [2, 4, 64, 64] f32, 131072 bytes (128.0 KiB)";
  const std::string f16_bytes = "its scores [2, 4, 64, 64] f16, 65536 bytes (64.0 KiB)";
  const std::string bf16_bytes = "its scores [2, 4, 64, 64] bf16, 65536 bytes (64.0 KiB)";
  return {
      // A cast that rounds the scores: the kernel keeps them in fp32.
      {graph("f32", "f32", "cast(mul(s, 0.125), to=f16)", "cast(softmax(scores), to=f32)"),
       "its scores go through cast 'scores' to f16, a rounding the fused kernel (scores in fp32) "
       "does not do",
       f32_bytes},
      {graph("f16", "f16", "cast(s, to=bf16)", "cast(softmax(scores), to=f16)"),
       "its scores go through cast 'scores' to bf16, a rounding the fused kernel (scores in "
       "fp32) does not do",
       f16_bytes},
      {graph("bf16", "bf16", "cast(s, to=f16)", "cast(softmax(scores), to=bf16)"),
       "its scores go through cast 'scores' to f16, a rounding the fused kernel (scores in "
       "fp32) does not do",
       bf16_bytes},
      // P rounded to a dtype other than v's (or f32) on its way.
      {graph("f32", "f32", "mul(s, 0.125)", "cast(cast(softmax(scores), to=bf16), to=f32)"),
       "its probabilities are rounded to bf16 on the way to a matmul that reads f32 (the fused "
       "kernel rounds them once, to v's dtype)",
       f32_bytes},
      {graph("f16", "f16", "cast(s, to=f32)", "cast(cast(softmax(scores), to=bf16), to=f16)"),
       "its probabilities are rounded to bf16 on the way to a matmul that reads f16",
       f16_bytes},
      {graph("bf16", "bf16", "mul(s, 0.125)", "cast(cast(softmax(scores), to=f16), to=bf16)"),
       "its probabilities are rounded to f16 on the way to a matmul that reads bf16",
       bf16_bytes},
      // q and k in one dtype, v in another.
      {graph("f32", "f16", "mul(s, 0.125)", "cast(softmax(scores), to=f16)"),
       "q and k are f32 and v is f16 (the fused kernel reads all three in one dtype)", f32_bytes},
      {graph("bf16", "f16", "cast(s, to=f32)", "cast(softmax(scores), to=f16)"),
       "q and k are bf16 and v is f16", bf16_bytes},
      // Steps the kernel does not compute: a tensor scale, the scores added to themselves, a
      // scale after the mask, a literal shift, a second scale, literal / scores, an activation.
      {graph("f32", "f32", "mul(s, t)", "softmax(scores)"),
       "its scores go through mul 'scores', which the fused kernel does not compute (it takes a "
       "literal scale, then an additive mask)",
       f32_bytes},
      {graph("f16", "f16", "add(s, s)", "softmax(scores)"),
       "its scores go through add 'scores', which the fused kernel does not compute", f16_bytes},
      {graph("f32", "f32", "mul(add(s, t), 0.125)", "softmax(scores)"),
       "its scores go through mul 'scores', which the fused kernel does not compute", f32_bytes},
      {graph("bf16", "bf16", "add(cast(s, to=f32), 1.0)", "cast(softmax(scores), to=bf16)"),
       "its scores go through add 'scores', which the fused kernel does not compute", bf16_bytes},
      {graph("f32", "f32", "mul(mul(s, 0.5), 0.25)", "softmax(scores)"),
       "its scores go through mul 'scores', which the fused kernel does not compute", f32_bytes},
      {graph("f32", "f32", "div(1.0, s)", "softmax(scores)"),
       "its scores go through div 'scores', which the fused kernel does not compute", f32_bytes},
      {graph("f16", "f16", "tanh(cast(s, to=f32))", "cast(softmax(scores), to=f16)"),
       "its scores go through tanh 'scores', which the fused kernel does not compute", f16_bytes},
  };
}

TEST(AttentionCasts, AnUnfusedChainIsAFallbackWithItsReasonAndBytes) {
  for (const Unfused& c : unfused_chains()) {
    ir::Graph g = parse(c.text);
    auto program = lower(g, options(90, ir::Precision::high));
    ASSERT_TRUE(program.ok()) << c.reason << ": " << program.error().message;
    EXPECT_GE(program->plan.kernels.size(), 3u) << c.reason;
    for (const KernelPlan& k : program->plan.kernels)
      EXPECT_NE(k.group.kind, GroupKind::attention) << c.reason;
    ASSERT_EQ(program->diagnostics.fallbacks.size(), 1u) << c.reason;
    const std::string& line = program->diagnostics.fallbacks[0];
    EXPECT_NE(line.find("attention at matmul 'o' runs unfused: " + c.reason), std::string::npos)
        << line;
    EXPECT_NE(line.find(c.scores + " are written and read back"), std::string::npos) << line;

    CompileOptions refuse = options(90, ir::Precision::high);
    refuse.fusion_fallback = FallbackPolicy::refuse;
    auto refused = lower(g, refuse);
    ASSERT_FALSE(refused.ok()) << c.reason;
    EXPECT_NE(refused.error().message.find(c.reason), std::string::npos)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find("refused by the fallback policy"), std::string::npos);
  }
}

TEST(AttentionCasts, ValuesReadOutsideTheChainMakeNoChain) {
  // The graph asks for a value between the two matmuls (or reads it twice), or the softmax is
  // not over the keys: the scores are written whatever kiln does, and nothing is recorded.
  const std::string graphs[] = {
      // P's cast is an output.
      R"(graph g {
        input q: f16[4, 32, 64]
        input k: f16[4, 32, 64]
        input v: f16[4, 32, 64]
        p = cast(softmax(cast(matmul(q, k, transpose_b=true), to=f32), axis=-1), to=f16)
        o = matmul(p, v)
        output o, p
      })",
      // The widened scores are read by a second consumer.
      R"(graph g {
        input q: f16[4, 32, 64]
        input k: f16[4, 32, 64]
        input v: f16[4, 32, 64]
        s = cast(matmul(q, k, transpose_b=true), to=f32)
        o = matmul(cast(softmax(s, axis=-1), to=f16), v)
        r = sum(s, axis=-1)
        output o, r
      })",
      // P's cast feeds two matmuls.
      R"(graph g {
        input q: f16[4, 32, 64]
        input k: f16[4, 32, 64]
        input v: f16[4, 32, 64]
        p = cast(softmax(cast(matmul(q, k, transpose_b=true), to=f32), axis=-1), to=f16)
        o = add(matmul(p, v), matmul(p, k))
        output o
      })",
      // A softmax over the queries.
      R"(graph g {
        input q: f16[4, 32, 64]
        input k: f16[4, 32, 64]
        input v: f16[4, 32, 64]
        o = matmul(cast(softmax(cast(matmul(q, k, transpose_b=true), to=f32), axis=1), to=f16), v)
        output o
      })",
  };
  for (const std::string& text : graphs) {
    CompileOptions refuse = options(90, ir::Precision::high);
    refuse.fusion_fallback = FallbackPolicy::refuse;  // a recorded fallback would fail here
    auto program = lower(parse(text), refuse);
    ASSERT_TRUE(program.ok()) << text << program.error().message;
    EXPECT_GT(program->plan.kernels.size(), 1u) << text;
    EXPECT_TRUE(program->diagnostics.fallbacks.empty()) << text;
    for (const KernelPlan& k : program->plan.kernels) EXPECT_NE(k.group.kind, GroupKind::attention);
  }
}

}  // namespace
}  // namespace kiln::compiler
