// Target values: what parse_target accepts, what it names, and what it refuses.
#include "compiler/target.h"

#include "compiler/nvrtc.h"
#include "compiler/options.h"
#include "compiler/tile.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln::compiler {
namespace {

TEST(Target, ParsesCudaAndCpuForms) {
  EXPECT_EQ(parse_target("cuda")->name(), "cuda");
  EXPECT_EQ(parse_target("")->name(), "cuda");
  EXPECT_EQ(parse_target("cuda:sm_90")->sm, 90);
  EXPECT_EQ(parse_target("sm_80")->name(), "cuda:sm_80");
  auto cpu = parse_target("cpu");
  ASSERT_TRUE(cpu);
  EXPECT_TRUE(cpu->is_cpu());
  EXPECT_EQ(cpu->name(), "cpu:native");
  EXPECT_EQ(parse_target("cpu:x86-64-v3")->cpu, "x86-64-v3");
}

TEST(Target, RefusesWhatItDoesNotKnow) {
  for (const char* text : {"gpu", "cpu:", "cuda:", "cuda:sm_xx", "90", "tpu:v5"}) {
    auto t = parse_target(text);
    ASSERT_FALSE(t) << text;
    EXPECT_NE(t.error().message.find(std::string("'") + text + "'"), std::string::npos)
        << t.error().message;
  }
}

// sm_90a: an arch of its own, named, parsed and keyed apart from sm_90, with Hopper's own
// instructions as features only it has.
TEST(Target, Sm90aIsAnArchOfItsOwn) {
  for (const char* text : {"sm_90a", "cuda:sm_90a"}) {
    auto t = parse_target(text);
    ASSERT_TRUE(t) << text;
    EXPECT_EQ(t->sm, 90);
    EXPECT_EQ(t->suffix, "a");
    EXPECT_TRUE(t->arch_specific());
    EXPECT_EQ(t->arch(), "sm_90a");
    EXPECT_EQ(t->name(), "cuda:sm_90a");
    EXPECT_EQ(*parse_target(t->name()), *t) << "the name reads back";
  }
  auto emulated = parse_target("emulate:sm_90a");
  ASSERT_TRUE(emulated);
  EXPECT_TRUE(emulated->is_emulated());
  EXPECT_EQ(emulated->name(), "emulate:sm_90a");
  auto plain = parse_arch("sm_90");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->arch_specific());
  EXPECT_NE(*plain, *parse_arch("sm_90a"));

  Target hopper_a = Target::cuda(90, "a"), hopper = Target::cuda(90);
  for (Feature f : {Feature::wgmma, Feature::setmaxnreg}) {
    EXPECT_TRUE(hopper_a.has(f));
    EXPECT_TRUE(emulated->has(f)) << "the emulated sm_90a plans as sm_90a does";
    EXPECT_FALSE(hopper.has(f)) << "sm_90 code runs on later archs: no arch-specific features";
    EXPECT_FALSE(Target::cuda(100).has(f));
    EXPECT_FALSE(Target::cuda(120).has(f));
  }
  // TMA is sm_90's and every later arch's, with or without the suffix.
  for (int sm : {90, 100, 103, 110, 120, 121}) EXPECT_TRUE(Target::cuda(sm).has(Feature::tma)) << sm;
  EXPECT_FALSE(Target::cuda(89).has(Feature::tma));
  // Everything sm_90 has, sm_90a has too.
  for (Feature f : {Feature::tf32_bf16_mma, Feature::f16_mma_k16, Feature::cp_async,
                    Feature::smem_96k, Feature::tma})
    EXPECT_EQ(hopper_a.has(f), hopper.has(f));

  // The device's default target: sm_90a on 9.0 only.
  EXPECT_EQ(device_target(90).arch(), "sm_90a");
  for (int sm : {75, 80, 86, 89, 100, 120}) EXPECT_EQ(device_target(sm).arch(), arch_name(sm));
}

