// Tests of `kiln fmt` and `kiln hash` as a user runs them: output, stdin, errors, exit codes.
#include "run_cli.h"

#include <gtest/gtest.h>

#include <regex>

namespace kiln::testing {
namespace {

const std::string k_mlp = std::string(KILN_EXAMPLES_DIR) + "/mlp.kg";

TEST(FmtCli, PrintsCanonicalFormAndIsIdempotent) {
  CliResult once = run_kiln({"fmt", k_mlp});
  ASSERT_EQ(once.exit_code, 0) << once.err;
  EXPECT_NE(once.out.find("  h = gelu(add(matmul(x, w1), b1))\n"), std::string::npos);
  CliResult twice = run_kiln({"fmt", "-"}, once.out);
  ASSERT_EQ(twice.exit_code, 0) << twice.err;
  EXPECT_EQ(twice.out, once.out);
}

TEST(FmtCli, HashIs32HexDigitsAndMatchesStdin) {
  CliResult from_file = run_kiln({"hash", k_mlp});
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_TRUE(std::regex_match(from_file.out, std::regex("[0-9a-f]{32}\n"))) << from_file.out;
  CliResult formatted = run_kiln({"fmt", k_mlp});
  CliResult from_stdin = run_kiln({"hash", "-"}, "# a comment\n" + formatted.out);
  EXPECT_EQ(from_stdin.out, from_file.out);
}

TEST(FmtCli, BadGraphExitsTwoWithLocatedError) {
  CliResult r = run_kiln({"fmt", "-"}, "graph g {\n  input x: f32[4]\n  y = relu(q)\n}\n");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "<stdin>:3:12: error: undefined value 'q'\n");
}

TEST(FmtCli, MissingFileExitsTwo) {
  CliResult r = run_kiln({"hash", "/nonexistent.kg"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent.kg: error: cannot read"), std::string::npos);
}

TEST(FmtCli, BadUsageExitsTwo) {
  EXPECT_EQ(run_kiln({}).exit_code, 2);
  EXPECT_EQ(run_kiln({"fmt"}).exit_code, 2);
  EXPECT_EQ(run_kiln({"no-such-command"}).exit_code, 2);
  EXPECT_EQ(run_kiln({"fmt", k_mlp, "--bogus"}).exit_code, 2);
}

TEST(FmtCli, RandomBytesOnStdinNeverCrash) {
  std::string noise;
  for (int i = 0; i < 4096; ++i) noise += static_cast<char>((i * 7919 + 13) % 256);
  CliResult r = run_kiln({"fmt", "-"}, noise);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("<stdin>:1:", 0), 0u) << r.err;
}

TEST(FmtCli, HelpExitsZero) {
  CliResult r = run_kiln({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("fmt"), std::string::npos);
}

}  // namespace
}  // namespace kiln::testing
