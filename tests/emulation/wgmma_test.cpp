// sm_90a's matmul kernel (TMA, mbarrier ring, wgmma, warp specialisation, persistent grid)
// emulated against the fp64 reference: the wgmma graphs and the 16-bit graphs whose matmuls it
// computes, every matmul it computes on it (the model would keep these small grids on mma.sync),
// under every schedule; the persistent grid at 1 to 132 blocks; symbolic graphs' matmuls and
// attention at sizes of one bucket's build; and the kernel's own rules and the shim's model, each
// broken once, caught.
#include "compiler/compiler.h"
#include "emulation/check.h"
#include "emulation/program.h"
#include "ir/parse.h"
#include "reference/check.h"
#include "reference/rounding.h"
#include "reference/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kiln::emulation {
namespace {

// A graph of tests/emulation/graphs, or of examples/graphs where the name starts "examples/".
ir::Graph load(const std::string& name) {
  std::string dir = KILN_EMU_TEST_GRAPHS, file = name;
  if (name.rfind("examples/", 0) == 0) dir = KILN_EMU_EXAMPLE_GRAPHS, file = name.substr(9);
  auto graph = ir::parse_graph_file(dir + "/" + file + ".kg");
  EXPECT_TRUE(graph.ok()) << (graph.ok() ? "" : graph.error().message);
  return std::move(*graph);
}

compiler::CompileOptions sm90a(ir::Precision precision = ir::Precision::high) {
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(90, "a");
  options.precision = precision;
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
  compiler::AttentionTile attention_tile(const compiler::AttentionShape& shape, int) const override {
    return compiler::choose_wgmma_attention_tile(shape);
  }
  std::string source() const override { return "fixed"; }
  std::string key() const override { return "wgmma"; }
};

Expected<Program> build(const ir::Graph& graph, ShimOptions shim = {},
                        ir::Precision precision = ir::Precision::high) {
  auto request = compiler::check_request(graph, sm90a(precision));
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
  for (const auto& k : program.lowered().plan.kernels)
    count += k.tile.wgmma || k.attention_tile.wgmma ? 1 : 0;
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
  // head dims over 128: all four attentions on the wgmma kernel's 64-key tiles
  if (std::string(GetParam()) == "wgmma_attention_wide_odd") {
    EXPECT_EQ(wgmma_kernels(*program), 4);
  }
  for (const Schedule& schedule : k_schedules) {
    SCOPED_TRACE("schedule " + to_string(schedule));
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
}

INSTANTIATE_TEST_SUITE_P(Sm90a, EmulatedWgmmaGraph,
                         ::testing::Values("wgmma_bf16_odd", "wgmma_f16_odd", "wgmma_tiles_odd",
                                           "gated_mlp_aligned", "half_epilogue_aligned",
                                           "reuse_bf16_aligned", "reuse_f16_aligned",
                                           "splitk_bf16_odd", "wgmma_attention_bf16_odd",
                                           "wgmma_attention_f16_odd",
                                           "examples/attention_causal", "wgmma_tf32_odd",
                                           "wgmma_transpose_a_bf16_odd", "wgmma_transpose_a_odd",
                                           "wgmma_batched_bf16_odd", "wgmma_batched_odd",
                                           "wgmma_attention_wide_odd"));

// How many matmuls `graph` has.
int matmuls(const ir::Graph& graph) {
  int count = 0;
  for (const ir::Node& n : graph.nodes()) count += n.kind == ir::OpKind::matmul ? 1 : 0;
  return count;
}

// A read as [K, M] (transpose_a) on the wgmma kernel: 16-bit A as TMA loads it (M-major blocks,
// imm-trans-a), fp32 A staged and written K-major (tf32, tf32x3) or converted to bf16 M-major
// (medium); every matmul of these graphs runs there, and the graphs with A and B transposed that
// the 16-bit mma.sync kernels are checked on (reuse_*_aligned) now run there too.
class EmulatedWgmmaTransposeA
    : public ::testing::TestWithParam<std::tuple<const char*, ir::Precision>> {};

TEST_P(EmulatedWgmmaTransposeA, EveryMatmulRunsOnWgmmaAndMatchesFp64UnderEverySchedule) {
  auto [name, precision] = GetParam();
  ir::Graph graph = load(name);
  auto program = build(graph, {}, precision);
  ASSERT_TRUE(program.ok()) << program.error().message;
  EXPECT_EQ(wgmma_kernels(*program), matmuls(graph));
  int transposed = 0;
  for (const auto& k : program->lowered().plan.kernels)
    transposed += k.tile.wgmma && !k.shape.a_k_contiguous ? 1 : 0;
  EXPECT_GT(transposed, 0);
  for (const Schedule& schedule : k_schedules) {
    SCOPED_TRACE("schedule " + to_string(schedule));
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sm90a, EmulatedWgmmaTransposeA,
    ::testing::Values(std::make_tuple("wgmma_transpose_a_bf16_odd", ir::Precision::high),
                      std::make_tuple("reuse_bf16_aligned", ir::Precision::high),
                      std::make_tuple("reuse_f16_aligned", ir::Precision::high),
                      std::make_tuple("wgmma_transpose_a_odd", ir::Precision::high),
                      std::make_tuple("wgmma_transpose_a_odd", ir::Precision::tf32x3),
                      std::make_tuple("wgmma_transpose_a_odd", ir::Precision::medium)));

// Matmuls with two to four batch dims on the wgmma kernel: each operand's tensor map holds the
// batch dims it does not broadcast over (rank 3 to 5 here), indexed by the result's batch
// coordinates. Every matmul of these graphs runs there, their maps of the ranks the operands'
// batch dims give, and matches fp64 under every schedule.
class EmulatedWgmmaBatched
    : public ::testing::TestWithParam<std::tuple<const char*, ir::Precision>> {};

TEST_P(EmulatedWgmmaBatched, EveryMatmulRunsOnWgmmaAndMatchesFp64UnderEverySchedule) {
  auto [name, precision] = GetParam();
  ir::Graph graph = load(name);
  auto program = build(graph, {}, precision);
  ASSERT_TRUE(program.ok()) << program.error().message;
  EXPECT_EQ(wgmma_kernels(*program), matmuls(graph));
  // The ranks of the kernels' maps: "tiled TYPE dims=D0,D1,... ".
  std::multiset<size_t> ranks;
  for (const auto& k : program->lowered().plan.kernels)
    for (const auto& p : k.params)
      if (p.kind == compiler::ParamKind::tensor_map) {
        size_t at = p.map.find("dims="), end = p.map.find(' ', at);
        ASSERT_NE(at, std::string::npos) << p.map;
        std::string dims = p.map.substr(at, end - at);
        ranks.insert(static_cast<size_t>(std::count(dims.begin(), dims.end(), ',')) + 1);
      }
  // Both graphs: A and B of [2, 3] (4, 4), B over the heads (3), A of three batch dims (5).
  EXPECT_TRUE(ranks.count(4) >= 2 && ranks.count(3) >= 2 && ranks.count(5) == 1)
      << ::testing::PrintToString(ranks);
  for (const Schedule& schedule : k_schedules) {
    SCOPED_TRACE("schedule " + to_string(schedule));
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sm90a, EmulatedWgmmaBatched,
    ::testing::Values(std::make_tuple("wgmma_batched_bf16_odd", ir::Precision::high),
                      std::make_tuple("wgmma_batched_odd", ir::Precision::high),
                      std::make_tuple("wgmma_batched_odd", ir::Precision::tf32x3),
                      std::make_tuple("wgmma_batched_odd", ir::Precision::medium)));

// The tf32 path's wgmma kernel rounds its operands in shared memory as the mma.sync kernel rounds
// its fragments (cvt.rna), and both add each k8 slice as the H100 does, in the same order: the
// two kernels' outputs agree bit for bit (a kernel that let wgmma read the fp32 bits, truncated,
// would not), B K-major and B [K, N] (transposed in shared memory) alike. tf32x3 likewise: both
// split each operand with cvt.rna, run the three products in the same order, sum a k tile of 32
// on the tensor cores from zero and add it to the accumulator in fp32. medium: both round the fp32
// operands to bf16 (cvt.rn) and add each k16 slice as the H100 does.
class EmulatedWgmmaFp32Operands
    : public ::testing::TestWithParam<std::tuple<const char*, ir::Precision>> {};

TEST_P(EmulatedWgmmaFp32Operands, MatchesTheMmaSyncKernelBitForBit) {
  auto [name, precision] = GetParam();
  ir::Graph graph = load(name);
  auto wgmma = build(graph, {}, precision);
  ASSERT_TRUE(wgmma.ok()) << wgmma.error().message;
  ASSERT_EQ(wgmma_kernels(*wgmma), 4);
  // the model keeps these small grids on mma.sync
  auto mma = build_program(graph, sm90a(precision));
  ASSERT_TRUE(mma.ok()) << mma.error().message;
  ASSERT_EQ(wgmma_kernels(*mma), 0);
  auto inputs = reference::random_inputs(graph, 3);
  for (const Schedule& schedule : {Schedule{}, Schedule::adversarial()}) {
    auto a = wgmma->run(inputs, schedule);
    auto b = mma->run(inputs, schedule);
    ASSERT_TRUE(a.ok()) << a.error().message;
    ASSERT_TRUE(b.ok()) << b.error().message;
    ASSERT_EQ(a->size(), b->size());
    for (size_t o = 0; o < a->size(); ++o) {
      ASSERT_EQ((*a)[o].values.size(), (*b)[o].values.size());
      size_t differ = 0;
      for (size_t i = 0; i < (*a)[o].values.size(); ++i)
        differ += (*a)[o].values[i] != (*b)[o].values[i] ? 1 : 0;
      EXPECT_EQ(differ, 0u) << "output " << o << " of " << (*a)[o].values.size();
    }
  }
}

TEST_P(EmulatedWgmmaFp32Operands, MatchesTheFp64ReferenceUnderEverySchedule) {
  auto [name, precision] = GetParam();
  ir::Graph graph = load(name);
  auto program = build(graph, {}, precision);
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_EQ(wgmma_kernels(*program), 4);
  for (const Schedule& schedule : k_schedules) {
    SCOPED_TRACE("schedule " + to_string(schedule));
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
}

// wgmma_transpose_a_odd: the same with A read as [K, M], staged and transposed like B;
// wgmma_batched_odd: with two and three batch dims (rank-3 to rank-5 maps).
INSTANTIATE_TEST_SUITE_P(
    Sm90a, EmulatedWgmmaFp32Operands,
    ::testing::Combine(::testing::Values("wgmma_tf32_odd", "wgmma_transpose_a_odd",
                                         "wgmma_batched_odd"),
                       ::testing::Values(ir::Precision::high, ir::Precision::tf32x3,
                                         ir::Precision::medium)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" +
             std::string(ir::to_string(std::get<1>(info.param)));
    });

// tf32x3 with infinite operands gives what fp32 gives: an infinity times a finite non-zero value
// is an infinity, times 0 or summed with an infinity of the other sign NaN. The split's big part
// of an infinity is ±1 and its small part the infinity (kiln_tf32x3_big). Split as tf32(x) and
// tf32(x - tf32(x)), its small part would be inf - inf = NaN, and every product with it NaN. The
// planted infinities meet tf32-exact operands (small part 0) and inexact ones, zeros and each
// other, in A and in B, for both layouts of each, beside a NaN; the mma.sync kernel (sm_80) and
// sm_90a's wgmma kernel (A from registers and staged) both run the graph.
const char* k_infinite_operands_graph = R"(graph inf {
  input x: f32[2, 72, 200]
  input xt: f32[2, 200, 72]
  input w: f32[136, 200]
  input wn: f32[200, 136]
  y = matmul(x, w, transpose_b=true)
  u = matmul(x, wn)
  t = matmul(xt, w, transpose_a=true, transpose_b=true)
  s = matmul(xt, wn, transpose_a=true)
  output y, u, t, s
}
)";

// Whether `actual` is what fp32 gives where the exact sum is `exact` (its infinities and NaN as
// IEEE arithmetic makes them; finite sums of inputs in [-1, 1] never overflow): "" or why not.
std::string as_fp32_gives(double exact, double actual, double magnitude) {
  if (std::isnan(exact)) return std::isnan(actual) ? "" : "not NaN";
  if (std::isinf(exact)) return actual == exact ? "" : "not the infinity";
  if (!std::isfinite(actual)) return "not finite";
  return std::fabs(actual - exact) <= 1e-5 * magnitude + 1e-30 ? "" : "off";
}

using KernelOutputs = std::vector<std::pair<std::string, std::vector<reference::Tensor>>>;

// `graph`'s outputs on `in` in tf32x3 from sm_90a's wgmma kernels (`wgmma` of them) and from
// sm_80's mma.sync kernels, each named, into `runs`.
void run_tf32x3_kernels(const ir::Graph& graph, const std::vector<reference::Tensor>& in, int wgmma,
                        KernelOutputs& runs) {
  auto on_wgmma = build(graph, {}, ir::Precision::tf32x3);
  ASSERT_TRUE(on_wgmma.ok()) << on_wgmma.error().message;
  ASSERT_EQ(wgmma_kernels(*on_wgmma), wgmma);
  compiler::CompileOptions sm80;
  sm80.target = compiler::Target::cuda(80);
  sm80.precision = ir::Precision::tf32x3;
  auto on_mma = build_program(graph, sm80);
  ASSERT_TRUE(on_mma.ok()) << on_mma.error().message;
  const std::pair<std::string, const Program*> programs[] = {{"wgmma (sm_90a)", &*on_wgmma},
                                                             {"mma.sync (sm_80)", &*on_mma}};
  for (const auto& [name, program] : programs) {
    auto run = program->run(in, Schedule{});
    ASSERT_TRUE(run.ok()) << name << ": " << run.error().message;
    runs.emplace_back(name, std::move(*run));
  }
}

TEST(EmulatedTf32x3, InfiniteOperandsGiveWhatFp32Gives) {
  const double inf = std::numeric_limits<double>::infinity();
  auto graph = ir::parse_graph(k_infinite_operands_graph, "inf.kg");
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  std::vector<reference::Tensor> in = reference::random_inputs(*graph, 5);
  const int64_t M = 72, N = 136, K = 200;
  // A(b, m, k) is x[b][m][k] and xt[b][k][m]; B(k, n) is w[n][k] and wn[k][n]: each value planted
  // in both layouts.
  auto set_a = [&](int64_t b, int64_t m, int64_t k, double v) {
    in[0].values[(b * M + m) * K + k] = v;
    in[1].values[(b * K + k) * M + m] = v;
  };
  auto set_b = [&](int64_t k, int64_t n, double v) {
    in[2].values[n * K + k] = v;
    in[3].values[k * N + n] = v;
  };
  for (int64_t b = 0; b < 2; ++b)  // xt and w hold x's and wn's values
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) set_a(b, m, k, in[0].values[(b * M + m) * K + k]);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) set_b(k, n, in[3].values[k * N + n]);
  auto exact_b = [](int64_t k, int64_t n) { return static_cast<double>((n + k) % 7 - 3) / 4 + 0.125; };
  auto exact_a = [](int64_t b, int64_t m) { return static_cast<double>((m + b) % 5 - 2) / 8 + 0.0625; };
  for (int64_t n = 0; n < N; ++n) set_b(17, n, exact_b(17, n));  // tf32-exact, none 0
  for (int64_t n = 0; n < N; ++n) set_b(50, n, exact_b(50, n));
  set_a(0, 5, 17, inf);    // times column 17's tf32-exact values of B
  set_a(1, 9, 30, -inf);   // times inexact values, and against +inf in the same sum: NaN
  set_a(1, 9, 31, inf);
  for (int64_t n = 0; n < N; ++n) set_b(31, n, in[3].values[30 * N + n]);  // so every sum of row 9
  set_a(1, 20, 50, -inf);  // times tf32-exact values, and -inf x -inf at n = 3
  set_b(50, 3, -inf);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t m = 0; m < M; ++m) set_a(b, m, 40, exact_a(b, m));  // tf32-exact, none 0 ...
  set_a(0, 11, 40, 0.0);  // ... but one: 0 x inf is NaN
  set_b(40, 7, inf);      // times A's column 40
  set_b(60, 100, -inf);   // times inexact values
  set_a(1, 60, 90, std::numeric_limits<double>::quiet_NaN());  // a NaN (split ±1 and NaN)
  // The exact products, summed in double: IEEE's infinities and NaN, as fp32 makes them.
  std::vector<double> exact(2 * M * N), magnitude(2 * M * N);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0, size = 0;
        for (int64_t k = 0; k < K; ++k) {
          double p = in[0].values[(b * M + m) * K + k] * in[3].values[k * N + n];
          sum += p;
          size += std::fabs(p);
        }
        exact[(b * M + m) * N + n] = sum;
        magnitude[(b * M + m) * N + n] = size;
      }
  size_t infinite = 0, nan = 0;
  for (double e : exact) {
    infinite += std::isinf(e) ? 1 : 0;
    nan += std::isnan(e) ? 1 : 0;
  }
  ASSERT_GE(infinite, 600u);  // rows 5 (b 0) and 20 (b 1), columns 7 and 100 (both batches)
  ASSERT_GE(nan, 2 * N);      // rows 9 and 60 (b 1), and (11, 7) of b 0
  KernelOutputs runs;
  ASSERT_NO_FATAL_FAILURE(run_tf32x3_kernels(*graph, in, 4, runs));
  for (const auto& [name, outputs] : runs) {
    SCOPED_TRACE(name);
    for (size_t o = 0; o < 4; ++o) {
      const std::vector<double>& got = outputs[o].values;
      ASSERT_EQ(got.size(), exact.size());
      size_t wrong = 0;
      std::string first;
      for (size_t i = 0; i < got.size(); ++i) {
        std::string why = as_fp32_gives(exact[i], got[i], magnitude[i]);
        if (why.empty()) continue;
        if (wrong++ == 0)
          first = std::to_string(i) + ": " + std::to_string(got[i]) + " where fp32 gives " +
                  std::to_string(exact[i]) + " (" + why + ")";
      }
      EXPECT_EQ(wrong, 0u) << "output " << o << ", first " << first;
    }
  }
}

