// `kiln audit` end to end: output, JSON fields and exit codes, running the built binary.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class AuditCli : public ::testing::Test {
protected:
  void SetUp() override {
    m_dir = std::filesystem::temp_directory_path() /
            ("kiln_audit_cli_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(m_dir);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }

  Result kiln(const std::string& args) {
    std::filesystem::path out = m_dir / "stdout";
    std::filesystem::path err = m_dir / "stderr";
    std::string command = std::string(KILN_BINARY) + " " + args + " >" + out.string() + " 2>" +
                          err.string();
    int status = std::system(command.c_str());
    Result result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = read_file(out);
    result.err = read_file(err);
    return result;
  }

  std::string example(const std::string& name) {
    return std::string(KILN_EXAMPLES_DIR) + "/" + name + ".kg";
  }

  std::string write(const std::string& name, const std::string& text) {
    std::filesystem::path path = m_dir / name;
    std::ofstream(path) << text;
    return path.string();
  }

  std::filesystem::path m_dir;
};

TEST_F(AuditCli, JsonReportsEveryOutputOfMixedHead) {
  Result r = kiln("audit " + example("mixed_head") + " --precision high --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["graph"].get<std::string>().size(), 32u);
  EXPECT_EQ(json["precision"], "high");
  EXPECT_EQ(json["seed"], 0);
  ASSERT_EQ(json["outputs"].size(), 2u);
  EXPECT_EQ(json["outputs"][0]["name"], "policy");
  EXPECT_EQ(json["outputs"][1]["name"], "value");
  EXPECT_GT(json["outputs"][0]["rel_l2"].get<double>(), 0.0);
  EXPECT_LT(json["outputs"][0]["rel_l2"].get<double>(), 2e-3);
  EXPECT_GE(json["outputs"][0]["max_abs"].get<double>(), 0.0);
  EXPECT_EQ(json["outputs"][0]["ok"], true);
  EXPECT_TRUE(json["warnings"].empty());
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(AuditCli, GraphFieldIsTheGraphHash) {
  Result audit = kiln("audit " + example("attention") + " --precision highest --json");
  Result hash = kiln("hash " + example("attention"));
  ASSERT_EQ(audit.exit_code, 0);
  ASSERT_EQ(hash.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(audit.out)["graph"].get<std::string>() + "\n", hash.out);
}

TEST_F(AuditCli, TextOutputShowsATableOfOutputs) {
  Result r = kiln("audit " + example("mixed_head") + " --precision tf32x3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("precision tf32x3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rel_l2"), std::string::npos);
  EXPECT_NE(r.out.find("policy"), std::string::npos);
  EXPECT_NE(r.out.find("value"), std::string::npos);
}

TEST_F(AuditCli, AutoResolvesPerArch) {
  std::string audit = "audit " + example("mixed_head") + " --precision auto --json";
  Result old_arch = kiln(audit + " --arch sm_75");
  Result ampere = kiln(audit + " --arch sm_80");
  Result fallback = kiln(audit);
  ASSERT_EQ(old_arch.exit_code, 0) << old_arch.err;
  ASSERT_EQ(ampere.exit_code, 0) << ampere.err;
  ASSERT_EQ(fallback.exit_code, 0) << fallback.err;
  EXPECT_EQ(nlohmann::json::parse(old_arch.out)["precision"], "highest");
  EXPECT_EQ(nlohmann::json::parse(ampere.out)["precision"], "high");
  EXPECT_EQ(nlohmann::json::parse(fallback.out)["precision"], "high");  // sm_90 by default
}

TEST_F(AuditCli, SeedIsReportedAndChangesTheInputs) {
  Result a = kiln("audit " + example("mixed_head") + " --precision high --seed 7 --json");
  Result b = kiln("audit " + example("mixed_head") + " --precision high --seed 8 --json");
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(b.exit_code, 0);
  auto ja = nlohmann::json::parse(a.out);
  auto jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["seed"], 7);
  EXPECT_NE(ja["outputs"][0]["rel_l2"], jb["outputs"][0]["rel_l2"]);
}

TEST_F(AuditCli, WarningsGoToStderrAndJsonAndExitZeroUnlessStrict) {
  std::string file = write("lossy.kg",
                           "graph lossy {\n input x: f32[4, 4]\n input w: f32[4, 4]\n"
                           "  y = sub(add(matmul(x, w), 100000.0), 100000.0)\n output y\n}\n");
  Result r = kiln("audit " + file + " --precision highest --json");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  auto json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["outputs"][0]["ok"], false);
  ASSERT_EQ(json["warnings"].size(), 1u);
  EXPECT_NE(json["warnings"][0].get<std::string>().find("'y'"), std::string::npos);

  Result strict = kiln("audit " + file + " --precision highest --strict");
  EXPECT_EQ(strict.exit_code, 1);
  Result clean = kiln("audit " + example("mixed_head") + " --precision high --strict");
  EXPECT_EQ(clean.exit_code, 0) << clean.err;
}

TEST_F(AuditCli, BadPrecisionIsAUsageError) {
  Result r = kiln("audit " + example("mlp") + " --precision fast");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown precision 'fast'"), std::string::npos) << r.err;
}

TEST_F(AuditCli, MissingPrecisionIsAUsageError) {
  EXPECT_EQ(kiln("audit " + example("mlp")).exit_code, 2);
}

TEST_F(AuditCli, BadArchIsAUsageError) {
  Result r = kiln("audit " + example("mlp") + " --precision auto --arch sm_99");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown arch 'sm_99'"), std::string::npos) << r.err;
}

TEST_F(AuditCli, MissingOrMalformedGraphIsAUsageError) {
  Result missing = kiln("audit " + (m_dir / "nope.kg").string() + " --precision high");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nope.kg"), std::string::npos) << missing.err;
  std::string bad = write("bad.kg", "graph g {\n input x: f32[2]\n y = frobnicate(x)\n}\n");
  Result malformed = kiln("audit " + bad + " --precision high");
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_NE(malformed.err.find("bad.kg:"), std::string::npos) << malformed.err;
}

TEST_F(AuditCli, MemoryLimitIsAnExplicitFailureWithTheNumbers) {
  // A refusal by the flag is bad usage, exit 2, as run --max-memory's.
  Result r = kiln("audit " + example("mlp") + " --precision high --max-memory 1K");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bytes of host tensors, above --max-memory 1K (1024 bytes)"),
            std::string::npos)
      << r.err;
  Result bad = kiln("audit " + example("mlp") + " --precision high --max-memory lots");
  EXPECT_EQ(bad.exit_code, 2);
}

}  // namespace
