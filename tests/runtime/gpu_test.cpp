// The GPU suite: kiln's compiled kernels on a real device against the fp64 reference. Every
// test reports itself skipped where there is no CUDA driver or device.
#include "kiln/kiln.h"
#include "compiler/compiler.h"
#include "compiler/schedule.h"
#include "ir/parse.h"
#include "reference/check.h"
#include "runtime/tuning.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <variant>
#include <vector>

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

// Compiles `graph` in `precision` (no cache; or, given `tune_dir`, tuning every problem into a
// cache there first) on the device and checks every output against the fp64 reference within the
// mode's tolerance.
void expect_matches_reference(const ir::Graph& graph, Precision precision,
                              const std::string& tune_dir = "") {
  RuntimeOptions options;
  options.use_cache = !tune_dir.empty();
  options.cache_dir = tune_dir;
  if (!tune_dir.empty()) options.autotune = Autotune::on;
  options.precision = precision;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  auto exe = (*runtime)->compile(graph);
  ASSERT_TRUE(exe) << exe.error().message;
  auto report = reference::check_against_fp64(
      graph, *ir::parse_precision((*exe)->precision()), 7,
      reference::bytes_runner(graph, [&](const std::vector<reference::Bytes>& inputs) {
        return (*exe)->run_host(inputs);
      }));
  ASSERT_TRUE(report) << report.error().message;
  for (const auto& o : report->outputs)
    EXPECT_TRUE(o.ok) << "output " << o.name << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
}

// How many of `graph`'s kernels the model plans on sm_90a's wgmma kernels (matmul and attention)
// in `precision`, for `bucket` where the graph is symbolic. The GpuWgmma tests check this first,
// with or without a device: a model that stopped choosing wgmma for their shapes would otherwise
// leave them passing on mma.sync.
int planned_on_wgmma(const ir::Graph& graph, Precision precision,
                     std::vector<compiler::DimRange> bucket = {},
                     const compiler::ScheduleProvider& schedule = compiler::heuristic_schedule()) {
  compiler::CompileOptions o;
  o.target = compiler::Target::cuda(90, "a");
  o.precision = precision;
  o.bucket = std::move(bucket);
  auto request = compiler::check_request(graph, o);
  EXPECT_TRUE(request) << request.error().message;
  if (!request) return -1;
  auto lowered = compiler::lower(graph, *request, schedule);
  EXPECT_TRUE(lowered) << lowered.error().message;
  if (!lowered) return -1;
  int count = 0;
  for (const compiler::KernelPlan& k : lowered->plan.kernels)
    count += k.tile.wgmma || k.attention_tile.wgmma ? 1 : 0;
  return count;
}

// sm_90a's wgmma kernel on the device (the model gives it these: each matmul's 128x128 tiles
// number 162 or more): B N-major, K-major (transpose_b) and batched (a rank-3 tensor map),
// K 200 ending 8 into its fourth K tile, N 2104 and 1160 ending inside a tile, 162 work tiles
// of 128x256 on fewer SMs (several a block), a fused bias, GELU and residual. Elsewhere these
// run the mma.sync kernels and must pass as well.
TEST(GpuWgmma, LargeMatmulsOfEveryOperandLayoutMatchTheReference) {
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
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::automatic), 3);
  if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
  expect_matches_reference(*graph, Precision::automatic);
}

// The wgmma kernel on fp32 operands (`high`, `tf32x3` and `medium`: rounded, split or converted
// to bf16 in shared memory): B K-major through transpose_b and B [K, N] (transposed in
// shared memory), each shared and batched, K 200 ending inside a K tile of 32, ragged N.
TEST(GpuWgmma, Fp32MatmulsOfBothBLayoutsMatchTheReference) {
  auto graph = ir::parse_graph(R"(graph wgmma_tf32_gpu {
  input x: f32[2, 1040, 200]
  input w: f32[2104, 200]
  input b: f32[2104]
  input wb: f32[2, 1160, 200]
  input wn: f32[200, 2104]
  input wbn: f32[2, 200, 1160]
  h = add(matmul(x, w, transpose_b=true), b)
  z = matmul(x, wb, transpose_b=true)
  hn = add(matmul(x, wn), b)
  zn = matmul(x, wbn)
  output h, z, hn, zn
}
)", "wgmma_tf32_gpu.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  for (Precision p : {Precision::high, Precision::tf32x3, Precision::medium})
    EXPECT_EQ(planned_on_wgmma(*graph, p), 4) << ir::to_string(p);
  if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
  expect_matches_reference(*graph, Precision::high);
  expect_matches_reference(*graph, Precision::tf32x3);
  expect_matches_reference(*graph, Precision::medium);
}