// The same for attention in tf32x3. An infinity in v reaches every row through its weight (never
// 0 here); an infinity of each sign in one column of v makes it NaN. A -inf in q against keys
// that are all positive there makes every score of its row -inf: the row is zeros (the attention
// op's rule). A +inf in a key makes every row whose q is positive there NaN (a +inf score), as
// softmax's, and weighs 0 in the others. The mma.sync kernel (sm_80) and sm_90a's fp32 wgmma
// kernel, whose producer splits q and k.
TEST(EmulatedTf32x3, InfiniteQKAndVGiveWhatFp32Gives) {
  const double inf = std::numeric_limits<double>::infinity();
  auto graph = ir::parse_graph("graph infv {\n  input q: f32[1, 2, 37, 32]\n"
                               "  input k: f32[1, 2, 41, 32]\n  input v: f32[1, 2, 41, 24]\n"
                               "  o = attention(q, k, v, scale=0.25)\n  output o\n}\n",
                               "infv.kg");
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  std::vector<reference::Tensor> in = reference::random_inputs(*graph, 9);
  std::vector<double>&q = in[0].values, &k = in[1].values, &v = in[2].values;
  for (int64_t key = 0; key < 41; ++key) {
    v[(41 + key) * 24 + 3] = 0.25 * (key % 3 - 1) + 0.5;  // tf32-exact
    k[key * 32 + 4] = 0.5 + 0.25 * (key % 3);              // head 0: positive at 4
  }
  v[(41 + 7) * 24 + 3] = inf;   // head 1, column 3: every row +inf
  v[(0 + 2) * 24 + 5] = -inf;   // head 0, column 5: NaN
  v[(0 + 30) * 24 + 5] = inf;
  v[(0 + 11) * 24 + 9] = -inf;  // head 0, column 9: every row -inf
  q[20 * 32 + 4] = -inf;        // head 0, row 20: every score -inf
  k[(41 + 3) * 32 + 0] = inf;   // head 1, key 3: +inf where q[0] > 0
  size_t positive = 0;
  for (int64_t row = 0; row < 37; ++row) positive += q[(37 + row) * 32] > 0 ? 1 : 0;
  ASSERT_GT(positive, 5u);
  ASSERT_LT(positive, 32u);
  KernelOutputs runs;
  ASSERT_NO_FATAL_FAILURE(run_tf32x3_kernels(*graph, in, 1, runs));
  for (const auto& [name, outputs] : runs) {
    SCOPED_TRACE(name);
    const std::vector<double>& o = outputs[0].values;
    ASSERT_EQ(o.size(), 2u * 37 * 24);
    for (size_t e = 0; e < o.size(); ++e) {
      size_t head = e / (37 * 24), row = (e / 24) % 37, col = e % 24;
      if (head == 0 && row == 20) {
        ASSERT_EQ(o[e], 0.0) << e;
      } else if (head == 1 && q[(37 + row) * 32] > 0) {
        ASSERT_TRUE(std::isnan(o[e])) << e << ": " << o[e];
      } else if (head == 1 && col == 3) {
        ASSERT_EQ(o[e], inf) << e;
      } else if (head == 0 && col == 5) {
        ASSERT_TRUE(std::isnan(o[e])) << e << ": " << o[e];
      } else if (head == 0 && col == 9) {
        ASSERT_EQ(o[e], -inf) << e;
      } else {
        ASSERT_TRUE(std::isfinite(o[e])) << e << ": " << o[e];
      }
    }
  }
}

// A matmul of f16 or bf16 operands with out_dtype=f32 gives the fp32 accumulators, not rounded: a
// bias added to it, then one cast, rounds once, as PyTorch's addmm and linear do; a bias added
// to the operands' dtype's product rounds twice. On sm_90a's wgmma kernels and sm_80's mma.sync.
// An attention chain whose second matmul gives f32 fuses, and stores its output unrounded.
const char* k_unrounded_products_graph = R"(graph biased {
  input x: bf16[2, 72, 200]
  input w: bf16[136, 200]
  input b: bf16[136]
  input xh: f16[2, 72, 200]
  input wh: f16[136, 200]
  input bh: f16[136]
  y = cast(add(matmul(x, w, transpose_b=true, out_dtype=f32), cast(b, to=f32)), to=bf16)
  yh = cast(add(matmul(xh, wh, transpose_b=true, out_dtype=f32), cast(bh, to=f32)), to=f16)
  p = matmul(x, w, transpose_b=true, out_dtype=f32)
  input q: bf16[2, 3, 40, 32]
  input k: bf16[2, 3, 56, 32]
  input v: bf16[2, 3, 56, 24]
  s = mul(matmul(q, k, transpose_b=true, out_dtype=f32), 0.125)
  o = matmul(cast(softmax(s, axis=-1), to=bf16), v, out_dtype=f32)
  output y, yh, p, o
}
)";

// `graph` built for sm_90a's wgmma kernels (`wgmma` of them) and for sm_80's mma.sync, named.
void build_half_programs(const ir::Graph& graph, int wgmma,
                         std::vector<std::pair<std::string, Program>>& programs) {
  auto on_wgmma = build(graph);
  ASSERT_TRUE(on_wgmma.ok()) << on_wgmma.error().message;
  ASSERT_EQ(wgmma_kernels(*on_wgmma), wgmma);
  compiler::CompileOptions sm80;
  sm80.target = compiler::Target::cuda(80);
  auto on_mma = build_program(graph, sm80);
  ASSERT_TRUE(on_mma.ok()) << on_mma.error().message;
  programs.emplace_back("wgmma (sm_90a)", std::move(*on_wgmma));
  programs.emplace_back("mma.sync (sm_80)", std::move(*on_mma));
}

