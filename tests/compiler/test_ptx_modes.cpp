// The PTX of each mode holds the instructions the mode promises (and highest holds no tf32).
#include "compiler/compiler.h"

#include "test_support.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

using test::count;
using test::example;
using test::options;

std::string ptx_of(const std::string& graph, int sm, ir::Precision p) {
  auto a = compile(example(graph), options(sm, p));
  EXPECT_TRUE(a.ok()) << (a.ok() ? "" : a.error().message);
  std::string all;
  if (a.ok()) {
    for (const auto& k : a->kernels) all += k.ptx;
  }
  return all;
}

constexpr const char* k_tf32_mma = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";

class PtxModes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  }
};

TEST_F(PtxModes, HighestUsesFfmaAndNoTf32) {
  std::string ptx = ptx_of("mlp", 90, ir::Precision::highest);
  EXPECT_EQ(count(ptx, "tf32"), 0u);
  EXPECT_EQ(count(ptx, "mma.sync"), 0u);
  EXPECT_GT(count(ptx, "fma.rn.f32"), 100u);
  EXPECT_GT(count(ptx, "cp.async"), 0u);
}

TEST_F(PtxModes, HighUsesTf32MmaWithRnaRounding) {
  std::string ptx = ptx_of("mlp", 80, ir::Precision::high);
  EXPECT_GT(count(ptx, k_tf32_mma), 0u);
  EXPECT_GT(count(ptx, "cvt.rna.tf32.f32"), 0u);
  EXPECT_GT(count(ptx, "ldmatrix.sync.aligned.m8n8.x4"), 0u);
  EXPECT_GT(count(ptx, "cp.async.cg.shared.global"), 0u);
  EXPECT_GT(count(ptx, "cp.async.wait_group"), 0u);
}

TEST_F(PtxModes, Tf32x3RunsThreeTf32MmasPerProduct) {
  size_t high = count(ptx_of("mlp", 90, ir::Precision::high), k_tf32_mma);
  size_t x3 = count(ptx_of("mlp", 90, ir::Precision::tf32x3), k_tf32_mma);
  ASSERT_GT(high, 0u);
  EXPECT_EQ(x3, 3 * high);
}

TEST_F(PtxModes, MediumUsesBf16MmaWithFp32Accumulation) {
  std::string ptx = ptx_of("mlp", 90, ir::Precision::medium);
  EXPECT_GT(count(ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), 0u);
  EXPECT_GT(count(ptx, "cvt.rn.bf16x2.f32"), 0u);
  EXPECT_EQ(count(ptx, "tf32"), 0u);
}

TEST_F(PtxModes, AutoOnTuringIsHighest) {
  std::string ptx = ptx_of("mlp", 75, ir::Precision::automatic);
  EXPECT_EQ(count(ptx, "tf32"), 0u);
  EXPECT_EQ(count(ptx, "cp.async"), 0u);
}

TEST_F(PtxModes, Bf16GraphsUseBf16MmaOnAmpere) {
  std::string ptx = ptx_of("gated_mlp", 80, ir::Precision::automatic);
  EXPECT_GT(count(ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), 0u);
  // B (N-contiguous) two n8 tiles per ldmatrix.x4.trans, none a tile at a time.
  EXPECT_GT(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans"), 0u);
  EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x2"), 0u);
}

TEST_F(PtxModes, F16GraphsUseK16OnAmpereAndK8OnTuring) {
  EXPECT_GT(count(ptx_of("half_epilogue", 80, ir::Precision::automatic),
                  "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
            0u);
  std::string turing = ptx_of("half_epilogue", 75, ir::Precision::automatic);
  EXPECT_GT(count(turing, "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32"), 0u);
  EXPECT_EQ(count(turing, "m16n8k16"), 0u);
}

TEST_F(PtxModes, MixedHeadKeepsTheValueHeadOffTensorCores) {
  auto a = compile(example("mixed_head"), options(90, ir::Precision::high));
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->kernels.size(), 3u);
  EXPECT_GT(count(a->kernels[0].ptx, k_tf32_mma), 0u);
  EXPECT_EQ(count(a->kernels[2].ptx, "tf32"), 0u);
}

TEST_F(PtxModes, FallbackIsRecordedInTheArtifact) {
  auto a =
      compile(example("gated_mlp"), options(75, ir::Precision::automatic, FallbackPolicy::allow));
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->fallbacks.size(), 3u);
  for (const auto& k : a->kernels) EXPECT_EQ(count(k.ptx, "mma.sync"), 0u);
}

}  // namespace
}  // namespace kiln::compiler
