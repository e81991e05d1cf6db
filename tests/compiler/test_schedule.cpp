// Schedule providers: the heuristic picks only legal tiles, a forced tile reaches the kernel, an
// illegal one is refused naming the kernel and the tiles it runs.
#include "compiler/schedule.h"

#include "compiler/compiler.h"
#include "test_support.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

using test::options;
using test::parse;

MatmulShape shape_of(int64_t m, int64_t n, int64_t k, MatmulPath path) {
  MatmulShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.lda = k;
  s.ldb = n;
  s.path = path;
  s.elem_bytes = path == MatmulPath::f16 || path == MatmulPath::bf16 ? 2 : 4;
  return s;
}

TEST(Schedule, TheHeuristicPicksOneOfTheCandidateTilesForEveryShapePathAndArch) {
  const MatmulPath paths[] = {MatmulPath::ffma, MatmulPath::tf32, MatmulPath::tf32x3,
                              MatmulPath::bf16_of_f32, MatmulPath::f16, MatmulPath::bf16};
  int checked = 0;
  for (int sm : {75, 80, 86, 89, 90, 100, 120}) {
    for (MatmulPath path : paths) {
      for (int64_t m : {1, 17, 32, 100, 128, 4096}) {
        for (int64_t k : {1, 16, 33, 4096}) {
          MatmulShape s = shape_of(m, 4096, k, path);
          MatmulTile tile = heuristic_schedule().matmul_tile(s, sm);
          Status legal = check_tile(tile, s, sm);
          EXPECT_TRUE(legal) << "sm_" << sm << " " << to_string(path) << " m=" << m << " k=" << k
                             << ": " << (legal ? "" : legal.error().message);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 7 * 6 * 6 * 4);
}

TEST(Schedule, CandidatesDependOnTheArchAndFitItsSharedMemory) {
  MatmulShape s = shape_of(4096, 4096, 4096, MatmulPath::tf32);
  for (const MatmulTile& t : candidate_tiles(s, 75)) EXPECT_EQ(t.stages, 1);
  std::vector<MatmulTile> sm80 = candidate_tiles(s, 80);
  ASSERT_FALSE(sm80.empty());
  bool past_96k = false;
  for (const MatmulTile& t : sm80) {
    EXPECT_GE(t.stages, 2);
    EXPECT_LE(t.stages * smem_layout(t, s).stage_bytes(), smem_limit(80)) << to_string(t);
    past_96k |= t.stages * smem_layout(t, s).stage_bytes() > 96 * 1024;
  }
  EXPECT_TRUE(past_96k) << "sm_80 opts in to 163 KiB";
  for (const MatmulTile& t : candidate_tiles(s, 86))
    EXPECT_LE(t.stages * smem_layout(t, s).stage_bytes(), 99 * 1024) << to_string(t);
  // 64x64 warp tiles, but not for tf32x3.
  auto has_wide = [](const std::vector<MatmulTile>& tiles) {
    for (const MatmulTile& t : tiles)
      if (t.bn == 256) return true;
    return false;
  };
  EXPECT_TRUE(has_wide(sm80));
  EXPECT_FALSE(has_wide(candidate_tiles(shape_of(4096, 4096, 4096, MatmulPath::tf32x3), 80)));
}

TEST(Schedule, AForcedTileReachesTheKernelItsNameAndItsLaunch) {
  ir::Graph g = parse(
      "graph g {\n  input a: f32[256, 512]\n  input b: f32[512, 256]\n  c = matmul(a, b)\n"
      "  output c\n}\n");
  auto request = check_request(g, options(80, ir::Precision::high));
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto heuristic = lower(g, *request);
  ASSERT_TRUE(heuristic.ok()) << heuristic.error().message;
  EXPECT_EQ(heuristic->plan.kernels[0].tile.bm, 64);
  MatmulTile forced{32, 64, 16, 1, 4, 3};
  auto program = lower(g, *request, FixedSchedule(forced));
  ASSERT_TRUE(program.ok()) << program.error().message;
  const KernelPlan& k = program->plan.kernels[0];
  EXPECT_EQ(k.tile.bm, 32);
  EXPECT_EQ(k.tile.stages, 3);
  EXPECT_EQ(k.name, "k0_matmul_tf32_32x64");
  EXPECT_EQ(k.launch.grid[1], 256u / 32u);
  EXPECT_NE(program->kernel_sources[0], heuristic->kernel_sources[0]);
}

TEST(Schedule, AnIllegalTileIsRefusedNamingTheKernelAndTheTilesItRuns) {
  ir::Graph g = parse(
      "graph g {\n  input a: f32[64, 64]\n  input b: f32[64, 64]\n  c = matmul(a, b)\n"
      "  output c\n}\n");
  auto request = check_request(g, options(80, ir::Precision::high));
  ASSERT_TRUE(request.ok());
  auto program = lower(g, *request, FixedSchedule(MatmulTile{96, 64, 16, 2, 2, 2}));
  ASSERT_FALSE(program.ok());
  const std::string& m = program.error().message;
  EXPECT_NE(m.find("'c'"), std::string::npos) << m;
  EXPECT_NE(m.find("schedule: tile 96x64x16, 2x2 warps, 2 stages is not one the tf32 matmul "
                   "kernel runs on sm_80"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("64x64x16, 2x2 warps, 2 stages"), std::string::npos) << m;
  // Stages past the one cp.async-less stage of sm_75.
  auto request75 = check_request(g, options(75, ir::Precision::highest));
  ASSERT_TRUE(request75.ok());
  EXPECT_FALSE(lower(g, *request75, FixedSchedule(MatmulTile{64, 64, 16, 2, 4, 2})).ok());
}

TEST(Schedule, ChosenTilesKeyTheirTilesNotWhereTheyCameFrom) {
  MatmulShape a = shape_of(4096, 4096, 4096, MatmulPath::bf16);
  MatmulShape b = shape_of(16, 11008, 4096, MatmulPath::tf32);
  std::string sa = problem_signature(a), sb = problem_signature(b);
  EXPECT_NE(sa, sb);
  MatmulTile t1{128, 128, 32, 2, 2, 4}, t2{128, 128, 32, 2, 2, 3};
  ChosenSchedule one({{sa, {t1, "tuned on X (132 SMs) 2026-11-26"}}});
  ChosenSchedule same({{sa, {t1, "tuned on Y (114 SMs) 2026-11-27"}}});
  ChosenSchedule other_tile({{sa, {t2, "tuned on X (132 SMs) 2026-11-26"}}});
  ChosenSchedule other_problem({{sb, {t1, "tuned on X (132 SMs) 2026-11-26"}}});
  ChosenSchedule both({{sa, {t1, "x"}}, {sb, {t1, "y"}}});
  EXPECT_EQ(one.key(), same.key()) << "devices that chose alike share binaries";
  EXPECT_EQ(one.key().rfind("tiles ", 0), 0u) << one.key();
  EXPECT_NE(one.key(), other_tile.key());
  EXPECT_NE(one.key(), other_problem.key());
  EXPECT_NE(one.key(), both.key());
  EXPECT_EQ(ChosenSchedule({}).key(), "");
  EXPECT_EQ(heuristic_schedule().key(), "");
  EXPECT_EQ(FixedSchedule(t1).key(), "fixed 128x128x32, 2x2 warps, 4 stages");
  // A chosen problem gets its tile and source, every other the heuristic's.
  EXPECT_TRUE(same_tile(one.matmul_tile(a, 90), t1));
  EXPECT_EQ(one.source_for(a, 90), "tuned on X (132 SMs) 2026-11-26");
  EXPECT_TRUE(same_tile(one.matmul_tile(b, 90), choose_tile(b, 90)));
  EXPECT_EQ(one.source_for(b, 90), "model");
}

TEST(Schedule, ATileReadsBackOnlyAsToStringWritesIt) {
  for (const MatmulTile& t : {MatmulTile{128, 256, 64, 2, 4, 4}, MatmulTile{32, 64, 16, 1, 4, 1}}) {
    auto back = parse_tile(to_string(t));
    ASSERT_TRUE(back) << to_string(t);
    EXPECT_TRUE(same_tile(*back, t));
  }
  for (const char* bad : {"", "128x128", "128x128x32, 2x2 warps, 4 stage",
                          "128x128x32, 2x2 warps, 1 stages", "128x128x32, 2x2 warps, 4 stages ",
                          "0x128x32, 2x2 warps, 4 stages", "99999999999x128x32, 2x2 warps, 4 stages",
                          "-128x128x32, 2x2 warps, 4 stages", "128x128x32,  2x2 warps, 4 stages"})
    EXPECT_FALSE(parse_tile(bad)) << bad;
}

}  // namespace
}  // namespace kiln::compiler
