// The reference attention against a naive loop written here, by hand on small cases, on large and
// fully masked scores, in the emulated mode, and at symbolic sizes.
#include "test_util.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>

namespace kiln::reference {
namespace {

using testing::f32;
using testing::parse_or_die;
using testing::run_values;

constexpr double k_inf = std::numeric_limits<double>::infinity();

// A tensor's dims padded with leading 1s to four.
std::array<int64_t, 4> dims4(const Tensor& t) {
  std::array<int64_t, 4> d{1, 1, 1, 1};
  int rank = t.shape.rank();
  for (int i = 0; i < rank; ++i) d[static_cast<size_t>(4 - rank + i)] = t.shape.dim(i);
  return d;
}

// t at the 4-D index (a, b, r, c), numpy broadcasting: a dim of 1 repeats its one element.
double at(const Tensor& t, int64_t a, int64_t b, int64_t r, int64_t c) {
  std::array<int64_t, 4> d = dims4(t);
  int64_t flat = (((a % d[0]) * d[1] + b % d[1]) * d[2] + r % d[2]) * d[3] + c % d[3];
  return t.values[static_cast<size_t>(flat)];
}

// softmax(q k^T * scale + mask, causal) v, spelled out one output element at a time.
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor* mask, double scale, bool causal) {
  std::array<int64_t, 4> dq = dims4(q), dk = dims4(k), dv = dims4(v);
  int64_t batch0 = std::max({dq[0], dk[0], dv[0]}), batch1 = std::max({dq[1], dk[1], dv[1]});
  int64_t queries = dq[2], keys = dk[2], head = dq[3], width = dv[3];
  std::vector<double> out;
  for (int64_t a = 0; a < batch0; ++a) {
    for (int64_t b = 0; b < batch1; ++b) {
      for (int64_t i = 0; i < queries; ++i) {
        std::vector<double> s(static_cast<size_t>(keys));
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < head; ++d) dot += at(q, a, b, i, d) * at(k, a, b, j, d);
          s[static_cast<size_t>(j)] = dot * scale + (mask ? at(*mask, a, b, i, j) : 0.0);
          if (causal && j > i) s[static_cast<size_t>(j)] = -k_inf;
        }
        double top = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double x : s) sum += std::exp(x - top);
        for (int64_t e = 0; e < width; ++e) {
          double value = 0;
          for (int64_t j = 0; j < keys; ++j)
            value += std::exp(s[static_cast<size_t>(j)] - top) / sum * at(v, a, b, j, e);
          out.push_back(value);
        }
      }
    }
  }
  return out;
}

struct Case {
  const char* name;
  const char* q;
  const char* k;
  const char* v;
  const char* mask;  // "" for none
  const char* args;  // after the mask
  double scale;
  bool causal;
};