TEST(EmulatedHalfMatmul, AnF32ResultIsNotRoundedSoABiasAfterItRoundsOnce) {
  auto graph = ir::parse_graph(k_unrounded_products_graph, "biased.kg");
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  EXPECT_EQ(graph->node(graph->outputs()[2]).type.dtype, ir::DType::f32);
  const std::vector<reference::Tensor> in = reference::random_inputs(*graph, 11);
  const int64_t rows = 2 * 72, N = 136, K = 200;
  std::vector<std::pair<std::string, Program>> programs;
  ASSERT_NO_FATAL_FAILURE(build_half_programs(*graph, 4, programs));
  for (const auto& [name, program] : programs) {
    SCOPED_TRACE(name);
    auto run = program.run(in, Schedule::adversarial());
    ASSERT_TRUE(run.ok()) << run.error().message;
    for (int half = 0; half < 2; ++half) {
      SCOPED_TRACE(half == 0 ? "bf16" : "f16");
      auto round = half == 0 ? reference::round_bf16 : reference::round_f16;
      const std::vector<double>&x = in[3 * half].values, &w = in[3 * half + 1].values,
                        &b = in[3 * half + 2].values, &got = (*run)[half].values;
      ASSERT_EQ(got.size(), static_cast<size_t>(rows * N));
      size_t once = 0, twice = 0;  // elements that differ from each rounding of the exact sum
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < N; ++n) {
          double dot = 0;
          for (int64_t k = 0; k < K; ++k) dot += x[r * K + k] * w[n * K + k];
          double g = got[r * N + n];
          once += g != round(static_cast<float>(dot + b[n])) ? 1 : 0;
          twice += g != round(round(static_cast<float>(dot)) + static_cast<float>(b[n])) ? 1 : 0;
        }
      // fp32 sums in another order than fp64's move an element across a rounding boundary now
      // and then; rounding the product first moves about a quarter of them.
      EXPECT_LE(once, got.size() / 100) << "of " << got.size();
      EXPECT_GE(twice, got.size() / 10) << "of " << got.size();
    }
    // p: fp32 sums, within fp32's accumulation error, most of them not bf16 values.
    const std::vector<double>&x = in[0].values, &w = in[1].values, &p = (*run)[2].values;
    size_t wide = 0, far = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t n = 0; n < N; ++n) {
        double dot = 0, size = 0;
        for (int64_t k = 0; k < K; ++k) {
          dot += x[r * K + k] * w[n * K + k];
          size += std::fabs(x[r * K + k] * w[n * K + k]);
        }
        double g = p[r * N + n];
        far += std::fabs(g - dot) > size * K * 0x1p-24 ? 1 : 0;
        wide += reference::round_bf16(static_cast<float>(g)) != static_cast<float>(g) ? 1 : 0;
      }
    EXPECT_EQ(far, 0u);
    EXPECT_GE(wide, p.size() * 9 / 10) << "of " << p.size();
    const std::vector<double>& o = (*run)[3].values;
    ASSERT_EQ(o.size(), size_t{2 * 3 * 40 * 24});
    EXPECT_GE(std::count_if(o.begin(), o.end(), [](double g) {
                return reference::round_bf16(static_cast<float>(g)) != static_cast<float>(g);
              }),
              static_cast<std::ptrdiff_t>(o.size() * 9 / 10));
    EXPECT_EQ(check(*graph, program, Schedule{}), "");
  }
}
// A long sum of positive f16 products into out_dtype=f32 (K = 16,384): the tensor cores truncate
// the running sum each k step, so its error grows with K (4e-5 on sm_80) past the √K bound of an
// FFMA sum (3.1e-5 here); half_product_tolerance's K u (9.8e-4) holds it, on sm_80's mma.sync and
// sm_90a's wgmma kernel.
TEST(EmulatedHalfMatmul, ALongSumOfPositiveProductsIsWithinItsTolerance) {
  auto graph = ir::parse_graph("graph long {\n  input x: f16[16, 16384]\n  input w: f16[16384, 8]\n"
                               "  y = matmul(x, w, out_dtype=f32)\n  output y\n}\n",
                               "long.kg");
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  std::vector<reference::Tensor> in = reference::random_inputs(*graph, 21);
  for (reference::Tensor& t : in)
    for (double& v : t.values) v = std::fabs(v);
  reference::InputSource inputs{21, {in[0], in[1]}};
  std::vector<std::pair<std::string, Program>> programs;
  ASSERT_NO_FATAL_FAILURE(build_half_programs(*graph, 1, programs));
  for (const auto& [name, program] : programs) {
    auto run = reference::check_against_fp64(
        *graph, ir::Precision::high, inputs,
        [&](const std::vector<reference::Tensor>& x) { return program.run(x, Schedule{}); });
    ASSERT_TRUE(run.ok()) << name << ": " << run.error().message;
    const reference::OutputCheck& y = run->report.outputs.at(0);
    EXPECT_LE(y.rel_l2, y.tolerance) << name;
    EXPECT_GT(y.rel_l2, 3.1e-5 / 4) << name;  // the growth the tolerance is for is there
  }
}

// Outputs of `name` (wgmma_tf32_odd) that differ from the mma.sync kernel's in their bits, the
// wgmma kernel's text edited (each `from`, which must occur, replaced by its `to`) and run under
// `schedule`; or a failure.
testing::AssertionResult differs_from_mma_sync(
    const std::function<std::string(std::string&)>& edit, const Schedule& schedule,
    ir::Precision precision = ir::Precision::high, const std::string& name = "wgmma_tf32_odd") {
  ir::Graph graph = load(name);
  auto request = compiler::check_request(graph, sm90a(precision));
  if (!request) return testing::AssertionFailure() << request.error().message;
  auto lowered = compiler::lower(graph, *request, WgmmaSchedule());
  if (!lowered) return testing::AssertionFailure() << lowered.error().message;
  std::string source = compiler::program_source(*lowered, compiler::Prelude::omit);
  if (std::string failed = edit(source); !failed.empty()) return testing::AssertionFailure() << failed;
  auto edited = build_program_from_source(graph, std::move(*lowered), std::move(source));
  if (!edited) return testing::AssertionFailure() << edited.error().message;
  auto mma = build_program(graph, sm90a(precision));
  if (!mma) return testing::AssertionFailure() << mma.error().message;
  auto inputs = reference::random_inputs(graph, 3);
  auto a = edited->run(inputs, schedule);
  auto b = mma->run(inputs, schedule);
  if (!a) return testing::AssertionSuccess() << "the edited kernel failed: " << a.error().message;
  if (!b) return testing::AssertionFailure() << b.error().message;
  size_t differ = 0;
  for (size_t o = 0; o < a->size(); ++o)
    for (size_t i = 0; i < (*a)[o].values.size(); ++i)
      differ += (*a)[o].values[i] != (*b)[o].values[i] ? 1 : 0;
  if (differ == 0) return testing::AssertionFailure() << "the outputs agree bit for bit";
  return testing::AssertionSuccess() << differ << " elements differ";
}

testing::AssertionResult differs_from_mma_sync(const std::string& from, const std::string& to,
                                               const Schedule& schedule,
                                               ir::Precision precision = ir::Precision::high,
                                               const std::string& name = "wgmma_tf32_odd") {
  return differs_from_mma_sync(
      [&](std::string& source) -> std::string {
        size_t at = source.find(from);
        if (at == std::string::npos) return "'" + from + "' does not occur";
        while (at != std::string::npos) {
          source.replace(at, from.size(), to);
          at = source.find(from, at + to.size());
        }
        return "";
      },
      schedule, precision, name);
}

TEST(EmulatedWgmmaTf32, SkippingTheRoundingPassIsCaught) {
  // wgmma then reads the fp32 bits (the emulator truncates them to tf32, as it does mma.sync's
  // operands): within the mode's tolerance, but no longer the mma.sync kernel's bits. A's
  // fragments unrounded in registers, or B left unrounded in the stage.
  auto a_unrounded = differs_from_mma_sync("af[h][ks][r] = kiln_cvt_rna_tf32(x);",
                                          "af[h][ks][r] = kiln_as_uint(x);", Schedule{});
  EXPECT_TRUE(a_unrounded);
  EXPECT_NE(std::string(a_unrounded.message()).find("elements differ"), std::string::npos)
      << a_unrounded.message();
  EXPECT_TRUE(differs_from_mma_sync("rb[i] = kiln_as_float(kiln_cvt_rna_tf32(rb[i]));", ";",
                                    Schedule{}));
}

TEST(EmulatedWgmmaTf32, AFragmentsReadOutOfPlaceAreCaught) {
  // A from registers: the rows and k of a register swapped (r & 1 picks k, r >> 1 the row), or
  // the stage read without TMA's swizzle.
  // (the outputs differ: neither stops the kernel)
  for (auto [from, to] : {std::pair{"g + 8 * (r & 1), k = ks * 8 + t4 + 4 * (r >> 1)",
                                    "g + 8 * (r >> 1), k = ks * 8 + t4 + 4 * (r & 1)"},
                          std::pair{"fa[m * 32 + (((k >> 2) ^ (m & 7)) << 2) + (k & 3)]",
                                    "fa[m * 32 + ((k >> 2) << 2) + (k & 3)]"}}) {
    auto result = differs_from_mma_sync(from, to, Schedule{});
    EXPECT_TRUE(result) << from;
    EXPECT_NE(std::string(result.message()).find("elements differ"), std::string::npos)
        << result.message();
  }
}

TEST(EmulatedWgmmaTf32, OneSetOfAFragmentsIsWrittenUnderTheWgmmasReadingIt) {
  // tf32 keeps two sets of A's fragments: a stage's wgmmas read theirs until the next stage's
  // wait_group 1. With one set, the next stage's fragments are written while they are in
  // flight: an error under every schedule.
  for (const Schedule& schedule : {Schedule{}, Schedule::adversarial()}) {
    auto result = differs_from_mma_sync("af[h]", "af[0]", schedule);
    EXPECT_TRUE(result) << result.message();
    EXPECT_NE(std::string(result.message()).find("wrote A's registers"), std::string::npos)
        << result.message();
  }
}

TEST(EmulatedWgmmaTf32, AFragmentsWrittenAfterTheWgmmaFenceAreCaught) {
  // wgmma.fence orders the registers' writes before the wgmmas that read them: with the fence
  // moved above the loads of A's fragments, the wgmmas read registers written after it. An error
  // from the first k tile whose registers an earlier wgmma read (the third in tf32, whose two
  // sets alternate; the second in tf32x3), under the kind and the adversarial schedule.
  auto fence_before_a = [](std::string& source) -> std::string {
    const std::string fence = "kiln_wgmma_fence();\n", loads = "// A from registers";
    size_t moved = 0;
    for (size_t at = source.find(fence); at != std::string::npos; ++moved) {
      size_t start = source.rfind('\n', at) + 1;
      source.erase(start, at + fence.size() - start);
      at = source.find(fence, start);
    }
    for (size_t at = source.find(loads); at != std::string::npos;
         at = source.find(loads, at + fence.size() + loads.size())) {
      source.insert(at, fence);
      --moved;
    }
    return moved == 0 ? "" : "the fences and A's loads do not pair";
  };
  for (ir::Precision precision : {ir::Precision::high, ir::Precision::tf32x3}) {
    for (const Schedule& schedule : {Schedule{}, Schedule::adversarial()}) {
      auto result = differs_from_mma_sync(fence_before_a, schedule, precision);
      EXPECT_TRUE(result) << result.message();
      std::string message = result.message();
      EXPECT_NE(message.find("wrote A's registers after its last wgmma.fence"), std::string::npos)
          << message;
    }
  }
}

