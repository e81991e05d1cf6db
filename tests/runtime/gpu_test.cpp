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

// sm_90a's wgmma kernel on the device (the model gives it these: each matmul's 128x128 tiles
// number 162 or more): B N-major, K-major (transpose_b) and batched (a rank-3 tensor map),
// K 200 ending 8 into its fourth K tile, N 2104 and 1160 ending inside a tile, 162 work tiles
// of 128x256 on fewer SMs (several a block), a fused bias, GELU and residual. Elsewhere these
// run the mma.sync kernels and must pass as well.
TEST(GpuWgmma, LargeMatmulsOfEveryOperandLayoutMatchTheReference) {
  if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
  auto graph = ir::parse_graph(R"(graph wgmma_gpu {
  input x: bf16[2, 1040, 200]
  input w: bf16[200, 2104]
  input b: bf16[2104]
  input w2: bf16[1160, 200]
  input r: bf16[2, 1040, 1160]
  input wb: bf16[2, 200, 1040]
  h = gelu(add(matmul(x, w), b))
  y = add(matmul(x, w2, transpose_b=true), r)
  z = matmul(x, wb)
  output h, y, z
}
)", "wgmma_gpu.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  RuntimeOptions options;
  options.use_cache = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  auto exe = (*runtime)->compile(*graph);
  ASSERT_TRUE(exe) << exe.error().message;
  auto report = reference::check_against_fp64(
      *graph, *ir::parse_precision((*exe)->precision()), 7,
      reference::bytes_runner(*graph, [&](const std::vector<reference::Bytes>& inputs) {
        return (*exe)->run_host(inputs);
      }));
  ASSERT_TRUE(report) << report.error().message;
  for (const auto& o : report->outputs)
    EXPECT_TRUE(o.ok) << "output " << o.name << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
}

}  // namespace
}  // namespace kiln