class AttentionAgainstNaive : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionAgainstNaive, Fp64MatchesAndEmulatedIsClose) {
  const Case& c = GetParam();
  bool masked = c.mask[0] != '\0';
  std::string text = std::string("graph g {\n input q: ") + c.q + "\n input k: " + c.k +
                     "\n input v: " + c.v + "\n" +
                     (masked ? std::string(" input m: ") + c.mask + "\n" : std::string()) +
                     " o = attention(q, k, v" + (masked ? ", mask=m" : "") + c.args +
                     ")\n output o\n}\n";
  ir::Graph graph = parse_or_die(text);
  std::vector<Tensor> inputs = random_inputs(graph, 17);
  for (Tensor& t : inputs)
    for (double& x : t.values) x *= 3;  // scores of a few units: a softmax far from uniform
  std::vector<double> want = naive_attention(inputs[0], inputs[1], inputs[2],
                                             masked ? &inputs[3] : nullptr, c.scale, c.causal);
  std::vector<double> got = run_values(graph, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  std::vector<double> emulated =
      run_values(graph, inputs, RunMode::emulate(ir::Precision::highest));
  ASSERT_EQ(emulated.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(emulated[i], want[i], 1e-5) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionAgainstNaive,
    ::testing::Values(
        Case{"TwoDimensional", "f32[5, 4]", "f32[7, 4]", "f32[7, 3]", "", ", scale=0.5", 0.5,
             false},
        Case{"DefaultScale", "f32[5, 4]", "f32[7, 4]", "f32[7, 3]", "", "", 0.5, false},
        Case{"ThreeDimensionalCausalMoreKeys", "f32[2, 5, 4]", "f32[2, 7, 4]", "f32[2, 7, 3]",
             "f32[5, 7]", ", scale=1.5, causal=true", 1.5, true},
        Case{"CausalMoreQueries", "f32[2, 7, 4]", "f32[2, 3, 4]", "f32[2, 3, 2]", "",
             ", scale=1.0, causal=true", 1.0, true},
        Case{"FourDimensionalSharedKeys", "f32[2, 3, 5, 4]", "f32[1, 3, 7, 4]",
             "f32[1, 3, 7, 6]", "f32[5, 7]", ", scale=0.75, causal=true", 0.75, true},
        Case{"MixedRanks", "f32[2, 3, 6, 4]", "f32[3, 4, 4]", "f32[4, 2]", "f32[2, 1, 1, 4]",
             ", scale=-0.5", -0.5, false},
        Case{"BroadcastQuery", "f32[1, 3, 2, 4]", "f32[2, 1, 5, 4]", "f32[2, 3, 5, 4]",
             "f32[5]", ", scale=2.0", 2.0, false},
        Case{"MaskPerBatch", "f32[2, 2, 4, 8]", "f32[2, 2, 4, 8]", "f32[2, 2, 4, 8]",
             "f32[2, 2, 4, 4]", ", scale=0.25", 0.25, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(Fp64Attention, CausalByHandIsTopLeftAligned) {
  // Equal scores; query 0 sees key 0, query 1 keys 0 and 1, key 2 no query (2 queries, 3 keys).
  ir::Graph graph = parse_or_die(
      "graph g {\n input q: f32[2, 1]\n input k: f32[3, 1]\n input v: f32[3, 1]\n"
      " o = attention(q, k, v, causal=true)\n output o\n}\n");
  auto o = run_values(graph, {f32({2, 1}, {1, 1}), f32({3, 1}, {0, 0, 0}),
                              f32({3, 1}, {2, 4, 100})});
  EXPECT_EQ(o, (std::vector<double>{2, 3}));
}

TEST(Fp64Attention, LargeScoresWithALateMaximumDoNotOverflow) {
  // Row 0 scores 10 * (10, 80, 20, 100): the largest last, e^1000 past any double. Row 1 the
  // negatives, the largest first. The max is subtracted before exp, so both rows are finite.
  ir::Graph graph = parse_or_die(
      "graph g {\n input q: f32[2, 1]\n input k: f32[4, 1]\n input v: f32[4, 1]\n"
      " o = attention(q, k, v, scale=10.0)\n output o\n}\n");
  std::vector<Tensor> inputs = {f32({2, 1}, {1, -1}), f32({4, 1}, {10, 80, 20, 100}),
                                f32({4, 1}, {1, 2, 3, 4})};
  auto o = run_values(graph, inputs);
  ASSERT_EQ(o.size(), 2u);
  // Weights e^(s - max): row 0 (e^-900, e^-200, e^-800, 1), row 1 (1, e^-700, e^-100, e^-900).
  double row0 = (1 * std::exp(-900.0) + 2 * std::exp(-200.0) + 3 * std::exp(-800.0) + 4) /
                (std::exp(-900.0) + std::exp(-200.0) + std::exp(-800.0) + 1);
  double row1 = (1 + 2 * std::exp(-700.0) + 3 * std::exp(-100.0) + 4 * std::exp(-900.0)) /
                (1 + std::exp(-700.0) + std::exp(-100.0) + std::exp(-900.0));
  EXPECT_DOUBLE_EQ(o[0], row0);
  EXPECT_DOUBLE_EQ(o[1], row1);
  // fp32 overflows e^x past 88: scores of 80 and more must not reach it either.
  ir::Graph small = parse_or_die(
      "graph g {\n input q: f32[1, 1]\n input k: f32[3, 1]\n input v: f32[3, 1]\n"
      " o = attention(q, k, v, scale=1.0)\n output o\n}\n");
  std::vector<Tensor> close = {f32({1, 1}, {1}), f32({3, 1}, {80, 89, 90}),
                               f32({3, 1}, {1, 2, 3})};
  double want = (std::exp(-10.0) + 2 * std::exp(-1.0) + 3) /
                (std::exp(-10.0) + std::exp(-1.0) + 1);
  EXPECT_NEAR(run_values(small, close)[0], want, 1e-15);
  auto emulated = run_values(small, close, RunMode::emulate(ir::Precision::highest));
  ASSERT_EQ(emulated.size(), 1u);
  EXPECT_NEAR(emulated[0], want, 1e-6);
}

TEST(Fp64Attention, ARowWithoutAFiniteScoreIsZeros) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input q: f32[2, 1]\n input k: f32[3, 1]\n input v: f32[3, 1]\n"
      " input m: f32[2, 3]\n o = attention(q, k, v, mask=m, scale=1.0)\n output o\n}\n");
  auto o = run_values(graph, {f32({2, 1}, {1, 1}), f32({3, 1}, {1, 2, 3}),
                              f32({3, 1}, {5, 6, 7}),
                              f32({2, 3}, {-k_inf, -k_inf, -k_inf, -k_inf, 0, -k_inf})});
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0], 0.0);  // every key masked out: zeros, where softmax gives NaN
  EXPECT_EQ(o[1], 6);    // only key 1 survives the mask
  // The explicit chain keeps softmax's NaN.
  ir::Graph chain = parse_or_die(
      "graph g {\n input q: f32[2, 1]\n input k: f32[3, 1]\n input v: f32[3, 1]\n"
      " input m: f32[2, 3]\n o = matmul(softmax(add(matmul(q, k, transpose_b=true), m)), v)\n"
      " output o\n}\n");
  auto c = run_values(chain, {f32({2, 1}, {1, 1}), f32({3, 1}, {1, 2, 3}), f32({3, 1}, {5, 6, 7}),
                              f32({2, 3}, {-k_inf, -k_inf, -k_inf, -k_inf, 0, -k_inf})});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(std::isnan(c[0]));
  EXPECT_EQ(c[1], 6);
}

// Grouped-query attention (4 query heads over 2 kv heads) equals attention over k and v with each
// kv head repeated for its group, as transformers' repeat_kv builds them: query head h reads kv
// head h / 2, not h % 2.
TEST(Fp64Attention, GroupedQueryHeadsReadTheirGroupsKvHead) {
  const std::string inputs =
      " input q: f32[2, 4, 5, 3]\n input k: f32[2, 2, 6, 3]\n input v: f32[2, 2, 6, 2]\n";
  ir::Graph grouped = parse_or_die("graph g {\n" + inputs +
                                   " o = attention(q, k, v, causal=true)\n output o\n}\n");
  auto repeat = [](const char* x) {
    std::string h0 = "slice(" + std::string(x) + ", axis=1, start=0, end=1)";
    std::string h1 = "slice(" + std::string(x) + ", axis=1, start=1, end=2)";
    return "concat(" + h0 + ", " + h0 + ", " + h1 + ", " + h1 + ", axis=1)";
  };
  ir::Graph repeated = parse_or_die("graph g {\n" + inputs + " kr = " + repeat("k") + "\n vr = " +
                                    repeat("v") +
                                    "\n o = attention(q, kr, vr, causal=true)\n output o\n}\n");
  std::vector<Tensor> in = random_inputs(grouped, 7);
  auto a = run_values(grouped, in);
  auto b = run_values(repeated, in);
  ASSERT_EQ(a.size(), 2u * 4 * 5 * 2);
  EXPECT_EQ(a, b);
  // transformers' repeat_kv itself, a rank-5 view expanded and viewed back, gives the same.
  auto repeat_kv = [](const char* x, int width) {
    std::string w = std::to_string(width);
    return "reshape(expand(reshape(" + std::string(x) + ", shape=[2, 2, 1, 6, " + w +
           "]), shape=[2, 2, 2, 6, " + w + "]), shape=[2, 4, 6, " + w + "])";
  };
  ir::Graph hf = parse_or_die("graph g {\n" + inputs + " kr = " + repeat_kv("k", 3) + "\n vr = " +
                              repeat_kv("v", 2) +
                              "\n o = attention(q, kr, vr, causal=true)\n output o\n}\n");
  EXPECT_EQ(a, run_values(hf, in));
  // Against the interleaved order (head h reading kv head h % 2) it differs.
  ir::Graph interleaved = parse_or_die("graph g {\n" + inputs + " kr = concat(k, k, axis=1)\n"
                                       " vr = concat(v, v, axis=1)\n"
                                       " o = attention(q, kr, vr, causal=true)\n output o\n}\n");
  EXPECT_NE(a, run_values(interleaved, in));
}

TEST(EmulatedAttention, HalfResultsAreStoredAtTheirDtype) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input q: f16[2, 6, 8]\n input k: f16[2, 9, 8]\n input v: f16[2, 9, 4]\n"
      " o = attention(q, k, v, causal=true)\n output o\n}\n");
  std::vector<Tensor> inputs = random_inputs(graph, 3);
  auto exact = run_values(graph, inputs);
  auto emulated = run_values(graph, inputs, RunMode::emulate(ir::Precision::highest));
  ASSERT_EQ(emulated.size(), exact.size());
  for (size_t i = 0; i < exact.size(); ++i) {
    EXPECT_EQ(store_value(ir::DType::f16, emulated[i]), emulated[i]) << i;
    EXPECT_NEAR(emulated[i], exact[i], 1e-3) << i;
  }
}