TEST(EmulatedWgmmaTf32, ATransposedBMisplacedOrUnroundedIsCaught) {
  // B [K, N]: the staging area read without TMA's swizzle, B written K-major without the swizzle
  // wgmma's descriptor reads, or written unrounded.
  EXPECT_TRUE(differs_from_mma_sync("((((n & 31) >> 2) ^ (k & 7)) << 2)", "(((n & 31) >> 2) << 2)",
                                    Schedule{}));
  EXPECT_TRUE(differs_from_mma_sync("(((k >> 2) ^ (n & 7)) << 2)", "((k >> 2) << 2)", Schedule{}));
  EXPECT_TRUE(differs_from_mma_sync("= kiln_as_float(kiln_cvt_rna_tf32(x));", "= x;", Schedule{}));
}

TEST(EmulatedWgmmaTf32, Tf32x3sSmallPartsAreNeededRoundedAndSummedApart) {
  const ir::Precision x3 = ir::Precision::tf32x3;
  // Either small part left out of its product (zeros where it lies), or written unrounded.
  EXPECT_TRUE(differs_from_mma_sync("afs[ks][r] = kiln_cvt_rna_tf32(x - kiln_as_float(big));",
                                    "afs[ks][r] = 0u;", Schedule{}, x3));
  EXPECT_TRUE(differs_from_mma_sync("afs[ks][r] = kiln_cvt_rna_tf32(x - kiln_as_float(big));",
                                    "afs[ks][r] = kiln_as_uint(x - kiln_as_float(big));",
                                    Schedule{}, x3));
  EXPECT_TRUE(differs_from_mma_sync("rbs[i] = kiln_as_float(kiln_cvt_rna_tf32(x - big));",
                                    "rbs[i] = 0.0f;", Schedule{}, x3));
  EXPECT_TRUE(differs_from_mma_sync("rbs[at] = kiln_as_float(kiln_cvt_rna_tf32(x - big));",
                                    "rbs[at] = x - big;", Schedule{}, x3));
  // The k tiles summed on the tensor cores into acc (truncated) instead of apart in fp32.
  EXPECT_TRUE(differs_from_mma_sync(
      [](std::string& source) -> std::string {
        for (const char* from : {"(part, afs[ks], db, ks > 0 ? 1 : 0)", "acc[v] += part[v]"})
          if (source.find(from) == std::string::npos) return std::string("no '") + from + "'";
        auto replace_all = [&](const std::string& from, const std::string& to) {
          for (size_t at = source.find(from); at != std::string::npos; at = source.find(from, at + to.size()))
            source.replace(at, from.size(), to);
        };
        replace_all("(part, afs[ks], db, ks > 0 ? 1 : 0)", "(acc, afs[ks], db, 1)");
        replace_all("(part, af[0][ks], dbs, 1)", "(acc, af[0][ks], dbs, 1)");
        replace_all("(part, af[0][ks], db, 1)", "(acc, af[0][ks], db, 1)");
        replace_all("(part, das, db, ks > 0 ? 1 : 0)", "(acc, das, db, 1)");
        replace_all("(part, da, dbs, 1)", "(acc, da, dbs, 1)");
        replace_all("(part, da, db, 1)", "(acc, da, db, 1)");
        replace_all("acc[v] += part[v]", "(void)0");
        return "";
      },
      Schedule{}, x3));
}

TEST(EmulatedWgmmaTf32, MediumsConversionMisplacedIsCaught) {
  // A's staging area read without TMA's swizzle, B [K, N] written without the 16-bit kernel's.
  const ir::Precision medium = ir::Precision::medium;
  EXPECT_TRUE(differs_from_mma_sync("r * 32 + ((((k & 31) >> 2) ^ (r & 7)) << 2)",
                                    "r * 32 + (((k & 31) >> 2) << 2)", Schedule{}, medium));
  EXPECT_TRUE(differs_from_mma_sync("((((n & 63) >> 3) ^ (k & 7)) << 3)", "(((n & 63) >> 3) << 3)",
                                    Schedule{}, medium));
  // The converted stage published without its fence: wgmma reads what was there before.
  EXPECT_TRUE(differs_from_mma_sync(
      "kiln_pack_bf16x2(f[0], f[1]);\n          }\n          kiln_fence_proxy_async();",
      "kiln_pack_bf16x2(f[0], f[1]);\n          }\n          (void)0;", Schedule{}, medium));
}

TEST(EmulatedWgmmaTf32, ARoundingPassWithoutItsFenceIsReadUnrounded) {
  // The rounded values stay in the generic proxy: wgmma reads what TMA wrote.
  // (the fence before each `rounded` arrival dropped, at whatever indentation)
  auto drop_fence = [](std::string& source) -> std::string {
    const std::string fence = "kiln_fence_proxy_async();", arrive = "kiln_mbarrier_arrive(&rounded[s]);";
    int dropped = 0;
    for (size_t at = source.find(arrive); at != std::string::npos; at = source.find(arrive, at + 1)) {
      size_t line = source.rfind('\n', at);
      size_t before = source.rfind('\n', line - 1);
      size_t first = source.find_first_not_of(' ', before + 1);
      if (source.compare(first, fence.size(), fence) != 0) continue;
      source.erase(before + 1, line - before);
      at = before + 1;
      ++dropped;
    }
    return dropped > 0 ? "" : "no fence before a rounded arrival";
  };
  EXPECT_TRUE(differs_from_mma_sync(drop_fence, Schedule{}));
}

TEST(EmulatedWgmmaTf32, ATransposedAMisplacedUnroundedOrUnsplitIsCaught) {
  // A [K, M]: the staging area read without TMA's swizzle, A written K-major without the swizzle
  // wgmma's descriptor reads, written unrounded, or (tf32x3) its small part left out; medium:
  // A's staging area read without TMA's swizzle, or A written without the 16-bit kernel's.
  const std::string graph = "wgmma_transpose_a_odd";
  const ir::Precision high = ir::Precision::high, x3 = ir::Precision::tf32x3,
                      medium = ir::Precision::medium;
  EXPECT_TRUE(differs_from_mma_sync("((((m & 31) >> 2) ^ (k & 7)) << 2)", "(((m & 31) >> 2) << 2)",
                                    Schedule{}, high, graph));
  EXPECT_TRUE(differs_from_mma_sync("(((k >> 2) ^ (m & 7)) << 2)", "((k >> 2) << 2)", Schedule{},
                                    high, graph));
  EXPECT_TRUE(differs_from_mma_sync("ra[at] = kiln_as_float(kiln_cvt_rna_tf32(x));", "ra[at] = x;",
                                    Schedule{}, high, graph));
  EXPECT_TRUE(differs_from_mma_sync("ras[at] = kiln_as_float(kiln_cvt_rna_tf32(x - big));",
                                    "ras[at] = 0.0f;", Schedule{}, x3, graph));
  EXPECT_TRUE(differs_from_mma_sync("((((m & 31) >> 2) ^ (k & 7)) << 2)", "(((m & 31) >> 2) << 2)",
                                    Schedule{}, medium, graph));
  EXPECT_TRUE(differs_from_mma_sync("((((m & 63) >> 3) ^ (k & 7)) << 3)", "(((m & 63) >> 3) << 3)",
                                    Schedule{}, medium, graph));
}

// Whether the edited kernel stopped with the emulator's error for shared memory that changed
// under a wgmma in flight.
bool changed_under_wgmma(const testing::AssertionResult& result) {
  return result && std::string(result.message()).find("changed between its issue and the wait_group") !=
                       std::string::npos;
}

TEST(EmulatedWgmmaTf32, ABatchCoordinateSwappedOrDroppedIsCaught) {
  // wgmma_batched_odd's maps: inner and outer batch coordinates swapped (A and B of [2, 3]); B
  // broadcast over the heads read at outer batch 0; the rank-5 map's two outer coordinates
  // swapped; B broadcast over the outer batch read at head 0.
  for (auto [from, to] : {std::pair{"(bz % 3), (bz / 3), &full", "(bz / 3), (bz % 3), &full"},
                          std::pair{"bn0, (bz / 3), &full", "bn0, 0, &full"},
                          std::pair{"((bz / 3) % 2), (bz / 6)", "(bz / 6), ((bz / 3) % 2)"},
                          std::pair{"kt * 32, (bz % 3), &full", "kt * 32, 0, &full"}}) {
    SCOPED_TRACE(from);
    EXPECT_TRUE(differs_from_mma_sync(from, to, Schedule{}, ir::Precision::high,
                                      "wgmma_batched_odd"));
  }
}

TEST(EmulatedWgmmaTf32, RoundingAStageUnderItsWgmmasIsAnErrorUnderEverySchedule) {
  // The rounding pass (B's: A's fragments are rounded in registers) moved after the stage's
  // wgmmas are issued: hardware may read the operands
  // raw (at issue) or rounded (later), and the emulator, reading them at issue and again at
  // the wait_group, reports the change.
  auto move_pass = [](std::string& source) -> std::string {
    size_t start = source.find("// round B in place");
    if (start == std::string::npos) return "no rounding pass";
    start = source.rfind('\n', start) + 1;
    size_t end = source.find("kiln_wgmma_fence();", start);
    end = source.rfind('\n', end) + 1;
    std::string pass = source.substr(start, end - start);
    source.erase(start, end - start);
    size_t commit = source.find("kiln_wgmma_commit();\n", start);
    if (commit == std::string::npos) return "no commit after the pass";
    source.insert(commit + std::string("kiln_wgmma_commit();\n").size(), pass);
    return "";
  };
  for (const Schedule& schedule : k_schedules) {
    auto result = differs_from_mma_sync(move_pass, schedule);
    EXPECT_TRUE(changed_under_wgmma(result)) << result.message();
  }
}

TEST(EmulatedWgmmaTf32, AConsumerThatSkipsTheRoundedWaitIsCaught) {
  // Each consumer rounds half of the stage, then waits on `rounded` for the other's half. One
  // that does not wait issues wgmmas over a half the other may still be rewriting: the
  // adversarial schedule runs the last warpgroup ahead, into a stage the other consumer has not
  // rounded yet, and that rounding changes the operands of wgmmas in flight.
  auto skip_wait = [](std::string& source) -> std::string {
    const std::string wait = "kiln_mbarrier_wait(&rounded[s], ";
    size_t at = source.find(wait);
    if (at == std::string::npos) return "no rounded wait";
    for (; at != std::string::npos; at = source.find(wait, at)) source.erase(at, source.find('\n', at) - at);
    return "";
  };
  auto result = differs_from_mma_sync(skip_wait, Schedule::adversarial());
  EXPECT_TRUE(changed_under_wgmma(result)) << result.message();
}

TEST(EmulatedWgmmaTf32, ATf32x3StageReleasedBeforeItsWgmmasRetireIsCaught) {
  // tf32x3 waits for a stage's wgmmas (wait_group 0) before releasing it: released first, the
  // producer refills it while they are in flight (its copies landing at issue: adversarial).
  auto result = differs_from_mma_sync(
      "kiln_wgmma_wait<0>();\n        kiln_mbarrier_arrive(&empty[s]);",
      "kiln_mbarrier_arrive(&empty[s]);\n        kiln_wgmma_wait<0>();", Schedule::adversarial(),
      ir::Precision::tf32x3);
  EXPECT_TRUE(changed_under_wgmma(result)) << result.message();
}

