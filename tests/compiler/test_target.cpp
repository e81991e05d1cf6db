// Target values: what parse_target accepts, what it names, and what it refuses.
#include "compiler/target.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln::compiler