TEST(Fp64Attention, SymbolicSizesRunAsTheBoundGraph) {
  ir::Graph symbolic = parse_or_die(
      "graph g {\n dim S: 1..16\n dim T: 1..16\n input q: f32[2, S, 4]\n input k: f32[T, 4]\n"
      " input v: f32[T, 3]\n input m: f32[S, T]\n"
      " o = attention(q, k, v, mask=m, scale=0.5, causal=true)\n output o\n}\n");
  ir::Graph fixed = parse_or_die(
      "graph g {\n input q: f32[2, 3, 4]\n input k: f32[5, 4]\n input v: f32[5, 3]\n"
      " input m: f32[3, 5]\n o = attention(q, k, v, mask=m, scale=0.5, causal=true)\n"
      " output o\n}\n");
  std::vector<Tensor> inputs = random_inputs(fixed, 9);
  auto want = naive_attention(inputs[0], inputs[1], inputs[2], &inputs[3], 0.5, true);
  auto got = run_values(symbolic, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  EXPECT_EQ(got, run_values(fixed, inputs));
}

TEST(Fp64Attention, CostCountsBothProducts) {
  ir::Graph graph = parse_or_die(
      "graph g {\n input q: f32[2, 5, 4]\n input k: f32[2, 7, 4]\n input v: f32[2, 7, 3]\n"
      " o = attention(q, k, v)\n output o\n}\n");
  // 2 * 5 * 7 scores of 4 multiply-adds, then 3 for each in the weighted sum of v.
  EXPECT_EQ(estimate_cost(graph).multiply_adds, 2 * 5 * 7 * (4 + 3));
}

}  // namespace
}  // namespace kiln::reference
