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
