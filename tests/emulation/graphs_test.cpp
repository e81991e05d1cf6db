// Every op pattern of examples/graphs, at odd and aligned sizes, in each precision mode and on
// each arch family, run as generated kernels under emulation and checked against fp64, each under
// the kind, the adversarial and two seeded schedules; races the kind schedule hides, caught.
#include "compiler/fusion.h"
#include "compiler/schedule.h"
#include "compiler/tile.h"
#include "emulation/check.h"
#include "ir/parse.h"
#include "reference/execute.h"
#include "reference/tensor.h"
#include "text_edit.h"
#include "far_rows.h"
#include "reference/audit.h"
#include "reference/metrics.h"
#include "typed_edges.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <ostream>
#include <string>

namespace kiln::emulation {
namespace {

struct Case {
  const char* graph;  // file in tests/emulation/graphs
  int sm;
  ir::Precision precision;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.graph << " on sm_" << c.sm << " in " << ir::to_string(c.precision);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.graph) + "_sm" + std::to_string(info.param.sm) + "_" +
         std::string(ir::to_string(info.param.precision));
}

ir::Graph load(const std::string& name) {
  auto graph = ir::parse_graph_file(std::string(KILN_EMU_TEST_GRAPHS) + "/" + name + ".kg");
  EXPECT_TRUE(graph.ok()) << (graph.ok() ? "" : graph.error().message);
  return std::move(*graph);
}

Expected<CheckReport> emulate(const ir::Graph& graph, int sm, ir::Precision precision,
                              Layout layout = Layout::correct) {
  compiler::CompileOptions options;
  options.target.sm = sm;
  options.precision = precision;
  ShimOptions shim;
  shim.layout = layout;
  auto program = build_program(graph, options, shim);
  if (!program) return program.error();
  return check_program(graph, *program, 1);
}

// The schedules every emulated graph runs under: a correct kernel passes each.
const Schedule k_schedules[] = {Schedule{}, Schedule::adversarial(), Schedule::seeded_by(1),
                                Schedule::seeded_by(2)};

class EmulatedGraph : public ::testing::TestWithParam<Case> {};

TEST_P(EmulatedGraph, MatchesTheFp64ReferenceWithinTolerance) {
  const Case& c = GetParam();
  ir::Graph graph = load(c.graph);
  compiler::CompileOptions options;
  options.target.sm = c.sm;
  options.precision = c.precision;
  auto program = build_program(graph, options);
  ASSERT_TRUE(program.ok()) << program.error().message;
  for (const Schedule& schedule : k_schedules) {
    SCOPED_TRACE("schedule " + to_string(schedule));
    auto report = check_program(graph, *program, 1, schedule);
    ASSERT_TRUE(report.ok()) << report.error().message;
    EXPECT_TRUE(report->ok);
    for (size_t i = 0; i < report->outputs.size(); ++i) {
      const OutputCheck& o = report->outputs[i];
      EXPECT_LE(o.rel_l2, o.tolerance) << o.name << " max_abs " << o.max_abs;
      // Exact (0) only for an integer or bool output computed without float values.
      if (ir::is_float(graph.node(graph.outputs()[i]).type.dtype)) {
        EXPECT_GT(o.tolerance, 0.0);
      }
    }
  }
}

constexpr ir::Precision k_highest = ir::Precision::highest;
constexpr ir::Precision k_high = ir::Precision::high;
constexpr ir::Precision k_tf32x3 = ir::Precision::tf32x3;
constexpr ir::Precision k_medium = ir::Precision::medium;

// Graphs with f32 matmuls: the three fp32 modes at both sizes, medium at odd sizes.
INSTANTIATE_TEST_SUITE_P(
    F32Modes, EmulatedGraph,
    ::testing::Values(
        Case{"attention_odd", 90, k_highest}, Case{"attention_odd", 90, k_high},
        Case{"attention_odd", 90, k_tf32x3}, Case{"attention_odd", 90, k_medium},
        Case{"attention_aligned", 90, k_highest}, Case{"attention_aligned", 90, k_high},
        Case{"attention_aligned", 90, k_tf32x3},
        Case{"mlp_odd", 90, k_highest}, Case{"mlp_odd", 90, k_high},
        Case{"mlp_odd", 90, k_tf32x3}, Case{"mlp_odd", 90, k_medium},
        Case{"mlp_aligned", 90, k_highest}, Case{"mlp_aligned", 90, k_high},
        Case{"mlp_aligned", 90, k_tf32x3},
        Case{"mixed_head_odd", 90, k_highest}, Case{"mixed_head_odd", 90, k_high},
        Case{"mixed_head_odd", 90, k_tf32x3}, Case{"mixed_head_odd", 90, k_medium},
        Case{"mixed_head_aligned", 90, k_highest}, Case{"mixed_head_aligned", 90, k_high},
        Case{"mixed_head_aligned", 90, k_tf32x3},
        Case{"transposes_odd", 90, k_highest}, Case{"transposes_odd", 90, k_high},
        Case{"transposes_odd", 90, k_tf32x3}, Case{"transposes_odd", 90, k_medium},
        Case{"transposes_aligned", 90, k_highest}, Case{"transposes_aligned", 90, k_high},
        Case{"transposes_aligned", 90, k_tf32x3},
        Case{"rotary_odd", 75, k_highest}, Case{"rotary_odd", 90, k_highest},
        Case{"rotary_odd", 90, k_high}, Case{"rotary_odd", 90, k_tf32x3},
        Case{"rotary_odd", 90, k_medium}, Case{"activations_odd", 80, k_highest},
        Case{"activations_odd", 90, k_high}, Case{"activations_odd", 90, k_medium},
        Case{"masks_odd", 75, k_highest}, Case{"masks_odd", 90, k_high},
        Case{"masks_odd", 90, k_tf32x3}, Case{"masks_odd", 90, k_medium},
        Case{"rotary_positions_odd", 80, k_highest}, Case{"rotary_positions_odd", 90, k_high},
        Case{"embedding_odd", 75, k_highest}, Case{"embedding_odd", 90, k_high},
        Case{"embedding_odd", 90, k_medium}, Case{"expand_odd", 80, k_highest},
        Case{"rank6_odd", 90, k_highest}, Case{"rank6_odd", 80, k_high},
        Case{"scalars_odd", 90, k_high}, Case{"scalars_odd", 75, k_highest},
        Case{"batch6_odd", 90, k_highest}, Case{"batch6_odd", 90, k_high},
        Case{"batch6_odd", 90, k_tf32x3}, Case{"batch6_odd", 90, k_medium},
        Case{"batch6_odd", 80, k_high}, Case{"batch6_odd", 75, k_highest}),
    case_name);

// f16/bf16 graphs: the mode does not touch their matmuls (half_bias_odd's give f32).
INSTANTIATE_TEST_SUITE_P(
    HalfGraphs, EmulatedGraph,
    ::testing::Values(Case{"gated_mlp_odd", 90, k_high}, Case{"gated_mlp_aligned", 90, k_high},
                      Case{"half_epilogue_odd", 90, k_high},
                      Case{"half_epilogue_aligned", 90, k_high},
                      Case{"half_bias_odd", 90, k_high}, Case{"half_bias_odd", 80, k_high}),
    case_name);

// sm_80 (cp.async, tf32 and bf16 mma) and sm_75 (synchronous copies, m16n8k8 f16, fp32 ffma).
INSTANTIATE_TEST_SUITE_P(
    OtherArchs, EmulatedGraph,
    ::testing::Values(Case{"mlp_odd", 80, k_high}, Case{"attention_odd", 80, k_tf32x3},
                      Case{"mlp_odd", 75, k_highest}, Case{"attention_odd", 75, k_highest},
                      Case{"mixed_head_odd", 75, k_highest},
                      Case{"transposes_odd", 75, k_highest},
                      Case{"half_epilogue_odd", 75, k_highest}),
    case_name);

// The transformer ops: norms, reductions and running sums (no matmul, so one mode each arch
// family), layout ops with 4-D matmuls in every mode, rolls.
INSTANTIATE_TEST_SUITE_P(
    TransformerOps, EmulatedGraph,
    ::testing::Values(Case{"norms_odd", 90, k_high}, Case{"norms_odd", 75, k_highest},
                      Case{"reductions_odd", 90, k_high}, Case{"reductions_odd", 75, k_highest},
                      Case{"layout_odd", 90, k_highest}, Case{"layout_odd", 90, k_high},
                      Case{"layout_odd", 90, k_tf32x3}, Case{"layout_odd", 90, k_medium},
                      Case{"layout_odd", 80, k_high}, Case{"layout_odd", 75, k_highest},
                      Case{"scans_odd", 90, k_highest}, Case{"scans_odd", 90, k_medium},
                      Case{"scans_odd", 80, k_high}, Case{"scans_odd", 75, k_highest},
                      Case{"rolls_odd", 90, k_highest}, Case{"rolls_odd", 90, k_tf32x3},
                      Case{"rolls_odd", 80, k_high}, Case{"rolls_odd", 75, k_highest}),
    case_name);

// Split-K (the model splits both graphs' grids of a few blocks 4 ways): every tensor-core path,
// an uneven and ragged last range, batches, a fused epilogue in the sum kernel, partials stored
// in pairs (even N) and one at a time (odd N).
INSTANTIATE_TEST_SUITE_P(
    SplitK, EmulatedGraph,
    ::testing::Values(Case{"splitk_odd", 90, k_high}, Case{"splitk_odd", 90, k_tf32x3},
                      Case{"splitk_odd", 90, k_medium}, Case{"splitk_odd", 80, k_high},
                      Case{"splitk_bf16_odd", 90, k_high}, Case{"splitk_bf16_odd", 80, k_high}),
    case_name);

// K tiles well past the pipeline's stages (19 tiles of 16 for f32, 11 of 32 for 16-bit, against
// 4 stages on sm_80+ and 1 on sm_75), so every stage is refilled while others are read; odd M,
// N and K edges and both operand orientations, on every MMA path and FFMA.
INSTANTIATE_TEST_SUITE_P(
    StageReuse, EmulatedGraph,
    ::testing::Values(
        Case{"reuse_odd", 80, k_highest}, Case{"reuse_odd", 80, k_high},
        Case{"reuse_odd", 80, k_tf32x3}, Case{"reuse_odd", 80, k_medium},
        Case{"reuse_odd", 86, k_highest}, Case{"reuse_odd", 86, k_high},
        Case{"reuse_odd", 86, k_tf32x3}, Case{"reuse_odd", 86, k_medium},
        Case{"reuse_odd", 90, k_highest}, Case{"reuse_odd", 90, k_high},
        Case{"reuse_odd", 90, k_tf32x3}, Case{"reuse_odd", 90, k_medium},
        Case{"reuse_odd", 75, k_highest}, Case{"reuse_f16_odd", 75, k_high},
        Case{"reuse_f16_odd", 80, k_high}, Case{"reuse_f16_odd", 86, k_high},
        Case{"reuse_f16_odd", 90, k_high}, Case{"reuse_bf16_odd", 80, k_high},
        Case{"reuse_bf16_odd", 86, k_high}, Case{"reuse_bf16_odd", 90, k_high}),
    case_name);

TEST(EmulatedCoverage, StageReuseGraphsRunMoreKTilesThanStages) {
  for (const char* name : {"reuse_odd", "reuse_f16_odd", "reuse_bf16_odd"}) {
    ir::Graph graph = load(name);
    for (int sm : {75, 80, 86, 90}) {
      compiler::CompileOptions options;
      options.target.sm = sm;
      options.precision = sm >= 80 ? k_high : k_highest;
      auto lowered = compiler::lower(graph, options);
      if (!lowered && std::string(name) == "reuse_bf16_odd" && sm == 75) continue;
      ASSERT_TRUE(lowered.ok()) << name << " sm_" << sm << ": " << lowered.error().message;
      ASSERT_EQ(lowered->plan.kernels.size(), 2u);
      for (const compiler::KernelPlan& k : lowered->plan.kernels) {
        int64_t k_tiles = (k.extents.k.hi + k.tile.bk - 1) / k.tile.bk;
        EXPECT_GT(k_tiles, k.tile.stages) << name << " sm_" << sm << " " << k.name;
        EXPECT_NE(k.extents.k.hi % k.tile.bk, 0) << "an odd K edge";
      }
    }
  }
}

// A sum over more inputs than one kernel may read is cut into several kernels, each after the
// first reading its predecessor's partial sum from a temporary. Every third input is broadcast.
TEST(EmulatedWideSum, KernelsCutAtTheReadLimitMatchTheReference) {
  constexpr int k_inputs = 600;
  std::string text = "graph wide {\n";
  for (int i = 0; i < k_inputs; ++i)
    text += "  input x" + std::to_string(i) + (i % 3 == 2 ? ": f32[37]\n" : ": f32[3, 37]\n");
  std::string sum = "x0";
  for (int i = 1; i < k_inputs; ++i) {
    std::string x = "x" + std::to_string(i);
    std::string term = i % 50 == 0 ? "mul(" + x + ", 0.5)" : x;
    text += "  s" + std::to_string(i) + " = add(" + sum + ", " + term + ")\n";
    sum = "s" + std::to_string(i);
  }
  text += "  output " + sum + "\n}\n";
  auto graph = ir::parse_graph(text, "wide.kg");
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  compiler::CompileOptions options;
  options.precision = k_highest;
  auto program = build_program(*graph, options);
  ASSERT_TRUE(program.ok()) << program.error().message;
  EXPECT_EQ(program->lowered().plan.kernels.size(), 3u);
  auto report = check_program(*graph, *program, 1);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_TRUE(report->ok);
  ASSERT_EQ(report->outputs.size(), 1u);
  EXPECT_LE(report->outputs[0].rel_l2, report->outputs[0].tolerance);
}

// The check can fail: the same kernels against a shim whose mma fragment layout swaps two A
// registers must miss the tolerance.
TEST(EmulatedLayoutCheck, ABrokenTf32FragmentLayoutIsCaught) {
  ir::Graph graph = load("mlp_odd");
  auto good = emulate(graph, 90, k_high);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_TRUE(good->ok);
  auto broken = emulate(graph, 90, k_high, Layout::broken);
  ASSERT_TRUE(broken.ok()) << broken.error().message;
  EXPECT_FALSE(broken->ok);
  EXPECT_GT(broken->outputs[0].rel_l2, 100 * broken->outputs[0].tolerance);
}

TEST(EmulatedLayoutCheck, ABrokenF16FragmentLayoutIsCaught) {
  ir::Graph graph = load("half_epilogue_aligned");
  auto broken = emulate(graph, 90, k_high, Layout::broken);
  ASSERT_TRUE(broken.ok()) << broken.error().message;
  EXPECT_FALSE(broken->ok);
}

// Generated text with one synchronisation removed or moved: the emulation must notice (under
// `schedule`).
Expected<CheckReport> emulate_edited(const std::string& graph_name, int sm, ir::Precision precision,
                                     const std::vector<testing::TextEdit>& edits,
                                     const Schedule& schedule = {}) {
  ir::Graph graph = load(graph_name);
  compiler::CompileOptions options;
  options.target.sm = sm;
  options.precision = precision;
  auto lowered = compiler::lower(graph, options);
  if (!lowered) return lowered.error();
  auto source =
      testing::apply_edits(compiler::program_source(*lowered, compiler::Prelude::omit), edits);
  if (!source) return source.error();
  auto program = build_program_from_source(graph, std::move(*lowered), std::move(*source));
  if (!program) return program.error();
  return check_program(graph, *program, 1, schedule);
}

TEST(EmulatedRaces, AMissingTrailingBarrierIsCaught) {
  // sm_75: single-stage k loop "load; __syncthreads(); compute; __syncthreads();": without the
  // second barrier the next tile's loads overwrite data other warps still read.
  auto report = emulate_edited("mlp_odd", 75, k_highest, {{"    __syncthreads();\n  }", "  }"}});
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_FALSE(report->ok);
}

TEST(EmulatedRaces, AMissingCpAsyncWaitIsCaught) {
  auto report =
      emulate_edited("mlp_odd", 90, k_high, {{"kiln_cp_async_wait<", "if (0) kiln_cp_async_wait<"}});
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_FALSE(report->ok);
}

// `lowered` (of `graph`) within tolerance of fp64 under every schedule.
void expect_matches_under_every_schedule(const ir::Graph& graph, compiler::LoweredProgram lowered,
                                         const std::string& what) {
  auto program = build_program(graph, std::move(lowered));
  ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
  for (const Schedule& schedule : k_schedules) {
    auto report = check_program(graph, *program, 1, schedule);
    ASSERT_TRUE(report.ok()) << what << ": " << report.error().message;
    for (const OutputCheck& o : report->outputs)
      EXPECT_TRUE(o.ok) << what << " " << o.name << " rel_l2 " << o.rel_l2;
  }
}

// Fragments double-buffered in registers at two and at four k steps a tile (tf32: 16 and 32
// fp32 of K a stage), 2 to 4 stages, under every schedule: a stage refilled while warps still
// read it, or read before its copies land, misses. One k step a tile (medium's 16 fp32 of K)
// keeps one fragment set: the set the next tile starts in would alternate with the tile.
TEST(EmulatedDoubleBuffer, TwoAndFourKStepsATileAtEveryStageCountMatchTheReference) {
  ir::Graph graph = load("reuse_aligned");
  int ran = 0;
  for (ir::Precision precision : {k_high, k_medium}) {
    compiler::CompileOptions options;
    options.target.sm = 80;
    options.precision = precision;
    auto request = compiler::check_request(graph, options);
    ASSERT_TRUE(request.ok()) << request.error().message;
    for (int bk : {16, 32}) {
      for (int stages : {2, 3, 4}) {
        compiler::MatmulTile tile{64, 64, bk, 2, 2, stages};
        std::string what = std::string(ir::to_string(precision)) + " " + compiler::to_string(tile);
        auto lowered = compiler::lower(graph, *request, compiler::FixedSchedule(tile));
        ASSERT_TRUE(lowered.ok()) << what << ": " << lowered.error().message;
        bool one_step = precision == k_medium && bk == 16;
        EXPECT_EQ(compiler::double_buffers_fragments(tile, lowered->plan.kernels[0].shape),
                  !one_step)
            << what;
        EXPECT_EQ(lowered->kernel_sources[0].find("unsigned af0[") != std::string::npos,
                  !one_step)
            << what;
        expect_matches_under_every_schedule(graph, std::move(*lowered), what);
        ++ran;
      }
    }
  }
  EXPECT_EQ(ran, 12);
}

// Split-K on rows copied element by element (odd K, M and N: 16-bit elements one by one, fp32
// ones by 4-byte cp.async), 64 bytes of K a stage (the split the tuner may offer there; 128
// would spill), under every schedule.
TEST(EmulatedSplitK, RowsCopiedElementByElementMatchTheReference) {
  struct Run {
    const char* graph;
    ir::Precision precision;
    compiler::MatmulTile tile;
  };
  const Run runs[] = {{"reuse_bf16_odd", k_high, {64, 64, 32, 2, 2, 3, 2}},
                      {"reuse_odd", k_high, {64, 64, 16, 2, 2, 3, 4}},
                      {"reuse_odd", k_medium, {32, 64, 16, 1, 4, 3, 2}}};
  for (const Run& run : runs) {
    ir::Graph graph = load(run.graph);
    compiler::CompileOptions options;
    options.target.sm = 80;
    options.precision = run.precision;
    auto request = compiler::check_request(graph, options);
    ASSERT_TRUE(request.ok()) << request.error().message;
    std::string what = std::string(run.graph) + " " + compiler::to_string(run.tile);
    auto lowered = compiler::lower(graph, *request, compiler::FixedSchedule(run.tile));
    ASSERT_TRUE(lowered.ok()) << what << ": " << lowered.error().message;
    ASSERT_EQ(lowered->plan.kernels.size(), 4u) << what << ": two matmuls, each split";
    EXPECT_FALSE(lowered->plan.kernels[0].shape.a_vector && lowered->plan.kernels[0].shape.b_vector)
        << what;
    expect_matches_under_every_schedule(graph, std::move(*lowered), what);
  }
}

// Block orders other than the model's groups of 8 row tiles (the tuner's candidates): row-major,
// and groups of 16 over 18 row tiles (a last group of 2), tf32 and bf16, under every schedule. A
// block computing the wrong tile, or two the same one, leaves outputs unwritten or wrong.
TEST(EmulatedBlockOrder, RowMajorAndGroupsOf16MatchTheReference) {
  int ran = 0;
  for (const char* dtype : {"f32", "bf16"}) {
    std::string t = dtype;
    auto graph = ir::parse_graph("graph order {\n  input a: " + t + "[1100, 64]\n  input b: " + t +
                                     "[64, 200]\n  c = matmul(a, b)\n  output c\n}\n",
                                 "order.kg");
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    compiler::CompileOptions options;
    options.target.sm = 90;
    options.precision = k_high;
    auto request = compiler::check_request(*graph, options);
    ASSERT_TRUE(request.ok()) << request.error().message;
    for (int group : {1, 16}) {
      compiler::MatmulTile tile{64, 64, t == "f32" ? 16 : 32, 2, 2, 3, 1, group};
      std::string what = t + " " + compiler::to_string(tile);
      auto lowered = compiler::lower(*graph, *request, compiler::FixedSchedule(tile));
      ASSERT_TRUE(lowered.ok()) << what << ": " << lowered.error().message;
      EXPECT_EQ(lowered->kernel_sources[0].find("grouped order: 16") != std::string::npos,
                group == 16)
          << what;
      expect_matches_under_every_schedule(*graph, std::move(*lowered), what);
      ++ran;
    }
  }
  EXPECT_EQ(ran, 4);
}

// Attention tiles the heuristic does not choose but the tuner may (attention_candidates): 8
// warps (128 queries a block on tensor cores, 64 on FFMA), key tiles of 16 to 64 (ragged at 33,
// 100 and 200 keys) and 3 stages, under every schedule: the explicit chain at head dim 20 in
// every f32 mode, and the causal, masked attention op in bf16 at 100 x 100, head dim 40. At 8
// warps and 3 stages also a second query block with the causal loop cut short, Q read from shared
// memory at every key tile and two slabs of D_v (f16, and f32 on FFMA: 200 x 200, head dim 160).
TEST(EmulatedAttentionTiles, TheTunersCandidatesMatchTheReference) {
  const char* bf16_text = R"(graph masked {
  input q: bf16[2, 100, 40]
  input k: bf16[2, 100, 40]
  input v: bf16[2, 100, 40]
  input m: f32[100, 100]
  o = attention(q, k, v, mask=m, scale=0.158, causal=true)
  output o
})";
  auto wide = [](const char* dtype) {
    std::string t = std::string(dtype) + "[1, 2, 200, 160]";
    return "graph wide {\n  input q: " + t + "\n  input k: " + t + "\n  input v: " + t +
           "\n  o = attention(q, k, v, causal=true)\n  output o\n}\n";
  };
  struct Run {
    std::string graph;  // a file in tests/emulation/graphs, else graph text
    ir::Precision precision;
    bool deepest_only = false;  // only the 8-warp tiles at 3 stages
  };
  const Run runs[] = {{"attention_odd", k_highest}, {"attention_odd", k_high},
                      {"attention_odd", k_tf32x3},  {"attention_odd", k_medium},
                      {bf16_text, k_high},          {wide("f16"), k_high, true},
                      {wide("f32"), k_highest, true}};
  int ran = 0;
  for (const Run& run : runs) {
    bool file = run.graph.find('{') == std::string::npos;
    auto parsed =
        file ? Expected<ir::Graph>(load(run.graph)) : ir::parse_graph(run.graph, "att.kg");
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    const ir::Graph& graph = *parsed;
    compiler::CompileOptions options;
    options.target.sm = 90;
    options.precision = run.precision;
    auto request = compiler::check_request(graph, options);
    ASSERT_TRUE(request.ok()) << request.error().message;
    auto heuristic = compiler::lower(graph, *request);
    ASSERT_TRUE(heuristic.ok()) << heuristic.error().message;
    const compiler::KernelPlan* attention = nullptr;
    for (const compiler::KernelPlan& k : heuristic->plan.kernels)
      if (k.group.kind == compiler::GroupKind::attention) attention = &k;
    ASSERT_NE(attention, nullptr) << "the graph's attention is fused";
    const compiler::AttentionShape shape = attention->attention_shape;
    for (const compiler::AttentionTile& tile : compiler::attention_candidates(shape, 90)) {
      // 8 warps at every key tile and stage count; 4 warps at 3 stages (the heuristic's 2 run
      // in EmulatedGraph).
      if (tile.warps == 4 && tile.stages != 3) continue;
      if (run.deepest_only && (tile.warps != 8 || tile.stages != 3)) continue;
      std::string what = graph.name() + " " +
                         std::string(ir::to_string(graph.node(graph.inputs()[0]).type.dtype)) +
                         " " + std::string(ir::to_string(run.precision)) + " " +
                         compiler::to_string(tile);
      compiler::ChosenSchedule chosen(
          {{compiler::problem_signature(shape), {tile, "tuning candidate"}}});
      auto lowered = compiler::lower(graph, *request, chosen);
      ASSERT_TRUE(lowered.ok()) << what << ": " << lowered.error().message;
      bool found = false;
      for (const compiler::KernelPlan& k : lowered->plan.kernels) {
        if (k.group.kind != compiler::GroupKind::attention) continue;
        found = true;
        EXPECT_TRUE(compiler::same_tile(k.attention_tile, tile)) << what;
        EXPECT_EQ(k.tile_source, "tuning candidate") << what;
      }
      EXPECT_TRUE(found) << what;
      expect_matches_under_every_schedule(graph, std::move(*lowered), what);
      ++ran;
    }
  }
  // 8 warps x key tiles x 2 stages, and 4 warps x key tiles at 3 stages: FFMA and tf32x3 (head
  // dim 32 padded) take key tiles of 16 and 32, tf32, medium and bf16 16, 32 and 64; at head dim
  // 160, f16 16, 32 and 64 at 8 warps and 3 stages, FFMA 16.
  EXPECT_EQ(ran, 6 + 9 + 6 + 9 + 9 + 3 + 1);
}

