// NVRTC loading: a missing library is a clear error; the search honours KILN_NVRTC_PATH exactly.
#include "compiler/nvrtc.h"

#include "compiler/compiler.h"
#include "compiler/prelude.h"
#include "compiler/schedule.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace kiln::compiler {
namespace {

TEST(Nvrtc, ExplicitMissingPathIsAnErrorNamingNvrtc) {
  auto lib = load_nvrtc("/nonexistent/libnvrtc.so.13");
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.error().message.find("NVRTC"), std::string::npos) << lib.error().message;
  EXPECT_NE(lib.error().message.find("/nonexistent/libnvrtc.so.13"), std::string::npos);
}

TEST(Nvrtc, EnvironmentPathIsTheOnlyPlaceTried) {
  ::setenv("KILN_NVRTC_PATH", "/nonexistent/libnvrtc.so", 1);
  auto lib = load_nvrtc();
  ::unsetenv("KILN_NVRTC_PATH");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().message.find("/usr/local/cuda"), std::string::npos) << lib.error().message;
}

TEST(Nvrtc, CompileWithoutNvrtcFailsWithAClearError) {
  CompileOptions o = test::options(90, ir::Precision::high);
  o.nvrtc_path = "/nonexistent/libnvrtc.so";
  auto artifact = compile(test::example("mlp"), o);
  ASSERT_FALSE(artifact.ok());
  EXPECT_NE(artifact.error().message.find("nvrtc"), std::string::npos);
}

TEST(Nvrtc, LowerWorksWithoutNvrtc) {
  CompileOptions o = test::options(90, ir::Precision::high);
  o.nvrtc_path = "/nonexistent/libnvrtc.so";
  EXPECT_TRUE(lower(test::example("mlp"), o).ok());
}

TEST(Nvrtc, ListsTheArchitecturesItSupports) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  const auto& archs = (*lib)->archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), 80), archs.end());
  EXPECT_FALSE((*lib)->version().empty());
}

TEST(Nvrtc, IdentityNamesTheLibraryFileWithoutLoadingIt) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto id = nvrtc_identity();
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(id->rfind("libnvrtc", 0), 0u) << *id;
  // The same file, found through the loaded library, gives the same identity.
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  EXPECT_EQ((*lib)->identity(), *id);
  EXPECT_FALSE(nvrtc_identity("/nonexistent/libnvrtc.so").ok());
}

TEST(Nvrtc, UnsupportedArchIsRefusedByName) {
  auto program = lower(test::example("mlp"), test::options(61, ir::Precision::highest));
  ASSERT_FALSE(program.ok());
  EXPECT_NE(program.error().message.find("sm_61"), std::string::npos);
}

// NVRTC is asked for sm_90a itself: Hopper's own instructions assemble there and not for sm_90,
// and a graph compiled for sm_90a says so in its PTX and artifact.
TEST(Nvrtc, Sm90aCompilesHoppersOwnInstructionsAndSm90DoesNot) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  const char* source =
      "extern \"C\" __global__ void __launch_bounds__(128) k(float* p) {\n"
      "  asm volatile(\"wgmma.fence.sync.aligned;\");\n"
      "  asm volatile(\"setmaxnreg.inc.sync.aligned.u32 240;\");\n"
      "  p[threadIdx.x] = 1.0f;\n"
      "}\n";
  auto specific = (*lib)->compile(source, "hopper", "sm_90a");
  ASSERT_TRUE(specific.ok()) << specific.error().message;
  EXPECT_NE(specific->ptx.find(".target sm_90a"), std::string::npos);
  auto plain = (*lib)->compile(source, "hopper", "sm_90");
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.error().message.find("for sm_90 failed"), std::string::npos)
      << plain.error().message;
  EXPECT_NE(plain.error().message.find("not supported on .target 'sm_90'"), std::string::npos)
      << plain.error().message;

  CompileOptions options = test::options(90, ir::Precision::high);
  options.target.suffix = "a";
  auto artifact = compile(test::example("mlp"), options);
  ASSERT_TRUE(artifact.ok()) << artifact.error().message;
  EXPECT_EQ(artifact->arch, "sm_90a");
  EXPECT_EQ(artifact->target, Target::cuda(90, "a"));
  for (const KernelArtifact& k : artifact->kernels) {
    EXPECT_NE(k.ptx.find(".target sm_90a"), std::string::npos) << k.name;
    EXPECT_EQ(k.report.spill_bytes(), 0) << k.name;
  }
}

