// Every example graph x every mode x the test archs: compiles without spills or warnings, or is
// refused exactly where the arch cannot run the mode (and then compiles with a recorded fallback).
#include "compiler/compiler.h"
#include "compiler/cubin_report.h"
#include "compiler/nvrtc.h"
#include "compiler/schedule.h"
#include "compiler/ptxas_report.h"
#include "ir/parse.h"

#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <map>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

namespace kiln::compiler {
namespace {

using test::example;
using test::options;

const int k_archs[] = {75, 80, 86, 89, 90, 100, 120};
const ir::Precision k_modes[] = {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                                 ir::Precision::medium, ir::Precision::automatic};

// Whether some matmul of `g` needs sm_80 under graph mode `mode` on `sm`.
bool must_refuse(const ir::Graph& g, ir::Precision mode, int sm) {
  if (sm >= 80) return false;
  for (const ir::Node& n : g.nodes()) {
    if (n.kind != ir::OpKind::matmul) continue;
    ir::DType dtype = g.node(n.operands[0]).type.dtype;
    if (dtype == ir::DType::bf16) return true;
    if (dtype != ir::DType::f32) continue;
    ir::Precision p = n.attrs.precision.value_or(mode);
    if (p == ir::Precision::high || p == ir::Precision::tf32x3 || p == ir::Precision::medium) {
      return true;
    }
  }
  return false;
}

// A program's kernels (without the prelude) and its fallbacks: what its compile depends on.
std::string kernels_and_fallbacks(const LoweredProgram& program) {
  std::string text = program_source(program, Prelude::omit);
  for (const std::string& f : program.precision.fallbacks) text += "\n" + f;
  return text;
}

// `text` with each "sm_<sm>" written "sm_80": sm_86, sm_89, sm_90, sm_100 and sm_120 lower most
// graphs and tiles to sm_80's kernels, differing only where a comment names the arch.
std::string as_sm80_text(const std::string& text, int sm) {
  const std::string name = "sm_" + std::to_string(sm);
  std::string out;
  size_t from = 0;
  for (size_t at; (at = text.find(name, from)) != std::string::npos; from = at + name.size()) {
    // "sm_100" is not "sm_10" followed by a digit: a name ends at a non-digit.
    size_t end = at + name.size();
    bool longer = end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]));
    out.append(text, from, at - from).append(longer ? name : "sm_80");
  }
  return out.append(text, from, std::string::npos);
}

// sm_80's kernel texts by `Key`, and which of another arch's are the same, the arch's name aside.
template <typename Key>
class Sm80Twins {
 public:
  // On sm_80, keeps `text` for `key` (false); on another arch, whether `text` is sm_80's.
  bool twin(const Key& key, const std::string& text, int sm) {
    if (sm == 80) {
      m_text[key] = text;
      return false;
    }
    auto it = m_text.find(key);
    return it != m_text.end() && as_sm80_text(text, sm) == it->second;
  }
  bool on_sm80(const Key& key) const { return m_text.count(key) > 0; }

 private:
  std::map<Key, std::string> m_text;
};

// Compiles each distinct source once per test process.
class Compiled {
 public:
  const Artifact& get(const LoweredProgram& program, const CompileOptions& o) {
    std::string key = std::to_string(program.target.sm) + kernels_and_fallbacks(program);
    auto it = m_done.find(key);
    if (it != m_done.end()) return it->second;
    CompileOptions shared = o;
    shared.kernel_memo = m_memo;
    auto artifact = compile_lowered(program, shared);
    EXPECT_TRUE(artifact.ok()) << (artifact.ok() ? "" : artifact.error().message);
    return m_done.emplace(key, artifact.ok() ? *artifact : Artifact{}).first->second;
  }

 private:
  // Kernels that do not depend on the mode (most non-matmul kernels) come out byte-identical
  // across modes: NVRTC compiles each once per process.
  std::shared_ptr<KernelMemo> m_memo = std::make_shared<KernelMemo>();
  std::map<std::string, Artifact> m_done;
};

void expect_clean(const Artifact& a, const std::string& what) {
  ASSERT_FALSE(a.kernels.empty()) << what;
  // Neither the prelude nor generated code draws a warning, so a real one is not buried.
  EXPECT_EQ(a.log.find("warning"), std::string::npos) << what << ":\n" << a.log;
  auto from_log = parse_ptxas_log(a.log);
  for (const KernelArtifact& k : a.kernels) {
    EXPECT_EQ(k.report.spill_bytes(), 0) << what << " " << k.name;
    // Registers, frame and shared memory are read from the cubin; ptxas's log says the same of
    // every kernel (a kernel running another's binary finds that one's).
    int said = 0;
    for (const auto& [entry, report] : from_log) {
      if (entry != k.entry) continue;
      EXPECT_EQ(report, k.report) << what << " " << k.name;
      ++said;
    }
    EXPECT_EQ(said, 1) << what << " " << k.name;
    EXPECT_GT(k.report.registers, 0) << what << " " << k.name;
    EXPECT_FALSE(k.cubin.empty()) << what << " " << k.name;
    EXPECT_FALSE(k.ptx.empty()) << what << " " << k.name;
  }
  // What the runtime checks before the driver sees a cubin holds of every kernel kiln compiles.
  Status loadable = check_cubins(a);
  EXPECT_TRUE(loadable.ok()) << what << ": " << (loadable ? "" : loadable.error().message);
}

// compile_lowered of each program, on as many threads as there are cores: a sweep of a few
// hundred one-kernel programs compiled one after another leaves a core idle (the attention sweep
// took 604 s alone on 2 cores that way, past ctest's 900 s beside the tile sweep; 256 s so).
std::vector<Expected<Artifact>> compile_on_every_core(const std::vector<LoweredProgram>& programs,
                                                      const std::vector<CompileOptions>& options) {
  if (programs.empty()) return {};
  std::vector<std::optional<Expected<Artifact>>> done(programs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < programs.size();) done[i].emplace(compile_lowered(programs[i],
                                                                                    options[i]));
  };
  size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, programs.size());
  std::vector<std::thread> others;
  for (size_t t = 1; t < threads; ++t) others.emplace_back(work);
  work();
  for (std::thread& t : others) t.join();
  std::vector<Expected<Artifact>> artifacts;
  for (auto& a : done) artifacts.push_back(std::move(*a));
  return artifacts;
}

class CompileMatrix : public ::testing::TestWithParam<std::string> {};

