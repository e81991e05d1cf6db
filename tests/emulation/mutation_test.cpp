// The mutation check: known-bad edits to the emulator's shim (a wrong fragment layout, a wrong
// ldmatrix distribution, cp.async waits that retire nothing, a barrier that waits for no one,
// shuffles reading the wrong lane, an mma that drops its accumulator) and to generated kernels
// (swapped fragment registers, a wrong ldmatrix row distribution, a shared-memory swizzle the
// copies and the reads disagree on, a removed wait, a moved or removed barrier, a dropped
// online-softmax rescale or causal mask, a double-buffered k loop without its barrier, a split-K
// sum missing a range, overlapping split-K ranges). Each must make an emulated
// check fail: a layer of the emulator that let one through could no longer be trusted to catch
// that bug in a generated kernel.
#include "emulation/check.h"
#include "ir/parse.h"
#include "text_edit.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

namespace kiln::emulation {
namespace {

using testing::TextEdit;

struct Mutation {
  const char* name;
  std::string graph;  // a file in tests/emulation/graphs, or graph text
  int sm;
  ir::Precision precision;
  std::vector<ShimEdit> shim;    // edits of the shim
  std::vector<TextEdit> kernel;  // edits of the generated kernel text
  Schedule schedule;
};

void PrintTo(const Mutation& m, std::ostream* os) { *os << m.name; }

// Several key tiles (S = 150 against tiles of 64 keys), so the online softmax rescales.
const char* k_attention = R"(graph att {
  input q: f16[2, 150, 64]
  input k: f16[2, 150, 64]
  input v: f16[2, 150, 64]
  o = attention(q, k, v, causal=true)
  output o
}
)";

Expected<ir::Graph> load(const std::string& graph) {
  if (graph.find("graph ") != std::string::npos) return ir::parse_graph(graph, "mutation.kg");
  return ir::parse_graph_file(std::string(KILN_EMU_TEST_GRAPHS) + "/" + graph + ".kg");
}

// The check of `m`'s target with its edits applied: an error (a launch that fails) or a report.
Expected<CheckReport> run_mutated(const Mutation& m) {
  auto graph = load(m.graph);
  if (!graph) return graph.error();
  compiler::CompileOptions options;
  options.target.sm = m.sm;
  options.precision = m.precision;
  auto lowered = compiler::lower(*graph, options);
  if (!lowered) return lowered.error();
  auto source = testing::apply_edits(compiler::program_source(*lowered, compiler::Prelude::omit),
                                     m.kernel);
  if (!source) return make_error("setup: ", source.error().message);
  auto program = build_program_from_source(*graph, std::move(*lowered), std::move(*source),
                                           ShimOptions{Layout::correct, MmaSum::truncate, m.shim});
  if (!program) return program.error();
  return check_program(*graph, *program, 1, m.schedule);
}

constexpr ir::Precision k_highest = ir::Precision::highest;
constexpr ir::Precision k_high = ir::Precision::high;

