// resolve_precision: auto per arch, per-op overrides, refusals and recorded fallbacks.
#include "compiler/precision.h"

#include "test_support.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

using test::example;
using test::options;

TEST(Precision, AutoIsHighOnAmpereAndNewer) {
  auto plan = resolve_precision(example("mlp"), options(80, ir::Precision::automatic));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->graph_mode, ir::Precision::high);
  EXPECT_NE(plan->decision.find("auto -> high on sm_80"), std::string::npos) << plan->decision;
}

TEST(Precision, AutoIsHighestOnTuring) {
  auto plan = resolve_precision(example("mlp"), options(75, ir::Precision::automatic));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->graph_mode, ir::Precision::highest);
  EXPECT_TRUE(plan->fallbacks.empty());
}

TEST(Precision, MatmulAttributeOverridesGraphMode) {
  ir::Graph g = example("mixed_head");
  auto plan = resolve_precision(g, options(90, ir::Precision::high));
  ASSERT_TRUE(plan.ok());
  std::vector<MatmulPath> paths;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (g.nodes()[i].kind == ir::OpKind::matmul) paths.push_back(plan->paths[i]);
  }
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0], MatmulPath::tf32);  // logits: graph mode
  EXPECT_EQ(paths[1], MatmulPath::ffma);  // value head: precision=highest
}

TEST(Precision, ModesMapToPaths) {
  ir::Graph g = example("mlp");
  for (auto [mode, path] : {std::pair{ir::Precision::highest, MatmulPath::ffma},
                            std::pair{ir::Precision::high, MatmulPath::tf32},
                            std::pair{ir::Precision::tf32x3, MatmulPath::tf32x3},
                            std::pair{ir::Precision::medium, MatmulPath::bf16_of_f32}}) {
    auto plan = resolve_precision(g, options(90, mode));
    ASSERT_TRUE(plan.ok());
    int matmuls = 0;
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      if (g.nodes()[i].kind != ir::OpKind::matmul) continue;
      EXPECT_EQ(plan->paths[i], path) << ir::to_string(mode);
      ++matmuls;
    }
    EXPECT_EQ(matmuls, 2);
  }
}

TEST(Precision, HalfGraphsUseTheirOwnMmaOnEveryArch) {
  for (int sm : {75, 80, 90}) {
    ir::Graph g = example("half_epilogue");
    auto plan = resolve_precision(g, options(sm, ir::Precision::highest));
    ASSERT_TRUE(plan.ok());
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      if (g.nodes()[i].kind == ir::OpKind::matmul) {
        EXPECT_EQ(plan->paths[i], MatmulPath::f16);
      }
    }
  }
}

TEST(Precision, Bf16MmaOnTuringIsRefusedNamingOpModeAndArch) {
  auto plan = resolve_precision(example("gated_mlp"), options(75, ir::Precision::high));
  ASSERT_FALSE(plan.ok());
  const std::string& m = plan.error().message;
  EXPECT_NE(m.find("matmul"), std::string::npos) << m;
  EXPECT_NE(m.find("bf16"), std::string::npos) << m;
  EXPECT_NE(m.find("high"), std::string::npos) << m;
  EXPECT_NE(m.find("sm_75"), std::string::npos) << m;
}

TEST(Precision, MediumAndTf32OnTuringAreRefused) {
  for (auto mode : {ir::Precision::high, ir::Precision::tf32x3, ir::Precision::medium}) {
    auto plan = resolve_precision(example("mlp"), options(75, mode));
    ASSERT_FALSE(plan.ok()) << ir::to_string(mode);
    EXPECT_NE(plan.error().message.find(std::string(ir::to_string(mode))), std::string::npos);
  }
}

TEST(Precision, AllowedFallbackIsRecordedPerOp) {
  auto plan = resolve_precision(example("gated_mlp"),
                                options(75, ir::Precision::medium, FallbackPolicy::allow));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->fallbacks.size(), 3u);
  EXPECT_NE(plan->fallbacks[0].find("sm_75"), std::string::npos);
  EXPECT_NE(plan->fallbacks[0].find("ffma"), std::string::npos);
  for (MatmulPath p : plan->paths) EXPECT_EQ(p, MatmulPath::ffma);
}