TEST(EmulatedWgmmaPersistent, BlockCountsFrom1To132EachCoverEveryTile) {
  ir::Graph graph = load("wgmma_tiles_odd");
  auto program = build(graph);
  ASSERT_TRUE(program.ok()) << program.error().message;
  ASSERT_EQ(wgmma_kernels(*program), 1);
  // 20 work tiles, taken round-robin: one block for all, even shares (2), uneven ones (3, 7;
  // 19: one block takes two), one tile a block (20), and 112 blocks with none (132, an H100's
  // SMs). Not every count from 1 to 132: each block takes 20 / count tiles rounded down or up,
  // and these counts give each kind of share.
  for (uint32_t blocks : {1u, 2u, 3u, 7u, 19u, 20u, 132u}) {
    SCOPED_TRACE("blocks " + std::to_string(blocks));
    Schedule schedule = Schedule::seeded_by(blocks);
    schedule.sm_count = blocks;
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
}

// Symbolic graphs on the wgmma kernels: one bucket's build at the bucket's bounds and sizes
// between (partial tiles, the upper bound), against fp64 under the kind and the adversarial
// schedule, in every mode the matmul kernel computes, and attention. S is a row
// count (x; b4's, a 4-D matmul whose B is broadcast over the heads), a column count (nn's N,
// its B K-major) and a batch (bz; bt's A read as [K, M]; s4's outer batch dim, a dim of its A's
// rank-4 map). A contraction over S stays on mma.sync: A's rows are then S elements, not 16-byte
// multiples at every S (tk).
const char* k_symbolic_wgmma_graph = R"(graph symwg {
  dim S: 1..300
  input x: f32[S, 48]
  input w: f32[48, 40]
  input wt: f32[40, 48]
  input b: f32[40]
  input z: f32[S, 5, 48]
  input t: f32[4, S]
  input zt: f32[S, 48, 8]
  input q4: f32[2, 3, S, 48]
  input w4: f32[2, 1, 48, 40]
  h = gelu(add(matmul(x, w), b))
  g = matmul(x, wt, transpose_b=true)
  nn = matmul(wt, x, transpose_b=true)
  bz = matmul(z, w)
  tk = matmul(t, x)
  bt = matmul(zt, w, transpose_a=true)
  b4 = matmul(q4, w4)
  output h, g, nn, bz, tk, bt, b4
}
)";

const char* k_symbolic_wgmma_half_graph = R"(graph symwgh {
  dim S: 1..300
  input x: bf16[S, 48]
  input w: bf16[48, 40]
  input wt: bf16[40, 48]
  input z: bf16[S, 5, 48]
  input t: bf16[4, S]
  input zt: bf16[S, 48, 8]
  input q4: bf16[2, 3, S, 48]
  input w4: bf16[2, 1, 48, 40]
  input z4: bf16[S, 2, 3, 48]
  h = relu(matmul(x, w))
  nn = matmul(wt, x, transpose_b=true)
  bz = matmul(z, w)
  tk = matmul(t, x)
  bt = matmul(zt, w, transpose_a=true)
  b4 = matmul(q4, w4)
  s4 = matmul(z4, w)
  output h, nn, bz, tk, bt, b4, s4
}
)";

// Attention at a symbolic sequence length: grouped heads (4 q heads, 2 kv heads), v broadcast
// over the batch, causal (the key tiles a query tile reaches follow S) and not.
const char* k_symbolic_attention_graph = R"(graph symatt {
  dim S: 1..300
  input q: bf16[2, 4, S, 64]
  input k: bf16[2, 2, S, 64]
  input v: bf16[1, 2, S, 64]
  input kf: bf16[2, 4, S, 64]
  o = attention(q, k, v, causal=true)
  f = attention(q, kf, kf)
  output o, f
}
)";

// The same in fp32 (`medium`, `high` and `tf32x3`: the producer loads and converts, rounds or
// splits q, k and v, no maps), the key tiles' bounds and the grouped heads' offsets read from S.
const char* k_symbolic_attention_f32_graph = R"(graph symattf {
  dim S: 1..300
  input q: f32[2, 4, S, 64]
  input k: f32[2, 2, S, 64]
  input v: f32[1, 2, S, 64]
  input kf: f32[2, 4, S, 64]
  o = attention(q, k, v, causal=true)
  f = attention(q, kf, kf)
  output o, f
}
)";

// Attention over a symbolic batch (rank 3: B is the maps' third dim), queries fewer than keys.
const char* k_symbolic_batch_attention_graph = R"(graph symbatch {
  dim B: 1..64
  input q: f16[B, 40, 64]
  input k: f16[B, 72, 64]
  input v: f16[B, 72, 128]
  o = attention(q, k, v)
  output o
}
)";

// Matmuls with several batch dims over a symbolic dim: B the inner batch dim of a 4-D result
// (its coordinate bz % B, its maps' dims and strides size terms) and the outermost of a 5-D
// one whose A holds all three batch dims (a rank-5 map of 9 size terms).
const char* k_symbolic_batched_graph = R"(graph symbatched {
  dim B: 1..8
  input x: bf16[2, B, 40, 48]
  input w: bf16[48, 40]
  input y: bf16[B, 2, 3, 24, 48]
  input wy: bf16[3, 48, 40]
  a = matmul(x, w)
  b = matmul(y, wy)
  output a, b
}
)";

struct SymbolicCase {
  const char* graph;
  ir::Precision precision;
  compiler::DimRange bucket;
  std::vector<int64_t> sizes;
  int wgmma_kernels;  // of the bucket's build
};

void PrintTo(const SymbolicCase& c, std::ostream* os) {
  *os << ir::to_string(c.precision) << ", bucket [" << c.bucket.lo << ", " << c.bucket.hi << "]";
}

class EmulatedWgmmaSymbolic : public ::testing::TestWithParam<SymbolicCase> {};

TEST_P(EmulatedWgmmaSymbolic, OneBucketsBuildMatchesFp64AtEverySize) {
  const SymbolicCase& c = GetParam();
  auto parsed = ir::parse_graph(c.graph, "sym.kg");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const ir::Graph& graph = *parsed;
  compiler::CompileOptions options = sm90a(c.precision);
  options.bucket = {c.bucket};
  auto request = compiler::check_request(graph, options);
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto lowered = compiler::lower(graph, *request, WgmmaSchedule());
  ASSERT_TRUE(lowered.ok()) << lowered.error().message;
  auto program = build_program(graph, std::move(*lowered));
  ASSERT_TRUE(program.ok()) << program.error().message;
  // Every matmul but tk (M = 4) on wgmma, every map following the dims; two maps or more for
  // each wgmma kernel but an attention converting fp32 operands, which reads them itself.
  for (const auto& k : program->lowered().plan.kernels) {
    if (k.group.kind == compiler::GroupKind::matmul) {
      EXPECT_EQ(k.tile.wgmma, k.shape.m != 4) << k.name;
    }
    int maps = 0;
    for (const compiler::KernelParam& p : k.params) {
      if (p.kind != compiler::ParamKind::tensor_map) continue;
      EXPECT_FALSE(p.map_terms.empty()) << k.name;
      ++maps;
    }
    bool wgmma = k.tile.wgmma || k.attention_tile.wgmma;
    if (wgmma && compiler::wgmma_attention_loads(k.attention_shape)) {
      EXPECT_EQ(maps, 0) << k.name;
    } else if (wgmma) {
      EXPECT_GE(maps, 2) << k.name;
    }
  }
  EXPECT_EQ(wgmma_kernels(*program), c.wgmma_kernels);
  for (int64_t size : c.sizes) {
    SCOPED_TRACE("at " + std::to_string(size));
    auto bound = graph.bind({size});
    ASSERT_TRUE(bound.ok()) << bound.error().message;
    for (const Schedule& schedule : {Schedule{}, Schedule::adversarial()}) {
      SCOPED_TRACE("schedule " + to_string(schedule));
      auto report = reference::check_against_fp64(
          *bound, program->lowered().precision.graph_mode, 5,
          [&](const std::vector<reference::Tensor>& inputs) {
            return program->run(inputs, schedule);
          });
      ASSERT_TRUE(report.ok()) << report.error().message;
      for (const reference::OutputCheck& o : report->outputs)
        EXPECT_TRUE(o.ok) << o.name << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
    }
  }
}

// ---- a padding mask of the lowest float, as transformers writes one ----

// finfo(float32).min and finfo(bfloat16).min overflow the kernel's base-2 scores past
// FLT_MAX / log2(e): on the wgmma attention kernel (bf16 through TMA, and `high` loading fp32
// itself), rows 3 and 20, masked whole by it, average v as the fp64 reference does (not zeros).
TEST(EmulatedWgmmaAttention, TheLowestFloatMasksAKeyAsPyTorchDoes) {
  for (const char* t : {"bf16", "f32"}) {
    SCOPED_TRACE(t);
    double lowest = std::string(t) == "f32" ? -3.4028234663852886e38 : -3.3895313892515355e38;
    auto graph = ir::parse_graph(std::string("graph padded {\n  input q: ") + t +
                                     "[2, 2, 37, 64]\n  input k: " + t +
                                     "[2, 2, 41, 64]\n  input v: " + t + "[2, 2, 41, 64]\n"
                                     "  input m: " + t + "[2, 1, 37, 41]\n"
                                     "  o = attention(q, k, v, mask=m, scale=0.125)\n"
                                     "  output o\n}\n",
                                 "padded.kg");
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    auto program = build(*graph);
    ASSERT_TRUE(program.ok()) << program.error().message;
    ASSERT_EQ(wgmma_kernels(*program), 1);
    reference::Tensor mask = reference::zeros(graph->node(graph->inputs()[3]).type);
    for (size_t e = 0; e < mask.values.size(); ++e) {
      size_t row = (e / 41) % 37, key = e % 41;
      if (key > 30 || row == 3 || row == 20) mask.values[e] = lowest;
    }
    reference::InputSource inputs{13, {std::nullopt, std::nullopt, std::nullopt, mask}};
    for (const Schedule& schedule : {Schedule{}, Schedule::adversarial()}) {
      SCOPED_TRACE("schedule " + to_string(schedule));
      auto report = reference::check_against_fp64(
          *graph, program->lowered().precision.graph_mode, inputs,
          [&](const std::vector<reference::Tensor>& in) { return program->run(in, schedule); });
      ASSERT_TRUE(report.ok()) << report.error().message;
      for (const reference::OutputCheck& o : report->report.outputs)
        EXPECT_TRUE(o.ok) << o.name << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
      double row3 = 0.0;
      for (size_t c = 0; c < 64; ++c) row3 += std::abs(report->actual[0].values[3 * 64 + c]);
      EXPECT_GT(row3, 0.0) << "row 3 averages v";
    }
  }
}

// ---- an attention's batch folded over the grid's y and z (past 65535 batches) ----

// WgmmaSchedule's tiles (the model's where sm_90a's kernels do not compute the problem), with a
// grid z of 3 batches: a batch past it folds over y, as one past 65535 does on hardware.
class FoldingSchedule final : public compiler::ScheduleProvider {
public:
  compiler::MatmulTile matmul_tile(const compiler::MatmulShape& shape, int sm) const override {
    return m_wgmma.matmul_tile(shape, sm);
  }
  compiler::AttentionTile attention_tile(const compiler::AttentionShape& shape, int sm) const override {
    return m_wgmma.attention_tile(shape, sm);
  }
  int64_t grid_limit() const override { return 3; }
  std::string source() const override { return "fixed"; }
  std::string key() const override { return "wgmma, folded"; }

private:
  WgmmaSchedule m_wgmma;
};

