// Fused attention run under emulation against the fp64 reference: the attention op in every
// mode and dtype at S in {1, 17, 64, 128, 200} and D in {64, 128}, causal or not, with and
// without a mask, over batch x heads > 1; head dims 32, 40, 96, 160, 192 and 256, v wider or
// narrower than q, and S_q != S_k; the online softmax on scores whose maximum moves in
// every key tile and on rows whose first key tile is masked out entirely; the explicit chain with
// the casts mixed-precision code writes.
#include "compiler/target.h"
#include "emulation/check.h"
#include "ir/parse.h"
#include "reference/audit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace kiln::emulation {
namespace {

// A mode and dtype: f32 graphs in each precision mode, and f16 / bf16 graphs.
struct Arithmetic {
  const char* dtype;
  ir::Precision precision;
};
const Arithmetic k_arithmetic[] = {
    {"f32", ir::Precision::highest}, {"f32", ir::Precision::high},
    {"f32", ir::Precision::tf32x3},  {"f32", ir::Precision::medium},
    {"f16", ir::Precision::high},    {"bf16", ir::Precision::high},
};

struct Case {
  int s;  // S_q = S_k
  int d;  // head dim of q, k and v
  bool causal;
  bool mask;
  int arithmetic;  // index into k_arithmetic
  int sm;
};

void PrintTo(const Case& c, std::ostream* os) {
  const Arithmetic& a = k_arithmetic[c.arithmetic];
  *os << "S " << c.s << " D " << c.d << (c.causal ? " causal" : "") << (c.mask ? " mask" : "")
      << " " << a.dtype << " " << ir::to_string(a.precision) << " sm_" << c.sm;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const Arithmetic& a = k_arithmetic[c.arithmetic];
  return "s" + std::to_string(c.s) + "_d" + std::to_string(c.d) + (c.causal ? "_causal" : "") +
         (c.mask ? "_mask" : "") + "_" + a.dtype + "_" + std::string(ir::to_string(a.precision)) +
         "_sm" + std::to_string(c.sm);
}

// Batch 2 x 3 heads (k and v shared by the heads: broadcast) for even S, 3-D [3, S, D] else; the
// mask, [S, S] or a per-batch key mask [2, 1, 1, S], broadcast.
std::string graph_text(const Case& c) {
  std::string t = k_arithmetic[c.arithmetic].dtype;
  std::string s = std::to_string(c.s), d = std::to_string(c.d);
  bool four = c.s % 2 == 0;
  std::string q = four ? "[2, 3, " + s + ", " + d + "]" : "[3, " + s + ", " + d + "]";
  std::string kv = four ? "[2, 1, " + s + ", " + d + "]" : "[3, " + s + ", " + d + "]";
  std::string text = "graph att {\n  input q: " + t + q + "\n  input k: " + t + kv +
                     "\n  input v: " + t + kv + "\n";
  if (c.mask) text += "  input m: " + t + (four ? "[2, 1, 1, " + s + "]" : "[" + s + ", " + s + "]") + "\n";
  text += "  o = attention(q, k, v" + std::string(c.mask ? ", mask=m" : "") +
          (c.causal ? ", causal=true" : "") + ")\n  output o\n}\n";
  return text;
}

Expected<reference::CheckRun> emulate(const ir::Graph& graph, const compiler::Target& target,
                                      ir::Precision precision, reference::InputSource inputs) {
  compiler::CompileOptions options;
  options.target = target;
  options.precision = precision;
  options.fusion_fallback = compiler::FallbackPolicy::refuse;  // fused, or the test fails
  auto program = build_program(graph, options);
  if (!program) return program.error();
  if (program->lowered().plan.kernels.size() != 1)
    return make_error("expected one kernel, got ", std::to_string(program->lowered().plan.kernels.size()));
  // Under the kind, the adversarial and a seeded schedule (the key tiles' cp.async pipeline
  // refills stages other warps may still read): the first run past its tolerance, else the last.
  Expected<reference::CheckRun> run = Error{};
  for (const Schedule& schedule :
       {Schedule{}, Schedule::adversarial(), Schedule::seeded_by(inputs.seed)}) {
    run = reference::check_against_fp64(
        graph, program->lowered().precision.graph_mode, inputs,
        [&](const std::vector<reference::Tensor>& in) { return program->run(in, schedule); });
    if (!run || !run->report.ok) return run;
  }
  return run;
}

Expected<reference::CheckRun> emulate(const ir::Graph& graph, int sm, ir::Precision precision,
                                      reference::InputSource inputs) {
  return emulate(graph, compiler::Target::cuda(sm), precision, std::move(inputs));
}

void expect_within_tolerance(const Expected<reference::CheckRun>& run) {
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_TRUE(run->report.ok);
  for (const reference::OutputCheck& o : run->report.outputs) {
    EXPECT_LE(o.rel_l2, o.tolerance) << o.name << " max_abs " << o.max_abs;
    EXPECT_GT(o.tolerance, 0.0);
  }
}

class FusedAttention : public ::testing::TestWithParam<Case> {};

TEST_P(FusedAttention, MatchesTheFp64ReferenceWithinTolerance) {
  const Case& c = GetParam();
  auto graph = ir::parse_graph(graph_text(c), "att.kg");
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  expect_within_tolerance(emulate(*graph, c.sm, k_arithmetic[c.arithmetic].precision, {7, {}}));
}

// Every (S, D) with causal and mask in all four combinations over the ten shapes, each shape in
// two of the six arithmetics (every arithmetic on at least three shapes) on a rotating arch; the
// largest shape in all six, and the sm_75 paths (f16 on two m16n8k8 mmas, fp32 FFMA).
std::vector<Case> cases() {
  std::vector<Case> out;
  const int sizes[] = {1, 17, 64, 128, 200};
  const int archs[] = {80, 86, 90};
  int i = 0;
  for (int s : sizes) {
    for (int d : {64, 128}) {
      bool causal = i % 2 == 1, mask = (i / 2) % 2 == 1;
      out.push_back({s, d, causal, mask, i % 6, archs[i % 3]});
      out.push_back({s, d, causal, mask, (i + 3) % 6, archs[(i + 1) % 3]});
      ++i;
    }
  }
  for (int a = 0; a < 6; ++a) {
    if (a != 0 && a != 3) out.push_back({200, 128, true, true, a, 80});
  }
  out.push_back({200, 64, true, true, 4, 75});
  out.push_back({17, 128, false, true, 4, 75});
  out.push_back({128, 64, true, false, 0, 75});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Attention, FusedAttention, ::testing::ValuesIn(cases()), case_name);

// Head dims other than 64 and 128 (32, 96, an unpadded 40, 160, 192 and 256, and v narrower or
// wider than q and k), queries and keys of different counts (one query against 300 keys, as in decoding; more
// queries than keys), causal with S_q != S_k, and q, k, v at three different batch broadcasts.
TEST(FusedAttentionShapes, HeadDimsAndRectangularScoresMatchTheReference) {
  struct Shape {
    const char* q;
    const char* k;
    const char* v;
    bool causal;
  };
  const Shape shapes[] = {
      {"[2, 37, 32]", "[2, 45, 32]", "[2, 45, 32]", false},
      {"[2, 2, 33, 96]", "[2, 2, 70, 96]", "[2, 2, 70, 96]", true},
      {"[3, 21, 40]", "[3, 29, 40]", "[3, 29, 24]", false},
      {"[2, 19, 96]", "[2, 19, 96]", "[2, 19, 128]", true},
      {"[4, 1, 64]", "[4, 300, 64]", "[4, 300, 64]", false},
      {"[2, 3, 90, 32]", "[1, 3, 20, 32]", "[2, 1, 20, 32]", true},
      // Past 128: v's head dim in two slabs over the grid's y (160 as 80 + 80, 256 as 128 + 128).
      {"[2, 45, 160]", "[2, 70, 160]", "[2, 70, 160]", true},
      {"[2, 2, 66, 256]", "[2, 2, 66, 256]", "[2, 2, 66, 256]", false},
      {"[3, 17, 192]", "[3, 40, 192]", "[3, 40, 64]", false},
  };
  const Arithmetic* picks[] = {&k_arithmetic[0], &k_arithmetic[1], &k_arithmetic[2],
                               &k_arithmetic[3], &k_arithmetic[4], &k_arithmetic[5]};
  int i = 0;
  for (const Shape& sh : shapes) {
    for (int j = 0; j < 2; ++j, ++i) {
      const Arithmetic& a = *picks[i % 6];
      int sm = (i % 4 == 3) ? 75 : (i % 2 ? 90 : 80);
      if (sm == 75 && !(a.precision == ir::Precision::highest ||
                        std::string(a.dtype) == "f16"))
        sm = 86;
      std::string t = a.dtype;
      std::string text = "graph rect {\n  input q: " + t + sh.q + "\n  input k: " + t + sh.k +
                         "\n  input v: " + t + sh.v + "\n  o = attention(q, k, v" +
                         (sh.causal ? ", causal=true" : "") + ")\n  output o\n}\n";
      auto graph = ir::parse_graph(text, "rect.kg");
      ASSERT_TRUE(graph.ok()) << graph.error().message;
      SCOPED_TRACE(text + " " + std::string(ir::to_string(a.precision)) + " sm_" + std::to_string(sm));
      expect_within_tolerance(emulate(*graph, sm, a.precision, {11, {}}));
    }
  }
}

// Head dim 256 with a mask and causality on the paths the shapes above leave out at that width:
// FFMA (its 16-key tiles) on sm_80 and sm_75, f16 on sm_75's m16n8k8 with one stage, and bf16.
TEST(FusedAttentionShapes, HeadDim256OnEveryKernelDesign) {
  const Arithmetic* picks[] = {&k_arithmetic[0], &k_arithmetic[0], &k_arithmetic[4],
                               &k_arithmetic[5]};
  const int archs[] = {80, 75, 75, 90};
  for (int i = 0; i < 4; ++i) {
    const Arithmetic& a = *picks[i];
    std::string t = a.dtype;
    std::string text = "graph wide {\n  input q: " + t + "[2, 2, 50, 256]\n  input k: " + t +
                       "[2, 1, 70, 256]\n  input v: " + t + "[2, 1, 70, 256]\n  input m: " + t +
                       "[2, 1, 1, 70]\n  o = attention(q, k, v, mask=m, causal=true)\n  output o\n}\n";
    auto graph = ir::parse_graph(text, "wide.kg");
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    SCOPED_TRACE(t + " " + std::string(ir::to_string(a.precision)) + " sm_" +
                 std::to_string(archs[i]));
    expect_within_tolerance(emulate(*graph, archs[i], a.precision, {13, {}}));
  }
}

// q = 12 and k[j] = j / 256 in every element: the score of key j is 0.375 j (up to 74.6), so
// every row's maximum moves in every key tile and lands on its last key (causal: the query's
// own). All inputs are exact in bf16 and tf32, so every mode sees the same scores.
TEST(FusedAttentionSoftmax, RescalesWhenTheMaximumMovesLate) {
  for (bool causal : {false, true}) {
    for (const Arithmetic& a : k_arithmetic) {
      std::string t = a.dtype;
      auto graph = ir::parse_graph("graph late {\n  input q: " + t + "[2, 200, 64]\n  input k: " + t +
                                       "[2, 200, 64]\n  input v: " + t +
                                       "[2, 200, 64]\n  o = attention(q, k, v, scale=0.125" +
                                       (causal ? ", causal=true" : "") + ")\n  output o\n}\n",
                                   "late.kg");
      ASSERT_TRUE(graph.ok()) << graph.error().message;
      ir::DType dtype = graph->node(graph->inputs()[0]).type.dtype;
      auto filled = [&](auto value) {
        reference::Tensor x = reference::zeros(graph->node(graph->inputs()[0]).type);
        for (size_t e = 0; e < x.values.size(); ++e) x.values[e] = value(e);
        x.dtype = dtype;
        return x;
      };
      reference::InputSource inputs{3, {}};
      inputs.given = {filled([](size_t) { return 12.0; }),
                      filled([](size_t e) { return static_cast<double>((e / 64) % 200) / 256; }),
                      std::nullopt};
      SCOPED_TRACE(std::string(a.dtype) + " " + std::string(ir::to_string(a.precision)) +
                   (causal ? " causal" : ""));
      expect_within_tolerance(emulate(*graph, 90, a.precision, inputs));
    }
  }
}

// A key mask of -inf over the first 64 keys (a whole key tile and more): rows start with no
// finite score, and must neither turn NaN nor lose the keys that follow.
TEST(FusedAttentionSoftmax, RowsWhoseFirstKeyTileIsMaskedStayFinite) {
  for (const Arithmetic& a : k_arithmetic) {
    std::string t = a.dtype;
    auto graph = ir::parse_graph("graph padded {\n  input q: " + t + "[2, 2, 100, 64]\n  input k: " +
                                     t + "[2, 2, 150, 64]\n  input v: " + t +
                                     "[2, 2, 150, 64]\n  input m: " + t +
                                     "[2, 1, 1, 150]\n  o = attention(q, k, v, mask=m)\n  output o\n}\n",
                                 "padded.kg");
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    reference::Tensor m = reference::zeros(graph->node(graph->inputs()[3]).type);
    for (size_t e = 0; e < m.values.size(); ++e)
      m.values[e] = e % 150 < 70 ? -std::numeric_limits<double>::infinity() : 0.0;
    reference::InputSource inputs{5, {std::nullopt, std::nullopt, std::nullopt, m}};
    SCOPED_TRACE(std::string(a.dtype) + " " + std::string(ir::to_string(a.precision)));
    auto run = emulate(*graph, 80, a.precision, inputs);
    expect_within_tolerance(run);
    ASSERT_TRUE(run.ok());
    for (double x : run->actual[0].values) ASSERT_TRUE(std::isfinite(x));
  }
}

// A rank-0 mask adds one value to every score (the same softmax); given to the op or through the
// explicit chain, it compiles and matches fp64 on the FFMA kernel and the tf32 and bf16 mma ones
// (the mask is read by code they share with the other modes). Its extents once read the last
// dim of a shape that has none (a crash).
TEST(FusedAttentionSoftmax, ARankZeroMaskBroadcastsOverEveryScore) {
  for (const Arithmetic& a : k_arithmetic) {
    std::string t = a.dtype;
    if (a.precision == ir::Precision::tf32x3 || a.precision == ir::Precision::medium || t == "f16")
      continue;
    std::string in = "  input q: " + t + "[2, 20, 16]\n  input m: " + t + "[]\n";
    std::vector<std::string> bodies = {"  o = attention(q, q, q, mask=m)\n"};
    if (t == "f32" && a.precision == ir::Precision::high) {  // the chain fuses to the same kernel
      bodies.push_back("  s = add(mul(matmul(q, q, transpose_b=true), 0.25), m)\n"
                       "  o = matmul(softmax(s, axis=-1), q)\n");
    }
    for (const std::string& body : bodies) {
      auto graph = ir::parse_graph("graph scalar {\n" + in + body + "  output o\n}\n", "s.kg");
      ASSERT_TRUE(graph.ok()) << graph.error().message;
      SCOPED_TRACE(std::string(a.dtype) + " " + std::string(ir::to_string(a.precision)) + "\n" +
                   body);
      expect_within_tolerance(emulate(*graph, 80, a.precision, reference::InputSource{7, {}}));
    }
  }
}

// Grouped-query attention (6 query heads over 2 and 3 kv heads, rank 4 and 3) with a padding-and-
// block mask, additive f32 at rank 4 and bool at rank 3, that leaves some rows no key at all:
// those rows are zeros, the others match fp64, in every mode and dtype, on the tensor-core and
// the FFMA kernels.
TEST(FusedAttentionGrouped, KvHeadGroupsAndFullyMaskedRowsMatchTheReference) {
  for (const Arithmetic& a : k_arithmetic) {
    for (bool four : {true, false}) {
      bool boolean = !four;  // rank 3 takes the mask as bool (true keeps a key)
      std::string t = a.dtype;
      std::string q = four ? "[2, 6, 37, 32]" : "[6, 37, 32]";
      std::string k = four ? "[2, 2, 41, 32]" : "[3, 41, 32]";
      std::string v = four ? "[2, 2, 41, 24]" : "[3, 41, 24]";
      std::string m = four ? "[2, 1, 37, 41]" : "[37, 41]";
      auto graph = ir::parse_graph("graph gqa {\n  input q: " + t + q + "\n  input k: " + t + k +
                                       "\n  input v: " + t + v + "\n  input m: " +
                                       (boolean ? "bool" : "f32") + m +
                                       "\n  o = attention(q, k, v, mask=m, scale=0.25)\n"
                                       "  output o\n}\n",
                                   "gqa.kg");
      ASSERT_TRUE(graph.ok()) << graph.error().message;
      // Keys past 30 masked everywhere; rows 3, 4 and 20 lose every key.
      reference::Tensor mask = reference::zeros(graph->node(graph->inputs()[3]).type);
      for (size_t e = 0; e < mask.values.size(); ++e) {
        size_t row = (e / 41) % 37, key = e % 41;
        bool masked = key > 30 || row == 3 || row == 4 || row == 20;
        mask.values[e] = boolean ? (masked ? 0.0 : 1.0)
                                 : masked ? -std::numeric_limits<double>::infinity() : 0.0;
      }
      reference::InputSource inputs{9, {std::nullopt, std::nullopt, std::nullopt, mask}};
      SCOPED_TRACE(std::string(a.dtype) + " " + std::string(ir::to_string(a.precision)) +
                   (four ? " rank 4" : " rank 3"));
      auto run = emulate(*graph, 90, a.precision, inputs);
      expect_within_tolerance(run);
      ASSERT_TRUE(run.ok());
      const std::vector<double>& o = run->actual[0].values;
      for (size_t e = 0; e < o.size(); ++e) {
        ASSERT_TRUE(std::isfinite(o[e])) << e;
        size_t row = (e / 24) % 37;
        if (row == 3 || row == 4 || row == 20) {
          ASSERT_EQ(o[e], 0.0) << e;
        }
      }
    }
  }
}

// The targets a test of `a` runs attention on: sm_80, and sm_90a for f16 and bf16.
std::vector<compiler::Target> attention_targets(const Arithmetic& a) {
  std::vector<compiler::Target> targets = {compiler::Target::cuda(80)};
  if (std::string(a.dtype) != "f32") targets.push_back(compiler::Target::cuda(90, "a"));
  return targets;
}

// `graph` (one attention) emulated on `target` in `precision`, within tolerance of the reference,
// its output's values into `o`; on sm_90a its plan must put the attention on the wgmma kernel.
void emulate_attention(const ir::Graph& graph, const compiler::Target& target,
                       ir::Precision precision, const reference::InputSource& inputs,
                       std::vector<double>& o) {
  if (!target.suffix.empty()) {  // sm_90a: the wgmma kernel, not sm_90's
    compiler::CompileOptions options;
    options.target = target;
    options.precision = precision;
    auto program = build_program(graph, options);
    ASSERT_TRUE(program.ok()) << program.error().message;
    ASSERT_TRUE(program->lowered().plan.kernels.at(0).attention_tile.wgmma);
  }
  auto run = emulate(graph, target, precision, inputs);
  expect_within_tolerance(run);
  ASSERT_TRUE(run.ok());
  o = run->actual[0].values;
}

// A NaN score makes its query row NaN, as softmax and PyTorch do, where a row whose every key the
// mask removes is zeros (the kernels told the two apart by l > 0, which a NaN sum fails, so a
// NaN row came out as zeros). q holds a NaN in query 5 of batch 0's head 0, k in key 7 of batch
// 1's head 1; rows 3 and 20 lose every key, and rows 10 to 14 lose key 7. A bool mask adds -inf
// where it is false, as PyTorch's scaled_dot_product_attention does, so with either mask NaN +
// -inf leaves key 7's score NaN: every row of that head is NaN, rows 3 and 20 of the others
// zeros. Every mode and dtype on sm_80, the 16-bit ones on sm_90a's wgmma kernel too, against
// the reference.
TEST(FusedAttentionSoftmax, ANaNScoreMakesItsRowNaNWhereARowWithoutKeysIsZeros) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const Arithmetic& a : k_arithmetic) {
    for (bool boolean : {true, false}) {
      std::string t = a.dtype;
      auto graph = ir::parse_graph("graph nan {\n  input q: " + t + "[2, 2, 37, 32]\n  input k: " +
                                       t + "[2, 2, 41, 32]\n  input v: " + t +
                                       "[2, 2, 41, 24]\n  input m: " +
                                       (boolean ? "bool" : "f32") +
                                       "[2, 1, 37, 41]\n"
                                       "  o = attention(q, k, v, mask=m, scale=0.25)\n"
                                       "  output o\n}\n",
                                   "nan.kg");
      ASSERT_TRUE(graph.ok()) << graph.error().message;
      auto drawn = reference::make_inputs(*graph, {13, {}});
      ASSERT_TRUE(drawn.ok()) << drawn.error().message;
      reference::Tensor q = (*drawn)[0], k = (*drawn)[1], mask = (*drawn)[3];
      q.values[(0 * 37 + 5) * 32 + 3] = nan;        // batch 0, head 0, query 5
      k.values[((2 + 1) * 41 + 7) * 32 + 0] = nan;  // batch 1, head 1, key 7
      for (size_t e = 0; e < mask.values.size(); ++e) {
        size_t row = (e / 41) % 37, key = e % 41;
        bool masked = row == 3 || row == 20 || (key == 7 && row >= 10 && row < 15);
        mask.values[e] = boolean ? (masked ? 0.0 : 1.0) : masked ? -inf : 0.0;
      }
      reference::InputSource inputs{13, {q, k, std::nullopt, mask}};
      for (const compiler::Target& target : attention_targets(a)) {
        SCOPED_TRACE(std::string(a.dtype) + " " + std::string(ir::to_string(a.precision)) + " " +
                     target.arch() + (boolean ? " bool mask" : " f32 mask"));
        std::vector<double> o;
        ASSERT_NO_FATAL_FAILURE(emulate_attention(*graph, target, a.precision, inputs, o));
        for (size_t e = 0; e < o.size(); ++e) {
          size_t row = (e / 24) % 37, head = (e / (37 * 24)) % 2, batch = e / (2 * 37 * 24);
          bool masked_out = row == 3 || row == 20;
          // Key 7's NaN score reaches every row of its head, those that lose it included: a bool
          // mask adds -inf as the f32 one does (PyTorch's), and NaN + -inf is NaN.
          bool nan_row = (batch == 0 && head == 0 && row == 5) || (batch == 1 && head == 1);
          bool zeros = masked_out && !nan_row;
          if (zeros) {
            ASSERT_EQ(o[e], 0.0) << e;
          } else if (nan_row) {
            ASSERT_TRUE(std::isnan(o[e])) << e << ": " << o[e];
          } else {
            ASSERT_TRUE(std::isfinite(o[e])) << e << ": " << o[e];
          }
        }
      }
    }
  }
}