// The graph `text_of(type)` gives for bf16 (in `auto`) and for f32 (in `high`, `tf32x3` and
// `medium`): `wgmma` of its kernels planned on sm_90a's wgmma kernels in each mode, with or without
// a device; then, on a device, its outputs against the reference.
void expect_on_wgmma_in_every_mode(const std::function<std::string(const std::string&)>& text_of,
                                   int wgmma) {
  for (const char* type : {"bf16", "f32"}) {
    std::string t = type;
    auto graph = ir::parse_graph(text_of(t), "wgmma_gpu.kg");
    ASSERT_TRUE(graph) << graph.error().message;
    std::vector<Precision> modes = {Precision::automatic};
    if (t == "f32") modes = {Precision::high, Precision::tf32x3, Precision::medium};
    for (Precision p : modes) EXPECT_EQ(planned_on_wgmma(*graph, p), wgmma) << t << " " << ir::to_string(p);
    if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
    for (Precision p : modes) expect_matches_reference(*graph, p);
  }
}

// A read as [K, M] (transpose_a) on the wgmma kernel: bf16 A read M-major by wgmma
// (imm-trans-a), fp32 A staged and written K-major (`high`, `tf32x3`) or converted (`medium`);
// batched and shared A, B N-major and K-major, K 200 ending inside a K tile, ragged M and N.
TEST(GpuWgmma, MatmulsWithATransposedMatchTheReference) {
  expect_on_wgmma_in_every_mode(
      [](const std::string& t) {
        return "graph wgmma_ta_gpu {\n  input xt: " + t + "[2, 200, 1040]\n  input w: " + t +
               "[200, 2104]\n  input b: " + t + "[2104]\n  input w2: " + t +
               "[1160, 200]\n  input at: " + t + "[200, 1040]\n"
               "  h = add(matmul(xt, w, transpose_a=true), b)\n"
               "  y = matmul(xt, w2, transpose_a=true, transpose_b=true)\n"
               "  s = matmul(at, w, transpose_a=true)\n  output h, y, s\n}\n";
      },
      3);
}

// Matmuls with two and three batch dims on the wgmma kernel: A and B of [2, 3] (rank-4 tensor
// maps), B broadcast over the heads (its map holds the outer dim) and over the outer batch (the
// inner one), a 5-D result whose A has all three batch dims (a rank-5 map); bf16, and fp32 in
// `high`, `tf32x3` and `medium`; K 200 ending inside a K tile, ragged M and N.
TEST(GpuWgmma, MatmulsWithSeveralBatchDimsMatchTheReference) {
  expect_on_wgmma_in_every_mode(
      [](const std::string& t) {
        return "graph wgmma_batched_gpu {\n  input x: " + t + "[2, 3, 1040, 200]\n  input w: " + t +
               "[2, 3, 200, 1160]\n  input wo: " + t + "[2, 1, 200, 1160]\n  input wh: " + t +
               "[3, 1160, 200]\n  input y: " + t + "[2, 2, 3, 520, 200]\n"
               "  p = matmul(x, w)\n  q = matmul(x, wo)\n"
               "  r = matmul(x, wh, transpose_b=true)\n  s = matmul(y, wo)\n"
               "  output p, q, r, s\n}\n";
      },
      4);
}

// sm_90a's attention kernel on the device (the model gives it every 16-bit attention there):
// grouped heads, causal with a padding mask, ragged queries and keys, head dims 128 and 64 (v's
// 128 beside q's 64), and 200 with v's 192 (64-key tiles, P V m64n192k16; multi-query). Elsewhere
// these run the mma.sync
// kernel and must pass as well.
TEST(GpuWgmma, AttentionOfGroupedHeadsMatchesTheReference) {
  auto graph = ir::parse_graph(R"(graph wgmma_attention_gpu {
  input q: bf16[2, 8, 700, 128]
  input k: bf16[2, 2, 900, 128]
  input v: bf16[2, 2, 900, 128]
  input pad: bf16[2, 1, 1, 900]
  input q2: f16[3, 8, 520, 64]
  input k2: f16[3, 8, 520, 64]
  input v2: f16[3, 8, 520, 128]
  input q3: bf16[2, 4, 600, 200]
  input k3: bf16[2, 1, 700, 200]
  input v3: bf16[2, 1, 700, 192]
  o = attention(q, k, v, mask=pad, causal=true)
  o2 = attention(q2, k2, v2)
  o3 = attention(q3, k3, v3, causal=true)
  output o, o2, o3
}
)", "wgmma_attention_gpu.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::automatic), 3);
  if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
  expect_matches_reference(*graph, Precision::automatic);
}

// The wgmma attention kernel's tile for every attention it computes (the model's for the rest),
// as a tuning record may choose it.
class WgmmaAttentionSchedule final : public compiler::ScheduleProvider {
public:
  compiler::MatmulTile matmul_tile(const compiler::MatmulShape& shape, int sm) const override {
    return compiler::heuristic_schedule().matmul_tile(shape, sm);
  }
  compiler::AttentionTile attention_tile(const compiler::AttentionShape& shape, int) const override {
    return compiler::choose_wgmma_attention_tile(shape);
  }
  std::string source() const override { return "fixed"; }
  std::string key() const override { return "wgmma attention"; }
};

