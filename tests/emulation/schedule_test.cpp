// Forced schedules: every block shape the matmul emitters run (tile, K step, warps), at its fewest
// and most stages, on
// odd sizes in each matmul path, as generated kernels under emulation against fp64. A tile the
// heuristic never picks for these shapes must be as correct as the ones it does.
#include "compiler/compiler.h"
#include "emulation/check.h"
#include "emulation/program.h"
#include "ir/parse.h"
#include "reference/check.h"
#include "reference/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kiln::emulation {
namespace {

ir::Graph load(const std::string& name) {
  auto graph = ir::parse_graph_file(std::string(KILN_EMU_TEST_GRAPHS) + "/" + name + ".kg");
  EXPECT_TRUE(graph.ok()) << (graph.ok() ? "" : graph.error().message);
  return std::move(*graph);
}

struct Case {
  const char* graph;
  int sm;
  ir::Precision precision;
};

class ForcedTiles : public ::testing::TestWithParam<Case> {};

TEST_P(ForcedTiles, EveryBlockShapeAtItsFewestAndMostStagesMatchesTheReference) {
  const Case& c = GetParam();
  ir::Graph graph = load(c.graph);
  compiler::CompileOptions options;
  options.target.sm = c.sm;
  options.precision = c.precision;
  auto request = compiler::check_request(graph, options);
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto heuristic = compiler::lower(graph, *request);
  ASSERT_TRUE(heuristic.ok()) << heuristic.error().message;
  const compiler::KernelPlan* matmul = nullptr;
  for (const compiler::KernelPlan& k : heuristic->plan.kernels)
    if (k.group.kind == compiler::GroupKind::matmul) matmul = &k;
  ASSERT_NE(matmul, nullptr);
  // Each block shape's (tile, K step and warps) fewest and most stages.
  std::map<std::tuple<int, int, int, int, int>,
           std::pair<compiler::MatmulTile, compiler::MatmulTile>>
      shapes;
  for (const compiler::MatmulTile& t : compiler::candidate_tiles(matmul->shape, c.sm)) {
    auto [it, fresh] = shapes.try_emplace({t.bm, t.bn, t.bk, t.warps_m, t.warps_n}, t, t);
    if (!fresh && t.stages < it->second.first.stages) it->second.first = t;
    if (!fresh && t.stages > it->second.second.stages) it->second.second = t;
  }
  ASSERT_GE(shapes.size(), 2u);
  std::vector<compiler::MatmulTile> tiles;
  for (const auto& [block, fewest_most] : shapes) {
    tiles.push_back(fewest_most.first);
    if (fewest_most.second.stages != fewest_most.first.stages) tiles.push_back(fewest_most.second);
  }
  int run = 0, warp_64x64 = 0;
  for (const compiler::MatmulTile& tile : tiles) {
    warp_64x64 += tile.bm / tile.warps_m == 64 && tile.bn / tile.warps_n == 64;
    SCOPED_TRACE(compiler::to_string(tile));
    auto lowered = compiler::lower(graph, *request, compiler::FixedSchedule(tile));
    ASSERT_TRUE(lowered.ok()) << lowered.error().message;
    for (const compiler::KernelPlan& k : lowered->plan.kernels) {
      if (k.group.kind != compiler::GroupKind::matmul) continue;
      EXPECT_EQ(compiler::to_string(k.tile), compiler::to_string(tile)) << k.name;
    }
    auto program = build_program(graph, std::move(*lowered));
    ASSERT_TRUE(program.ok()) << program.error().message;
    auto report = check_program(graph, *program, 7, Schedule::adversarial());
    ASSERT_TRUE(report.ok()) << report.error().message;
    for (const OutputCheck& o : report->outputs)
      EXPECT_TRUE(o.ok) << o.name << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
    ++run;
  }
  EXPECT_GE(run, static_cast<int>(shapes.size()));
  // Rows of 16-byte vectors run the 64x64 warp tiles too (but for tf32x3, which has none).
  bool aligned = std::string(c.graph).find("aligned") != std::string::npos;
  if (aligned && c.precision != ir::Precision::tf32x3) {
    EXPECT_GE(warp_64x64, 3);
  }
  if (!aligned) {
    EXPECT_EQ(warp_64x64, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, ForcedTiles,
    ::testing::Values(Case{"mlp_odd", 75, ir::Precision::highest},
                      Case{"mlp_odd", 80, ir::Precision::highest},
                      Case{"mlp_odd", 80, ir::Precision::high},
                      Case{"mlp_odd", 86, ir::Precision::tf32x3},
                      Case{"mlp_odd", 90, ir::Precision::medium},
                      Case{"reuse_odd", 80, ir::Precision::high},
                      Case{"reuse_bf16_odd", 80, ir::Precision::high},
                      Case{"reuse_f16_odd", 75, ir::Precision::high},
                      Case{"reuse_aligned", 90, ir::Precision::high},
                      Case{"reuse_aligned", 80, ir::Precision::medium},
                      Case{"reuse_aligned", 86, ir::Precision::tf32x3},
                      Case{"reuse_bf16_aligned", 90, ir::Precision::high},
                      Case{"reuse_f16_aligned", 86, ir::Precision::high}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.graph) + "_sm" + std::to_string(info.param.sm) + "_" +
             std::string(ir::to_string(info.param.precision)) + "_" +
             std::to_string(info.index);
    });

// ---- a matmul's row tiles and batches folded over the grid's y and z (past 65535 of either) ----

// The smallest row tile each problem offers (the most row tiles), split `split` ways where the
// problem offers that split, with a grid limit of 3 along y and z: every matmul below folds, as
// one past 65535 row tiles or batches does on hardware.
class FoldingMatmuls final : public compiler::ScheduleProvider {
public:
  explicit FoldingMatmuls(int split) : m_split(split) {}
  compiler::MatmulTile matmul_tile(const compiler::MatmulShape& shape, int sm) const override {
    std::vector<compiler::MatmulTile> offered = compiler::candidate_tiles(shape, sm);
    compiler::MatmulTile best = offered.front();
    auto rank = [&](const compiler::MatmulTile& t) {
      return std::tuple(t.split_k == m_split, t.group == compiler::k_default_group, -t.bm);
    };
    for (const compiler::MatmulTile& t : offered)
      if (rank(t) > rank(best)) best = t;
    return best;
  }
  int64_t grid_limit() const override { return 3; }
  std::string source() const override { return "fixed"; }
  std::string key() const override { return "folding " + std::to_string(m_split); }

private:
  int m_split;
};

// Batches of 5 (3-D) and 2 x 3 (4-D, q's heads over k's broadcast batch), 300 rows in grouped
// order (more row tiles than the group's 8, two column tiles), and K deep enough to split.
const char* k_folded_matmul_graph = R"(graph foldmm {
  input a: f32[5, 70, 256]
  input b: f32[5, 256, 36]
  input x: f32[300, 40]
  input w: f32[40, 70]
  input q: f32[2, 3, 33, 16]
  input k: f32[2, 1, 16, 20]
  y = matmul(a, b)
  z = matmul(x, w)
  r = matmul(q, k)
  output y, z, r
}
)";

