// Schedule providers: the heuristic picks only legal tiles, a forced tile reaches the kernel, an
// illegal one is refused naming the kernel and the tiles it runs.
#include "compiler/schedule.h"

#include "compiler/compiler.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

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
  for (const MatmulTile& t : {MatmulTile{128, 256, 64, 2, 4, 4}, MatmulTile{32, 64, 16, 1, 4, 1},
                              MatmulTile{64, 64, 32, 2, 2, 4, 8}}) {
    auto back = parse_tile(to_string(t));
    ASSERT_TRUE(back) << to_string(t);
    EXPECT_TRUE(same_tile(*back, t));
  }
  for (const char* bad : {"", "128x128", "128x128x32, 2x2 warps, 4 stage",
                          "128x128x32, 2x2 warps, 1 stages", "128x128x32, 2x2 warps, 4 stages ",
                          "0x128x32, 2x2 warps, 4 stages", "99999999999x128x32, 2x2 warps, 4 stages",
                          "-128x128x32, 2x2 warps, 4 stages", "128x128x32,  2x2 warps, 4 stages",
                          "64x64x32, 2x2 warps, 4 stages, split 1",
                          "64x64x32, 2x2 warps, 4 stages, split 17",
                          "64x64x32, 2x2 warps, 4 stages, split 4 ",
                          "64x64x32, 2x2 warps, 4 stages,split 4"})
    EXPECT_FALSE(parse_tile(bad)) << bad;
  EXPECT_EQ(to_string(MatmulTile{64, 64, 32, 2, 2, 4, 8}), "64x64x32, 2x2 warps, 4 stages, split 8");
  EXPECT_FALSE(same_tile(MatmulTile{64, 64, 32, 2, 2, 4, 8}, MatmulTile{64, 64, 32, 2, 2, 4, 4}));
}

TEST(Schedule, ABlockOrderReadsBackAndOnlyTheModelsGroupGoesUnwritten) {
  for (const MatmulTile& t : {MatmulTile{128, 128, 32, 2, 2, 4, 1, 16},
                              MatmulTile{128, 128, 32, 2, 2, 4, 1, 1},
                              MatmulTile{64, 64, 32, 2, 2, 4, 2, 1}}) {
    auto back = parse_tile(to_string(t));
    ASSERT_TRUE(back) << to_string(t);
    EXPECT_TRUE(same_tile(*back, t)) << to_string(t);
  }
  EXPECT_EQ(to_string(MatmulTile{64, 64, 32, 2, 2, 4, 2, 1}),
            "64x64x32, 2x2 warps, 4 stages, split 2, group 1");
  EXPECT_EQ(to_string(MatmulTile{64, 64, 32, 2, 2, 4, 1, 8}), "64x64x32, 2x2 warps, 4 stages");
  EXPECT_FALSE(same_tile(MatmulTile{64, 64, 32, 2, 2, 4, 1, 16}, MatmulTile{64, 64, 32, 2, 2, 4}));
  for (const char* bad : {"64x64x32, 2x2 warps, 4 stages, group 8",
                          "64x64x32, 2x2 warps, 4 stages, group 0",
                          "64x64x32, 2x2 warps, 4 stages, group 65",
                          "64x64x32, 2x2 warps, 4 stages, group 016",
                          "64x64x32, 2x2 warps, 4 stages, group 16, split 2",
                          "64x64x32, 2x2 warps, 4 stages, group 16 ",
                          "64x64x32, 2x2 warps, 4 stages, group"})
    EXPECT_FALSE(parse_tile(bad)) << bad;
}

TEST(Schedule, OtherBlockOrdersAreCandidatesWhereTheModelsGroupsOrderTheGrid) {
  auto orders = [](const MatmulShape& s, int sm) {
    std::set<int> groups;
    for (const MatmulTile& t : candidate_tiles(s, sm)) {
      EXPECT_TRUE(check_tile(t, s, sm)) << to_string(t);
      groups.insert(t.group);
    }
    return groups;
  };
  // 4096^2 in 128x128 tiles: 32 row tiles, so row-major and groups of 16 too.
  EXPECT_EQ(orders(shape_of(4096, 4096, 4096, MatmulPath::bf16), 90), (std::set<int>{1, 8, 16}));
  EXPECT_EQ(orders(shape_of(4096, 4096, 4096, MatmulPath::ffma), 80), (std::set<int>{1, 8, 16}));
  // 296 rows: at most 10 row tiles of 32, so groups of 16 order nothing.
  EXPECT_EQ(orders(shape_of(296, 4096, 64, MatmulPath::bf16), 90), (std::set<int>{1, 8}));
  // 100 rows, or one column tile: only the model's order.
  EXPECT_EQ(orders(shape_of(100, 4096, 64, MatmulPath::tf32), 90), (std::set<int>{8}));
  EXPECT_EQ(orders(shape_of(4096, 64, 64, MatmulPath::tf32), 90), (std::set<int>{8}));
  // The model keeps its groups of 8; a group of 16 where 16 row tiles or fewer is refused.
  EXPECT_EQ(choose_tile(shape_of(4096, 4096, 4096, MatmulPath::bf16), 90).group, 8);
  MatmulShape small = shape_of(296, 4096, 64, MatmulPath::bf16);
  MatmulTile sixteen = choose_tile(small, 90);
  sixteen.group = 16;
  EXPECT_FALSE(check_tile(sixteen, small, 90));
}