// sm_86, sm_89, sm_100 and sm_120 lower most graphs to sm_80's kernels, the arch's name aside:
// there every mode is lowered and its text compared with sm_80's, and NVRTC compiles tf32x3 (the
// most registers) for the arch; a mode whose text differs is compiled too. (Compiling every mode
// there took about half the matrix's time, for programs sm_80's compiles check.)
TEST_P(CompileMatrix, EveryModeAndArchCompilesWithoutSpillsOrWarningsOrIsRefused) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  ir::Graph g = example(GetParam());
  Compiled compiled;
  Sm80Twins<ir::Precision> sm80;  // kernels and fallbacks, per mode
  for (int sm : k_archs) {
    for (ir::Precision mode : k_modes) {
      std::string what =
          GetParam() + " " + std::string(ir::to_string(mode)) + " sm_" + std::to_string(sm);
      CompileOptions strict = test::with_bucket(g, options(sm, mode));
      auto program = lower(g, strict);
      if (must_refuse(g, mode, sm)) {
        ASSERT_FALSE(program.ok()) << what;
        EXPECT_NE(program.error().message.find("sm_75"), std::string::npos) << what;
        CompileOptions lenient = test::with_bucket(g, options(sm, mode, FallbackPolicy::allow));
        auto fallback = lower(g, lenient);
        ASSERT_TRUE(fallback.ok()) << what << ": " << fallback.error().message;
        const Artifact& a = compiled.get(*fallback, lenient);
        expect_clean(a, what + " (fallback)");
        EXPECT_FALSE(a.fallbacks.empty()) << what;
        continue;
      }
      ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
      if (sm80.twin(mode, kernels_and_fallbacks(*program), sm) && sm != 90 && mode != ir::Precision::tf32x3) continue;
      const Artifact& a = compiled.get(*program, strict);
      expect_clean(a, what);
      for (const KernelArtifact& k : a.kernels) {
        // A split-K matmul's sum kernel ("..._split4_sum") reads its partials elementwise.
        bool sum = k.name.size() > 4 && k.name.compare(k.name.size() - 4, 4, "_sum") == 0;
        if (sm >= 80 && k.name.find("matmul") != std::string::npos && !sum) {
          EXPECT_NE(k.ptx.find("cp.async"), std::string::npos) << what << " " << k.name;
          if (k.name.find("ffma") == std::string::npos) {
            EXPECT_NE(k.ptx.find("ldmatrix"), std::string::npos) << what << " " << k.name;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, CompileMatrix, ::testing::ValuesIn(test::example_names()),
                         [](const auto& info) { return info.param; });

TEST(CompileShapes, LargeTransposedAndRaggedMatmulsCompileWithoutSpills) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  ir::Graph f32 = test::parse(R"(graph big {
    input a: f32[2048, 1000]
    input b: f32[2050, 1000]
    input c: f32[2048, 1000]
    input d: f32[33, 35]
    input e: f32[35, 37]
    x = relu(matmul(a, b, transpose_b=true))
    y = matmul(c, x, transpose_a=true)
    z = matmul(d, e)
    output y, z
  })");
  ir::Graph half = test::parse(R"(graph big_half {
    input a: f16[2048, 1000]
    input b: f16[2050, 1000]
    input c: f16[2048, 1000]
    x = matmul(a, b, transpose_b=true)
    y = matmul(c, x, transpose_a=true)
    output y
  })");
  for (int sm : {80, 90}) {
    for (ir::Precision p : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                            ir::Precision::medium}) {
      auto a = compile(f32, options(sm, p));
      ASSERT_TRUE(a.ok()) << a.error().message;
      expect_clean(*a, std::string(ir::to_string(p)) + " sm_" + std::to_string(sm));
      // 2048 x 2050 fills the GPU with 128x128 tiles.
      EXPECT_NE(a->kernels[0].name.find("128x128"), std::string::npos) << a->kernels[0].name;
    }
  }
  for (int sm : {75, 80}) {
    auto a = compile(half, options(sm, ir::Precision::automatic));
    ASSERT_TRUE(a.ok()) << a.error().message;
    expect_clean(*a, "f16 sm_" + std::to_string(sm));
  }
}

// Every tile a schedule may choose (the tuner's candidates, not only the heuristic's picks)
// compiles without spills on every tensor-core path, for both operand orientations, on sm_80,
// sm_86 (99 KiB), sm_90 and sm_120, on rows copied as 16-byte vectors and on ragged ones; each
// block shape (tile, K step, warps) at each of its stage counts.
// A graph dtype and mode for each matmul path: tf32, tf32x3, bf16 of f32, FFMA, f16, bf16.
struct Path {
  const char* dtype;
  ir::Precision precision;
};
const Path k_every_path[] = {{"f32", ir::Precision::high},   {"f32", ir::Precision::tf32x3},
                             {"f32", ir::Precision::medium}, {"f32", ir::Precision::highest},
                             {"f16", ir::Precision::high},   {"bf16", ir::Precision::high}};

// A causal attention op of 2 x 3 heads of 77 queries and keys at head dim `d`.
ir::Graph causal_attention(const std::string& dtype, int d) {
  std::string shape = "[2, 3, 77, " + std::to_string(d) + "]";
  return test::parse("graph a {\n  input q: " + dtype + shape + "\n  input k: " + dtype + shape +
                     "\n  input v: " + dtype + shape +
                     "\n  o = attention(q, k, v, causal=true)\n  output o\n}\n");
}

