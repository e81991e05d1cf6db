// kiln's CPU target and its host emulation of CUDA against outputs an H100 computed
// (tests/golden/h100): each within a fifth of the mode's tolerance of the hardware's.
#include "compiler/cpu/compile.h"
#include "emulation/program.h"
#include "ir/parse.h"
#include "reference/audit.h"
#include "reference/execute.h"
#include "reference/metrics.h"
#include "reference/tensor.h"
#include "runtime/cpu_program.h"
#include "support/npy.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

struct GoldenCase {
  const char* graph;
  ir::Precision mode;
  bool emulate = true;  // the emulator too (mlp in tf32x3 takes it 15-30 s)
};

std::string golden_dir(const GoldenCase& c) {
  return std::string(KILN_SOURCE_DIR) + "/tests/golden/h100/" + c.graph + "_" +
         std::string(ir::to_string(c.mode));
}

class H100Golden : public ::testing::TestWithParam<GoldenCase> {
protected:
  void SetUp() override {
    const GoldenCase& c = GetParam();
    auto parsed =
        ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/" + c.graph + ".kg");
    ASSERT_TRUE(parsed) << parsed.error().message;
    graph = *parsed;
    inputs = reference::random_inputs(*graph, 0);  // `kiln run --seed 0`'s
    for (ir::NodeId id : graph->outputs()) {
      const ir::Node& n = graph->node(id);
      auto file = npy::read_file(golden_dir(c) + "/" + n.name + ".npy");
      ASSERT_TRUE(file) << file.error().message;
      ASSERT_EQ(file->data.size(), static_cast<size_t>(n.type.bytes())) << n.name;
      golden.push_back(reference::load_device_bytes(n.type, file->data.data()));
    }
  }

  // Each output within a fifth of its tolerance of the H100's.
  void expect_close(const std::vector<reference::Tensor>& actual, const char* who) {
    ASSERT_EQ(actual.size(), golden.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      ir::NodeId id = graph->outputs()[i];
      double bound = reference::output_tolerance(*graph, id, GetParam().mode) / 5;
      double diff = reference::relative_l2(actual[i].values, golden[i].values);
      EXPECT_LE(diff, bound) << who << " output " << graph->node(id).name << " against the H100";
    }
  }

  std::optional<ir::Graph> graph;
  std::vector<reference::Tensor> inputs;
  std::vector<reference::Tensor> golden;
};

TEST_P(H100Golden, TheCpuTargetLandsNearTheHardware) {
  compiler::CompileOptions options;
  options.precision = GetParam().mode;
  auto machine = compiler::cpu::cpu_machine("native");
  ASSERT_TRUE(machine) << machine.error().message;
  auto artifact = compiler::cpu::compile_cpu(*graph, options, *machine);
  ASSERT_TRUE(artifact) << artifact.error().message;
  auto program = runtime::CpuProgram::load(std::move(*artifact));
  ASSERT_TRUE(program) << program.error().message;
  std::vector<std::vector<unsigned char>> bytes;
  for (const reference::Tensor& t : inputs) {
    bytes.emplace_back(t.type().bytes());
    reference::store_device_bytes(t, bytes.back().data());
  }
  auto out = (*program)->run(bytes, {});
  ASSERT_TRUE(out) << out.error().message;
  std::vector<reference::Tensor> actual;
  for (size_t i = 0; i < out->size(); ++i) {
    actual.push_back(reference::load_device_bytes(graph->node(graph->outputs()[i]).type,
                                                  (*out)[i].data()));
  }
  expect_close(actual, "CPU target");
}

TEST_P(H100Golden, TheEmulatorLandsNearTheHardware) {
  if (!GetParam().emulate) GTEST_SKIP() << "the CPU target covers this case; the emulator is slow";
  compiler::CompileOptions options;
  options.target.sm = 90;
  options.precision = GetParam().mode;
  auto program = emulation::build_program(*graph, options);
  ASSERT_TRUE(program) << program.error().message;
  auto out = program->run(inputs);
  ASSERT_TRUE(out) << out.error().message;
  expect_close(*out, "emulator");
}

// half_epilogue runs no libm function (an f16 matmul, a scale, a residual, a cast to f32), so
// the emulator's sm_90 accumulation model (the H100's measured one, emulation/module.h MmaSum)
// reproduces the H100's output bit for bit; the earlier arches' model (blocks of 8 products, no
// guard bits) does not.
TEST(H100GoldenBits, TheEmulatorsSm90AccumulationIsTheHardwaresBitForBit) {
  auto graph =
      ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/half_epilogue.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  auto file = npy::read_file(std::string(KILN_SOURCE_DIR) +
                             "/tests/golden/h100/half_epilogue_high/y.npy");
  ASSERT_TRUE(file) << file.error().message;
  const ir::Node& y = graph->node(graph->outputs()[0]);
  reference::Tensor h100 = reference::load_device_bytes(y.type, file->data.data());
  auto inputs = reference::random_inputs(*graph, 0);
  compiler::CompileOptions options;
  options.target.sm = 90;
  options.precision = ir::Precision::high;
  auto differing = [&](emulation::MmaSum sum) -> int64_t {
    emulation::ShimOptions shim;
    shim.mma_sum = sum;
    auto program = emulation::build_program(*graph, options, shim);
    EXPECT_TRUE(program) << program.error().message;
    if (!program) return -1;
    auto out = program->run(inputs);
    EXPECT_TRUE(out) << out.error().message;
    if (!out) return -1;
    int64_t count = 0;
    for (size_t i = 0; i < h100.values.size(); ++i)
      count += (*out)[0].values[i] != h100.values[i];
    return count;
  };
  EXPECT_EQ(differing(emulation::MmaSum::arch), 0);
  EXPECT_GT(differing(emulation::MmaSum::truncate), 0);
}

const GoldenCase k_cases[] = {
    {"mlp", ir::Precision::highest},         {"mlp", ir::Precision::high},
    {"mlp", ir::Precision::tf32x3, false},   {"attention", ir::Precision::high},
    {"mixed_head", ir::Precision::highest},  {"mixed_head", ir::Precision::high},
    {"half_epilogue", ir::Precision::high},  {"gated_mlp", ir::Precision::high},
    {"attention_causal", ir::Precision::high},
};

// The check can fail: the H100's `high` output is far from what `highest` computes, by more than
// a fifth of highest's tolerance.
TEST(H100GoldenCheck, AnotherModesOutputIsNotNearEnough) {
  auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/mlp.kg");
  ASSERT_TRUE(graph);
  auto file = npy::read_file(std::string(KILN_SOURCE_DIR) + "/tests/golden/h100/mlp_high/y.npy");
  ASSERT_TRUE(file) << file.error().message;
  const ir::Node& y = graph->node(graph->outputs()[0]);
  reference::Tensor high = reference::load_device_bytes(y.type, file->data.data());
  auto fp64 = reference::run(*graph, reference::random_inputs(*graph, 0),
                             reference::RunMode::fp64());
  ASSERT_TRUE(fp64) << fp64.error().message;
  double bound = reference::output_tolerance(*graph, graph->outputs()[0], ir::Precision::highest);
  EXPECT_GT(reference::relative_l2(high.values, (*fp64)[0].values), bound / 5);
}

INSTANTIATE_TEST_SUITE_P(H100, H100Golden, ::testing::ValuesIn(k_cases), [](const auto& info) {
  return std::string(info.param.graph) + "_" + std::string(ir::to_string(info.param.mode));
});

}  // namespace
}  // namespace kiln