// Without a mask, a row whose every score is -inf (an infinite q against keys that all have the
// same sign there) is zeros, as PyTorch's scaled_dot_product_attention gives (0 / 0 would be NaN);
// a row with a +inf and a -inf score is NaN, as there. Every mode and dtype on sm_80, causal and
// not, and f16/bf16 on sm_90a's wgmma kernel.
TEST(FusedAttentionSoftmax, ARowWhoseScoresAreAllMinusInfinityIsZerosWithoutAMask) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const Arithmetic& a : k_arithmetic) {
    for (bool causal : {false, true}) {
      std::string t = a.dtype;
      auto graph = ir::parse_graph("graph ninf {\n  input q: " + t + "[2, 2, 37, 32]\n  input k: " +
                                       t + "[2, 2, 41, 32]\n  input v: " + t +
                                       "[2, 2, 41, 24]\n  o = attention(q, k, v, scale=0.25" +
                                       (causal ? ", causal=true" : "") + ")\n  output o\n}\n",
                                   "ninf.kg");
      ASSERT_TRUE(graph.ok()) << graph.error().message;
      auto drawn = reference::make_inputs(*graph, {17, {}});
      ASSERT_TRUE(drawn.ok()) << drawn.error().message;
      reference::Tensor q = (*drawn)[0], k = (*drawn)[1];
      for (size_t key = 0; key < 2 * 2 * 41; ++key) k.values[key * 32 + 4] = 0.5 + (key % 3) * 0.25;
      k.values[(2 * 41 + 9) * 32 + 4] = -0.5;  // batch 1, head 0: key 9's sign differs
      q.values[(0 * 37 + 6) * 32 + 4] = -inf;  // batch 0, head 0, query 6: every score -inf
      q.values[(2 * 37 + 30) * 32 + 4] = -inf;  // batch 1, head 0, query 30: key 9's +inf
      reference::InputSource inputs{17, {q, k, std::nullopt}};
      for (const compiler::Target& target : attention_targets(a)) {
        SCOPED_TRACE(std::string(a.dtype) + " " + std::string(ir::to_string(a.precision)) + " " +
                     target.arch() + (causal ? " causal" : ""));
        std::vector<double> o;
        ASSERT_NO_FATAL_FAILURE(emulate_attention(*graph, target, a.precision, inputs, o));
        for (size_t e = 0; e < o.size(); ++e) {
          size_t row = (e / 24) % 37, bh = e / (37 * 24);
          if (bh == 0 && row == 6) {
            ASSERT_EQ(o[e], 0.0) << e;
          } else if (bh == 2 && row == 30) {  // causal: key 9 is among its keys
            ASSERT_TRUE(std::isnan(o[e])) << e << ": " << o[e];
          } else {
            ASSERT_TRUE(std::isfinite(o[e])) << e << ": " << o[e];
          }
        }
      }
    }
  }
}