// `graph` lowered for `options` with FoldingSchedule (every attention's batch over 3 folded),
// matching fp64 under every schedule; a symbolic graph (a bucket in `options`) at each of
// `sizes`. Returns how many attention kernels ran on the wgmma kernel.
int expect_folded_attention_matches(const char* text, const compiler::CompileOptions& options,
                                    const std::vector<int64_t>& sizes = {}) {
  auto parsed = ir::parse_graph(text, "fold.kg");
  EXPECT_TRUE(parsed.ok()) << parsed.error().message;
  if (!parsed) return -1;
  const ir::Graph& graph = *parsed;
  auto request = compiler::check_request(graph, options);
  EXPECT_TRUE(request.ok()) << request.error().message;
  if (!request) return -1;
  auto lowered = compiler::lower(graph, *request, FoldingSchedule());
  EXPECT_TRUE(lowered.ok()) << lowered.error().message;
  if (!lowered) return -1;
  int folded = 0, wgmma = 0;
  for (const compiler::KernelPlan& k : lowered->plan.kernels) {
    if (k.group.kind != compiler::GroupKind::attention) continue;
    int64_t fold = (k.attention_shape.batch + 2) / 3;
    EXPECT_GT(fold, 1) << k.name;
    EXPECT_EQ(k.batch_fold, fold) << k.name;
    EXPECT_EQ(k.launch.grid[1], static_cast<uint32_t>(fold * k.attention_tile.dv_slabs)) << k.name;
    EXPECT_EQ(k.launch.grid[2], static_cast<uint32_t>((k.attention_shape.batch + fold - 1) / fold))
        << k.name;
    ++folded;
    wgmma += k.attention_tile.wgmma ? 1 : 0;
  }
  EXPECT_GT(folded, 0);
  std::string source = compiler::program_source(*lowered, compiler::Prelude::omit);
  EXPECT_NE(source.find("(int)gridDim.z * ("), std::string::npos);
  auto program = build_program(graph, std::move(*lowered));
  EXPECT_TRUE(program.ok()) << program.error().message;
  if (!program) return -1;
  if (options.bucket.empty()) {
    for (const Schedule& schedule : k_schedules)
      EXPECT_EQ(check(graph, *program, schedule), "") << "schedule " << to_string(schedule);
    return wgmma;
  }
  for (int64_t size : sizes) {
    auto bound = graph.bind({size});
    EXPECT_TRUE(bound.ok()) << bound.error().message;
    if (!bound) continue;
    auto report = reference::check_against_fp64(
        *bound, program->lowered().precision.graph_mode, 5,
        [&](const std::vector<reference::Tensor>& inputs) { return program->run(inputs); });
    EXPECT_TRUE(report.ok()) << report.error().message;
    if (!report) continue;
    for (const reference::OutputCheck& o : report->outputs)
      EXPECT_TRUE(o.ok) << "at " << size << ": " << o.name << " rel_l2 " << o.rel_l2;
  }
  return wgmma;
}

// Batches 8 (rank 4, grouped heads) and 5 in grids of 3 along z: 3 x 3 and 2 x 3 batch slots, the
// last ones empty; v's head dim 200 in two slabs on sm_80 (y holds slabs x folds).
const char* k_folded_attention_graph = R"(graph fold {
  input q: f32[2, 4, 40, 24]
  input k: f32[2, 2, 70, 24]
  input v: f32[2, 2, 70, 200]
  input q2: f32[5, 33, 64]
  input k2: f32[5, 50, 64]
  input v2: f32[5, 50, 64]
  o = attention(q, k, v, causal=true)
  o2 = attention(q2, k2, v2)
  output o, o2
}
)";

TEST(EmulatedFoldedAttention, EveryAttentionKernelFindsItsBatchFoldedOverYAndZ) {
  compiler::CompileOptions sm80;
  sm80.target = compiler::Target::cuda(80);
  for (ir::Precision precision : {ir::Precision::high, ir::Precision::highest, ir::Precision::tf32x3}) {
    sm80.precision = precision;
    SCOPED_TRACE("sm_80 " + std::string(ir::to_string(precision)));
    EXPECT_EQ(expect_folded_attention_matches(k_folded_attention_graph, sm80), 0);
  }
  // sm_90a's attention kernel: fp32 loaded by its producer (`high`: o2; o's d_v is over 128),
  // and 16-bit through TMA, whose coordinates follow the folded batch
  {
    SCOPED_TRACE("sm_90a high");
    EXPECT_EQ(expect_folded_attention_matches(k_folded_attention_graph, sm90a()), 1);
  }
  std::string half = k_folded_attention_graph;
  for (size_t at = half.find("f32"); at != std::string::npos; at = half.find("f32", at))
    half.replace(at, 3, "bf16");
  SCOPED_TRACE("sm_90a bf16");
  EXPECT_EQ(expect_folded_attention_matches(half.c_str(), sm90a()), 2);
}

TEST(EmulatedFoldedAttention, ASymbolicBatchFoldsWithItsGridTerms) {
  compiler::CompileOptions options = sm90a();
  options.bucket = {compiler::DimRange{5, 8}};
  EXPECT_EQ(expect_folded_attention_matches(k_symbolic_batch_attention_graph, options, {5, 7, 8}), 1);
}

std::string symbolic_case_name(const ::testing::TestParamInfo<SymbolicCase>& info) {
  const SymbolicCase& c = info.param;
  std::string graph = c.graph == k_symbolic_wgmma_graph        ? "f32"
                      : c.graph == k_symbolic_wgmma_half_graph ? "bf16"
                      : c.graph == k_symbolic_attention_graph  ? "attention"
                      : c.graph == k_symbolic_attention_f32_graph ? "attention_f32"
                      : c.graph == k_symbolic_batched_graph    ? "batched"
                                                               : "batch_attention";
  return graph + "_" + std::string(ir::to_string(c.precision));
}

INSTANTIATE_TEST_SUITE_P(
    Sm90a, EmulatedWgmmaSymbolic,
    ::testing::Values(
        SymbolicCase{k_symbolic_wgmma_graph, ir::Precision::high, {129, 256}, {129, 130, 200, 256}, 6},
        SymbolicCase{k_symbolic_wgmma_graph, ir::Precision::tf32x3, {129, 256}, {129, 256}, 6},
        SymbolicCase{k_symbolic_wgmma_graph, ir::Precision::medium, {129, 256}, {130, 256}, 6},
        SymbolicCase{k_symbolic_wgmma_half_graph, ir::Precision::high, {129, 256}, {129, 200, 256}, 6},
        SymbolicCase{k_symbolic_attention_graph, ir::Precision::high, {129, 256}, {129, 200, 256}, 2},
        SymbolicCase{k_symbolic_attention_f32_graph, ir::Precision::medium, {129, 256}, {129, 200, 256}, 2},
        SymbolicCase{k_symbolic_attention_f32_graph, ir::Precision::high, {129, 256}, {129, 256}, 2},
        SymbolicCase{k_symbolic_attention_f32_graph, ir::Precision::tf32x3, {129, 256}, {129, 256}, 2},
        SymbolicCase{k_symbolic_batch_attention_graph, ir::Precision::high, {5, 8}, {5, 8}, 1},
        SymbolicCase{k_symbolic_batched_graph, ir::Precision::high, {5, 8}, {5, 7, 8}, 2}),
    symbolic_case_name);

// The attention examples on sm_90a in every precision mode, with the model's schedule: f16
// attention_causal on the wgmma attention kernel (the mode changes nothing for 16-bit
// operands), f32 attention on the mma.sync and FFMA kernels as on sm_90 (the model keeps fp32
// attention off the wgmma kernel, whose producer's loads are unmeasured).
class EmulatedSm90aExample
    : public ::testing::TestWithParam<std::tuple<const char*, ir::Precision>> {};

TEST_P(EmulatedSm90aExample, MatchesTheFp64ReferenceWithTheModelsSchedule) {
  auto [name, precision] = GetParam();
  ir::Graph graph = load(name);
  compiler::CompileOptions options = sm90a();
  options.precision = precision;
  auto program = build_program(graph, options);
  ASSERT_TRUE(program.ok()) << program.error().message;
  for (const Schedule& schedule : {Schedule{}, Schedule::adversarial()}) {
    SCOPED_TRACE("schedule " + to_string(schedule));
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sm90a, EmulatedSm90aExample,
    ::testing::Combine(::testing::Values("examples/attention_causal", "examples/attention"),
                       ::testing::Values(ir::Precision::highest, ir::Precision::high,
                                         ir::Precision::tf32x3, ir::Precision::medium,
                                         ir::Precision::automatic)));

// Every example graph on sm_90a in every precision mode, with the wgmma kernels wherever they
// compute a matmul or an attention (the model would keep these small grids on mma.sync): the
// matmuls of every tensor-core mode, 16-bit and fp32, the attention kernel, and the kernels that
// stay (highest's FFMA, fp32 attention in tf32x3, symbolic graphs) beside them.
class EmulatedSm90aExampleOnWgmma
    : public ::testing::TestWithParam<std::tuple<const char*, ir::Precision>> {};

TEST_P(EmulatedSm90aExampleOnWgmma, MatchesTheFp64Reference) {
  auto [name, precision] = GetParam();
  ir::Graph graph = load(name);
  auto program = build(graph, {}, precision);
  ASSERT_TRUE(program.ok()) << program.error().message;
  EXPECT_EQ(check(graph, *program, Schedule{}), "");
}

INSTANTIATE_TEST_SUITE_P(
    Sm90a, EmulatedSm90aExampleOnWgmma,
    ::testing::Combine(::testing::Values("examples/mlp", "examples/gated_mlp",
                                         "examples/half_epilogue", "examples/mixed_head",
                                         "examples/bert_layer", "examples/attention",
                                         "examples/attention_causal"),
                       ::testing::Values(ir::Precision::highest, ir::Precision::high,
                                         ir::Precision::tf32x3, ir::Precision::medium,
                                         ir::Precision::automatic)));

// llama_layer on seeded random inputs (every weight uniform in [-1, 1]) saturates its attention,
// and its reduced modes miss their tolerance by design, on every kernel and target (rel_l2 3.1e-3
// against 2e-3 in `high`, 2.3e-2 against 1.5e-2 in `medium`, on the mma.sync kernels and the CPU
// target as on these): scripts/gpu_check.sh checks the layers on realistic inputs against NumPy
// instead. Its other modes run here.
INSTANTIATE_TEST_SUITE_P(
    Sm90aLlama, EmulatedSm90aExampleOnWgmma,
    ::testing::Combine(::testing::Values("examples/llama_layer"),
                       ::testing::Values(ir::Precision::highest, ir::Precision::tf32x3)));

struct Edit {
  std::string from, to;
};

// The kernel text with each edit's `from` replaced by its `to` (every `from` must occur), run
// under `schedule` in `precision`.
std::string run_edits(const std::string& name, const std::vector<Edit>& edits,
                      const Schedule& schedule, ir::Precision precision = ir::Precision::high) {
  ir::Graph graph = load(name);
  auto request = compiler::check_request(graph, sm90a(precision));
  if (!request) return "request: " + request.error().message;
  auto lowered = compiler::lower(graph, *request, WgmmaSchedule());
  if (!lowered) return "lower: " + lowered.error().message;
  std::string source = compiler::program_source(*lowered, compiler::Prelude::omit);
  for (const Edit& e : edits) {
    size_t at = source.find(e.from);
    if (at == std::string::npos) return "the edit's text '" + e.from + "' does not occur";
    while (at != std::string::npos) {
      source.replace(at, e.from.size(), e.to);
      at = source.find(e.from, at + e.to.size());
    }
  }
  auto program = build_program_from_source(graph, std::move(*lowered), std::move(source));
  if (!program) return "build: " + program.error().message;
  std::string failed = check(graph, *program, schedule);
  return failed.empty() ? "passed" : failed;
}

std::string run_edited(const std::string& name, const std::string& from, const std::string& to,
                       const Schedule& schedule) {
  return run_edits(name, {{from, to}}, schedule);
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
      {"kiln_emu_sum.h", "double slice = std::trunc(static_cast<double>(c) * to_units);",
       "double slice = 0.0;"},
  };
  for (const Break& b : breaks) {
    std::string result = run_with_shim_edit(b.file, b.from, b.to, Schedule{});
    EXPECT_NE(result, "passed") << b.from;
    EXPECT_EQ(result.find("build: "), std::string::npos) << result;
  }
}

