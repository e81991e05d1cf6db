// The CLI as a whole: --version, --help, errors that name their command (and are JSON with
// --json), and environment variables that are wrong.
#include "run_cli.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>

namespace kiln::tools {
namespace {

using nlohmann::json;
using testing::CliResult;
using testing::run_kiln;

const std::string k_mlp = std::string(KILN_EXAMPLES_DIR) + "/mlp.kg";

TEST(MainCli, VersionNamesNvrtcCodegenAndTheCacheFolder) {
  CliResult r = run_kiln({"--version"}, {}, {{"KILN_CACHE_DIR", "/tmp/kiln-version-probe"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("kiln 0.1.0\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nnvrtc: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ncodegen: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ncache: /tmp/kiln-version-probe\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nremote tier: "), std::string::npos) << r.out;
}

TEST(MainCli, HelpListsTheEnvironmentVariables) {
  CliResult r = run_kiln({"--help"});
  ASSERT_EQ(r.exit_code, 0);
  for (const char* name : {"KILN_CACHE_DIR", "KILN_CACHE_MAX_SIZE", "KILN_REMOTE_CACHE",
                           "KILN_REMOTE_KEY", "KILN_REMOTE_TTL", "KILN_COMPILE_THREADS",
                           "KILN_CPU_THREADS", "KILN_NVRTC_PATH", "KILN_CUDA_DRIVER_PATH"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
}

// LLVM (the CPU target's plugin) is loaded only when the CPU target is used: every other command
// starts without its one large library.
TEST(MainCli, StartingKilnDoesNotLoadLlvm) {
  CliResult plain = run_kiln({"--version"}, {}, {{"LD_DEBUG", "libs"}});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.err.find("libstdc++"), std::string::npos) << "LD_DEBUG said nothing";
  EXPECT_EQ(plain.err.find("libLLVM"), std::string::npos);
  CliResult cpu = run_kiln({"emit", k_mlp, "--target", "cpu", "--llvm", "--precision", "highest"},
                           {}, {{"LD_DEBUG", "libs"}});
  ASSERT_EQ(cpu.exit_code, 0);
  EXPECT_NE(cpu.err.find("libLLVM"), std::string::npos);
}

TEST(MainCli, ABadCompileThreadsValueIsWarnedAbout) {
  for (const char* value : {"0", "-3", "many"}) {
    CliResult r = run_kiln({"hash", k_mlp}, {}, {{"KILN_COMPILE_THREADS", value}});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.err.find("kiln hash: warning: KILN_COMPILE_THREADS='" + std::string(value) +
                         "': expected a whole number from 1 to 1024"),
              std::string::npos)
        << r.err;
  }
  EXPECT_TRUE(run_kiln({"hash", k_mlp}, {}, {{"KILN_COMPILE_THREADS", "4"}}).err.empty());
}

TEST(MainCli, ErrorsNameTheirCommandAndAreJsonWithJson) {
  CliResult text = run_kiln({"compile", k_mlp, "--arch", "sm_10", "--no-cache"});
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_EQ(text.err.rfind("kiln compile: ", 0), 0u) << text.err;

  CliResult as_json = run_kiln({"compile", k_mlp, "--arch", "sm_10", "--no-cache", "--json"});
  EXPECT_EQ(as_json.exit_code, 2);
  json error = json::parse(as_json.out, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << as_json.out;
  EXPECT_EQ(error["command"], "compile");
  EXPECT_NE(error["error"].get<std::string>().find("sm_10"), std::string::npos) << as_json.out;

  CliResult usage = run_kiln({"ls", "--json", "--no-such-flag"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_FALSE(json::parse(usage.out, nullptr, false).is_discarded()) << usage.out;
}

// Without --arch, compile takes the GPU's arch (what `kiln run` and the runtime use); without a
// GPU it refuses, rather than warm entries for an arch nothing here runs.
TEST(MainCli, CompileTakesTheGpusArchOrAsksForArch) {
  CliResult r = run_kiln({"compile", k_mlp, "--no-cache", "--json"});
  if (r.exit_code == 2) {
    json error = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(error.is_discarded()) << r.out;
    EXPECT_NE(error["error"].get<std::string>().find("pass --arch"), std::string::npos) << r.out;
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["arch"].get<std::string>().rfind("sm_", 0), 0u) << r.out;
}

// A long compile shows "compiling FILE: N/M kernels, T s" on a terminal, and nothing otherwise.
TEST(MainCli, CompileShowsProgressOnATerminalOnly) {
  std::vector<std::string> args = {"compile", std::string(KILN_EXAMPLES_DIR) + "/gated_mlp.kg",
                                   "--arch", "sm_90", "--no-cache"};
  CliResult piped = run_kiln(args);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err.find("compiling"), std::string::npos) << piped.err;

  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no `script` here";
  std::string command = "script -qec '" + std::string(KILN_BIN);
  for (const std::string& a : args) command += " " + a;
  command += "' /dev/null 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << out;
  // Three groups; the down-projection runs split-K on sm_90 (partials and sum).
  EXPECT_NE(out.find("/gated_mlp.kg: 4/4 kernels, "), std::string::npos) << out;
  EXPECT_NE(out.find("\r\033[K"), std::string::npos) << "the line is erased when done";
}

// `kiln completion bash`, sourced into bash, completes commands, options and their values.
TEST(MainCli, BashCompletionCompletesCommandsOptionsAndValues) {
  CliResult script = run_kiln({"completion", "bash"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  EXPECT_NE(script.out.find("complete -o filenames -F _kiln kiln"), std::string::npos);
  std::string file = ::testing::TempDir() + "kiln-completion.bash";
  std::ofstream(file) << script.out;
  auto complete = [&](const std::string& words, int cword) {
    std::string command = "bash -c 'source " + file + "; COMP_WORDS=(" + words +
                          "); COMP_CWORD=" + std::to_string(cword) +
                          "; _kiln; echo \"${COMPREPLY[*]}\"'";
    FILE* pipe = ::popen(command.c_str(), "r");
    std::string out;
    char buffer[1024];
    for (size_t n; pipe && (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
      out.append(buffer, n);
    if (pipe) ::pclose(pipe);
    return out;
  };
  EXPECT_EQ(complete("kiln com", 1), "compile completion\n");
  EXPECT_EQ(complete("kiln compile --pre", 2), "--precision\n");
  EXPECT_EQ(complete("kiln compile x.kg --precision tf", 4), "tf32x3\n");
  EXPECT_EQ(complete("kiln why --arch sm_12", 3), "sm_120 sm_121\n");
  EXPECT_EQ(complete("kiln export --fo", 2), "--force\n");
}

// A combination the arch cannot run without a fallback is reported where the op is written.
TEST(MainCli, ARefusedFallbackIsLocatedInTheGraphFile) {
  CliResult r = run_kiln({"compile", k_mlp, "--arch", "sm_75", "--precision", "high", "--no-cache"});
  EXPECT_EQ(r.exit_code, 2);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("^(.*):([0-9]+):([0-9]+): error: matmul ")))
      << r.err;
  EXPECT_EQ(m[1].str(), k_mlp);
  EXPECT_NE(r.err.find("kiln compile --allow-fallback"), std::string::npos) << r.err;
}

TEST(MainCli, AnEmptyCacheDirIsRefusedOnce) {
  CliResult r = run_kiln({"ls", "--cache-dir", ""});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cache-dir: must name a directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--cache-dir must"), std::string::npos) << "said once: " << r.err;
}

// A misspelt command is named, with the closest registered command when one is close.
TEST(MainCli, AnUnknownCommandSuggestsTheClosestOne) {
  CliResult typo = run_kiln({"compil", k_mlp, "--arch", "sm_90"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_EQ(typo.err, "kiln: unknown command 'compil'; did you mean 'compile'?\n");
  EXPECT_EQ(run_kiln({"stast"}).err, "kiln: unknown command 'stast'; did you mean 'stats'?\n");
  EXPECT_EQ(run_kiln({"aduit"}).err, "kiln: unknown command 'aduit'; did you mean 'audit'?\n");
  CliResult far = run_kiln({"frobnicate"});
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_EQ(far.err, "kiln: unknown command 'frobnicate' (kiln --help lists the commands)\n");
  CliResult as_json = run_kiln({"compil", "--json"});
  EXPECT_EQ(as_json.exit_code, 2);
  json error = json::parse(as_json.out, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << as_json.out;
  EXPECT_NE(error["error"].get<std::string>().find("did you mean 'compile'?"), std::string::npos);
  CliResult none = run_kiln({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.err, "kiln: no command given (kiln --help lists the commands)\n");
  // An option before any command is named (CLI11 said "A subcommand is required").
  CliResult option = run_kiln({"--bogus"});
  EXPECT_EQ(option.exit_code, 2);
  EXPECT_EQ(option.err, "kiln: unknown option '--bogus' before a command (options follow the "
                        "command: kiln COMMAND --help lists its own)\n");
  EXPECT_EQ(run_kiln({"--version"}).exit_code, 0);
  EXPECT_EQ(run_kiln({"--help"}).exit_code, 0);
}

// The command line's own errors (a missing FILE, a value a flag does not take, an extra word)
// name the command as kiln's other errors do; they read "FILE is required" with no command.
TEST(MainCli, ParseErrorsNameTheCommand) {
  CliResult missing = run_kiln({"compile"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err, "kiln compile: FILE is required\n(kiln compile --help lists the options)\n");
  CliResult extra = run_kiln({"stats", "extra"});
  EXPECT_EQ(extra.exit_code, 2);
  EXPECT_EQ(extra.err.rfind("kiln stats: The following argument was not expected: extra\n", 0), 0u)
      << extra.err;
  CliResult value = run_kiln({"run", "g.kg", "--precision"});
  EXPECT_EQ(value.exit_code, 2);
  EXPECT_EQ(value.err.rfind("kiln run: --precision: ", 0), 0u) << value.err;
  CliResult as_json = run_kiln({"compile", "--json"});
  EXPECT_EQ(as_json.exit_code, 2);
  EXPECT_EQ(as_json.err, "");
  EXPECT_EQ(json::parse(as_json.out), json({{"command", "compile"}, {"error", "FILE is required"}}));
  CliResult help = run_kiln({"compile", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Usage:"), std::string::npos);
}

}  // namespace
}  // namespace kiln::tools