// The k loop's barrier moved after the next stage's copies are issued: a fast thread refills the
// stage that slower warps are still reading (a write-after-read race on a GPU). The kind schedule
// lands copies at their wait and cannot see it; copies landing at issue, with a warp running
// ahead, must.
TEST(EmulatedRaces, ABarrierMovedAfterTheNextStagesCopiesIsCaughtByTheAdversarialSchedule) {
  const std::vector<testing::TextEdit> moved = {
      {"    kiln_cp_async_wait<2>();\n    __syncthreads();\n    {\n      const int next",
       "    kiln_cp_async_wait<2>();\n    {\n      const int next"},
      {"      kiln_cp_async_commit();\n    }\n    const int cs",
       "      kiln_cp_async_commit();\n    }\n    __syncthreads();\n    const int cs"}};
  auto hidden = emulate_edited("reuse_odd", 80, k_high, moved);
  ASSERT_TRUE(hidden.ok()) << hidden.error().message;
  EXPECT_TRUE(hidden->ok) << "the kind schedule was expected to hide this race";
  auto caught = emulate_edited("reuse_odd", 80, k_high, moved, Schedule::adversarial());
  ASSERT_TRUE(caught.ok()) << caught.error().message;
  EXPECT_FALSE(caught->ok);
  for (const OutputCheck& o : caught->outputs) EXPECT_FALSE(o.ok) << o.name;
  // Random schedules see it too, each seed that lands a refill before a slower warp's read.
  int seeds_caught = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto seeded = emulate_edited("reuse_odd", 80, k_high, moved, Schedule::seeded_by(seed));
    ASSERT_TRUE(seeded.ok()) << seeded.error().message;
    seeds_caught += !seeded->ok;
  }
  EXPECT_GE(seeds_caught, 3);
}