// fp32 attention on the same kernel, its producer loading q, k and v itself: in `medium`
// converted to bf16, in `high` rounded to tf32 for tf32 wgmma (head dims up to 128: o and o2), in
// `tf32x3` split into tf32 big and small parts (head dims up to 64: o2).
// Grouped heads, a mask, causal, a head dim padded to 64 (d 40) and one over 128 on 64-key tiles.
// The model keeps fp32 attention on the mma.sync kernel; a tuning record may choose the wgmma
// one. On the device each attention is tuned into a cache of its own: its wgmma tile must run
// and agree with the model tile's (status "ok"), faster or not. Then the runtime compiles from
// that cache (`Autotune::on`, which finds the records and tunes nothing again) and the winner's
// outputs are checked against fp64.
TEST(GpuWgmma, Fp32AttentionInMediumHighAndTf32x3MatchesTheReference) {
  auto graph = ir::parse_graph(R"(graph wgmma_attention_medium_gpu {
  input q: f32[2, 8, 700, 128]
  input k: f32[2, 2, 900, 128]
  input v: f32[2, 2, 900, 128]
  input pad: f32[2, 1, 1, 900]
  input q2: f32[3, 4, 520, 40]
  input k2: f32[3, 4, 520, 40]
  input v2: f32[3, 4, 520, 40]
  input q3: f32[2, 4, 600, 200]
  input k3: f32[2, 1, 700, 200]
  input v3: f32[2, 1, 700, 192]
  o = attention(q, k, v, mask=pad, causal=true)
  o2 = attention(q2, k2, v2)
  o3 = attention(q3, k3, v3, causal=true)
  output o, o2, o3
}
)", "wgmma_attention_medium_gpu.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  WgmmaAttentionSchedule wgmma;
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::medium, {}, wgmma), 3);
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::high, {}, wgmma), 2);
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::tf32x3, {}, wgmma), 1);
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::medium), 0);
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::high), 0);
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::tf32x3), 0);
  if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
  for (Precision precision : {Precision::medium, Precision::high, Precision::tf32x3}) {
    std::string dir = ::testing::TempDir() + "kiln-fp32-attention-tune";
    std::filesystem::remove_all(dir);
    compiler::CompileOptions o;
    o.target = compiler::Target::cuda(90, "a");
    o.precision = precision;
    cache::Options cache_options;
    cache_options.dir = dir;
    cache_options.remote = "";
    auto cache = cache::Cache::open(cache_options);
    auto records = runtime::tune_graph(*graph, o, cache.get(), {});
    cache.reset();
    ASSERT_TRUE(records) << records.error().message;
    int timed = 0;
    for (const runtime::TuningRecord& r : *records) {
      for (const runtime::CandidateTime& c : r.candidates) {
        const auto* t = std::get_if<compiler::AttentionTile>(&c.tile);
        if (!t || !t->wgmma) continue;
        ++timed;
        EXPECT_EQ(c.status, "ok") << r.kernel << " in " << ir::to_string(precision);
      }
    }
    EXPECT_EQ(timed, planned_on_wgmma(*graph, precision, {}, wgmma)) << ir::to_string(precision);
    expect_matches_reference(*graph, precision, dir);
    std::filesystem::remove_all(dir);
  }
}

// A symbolic graph's wgmma kernels on the device: one executable (S in 1..2048) run at sizes of
// two buckets, with partial tiles of rows and keys, each against the fp64 reference of the graph
// bound there. At the upper bound 2048 the matmul's tiles fill the GPU, so the model plans it and
// the attention on sm_90a's wgmma kernels, whose tensor maps are encoded at each run's S (at
// 1024, the bucket of 700, the matmul stays on mma.sync).
TEST(GpuWgmma, ASymbolicGraphMatchesTheReferenceAtEverySize) {
  auto graph = ir::parse_graph(R"(graph wgmma_symbolic_gpu {
  dim S: 1..2048
  input x: bf16[S, 1024]
  input w: bf16[1024, 1024]
  input b: bf16[1024]
  input q: bf16[1, 8, S, 128]
  input k: bf16[1, 2, S, 128]
  h = gelu(add(matmul(x, w), b))
  o = attention(q, k, k, causal=true)
  output h, o
}
)", "wgmma_symbolic_gpu.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::automatic, {compiler::DimRange{1025, 2048}}), 2);
  EXPECT_EQ(planned_on_wgmma(*graph, Precision::automatic, {compiler::DimRange{513, 1024}}), 1);
  if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
  RuntimeOptions options;
  options.use_cache = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  auto exe = (*runtime)->compile(*graph);
  ASSERT_TRUE(exe) << exe.error().message;
  for (int64_t size : {1025, 1500, 2048, 700}) {
    SCOPED_TRACE("S = " + std::to_string(size));
    auto bound = graph->bind({size});
    ASSERT_TRUE(bound) << bound.error().message;
    auto report = reference::check_against_fp64(
        *bound, *ir::parse_precision((*exe)->precision()), 7,
        reference::bytes_runner(*bound, [&](const std::vector<reference::Bytes>& inputs) {
          return (*exe)->run_host(inputs, {size});
        }));
    ASSERT_TRUE(report) << report.error().message;
    for (const auto& o : report->outputs)
      EXPECT_TRUE(o.ok) << "output " << o.name << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
  }
}

}  // namespace
}  // namespace kiln
