// The emulator's model of tensor-core accumulation: the probe vectors Fasi, Higham, Mikaitis and
// Pranesh used on NVIDIA tensor cores (round toward zero, alignment to the largest addend without
// guard bits, carry-out bits), round-to-nearest as an option; every mode against fp64 at K up
// to 4096 on positive and signed inputs; and tf32x3, whose running sum would drift under
// truncation at large K without its per-tile promotion to fp32.
#include "emulation/check.h"
#include "ir/parse.h"
#include "reference/audit.h"
#include "text_edit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace kiln::emulation {
namespace {

// One m16n8k8 tf32 mma over one warp: A (16 x 8), B (8 x 8) and C (16 x 8), row-major floats in
// `io` at 0, 128 and 192; D replaces C.
const char* k_mma_kernel = R"(
extern "C" __global__ void kiln_probe(float* io) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const float* A = io;
  const float* B = io + 128;
  float* C = io + 192;
  unsigned a[4] = {kiln_as_uint(A[g * 8 + t]), kiln_as_uint(A[(g + 8) * 8 + t]),
                   kiln_as_uint(A[g * 8 + t + 4]), kiln_as_uint(A[(g + 8) * 8 + t + 4])};
  unsigned b[2] = {kiln_as_uint(B[t * 8 + g]), kiln_as_uint(B[(t + 4) * 8 + g])};
  float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                C[(g + 8) * 8 + 2 * t + 1]};
  kiln_mma_m16n8k8_tf32(d, a, b);
  __syncwarp();
  C[g * 8 + 2 * t] = d[0];
  C[g * 8 + 2 * t + 1] = d[1];
  C[(g + 8) * 8 + 2 * t] = d[2];
  C[(g + 8) * 8 + 2 * t + 1] = d[3];
}
)";

// The probe kernel built under `sum`, once per model.
const Module* probe_module(MmaSum sum) {
  static std::unique_ptr<Module> modules[4];
  std::unique_ptr<Module>& module = modules[static_cast<int>(sum)];
  if (module) return module.get();
  ModuleOptions options;
  options.sm = 80;
  options.entries = {"kiln_probe"};
  options.shim.mma_sum = sum;
  auto built = compile_module(k_mma_kernel, options);
  EXPECT_TRUE(built.ok()) << built.error().message;
  if (built.ok()) module = std::move(*built);
  return module.get();
}

// D[0][0] = c + sum_k a[k] b[k] over k = 0..3 (one block of the tf32 mma) under `sum`.
float probe(MmaSum sum, std::vector<float> a, std::vector<float> b, float c) {
  const Module* module = probe_module(sum);
  if (!module) return NAN;
  std::vector<float> io(16 * 8 + 8 * 8 + 16 * 8, 0.0f);
  for (size_t k = 0; k < a.size(); ++k) {
    io[k] = a[k];             // A row 0
    io[128 + k * 8] = b[k];   // B column 0
  }
  io[192] = c;
  compiler::LaunchShape shape;
  shape.block = {32, 1, 1};
  Status launched = module->launch("kiln_probe", shape, {io.data()}, {{io.data(), io.size() * 4}});
  EXPECT_TRUE(launched.ok()) << launched.error().message;
  return io[192];
}

float p2(int e) { return std::ldexp(1.0f, e); }

TEST(EmulatedAccumulation, TruncationReproducesThePublishedTensorCoreProbes) {
  constexpr MmaSum t = MmaSum::truncate;
  // Round toward zero: 2 + 1.5 ulp(1) is 2 (down) for positive sums, -2 (up) for negative ones.
  EXPECT_EQ(probe(t, {1, 1, 1, 1}, {2, p2(-23) + p2(-24), 0, 0}, 0), 2.0f);
  EXPECT_EQ(probe(t, {1, 1, 1, 1}, {-2, -p2(-23) - p2(-24), 0, 0}, 0), -2.0f);
  // Aligned to the largest addend without guard bits: four halves of 2^-24 vanish against 1.
  EXPECT_EQ(probe(t, {0.5f, 0.5f, 0.5f, 0.5f}, {p2(-24), p2(-24), p2(-24), p2(-24)}, 1), 1.0f);
  // No guard bits: 1 - (1 - 2^-24) loses the last bit of c, giving 2^-23 (not 2^-24).
  EXPECT_EQ(probe(t, {1, 0, 0, 0}, {1, 0, 0, 0}, -(1.0f - p2(-24))), p2(-23));
  // Carry-out bits: the exact sum 4 + 2^-21 needs two bits above the largest addend's.
  EXPECT_EQ(probe(t, {1, 1, 1, 1}, {1, 1, 1, p2(-23)}, 1 + p2(-22) + p2(-23)), 4 + p2(-21));
  EXPECT_EQ(probe(t, {1, 1, 1, 1}, {1, 1.5f, 1.75f, 1.875f}, 1.875f), 8.0f);
  // Normalisation after the sum, toward zero: 5 + 3 * 2^-23 is 5, its negative -5.
  EXPECT_EQ(probe(t, {1, 1, 1, 1}, {1, 1, 1, 1}, 1 + p2(-22) + p2(-23)), 5.0f);
  EXPECT_EQ(probe(t, {1, 1, 1, 1}, {-1, -1, -1, -1}, -1 - p2(-22) - p2(-23)), -5.0f);
}