// transformers fills a padded key's mask with finfo(dtype).min; past FLT_MAX / log2(e) that
// overflowed the kernels' base-2 scores to -inf, so a row padded throughout was zeros (NaN for
// the explicit chain) where PyTorch weighs its keys evenly. The lowest f32 (f32 masks) and bf16
// value (16-bit masks) on keys past 30 and on rows 3 and 20 whole: those rows average v, as the
// fp64 reference, in every mode on sm_80, through the op and the chain.
TEST(FusedAttentionSoftmax, TheLowestFloatMasksAKeyAsPyTorchDoes) {
  for (const Arithmetic& a : k_arithmetic) {
    std::string t = a.dtype, mt = t == "f32" ? "f32" : "bf16";
    double lowest = t == "f32" ? -3.4028234663852886e38 : -3.3895313892515355e38;
    std::string in = "  input q: " + t + "[2, 2, 37, 32]\n  input k: " + t +
                     "[2, 2, 41, 32]\n  input v: " + t + "[2, 2, 41, 24]\n  input m: " + mt +
                     "[2, 1, 37, 41]\n";
    std::vector<std::string> bodies = {"  o = attention(q, k, v, mask=m, scale=0.25)\n"};
    if (t == "f32" && (a.precision == ir::Precision::high || a.precision == ir::Precision::highest))
      bodies.push_back("  s = add(mul(matmul(q, k, transpose_b=true), 0.25), m)\n"
                       "  o = matmul(softmax(s, axis=-1), v)\n");
    for (const std::string& body : bodies) {
      auto graph = ir::parse_graph("graph padded {\n" + in + body + "  output o\n}\n", "p.kg");
      ASSERT_TRUE(graph.ok()) << graph.error().message;
      reference::Tensor mask = reference::zeros(graph->node(graph->inputs()[3]).type);
      for (size_t e = 0; e < mask.values.size(); ++e) {
        size_t row = (e / 41) % 37, key = e % 41;
        if (key > 30 || row == 3 || row == 20) mask.values[e] = lowest;
      }
      reference::InputSource inputs{11, {std::nullopt, std::nullopt, std::nullopt, mask}};
      SCOPED_TRACE(std::string(a.dtype) + " " + std::string(ir::to_string(a.precision)) + "\n" +
                   body);
      auto run = emulate(*graph, 80, a.precision, inputs);
      expect_within_tolerance(run);
      ASSERT_TRUE(run.ok());
      const std::vector<double>& o = run->actual[0].values;
      for (size_t e = 0; e < o.size(); ++e) ASSERT_TRUE(std::isfinite(o[e])) << e;
      // Row 3 of the first batch and head: the mean of v over all 41 keys, not zeros.
      double nonzero = 0.0;
      for (size_t c = 0; c < 24; ++c) nonzero += std::abs(o[3 * 24 + c]);
      EXPECT_GT(nonzero, 0.0);
    }
  }
}