// The prelude's mbarrier functions assemble where they run (sm_90a: a producer/consumer ring as
// the emulator's tests run it), and a wait used for an older arch fails to assemble rather than
// compile to nothing.
TEST(Nvrtc, ThePreludesMbarrierFunctionsAssembleForSm90aAndRefuseOlderArchs) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  std::string source = std::string(prelude_source()) +
                       "\nextern \"C\" __global__ void ring(int* out) {\n"
                       "  extern __shared__ __align__(16) unsigned char smem[];\n"
                       "  unsigned long long* bar = reinterpret_cast<unsigned long long*>(smem);\n"
                       "  if (threadIdx.x == 0) kiln_mbarrier_init(bar, 32);\n"
                       "  __syncthreads();\n"
                       "  if (threadIdx.x < 32) kiln_mbarrier_arrive(bar);\n"
                       "  else kiln_mbarrier_arrive_expect_tx(bar + 1, 16);\n"
                       "  kiln_mbarrier_wait(bar, 0);\n"
                       "  out[threadIdx.x] = 1;\n"
                       "}\n";
  auto hopper = (*lib)->compile(source, "ring", "sm_90a");
  ASSERT_TRUE(hopper.ok()) << hopper.error().message;
  for (const char* instruction : {"mbarrier.init.shared::cta.b64", "mbarrier.arrive.shared::cta.b64",
                                  "mbarrier.arrive.expect_tx.shared::cta.b64",
                                  "mbarrier.try_wait.parity.shared::cta.b64"})
    EXPECT_NE(hopper->ptx.find(instruction), std::string::npos) << instruction;
  EXPECT_EQ(hopper->log.find("warning"), std::string::npos) << hopper->log;
  auto ampere = (*lib)->compile(source, "ring", "sm_80");
  ASSERT_FALSE(ampere.ok());
  EXPECT_NE(ampere.error().message.find("mbarrier"), std::string::npos) << ampere.error().message;
}