// A tile sm_86, sm_90 or sm_120 shares with sm_80 is lowered to sm_80's kernels, the arch's name
// aside (compared for each): NVRTC compiles such a twin for that arch where its warp tile is the
// largest among the twins (where ptxas would run out of registers first), at each of its stage
// counts. Tiles of an arch's own (sm_90's split-K tiles, stage counts only its shared memory
// holds) and any tile whose text differs from sm_80's are all compiled.
TEST(CompileShapes, EveryCandidateTileCompilesWithoutSpillsOnEveryPath) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  int compiled = 0, wide = 0, splits = 0, double_buffered = 0, twins = 0;
  // Split-K tiles that share a split share their sums kernel: compiled once.
  auto memo = std::make_shared<KernelMemo>();
  // sm_80's kernels by path, row kind and tile.
  Sm80Twins<std::tuple<const Path*, bool, std::string>> sm80;
  for (int sm : {80, 86, 90, 120}) {
  for (const Path& path : k_every_path) {
    for (bool ragged : {false, true}) {
      // Ragged: rows of no 16-byte multiple in any dtype, copied element by element.
      // K = 264: 9 tiles of 32 16-bit elements and 17 of 16 fp32 ones, so split-K candidates
      // (2 ranges, and 4 for fp32) exist on every path.
      std::string t = path.dtype, m = ragged ? "301" : "296", n = ragged ? "259" : "264";
      ir::Graph g = test::parse("graph both {\n  input a: " + t + "[" + m + ", 264]\n  input b: " +
                                t + "[264, " + n + "]\n  input c: " + t + "[264, " + m +
                                "]\n  input d: " + t + "[" + n + ", 264]\n  x = matmul(a, b)\n" +
                                "  y = matmul(c, d, transpose_a=true, transpose_b=true)\n" +
                                "  output x, y\n}\n");
      auto request = check_request(g, options(sm, path.precision));
      ASSERT_TRUE(request.ok()) << request.error().message;
      auto heuristic = lower(g, *request);
      ASSERT_TRUE(heuristic.ok()) << heuristic.error().message;
      // The tiles legal for both matmuls (a ragged operand rules 64x64 warp tiles out).
      std::map<std::tuple<int, int, int, int>, MatmulTile> most;
      for (const KernelPlan& k : heuristic->plan.kernels) {
        for (const MatmulTile& tile : candidate_tiles(k.shape, sm)) {
          if (!check_tile(tile, heuristic->plan.kernels[0].shape, sm) ||
              !check_tile(tile, heuristic->plan.kernels[1].shape, sm)) {
            continue;
          }
          // Split-K tiles on sm_90 only: their partials kernel is the unsplit kernel with a
          // shorter K loop and a plainer epilogue.
          if (tile.split_k > 1 && sm != 90) continue;
          most[{tile.bm, tile.bn, tile.bk,
                tile.split_k * 1000 + tile.warps_m * 100 + tile.warps_n * 10 + tile.stages}] = tile;
        }
      }
      // The largest warp tile (most accumulators) among the tiles sm_80 has too.
      auto warp_area = [](const MatmulTile& x) {
        return x.bm / x.warps_m * (x.bn / x.warps_n);
      };
      int largest = 0;
      for (const auto& [block, tile] : most) {
        if (sm80.on_sm80({&path, ragged, to_string(tile)})) {
          largest = std::max(largest, warp_area(tile));
        }
      }
      for (const auto& [block, tile] : most) {
        std::string what = "sm_" + std::to_string(sm) + " " + t + (ragged ? " ragged " : " ") +
                           std::string(ir::to_string(path.precision)) + " " + to_string(tile);
        auto program = lower(g, *request, FixedSchedule(tile));
        ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
        std::string text = program_source(*program, Prelude::omit);
        if (sm80.twin({&path, ragged, to_string(tile)}, text, sm)) {
          ++twins;
          if (warp_area(tile) < largest) continue;
        }
        CompileOptions o = request->options;
        o.kernel_memo = memo;
        auto a = compile_lowered(*program, o);
        ASSERT_TRUE(a.ok()) << what << ": " << a.error().message;
        expect_clean(*a, what);
        for (const KernelArtifact& k : a->kernels) {
          EXPECT_EQ(k.tile, to_string(tile)) << what;
          EXPECT_EQ(k.schedule, "fixed") << what;
        }
        ++compiled;
        wide += tile.bn == 256;
        splits += tile.split_k > 1;
        double_buffered +=
            double_buffers_fragments(tile, program->plan.kernels[0].shape) &&
            program->kernel_sources[0].find("unsigned af0[") != std::string::npos;
      }
    }
  }
  }
  EXPECT_GE(compiled, 4 * 6 * 2 * 2);
  EXPECT_GE(twins, 3 * 6 * 2 * 2) << "sm_86's, sm_90's and sm_120's tiles as sm_80's kernels";
  EXPECT_GE(wide, 4) << "the 128x256 tiles of tf32, medium, f16 and bf16 (aligned rows)";
  EXPECT_GE(splits, 5 * 2) << "split-K tiles on sm_90, every tensor-core path, both row kinds";
  EXPECT_GE(double_buffered, 5 * 2) << "fragments double-buffered on every path but tf32x3";
}

// The fused attention kernel at head dims 64, 128 and 256, causal, on every tensor-core path,
// sm_80 and sm_90: the Q fragments kept in registers exactly where they take 32 registers or
// fewer (16-bit and medium up to 128, tf32 up to 64, tf32x3 up to 32), and the model's tile one
// of the tuner's candidates, which EveryAttentionCandidateCompilesWithoutSpills compiles on the
// same graphs (no spills, no warnings).
TEST(CompileShapes, FusedAttentionKeepsQInRegistersWhereItFitsAtEveryHeadDim) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  struct HeadDimPath {
    const char* dtype;
    ir::Precision precision;
    int q_registers_per_16;  // Q fragment registers per 16 of head dim
  };
  const HeadDimPath paths[] = {{"f32", ir::Precision::high, 8},
                               {"f32", ir::Precision::tf32x3, 16},
                               {"f32", ir::Precision::medium, 4},
                               {"bf16", ir::Precision::high, 4},
                               {"f16", ir::Precision::high, 4}};
  int compiled = 0;
  for (int sm : {80, 90}) {
    for (const HeadDimPath& path : paths) {
      for (int d : {64, 128, 256}) {
        std::string t = path.dtype;
        ir::Graph g = causal_attention(t, d);
        std::string what = "sm_" + std::to_string(sm) + " " + t + " " +
                           std::string(ir::to_string(path.precision)) + " d " + std::to_string(d);
        auto program = lower(g, options(sm, path.precision));
        ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
        ASSERT_EQ(program->plan.kernels.size(), 1u) << what;
        bool q_in_registers = d / 16 * path.q_registers_per_16 <= 32;
        EXPECT_EQ(program->kernel_sources[0].find("unsigned qf[") != std::string::npos,
                  q_in_registers)
            << what;
        const KernelPlan& k = program->plan.kernels[0];
        std::vector<AttentionTile> candidates = attention_candidates(k.attention_shape, sm);
        EXPECT_TRUE(std::any_of(candidates.begin(), candidates.end(), [&](const AttentionTile& t) {
          return same_tile(t, k.attention_tile);
        })) << what << ": " << to_string(k.attention_tile);
        ++compiled;
      }
    }
  }
  EXPECT_EQ(compiled, 2 * 5 * 3);
}