TEST(Schedule, AChosenBlockOrderReachesTheKernel) {
  ir::Graph g = parse(
      "graph g {\n  input a: bf16[1100, 64]\n  input b: bf16[64, 200]\n  c = matmul(a, b)\n"
      "  output c\n}\n");
  auto request = check_request(g, options(90, ir::Precision::high));
  ASSERT_TRUE(request.ok());
  MatmulTile tile{64, 64, 32, 2, 2, 3};
  auto model = lower(g, *request, FixedSchedule(tile));
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_NE(model->kernel_sources[0].find("grouped order: 8 row tiles"), std::string::npos);
  tile.group = 16;
  auto sixteen = lower(g, *request, FixedSchedule(tile));
  ASSERT_TRUE(sixteen.ok()) << sixteen.error().message;
  EXPECT_NE(sixteen->kernel_sources[0].find("grouped order: 16 row tiles"), std::string::npos);
  tile.group = 1;
  auto plain = lower(g, *request, FixedSchedule(tile));
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(plain->kernel_sources[0].find("grouped order"), std::string::npos);
  EXPECT_NE(plain->kernel_sources[0].find("const int bm0 = (int)blockIdx.y * 64;"),
            std::string::npos);
  EXPECT_EQ(plain->plan.kernels[0].launch.grid[1], 18u) << "the grid is the same in every order";
}

TEST(Schedule, ATileWithALeadingZeroDoesNotReadBack) {
  for (const char* bad : {"064x64x32, 2x2 warps, 4 stages", "64x64x32, 2x2 warps, 04 stages",
                          "64x64x32, 2x2 warps, 4 stages, split 04"})
    EXPECT_FALSE(parse_tile(bad)) << bad;
}

AttentionShape attention_of(MatmulPath path, int64_t d) {
  AttentionShape s;
  s.batch = 32;
  s.sq = s.sk = 4096;
  s.d = s.dv = d;
  s.path = path;
  s.causal = true;
  return s;
}