// The H100's measured model (slice_sum_hopper): one step for the whole slice, addends aligned on
// operand exponent sums, two bits past fp32's kept, the sum truncated.
TEST(EmulatedAccumulation, TheHopperModelKeepsTwoBitsAndAlignsOnOperandExponents) {
  constexpr MmaSum h = MmaSum::hopper, t = MmaSum::truncate;
  // Two extra bits: two products of 2^-24 survive against 1 (the block model drops both).
  EXPECT_EQ(probe(h, {1, 1, 0, 0}, {p2(-24), p2(-24), 0, 0}, 1), 1 + p2(-23));
  EXPECT_EQ(probe(t, {1, 1, 0, 0}, {p2(-24), p2(-24), 0, 0}, 1), 1.0f);
  // One alone is kept in the sum, then truncated away with it: 1 + 2^-24 is 1 in fp32.
  EXPECT_EQ(probe(h, {1, 0, 0, 0}, {p2(-24), 0, 0, 0}, 1), 1.0f);
  // Aligned on the operands' exponent sum (0 for 1.5 x 1.5, whose exact product 2.25 has
  // exponent 1): 2^-25 is a multiple of the quantum 2^(0 - 25) and survives the cancellation;
  // aligned on the exact product it would be truncated to 0.
  EXPECT_EQ(probe(h, {1.5f, -1.5f, 1, 0}, {1.5f, 1.5f, p2(-25), 0}, 0), p2(-25));
  EXPECT_EQ(probe(h, {1.5f, -1.5f, 1, 0}, {1.5f, 1.5f, p2(-26), 0}, 0), 0.0f);
  // The whole slice in one step: the k8 probe's 8 products, where the block model takes 4 at a
  // time and truncates in between.
  std::vector<float> ones(8, 1.0f), halves(8, p2(-24));
  EXPECT_EQ(probe(h, ones, halves, 1), 1 + p2(-21));
  // The sum truncated toward zero, both signs: 3 + 1.5 ulp(2) is 3 + 2^-22.
  EXPECT_EQ(probe(h, {1, 1, 0, 0}, {1, 1, 0, 0}, 1 + p2(-22) + p2(-23)), 3 + p2(-22));
  EXPECT_EQ(probe(h, {1, 1, 0, 0}, {-1, -1, 0, 0}, -1 - p2(-22) - p2(-23)), -3 - p2(-22));
}

TEST(EmulatedAccumulation, RoundToNearestIsTheOption) {
  constexpr MmaSum n = MmaSum::nearest;
  EXPECT_EQ(probe(n, {1, 1, 1, 1}, {2, p2(-23) + p2(-24), 0, 0}, 0), 2.0f + p2(-22));
  EXPECT_EQ(probe(n, {1, 0, 0, 0}, {1, 0, 0, 0}, -(1.0f - p2(-24))), p2(-24));
}

// x [64, K] times w [K, 72] in `dtype`.
ir::Graph long_sum(const std::string& dtype, int k) {
  std::string ks = std::to_string(k);
  auto graph = ir::parse_graph("graph long {\n  input x: " + dtype + "[64, " + ks +
                                   "]\n  input w: " + dtype + "[" + ks +
                                   ", 72]\n  y = matmul(x, w)\n  output y\n}\n",
                               "long.kg");
  EXPECT_TRUE(graph.ok()) << graph.error().message;
  return *graph;
}

// The seeded inputs of `graph`, made nonnegative when `positive` (every product and partial
// sum then has one sign, so truncation errors add up instead of cancelling).
reference::InputSource inputs(const ir::Graph& graph, bool positive) {
  reference::InputSource source{5, {}};
  if (!positive) return source;
  for (reference::Tensor t : reference::random_inputs(graph, 5)) {
    for (double& v : t.values) v = std::fabs(v);
    source.given.emplace_back(std::move(t));
  }
  return source;
}

