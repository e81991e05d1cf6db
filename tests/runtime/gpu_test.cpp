// The GPU suite: kiln's compiled kernels on a real device against the fp64 reference. Every
// test reports itself skipped where there is no CUDA driver or device.
#include "kiln/kiln.h"
#include "ir/parse.h"
#include "reference/check.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

struct GpuCase {
  const char* graph;
  Precision precision;
};

class GpuAgainstReference : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuAgainstReference, OutputsWithinTheModesTolerance) {
  if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
  const GpuCase& c = GetParam();
  auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/" + c.graph);
  ASSERT_TRUE(graph) << graph.error().message;
  RuntimeOptions options;
  options.precision = c.precision;
  options.use_cache = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  auto exe = (*runtime)->compile(*graph);
  if (!exe && exe.error().message.find("allow fallbacks") != std::string::npos) {
    GTEST_SKIP() << exe.error().message;  // e.g. bf16 on an sm_75 device
  }
  ASSERT_TRUE(exe) << exe.error().message;

  auto report = reference::check_against_fp64(
      *graph, *ir::parse_precision((*exe)->precision()), 7,
      reference::bytes_runner(*graph, [&](const std::vector<reference::Bytes>& inputs) {
        return (*exe)->run_host(inputs);
      }));
  ASSERT_TRUE(report) << report.error().message;
  for (const auto& o : report->outputs) {
    EXPECT_TRUE(o.ok) << c.graph << " output " << o.name << " in " << (*exe)->precision()
                      << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
  }
}

const GpuCase k_cases[] = {
    {"mlp.kg", Precision::highest},        {"mlp.kg", Precision::high},
    {"mlp.kg", Precision::tf32x3},         {"mlp.kg", Precision::medium},
    {"attention.kg", Precision::highest},  {"attention.kg", Precision::high},
    {"attention.kg", Precision::tf32x3},   {"attention.kg", Precision::medium},
    {"attention_causal.kg", Precision::automatic}, {"mixed_head.kg", Precision::high},
    {"gated_mlp.kg", Precision::automatic}, {"half_epilogue.kg", Precision::automatic},
};

INSTANTIATE_TEST_SUITE_P(Gpu, GpuAgainstReference, ::testing::ValuesIn(k_cases),
                         [](const auto& info) {
                           std::string name = info.param.graph;
                           name = name.substr(0, name.find('.'));
                           std::string mode(ir::to_string(info.param.precision));
                           return name + "_" + mode;
                         });

}  // namespace
}  // namespace kiln