// Every attention tile a schedule may choose (attention_candidates: the tuner's, not only the
// heuristic's) compiles without spills or warnings at head dims 64, 128 and 256, causal, on
// every path, on sm_80 and sm_90. (Registers move with the stages too: f16 at D = 256 with 8
// warps and 16-key tiles took 232 at 2 stages and 117 at 3.) A tile sm_90 shares with sm_80 is
// lowered to sm_80's kernel, the arch's name aside (compared for each): NVRTC compiles such a
// twin for sm_90 at head dim 256 (the most registers), and at 64 and 128 where its scores per
// thread are the most among the twins, at each of its stage counts. Tiles of sm_90's own (its
// larger shared memory) and any whose text differs from sm_80's are all compiled.
TEST(CompileShapes, EveryAttentionCandidateCompilesWithoutSpills) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  int compiled = 0, eight_warps = 0, wide_keys_at_256 = 0, twins = 0;
  Sm80Twins<std::tuple<const Path*, int, std::string>> sm80;
  std::vector<LoweredProgram> programs;
  std::vector<CompileOptions> program_options;
  std::vector<std::string> whats;
  std::vector<AttentionTile> tiles;
  for (int sm : {80, 90}) {
    for (const Path& path : k_every_path) {
      for (int d : {64, 128, 256}) {
        std::string t = path.dtype;
        ir::Graph g = causal_attention(t, d);
        CompileOptions o = options(sm, path.precision);
        auto request = check_request(g, o);
        ASSERT_TRUE(request.ok()) << request.error().message;
        auto heuristic = lower(g, *request);
        ASSERT_TRUE(heuristic.ok()) << heuristic.error().message;
        ASSERT_EQ(heuristic->plan.kernels.size(), 1u);
        const AttentionShape& as = heuristic->plan.kernels[0].attention_shape;
        std::vector<AttentionTile> candidates = attention_candidates(as, sm);
        // The most scores a thread holds among the tiles sm_80 has too.
        auto per_thread = [](const AttentionTile& x) { return x.br * x.bc / x.warps; };
        int most = 0;
        for (const AttentionTile& x : candidates) {
          if (sm80.on_sm80({&path, d, to_string(x)})) most = std::max(most, per_thread(x));
        }
        for (const AttentionTile& tile : candidates) {
          std::string what = "sm_" + std::to_string(sm) + " " + t + " " +
                             std::string(ir::to_string(path.precision)) + " d " +
                             std::to_string(d) + " " + to_string(tile);
          ChosenSchedule chosen({{problem_signature(as), {tile, "tuning candidate"}}});
          auto program = lower(g, *request, chosen);
          ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
          eight_warps += tile.warps == 8;
          wide_keys_at_256 += d == 256 && tile.bc == 64;
          std::string text = program_source(*program, Prelude::omit);
          if (sm80.twin({&path, d, to_string(tile)}, text, sm)) {
            ++twins;
            if (d != 256 && per_thread(tile) < most) continue;
          }
          programs.push_back(std::move(*program));
          program_options.push_back(o);
          whats.push_back(what);
          tiles.push_back(tile);
        }
      }
    }
  }
  std::vector<Expected<Artifact>> artifacts = compile_on_every_core(programs, program_options);
  for (size_t i = 0; i < artifacts.size(); ++i) {
    const std::string& what = whats[i];
    ASSERT_TRUE(artifacts[i].ok()) << what << ": " << artifacts[i].error().message;
    expect_clean(*artifacts[i], what);
    EXPECT_EQ(artifacts[i]->kernels[0].tile, to_string(tiles[i])) << what;
    EXPECT_EQ(artifacts[i]->kernels[0].schedule, "tuning candidate") << what;
    ++compiled;
  }
  EXPECT_GE(compiled, 150);
  EXPECT_GE(twins, 6 * 3) << "sm_90's tiles lowered to sm_80's kernels";
  EXPECT_GE(eight_warps, 2 * 6 * 3) << "8-warp candidates on every path at every head dim and arch";
  EXPECT_GE(wide_keys_at_256, 4) << "64-key tiles at head dim 256 where the opt-in smem holds them";
}

// The block orders a schedule may choose besides the model's groups of 8 (row-major, groups of 16)
// compile without spills or warnings: the 4096^2 bf16 and tf32 tiles on sm_90.
TEST(CompileShapes, OtherBlockOrdersCompileWithoutSpills) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  int compiled = 0;
  for (const char* dtype : {"f32", "bf16"}) {
    std::string t = dtype;
    ir::Graph g = test::parse("graph g {\n  input a: " + t + "[4096, 4096]\n  input b: " + t +
                              "[4096, 4096]\n  c = matmul(a, b)\n  output c\n}\n");
    auto request = check_request(g, options(90, ir::Precision::high));
    ASSERT_TRUE(request.ok()) << request.error().message;
    auto model = lower(g, *request);
    ASSERT_TRUE(model.ok()) << model.error().message;
    MatmulTile tile = model->plan.kernels[0].tile;
    for (int group : {1, 16}) {
      tile.group = group;
      std::string what = t + " " + to_string(tile);
      auto program = lower(g, *request, FixedSchedule(tile));
      ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
      auto a = compile_lowered(*program, request->options);
      ASSERT_TRUE(a.ok()) << what << ": " << a.error().message;
      expect_clean(*a, what);
      EXPECT_EQ(a->kernels[0].tile, to_string(tile)) << what;
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, 4);
}

// cos and sin reach NVRTC as cosf/sinf on every arch family, with no spills or warnings.
TEST(CompileShapes, CosAndSinCompileOnEveryArchFamily) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  ir::Graph g = test::parse(R"(graph rotary {
    input x: f32[64, 64]
    input t: f32[64, 64]
    input w: f32[64, 64]
    y = add(mul(x, cos(t)), mul(matmul(x, w), sin(t)))
    output y
  })");
  for (int sm : {75, 80, 90, 120}) {
    auto a = compile(g, options(sm, ir::Precision::highest));
    ASSERT_TRUE(a.ok()) << a.error().message;
    expect_clean(*a, "cos/sin sm_" + std::to_string(sm));
    EXPECT_NE(a->source.find("cosf("), std::string::npos);
    EXPECT_NE(a->source.find("sinf("), std::string::npos);
  }
}

// erf, log and the tanh gelu reach NVRTC as erff/logf/tanhf on every arch family, with no spills
// or warnings, in a matmul epilogue and alone.
TEST(CompileShapes, ErfLogAndTanhGeluCompileOnEveryArchFamily) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  ir::Graph g = test::parse(R"(graph acts {
    input x: f32[64, 64]
    input w: f32[64, 64]
    y = add(gelu(matmul(x, w), approximate="tanh"), log(add(abs(erf(x)), 1.0)))
    output y
  })");
  for (int sm : {75, 80, 90, 120}) {
    auto a = compile(g, options(sm, sm >= 80 ? ir::Precision::high : ir::Precision::highest));
    ASSERT_TRUE(a.ok()) << a.error().message;
    expect_clean(*a, "erf/log/gelu_tanh sm_" + std::to_string(sm));
    EXPECT_NE(a->source.find("erff("), std::string::npos);
    EXPECT_NE(a->source.find("logf("), std::string::npos);
    EXPECT_NE(a->source.find("tanhf("), std::string::npos);
  }
}

// Integer and bool values reach NVRTC on every arch family with no spills or warnings: the
// padding-mask graph (where, comparisons, logical ops, wrapping i32 products, every cast), the
// embeddings, the rotary tables from arange, the running sums (warp shuffles of 64-bit
// integers) and rolls.
TEST(CompileShapes, IntegerAndBoolKernelsCompileOnEveryArchFamily) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  for (const char* name :
       {"masks_odd", "embedding_odd", "rotary_positions_odd", "scans_odd", "rolls_odd"}) {
    auto g = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/tests/emulation/graphs/" +
                                  name + ".kg");
    ASSERT_TRUE(g) << g.error().message;
    for (int sm : {75, 80, 90, 120}) {
      auto a = compile(*g, options(sm, ir::Precision::highest));
      ASSERT_TRUE(a.ok()) << a.error().message;
      expect_clean(*a, std::string(name) + " sm_" + std::to_string(sm));
      EXPECT_NE(a->source.find("long long"), std::string::npos) << name;
    }
  }
}

TEST(CompileShapes, AWideSumCompilesAsSeveralKernels) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  auto a = compile(test::parse(test::wide_sum(300, "f32[37]")), options(90, ir::Precision::high));
  ASSERT_TRUE(a.ok()) << a.error().message;
  expect_clean(*a, "300-input sum");
  ASSERT_EQ(a->kernels.size(), 2u);
  EXPECT_EQ(a->kernels[0].params.size(), 1 + k_max_kernel_reads);  // x0 + ... + x255
  EXPECT_EQ(a->kernels[1].params.size(), 1u + 45);  // that + x256 + ... + x299
  EXPECT_EQ(a->temporary_bytes.size(), 1u);
}

