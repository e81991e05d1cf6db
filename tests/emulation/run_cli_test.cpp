// `kiln run` end to end: exit codes, the JSON report, --schedule, --sm-count, the message without
// --emulate.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace {

struct Result {
  int exit_code = -1;
  std::string out;
};

// Runs the kiln binary with `args`; stderr is folded into the output.
Result kiln(const std::string& args) {
  Result r;
  std::string command = std::string(KILN_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.out.append(buffer.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string k_graph = std::string(KILN_EMU_TEST_GRAPHS) + "/mixed_head_odd.kg";

TEST(KilnRunCli, EmulatedRunPrintsTheJsonReportAndExitsZero) {
  Result r = kiln("run " + k_graph + " --arch sm_80 --precision high --emulate --seed 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["ok"], true);
  EXPECT_DOUBLE_EQ(report["tolerance"].get<double>(), 2e-3);
  ASSERT_EQ(report["outputs"].size(), 2u);
  EXPECT_EQ(report["outputs"][0]["name"], "policy");
  EXPECT_LT(report["outputs"][0]["rel_l2"].get<double>(), 2e-3);
  EXPECT_GE(report["outputs"][0]["max_abs"].get<double>(), 0.0);
  EXPECT_EQ(report["outputs"][1]["name"], "value");
}

TEST(KilnRunCli, ScheduleNamesHowTheEmulatorOrdersThreadsAndIsReported) {
  for (const char* schedule : {"kind", "adversarial", "12345"}) {
    Result r = kiln("run " + k_graph + " --arch sm_80 --precision high --emulate --json --schedule " +
                    schedule);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    auto report = nlohmann::json::parse(r.out);
    EXPECT_EQ(report["schedule"], schedule);
    EXPECT_EQ(report["ok"], true);
  }
  Result text = kiln("run " + k_graph + " --arch sm_80 --precision high --emulate --schedule 7");
  EXPECT_NE(text.out.find("(emulated, schedule 7)"), std::string::npos) << text.out;
  Result bad = kiln("run " + k_graph + " --emulate --schedule sometimes");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("expected kind, adversarial or a seed"), std::string::npos) << bad.out;
  Result gpu = kiln("run " + k_graph + " --schedule adversarial");
  EXPECT_EQ(gpu.exit_code, 2);
  EXPECT_NE(gpu.out.find("needs --emulate"), std::string::npos) << gpu.out;
}

TEST(KilnRunCli, SmCountSizesTheEmulatedDeviceAndIsReported) {
  Result plain = kiln("run " + k_graph + " --arch sm_80 --precision high --emulate --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["sm_count"], 132);
  Result r = kiln("run " + k_graph + " --arch sm_80 --precision high --emulate --json --sm-count 3");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["sm_count"], 3);
  Result text = kiln("run " + k_graph + " --arch sm_80 --precision high --emulate --sm-count 3");
  EXPECT_NE(text.out.find("(emulated, schedule kind, 3 multiprocessors)"), std::string::npos)
      << text.out;
  for (const char* bad : {"0", "1025", "-2", "", "x", "99999999999999999999", "+3"}) {
    Result out = kiln("run " + k_graph + " --emulate --sm-count '" + bad + "'");
    EXPECT_EQ(out.exit_code, 2) << bad;
    EXPECT_NE(out.out.find(std::string("--sm-count '") + bad +
                           "' is not a multiprocessor count from 1 to 1024"),
              std::string::npos)
        << out.out;
  }
  Result gpu = kiln("run " + k_graph + " --sm-count 3");
  EXPECT_EQ(gpu.exit_code, 2);
  EXPECT_NE(gpu.out.find("--sm-count sizes the emulated device; it needs --emulate"),
            std::string::npos)
      << gpu.out;
}

TEST(KilnRunCli, WithoutEmulateRunsOnTheGpuOrSaysThereIsNone) {
  Result r = kiln("run " + k_graph + " --precision high");
  if (r.exit_code == 0) {
    EXPECT_NE(r.out.find("(GPU)"), std::string::npos) << r.out;
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("run: no CUDA"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--emulate"), std::string::npos) << r.out;
}

TEST(KilnRunCli, BadInputExitsTwo) {
  EXPECT_EQ(kiln("run /nonexistent.kg --emulate").exit_code, 2);
  EXPECT_EQ(kiln("run " + k_graph + " --arch sm_12 --emulate").exit_code, 2);
  EXPECT_EQ(kiln("run " + k_graph + " --precision fast --emulate").exit_code, 2);
  Result refused = kiln("run " + k_graph + " --arch sm_75 --precision high --emulate");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
}

}  // namespace