TEST(EmulatedProgram, RejectsInputsOfTheWrongType) {
  ir::Graph graph = load("mlp_odd");
  compiler::CompileOptions options;
  options.precision = k_highest;
  auto program = build_program(graph, options);
  ASSERT_TRUE(program.ok()) << program.error().message;
  auto outputs = program->run({});
  ASSERT_FALSE(outputs.ok());
  EXPECT_NE(outputs.error().message.find("takes 5 inputs, got 0"), std::string::npos);
}

TEST(EmulatedModule, AMissingHostCompilerIsAClearError) {
  ModuleOptions options;
  options.compiler = "/nonexistent/kiln-no-such-g++";
  auto module = compile_module("", options);
  ASSERT_FALSE(module.ok());
  EXPECT_NE(module.error().message.find("was not found"), std::string::npos)
      << module.error().message;
}

TEST(EmulatedModule, ACompileErrorCarriesTheCompilerOutput) {
  auto module = compile_module("extern \"C\" __global__ void kiln_bad(float* p) { p[0] = nope; }\n",
                               ModuleOptions{});
  ASSERT_FALSE(module.ok());
  EXPECT_NE(module.error().message.find("failed"), std::string::npos) << module.error().message;
  EXPECT_NE(module.error().message.find("nope"), std::string::npos) << module.error().message;
  EXPECT_NE(module.error().message.find("kernels.cu"), std::string::npos) << module.error().message;
}

