// Forced schedules: every block shape the matmul emitters run (tile, K step, warps), at its fewest
// and most stages, on
// odd sizes in each matmul path, as generated kernels under emulation against fp64. A tile the
// heuristic never picks for these shapes must be as correct as the ones it does.
#include "compiler/compiler.h"
#include "emulation/check.h"
#include "ir/parse.h"

#include <gtest/gtest.h>

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
  if (aligned && c.precision != ir::Precision::tf32x3) EXPECT_GE(warp_64x64, 3);
  if (!aligned) EXPECT_EQ(warp_64x64, 0);
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

}  // namespace
}  // namespace kiln::emulation
