// `--dims` as a user types it: compile one bucket or every bucket of a dim, explain a missing
// bucket, list buckets, run under emulation at given sizes; symbolic graphs without sizes and
// bad sizes are usage errors.
#include "run_cli.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln::testing {
namespace {

using nlohmann::json;

const std::string k_graph = R"(graph small {
  dim B: 1..20
  input x: f32[B, 32]
  input w: f32[32, 16]
  y = relu(matmul(x, w))
  output y
}
)";

class DimsCli : public ::testing::Test {
protected:
  void SetUp() override {
    char name[] = "/tmp/kiln-dims-test-XXXXXX";
    m_dir = mkdtemp(name);
    m_graph = m_dir + "/small.kg";
    std::ofstream(m_graph) << k_graph;
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }

  CliResult kiln(std::vector<std::string> args) {
    args.insert(args.end(), {"--cache-dir", m_dir + "/cache"});
    return run_kiln(args);
  }

  std::string m_dir, m_graph;
};

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

TEST_F(DimsCli, CompileReportsTheBucketAndAllCompilesEveryBucket) {
  CliResult one = kiln({"compile", m_graph, "--arch", "sm_90", "--dims", "B=11", "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  json first = json::parse(one.out);
  EXPECT_EQ(first["dims"], json({{"B", {9, 16}}}));
  EXPECT_EQ(first["cache"], "miss");
  CliResult all = kiln({"compile", m_graph, "--arch", "sm_90", "--dims", "B=all", "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::vector<json> lines = json_lines(all.out);
  // [1,1] [2,2] [3,4] [5,8] [9,16] [17,20]: the one compiled above hits.
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines.back()["dims"], json({{"B", {17, 20}}}));
  int hits = 0;
  for (const json& line : lines) hits += line["cache"] == "hit";
  EXPECT_EQ(hits, 1);
  CliResult ls = kiln({"ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("dim0=17..20"), std::string::npos) << ls.out;
  CliResult ls_json = kiln({"ls", "--json"});
  EXPECT_NE(ls_json.out.find("\"dims\": \"dim0 in [1, 1]\""), std::string::npos) << ls_json.out;
}

TEST_F(DimsCli, WhyNamesTheBucketThatIsNotCached) {
  ASSERT_EQ(kiln({"compile", m_graph, "--arch", "sm_90", "--dims", "B=3"}).exit_code, 0);
  CliResult why = kiln({"why", m_graph, "--arch", "sm_90", "--dims", "B=12"});
  EXPECT_EQ(why.exit_code, 1) << why.err;
  EXPECT_NE(why.out.find("bucket B in [9, 16] not cached"), std::string::npos) << why.out;
  EXPECT_NE(why.out.find("dims (B in [9, 16] here, B in [3, 4] cached)"), std::string::npos)
      << why.out;
  CliResult hit = kiln({"why", m_graph, "--arch", "sm_90", "--dims", "B=4"});
  EXPECT_EQ(hit.exit_code, 0) << hit.out;
}

TEST_F(DimsCli, RunUnderEmulationAtTheSizesGiven) {
  CliResult run = run_kiln({"run", m_graph, "--emulate", "--dims", "B=13", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json report = json::parse(run.out);
  EXPECT_EQ(report["dims"], json({{"B", 13}}));
  EXPECT_EQ(report["ok"], true);
}

TEST_F(DimsCli, AuditAtTheSizesGiven) {
  CliResult audit = run_kiln({"audit", m_graph, "--precision", "high", "--dims", "B=7", "--json"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  json report = json::parse(audit.out);
  EXPECT_EQ(report["dims"], json({{"B", 7}}));
  CliResult hash = run_kiln({"hash", m_graph});
  EXPECT_EQ(report["graph"].get<std::string>() + "\n", hash.out) << "the graph as written";
}

TEST_F(DimsCli, MissingOrBadSizesAreUsageErrorsThatListTheDims) {
  struct Bad {
    std::vector<std::string> args;
    const char* says;
  };
  const Bad bad[] = {
      {{"compile", m_graph, "--arch", "sm_90"}, "has symbolic dims (B in 1..20): give their sizes"},
      {{"compile", m_graph, "--arch", "sm_90", "--dims", "B=21"}, "B = 21 is outside its range 1..20"},
      {{"compile", m_graph, "--arch", "sm_90", "--dims", "S=3"}, "'S' is not a dim of graph 'small'; its dims: B in 1..20"},
      {{"compile", m_graph, "--arch", "sm_90", "--dims", "B=x"}, "B=x is not a whole number"},
      {{"compile", m_graph, "--arch", "sm_90", "--dims", "B=3,B=4"}, "'B' is given twice"},
      {{"compile", std::string(KILN_EXAMPLES_DIR) + "/mlp.kg", "--arch", "sm_90", "--dims", "B=3"},
       "has no symbolic dims; drop --dims"},
      {{"emit", m_graph, "--arch", "sm_90", "--dims", "B=all"}, "emit takes one bucket"},
      {{"run", m_graph, "--emulate"}, "give their sizes, e.g. --dims B=20"},
      {{"run", m_graph, "--emulate", "--dims", "B=all"}, "a run needs one value per dim"},
      {{"audit", m_graph, "--precision", "high"}, "audit: graph 'small' has symbolic dims"},
  };
  for (const Bad& b : bad) {
    CliResult r = b.args[0] == "emit" ? run_kiln(b.args) : kiln(b.args);  // emit has no cache
    EXPECT_EQ(r.exit_code, 2) << b.says << "\n" << r.err;
    EXPECT_NE(r.err.find(b.says), std::string::npos) << r.err;
  }
}

// NAME=all multiplies across dims: compile says how many compiles before it starts, and past 64
// wants --yes (exit 2 naming the count otherwise, nothing compiled).
TEST_F(DimsCli, CompileCountsTheBucketsAndAsksForYesPast64) {
  std::string wide = m_dir + "/wide.kg";
  std::ofstream(wide) << "graph wide {\n  dim A: 1..2147483647\n  dim B: 1..2147483647\n"
                         "  dim C: 1..2147483647\n  input x: f32[A]\n  input y: f32[B]\n"
                         "  input z: f32[C]\n  a = relu(x)\n  b = relu(y)\n  c = relu(z)\n"
                         "  output a, b, c\n}\n";
  CliResult huge = kiln({"compile", wide, "--arch", "sm_90", "--dims", "A=all,B=all,C=all"});
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_EQ(huge.err, "kiln compile: --dims A=all,B=all,C=all asks for 32768 compiles (" + wide +
                          ": 32768 buckets); pass --yes to start more than 64\n");
  EXPECT_TRUE(huge.out.empty()) << huge.out;
  EXPECT_FALSE(std::filesystem::exists(m_dir + "/cache")) << "nothing compiled";

  // Counted before any bucket is made: 16 dims of 1..2^31 - 1 each 'all' (32^16 buckets) and 4
  // of them (2^20) are refused at once, --yes or not, past the 65536 one command compiles; emit
  // (one bucket) refuses 'all' as quickly. Making them first took all the memory there was.
  std::string many = m_dir + "/many.kg", all, four;
  std::ofstream out(many);
  out << "graph many {\n";
  for (int i = 0; i < 16; ++i) out << "  dim D" << i << ": 1..2147483647\n";
  for (int i = 0; i < 16; ++i) out << "  input x" << i << ": f32[D" << i << "]\n";
  for (int i = 0; i < 16; ++i) out << "  y" << i << " = relu(x" << i << ")\n";
  out << "  output y0";
  for (int i = 1; i < 16; ++i) out << ", y" << i;
  out << "\n}\n";
  out.close();
  for (int i = 0; i < 16; ++i) {
    all += (i ? ",D" : "D") + std::to_string(i) + "=all";
    four += (i ? ",D" : "D") + std::to_string(i) + (i < 4 ? "=all" : "=1");
  }
  CliResult most = kiln({"compile", many, "--target", "cpu", "--dims", all, "--yes"});
  EXPECT_EQ(most.exit_code, 2);
  EXPECT_EQ(most.err, "kiln compile: --dims " + all + " asks for more than 2^64 - 1 compiles (" +
                          many + ": more than 2^64 - 1 buckets); one command compiles at most " +
                          "65536 (fix more dims in --dims)\n");
  CliResult million = kiln({"compile", many, "--target", "cpu", "--dims", four, "--yes"});
  EXPECT_EQ(million.exit_code, 2);
  EXPECT_NE(million.err.find("asks for 1048576 compiles"), std::string::npos) << million.err;
  EXPECT_NE(million.err.find("at most 65536"), std::string::npos) << million.err;
  CliResult emit = run_kiln({"emit", many, "--dims", all, "--target", "cpu", "--llvm"});
  EXPECT_EQ(emit.exit_code, 2);
  EXPECT_EQ(emit.err, "kiln emit: emit takes one bucket: give each dim a value, not 'all'\n");
  EXPECT_FALSE(std::filesystem::exists(m_dir + "/cache")) << "nothing compiled";

  // Two dims of 1..256: 9 x 9 = 81 compiles (on the CPU target: fast).
  std::string two = m_dir + "/two.kg";
  std::ofstream(two) << "graph two {\n  dim A: 1..256\n  dim B: 1..256\n  input x: f32[A, B]\n"
                        "  y = relu(x)\n  output y\n}\n";
  CliResult asked = kiln({"compile", two, "--target", "cpu", "--dims", "A=all,B=all", "--json"});
  EXPECT_EQ(asked.exit_code, 2);
  json error = json::parse(asked.out);  // with --json the error is the output
  EXPECT_EQ(error["error"], "--dims A=all,B=all asks for 81 compiles (" + two +
                                ": 81 buckets); pass --yes to start more than 64");
  CliResult yes =
      kiln({"compile", two, "--target", "cpu", "--dims", "A=all,B=all", "--json", "--yes"});
  ASSERT_EQ(yes.exit_code, 0) << yes.err;
  EXPECT_EQ(json_lines(yes.out).size(), 81u);
  EXPECT_EQ(yes.err, "kiln compile: note: --dims A=all,B=all asks for 81 compiles (" + two +
                         ": 81 buckets)\n");
  // Under 64, the count is said and the compiles start.
  CliResult few = kiln({"compile", m_graph, "--arch", "sm_90", "--dims", "B=all", "--json"});
  ASSERT_EQ(few.exit_code, 0) << few.err;
  EXPECT_EQ(few.err, "kiln compile: note: --dims B=all asks for 6 compiles (" + m_graph +
                         ": 6 buckets)\n");
}

}  // namespace
}  // namespace kiln::testing
