// plan_kernels() and the tile heuristic: buffers, parameter order, tiles, stages, launch shapes.
#include "compiler/plan.h"

#include "compiler/compiler.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <tuple>

namespace kiln::compiler {
namespace {

using test::example;
using test::options;
using test::parse;

MatmulShape square(int64_t n, MatmulPath path, int elem_bytes = 4) {
  MatmulShape s;
  s.m = s.n = s.k = n;
  s.lda = s.ldb = n;
  s.path = path;
  s.elem_bytes = elem_bytes;
  return s;
}

TEST(Tile, LargeMatmulsGet128x128TilesOf64x64WarpTilesAndAPipeline) {
  // What the H200's tuning records chose over 128x256 (compiler/KERNELS.md, "Tile table").
  for (auto [path, bytes, sm] : {std::tuple{MatmulPath::tf32, 4, 80}, {MatmulPath::bf16, 2, 90},
                                 {MatmulPath::f16, 2, 86}, {MatmulPath::bf16_of_f32, 4, 120}}) {
    MatmulTile t = choose_tile(square(4096, path, bytes), sm);
    EXPECT_EQ(t.bm, 128) << to_string(path);
    EXPECT_EQ(t.bn, 128) << to_string(path);
    EXPECT_EQ(t.bm / t.warps_m, 64) << to_string(path);
    EXPECT_EQ(t.bn / t.warps_n, 64) << to_string(path);
    EXPECT_EQ(t.threads(), 128) << to_string(path);
    EXPECT_EQ(t.bk * bytes, 64) << to_string(path);
    EXPECT_EQ(t.stages, 4) << to_string(path);
  }
  // A tall product gets the same tile.
  MatmulShape tall = square(4096, MatmulPath::bf16, 2);
  tall.n = 2048;
  MatmulTile u = choose_tile(tall, 90);
  EXPECT_EQ(u.bm, 128);
  EXPECT_EQ(u.bn, 128);
  // tf32x3 keeps 64x32 warp tiles: its split operands need the registers.
  MatmulTile x3 = choose_tile(square(4096, MatmulPath::tf32x3), 90);
  EXPECT_EQ(x3.bm, 128);
  EXPECT_EQ(x3.bn, 128);
  EXPECT_EQ(x3.bn / x3.warps_n, 32);
  // A ragged operand (copied element by element) keeps the 64x32 warp tiles.
  MatmulShape ragged = square(8192, MatmulPath::bf16, 2);
  ragged.b_vector = false;
  EXPECT_EQ(choose_tile(ragged, 90).warps_n, 4);
  // Fewer 128x128 tiles than SMs (1024^2 on sm_90: 64): 64x64 tiles.
  EXPECT_EQ(choose_tile(square(1024, MatmulPath::bf16, 2), 90).bm, 64);
  EXPECT_EQ(choose_tile(square(2048, MatmulPath::bf16, 2), 90).bn, 128);
}

TEST(Tile, SmallerGridsTake128BytesOfKWhereCpAsyncRuns) {
  // 64x64 and 32x64 blocks: 128 bytes of K per stage.
  EXPECT_EQ(choose_tile(square(256, MatmulPath::bf16, 2), 90).bk, 64);
  EXPECT_EQ(choose_tile(square(256, MatmulPath::tf32), 90).bk, 32);
  EXPECT_EQ(choose_tile(square(1000, MatmulPath::bf16_of_f32), 80).bk, 32);
  MatmulShape skinny = square(4096, MatmulPath::tf32);
  skinny.m = 16;
  EXPECT_EQ(choose_tile(skinny, 90).bk, 32);
  EXPECT_EQ(choose_tile(skinny, 90).bm, 32);
  // tf32 and tf32x3 past one wave of 64x64 blocks with M > 32 keep 64 bytes (1000^3's records).
  EXPECT_EQ(choose_tile(square(1000, MatmulPath::tf32), 90).bk, 16);
  EXPECT_EQ(choose_tile(square(1000, MatmulPath::tf32x3), 90).bk, 16);
  // No cp.async (sm_75): 64 bytes in one synchronous stage.
  MatmulTile turing = choose_tile(square(256, MatmulPath::f16, 2), 75);
  EXPECT_EQ(turing.bk, 32);
  EXPECT_EQ(turing.stages, 1);
  // Large grids keep 64 bytes (the 128x128 tiles above).
  EXPECT_EQ(choose_tile(square(8192, MatmulPath::bf16, 2), 90).bk, 32);
}

TEST(Tile, StagesFillTheArchsOptInSharedMemory) {
  // 128x128x32 bf16, 16 KiB a stage: 4 stages (64 KiB) on every arch with cp.async.
  MatmulShape s = square(8192, MatmulPath::bf16, 2);
  for (int sm : {80, 86, 90, 120}) {
    MatmulTile t = choose_tile(s, sm);
    EXPECT_EQ(t.stages, 4) << sm;
    EXPECT_EQ(t.stages * smem_layout(t, s).stage_bytes(), 64 * 1024) << sm;
  }
  // A short K: as many stages as K tiles + 1.
  MatmulShape short_k = square(8192, MatmulPath::bf16, 2);
  short_k.k = 64;
  EXPECT_EQ(choose_tile(short_k, 90).stages, 3);
}

TEST(Tile, SmallMatmulsGetSmallTiles) {
  EXPECT_EQ(choose_tile(square(256, MatmulPath::tf32), 90).bm, 64);
  MatmulShape skinny = square(1024, MatmulPath::tf32);
  skinny.m = 16;
  EXPECT_EQ(choose_tile(skinny, 90).bm, 32);
}

TEST(Tile, TuringLoadsSynchronouslyInOneStage) {
  EXPECT_EQ(choose_tile(square(4096, MatmulPath::f16, 2), 75).stages, 1);
  EXPECT_EQ(choose_tile(square(4096, MatmulPath::ffma), 75).stages, 1);
}

TEST(Tile, SharedMemoryStaysWithinTheOptInMaximumOfEveryArch) {
  for (int sm : known_archs()) {
    for (MatmulPath path : {MatmulPath::ffma, MatmulPath::tf32, MatmulPath::tf32x3,
                            MatmulPath::bf16_of_f32, MatmulPath::f16, MatmulPath::bf16}) {
      for (bool ka : {true, false}) {
        MatmulShape s =
            square(4096, path, path == MatmulPath::f16 || path == MatmulPath::bf16 ? 2 : 4);
        s.a_k_contiguous = ka;
        MatmulTile t = choose_tile(s, sm);
        EXPECT_LE(t.stages * smem_layout(t, s).stage_bytes(), smem_limit(sm));
      }
    }
  }
}

TEST(Tile, ShortKUsesFewerStages) {
  MatmulShape s = square(4096, MatmulPath::tf32);
  s.k = 16;
  EXPECT_EQ(choose_tile(s, 90).stages, 2);
}

// attention.kg with its second matmul at another precision: not fused, three kernels whose
// scores and probabilities live in temporaries.
ir::Graph unfused_attention() {
  return parse(R"(graph attention {
    input q: f32[16, 128, 64]
    input k: f32[16, 128, 64]
    input v: f32[16, 128, 64]
    scores = mul(matmul(q, k, transpose_b=true), 0.125)
    p = softmax(scores, axis=-1)
    o = matmul(p, v, precision=highest)
    output o
  })");
}

TEST(Plan, TemporariesAndOutputsAreBoundInOrder) {
  ir::Graph g = unfused_attention();
  auto program = lower(g, options(90, ir::Precision::high));
  ASSERT_TRUE(program.ok()) << program.error().message;
  const ProgramPlan& plan = program->plan;
  ASSERT_EQ(plan.kernels.size(), 3u);
  ASSERT_EQ(plan.temporary_bytes.size(), 2u);
  EXPECT_EQ(plan.temporary_bytes[0], 16u * 128 * 128 * 4);
  EXPECT_EQ(plan.workspace_bytes, 2u * 16 * 128 * 128 * 4);
  // k0 writes temporary 0 and reads q, k.
  const auto& p0 = plan.kernels[0].params;
  ASSERT_EQ(p0.size(), 3u);
  EXPECT_EQ(p0[0].buffer, (BufferRef{BufferRole::temporary, 0}));
  EXPECT_TRUE(p0[0].written);
  EXPECT_EQ(p0[1].buffer, (BufferRef{BufferRole::input, 0}));
  EXPECT_EQ(p0[2].buffer, (BufferRef{BufferRole::input, 1}));
  // k2 writes output 0 from temporary 1 and v.
  const auto& p2 = plan.kernels[2].params;
  EXPECT_EQ(p2[0].buffer, (BufferRef{BufferRole::output, 0}));
  EXPECT_EQ(p2[1].buffer, (BufferRef{BufferRole::temporary, 1}));
  EXPECT_EQ(p2[2].buffer, (BufferRef{BufferRole::input, 2}));
}

TEST(Plan, BatchedMatmulLaunchesOneGridLayerPerBatch) {
  auto program = lower(unfused_attention(), options(80, ir::Precision::high));
  ASSERT_TRUE(program.ok());
  const KernelPlan& k = program->plan.kernels[0];
  EXPECT_EQ(k.launch.grid[2], 16u);
  EXPECT_EQ(k.launch.grid[0], 128u / k.tile.bn);
  EXPECT_EQ(k.launch.block[0], static_cast<uint32_t>(k.tile.threads()));
  EXPECT_FALSE(k.shape.a_batch_stride == 0);
  EXPECT_TRUE(k.shape.b_k_contiguous);  // k read transposed through strides
}

TEST(Plan, TwoDimensionalOperandIsBroadcastOverTheBatch) {
  auto program = lower(parse(R"(graph g {
    input a: f32[4, 32, 64]
    input w: f32[64, 48]
    y = matmul(a, w)
    output y
  })"),
                       options(90, ir::Precision::high));
  ASSERT_TRUE(program.ok());
  const MatmulShape& s = program->plan.kernels[0].shape;
  EXPECT_EQ(s.a_batch_stride, 32 * 64);
  EXPECT_EQ(s.b_batch_stride, 0);
}