// `g` lowered with `tile` for every matmul and compiled for sm_90a: clean (expect_clean), and each
// of its `matmuls` matmul kernels holds the wgmma design: the tile, the `wgmma` instruction
// named (e.g. "m64n128k16.f32.bf16"), TMA loads, setmaxnreg's 240, no mma.sync, no local memory
// (not even a copy of a tensor map: each is read where it lies, __grid_constant__), and the 168
// registers setmaxnreg's budget (24 x 128 + 240 x 256) takes from launch.
// `a_in_registers` (where given): whether the tf32 wgmmas read A from registers (the RS form:
// "{%r.., %r.., %r.., %r..}" after the accumulators, where the SS form has a 64-bit descriptor).
void expect_wgmma_matmuls(const ir::Graph& g, const CompileRequest& request,
                          const MatmulTile& tile, const std::string& wgmma, int matmuls,
                          const std::string& what,
                          std::optional<bool> a_in_registers = std::nullopt) {
  auto program = lower(g, request, FixedSchedule(tile));
  ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
  auto a = compile_lowered(*program, request.options);
  ASSERT_TRUE(a.ok()) << what << ": " << a.error().message;
  expect_clean(*a, what);
  int found = 0;
  for (const KernelArtifact& k : a->kernels) {
    if (k.name.find("matmul") == std::string::npos) continue;
    ++found;
    EXPECT_EQ(k.tile, to_string(tile)) << what;
    EXPECT_NE(k.ptx.find("wgmma.mma_async.sync.aligned." + wgmma), std::string::npos) << what << " " << k.name;
    EXPECT_NE(k.ptx.find("cp.async.bulk.tensor"), std::string::npos) << what << " " << k.name;
    EXPECT_NE(k.ptx.find("setmaxnreg.inc.sync.aligned.u32 240"), std::string::npos) << what;
    EXPECT_EQ(k.ptx.find("mma.sync"), std::string::npos) << what << " " << k.name;
    EXPECT_EQ(k.report.local_bytes, 0) << what << " " << k.name;
    EXPECT_EQ(k.report.registers, 168) << what << " " << k.name;
    EXPECT_TRUE(k.launch.persistent) << what;
    EXPECT_EQ(k.launch.block[0], 384u) << what;
    if (tile.bk == 32) {  // the tf32 path's rounding pass
      EXPECT_NE(k.ptx.find("cvt.rna.tf32.f32"), std::string::npos) << what << " " << k.name;
      if (a_in_registers) {
        EXPECT_EQ(k.ptx.find("}, {%r") != std::string::npos, *a_in_registers) << what << " " << k.name;
      }
    }
  }
  EXPECT_EQ(found, matmuls) << what;
}

// sm_90a's wgmma kernel: every tile `kiln tune` may choose, on bf16 and f16, B N-major and
// K-major, aligned and ragged edges, batched A and B, a batched A with B broadcast, a batch of
// one (no operand reads the batch coordinate), and the heaviest epilogues the examples
// fuse (bias and GELU; silu(gate) * up; a residual and a cast), compiles without a spill or a
// ptxas warning (C7520 "wgmma serialized", setmaxnreg ignored) and holds what the design says:
// TMA loads, wgmma, setmaxnreg, no mma.sync.
TEST(CompileShapes, EveryWgmmaTileCompilesWithoutSpillsOrWarningsOnSm90a) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  int compiled = 0;
  for (const char* t : {"bf16", "f16"}) {
    for (bool ragged : {false, true}) {
      std::string d = t, m = ragged ? "200" : "256", n = ragged ? "264" : "512";
      ir::Graph g = test::parse(
          "graph w {\n  input x: " + d + "[" + m + ", 320]\n  input wh: " + d + "[320, " + n +
          "]\n  input wg: " + d + "[320, " + n +
          "]\n  input wu: " + d + "[320, " + n + "]\n  input b: " + d + "[" + n +
          "]\n  input wd: " + d + "[320, " + n + "]\n  input xb: " + d + "[2, " + m +
          ", 320]\n  input wb: " + d + "[2, 320, " + n + "]\n  input r: f32[" + m + ", 320]\n" +
          "  input x1: " + d + "[1, " + m + ", 320]\n" +
          "  h = gelu(add(matmul(x, wh), b))\n"
          "  gated = mul(silu(matmul(x, wg)), matmul(x, wu))\n"
          "  y = cast(add(matmul(gated, wd, transpose_b=true), cast(r, to=" + d + ")), to=f32)\n"
          "  z = matmul(xb, wb)\n"
          "  u = matmul(xb, wu)\n  v = matmul(x1, wu)\n"
          "  output h, y, z, u, v\n}\n");
      CompileOptions o;
      o.target = Target::cuda(90, "a");
      o.precision = ir::Precision::high;
      auto request = check_request(g, o);
      ASSERT_TRUE(request.ok()) << request.error().message;
      MatmulShape any;
      any.elem_bytes = 2;  // 16-bit products' tiles (K 64 a stage)
      for (const MatmulTile& tile : wgmma_candidates(any)) {
        std::string what = std::string("sm_90a ") + t + (ragged ? " ragged " : " ") + to_string(tile);
        expect_wgmma_matmuls(g, *request, tile, "m64n" + std::to_string(tile.bn) + "k16.f32." + d,
                             7, what);
        ++compiled;
      }
    }
  }
  EXPECT_EQ(compiled, 2 * 2 * 4);
}

// Three matmuls of `d` operands with the heaviest epilogues the wgmma tests fuse: h = gelu(x w +
// b), z = xb wb + r (xb batched, `a` and `ab` x's and xb's dims, `w` w's dims, wb's w's by a batch
// of 2, n the columns), u = xb w; `args` closes each matmul (its transpose attributes, then ")").
ir::Graph three_matmuls(const std::string& d, const std::string& a, const std::string& ab,
                        const std::string& w, const std::string& m, const std::string& n,
                        const std::string& args) {
  return test::parse("graph w {\n  input x: " + d + "[" + a + "]\n  input w: " + d + "[" + w +
                     "]\n  input b: " + d + "[" + n + "]\n  input xb: " + d + "[" + ab +
                     "]\n  input wb: " + d + "[2, " + w + "]\n  input r: " + d + "[2, " + m +
                     ", " + n + "]\n"
                     "  h = gelu(add(matmul(x, w" + args + ", b))\n"
                     "  z = add(matmul(xb, wb" + args + ", r)\n"
                     "  u = matmul(xb, w" + args + "\n"
                     "  output h, z, u\n}\n");
}