const Mutation k_mutations[] = {
    // ---- the shim ----
    {"swapped_a_fragment_registers", "mlp_odd", 90, k_high,
     {{"kiln_emu_warp.h", "uint32_t ra[4] = {fa[0], fa[1], 0, 0};",
       "uint32_t ra[4] = {fa[1], fa[0], 0, 0};"}},
     {}, {}},
    {"swapped_b_fragment_halves", "gated_mlp_odd", 90, k_high,
     {{"kiln_emu_warp.h", "bm[2 * t + h][g] = half_operand(fb[0], h, bf16);",
       "bm[2 * t + h][g] = half_operand(fb[0], 1 - h, bf16);"}},
     {}, {}},
    {"wrong_ldmatrix_distribution", "mlp_odd", 90, k_high,
     {{"kiln_emu_warp.h", "std::memcpy(&out[m], row + 4 * (lane % 4), 4);",
       "std::memcpy(&out[m], row + 4 * ((lane + 1) % 4), 4);"}},
     {}, {}},
    {"ldmatrix_trans_pair_swapped", "gated_mlp_odd", 90, k_high,
     {{"kiln_emu_warp.h", "out[m] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);",
       "out[m] = static_cast<uint32_t>(hi) | (static_cast<uint32_t>(lo) << 16);"}},
     {}, {}},
    {"mma_drops_its_accumulator", "reuse_odd", 80, k_high,
     {{"kiln_emu_warp.h", "float sum = d[i][j];", "float sum = 0.0f;"}}, {}, {}},
    {"shuffle_xor_wrong_partner", "attention_odd", 90, k_highest,
     {{"kiln_emu_warp.h", "case shfl_xor: src = (lane ^ s.arg) < base + width ? lane ^ s.arg : lane;",
       "case shfl_xor: src = (lane ^ (s.arg << 1)) < base + width ? lane ^ (s.arg << 1) : lane;"}},
     {}, {}},
    {"cp_async_wait_retires_nothing", "mlp_odd", 90, k_high,
     {{"kiln_emu_runtime.h", "for (const CpCopy& c : self->groups.front()) perform(c);",
       "for (const CpCopy& c : self->groups.front()) (void)c;"}},
     {}, {}},
    {"barrier_waits_for_no_one", "mlp_odd", 75, k_highest,
     {{"kiln_emu_runtime.h", "  t_thread->wait = Wait::barrier;\n  yield();\n", ""}}, {}, {}},
    // ---- generated kernels ----
    {"kernel_swapped_fragment_registers", "mlp_odd", 90, k_high, {},
     {{"af[mt][i] = kiln_cvt_rna_tf32(f[i]);", "af[mt][i] = kiln_cvt_rna_tf32(f[i ^ 1]);"}}, {}},
    {"kernel_wrong_ldmatrix_rows", "mlp_odd", 90, k_high, {},
     {{"const int a_lane_row = (lane & 15) * 32;", "const int a_lane_row = (lane & 7) * 32;"}},
     {}},
    // A swizzle the fragment reads and the tile copies disagree on: the reads of A unswizzled,
    // and the copies of B (bf16, element by element) unswizzled.
    {"kernel_swizzle_mismatch_in_the_reads", "mlp_odd", 90, k_high, {},
     {{"const int a_lane_chunk = (lane >> 4) ^ ((a_lane_row >> 5) & 7);",
       "const int a_lane_chunk = (lane >> 4);"}},
     {}},
    {"kernel_swizzle_mismatch_in_the_copies", "reuse_bf16_odd", 80, k_high, {},
     {{"((r * 64 + cc) ^ (((r * 64 + cc) >> 6) & 7) << 3)", "(r * 64 + cc)"}}, {}},
    {"kernel_removed_cp_async_wait", "mlp_odd", 90, k_high, {},
     {{"kiln_cp_async_wait<", "if (0) kiln_cp_async_wait<"}}, {}},
    {"kernel_removed_trailing_barrier", "mlp_odd", 75, k_highest, {},
     {{"    __syncthreads();\n  }", "  }"}}, {}},
    {"kernel_barrier_after_next_stage_copies", "reuse_odd", 80, k_high, {},
     {{"    kiln_cp_async_wait<2>();\n    __syncthreads();\n    {\n      const int next",
       "    kiln_cp_async_wait<2>();\n    {\n      const int next"},
      {"      kiln_cp_async_commit();\n    }\n    const int cs",
       "      kiln_cp_async_commit();\n    }\n    __syncthreads();\n    const int cs"}},
     Schedule::adversarial()},
    {"kernel_attention_without_rescale", k_attention, 80, k_high, {},
     {{"o[j][2 * r] *= alpha;", "o[j][2 * r] *= 1.0f;"},
      {"o[j][2 * r + 1] *= alpha;", "o[j][2 * r + 1] *= 1.0f;"}},
     {}},
    {"kernel_attention_without_causal_mask", k_attention, 80, k_high, {},
     {{" || key > qrow", ""}}, {}},
    // Fragments double-buffered in registers: the barrier before the next tile's first
    // fragments left out (warps read a stage others have not finished copying, and refill one
    // others still read).
    {"kernel_double_buffered_without_its_barrier", "reuse_aligned", 80, k_high, {},
     {{"      kiln_cp_async_wait<2>();\n      __syncthreads();\n",
       "      kiln_cp_async_wait<2>();\n"}},
     Schedule::adversarial()},
    // Split-K: a sum that leaves the last range's partials out, and ranges that overlap (each
    // split starting a tile early, the last one's tail left out).
    {"kernel_split_k_sum_drops_a_range", "splitk_odd", 90, k_high, {},
     {{"for (int s = 1; s < 4; ++s)", "for (int s = 1; s < 3; ++s)"}}, {}},
    {"kernel_split_k_ranges_overlap", "splitk_odd", 90, k_high, {},
     {{"k0 = (split * 9 + ", "k0 = (split * 8 + "}}, {}},
};

class EmulatedMutation : public ::testing::TestWithParam<Mutation> {};

TEST_P(EmulatedMutation, IsCaught) {
  const Mutation& m = GetParam();
  auto report = run_mutated(m);
  if (!report) {
    // A launch the emulator stops (a bad address, a deadlock) is caught; a setup that no longer
    // applies (the text to edit is gone, an edit that does not compile) is a broken check, not a
    // caught mutation.
    const std::string& error = report.error().message;
    EXPECT_EQ(error.find("setup:"), std::string::npos) << error;
    EXPECT_EQ(error.find("to change"), std::string::npos) << error;
    EXPECT_EQ(error.find("compiling the kernels"), std::string::npos) << error;
    EXPECT_NE(error.find("emulation: kernel '"), std::string::npos) << error;
    return;
  }
  EXPECT_FALSE(report->ok) << m.name << " went unnoticed";
}

INSTANTIATE_TEST_SUITE_P(Mutations, EmulatedMutation, ::testing::ValuesIn(k_mutations),
                         [](const auto& info) { return std::string(info.param.name); });

// The targets themselves pass: what fails above is the mutation, not the setup.
TEST(EmulatedMutation, TheUnmutatedAttentionTargetPasses) {
  Mutation control{"control", k_attention, 80, k_high, {}, {}, Schedule::adversarial()};
  auto report = run_mutated(control);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_TRUE(report->ok);
}

}  // namespace
}  // namespace kiln::emulation