TEST(Plan, DuplicateReadsShareOneParameter) {
  auto program = lower(parse(R"(graph g {
    input a: f32[32, 32]
    y = matmul(a, a)
    output y
  })"),
                       options(90, ir::Precision::high));
  ASSERT_TRUE(program.ok());
  EXPECT_EQ(program->plan.kernels[0].params.size(), 2u);
}

TEST(Plan, SoftmaxRunsOneWarpPerRow) {
  auto program = lower(example("mixed_head"), options(90, ir::Precision::high));
  ASSERT_TRUE(program.ok());
  const KernelPlan& k = program->plan.kernels[1];
  EXPECT_EQ(k.group.kind, GroupKind::softmax);
  EXPECT_EQ(k.launch.block[0], 128u);
  EXPECT_EQ(k.launch.grid[0], 8u);  // 32 rows, 4 per block
}

TEST(Plan, TheIssuesFourThousandFiveHundredInputSumLowersIntoKernelsThatFitTheParameterSpace) {
  ir::Graph g = parse(test::wide_sum(4500, "f32[8]"));
  auto program = lower(g, options(90, ir::Precision::high));
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_GT(program->plan.kernels.size(), 1u);
  for (const KernelPlan& k : program->plan.kernels) {
    EXPECT_LE(param_space_bytes(k.params), k_max_param_bytes) << k.name;
  }
}

TEST(Plan, AKernelBeyondTheParameterSpaceIsRefusedWithItsSizeAndTheLimit) {
  // One group reading all 4,500 inputs (fuse() itself never forms it): 4,501 pointers.
  ir::Graph g = parse(test::wide_sum(4500, "f32[8]"));
  CompileOptions o = options(90, ir::Precision::high);
  auto precision = resolve_precision(g, o);
  ASSERT_TRUE(precision.ok());
  Sizes sizes(g);
  auto plan = plan_kernels(g, fuse(g, 100000), *precision, sizes);
  ASSERT_TRUE(plan.ok()) << plan.error().message;  // the target-free plan has no such limit
  Status scheduled = schedule_cuda(g, *plan, o.target, sizes);
  ASSERT_FALSE(scheduled);
  const std::string& message = scheduled.error().message;
  EXPECT_NE(message.find("kernel 'k0_elementwise'"), std::string::npos) << message;
  EXPECT_NE(message.find("4501 buffers"), std::string::npos) << message;
  EXPECT_NE(message.find("36008 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("32764 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("split the graph"), std::string::npos) << message;
}

}  // namespace
}  // namespace kiln::compiler