TEST(Target, ArchSuffixesKilnDoesNotPlanAreRefusedSayingWhich) {
  auto b200 = parse_arch("sm_100a");
  ASSERT_FALSE(b200);
  EXPECT_NE(b200.error().message.find("kiln plans arch-specific code for sm_90a only; give sm_100"),
            std::string::npos)
      << b200.error().message;
  auto target = parse_target("cuda:sm_120a");
  ASSERT_FALSE(target);
  EXPECT_NE(target.error().message.find("'cuda:sm_120a'"), std::string::npos);
  EXPECT_NE(target.error().message.find("sm_90a only"), std::string::npos);
  for (const char* text : {"sm_90f", "sm_90aa", "sm_a", "sm_90A"}) {
    auto t = parse_arch(text);
    ASSERT_FALSE(t) << text;
    EXPECT_NE(t.error().message.find(std::string("'") + text + "'"), std::string::npos);
  }
  auto virtual_arch = parse_arch("compute_90a");
  ASSERT_FALSE(virtual_arch);
  EXPECT_NE(virtual_arch.error().message.find("give sm_90a"), std::string::npos)
      << virtual_arch.error().message;
}

// The table's facts agree with each other and with what the planner asks of them.
TEST(ArchTable, IsOrderedAndEveryPlanFitsItsArch) {
  auto table = arch_table();
  ASSERT_FALSE(table.empty());
  EXPECT_EQ(table.front().sm, 75);
  for (size_t i = 0; i < table.size(); ++i) {
    const ArchFacts& facts = table[i];
    SCOPED_TRACE(arch_name(facts.sm));
    if (i > 0) {
      EXPECT_LT(table[i - 1].sm, facts.sm);
    }
    EXPECT_EQ(arch_facts(facts.sm), &facts);
    EXPECT_GT(facts.typical_sms, 0);
    EXPECT_EQ(typical_sm_count(facts.sm), facts.typical_sms);
    for (Feature f : {Feature::tf32_bf16_mma, Feature::f16_mma_k16, Feature::cp_async,
                      Feature::smem_96k}) {
      EXPECT_EQ(facts.has(f), facts.sm >= 80);
      EXPECT_EQ(arch_has(facts.sm, f), facts.has(f));
    }
    EXPECT_LE(static_cast<size_t>(smem_budget(facts.sm)), facts.max_dynamic_smem)
        << "the planner's shared-memory budget is more than a block may have";
    // What a tile may use is the arch's own limit, not the heuristics' budget.
    EXPECT_EQ(static_cast<size_t>(smem_limit(facts.sm)), facts.max_dynamic_smem);
  }
  EXPECT_EQ(smem_limit(90), 227 * 1024);
  EXPECT_EQ(smem_limit(80), 163 * 1024);
  EXPECT_EQ(smem_budget(90), 96 * 1024);
  EXPECT_EQ(arch_facts(61), nullptr);
  EXPECT_EQ(known_archs().size(), table.size());
}

// Targets are asked for features, not arch numbers; the CPU target and an unset arch have none.
TEST(ArchTable, TargetsAnswerByFeature) {
  Target ampere;
  ampere.sm = 80;
  EXPECT_TRUE(ampere.has(Feature::cp_async));
  EXPECT_TRUE(ampere.has(Feature::tf32_bf16_mma));
  Target turing;
  turing.sm = 75;
  EXPECT_FALSE(turing.has(Feature::cp_async));
  EXPECT_FALSE(turing.has(Feature::f16_mma_k16));
  EXPECT_FALSE(Target{}.has(Feature::cp_async));  // "cuda": the GPU's arch, not known yet
  auto cpu = parse_target("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->has(Feature::tf32_bf16_mma));
  // An arch past the table (reached without check_request) has sm_80's features.
  EXPECT_TRUE(arch_has(130, Feature::cp_async));
  EXPECT_FALSE(arch_has(72, Feature::cp_async));
}

// The table lists what the NVRTC kiln builds against compiles for, when that NVRTC is there.
TEST(ArchTable, MatchesTheNvrtcList) {
  auto nvrtc = load_nvrtc("");
  if (!nvrtc) GTEST_SKIP() << nvrtc.error().message;
  std::vector<int> listed = (*nvrtc)->archs();
  for (const ArchFacts& facts : arch_table()) {
    EXPECT_NE(std::find(listed.begin(), listed.end(), facts.sm), listed.end())
        << arch_name(facts.sm) << " is in kiln's table but not NVRTC's list";
  }
}

}  // namespace
}  // namespace kiln::compiler