// The edit applies, builds, and its kernel fails the reference or the emulator's rules; what it
// reported.
std::string expect_caught(const std::string& from, const std::string& to, const Schedule& schedule,
                          const std::string& graph = "wgmma_bf16_odd") {
  std::string result = run_edited(graph, from, to, schedule);
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

TEST(EmulatedWgmmaRules, AnMMajorAReadWithoutImmTransAOrWithAWrongStrideIsCaught) {
  // A [K, M] in bf16: wgmma told A is K-major reads rows of k as rows of m; an SBO of 512 reads
  // each 8-row group of k from the middle of the previous one.
  expect_caught("1, 1>(acc, da, db", "1>(acc, da, db", Schedule{}, "wgmma_transpose_a_bf16_odd");
  expect_caught("c * 8192 + ks * 2048, 0, 1024)", "c * 8192 + ks * 2048, 0, 512)", Schedule{},
                "wgmma_transpose_a_bf16_odd");
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

// The attention kernel's rules, each broken once (wgmma_attention_f16_odd: three key tiles
// through two stages).
std::string expect_attention_caught(const std::string& from, const std::string& to,
                                    const Schedule& schedule) {
  return expect_caught(from, to, schedule, "wgmma_attention_f16_odd");
}

TEST(EmulatedWgmmaAttentionRules, AConsumerThatDoesNotWaitForQReadsItBeforeTMALands) {
  // Q's copy is issued before the first stage's, which the consumer does wait for: the kind
  // schedule lands only the copies of the barrier waited for (TMA copies complete in no
  // promised order).
  expect_attention_caught("kiln_mbarrier_wait(qbar, 0);", "", Schedule{});
}

TEST(EmulatedWgmmaAttentionRules, AConsumerThatDoesNotWaitForItsStageReadsItBeforeTMALands) {
  expect_attention_caught("kiln_mbarrier_wait(&full[s], (kt / 2) & 1);", "", Schedule{});
}

TEST(EmulatedWgmmaAttentionRules, AStageReleasedOnceKIsReadIsRefilledBeforePVReadsV) {
  // The consumer releases tile kt - 1's stage once S of tile kt is done (wait_group 1), before
  // the P V still in flight has retired: the producer refills (TMA landing at issue) the V that
  // P V reads.
  std::string result = run_edits(
      "wgmma_attention_f16_odd",
      {{"// tile kt - 1's K and V are read: release its stage to the producer\n        kiln_mbarrier_arrive(&empty[sp]);", ""},
       {"kiln_wgmma_wait<1>();\n", "kiln_wgmma_wait<1>();\n        kiln_mbarrier_arrive(&empty[sp]);\n"}},
      Schedule::adversarial());
  EXPECT_NE(result.find("changed between its issue and the wait_group"), std::string::npos) << result;
}

TEST(EmulatedWgmmaAttentionRules, ASoftmaxThatRescalesOWhilePVIsInFlightIsCaught) {
  // FlashAttention-3's overlap runs tile kt's softmax while tile kt - 1's P V writes O: O's
  // rescale must wait for that P V. Rescaled before wait_group 0, it writes O (a product of the
  // poison, a quieted NaN) under the P V: the emulator's error.
  const std::string rescale =
      "        #pragma unroll\n        for (int r = 0; r < 2; ++r) {\n          #pragma unroll\n"
      "          for (int j = 0; j < 16; ++j) {\n            o[4 * j + 2 * r] *= o_scale[r];\n"
      "            o[4 * j + 2 * r + 1] *= o_scale[r];\n          }\n        }\n";
  const std::string wait_and_release =
      "        kiln_wgmma_wait<0>();\n        // tile kt - 1's K and V are read: release its stage to "
      "the producer\n        kiln_mbarrier_arrive(&empty[sp]);\n";
  std::string result =
      run_edits("wgmma_attention_f16_odd", {{wait_and_release + rescale, rescale + wait_and_release}},
                Schedule{});
  EXPECT_NE(result.find("wrote the accumulators while a wgmma in flight writes them"),
            std::string::npos)
      << result;
}

TEST(EmulatedWgmmaAttentionRules, APingPongThatLosesATurnIsADeadlock) {
  // The consumers take turns issuing their wgmmas on named barriers 1 and 2. Without consumer
  // 1's first arrival neither may start; without the arrivals after each turn the other waits
  // for its turn forever. The emulator reports the deadlock (on hardware: a hang).
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"if (c == 1) kiln_bar_arrive(1, 256);  // consumer 0 issues first", ""},
           {"kiln_bar_arrive(2 - c, 256);  // the other consumer's turn", ";"}}) {
    std::string result = expect_attention_caught(from, to, Schedule{});
    EXPECT_NE(result.find("wait at named barriers (bar.sync)"), std::string::npos) << result;
  }
}

TEST(EmulatedWgmmaAttentionRules, AProducerThatSkipsTheEmptyWaitOverwritesAStageInUse) {
  expect_attention_caught("if (kt >= 2) kiln_mbarrier_wait(&empty[s], ((kt / 2) - 1) & 1);", "",
                          Schedule::adversarial());
}

TEST(EmulatedWgmmaAttentionRules, AWrongLeadingByteOffsetForVIsCaught) {
  expect_attention_caught("kk * 2048, 16384, 1024)", "kk * 2048, 8192, 1024)", Schedule{});
}

TEST(EmulatedWgmmaAttentionRules, PFragmentsPackedInTheWrongOrderAreCaught) {
  expect_attention_caught("pf[kk][1] = kiln_pack_f16x2(acc[8 * kk + 2], acc[8 * kk + 3]);",
                          "pf[kk][1] = kiln_pack_f16x2(acc[8 * kk + 4], acc[8 * kk + 5]);",
                          Schedule{});
}

TEST(EmulatedWgmmaAttentionRules, AHeadDimStepThatDoesNotAdvanceQIsCaught) {
  expect_attention_caught("c * 8192 + (ks & 3) * 32, 16, 1024)", "c * 8192, 16, 1024)",
                          Schedule{});
}

TEST(EmulatedWgmmaAttentionRules, WritingPWhileItsWgmmaIsInFlightIsAnError) {
  // P of tile kt packed before tile kt - 1's P V, which reads the previous P, has retired.
  std::string result = expect_attention_caught(
      "kiln_wgmma_wait<1>();\n", "kiln_wgmma_wait<1>();\n        pf[0][0] = 0u;\n", Schedule{});
  EXPECT_NE(result.find("wrote A's registers"), std::string::npos) << result;
}

// The fp32 graph `name` in `precision` with the wgmma attention kernel's tiles: `kernels`
// attentions on it, matching fp64 under every schedule; none with the model's schedule (fp32
// attention stays on the mma.sync kernel unless a record chooses it); in `tf32x3`, `x3_kernels`.
void expect_fp32_attention_on_wgmma(const char* name, ir::Precision precision, int kernels,
                                    int x3_kernels = 0) {
  ir::Graph graph = load(name);
  auto model = build_program(graph, sm90a(precision));
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(wgmma_kernels(*model), 0);
  auto program = build(graph, {}, precision);
  ASSERT_TRUE(program.ok()) << program.error().message;
  EXPECT_EQ(wgmma_kernels(*program), kernels);
  for (const Schedule& schedule : k_schedules) {
    SCOPED_TRACE("schedule " + to_string(schedule));
    EXPECT_EQ(check(graph, *program, schedule), "");
  }
  auto x3 = build(graph, {}, ir::Precision::tf32x3);
  ASSERT_TRUE(x3.ok()) << x3.error().message;
  EXPECT_EQ(wgmma_kernels(*x3), x3_kernels);
}

// fp32 attention in `medium` on the wgmma kernel: its producer warpgroup loads q, k and v,
// converts them to bf16 and writes them as TMA would have; both attentions of the graph (grouped
// heads, padded head dims, a mask, a ring that wraps; d 192 on 64-key tiles, causal) run there.
TEST(EmulatedWgmmaAttentionFp32, MediumOperandsConvertedByTheProducerMatchFp64UnderEverySchedule) {
  expect_fp32_attention_on_wgmma("wgmma_attention_medium_odd", ir::Precision::medium, 2);
}

// fp32 attention in `high` on tf32 wgmma: the producer rounds q, k and v to tf32 and writes V
// transposed (K-major, its keys ordered as P's tf32 A fragment holds them); S by m64n{64,128}k8
// from shared memory, P V by m64n{64,128}k8 with P in registers. All three attentions (grouped
// heads, padded head dims, a mask, a ring that wraps; d 128 on 64-key tiles, causal; d 64 on
// 128-key tiles, d_v 56 padded) run there, within `high`'s tolerance. With a head dim over 128
// (the medium graph's second attention) `high` stays on the mma.sync kernel.
TEST(EmulatedWgmmaAttentionFp32, HighOperandsRoundedToTf32MatchFp64UnderEverySchedule) {
  expect_fp32_attention_on_wgmma("wgmma_attention_tf32_odd", ir::Precision::high, 3, 1);
  ir::Graph wide = load("wgmma_attention_medium_odd");
  auto high = build(wide, {}, ir::Precision::high);
  ASSERT_TRUE(high.ok()) << high.error().message;
  EXPECT_EQ(wgmma_kernels(*high), 1);
}

// fp32 attention in `tf32x3` on tf32 wgmma (head dims up to 64): the producer writes each
// operand's tf32 big and small parts, S is small Q x K + Q x small K + Q x K, P V the same with P
// split in registers, summed from zero each key tile and added to O in fp32. All three attentions
// (grouped heads, padded head dims, a mask, a ring that wraps; d = d_v = 64, causal; one 32-column
// block) run there, within `tf32x3`'s fp32-level tolerance. (In the `high` graphs, only the
// attentions with both head dims up to 64 take it in `tf32x3`.)
TEST(EmulatedWgmmaAttentionFp32, Tf32x3OperandsSplitByTheProducerMatchFp64UnderEverySchedule) {
  expect_fp32_attention_on_wgmma("wgmma_attention_tf32x3_odd", ir::Precision::tf32x3, 3, 3);
}

// The zero-row rule on the fp32 wgmma attention kernels, whose producer rounds (high), converts
// (medium) or splits (tf32x3) q and k: a -inf in q against keys all positive there makes every
// score of its row -inf, and the row is zeros; against a key negative there, a +inf score makes
// its row NaN. Causal and not, under the kind and the adversarial schedule.
TEST(EmulatedWgmmaAttentionFp32, ARowWhoseScoresAreAllMinusInfinityIsZerosInEveryMode) {
  const double inf = std::numeric_limits<double>::infinity();
  for (bool causal : {false, true}) {
    auto graph = ir::parse_graph(std::string("graph ninf {\n  input q: f32[1, 2, 37, 32]\n"
                                             "  input k: f32[1, 2, 41, 32]\n"
                                             "  input v: f32[1, 2, 41, 24]\n"
                                             "  o = attention(q, k, v, scale=0.25") +
                                     (causal ? ", causal=true" : "") + ")\n  output o\n}\n",
                                 "ninf.kg");
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    std::vector<reference::Tensor> in = reference::random_inputs(*graph, 23);
    for (size_t key = 0; key < 2 * 41; ++key) in[1].values[key * 32 + 4] = 0.5 + (key % 3) * 0.25;
    in[1].values[(41 + 9) * 32 + 4] = -0.5;  // head 1: key 9's sign differs
    in[0].values[6 * 32 + 4] = -inf;          // head 0, query 6: every score -inf
    in[0].values[(37 + 30) * 32 + 4] = -inf;  // head 1, query 30: key 9's score +inf
    for (ir::Precision precision :
         {ir::Precision::high, ir::Precision::medium, ir::Precision::tf32x3}) {
      auto program = build(*graph, {}, precision);
      ASSERT_TRUE(program.ok()) << program.error().message;
      ASSERT_EQ(wgmma_kernels(*program), 1);
      for (const Schedule& schedule : {Schedule{}, Schedule::adversarial()}) {
        SCOPED_TRACE(std::string(ir::to_string(precision)) + (causal ? " causal " : " ") +
                     to_string(schedule));
        auto run = program->run(in, schedule);
        ASSERT_TRUE(run.ok()) << run.error().message;
        const std::vector<double>& o = (*run)[0].values;
        ASSERT_EQ(o.size(), size_t{2 * 37 * 24});
        for (size_t e = 0; e < o.size(); ++e) {
          size_t row = (e / 24) % 37, head = e / (37 * 24);
          if (head == 0 && row == 6) {
            ASSERT_EQ(o[e], 0.0) << e;
          } else if (head == 1 && row == 30) {  // causal: key 9 is among its keys
            ASSERT_TRUE(std::isnan(o[e])) << e << ": " << o[e];
          } else {
            ASSERT_TRUE(std::isfinite(o[e])) << e << ": " << o[e];
          }
        }
      }
    }
  }
}