// The wgmma kernel on fp32 operands (`high`, `tf32x3` and `medium`) at every tile the tuner may
// choose, aligned and ragged, shared and batched B, B K-major and B [K, N], with a bias, GELU and
// residual: no spill or warning, 168 registers, tf32 wgmma with A from registers (K-major here)
// and the rounding's cvt.rna (bf16 wgmma for medium), no mma.sync.
TEST(CompileShapes, EveryFp32OperandWgmmaTileCompilesWithoutSpillsOrWarningsOnSm90a) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  int compiled = 0;
  for (ir::Precision precision : {ir::Precision::high, ir::Precision::tf32x3, ir::Precision::medium})
  for (bool kn : {false, true}) {
    for (bool ragged : {false, true}) {
      std::string m = ragged ? "200" : "256", n = ragged ? "264" : "512";
      // B's type and how a matmul reads it: [N, K] with transpose_b, or [K, N]
      std::string w = kn ? "320, " + n : n + ", 320", tb = kn ? ")" : ", transpose_b=true)";
      ir::Graph g = three_matmuls("f32", m + ", 320", "2, " + m + ", 320", w, m, n, tb);
      CompileOptions o;
      o.target = Target::cuda(90, "a");
      o.precision = precision;
      auto request = check_request(g, o);
      ASSERT_TRUE(request.ok()) << request.error().message;
      MatmulShape f32;
      f32.elem_bytes = 4;
      f32.path = precision == ir::Precision::high     ? MatmulPath::tf32
                 : precision == ir::Precision::tf32x3 ? MatmulPath::tf32x3
                                                      : MatmulPath::bf16_of_f32;
      f32.b_k_contiguous = !kn;
      // tf32 wgmma reads B K-major only; medium's bf16 wgmma reads B [K, N] as it lies
      EXPECT_EQ(wgmma_transposes_b(f32), kn && precision != ir::Precision::medium);
      for (const MatmulTile& tile : wgmma_candidates(f32)) {
        std::string what = "sm_90a " + std::string(ir::to_string(precision)) +
                           (kn ? " B [K, N]" : " B K-major") +
                           (ragged ? " ragged " : " ") + to_string(tile);
        bool medium = precision == ir::Precision::medium;
        ASSERT_EQ(tile.bk, medium ? 64 : 32) << what;
        // tf32: A K-major from registers
        expect_wgmma_matmuls(g, *request, tile,
                             "m64n" + std::to_string(tile.bn) +
                                 (medium ? "k16.f32.bf16.bf16" : "k8.f32.tf32.tf32"),
                             3, what, !medium);
        ++compiled;
      }
    }
  }
  // high: 4 tiles B K-major, 3 B [K, N]; tf32x3: 3 and 2 (A's small parts in registers, a
  // stage is 48 or 64 KiB); medium: 1 and 1; each aligned and ragged
  EXPECT_EQ(compiled, 2 * (4 + 3 + 3 + 2 + 1 + 1));
}

// A read as [K, M] (transpose_a) on the wgmma kernel, at every tile the tuner may choose for it,
// ragged, shared and batched A, B K-major and B [K, N], with a bias, GELU and residual: 16-bit A
// read by wgmma as TMA loads it (imm-trans-a set: the PTX's immediates "1, 1, 1, TransB" after
// scale-d), fp32 A staged and written K-major (tf32, tf32x3) or converted (medium). No spill or
// warning, 168 registers, no mma.sync.
TEST(CompileShapes, EveryTransposedAWgmmaTileCompilesWithoutSpillsOrWarningsOnSm90a) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  int compiled = 0;
  for (const char* t : {"bf16", "f16", "f32"}) {
    std::string d = t;
    bool f32 = d == "f32";
    for (ir::Precision precision : {ir::Precision::high, ir::Precision::tf32x3, ir::Precision::medium}) {
      if (!f32 && precision != ir::Precision::high) continue;  // the mode changes nothing for 16-bit
      for (bool kn : {false, true}) {
        std::string w = kn ? "320, 264" : "264, 320", tb = kn ? ", transpose_a=true)" : ", transpose_a=true, transpose_b=true)";
        ir::Graph g = three_matmuls(d, "320, 200", "2, 320, 200", w, "200", "264", tb);
        CompileOptions o;
        o.target = Target::cuda(90, "a");
        o.precision = precision;
        auto request = check_request(g, o);
        ASSERT_TRUE(request.ok()) << request.error().message;
        MatmulShape shape;
        shape.elem_bytes = f32 ? 4 : 2;
        shape.path = !f32                                 ? MatmulPath::bf16
                     : precision == ir::Precision::high   ? MatmulPath::tf32
                     : precision == ir::Precision::tf32x3 ? MatmulPath::tf32x3
                                                          : MatmulPath::bf16_of_f32;
        shape.a_k_contiguous = false;
        shape.b_k_contiguous = !kn;
        // tf32 wgmma reads A K-major only; 16-bit and medium's bf16 wgmma read A [K, M] as it lies
        EXPECT_EQ(wgmma_transposes_a(shape), f32 && precision != ir::Precision::medium);
        bool medium = f32 && precision == ir::Precision::medium, tf32 = f32 && !medium;
        std::vector<MatmulTile> tiles = wgmma_candidates(shape);
        for (const MatmulTile& tile : tiles) {
          std::string what = "sm_90a " + d + " " + std::string(ir::to_string(precision)) +
                             (kn ? " A [K, M], B [K, N] " : " A [K, M], B K-major ") + to_string(tile);
          std::string type = tf32 ? "k8.f32.tf32.tf32" : medium ? "k16.f32.bf16.bf16" : "k16.f32." + d;
          // tf32: A [K, M] staged, written K-major and read by descriptor
          expect_wgmma_matmuls(g, *request, tile, "m64n" + std::to_string(tile.bn) + type, 3, what,
                               false);
          if (!tf32 && &tile == &tiles.front()) {  // imm-trans-a and imm-trans-b: the last immediates
            auto program = lower(g, *request, FixedSchedule(tile));
            ASSERT_TRUE(program.ok()) << what;
            auto a = compile_lowered(*program, request->options);
            ASSERT_TRUE(a.ok()) << what;
            std::string trans = std::string("p, 1, 1, 1, ") + (kn ? "1;" : "0;");
            EXPECT_NE(a->kernels[0].ptx.find(trans), std::string::npos) << what;
          }
          ++compiled;
        }
      }
    }
  }
  // bf16, f16 and medium: 4, 4 and 1 tiles for either B; high: 3 (B K-major) and 2 (B [K, N]:
  // both staging areas leave 128x128 three stages); tf32x3: 1 and 1
  EXPECT_EQ(compiled, 2 * (4 + 4 + 1) + 3 + 2 + 1 + 1);
}