TEST(EmulatedModule, AKernelErrorNamesTheKernelAndThread) {
  ModuleOptions options;
  options.entries = {"kiln_deadlock"};
  auto module = compile_module(
      "extern \"C\" __global__ void kiln_deadlock(float* p) {\n"
      "  if (threadIdx.x == 0) return;\n  __syncthreads();\n  p[threadIdx.x] = 1.0f;\n}\n",
      options);
  ASSERT_TRUE(module.ok()) << module.error().message;
  std::vector<float> buffer(64);
  compiler::LaunchShape shape;
  shape.block = {64, 1, 1};
  Status status = (*module)->launch("kiln_deadlock", shape, {buffer.data()},
                                    {{buffer.data(), buffer.size() * 4}});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("kernel 'kiln_deadlock'"), std::string::npos);
  EXPECT_NE(status.error().message.find("deadlock"), std::string::npos) << status.error().message;
}

TEST(EmulatedModule, AParameterCountMismatchIsAnError) {
  ModuleOptions options;
  options.entries = {"kiln_two"};
  auto module = compile_module(
      "extern \"C\" __global__ void kiln_two(float* a, const float* b) { a[0] = b[0]; }\n",
      options);
  ASSERT_TRUE(module.ok()) << module.error().message;
  std::vector<float> buffer(4);
  Status status = (*module)->launch("kiln_two", compiler::LaunchShape{}, {buffer.data()},
                                    {{buffer.data(), buffer.size() * 4}});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("takes 2 parameters, the launch passes 1"),
            std::string::npos)
      << status.error().message;
}

