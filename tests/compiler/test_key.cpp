// key_fields() and codegen_version(): what a cache key is made of.
#include "compiler/key.h"

#include "test_support.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

using test::example;
using test::options;

TEST(Key, FieldsAreTaggedInTheDocumentedOrder) {
  KeyFields fields =
      key_fields(example("mlp"), options(90, ir::Precision::automatic), {"high", "13.0"});
  std::vector<std::string> tags;
  for (const auto& f : fields) tags.push_back(f.first);
  EXPECT_EQ(tags, (std::vector<std::string>{"graph", "graph_hash", "arch", "precision",
                                            "nvrtc_version", "codegen_version", "options"}));
  EXPECT_EQ(fields[2].second, "sm_90");
  EXPECT_EQ(fields[3].second, "high");
}

// The cache hashes these fields (cache::make_key, tested with the cache); here: every component
// of a compile lands in them.
TEST(Key, FieldsChangeWithEveryComponent) {
  ir::Graph g = example("mlp");
  CompileOptions o = options(90, ir::Precision::high);
  KeyFields base = key_fields(g, o, {"high", "13.0"});
  EXPECT_EQ(base, key_fields(g, o, {"high", "13.0"}));
  EXPECT_NE(base, key_fields(g, options(80, ir::Precision::high), {"high", "13.0"}));
  EXPECT_NE(base, key_fields(g, o, {"tf32x3", "13.0"}));
  EXPECT_NE(base, key_fields(g, o, {"high", "13.1"}));
  EXPECT_NE(base, key_fields(example("attention"), o, {"high", "13.0"}));
  CompileOptions fallback = o;
  fallback.fallback = FallbackPolicy::allow;
  EXPECT_NE(base, key_fields(g, fallback, {"high", "13.0"}));
  // sm_90a's kernels load on 9.0 only: never the same entries as sm_90's.
  CompileOptions specific = o;
  specific.target = Target::cuda(90, "a");
  KeyFields a = key_fields(g, specific, {"high", "13.0"});
  EXPECT_NE(base, a);
  EXPECT_EQ(a[2], (std::pair<std::string, std::string>{"arch", "sm_90a"}));
}

TEST(Key, CodegenVersionIsABuildTimeSha256) {
  for (std::string_view v : {codegen_version(), cpu_codegen_version()}) {
    ASSERT_EQ(v.size(), 64u);
    for (char c : v) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << v;
  }
}

// CUDA and the CPU target each key by their own codegen version: a change to one target's
// generator leaves the other's entries valid.
TEST(Key, EachTargetKeysByItsOwnCodegenVersion) {
  EXPECT_NE(codegen_version(), cpu_codegen_version());
  ir::Graph g = example("mlp");
  CompileOptions cuda = options(90, ir::Precision::high);
  CompileOptions cpu = cuda;
  cpu.target = Target::for_cpu("x86-64-v3", "");
  auto field = [](const KeyFields& fields, const std::string& name) {
    for (const auto& [key, value] : fields)
      if (key == name) return value;
    return std::string("(none)");
  };
  EXPECT_EQ(field(key_fields(g, cuda, {"high", "13.0"}), "codegen_version"), codegen_version());
  EXPECT_EQ(field(key_fields(g, cpu, {"high", "16.0.6"}), "codegen_version"),
            cpu_codegen_version());
}

}  // namespace
}  // namespace kiln::compiler