TEST(AttentionSchedule, TheHeuristicsTileIsACandidateAndEveryCandidateFitsTheArch) {
  const MatmulPath paths[] = {MatmulPath::ffma, MatmulPath::tf32, MatmulPath::tf32x3,
                              MatmulPath::bf16_of_f32, MatmulPath::f16, MatmulPath::bf16};
  int checked = 0;
  for (int sm : {75, 80, 86, 89, 90, 100, 120}) {
    for (MatmulPath path : paths) {
      // sm_75 runs FFMA and f16 only (check_request refuses the rest).
      if (sm == 75 && path != MatmulPath::ffma && path != MatmulPath::f16) continue;
      for (int64_t d : {16, 20, 64, 80, 128, 200, 256}) {
        AttentionShape s = attention_of(path, d);
        std::string what = "sm_" + std::to_string(sm) + " " + std::string(to_string(path)) +
                           " d=" + std::to_string(d);
        AttentionTile model = heuristic_schedule().attention_tile(s, sm);
        Status legal = check_attention_tile(model, s, sm);
        EXPECT_TRUE(legal) << what << ": " << (legal ? "" : legal.error().message);
        std::vector<AttentionTile> tiles = attention_candidates(s, sm);
        for (const AttentionTile& t : tiles) {
          EXPECT_LE(t.smem_bytes(), smem_limit(sm)) << what << " " << to_string(t);
          EXPECT_LE(t.bc, attention_max_bc(path, t.d)) << what << " " << to_string(t);
          EXPECT_EQ(t.br, (uses_mma(path) ? 16 : 8) * t.warps) << what;
          if (sm == 75) {
            EXPECT_EQ(t.stages, 1) << what << ": no cp.async on sm_75";
          }
          EXPECT_TRUE(check_attention_tile(t, s, sm)) << what << " " << to_string(t);
        }
        // The opt-in shared memory of sm_90 (227 KiB) holds every tile of 8 warps and 3 stages.
        if (sm == 90) {
          EXPECT_TRUE(std::any_of(tiles.begin(), tiles.end(), [](const AttentionTile& t) {
            return t.warps == 8 && t.stages == 3;
          })) << what;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, (6 * 6 + 2) * 7);
  // The heuristic as before candidates existed: 4 warps, 64 keys and 2 stages for bf16 at 128.
  AttentionTile t = choose_attention_tile(attention_of(MatmulPath::bf16, 128), 90);
  EXPECT_EQ(to_string(t), "64x64, 4 warps, 2 stages");
}

TEST(AttentionSchedule, ATileReadsBackOnlyAsToStringWritesIt) {
  AttentionShape s = attention_of(MatmulPath::bf16, 128);
  for (const AttentionTile& t : attention_candidates(s, 90)) {
    auto back = parse_kernel_tile(to_string(t));
    ASSERT_TRUE(back) << to_string(t);
    ASSERT_TRUE(std::holds_alternative<AttentionTile>(*back)) << to_string(t);
    EXPECT_TRUE(same_tile(std::get<AttentionTile>(*back), t)) << to_string(t);
  }
  auto matmul = parse_kernel_tile("128x128x32, 2x2 warps, 4 stages");
  ASSERT_TRUE(matmul);
  EXPECT_TRUE(std::holds_alternative<MatmulTile>(*matmul));
  EXPECT_EQ(to_string(AttentionTile{128, 32, 3, 8}), "128x32, 8 warps, 3 stages");
  for (const char* bad : {"", "64x64", "64x64, 4 warps", "64x64, 4 warps, 2 stage",
                          "64x64, 4 warps, 1 stages", "64x64, 4 warps, 2 stages ",
                          "064x64, 4 warps, 2 stages", "64x64,4 warps, 2 stages",
                          "64x64, 4x1 warps, 2 stages", "0x64, 4 warps, 2 stages"})
    EXPECT_FALSE(parse_kernel_tile(bad)) << bad;
  EXPECT_FALSE(same_tile(KernelTile(AttentionTile{64, 64, 2, 4}),
                         KernelTile(MatmulTile{64, 64, 16, 2, 2, 2})));
}

// A wgmma attention choice (a tuning record's text) runs as written or fails: 128 keys at head
// dim 256 (the kernel takes 64 there) and 64 keys at 128 are refused naming the tile, not run
// with the key tile the problem's model would take; the model's own choices hold.
TEST(AttentionSchedule, AWgmmaChoiceKeepsItsKeyTileAndFailsWhereTheKernelTakesAnother) {
  auto shape_at = [](int64_t d) {
    AttentionShape s;
    s.batch = 8;
    s.sq = s.sk = 4096;
    s.d = s.dv = d;
    s.elem_bytes = 2;
    s.path = MatmulPath::bf16;
    return s;
  };
  auto complete = [](const char* text, const AttentionShape& s) {
    auto choice = parse_kernel_tile(text);
    EXPECT_TRUE(choice && std::holds_alternative<AttentionTile>(*choice)) << text;
    return complete_attention_tile(std::get<AttentionTile>(*choice), s);
  };
  AttentionShape wide = shape_at(256), narrow = shape_at(128);
  AttentionTile t = complete("128x64, wgmma, 2 stages", wide);
  EXPECT_EQ(t.bc, 64);
  EXPECT_EQ(t.dv, 256);
  EXPECT_TRUE(check_wgmma_attention_tile(t, wide));
  t = complete("128x128, wgmma, 2 stages", wide);
  EXPECT_EQ(t.bc, 128) << "the record's key tile, not the model's";
  Status refused = check_wgmma_attention_tile(t, wide);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("tile 128x128, wgmma, 2 stages is not one the sm_90a "
                                         "attention kernel runs"),
            std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(check_wgmma_attention_tile(complete("128x128, wgmma, 3 stages", narrow), narrow));
  EXPECT_FALSE(check_wgmma_attention_tile(complete("128x64, wgmma, 2 stages", narrow), narrow));
  EXPECT_FALSE(check_wgmma_attention_tile(complete("64x128, wgmma, 2 stages", narrow), narrow));
}

// The wgmma attention tile pads d and d_v to multiples of 64 (P V's m64n{64,128,192,256}k16), with
// 64-key tiles past a head dim of 128; its kernel is named by its block tile.
TEST(AttentionSchedule, TheWgmmaTilePadsHeadDimsToMultiplesOf64) {
  struct Case {
    int64_t d, dv;
    int pd, pdv, bc;
  };
  for (Case c : {Case{64, 64, 64, 64, 128}, Case{40, 72, 64, 128, 128}, Case{128, 128, 128, 128, 128},
                 Case{64, 136, 64, 192, 64}, Case{192, 192, 192, 192, 64}, Case{200, 192, 256, 192, 64},
                 Case{256, 256, 256, 256, 64}}) {
    AttentionShape s;
    s.d = c.d;
    s.dv = c.dv;
    s.elem_bytes = 2;
    s.path = MatmulPath::bf16;
    AttentionTile t = choose_wgmma_attention_tile(s);
    std::string what = "d " + std::to_string(c.d) + " dv " + std::to_string(c.dv);
    EXPECT_EQ(t.d, c.pd) << what;
    EXPECT_EQ(t.dv, c.pdv) << what;
    EXPECT_EQ(t.bc, c.bc) << what;
    EXPECT_TRUE(check_wgmma_attention_tile(t, s)) << what;
    EXPECT_EQ(cuda_kernel_name("k1_attention_bf16", t),
              "k1_attention_bf16_wg128x" + std::to_string(c.bc)) << what;
  }
  EXPECT_EQ(cuda_kernel_name("k1_attention_bf16", AttentionTile{64, 64, 2, 4}), "k1_attention_bf16");
}

// fp32 attention can take the wgmma kernel in `medium` (its producer converts q, k and v to bf16,
// wgmma_attention_converts; the tile, bf16 in shared memory, is the 16-bit one's) and in `high`
// at head dims up to 128 (tf32 wgmma, fp32 in shared memory: d padded to a multiple of 32, 64
// keys a tile past a head dim of 64) and in `tf32x3` at head dims up to 64 (big and small parts,
// 8 bytes an element, 64-key tiles), not in `highest`; the model does not choose it.
TEST(AttentionSchedule, TheWgmmaKernelTakesFp32AttentionInMediumHighAndTf32x3) {
  auto shape_of = [](MatmulPath path, int elem_bytes, int64_t d = 128, int64_t dv = 128) {
    AttentionShape s;
    s.d = d;
    s.dv = dv;
    s.path = path;
    s.elem_bytes = elem_bytes;
    return s;
  };
  AttentionShape medium = shape_of(MatmulPath::bf16_of_f32, 4), half = shape_of(MatmulPath::bf16, 2);
  EXPECT_TRUE(wgmma_attention_computes(medium));
  EXPECT_TRUE(wgmma_attention_converts(medium));
  EXPECT_TRUE(wgmma_attention_loads(medium));
  EXPECT_TRUE(wgmma_attention_computes(half));
  EXPECT_FALSE(wgmma_attention_loads(half));
  // the model plans 16-bit attention there, fp32 (its producer's loads unmeasured) on design 5
  EXPECT_TRUE(wgmma_attention_by_model(half));
  EXPECT_FALSE(wgmma_attention_by_model(medium));
  EXPECT_FALSE(wgmma_attention_by_model(shape_of(MatmulPath::tf32, 4)));
  EXPECT_FALSE(wgmma_attention_loads(shape_of(MatmulPath::f16, 2)));
  // tf32x3 at head dim 128 (its small parts would not fit) and FFMA: not there
  for (MatmulPath path : {MatmulPath::tf32x3, MatmulPath::ffma})
    EXPECT_FALSE(wgmma_attention_computes(shape_of(path, 4))) << to_string(path);
  AttentionTile t = choose_wgmma_attention_tile(medium);
  EXPECT_EQ(t.elem_bytes, 2);
  EXPECT_EQ(t.smem_bytes(), choose_wgmma_attention_tile(half).smem_bytes());
  EXPECT_TRUE(check_wgmma_attention_tile(t, medium));
  struct Case {
    int64_t d, dv;
    int pd, pdv, bc;
  };
  // `high` (tf32, 4 bytes an element) and, head dims up to 64, `tf32x3` (each element's two
  // parts, 8 bytes; 64 keys)
  auto expect_tf32_tile = [&](MatmulPath path, Case c) {
    AttentionShape s = shape_of(path, 4, c.d, c.dv);
    bool x3 = path == MatmulPath::tf32x3;
    std::string what = std::string(to_string(path)) + " d " + std::to_string(c.d) + " dv " +
                       std::to_string(c.dv);
    EXPECT_TRUE(wgmma_attention_computes(s)) << what;
    EXPECT_TRUE(wgmma_attention_tf32(s)) << what;
    EXPECT_EQ(wgmma_attention_splits(s), x3) << what;
    EXPECT_TRUE(wgmma_attention_loads(s)) << what;
    EXPECT_FALSE(wgmma_attention_converts(s)) << what;
    EXPECT_FALSE(wgmma_attention_by_model(s)) << what;
    AttentionTile tile = choose_wgmma_attention_tile(s);
    EXPECT_EQ(tile.elem_bytes, x3 ? 8 : 4) << what;
    EXPECT_EQ(tile.d, c.pd) << what;
    EXPECT_EQ(tile.dv, c.pdv) << what;
    EXPECT_EQ(tile.bc, c.bc) << what;
    EXPECT_LE(tile.smem_bytes(), smem_limit(90)) << what;
    EXPECT_TRUE(check_wgmma_attention_tile(tile, s)) << what;
  };
  for (Case c : {Case{128, 128, 128, 128, 64}, Case{40, 72, 64, 128, 64}, Case{64, 56, 64, 64, 128},
                 Case{8, 8, 32, 64, 128}, Case{96, 64, 96, 64, 64}})
    expect_tf32_tile(MatmulPath::tf32, c);
  EXPECT_FALSE(wgmma_attention_computes(shape_of(MatmulPath::tf32, 4, 136, 64)));
  EXPECT_FALSE(wgmma_attention_computes(shape_of(MatmulPath::tf32, 4, 64, 136)));
  for (Case c : {Case{64, 64, 64, 64, 64}, Case{40, 56, 64, 64, 64}, Case{8, 8, 32, 64, 64}}) {
    expect_tf32_tile(MatmulPath::tf32x3, c);
    AttentionShape x3 = shape_of(MatmulPath::tf32x3, 4, c.d, c.dv);
    std::string what = "tf32x3 d " + std::to_string(c.d) + " dv " + std::to_string(c.dv);
    // `high`'s tile (4 bytes an element, 128 keys) is not one the tf32x3 kernel runs
    AttentionTile high = choose_wgmma_attention_tile(shape_of(MatmulPath::tf32, 4, c.d, c.dv));
    high.bc = 64;
    EXPECT_FALSE(check_wgmma_attention_tile(high, x3)) << what;
  }
  EXPECT_EQ(choose_wgmma_attention_tile(shape_of(MatmulPath::tf32x3, 4, 64, 64)).smem_bytes(),
            1024 + 8 * (128 * 64 + 2 * 64 * (64 + 64)) + 8 * 5);
  EXPECT_FALSE(wgmma_attention_computes(shape_of(MatmulPath::tf32x3, 4, 72, 64)));
  EXPECT_FALSE(wgmma_attention_computes(shape_of(MatmulPath::tf32x3, 4, 64, 72)));
  // The fp32 producer's staging ring (128 threads x pieces x 16 bytes) sits beside the tile's
  // operands: 32 pieces a thread where they leave 64 KiB (medium at d = d_v = 128: 161 KiB), 16
  // at the fullest tiles (193 KiB: high at 128, tf32x3 at 64, medium at 256); none for TMA.
  struct Staged {
    AttentionShape shape;
    int pieces;
  };
  for (Staged c : {Staged{medium, 32}, Staged{shape_of(MatmulPath::bf16_of_f32, 4, 256, 256), 16},
                   Staged{shape_of(MatmulPath::tf32, 4), 16},
                   Staged{shape_of(MatmulPath::tf32, 4, 64, 64), 32},
                   Staged{shape_of(MatmulPath::tf32x3, 4, 64, 64), 16}, Staged{half, 0}}) {
    std::string what = std::string(to_string(c.shape.path)) + " d " + std::to_string(c.shape.d);
    AttentionTile tile = choose_wgmma_attention_tile(c.shape);
    EXPECT_EQ(wgmma_attention_staging_pieces(tile, c.shape), c.pieces) << what;
    EXPECT_EQ(wgmma_attention_smem_bytes(tile, c.shape), tile.smem_bytes() + 2048 * c.pieces) << what;
    EXPECT_LE(wgmma_attention_smem_bytes(tile, c.shape), smem_limit(90)) << what;
  }
  EXPECT_EQ(smem_limit(90), 227 * 1024);
  // A tile that leaves no 8 KiB for the ring is not one the loading kernel runs: 3 stages of
  // high's at d = d_v = 64 (128 keys) take 225 KiB, within 227, but leave under 2 KiB; 3 of
  // medium's at d = 64 with d_v 128 (161 KiB) leave 66
  AttentionShape small = shape_of(MatmulPath::tf32, 4, 64, 64);
  AttentionTile three = choose_wgmma_attention_tile(small);
  three.stages = 3;
  EXPECT_LE(three.smem_bytes(), smem_limit(90));
  EXPECT_EQ(wgmma_attention_staging_pieces(three, small), 0);
  EXPECT_FALSE(check_wgmma_attention_tile(three, small));
  AttentionShape narrow = shape_of(MatmulPath::bf16_of_f32, 4, 64, 128);
  three = choose_wgmma_attention_tile(narrow);
  three.stages = 3;
  EXPECT_TRUE(check_wgmma_attention_tile(three, narrow));
  EXPECT_EQ(wgmma_attention_staging_pieces(three, narrow), 32);
  // 4 stages of it (209 KiB) leave 17 KiB: 8 pieces
  three.stages = 4;
  EXPECT_TRUE(check_wgmma_attention_tile(three, narrow));
  EXPECT_EQ(wgmma_attention_staging_pieces(three, narrow), 8);
}

// Past 65535 batches x heads (grid z's limit) an attention's batch folds over y as well: the
// fewest folds that fit, the blocks past the batch returning at once; the source of a smaller
// batch does not change. With v's head dim in two slabs, y holds the slabs x the folds.
TEST(AttentionSchedule, ABatchPast65535FoldsOverTheGridsYAndZ) {
  struct Case {
    int64_t batch, dv;
    int sm;
    ir::Precision precision;
    int64_t fold;
    uint32_t y, z;
  };
  for (Case c : {Case{70000, 8, 80, ir::Precision::high, 2, 2, 35000},
                 Case{65535, 8, 80, ir::Precision::high, 1, 1, 65535},
                 Case{200001, 8, 80, ir::Precision::highest, 4, 4, 50001},
                 Case{70000, 200, 80, ir::Precision::high, 2, 4, 35000},
                 Case{70000, 64, 90, ir::Precision::high, 2, 2, 35000}}) {
    std::string b = std::to_string(c.batch), dv = std::to_string(c.dv);
    bool half = c.sm == 90;  // sm_90a's wgmma kernel: 16-bit operands
    std::string ty = half ? "bf16" : "f32";
    ir::Graph g = parse("graph g {\n  input q: " + ty + "[" + b + ", 1, 64]\n  input k: " + ty +
                        "[" + b + ", 3, 64]\n  input v: " + ty + "[" + b + ", 3, " + dv +
                        "]\n  o = attention(q, k, v)\n  output o\n}\n");
    CompileOptions o = options(c.sm, c.precision);
    if (half) o.target = Target::cuda(90, "a");
    std::string what = "batch " + b + " dv " + dv + " sm_" + std::to_string(c.sm);
    auto request = check_request(g, o);
    ASSERT_TRUE(request.ok()) << what << ": " << request.error().message;
    auto lowered = lower(g, *request);
    ASSERT_TRUE(lowered.ok()) << what << ": " << lowered.error().message;
    ASSERT_EQ(lowered->plan.kernels.size(), 1u) << what;
    const KernelPlan& k = lowered->plan.kernels[0];
    EXPECT_EQ(k.attention_tile.wgmma, half) << what;
    EXPECT_EQ(k.batch_fold, c.fold) << what;
    EXPECT_EQ(k.launch.grid[1], c.y) << what;
    EXPECT_EQ(k.launch.grid[2], c.z) << what;
    EXPECT_EQ(k.launch.grid[1] / k.attention_tile.dv_slabs, c.fold) << what;
    std::string source = program_source(*lowered, Prelude::omit);
    bool returns = source.find("if (bz >= " + b + ") return;") != std::string::npos;
    EXPECT_EQ(returns, c.fold > 1) << what;
    EXPECT_EQ(source.find("gridDim.z") != std::string::npos, c.fold > 1) << what;
  }
}

const char* k_attention_graph =
    "graph g {\n  input q: bf16[2, 3, 300, 64]\n  input k: bf16[2, 3, 300, 64]\n"
    "  input v: bf16[2, 3, 300, 64]\n  o = attention(q, k, v, causal=true)\n  output o\n}\n";

TEST(AttentionSchedule, AChosenTileReachesTheKernelItsLaunchAndItsReport) {
  ir::Graph g = parse(k_attention_graph);
  auto request = check_request(g, options(90, ir::Precision::high));
  ASSERT_TRUE(request.ok());
  auto heuristic = lower(g, *request);
  ASSERT_TRUE(heuristic.ok()) << heuristic.error().message;
  const KernelPlan& model = heuristic->plan.kernels[0];
  EXPECT_EQ(model.tile_source, "model");
  const AttentionShape& shape = model.attention_shape;
  EXPECT_EQ(problem_signature(shape),
            "attention batch=6 sq=300 sk=300 d=64 dv=64 elem=2 path=bf16 causal=1 mask=0 k_group=1 "
            "v_group=1");
  AttentionTile tile = attention_tile(MatmulPath::bf16, 64, 64, 8, 32, 3);
  ChosenSchedule chosen({{problem_signature(shape), {tile, "tuned on X (132 SMs) 2026-11-27"}}});
  EXPECT_NE(chosen.key(), "");
  auto program = lower(g, *request, chosen);
  ASSERT_TRUE(program.ok()) << program.error().message;
  const KernelPlan& k = program->plan.kernels[0];
  EXPECT_TRUE(same_tile(k.attention_tile, tile));
  EXPECT_EQ(k.tile_source, "tuned on X (132 SMs) 2026-11-27");
  EXPECT_EQ(k.launch.grid[0], 3u) << "300 queries, 128 a block";
  EXPECT_EQ(k.launch.grid[2], 6u);
  EXPECT_EQ(k.launch.block[0], 256u);
  EXPECT_EQ(k.launch.dynamic_smem_bytes, static_cast<uint32_t>(tile.smem_bytes()));
  EXPECT_NE(program->kernel_sources[0].find("128 queries x 32 keys, 3 stage(s)"),
            std::string::npos);
  // The artifact names the tile and where it came from.
  CompileOptions o = options(90, ir::Precision::high);
  o.target.kind = Target::Kind::emulate;
  o.schedule = std::make_shared<ChosenSchedule>(chosen);
  auto artifact = compile_emulated(g, *check_request(g, o));
  ASSERT_TRUE(artifact.ok()) << artifact.error().message;
  EXPECT_EQ(artifact->kernels[0].tile, "128x32, 8 warps, 3 stages");
  EXPECT_EQ(artifact->kernels[0].schedule, "tuned on X (132 SMs) 2026-11-27");
}

TEST(AttentionSchedule, AnIllegalTileIsRefusedNamingTheKernelAndTheTilesItRuns) {
  ir::Graph g = parse(k_attention_graph);
  auto request = check_request(g, options(90, ir::Precision::high));
  ASSERT_TRUE(request.ok());
  auto heuristic = lower(g, *request);
  ASSERT_TRUE(heuristic.ok());
  std::string signature = problem_signature(heuristic->plan.kernels[0].attention_shape);
  // 128 keys a tile (no candidate); queries that do not match the warps (4 warps hold 64).
  AttentionTile wide = attention_tile(MatmulPath::bf16, 64, 64, 4, 128, 2);
  AttentionTile mismatched = attention_tile(MatmulPath::bf16, 64, 64, 4, 64, 2);
  mismatched.br = 128;
  for (const AttentionTile& bad : {wide, mismatched}) {
    auto program = lower(g, *request, ChosenSchedule({{signature, {bad, "tuning candidate"}}}));
    ASSERT_FALSE(program.ok()) << to_string(bad);
    const std::string& m = program.error().message;
    EXPECT_NE(m.find("'o'"), std::string::npos) << m;
    EXPECT_NE(m.find("schedule: tile " + to_string(bad) +
                     " is not one the bf16 attention kernel runs on sm_90 at head dim 64"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("64x64, 4 warps, 2 stages"), std::string::npos) << m;
  }
}

TEST(Schedule, SplitKRunsWhereTheGridIsUnderOneWaveAndKIsDeep) {
  // 37 x 70 x 1030 (tf32): four 64x64 blocks, 33 K tiles of 32. The model splits 4 ways (8 would
  // leave its last range empty: 7 ranges of 5 tiles pass 33).
  MatmulShape skinny = shape_of(37, 70, 1030, MatmulPath::tf32);
  skinny.batch = 2;
  MatmulTile t = choose_tile(skinny, 90);
  EXPECT_EQ(t.split_k, 4) << to_string(t);
  EXPECT_TRUE(check_tile(t, skinny, 90));
  EXPECT_TRUE(split_k_fits(1030, 32, 4));
  EXPECT_FALSE(split_k_fits(1030, 32, 8));
  EXPECT_FALSE(split_k_fits(1030, 32, 1));
  EXPECT_FALSE(split_k_fits(1030, 32, k_max_split_k + 1));
  // Past a quarter wave of the arch's SMs, or with fewer than 32 K tiles, no split.
  EXPECT_EQ(choose_tile(shape_of(4096, 4096, 4096, MatmulPath::bf16), 90).split_k, 1);
  EXPECT_EQ(choose_tile(shape_of(37, 70, 1000 - 64 * 16, MatmulPath::tf32), 90).split_k, 1);
  EXPECT_EQ(choose_tile(shape_of(37, 70, 1030, MatmulPath::ffma), 90).split_k, 1);
  // The model's split is among the tuner's candidates; every candidate split is legal, and only
  // grids under one wave get them.
  bool model_found = false;
  for (const MatmulTile& c : candidate_tiles(skinny, 90)) {
    model_found |= same_tile(c, t);
    EXPECT_TRUE(check_tile(c, skinny, 90)) << to_string(c);
  }
  EXPECT_TRUE(model_found);
  for (const MatmulTile& c : candidate_tiles(shape_of(4096, 4096, 4096, MatmulPath::bf16), 90))
    EXPECT_TRUE(c.split_k == 1 || c.bm * c.bn >= 128 * 256 || c.bm * c.bn == 128 * 128)
        << to_string(c);
  for (const MatmulTile& c : candidate_tiles(shape_of(37, 70, 1030, MatmulPath::ffma), 90))
    EXPECT_EQ(c.split_k, 1) << to_string(c);
  // A split that leaves a range empty, or on the FFMA path, is refused naming why.
  MatmulTile eight = t;
  eight.split_k = 8;
  Status refused = check_tile(eight, skinny, 90);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("cannot split K = 1030 (2 batches) into 8 ranges"),
            std::string::npos)
      << refused.error().message;
  // Rows copied element by element with 128 bytes of K a stage: the partials kernel spilled.
  MatmulShape ragged = skinny;
  ragged.a_vector = false;
  MatmulTile deep = choose_tile(ragged, 90);
  EXPECT_EQ(deep.bk * ragged.elem_bytes, 128);
  EXPECT_EQ(deep.split_k, 1) << to_string(deep);
  EXPECT_FALSE(split_k_legal(deep, ragged, 2));
  MatmulTile deep_split = deep;
  deep_split.split_k = 2;
  Status spills = check_tile(deep_split, ragged, 90);
  ASSERT_FALSE(spills);
  EXPECT_NE(spills.error().message.find("does not split K with 128 bytes of K a stage"),
            std::string::npos)
      << spills.error().message;
  MatmulShape ffma = shape_of(37, 70, 1030, MatmulPath::ffma);
  MatmulTile f = choose_tile(ffma, 90);
  f.split_k = 2;
  EXPECT_FALSE(check_tile(f, ffma, 90));
}

TEST(Schedule, ASplitKMatmulRunsAsPartialsAndASumKernel) {
  ir::Graph g = parse(
      "graph g {\n  input x: f32[2, 37, 1032]\n  input w: f32[1032, 72]\n  input b: f32[72]\n"
      "  y = add(matmul(x, w), b)\n  output y\n}\n");
  auto request = check_request(g, options(90, ir::Precision::high));
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto program = lower(g, *request);
  ASSERT_TRUE(program.ok()) << program.error().message;
  const auto& kernels = program->plan.kernels;
  ASSERT_EQ(kernels.size(), 2u);
  const KernelPlan& partials = kernels[0];
  const KernelPlan& sum = kernels[1];
  EXPECT_EQ(partials.name, "k0_matmul_tf32_64x64_split4");
  EXPECT_EQ(sum.name, "k0_matmul_tf32_64x64_split4_sum");
  EXPECT_EQ(partials.split, SplitRole::partials);
  EXPECT_EQ(sum.split, SplitRole::sum);
  // The partials: [4][2][37][72] fp32, a temporary of their own, the only thing the partials
  // kernel stores; it reads x and w only.
  ASSERT_EQ(program->plan.temporary_bytes.size(), 1u);
  EXPECT_EQ(program->plan.temporary_bytes[0], 4u * 2 * 37 * 72 * 4);
  EXPECT_EQ(program->plan.workspace_bytes, (4u * 2 * 37 * 72 * 4 + 255) / 256 * 256);
  ASSERT_EQ(partials.params.size(), 3u);
  EXPECT_EQ(partials.partial_param, 0);
  EXPECT_EQ(partials.params[0].buffer, (BufferRef{BufferRole::temporary, 0}));
  EXPECT_TRUE(partials.params[0].written);
  EXPECT_FALSE(partials.params[1].written);
  EXPECT_FALSE(partials.params[2].written);
  // 2 x 1 x (2 batches x 4 ranges) blocks.
  EXPECT_EQ(partials.launch.grid, (std::array<uint32_t, 3>{2, 1, 8}));
  // The sum stores y, reads the partials, then x, w and b; one thread per element of y.
  ASSERT_EQ(sum.params.size(), 5u);
  EXPECT_EQ(sum.partial_param, 1);
  EXPECT_EQ(sum.params[0].buffer, (BufferRef{BufferRole::output, 0}));
  EXPECT_TRUE(sum.params[0].written);
  EXPECT_EQ(sum.params[1].buffer, (BufferRef{BufferRole::temporary, 0}));
  EXPECT_FALSE(sum.params[1].written);
  EXPECT_EQ(sum.launch.grid[0] * sum.launch.block[0] >= 2u * 37 * 72, true);
  EXPECT_NE(program->kernel_sources[1].find("for (int s = 1; s < 4; ++s) sum += p1["),
            std::string::npos)
      << program->kernel_sources[1];
  EXPECT_NE(program->kernel_sources[0].find("float2"), std::string::npos)
      << "N even: the partials are stored in pairs";
}

TEST(Schedule, ASymbolicGraphRunsItsTilesUnsplit) {
  ir::Graph g = parse(
      "graph g {\n  dim B: 1..4\n  input x: f32[B, 37, 1030]\n  input w: f32[1030, 70]\n"
      "  y = matmul(x, w)\n  output y\n}\n");
  CompileOptions o = options(90, ir::Precision::high);
  o.bucket = {DimRange{3, 4}};
  auto request = check_request(g, o);
  ASSERT_TRUE(request.ok()) << request.error().message;
  MatmulTile split{64, 64, 32, 2, 2, 4, 4};
  auto program = lower(g, *request, FixedSchedule(split));
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_EQ(program->plan.kernels.size(), 1u);
  EXPECT_EQ(program->plan.kernels[0].tile.split_k, 1);
  EXPECT_EQ(program->plan.kernels[0].split, SplitRole::none);
}

// sm_90a: the model runs a 16-bit matmul the wgmma kernel computes on it where its 128x128 tiles
// number half the SMs or more (a 4096^2 product, a batched one, a 4-D one), keeps decode-shaped
// and small products on mma.sync (A read as [K, M] too), and plans every other matmul (rows of no
// 16-byte multiple, fp32, an operand with four batch dims: no tensor map holds it) as sm_90 does.
TEST(Schedule, OnSm90aTheModelTakesTheWgmmaKernelWhereItsTilesFillTheGpu) {
  ir::Graph g = parse(
      "graph g {\n  input x: bf16[4096, 4096]\n  input w: bf16[4096, 4096]\n"
      "  input t: bf16[16, 4096]\n  input xb: bf16[4, 520, 1024]\n  input wb: bf16[1024, 512]\n"
      "  input at: bf16[4096, 1024]\n  input odd: bf16[1024, 1030]\n  input wo: bf16[1030, 1024]\n"
      "  input x4: bf16[2, 4, 520, 128]\n  input w4: bf16[128, 1024]\n"
      "  input x6: bf16[2, 2, 2, 2, 520, 128]\n"
      "  input xf: f32[1024, 1024]\n  input wf: f32[1024, 1024]\n"
      "  big = matmul(x, w)\n  decode = matmul(t, w)\n  batched = matmul(xb, wb)\n"
      "  transposed = matmul(at, w, transpose_a=true)\n  ragged = matmul(odd, wo)\n"
      "  four = matmul(x4, w4)\n  six = matmul(x6, w4)\n  fp32 = matmul(xf, wf)\n"
      "  output big, decode, batched, transposed, ragged, four, six, fp32\n}\n");
  CompileOptions o;
  o.target = Target::cuda(90, "a");
  o.precision = ir::Precision::high;
  auto request = check_request(g, o);
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto program = lower(g, *request);
  ASSERT_TRUE(program.ok()) << program.error().message;
  std::map<std::string, bool> wgmma;
  for (const KernelPlan& k : program->plan.kernels) {
    std::string node = g.node(k.group.root).name;
    wgmma[node] = k.tile.wgmma;
    EXPECT_EQ(k.tile_source, "model") << node;
  }
  EXPECT_TRUE(wgmma.at("big"));
  EXPECT_FALSE(wgmma.at("decode")) << "16 x 4096: 32 tiles of 128x128";
  EXPECT_TRUE(wgmma.at("batched")) << "4 x 5 x 4 = 80 tiles";
  EXPECT_TRUE(wgmma.at("transposed")) << "A [K, M]: 8 x 32 tiles, A read M-major";
  EXPECT_FALSE(wgmma.at("ragged")) << "rows of 1030 bf16 are no 16-byte multiple";
  EXPECT_TRUE(wgmma.at("four")) << "2 x 4 x 5 x 8 = 320 tiles, A's map of rank 4";
  EXPECT_FALSE(wgmma.at("six")) << "A's four batch dims: a map of rank 6";
  EXPECT_FALSE(wgmma.at("fp32"));
  // sm_90 plans none of them on it.
  o.target = Target::cuda(90);
  auto plain = lower(g, o);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  for (const KernelPlan& k : plain->plan.kernels) EXPECT_FALSE(k.tile.wgmma) << k.name;
}

// A provider's wgmma tile for a matmul the kernel does not compute (a fixed tile for every
// matmul; a record of a problem with the same signature and another rank) gives way to the
// model's tile, and says so.
TEST(Schedule, AWgmmaTileForAMatmulTheKernelDoesNotComputeGivesWayToTheModels) {
  ir::Graph g = parse(
      "graph g {\n  input x: bf16[256, 512]\n  input w: bf16[512, 256]\n"
      "  input odd: bf16[256, 1030]\n  input wo: bf16[1030, 256]\n  y = matmul(x, w)\n"
      "  z = matmul(odd, wo)\n  output y, z\n}\n");
  CompileOptions o;
  o.target = Target::cuda(90, "a");
  auto request = check_request(g, o);
  ASSERT_TRUE(request.ok()) << request.error().message;
  MatmulShape any;
  any.elem_bytes = 2;  // a 16-bit product's tile (K 64 a stage)
  auto program = lower(g, *request, FixedSchedule(choose_wgmma_tile(any)));
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_EQ(program->plan.kernels.size(), 2u);
  EXPECT_TRUE(program->plan.kernels[0].tile.wgmma);
  EXPECT_EQ(program->plan.kernels[0].tile_source, "fixed");
  EXPECT_FALSE(program->plan.kernels[1].tile.wgmma);
  EXPECT_EQ(program->plan.kernels[1].tile_source, "model");
}

// sm_90a's persistent wgmma kernel walks its work tiles along x: 70000 batches of 128x128 plan on
// it there, one work tile each. Other matmul kernels' row tiles and batches fold over the grid's y
// and z past 65535 of either (CUDA's limit of each): on sm_90, the same 70000 batches run in a
// grid of 2 x 35000, and the tuner offers every candidate.
TEST(Schedule, MoreThan65535BatchesFoldOrRunPersistent) {
  ir::Graph g = parse(
      "graph g {\n  input x: bf16[70000, 128, 64]\n  input w: bf16[70000, 64, 128]\n"
      "  y = matmul(x, w)\n  output y\n}\n");
  CompileOptions o;
  o.target = Target::cuda(90, "a");
  auto program = lower(g, o);
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_EQ(program->plan.kernels.size(), 1u);
  const KernelPlan& k = program->plan.kernels[0];
  EXPECT_TRUE(k.tile.wgmma);
  EXPECT_TRUE(k.launch.persistent);
  EXPECT_EQ(k.launch.grid[0], 70000u);
  EXPECT_EQ(k.launch.grid[1], 1u);
  EXPECT_EQ(k.launch.grid[2], 1u);
  EXPECT_EQ(k.folded_rows, 0);
  EXPECT_TRUE(launch_fits(k.tile, k.shape));
  std::vector<MatmulTile> offered = candidate_tiles(k.shape, 90);
  EXPECT_FALSE(offered.empty());
  for (const MatmulTile& t : offered) EXPECT_TRUE(launch_fits(t, k.shape)) << to_string(t);
  // launch_fits: row tiles x batches x splits up to 2^31 - 1 (a tensor's 2^31 - 1 elements keep
  // a graph's matmuls within it)
  MatmulShape tall = k.shape;
  tall.batch = 1;
  tall.m = 65536 * 32;
  EXPECT_TRUE(launch_fits(MatmulTile{32, 64, 32, 1, 4, 3}, tall)) << "65536 row tiles fold";
  tall.batch = 32768;
  tall.m = 65535 * 32;
  EXPECT_TRUE(launch_fits(MatmulTile{32, 64, 32, 1, 4, 3}, tall)) << "2^31 - 32768 blocks";
  tall.m = 65536 * 32;
  EXPECT_FALSE(launch_fits(MatmulTile{32, 64, 32, 1, 4, 3}, tall)) << "2^31 blocks";
  MatmulShape many = k.shape;
  many.batch = k_max_wgmma_work_tiles + 1;
  many.m = many.n = 128;
  EXPECT_FALSE(launch_fits(k.tile, many)) << "2^30 + 1 work tiles";
  many.batch = k_max_wgmma_work_tiles;
  EXPECT_TRUE(launch_fits(k.tile, many));

  o.target = Target::cuda(90);
  auto plain = lower(g, o);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  ASSERT_EQ(plain->plan.kernels.size(), 1u);
  const KernelPlan& f = plain->plan.kernels[0];
  EXPECT_FALSE(f.tile.wgmma);
  int64_t rows = (128 + f.tile.bm - 1) / f.tile.bm, blocks = rows * 70000 * f.tile.split_k;
  int64_t y = (blocks + 65534) / 65535;
  EXPECT_EQ(f.folded_rows, rows);
  EXPECT_EQ(f.launch.grid[1], static_cast<uint32_t>(y));
  EXPECT_EQ(f.launch.grid[2], static_cast<uint32_t>((blocks + y - 1) / y));
  std::string source = program_source(*plain, Prelude::omit);
  EXPECT_NE(source.find("const unsigned yz = blockIdx.y + gridDim.y * blockIdx.z;"),
            std::string::npos);
  ASSERT_EQ(f.tile.split_k, 1) << "70000 blocks fill the GPU: no split";
  EXPECT_NE(source.find("if (yz / (unsigned)" + std::to_string(rows) +
                        " >= (unsigned)(70000)) return;"),
            std::string::npos);
  // 65535 batches of one row tile: not folded, the source as before the fold existed
  ir::Graph fits = parse(
      "graph g {\n  input x: f32[65535, 16, 16]\n  y = matmul(x, x)\n  output y\n}\n");
  auto unfolded = lower(fits, o);
  ASSERT_TRUE(unfolded.ok()) << unfolded.error().message;
  EXPECT_EQ(unfolded->plan.kernels[0].folded_rows, 0);
  EXPECT_EQ(unfolded->plan.kernels[0].launch.grid[2], 65535u);
  EXPECT_EQ(program_source(*unfolded, Prelude::omit).find("bzs"), std::string::npos);
}

}  // namespace
}  // namespace kiln::compiler