TEST(EmulatedModule, MoreSharedMemoryThanTheArchHasIsAnError) {
  ModuleOptions options;
  options.sm = 75;
  options.entries = {"kiln_one"};
  auto module = compile_module("extern \"C\" __global__ void kiln_one(float* a) { a[0] = 1.0f; }\n",
                               options);
  ASSERT_TRUE(module.ok()) << module.error().message;
  std::vector<float> buffer(4);
  compiler::LaunchShape shape;
  shape.dynamic_smem_bytes = 65 * 1024;
  Status status = (*module)->launch("kiln_one", shape, {buffer.data()},
                                    {{buffer.data(), buffer.size() * 4}});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("sm_75 allows at most 65536"), std::string::npos)
      << status.error().message;
}

}  // namespace
}  // namespace kiln::emulation

namespace kiln::emulation {
namespace {

// Runs `graph` on `inputs` emulated for sm_75 and sm_90 (highest, the adversarial schedule) and
// in fp64, and hands each output to `check` (its name, emulated and fp64 values, the arch).
void against_fp64(const ir::Graph& graph, const std::vector<reference::Tensor>& inputs,
                  const std::function<void(const std::string&, const reference::Tensor&,
                                           const reference::Tensor&, int)>& check) {
  auto truth = reference::run(graph, inputs, reference::RunMode::fp64());
  ASSERT_TRUE(truth) << truth.error().message;
  for (int sm : {75, 90}) {
    compiler::CompileOptions options;
    options.target.sm = sm;
    options.precision = ir::Precision::highest;
    auto program = build_program(graph, options);
    ASSERT_TRUE(program) << program.error().message;
    auto out = program->run(inputs, Schedule::adversarial());
    ASSERT_TRUE(out) << out.error().message;
    ASSERT_EQ(out->size(), truth->size());
    for (size_t o = 0; o < out->size(); ++o)
      check(graph.node(graph.outputs()[o]).name, (*out)[o], (*truth)[o], sm);
  }
}

// Edge values through the generated kernels, as the reference gives them, bit for bit: float ->
// integer casts that truncate, saturate and take NaN to 0, i64 -> i32 wrapping, i32 products and
// negations past the range, comparisons with NaN, bools to and from floats; and i64 values past
// 2^53 through every kind of integer op, exact.
TEST(EmulatedTyped, EdgeValuesMatchTheReferenceExactly) {
  for (bool wide : {false, true}) {
    auto graph = ir::parse_graph(wide ? kiln::testing::k_wide_integers
                                      : kiln::testing::k_typed_edges, "edges.kg");
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    against_fp64(*graph,
                 wide ? kiln::testing::wide_integer_inputs(*graph)
                      : kiln::testing::typed_edge_inputs(*graph),
                 [](const std::string& name, const reference::Tensor& got,
                    const reference::Tensor& want, int sm) {
                   EXPECT_TRUE(kiln::testing::same_values(got, want)) << name << " on sm_" << sm;
                 });
  }
}

// layer_norm of rows far from 0 next to their spread keeps their deviations (the kernel works on
// the row less its first element), held in registers (37) and read once per pass (1500): within
// highest's tolerance of fp64, where it was 5% off.
TEST(EmulatedNorm, LayerNormOfRowsFarFromZeroKeepsTheirDeviations) {
  auto graph = ir::parse_graph(kiln::testing::k_far_rows, "far.kg");
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  auto inputs = reference::make_inputs(*graph, kiln::testing::far_row_inputs(*graph, 3));
  ASSERT_TRUE(inputs) << inputs.error().message;
  against_fp64(*graph, *inputs,
               [](const std::string& name, const reference::Tensor& got,
                  const reference::Tensor& want, int sm) {
                 EXPECT_LE(reference::relative_l2(got, want), 1e-5) << name << " on sm_" << sm;
               });
  // The emulated reference (`kiln audit`'s prediction of the kernels) rounds as they do.
  auto truth = reference::run(*graph, *inputs, reference::RunMode::fp64());
  auto emulated = reference::run(*graph, *inputs, reference::RunMode::emulate(ir::Precision::highest));
  ASSERT_TRUE(truth && emulated);
  for (size_t o = 0; o < truth->size(); ++o)
    EXPECT_LE(reference::relative_l2((*emulated)[o].values, (*truth)[o].values), 1e-5) << o;
}

// Embeddings fused into the norms, softmax and reduction that read them gather each element in
// that kernel; an id outside [0, V) reads a row of zeros there as in the gather kernel, never
// outside the table (the emulator faults on any read outside a buffer). Against fp64.
TEST(EmulatedEmbedding, FusedGathersReadZerosForIdsOutsideTheTable) {
  auto graph = ir::parse_graph(kiln::testing::k_fused_embeddings, "g.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  EXPECT_EQ(compiler::fuse(*graph).size(), 4u) << "each embedding in the kernel of the row op that reads it";
  against_fp64(*graph, kiln::testing::fused_embedding_inputs(*graph),
               [](const std::string& name, const reference::Tensor& got_tensor,
                  const reference::Tensor& want_tensor, int sm) {
                 const std::vector<double>& got = got_tensor.values;
                 const std::vector<double>& want = want_tensor.values;
                 ASSERT_EQ(got.size(), want.size());
                 for (size_t i = 0; i < got.size(); ++i)
                   EXPECT_NEAR(got[i], want[i], 1e-5) << name << "[" << i << "] on sm_" << sm;
                 // Row 2 of r reads id -1: a row of zeros, normalised to zeros.
                 if (name == "r") {
                   for (size_t i = 24; i < 36; ++i) EXPECT_EQ(got[i], 0.0) << "sm_" << sm;
                 }
               });
}

}  // namespace
}  // namespace kiln::emulation