// A path is what the mode promises (numerics: the CPU target rounds by it) and how the GPU runs
// it (strategy: the emitters choose instructions by it); kernel names keep their tokens.
TEST(Precision, EachPathIsNumericsAndAStrategy) {
  struct Named {
    MatmulPath path;
    Numerics numerics;
    MmaStrategy strategy;
    const char* name;
  };
  const Named paths[] = {
      {MatmulPath::ffma, Numerics::fp32, MmaStrategy::ffma, "ffma"},
      {MatmulPath::tf32, Numerics::tf32, MmaStrategy::mma_sync, "tf32"},
      {MatmulPath::tf32x3, Numerics::tf32x3, MmaStrategy::mma_sync, "tf32x3"},
      {MatmulPath::bf16_of_f32, Numerics::bf16_of_f32, MmaStrategy::mma_sync, "bf16f32"},
      {MatmulPath::f16, Numerics::f16, MmaStrategy::mma_sync, "f16"},
      {MatmulPath::bf16, Numerics::bf16, MmaStrategy::mma_sync, "bf16"}};
  for (const Named& p : paths) {
    EXPECT_EQ(p.path.numerics, p.numerics) << p.name;
    EXPECT_EQ(p.path.strategy, p.strategy) << p.name;
    EXPECT_EQ(to_string(p.path), p.name);
    EXPECT_EQ(uses_mma(p.path), p.strategy == MmaStrategy::mma_sync) << p.name;
  }
  EXPECT_EQ(to_string(Numerics::fp32), "fp32");
  // The plan's paths for each mode on sm_90.
  ir::Graph g = example("mlp");
  for (auto [mode, numerics] : {std::pair{ir::Precision::highest, Numerics::fp32},
                                std::pair{ir::Precision::high, Numerics::tf32},
                                std::pair{ir::Precision::medium, Numerics::bf16_of_f32}}) {
    auto plan = resolve_precision(g, options(90, mode));
    ASSERT_TRUE(plan.ok());
    for (const ir::Node& n : g.nodes()) {
      if (n.kind != ir::OpKind::matmul) continue;
      MatmulPath path = plan->paths[static_cast<size_t>(&n - g.nodes().data())];
      EXPECT_EQ(path.numerics, numerics);
      EXPECT_EQ(path.strategy, numerics == Numerics::fp32 ? MmaStrategy::ffma
                                                          : MmaStrategy::mma_sync);
    }
  }
}

TEST(Precision, AmpereNeedsNoFallback) {
  auto plan = resolve_precision(example("gated_mlp"),
                                options(80, ir::Precision::medium, FallbackPolicy::allow));
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->fallbacks.empty());
}

// The one mapping from a user's two settings to the compile's two policies.
TEST(Precision, FallbackSettingsMapToBothPoliciesInOnePlace) {
  struct Case {
    FallbackPolicy policy;
    bool allow_precision;
    FallbackPolicy precision, fusion;
  };
  const Case cases[] = {
      {FallbackPolicy::warn, false, FallbackPolicy::refuse, FallbackPolicy::warn},
      {FallbackPolicy::warn, true, FallbackPolicy::allow, FallbackPolicy::warn},
      {FallbackPolicy::allow, false, FallbackPolicy::refuse, FallbackPolicy::allow},
      {FallbackPolicy::allow, true, FallbackPolicy::allow, FallbackPolicy::allow},
      // Refusing refuses precision fallbacks even where they were allowed.
      {FallbackPolicy::refuse, false, FallbackPolicy::refuse, FallbackPolicy::refuse},
      {FallbackPolicy::refuse, true, FallbackPolicy::refuse, FallbackPolicy::refuse},
  };
  for (const Case& c : cases) {
    CompileOptions o;
    set_fallback_policy(o, c.policy, c.allow_precision);
    EXPECT_EQ(o.fallback, c.precision) << static_cast<int>(c.policy) << c.allow_precision;
    EXPECT_EQ(o.fusion_fallback, c.fusion) << static_cast<int>(c.policy) << c.allow_precision;
  }
}

}  // namespace
}  // namespace kiln::compiler