// Matmuls with two to four batch dims on the wgmma kernel (the emulator's wgmma_batched graphs:
// operands' tensor maps of rank 3 to 5, read at the result's batch coordinates), 16-bit and fp32
// in high, tf32x3 and medium, at the 128x128 tile (fp32: 2 stages, as A and B both staged leave
// tf32x3 and medium): no spill or warning, 168 registers, and the
// 4-D and 5-D TMA loads in the PTX.
TEST(CompileShapes, BatchedWgmmaMatmulsCompileWithoutSpillsOrWarningsOnSm90a) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  for (auto [name, precision, matmuls] :
       {std::tuple{"wgmma_batched_bf16_odd", ir::Precision::high, 6},
        std::tuple{"wgmma_batched_odd", ir::Precision::high, 4},
        std::tuple{"wgmma_batched_odd", ir::Precision::tf32x3, 4},
        std::tuple{"wgmma_batched_odd", ir::Precision::medium, 4}}) {
    std::string what = std::string(name) + " " + std::string(ir::to_string(precision));
    auto g = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/tests/emulation/graphs/" +
                                  name + ".kg");
    ASSERT_TRUE(g.ok()) << g.error().message;
    CompileOptions o;
    o.target = Target::cuda(90, "a");
    o.precision = precision;
    auto request = check_request(*g, o);
    ASSERT_TRUE(request.ok()) << request.error().message;
    MatmulShape shape;
    shape.elem_bytes = std::string(name).find("bf16") != std::string::npos ? 2 : 4;
    shape.path = shape.elem_bytes == 2               ? MatmulPath::bf16
                 : precision == ir::Precision::high   ? MatmulPath::tf32
                 : precision == ir::Precision::tf32x3 ? MatmulPath::tf32x3
                                                      : MatmulPath::bf16_of_f32;
    MatmulTile tile = choose_wgmma_tile(shape);
    ASSERT_EQ(tile.bn, 128) << what;
    if (shape.elem_bytes == 4) tile.stages = 2;  // A and B both staged in one of the matmuls
    bool tf32 = shape.path == MatmulPath::tf32 || shape.path == MatmulPath::tf32x3;
    std::string type = tf32 ? "k8.f32.tf32.tf32" : "k16.f32.bf16.bf16";
    expect_wgmma_matmuls(*g, *request, tile, "m64n128" + type, matmuls, what);
    auto program = lower(*g, *request, FixedSchedule(tile));
    ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
    auto a = compile_lowered(*program, request->options);
    ASSERT_TRUE(a.ok()) << what << ": " << a.error().message;
    std::string ptx;
    for (const KernelArtifact& k : a->kernels) ptx += k.ptx;
    for (const char* rank : {"3d", "4d", "5d"})
      EXPECT_NE(ptx.find(std::string("cp.async.bulk.tensor.") + rank), std::string::npos)
          << what << ": " << rank;
  }
}

// sm_90a's attention kernel (the model's choice for 16-bit attention there) at head dims 64 and
// 128 (and a d_v of 128 beside a d of 64), and over 128 (64-key tiles: 256, 192 beside 200, and
// 136 beside 192, P V's width then 192), with every score step it reads: a float mask,
// causality, grouped heads, ragged queries and keys, and a residual in the epilogue. Each compiles
// without a spill or a ptxas warning and holds the design: TMA loads, wgmma from shared memory
// for Q K^T and from registers (the RS form) for P V, setmaxnreg, no mma.sync. fp32 operands in
// `medium` take the same kernel on bf16 wgmma with a producer that loads and converts them itself
// (16-byte cp.async copies into a staging ring, no TMA); in `high` (head dims up to 128) on tf32 wgmma (m64nNk8, P from
// registers), the producer rounding them to tf32, with 64-key tiles past a head dim of 64; in
// `tf32x3` (head dims up to 64, 64-key tiles) with three tf32 wgmmas a step, on the big and small
// parts the producer writes. (The
// model keeps fp32 attention on the mma.sync kernel: WgmmaAttentionSchedule chooses the wgmma
// kernel's tile, as a tuning record may.)
class WgmmaAttentionSchedule final : public ScheduleProvider {
public:
  MatmulTile matmul_tile(const MatmulShape& shape, int sm) const override {
    return heuristic_schedule().matmul_tile(shape, sm);
  }
  AttentionTile attention_tile(const AttentionShape& shape, int) const override {
    return choose_wgmma_attention_tile(shape);
  }
  std::string source() const override { return "fixed"; }
  std::string key() const override { return "wgmma attention"; }
};

