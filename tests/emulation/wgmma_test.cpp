// sm_90a's matmul kernel (TMA, mbarrier ring, wgmma, warp specialisation, persistent grid)
// emulated against the fp64 reference: the wgmma graphs and the 16-bit graphs whose matmuls it
// computes, every matmul it computes on it (the model would keep these small grids on mma.sync),
// under every schedule; the persistent grid at 1 to 132 blocks; and the kernel's own rules and
// the shim's model, each broken once, caught.
#include "compiler/compiler.h"
#include "emulation/check.h"
#include "emulation/program.h"
#include "ir/parse.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::emulation {
namespace {

ir::Graph load(const std::string& name) {
  auto graph = ir::parse_graph_file(std::string(KILN_EMU_TEST_GRAPHS) + "/" + name + ".kg");
  EXPECT_TRUE(graph.ok()) << (graph.ok() ? "" : graph.error().message);
  return std::move(*graph);
}

compiler::CompileOptions sm90a() {
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(90, "a");
  options.precision = ir::Precision::high;
  return options;
}

// The wgmma kernel's tile (choose_wgmma_tile) for every matmul, where the model would keep small
// grids on mma.sync (wgmma_fills); schedule_cuda gives a matmul the kernel does not compute the
// model's tile.
class WgmmaSchedule final : public compiler::ScheduleProvider {
public:
  compiler::MatmulTile matmul_tile(const compiler::MatmulShape& shape, int) const override {
    return compiler::choose_wgmma_tile(shape);
  }
  std::string source() const override { return "fixed"; }
  std::string key() const override { return "wgmma"; }
};

Expected<Program> build(const ir::Graph& graph, ShimOptions shim = {}) {
  auto request = compiler::check_request(graph, sm90a());
  if (!request) return request.error();
  auto lowered = compiler::lower(graph, *request, WgmmaSchedule());
  if (!lowered) return lowered.error();
  return build_program(graph, std::move(*lowered), std::move(shim));
}

const Schedule k_schedules[] = {Schedule{}, Schedule::adversarial(), Schedule::seeded_by(1),
                                Schedule::seeded_by(2)};

// How many of the program's kernels run the wgmma design.
int wgmma_kernels(const Program& program) {
  int count = 0;
  for (const auto& k : program.lowered().plan.kernels) count += k.tile.wgmma ? 1 : 0;
  return count;
}

// Every output within its tolerance under `schedule`; "" or what failed.
std::string check(const ir::Graph& graph, const Program& program, const Schedule& schedule) {
  auto report = check_program(graph, program, 1, schedule);
  if (!report) return report.error().message;
  std::string failed;
  for (const OutputCheck& o : report->outputs)
    if (!(o.rel_l2 <= o.tolerance) || !(o.tolerance > 0.0))
      failed += o.name + " rel_l2 " + std::to_string(o.rel_l2) + " over " + std::to_string(o.tolerance) + "; ";
  return failed;
}

class EmulatedWgmmaGraph : public ::testing::TestWithParam<const char*> {};

TEST_P(EmulatedWgmmaGraph, MatchesTheFp64ReferenceUnderEverySchedule) {
  ir::Graph graph = load(GetParam());
  auto program = build(graph);
  ASSERT_TRUE(program.ok()) << program.error().message;
  EXPECT_GT(wgmma_kernels(*program), 0);
  for (const Schedule& schedule : k_schedules) {
    SCOPED_TRACE("schedule " + to_string(schedule));
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
}

INSTANTIATE_TEST_SUITE_P(Sm90a, EmulatedWgmmaGraph,
                         ::testing::Values("wgmma_bf16_odd", "wgmma_f16_odd", "wgmma_tiles_odd",
                                           "gated_mlp_aligned", "half_epilogue_aligned",
                                           "reuse_bf16_aligned", "reuse_f16_aligned",
                                           "splitk_bf16_odd"));

TEST(EmulatedWgmmaPersistent, EveryBlockCountFrom1To132CoversEveryTile) {
  ir::Graph graph = load("wgmma_tiles_odd");
  auto program = build(graph);
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_EQ(wgmma_kernels(*program), 1);
  // 20 work tiles: one block for all, fewer blocks than tiles (uneven shares), as many, more.
  for (uint32_t blocks : {1u, 2u, 3u, 7u, 19u, 20u, 132u}) {
    SCOPED_TRACE("blocks " + std::to_string(blocks));
    Schedule schedule = Schedule::seeded_by(blocks);
    schedule.sm_count = blocks;
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
}

// The kernel text with `from` replaced by `to` (which must occur), run under `schedule`.
std::string run_edited(const std::string& name, const std::string& from, const std::string& to,
                       const Schedule& schedule) {
  ir::Graph graph = load(name);
  auto request = compiler::check_request(graph, sm90a());
  if (!request) return "request: " + request.error().message;
  auto lowered = compiler::lower(graph, *request, WgmmaSchedule());
  if (!lowered) return "lower: " + lowered.error().message;
  std::string source = compiler::program_source(*lowered, compiler::Prelude::omit);
  size_t at = source.find(from);
  if (at == std::string::npos) return "the edit's text '" + from + "' does not occur";
  while (at != std::string::npos) {
    source.replace(at, from.size(), to);
    at = source.find(from, at + to.size());
  }
  auto program = build_program_from_source(graph, std::move(*lowered), std::move(source));
  if (!program) return "build: " + program.error().message;
  std::string failed = check(graph, *program, schedule);
  return failed.empty() ? "passed" : failed;
}

// wgmma_bf16_odd on a shim with `edit` (kiln_emu_hopper.h or kiln_emu_warp.h text that must
// occur): "passed", or what failed.
std::string run_with_shim_edit(const std::string& file, const std::string& from,
                               const std::string& to, const Schedule& schedule) {
  ir::Graph graph = load("wgmma_bf16_odd");
  ShimOptions shim;
  shim.edits.push_back({file, from, to});
  auto program = build(graph, shim);
  if (!program) return "build: " + program.error().message;
  std::string failed = check(graph, *program, schedule);
  return failed.empty() ? "passed" : failed;
}

// The shim's own model of sm_90a, each part broken once: every break must fail the graph.
TEST(EmulatedWgmmaRules, EveryBreakOfTheShimsSm90aModelIsCaught) {
  struct Break {
    const char* file;
    const char* from;
    const char* to;
  };
  const Break breaks[] = {
      // TMA writes boxes unswizzled while the descriptors read them swizzled.
      {"kiln_emu_hopper.h", "if (map.swizzle == 128) at = swizzle_128b(at);", ""},
      // TMA reads the last element again past the tensor's inner dim, where it fills zeros
      // (h times w2 transposed: both operands K-major, K 136 ending inside a K tile).
      {"kiln_emu_hopper.h", "if (c0 < 0 || c0 >= static_cast<int64_t>(map.dims[0])) continue;",
       "if (c0 >= static_cast<int64_t>(map.dims[0])) c0 = static_cast<int64_t>(map.dims[0]) - 1;"},
      // N-major descriptors with LBO and SBO swapped.
      {"kiln_emu_hopper.h", "static_cast<size_t>(r / 64) * lbo", "static_cast<size_t>(r / 64) * sbo"},
      // wgmma ignores its accumulator (scale-d as if always 0).
      {"kiln_emu_hopper.h", "float sum = op.scale_d ? d[static_cast<size_t>(v)] : 0.0f;",
       "float sum = 0.0f;"},
      // The accumulator layout's rows of 8 swapped within each warp.
      {"kiln_emu_hopper.h", "int m = 16 * warp + g + 8 * (i >> 1), n = 8 * j + 2 * t + (i & 1);",
       "int m = 16 * warp + g + 8 * (1 - (i >> 1)), n = 8 * j + 2 * t + (i & 1);"},
      // The H100 sum drops the accumulator.
      {"kiln_emu_warp.h", "double total = std::trunc(static_cast<double>(c) / quantum) * quantum;",
       "double total = 0.0;"},
  };
  for (const Break& b : breaks) {
    std::string result = run_with_shim_edit(b.file, b.from, b.to, Schedule{});
    EXPECT_NE(result, "passed") << b.from;
    EXPECT_EQ(result.find("build: "), std::string::npos) << result;
  }
}

// The edit applies, builds, and its kernel fails the reference or the emulator's rules; what it
// reported.
std::string expect_caught(const std::string& from, const std::string& to, const Schedule& schedule) {
  std::string result = run_edited("wgmma_bf16_odd", from, to, schedule);
  EXPECT_NE(result, "passed") << from;
  EXPECT_EQ(result.find("does not occur"), std::string::npos) << result;
  EXPECT_EQ(result.find("build: "), std::string::npos) << result;
  return result;
}

TEST(EmulatedWgmmaRules, AStageReleasedBeforeItsWgmmasRetireIsRefilledUnderThem) {
  // The consumer hands the stage it is reading back to the producer before wait_group retires
  // its wgmmas: TMA (landing at issue) overwrites operands the wgmmas have not read yet.
  expect_caught("kiln_wgmma_wait<1>();\n        if (kt > 0) kiln_mbarrier_arrive(&empty[(it + 5) % 6]);",
                "kiln_mbarrier_arrive(&empty[(it + 0) % 6]);\n        kiln_wgmma_wait<1>();",
                Schedule::adversarial());
}

TEST(EmulatedWgmmaRules, AConsumerThatDoesNotWaitForItsStageReadsItBeforeTMALands) {
  expect_caught("kiln_mbarrier_wait(&full[s], (it / 6) & 1);", "", Schedule{});
}

TEST(EmulatedWgmmaRules, AWrongLeadingByteOffsetForNMajorBIsCaught) {
  expect_caught("ks * 2048, 8192, 1024)", "ks * 2048, 4096, 1024)", Schedule{});
}

TEST(EmulatedWgmmaRules, AKStepThatDoesNotAdvanceTheDescriptorsIsCaught) {
  expect_caught("c * 8192 + ks * 32, 16, 1024)", "c * 8192, 16, 1024)", Schedule{});
}

TEST(EmulatedWgmmaRules, AMissingWgmmaFenceIsAnError) {
  std::string result = expect_caught("kiln_wgmma_fence();", "", Schedule{});
  EXPECT_NE(result.find("without a wgmma.fence"), std::string::npos) << result;
}

TEST(EmulatedWgmmaRules, AProducerThatSkipsTheEmptyWaitOverwritesAStageInUse) {
  expect_caught("if (it >= 6) kiln_mbarrier_wait(&empty[s], ((it / 6) - 1) & 1);", "",
                Schedule::adversarial());
}

TEST(EmulatedWgmmaRules, AnExpectTxShortOfTheStagesBytesIsCaught) {
  // The phase completes before the whole stage has landed, and the next phase starts with the
  // surplus bytes counted against it.
  expect_caught("kiln_mbarrier_arrive_expect_tx(&full[s], 32768);",
                "kiln_mbarrier_arrive_expect_tx(&full[s], 16384);", Schedule{});
}

TEST(EmulatedWgmmaRules, AWrongWaitParityIsCaught) {
  expect_caught("kiln_mbarrier_wait(&full[s], (it / 6) & 1);",
                "kiln_mbarrier_wait(&full[s], ((it / 6) & 1) ^ 1);", Schedule{});
}

}  // namespace
}  // namespace kiln::emulation