// Compiles that share a KernelMemo (kiln tune's candidates: one graph, the matmul's tile changed
// each time) compile each kernel once: the softmax after the matmul is compiled for the first
// tile only, and the memo's outputs are NVRTC's own.
TEST(Nvrtc, CompilesSharingAKernelMemoCompileEachKernelOnce) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  ir::Graph g = test::parse(R"(graph g {
    input a: f16[64, 96]
    input b: f16[96, 128]
    y = softmax(matmul(a, b), axis=1)
    output y
  })");
  auto request = check_request(g, test::options(80, ir::Precision::high));
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto model = lower(g, *request);
  ASSERT_TRUE(model.ok()) << model.error().message;
  ASSERT_EQ(model->plan.kernels.size(), 2u) << "a matmul kernel, then the softmax";
  std::vector<MatmulTile> tiles = candidate_tiles(model->plan.kernels[0].shape, 80);
  ASSERT_GE(tiles.size(), 2u);
  auto memo = std::make_shared<KernelMemo>();
  CompileOptions shared = request->options;
  shared.kernel_memo = memo;
  auto compile_at = [&](const MatmulTile& tile, const CompileOptions& o) -> Artifact {
    auto program = lower(g, *request, FixedSchedule(tile));
    EXPECT_TRUE(program.ok()) << program.error().message;
    if (!program.ok()) return {};
    auto a = compile_lowered(*program, o);
    EXPECT_TRUE(a.ok()) << a.error().message;
    return a.ok() ? *a : Artifact{};
  };
  Artifact first = compile_at(tiles[0], shared);
  EXPECT_EQ(memo->compiled(), 2u);
  EXPECT_EQ(memo->reused(), 0u);
  Artifact second = compile_at(tiles[1], shared);
  EXPECT_EQ(memo->compiled(), 3u) << "the second tile's matmul";
  EXPECT_EQ(memo->reused(), 1u) << "the softmax";
  Artifact again = compile_at(tiles[0], shared);
  EXPECT_EQ(memo->compiled(), 3u);
  EXPECT_EQ(memo->reused(), 3u);
  // What the memo gave is what a compile without it makes.
  Artifact alone = compile_at(tiles[1], request->options);
  ASSERT_EQ(second.kernels.size(), 2u);
  ASSERT_EQ(alone.kernels.size(), 2u);
  ASSERT_EQ(again.kernels.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(second.kernels[k].cubin, alone.kernels[k].cubin) << k;
    EXPECT_EQ(second.kernels[k].ptx, alone.kernels[k].ptx) << k;
    EXPECT_EQ(second.kernels[k].report, alone.kernels[k].report) << k;
    EXPECT_EQ(again.kernels[k].cubin, first.kernels[k].cubin) << k;
  }
  EXPECT_NE(first.kernels[0].cubin, second.kernels[0].cubin) << "two tiles, two matmul kernels";
  EXPECT_EQ(first.kernels[1].cubin, second.kernels[1].cubin);
}

// A failed compile is answered as it failed but not kept: the next call compiles again.
TEST(Nvrtc, AKernelMemoKeepsOutputsNotFailures) {
  KernelMemo memo;
  int runs = 0;
  auto failing = [&]() -> Expected<NvrtcOutput> {
    ++runs;
    return make_error("nvrtc: out of memory");
  };
  auto working = [&]() -> Expected<NvrtcOutput> {
    ++runs;
    NvrtcOutput out;
    out.cubin = "cubin";
    return out;
  };
  auto first = memo.get("k", failing);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.error().message, "nvrtc: out of memory");
  auto second = memo.get("k", working);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->cubin, "cubin");
  auto third = memo.get("k", failing);
  ASSERT_TRUE(third.ok()) << "kept from the second call";
  EXPECT_EQ(third->cubin, "cubin");
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(memo.compiled(), 2u);
  EXPECT_EQ(memo.reused(), 1u);
}

TEST(Nvrtc, AFailedCompileCarriesTheProgramLog) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  auto out =
      (*lib)->compile("extern \"C\" __global__ void k() { undefined_name(); }", "broken", "sm_80");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("undefined_name"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("'broken'"), std::string::npos);
}

TEST(Nvrtc, AFailedCompileLeadsWithItsFirstErrorBeforeTheLog) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  // Two warnings (an unused static function, an unused variable) come before the error.
  auto out = (*lib)->compile(
      "static __device__ float unused_helper(float x) { return x; }\n"
      "extern \"C\" __global__ void k(float* p) {\n"
      "  int unused_variable = 1;\n"
      "  p[0] = undefined_name;\n"
      "}\n",
      "warned", "sm_90");
  ASSERT_FALSE(out.ok());
  const std::string& message = out.error().message;
  std::string first_line = message.substr(0, message.find('\n'));
  EXPECT_NE(first_line.find("'warned'"), std::string::npos) << message;
  EXPECT_NE(first_line.find("error"), std::string::npos) << message;
  EXPECT_NE(first_line.find("undefined_name"), std::string::npos) << message;
  EXPECT_NE(message.find("unused_helper", first_line.size()), std::string::npos)
      << "the full log follows: " << message;
}

}  // namespace
}  // namespace kiln::compiler