// Odd numbers of 32-column blocks of fp32 in shared memory (the tf32 layout's unit; the others
// have two or four): head dim 96 in three blocks on 64-key tiles, head dim 24 in one on 128-key
// tiles, each with a narrow d_v padded to 64.
TEST(EmulatedWgmmaAttentionFp32, HighWithOddCountsOf32ColumnBlocksMatchesFp64UnderEverySchedule) {
  expect_fp32_attention_on_wgmma("wgmma_attention_tf32_blocks", ir::Precision::high, 2, 1);
  auto program = build(load("wgmma_attention_tf32_blocks"), {}, ir::Precision::high);
  ASSERT_TRUE(program.ok()) << program.error().message;
  std::vector<std::pair<int, int>> tiles;  // (d, bc) of each wgmma attention kernel
  for (const auto& k : program->lowered().plan.kernels)
    if (k.attention_tile.wgmma) tiles.push_back({k.attention_tile.d, k.attention_tile.bc});
  EXPECT_EQ(tiles, (std::vector<std::pair<int, int>>{{96, 64}, {32, 128}}));
}

// The fp32 producer's rules, each broken once: wgmma_attention_medium_odd in `medium`,
// wgmma_attention_tf32_odd in `high`, wgmma_attention_tf32x3_odd in `tf32x3`.
std::string expect_fp32_attention_caught(ir::Precision precision, const std::string& from,
                                         const std::string& to,
                                         const Schedule& schedule = Schedule{}) {
  const char* graph = precision == ir::Precision::high     ? "wgmma_attention_tf32_odd"
                      : precision == ir::Precision::tf32x3 ? "wgmma_attention_tf32x3_odd"
                                                           : "wgmma_attention_medium_odd";
  std::string result = run_edits(graph, {{from, to}}, schedule, precision);
  EXPECT_NE(result, "passed") << from;
  EXPECT_EQ(result.find("does not occur"), std::string::npos) << result;
  EXPECT_EQ(result.find("build: "), std::string::npos) << result;
  return result;
}

std::string expect_medium_attention_caught(const std::string& from, const std::string& to) {
  return expect_fp32_attention_caught(ir::Precision::medium, from, to);
}

std::string expect_tf32_attention_caught(const std::string& from, const std::string& to) {
  return expect_fp32_attention_caught(ir::Precision::high, from, to);
}

TEST(EmulatedWgmmaAttentionRules, ALoadingProducerWithoutTheProxyFenceIsCaught) {
  // K and V written by plain stores and read by wgmma without fence.proxy.async: the async
  // proxy reads what shared memory held before (NaN). In both modes.
  for (ir::Precision precision : {ir::Precision::medium, ir::Precision::high})
    expect_fp32_attention_caught(precision,
                                 "kiln_fence_proxy_async();\n        kiln_mbarrier_arrive(&full[s]);",
                                 "kiln_mbarrier_arrive(&full[s]);");
}

TEST(EmulatedWgmmaAttentionRules, ALoadingProducerThatSkipsTheEmptyWaitOverwritesAStageInUse) {
  // Its plain stores land at once: a stage the consumers' wgmmas still read is rewritten.
  for (ir::Precision precision : {ir::Precision::medium, ir::Precision::high})
    expect_fp32_attention_caught(precision,
                                 "if (kt >= 2) kiln_mbarrier_wait(&empty[s], ((kt / 2) - 1) & 1);",
                                 "", Schedule::adversarial());
}

TEST(EmulatedWgmmaAttentionRules, AConvertingProducerThatWritesWithoutTheSwizzleIsCaught) {
  expect_medium_attention_caught("((((j >> 1) & 7) ^ (r & 7)) << 4)", "(((j >> 1) & 7) << 4)");
}

TEST(EmulatedWgmmaAttentionRules, AVTransposedWithoutPsKeyOrderIsCaught) {
  // V^T's keys in their own order, where P's tf32 fragment holds keys 2 t and 2 t + 1 at k = t
  // and t + 4: P V pairs each probability with another key's value.
  expect_tf32_attention_caught("const int p = (r & ~7) | ((r & 1) << 2) | ((r & 7) >> 1);",
                               "const int p = r;");
}

TEST(EmulatedWgmmaAttentionRules, Tf32PFragmentsPackedInTheWrongOrderAreCaught) {
  expect_tf32_attention_caught("pf[kk][1] = kiln_cvt_rna_tf32(acc[4 * kk + 2]);",
                               "pf[kk][1] = kiln_cvt_rna_tf32(acc[4 * kk + 1]);");
}

TEST(EmulatedWgmmaAttentionRules, AVTransposeWithoutTheSwizzleIsCaught) {
  expect_tf32_attention_caught("((((p & 31) >> 2) ^ (n & 7)) << 4)", "(((p & 31) >> 2) << 4)");
}

TEST(EmulatedWgmmaAttentionRules, AProducerThreadThatDoesNotArriveIsADeadlock) {
  // `full` counts the 128 producer threads: one short, the consumers wait for ever.
  for (ir::Precision precision : {ir::Precision::medium, ir::Precision::high}) {
    std::string result = expect_fp32_attention_caught(
        precision, "kiln_mbarrier_arrive(&full[s]);", "if (tid != 5) kiln_mbarrier_arrive(&full[s]);");
    EXPECT_NE(result.find("deadlock"), std::string::npos) << result;
  }
}

// The fp32 producer's staging ring: each thread reads only the slots it copied into, once
// cp.async.wait_group says they have landed. A wait one group short reads a slot before its copy
// lands (the default schedule lands a copy at its thread's wait): the slot's previous piece, or
// the poison of a slot not yet used. Reading the neighbouring thread's slots (the piece that
// thread copied, to its place) needs that thread's copy to have landed, which cp.async orders for
// the copying thread only: it has not, under the same schedule.
TEST(EmulatedWgmmaAttentionRules, AStagingRingReadBeforeItsCopyLandsIsCaught) {
  // medium_odd: 32 pieces a thread in flight, 8 groups; tf32x3_odd: 16, 4 groups
  expect_fp32_attention_caught(ir::Precision::medium, "kiln_cp_async_wait<7>();",
                               "kiln_cp_async_wait<8>();");
  expect_fp32_attention_caught(ir::Precision::tf32x3, "kiln_cp_async_wait<3>();",
                               "kiln_cp_async_wait<4>();");
  for (ir::Precision precision : {ir::Precision::medium, ir::Precision::high})
    expect_fp32_attention_caught(precision, "const int copier = tid;", "const int copier = tid ^ 1;");
}

TEST(EmulatedWgmmaAttentionRules, WritingTf32PWhileItsWgmmaIsInFlightIsAnError) {
  // P of tile kt packed before tile kt - 1's P V (tf32, A from registers) has retired.
  std::string result = expect_tf32_attention_caught(
      "kiln_wgmma_wait<1>();\n", "kiln_wgmma_wait<1>();\n        pf[0][0] = 0u;\n");
  EXPECT_NE(result.find("wrote A's registers"), std::string::npos) << result;
}

// wgmma.fence between the writes of P and O and the P V wgmmas that read them: the key loop's
// fence moved above P's packing (P written after it; `high` and `tf32x3`), or above O's
// rescaling (O, the accumulators of `high`'s P V, written after it, checked first; tf32x3 sums
// P V into `part`) is an error.
TEST(EmulatedWgmmaAttentionRules, RegistersWrittenAfterTheWgmmaFenceAreAnError) {
  const std::string loop_top =
      "(kt / 2) & 1);\n        kiln_bar_sync(1 + c, 256);  // my turn to issue\n";
  const std::string loop_fence = loop_top + "        kiln_wgmma_fence();\n";
  const std::string pack = "        // P to registers as the tf32 RS form's A";
  const std::string rescale =
      "        #pragma unroll\n        for (int r = 0; r < 2; ++r) {\n          #pragma unroll\n"
      "          for (int j = 0; j < ";
  for (ir::Precision precision : {ir::Precision::high, ir::Precision::tf32x3}) {
    const char* graph =
        precision == ir::Precision::high ? "wgmma_attention_tf32_odd" : "wgmma_attention_tf32x3_odd";
    std::string p_late = run_edits(
        graph, {{loop_fence, loop_top}, {pack, "        kiln_wgmma_fence();\n" + pack}}, Schedule{},
        precision);
    EXPECT_NE(p_late.find("wrote A's registers after its last wgmma.fence"), std::string::npos)
        << p_late;
  }
  std::string o_late = run_edits(
      "wgmma_attention_tf32_odd",
      {{loop_fence, loop_top}, {rescale, "        kiln_wgmma_fence();\n" + rescale}},
      Schedule{}, ir::Precision::high);
  EXPECT_NE(o_late.find("wrote the accumulators after its last wgmma.fence"), std::string::npos)
      << o_late;
}

// tf32x3 without one of its small parts (Q x small K left out of S; P's small parts made 0):
// `high`'s error, past `tf32x3`'s fp32-level tolerance.
TEST(EmulatedWgmmaAttentionRules, Tf32x3WithoutASmallPartIsCaught) {
  for (auto [from, to] :
       {std::pair{"kiln_wgmma_m64n64k8_tf32(acc, da, db_small, 1);", ""},
        std::pair{" - kiln_as_float(pf[kk][", " * 0.0f + 0.0f * kiln_as_float(pf[kk]["}}) {
    std::string result = expect_fp32_attention_caught(ir::Precision::tf32x3, from, to);
    EXPECT_NE(result.find("rel_l2"), std::string::npos) << result;
  }
}

// tf32x3's P V summed on the tensor cores across key tiles (into o, no `part`): over 4096 keys of
// positive values the truncations drift past the tolerance, where the promoted sum passes.
TEST(EmulatedWgmmaAttentionRules, Tf32x3PVSummedOnTheTensorCoresAcrossKeyTilesDrifts) {
  const char* graph = "wgmma_attention_tf32x3_long";
  EXPECT_EQ(run_edits(graph, {}, Schedule{}, ir::Precision::tf32x3), "passed");
  std::string result =
      run_edits(graph,
                {{"(part, pf_small[kk], dv, kk > 0 ? 1 : 0);", "(o, pf_small[kk], dv, 1);"},
                 {"(part, pf[kk], dv_small, 1);", "(o, pf[kk], dv_small, 1);"},
                 {"(part, pf[kk], dv, 1);", "(o, pf[kk], dv, 1);"},
                 {"o[v] += part[v];", ";"}},
                Schedule{}, ir::Precision::tf32x3);
  EXPECT_NE(result.find("rel_l2"), std::string::npos) << result;
}

TEST(EmulatedWgmmaAttentionRules, WritingTf32x3PWhileAWgmmaReadsItIsAnError) {
  // P's small part (one wgmma reads it) and its big part (two do: P x small V and P x V) written
  // before tile kt - 1's P V has retired.
  for (const char* part : {"pf_small", "pf"}) {
    std::string result = expect_fp32_attention_caught(
        ir::Precision::tf32x3, "kiln_wgmma_wait<1>();\n",
        std::string("kiln_wgmma_wait<1>();\n        ") + part + "[0][0] = 0u;\n");
    EXPECT_NE(result.find("wrote A's registers"), std::string::npos) << part << ": " << result;
  }
}

}  // namespace
}  // namespace kiln::emulation