// The explicit chain as mixed-precision code writes it for 16-bit q, k and v: scores widened to
// f32 before the scale and an f32 mask, softmax in f32, P cast back to v's dtype; and the plain
// P cast of 16-bit scores. One fused kernel (emulate() refuses a fallback and checks the count),
// within the 16-bit tolerance of fp64.
TEST(FusedAttentionCasts, TheMixedPrecisionChainMatchesTheReference) {
  struct Form {
    const char* dtype;
    const char* scores;  // over s = matmul(q, k, transpose_b=true)
    const char* mask;    // the mask's dtype, or nullptr for none
    int sm;
  };
  const Form forms[] = {
      {"f16", "add(mul(cast(s, to=f32), 0.125), m)", "f32", 80},
      {"f16", "add(mul(cast(s, to=f32), 0.125), m)", "f32", 75},
      {"bf16", "cast(add(mul(s, 0.125), m), to=f32)", "bf16", 90},
      {"bf16", "add(div(cast(s, to=f32), 8.0), m)", "f32", 86},
      {"f16", "mul(s, 0.125)", nullptr, 80},
  };
  for (const Form& f : forms) {
    std::string t = f.dtype;
    std::string text = "graph mixed {\n  input q: " + t + "[2, 2, 70, 64]\n  input k: " + t +
                       "[2, 1, 90, 64]\n  input v: " + t + "[2, 1, 90, 64]\n";
    if (f.mask) text += "  input m: " + std::string(f.mask) + "[2, 1, 1, 90]\n";
    text += "  s = matmul(q, k, transpose_b=true)\n  o = matmul(cast(softmax(" +
            std::string(f.scores) + ", axis=-1), to=" + t + "), v)\n  output o\n}\n";
    auto graph = ir::parse_graph(text, "mixed.kg");
    ASSERT_TRUE(graph.ok()) << graph.error().message;
    SCOPED_TRACE(text + " sm_" + std::to_string(f.sm));
    expect_within_tolerance(emulate(*graph, f.sm, ir::Precision::high, {17, {}}));
  }
}

}  // namespace
}  // namespace kiln::emulation