TEST(CompileShapes, EveryWgmmaAttentionCompilesWithoutSpillsOrWarningsOnSm90a) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  struct Mode {
    const char* type;
    ir::Precision precision;
  };
  int compiled = 0;
  for (Mode mode : {Mode{"bf16", ir::Precision::high}, Mode{"f16", ir::Precision::high},
                    Mode{"f32", ir::Precision::medium}, Mode{"f32", ir::Precision::high},
                    Mode{"f32", ir::Precision::tf32x3}}) {
    std::string ty = mode.type;
    bool loads = ty == "f32", x3 = mode.precision == ir::Precision::tf32x3;
    bool tf32 = loads && (mode.precision == ir::Precision::high || x3);
    // the wgmmas' shape suffix and operand types
    std::string wg = tf32 ? "k8.f32.tf32.tf32" : "k16.f32." + (loads ? std::string("bf16") : ty);
    // (d, d_v): over 128 the key tile is 64 (tf32: over 64); d_v pads to a multiple of 64, P V's
    // width
    std::vector<std::pair<int, int>> dims = {{64, 128}, {128, 128}, {256, 256}, {200, 192}, {192, 136}};
    // (tf32: d 96 and 24 hold three and one 32-column blocks, the others two and four)
    if (tf32) dims = {{64, 64}, {64, 128}, {128, 128}, {96, 24}, {24, 8}};
    if (x3) dims = {{64, 64}, {40, 56}, {24, 8}};  // (tf32x3: head dims up to 64, 64-key tiles)
    for (auto [d, d_v] : dims) {
      std::string dq = std::to_string(d), dv = std::to_string(d_v);
      std::string pv = std::to_string((d_v + 63) / 64 * 64);
      ir::Graph g = test::parse(
          "graph a {\n  input q: " + ty + "[2, 8, 200, " + dq + "]\n  input k: " + ty +
          "[2, 2, 330, " + dq + "]\n  input v: " + ty + "[2, 2, 330, " + dv +
          "]\n  input pad: " + ty + "[2, 1, 1, 330]\n  input r: " + ty + "[2, 8, 200, " + dv +
          "]\n  o = attention(q, k, v, mask=pad, causal=true)\n  y = add(o, r)\n"
          "  p = attention(q, k, k)\n  output y, p\n}\n");
      CompileOptions o;
      o.target = Target::cuda(90, "a");
      o.precision = mode.precision;
      auto request = check_request(g, o);
      ASSERT_TRUE(request.ok()) << request.error().message;
      std::string what = "sm_90a " + ty + " " + std::string(ir::to_string(mode.precision)) +
                         " d " + dq + " d_v " + dv;
      auto program = lower(g, *request, WgmmaAttentionSchedule());
      ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
      auto a = compile_lowered(*program, request->options);
      ASSERT_TRUE(a.ok()) << what << ": " << a.error().message;
      expect_clean(*a, what);
      int attentions = 0;
      for (const KernelArtifact& k : a->kernels) {
        if (k.name.find("attention") == std::string::npos) continue;
        ++attentions;
        // o's head dims are (d, d_v), p's (d, d)
        bool is_o = k.name.find("k0_") != std::string::npos;
        int kv = is_o ? d_v : d;
        bool wide = x3 || (tf32 ? d > 64 || kv > 64 : d > 128 || kv > 128);
        std::string bc = wide ? "64" : "128";
        EXPECT_EQ(k.tile, "128x" + bc + ", wgmma, 2 stages") << what << " " << k.name;
        EXPECT_NE(k.name.find("_wg128x" + bc), std::string::npos) << what << " " << k.name;
        EXPECT_NE(k.ptx.find("wgmma.mma_async.sync.aligned.m64n" + bc + wg), std::string::npos) << what;
        // P V with A from registers: "{%r.., %r.., %r.., %r..}" after the accumulators, where the
        // SS form has a descriptor (a 64-bit %rd).
        size_t rs = k.ptx.find("}, {%r");
        EXPECT_NE(rs, std::string::npos) << what;
        if (rs != std::string::npos && is_o) {  // o: d_v's width
          EXPECT_NE(k.ptx.rfind("wgmma.mma_async.sync.aligned.m64n" + pv + wg, rs), std::string::npos) << what;
        }
        if (loads) {  // q, k and v copied 16 bytes at a time into the staging ring, converted or
                      // rounded from there
          EXPECT_EQ(k.ptx.find("cp.async.bulk.tensor"), std::string::npos) << what << " " << k.name;
          EXPECT_NE(k.ptx.find("cp.async.cg.shared.global"), std::string::npos) << what << " " << k.name;
          // pieces / 4 groups in flight: 32 pieces where the operands leave 64 KiB, else 16
          int pieces = 0;
          for (const KernelPlan& kp : program->plan.kernels)
            if (kp.name == k.name)
              pieces = wgmma_attention_staging_pieces(kp.attention_tile, kp.attention_shape);
          EXPECT_GE(pieces, 16) << what << " " << k.name;
          EXPECT_NE(k.ptx.find("cp.async.wait_group " + std::to_string(pieces / 4 - 1) + ";"),
                    std::string::npos)
              << what << " " << k.name << " " << pieces;
          EXPECT_EQ(k.ptx.find("ld.global.nc.v4.f32"), std::string::npos) << what << " " << k.name;
          EXPECT_EQ(k.ptx.find("ld.global.v4.f32"), std::string::npos) << what << " " << k.name;
          EXPECT_NE(k.ptx.find(tf32 ? "cvt.rna.tf32.f32" : "cvt.rn.bf16x2.f32"), std::string::npos)
              << what << " " << k.name;
        } else {
          EXPECT_NE(k.ptx.find("cp.async.bulk.tensor.4d"), std::string::npos) << what << " " << k.name;
        }
        // Every wgmma issued: S's d / k steps where key tile 0 starts and in the loop, P V's
        // Bc / k in the loop and for the last tile; tf32x3 issues three a step.
        int kstep = tf32 ? 8 : 16, pad = tf32 ? 32 : 64;
        int steps = (d + pad - 1) / pad * pad / kstep + std::stoi(bc) / kstep;
        size_t issued = 0;
        for (size_t at = k.ptx.find("wgmma.mma_async."); at != std::string::npos;
             at = k.ptx.find("wgmma.mma_async.", at + 1))
          ++issued;
        EXPECT_EQ(issued, static_cast<size_t>(2 * steps * (x3 ? 3 : 1))) << what << " " << k.name;
        EXPECT_NE(k.ptx.find("setmaxnreg.inc.sync.aligned.u32 240"), std::string::npos) << what;
        EXPECT_EQ(k.ptx.find("mma.sync"), std::string::npos) << what << " " << k.name;
        EXPECT_EQ(k.report.local_bytes, 0) << what << " " << k.name;
        EXPECT_EQ(k.report.registers, 168) << what << " " << k.name;
        EXPECT_EQ(k.launch.block[0], 384u) << what;
      }
      EXPECT_EQ(attentions, 2) << what;
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, 23);
}

// A symbolic graph's matmuls and attention on sm_90a's wgmma kernels, as the model plans them at
// the bucket's upper bounds (S up to 8192): each mode's matmul kernel and 16-bit attention (causal,
// grouped heads) compile without a spill or a ptxas warning at the kernels' 168 registers, with
// tensor maps whose dims follow S, and read the tile counts from S's value.
TEST(CompileShapes, SymbolicGraphsWgmmaKernelsCompileWithoutSpillsOrWarningsOnSm90a) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  struct Case {
    const char* type;
    ir::Precision precision;
  };
  for (Case c : {Case{"bf16", ir::Precision::high}, Case{"f32", ir::Precision::high},
                 Case{"f32", ir::Precision::tf32x3}, Case{"f32", ir::Precision::medium}}) {
    std::string ty = c.type, what = "sm_90a symbolic " + ty + " " + std::string(ir::to_string(c.precision));
    bool half = ty == "bf16";
    ir::Graph g = test::parse(
        "graph s {\n  dim S: 1..8192\n  input x: " + ty + "[S, 1024]\n  input w: " + ty +
        "[1024, 1024]\n  input b: " + ty + "[1024]\n" +
        (half ? "  input q: bf16[2, 8, S, 128]\n  input k: bf16[2, 2, S, 128]\n" : "") +
        "  h = gelu(add(matmul(x, w), b))\n  g = matmul(x, w, transpose_b=true)\n" +
        (half ? "  o = attention(q, k, k, causal=true)\n  output h, g, o\n}\n" : "  output h, g\n}\n"));
    CompileOptions o;
    o.target = Target::cuda(90, "a");
    o.precision = c.precision;
    o.bucket = {{4097, 8192}};
    auto request = check_request(g, o);
    ASSERT_TRUE(request.ok()) << request.error().message;
    auto program = lower(g, *request, heuristic_schedule());
    ASSERT_TRUE(program.ok()) << what << ": " << program.error().message;
    auto a = compile_lowered(*program, request->options);
    ASSERT_TRUE(a.ok()) << what << ": " << a.error().message;
    expect_clean(*a, what);
    int wgmma = 0;
    for (size_t i = 0; i < a->kernels.size(); ++i) {
      const KernelArtifact& k = a->kernels[i];
      if (k.tile.find("wgmma") == std::string::npos) continue;
      ++wgmma;
      EXPECT_NE(k.ptx.find("wgmma.mma_async.sync.aligned"), std::string::npos) << what << " " << k.name;
      EXPECT_EQ(k.ptx.find("mma.sync"), std::string::npos) << what << " " << k.name;
      EXPECT_EQ(k.report.local_bytes, 0) << what << " " << k.name;
      EXPECT_EQ(k.report.registers, 168) << what << " " << k.name;
      int maps = 0;
      for (const KernelParam& p : k.params) {
        if (p.kind != ParamKind::tensor_map) continue;
        ++maps;
        EXPECT_FALSE(p.map_terms.empty()) << what << " " << k.name;
      }
      EXPECT_GE(maps, 2) << what << " " << k.name;
      if (k.name.find("matmul") != std::string::npos) {
        EXPECT_NE(program->kernel_sources[i].find("const int tiles_m = (kiln_dim0 + 127) / 128;"),
                  std::string::npos)
            << what << " " << k.name;
      }
    }
    EXPECT_EQ(wgmma, half ? 3 : 2) << what;
  }
}

}  // namespace
}  // namespace kiln::compiler