std::string folded_check(const ir::Graph& graph, const Program& program, const Schedule& schedule) {
  auto report = check_program(graph, program, 3, schedule);
  if (!report) return report.error().message;
  std::string failed;
  for (const OutputCheck& o : report->outputs)
    if (!(o.rel_l2 <= o.tolerance)) failed += o.name + " rel_l2 " + std::to_string(o.rel_l2) + "; ";
  return failed;
}

TEST(EmulatedFoldedMatmul, EveryMatmulKernelFindsItsRowTileAndBatchFoldedOverYAndZ) {
  auto parsed = ir::parse_graph(k_folded_matmul_graph, "foldmm.kg");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const ir::Graph& graph = *parsed;
  struct Run {
    int sm;
    ir::Precision precision;
    int split;
  };
  int split_folded = 0, grouped_folded = 0;
  for (Run run : {Run{80, ir::Precision::highest, 1}, Run{80, ir::Precision::high, 1},
                  Run{80, ir::Precision::high, 2}, Run{86, ir::Precision::tf32x3, 2},
                  Run{90, ir::Precision::high, 1}}) {
    compiler::CompileOptions options;
    options.target = compiler::Target::cuda(run.sm);
    options.precision = run.precision;
    SCOPED_TRACE("sm_" + std::to_string(run.sm) + " " + std::string(ir::to_string(run.precision)) +
                 " split " + std::to_string(run.split));
    auto request = compiler::check_request(graph, options);
    ASSERT_TRUE(request.ok()) << request.error().message;
    auto lowered = compiler::lower(graph, *request, FoldingMatmuls(run.split));
    ASSERT_TRUE(lowered.ok()) << lowered.error().message;
    int folded = 0;
    for (const compiler::KernelPlan& k : lowered->plan.kernels) {
      if (k.group.kind != compiler::GroupKind::matmul || k.split == compiler::SplitRole::sum)
        continue;
      int64_t rows = (k.shape.m + k.tile.bm - 1) / k.tile.bm;
      int64_t blocks = rows * k.shape.batch * k.tile.split_k;
      ASSERT_GT(blocks, 3) << k.name;
      EXPECT_EQ(k.folded_rows, rows) << k.name;
      int64_t y = std::min<int64_t>((blocks + 2) / 3, 3);
      EXPECT_EQ(k.launch.grid[1], static_cast<uint32_t>(y)) << k.name;
      EXPECT_EQ(k.launch.grid[2], static_cast<uint32_t>((blocks + y - 1) / y)) << k.name;
      ++folded;
      split_folded += k.tile.split_k > 1;
      grouped_folded += k.tile.group > 1 && rows > k.tile.group && k.launch.grid[0] >= 2;
    }
    EXPECT_EQ(folded, 3);
    std::string source = compiler::program_source(*lowered, compiler::Prelude::omit);
    EXPECT_NE(source.find("const unsigned yz = blockIdx.y + gridDim.y * blockIdx.z;"),
              std::string::npos);
    auto program = build_program(graph, std::move(*lowered));
    ASSERT_TRUE(program.ok()) << program.error().message;
    for (const Schedule& schedule : {Schedule{}, Schedule::adversarial(), Schedule::seeded_by(1)})
      EXPECT_EQ(folded_check(graph, *program, schedule), "") << "schedule " << to_string(schedule);
  }
  EXPECT_GE(split_folded, 2) << "a split-K partials kernel folded in each split run";
  EXPECT_GE(grouped_folded, 1) << "a grouped block order folded";
}

