// NVRTC loading: a missing library is a clear error; the search honours KILN_NVRTC_PATH exactly.
#include "compiler/nvrtc.h"

#include "compiler/compiler.h"
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

TEST(Nvrtc, AFailedCompileCarriesTheProgramLog) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto lib = load_nvrtc();
  ASSERT_TRUE(lib.ok());
  auto out =
      (*lib)->compile("extern \"C\" __global__ void k() { undefined_name(); }", "broken", 80);
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
      "warned", 90);
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