Expected<reference::CheckRun> run(const ir::Graph& graph, const Program& program, bool positive) {
  return reference::check_against_fp64(
      graph, program.lowered().precision.graph_mode, inputs(graph, positive),
      [&](const std::vector<reference::Tensor>& in) { return program.run(in); });
}

struct Arithmetic {
  const char* dtype;
  ir::Precision precision;
};

TEST(EmulatedAccumulation, EveryModeStaysWithinItsToleranceAtKUpTo4096) {
  const Arithmetic arithmetics[] = {{"f32", ir::Precision::highest}, {"f32", ir::Precision::high},
                                    {"f32", ir::Precision::tf32x3}, {"f32", ir::Precision::medium},
                                    {"f16", ir::Precision::high},   {"bf16", ir::Precision::high}};
  for (int k : {1024, 4096}) {
    for (const Arithmetic& a : arithmetics) {
      ir::Graph graph = long_sum(a.dtype, k);
      compiler::CompileOptions options;
      options.target.sm = 80;
      options.precision = a.precision;
      auto program = build_program(graph, options);
      ASSERT_TRUE(program.ok()) << program.error().message;
      for (bool positive : {false, true}) {
        SCOPED_TRACE("K " + std::to_string(k) + " " + a.dtype + " " +
                     std::string(ir::to_string(a.precision)) + (positive ? " positive" : " signed"));
        auto checked = run(graph, *program, positive);
        ASSERT_TRUE(checked.ok()) << checked.error().message;
        for (const reference::OutputCheck& o : checked->report.outputs)
          EXPECT_LE(o.rel_l2, o.tolerance) << o.name;
      }
    }
  }
}

// tf32x3 sums each k tile from zero on the tensor cores and adds it to the accumulator in fp32
// to nearest. With the tile's MMAs accumulating straight into the running sum instead, the
// truncations add up over K / 4 steps: at K = 4096 on positive inputs the error leaves tf32x3's
// tolerance (2e-5) under the truncating model, not under round-to-nearest.
// The model's tiles, never split: the running sum below must run one K loop over all of K
// (split 8 ways, each range's sum is an eighth as long and its truncation drift smaller).
class UnsplitSchedule final : public compiler::ScheduleProvider {
public:
  compiler::MatmulTile matmul_tile(const compiler::MatmulShape& shape, int sm) const override {
    compiler::MatmulTile tile = compiler::choose_tile(shape, sm);
    tile.split_k = 1;
    return tile;
  }
  std::string source() const override { return "unsplit"; }
  std::string key() const override { return "unsplit"; }
};

TEST(EmulatedAccumulation, Tf32x3EarnsItsNameAtLargeKThroughPerTilePromotion) {
  ir::Graph graph = long_sum("f32", 4096);
  compiler::CompileOptions options;
  options.target.sm = 80;
  options.precision = ir::Precision::tf32x3;
  auto request = compiler::check_request(graph, options);
  ASSERT_TRUE(request.ok()) << request.error().message;
  auto lowered = compiler::lower(graph, *request, UnsplitSchedule());
  ASSERT_TRUE(lowered.ok()) << lowered.error().message;
  std::string promoted = compiler::program_source(*lowered, compiler::Prelude::omit);
  auto running = testing::apply_edits(
      promoted, {{"kiln_mma_m16n8k8_tf32(part[mt][nt]", "kiln_mma_m16n8k8_tf32(acc[mt][nt]"},
                 {"acc[mt][nt][i] += part[mt][nt][i];", ";"}});
  ASSERT_TRUE(running.ok()) << running.error().message;
  auto error_of = [&](const std::string& source, MmaSum sum) {
    auto program = build_program_from_source(graph, *lowered, source, ShimOptions{Layout::correct, sum, {}});
    EXPECT_TRUE(program.ok()) << program.error().message;
    auto checked = run(graph, *program, true);
    EXPECT_TRUE(checked.ok()) << checked.error().message;
    return checked->report.outputs[0].rel_l2;
  };
  double base = reference::tolerance(ir::Precision::tf32x3);
  EXPECT_LT(error_of(promoted, MmaSum::truncate), base / 10);
  EXPECT_GT(error_of(*running, MmaSum::truncate), base);
  EXPECT_LT(error_of(*running, MmaSum::nearest), base);
}

}  // namespace
}  // namespace kiln::emulation