// A symbolic batch, and a symbolic M whose row tiles the kernel counts itself (in grouped order:
// 9 to 16 row tiles of 32, 2 column tiles or more): one build runs every size of the bucket, the
// grid planned (and folded) at its upper bounds.
TEST(EmulatedFoldedMatmul, SymbolicSizesFoldAtTheBucketsUpperBounds) {
  const char* text = R"(graph foldsym {
  dim B: 1..64
  dim S: 1..512
  input a: f32[B, 40, 24]
  input b: f32[B, 24, 20]
  input x: f32[S, 40]
  input w: f32[40, 70]
  y = matmul(a, b)
  z = matmul(x, w)
  output y, z
}
)";
  auto parsed = ir::parse_graph(text, "foldsym.kg");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const ir::Graph& graph = *parsed;
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(80);
  options.precision = ir::Precision::high;
  options.bucket = {compiler::DimRange{5, 8}, compiler::DimRange{257, 512}};
  auto request = compiler::check_request(graph, options);
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto lowered = compiler::lower(graph, *request, FoldingMatmuls(1));
  ASSERT_TRUE(lowered.ok()) << lowered.error().message;
  int folded = 0;
  for (const compiler::KernelPlan& k : lowered->plan.kernels) {
    if (k.group.kind != compiler::GroupKind::matmul) continue;
    EXPECT_GT(k.folded_rows, 0) << k.name;
    ASSERT_EQ(k.grid.size(), 3u) << k.name;
    EXPECT_TRUE(k.grid[1].symbols.empty() && k.grid[2].symbols.empty()) << k.name;
    folded += k.folded_rows > 0;
  }
  EXPECT_EQ(folded, 2);
  std::string source = compiler::program_source(*lowered, compiler::Prelude::omit);
  EXPECT_NE(source.find("const int row_tiles = ("), std::string::npos) << "S's row tiles";
  EXPECT_NE(source.find("const int rows = row_tiles - first < 8"), std::string::npos)
      << "the grouped order over them";
  auto program = build_program(graph, std::move(*lowered));
  ASSERT_TRUE(program.ok()) << program.error().message;
  for (std::vector<int64_t> sizes : {std::vector<int64_t>{5, 257}, {7, 300}, {8, 512}}) {
    auto bound = graph.bind(sizes);
    ASSERT_TRUE(bound.ok()) << bound.error().message;
    auto report = reference::check_against_fp64(
        *bound, program->lowered().precision.graph_mode, 5,
        [&](const std::vector<reference::Tensor>& inputs) { return program->run(inputs); });
    ASSERT_TRUE(report.ok()) << report.error().message;
    for (const reference::OutputCheck& o : report->outputs)
      EXPECT_TRUE(o.ok) << "at " << sizes[0] << ", " << sizes[1] << ": " << o.name << " rel_l2 "
                        << o.rel_l2;
  }
}

}  // namespace
}  // namespace kiln::emulation
