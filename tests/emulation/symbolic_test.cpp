// Symbolic graphs under emulation: every kernel design (tensor-core matmul in each mode, FFMA,
// elementwise, softmax, rank-6 batches, running sums) at sizes 1..65 and above 256 against fp64;
// one bucket's kernels at every size of the bucket; bit-identical results to the static graph
// where the tile plan is the same; sizes outside the bucket or inconsistent between inputs
// refused.
#include "compiler/compiler.h"
#include "compiler/sizes.h"
#include "emulation/program.h"
#include "ir/parse.h"
#include "reference/check.h"

#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>

namespace kiln::emulation {
namespace {

// Rows, a softmax axis (strided and contiguous), a contraction and a batch, all one symbol.
const char* k_f32_graph = R"(graph sym {
  dim S: 1..600
  input x: f32[S, 48]
  input w: f32[48, 40]
  input b: f32[40]
  input c: f32[S, 1]
  input t: f32[4, S]
  input z: f32[S, 5, 48]
  h = gelu(add(matmul(x, w), b))
  p = softmax(mul(x, c), axis=0)
  r = softmax(t)
  k = matmul(t, x)
  bz = matmul(z, w)
  output h, p, r, k, bz
}
)";

// The transformer ops at a symbolic sequence length: norms, reshapes and permutes of [2, S, 32]
// into heads, a 4-D attention with S as the softmax axis and the contraction dim, slices and a
// concat, reductions over S and after a fused prologue, and the first position of S (a pooler's
// slice along the symbolic dim).
const char* k_layer_graph = R"(graph symlayer {
  dim S: 1..600
  input x: f32[2, S, 32]
  input w: f32[32]
  input b: f32[32]
  input k: f32[2, S, 32]
  q = permute(reshape(layer_norm(x, w, b), shape=[2, S, 4, 8]), dims=[0, 2, 1, 3])
  kk = permute(reshape(rms_norm(k, w), shape=[2, S, 4, 8]), dims=[0, 2, 1, 3])
  o = matmul(softmax(mul(matmul(q, kk, transpose_b=true), 0.35)), kk)
  r = concat(slice(o, start=4, end=8), neg(slice(o, start=0, end=4)))
  m = mean(r, axis=2)
  mx = max(sum(mul(x, x), axis=-1), axis=1)
  first = tanh(mul(reshape(slice(x, axis=1, start=0, end=1), shape=[2, 32]), w))
  output o, r, m, mx, first
}
)";

const char* k_f16_graph = R"(graph symh {
  dim S: 1..600
  input x: f16[S, 48]
  input w: f16[48, 40]
  input t: f16[4, S]
  h = relu(matmul(x, w))
  k = matmul(t, x)
  output h, k
}
)";

// Ranks 5 and 6: a matmul with 4 batch dims that broadcast in alternating runs (the first one
// S) and a broadcast epilogue operand, grouped-query attention (4 q heads, 2 kv heads) behind
// two batch dims with v of lower rank, a bool padding mask and causality.
const char* k_rank6_graph = R"(graph symrank6 {
  dim S: 1..600
  input a: f32[S, 1, 3, 1, 9, 12]
  input b: f32[4, 1, 5, 12, 10]
  input bias: f32[1, 4, 3, 1, 1, 10]
  input q: f32[2, 3, 4, S, 16]
  input k: f32[2, 3, 2, S, 16]
  input v: f32[3, 2, S, 8]
  input keep: bool[2, 1, 1, 1, S]
  c = add(matmul(a, b), bias)
  o = attention(q, k, v, mask=keep, causal=true)
  output c, o
}
)";

// Running sums along S (a padding mask's positions, a row of S, S as the strided axis of [S, 3])
// and across it; rolls along S, the shift reduced mod S at run time (one past every S).
const char* k_scan_graph = R"(graph symscan {
  dim S: 1..600
  input mask: i64[2, S]
  input x: f32[S, 3]
  input t: f32[4, S]
  p = sub(mul(cumsum(mask), mask), 1)
  c = cumsum(x, axis=0)
  r = cumsum(exp(t))
  a = cumsum(x, axis=1)
  b = roll(t, shift=1)
  e = add(roll(x, shift=-601, axis=0), 1.0)
  output p, c, r, a, b, e
}
)";

ir::Graph parse(const char* text) {
  auto graph = ir::parse_graph(text, "sym.kg");
  EXPECT_TRUE(graph) << graph.error().message;
  return *graph;
}

struct Case {
  const char* graph;
  int sm;
  ir::Precision precision;
  int64_t size;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.graph << " on sm_" << c.sm << " in " << ir::to_string(c.precision) << " at "
      << c.size;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string graph = info.param.graph == k_f32_graph     ? "f32"
                      : info.param.graph == k_f16_graph   ? "f16"
                      : info.param.graph == k_rank6_graph ? "rank6"
                      : info.param.graph == k_scan_graph  ? "scan"
                                                          : "layer";
  return graph + "_sm" +
         std::to_string(info.param.sm) + "_" + std::string(ir::to_string(info.param.precision)) +
         "_S" + std::to_string(info.param.size);
}

compiler::CompileOptions options_for(const ir::Graph& graph, int sm, ir::Precision precision,
                                     int64_t size) {
  compiler::CompileOptions options;
  options.target.sm = sm;
  options.precision = precision;
  options.bucket = {compiler::bucket_of(size, graph.symbols()[0])};
  return options;
}

// The symbolic program's outputs at `size`, checked against fp64 on the bound graph's inputs,
// under the kind and the adversarial schedule: the first report past its tolerance, else the last.
Expected<reference::CheckReport> check_at(const ir::Graph& graph, const Program& program,
                                          int64_t size) {
  auto bound = graph.bind({size});
  if (!bound) return bound.error();
  Expected<reference::CheckReport> report = Error{};
  for (const Schedule& schedule : {Schedule{}, Schedule::adversarial()}) {
    report = reference::check_against_fp64(
        *bound, program.lowered().precision.graph_mode, 7,
        [&](const std::vector<reference::Tensor>& inputs) { return program.run(inputs, schedule); });
    if (!report || !report->ok) return report;
  }
  return report;
}

class SymbolicEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(SymbolicEmulation, MatchesFp64AtTheSize) {
  const Case& c = GetParam();
  ir::Graph graph = parse(c.graph);
  auto program = build_program(graph, options_for(graph, c.sm, c.precision, c.size));
  ASSERT_TRUE(program) << program.error().message;
  auto report = check_at(graph, *program, c.size);
  ASSERT_TRUE(report) << report.error().message;
  for (const reference::OutputCheck& o : report->outputs)
    EXPECT_TRUE(o.ok) << o.name << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
}

constexpr int64_t k_sizes[] = {1, 2, 3, 7, 16, 17, 31, 33, 64, 65, 300};

std::vector<Case> every_size(const char* graph, int sm, ir::Precision precision) {
  std::vector<Case> cases;
  for (int64_t size : k_sizes) cases.push_back({graph, sm, precision, size});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Highest, SymbolicEmulation,
                         ::testing::ValuesIn(every_size(k_f32_graph, 90, ir::Precision::highest)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(High, SymbolicEmulation,
                         ::testing::ValuesIn(every_size(k_f32_graph, 90, ir::Precision::high)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Tf32x3, SymbolicEmulation,
                         ::testing::ValuesIn(every_size(k_f32_graph, 90, ir::Precision::tf32x3)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Medium, SymbolicEmulation,
                         ::testing::ValuesIn(every_size(k_f32_graph, 90, ir::Precision::medium)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Half, SymbolicEmulation,
                         ::testing::ValuesIn(every_size(k_f16_graph, 90, ir::Precision::high)),
                         case_name);
// sm_80 (cp.async pipelines) and sm_75 (synchronous copies, m16n8k8, FFMA) at a few sizes.
INSTANTIATE_TEST_SUITE_P(
    OtherArchs, SymbolicEmulation,
    ::testing::Values(Case{k_f32_graph, 80, ir::Precision::high, 1},
                      Case{k_f32_graph, 80, ir::Precision::high, 17},
                      Case{k_f32_graph, 80, ir::Precision::high, 300},
                      Case{k_f32_graph, 75, ir::Precision::highest, 3},
                      Case{k_f32_graph, 75, ir::Precision::highest, 65},
                      Case{k_f16_graph, 75, ir::Precision::high, 33},
                      Case{k_f16_graph, 75, ir::Precision::high, 300}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Layer, SymbolicEmulation,
    ::testing::Values(Case{k_layer_graph, 90, ir::Precision::highest, 1},
                      Case{k_layer_graph, 90, ir::Precision::highest, 17},
                      Case{k_layer_graph, 90, ir::Precision::high, 33},
                      Case{k_layer_graph, 90, ir::Precision::tf32x3, 65},
                      Case{k_layer_graph, 80, ir::Precision::high, 300},
                      Case{k_layer_graph, 75, ir::Precision::highest, 7}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Rank6, SymbolicEmulation,
    ::testing::Values(Case{k_rank6_graph, 90, ir::Precision::highest, 1},
                      Case{k_rank6_graph, 90, ir::Precision::high, 17},
                      Case{k_rank6_graph, 90, ir::Precision::tf32x3, 33},
                      Case{k_rank6_graph, 90, ir::Precision::medium, 65},
                      Case{k_rank6_graph, 80, ir::Precision::high, 7},
                      Case{k_rank6_graph, 75, ir::Precision::highest, 3}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Scan, SymbolicEmulation,
    ::testing::Values(Case{k_scan_graph, 90, ir::Precision::highest, 1},
                      Case{k_scan_graph, 90, ir::Precision::highest, 33},
                      Case{k_scan_graph, 90, ir::Precision::high, 300},
                      Case{k_scan_graph, 75, ir::Precision::highest, 65}),
    case_name);

// One build of a bucket's kernels serves its lower bound, its upper bound and a size between.
TEST(SymbolicBucket, OneBuildServesEverySizeOfTheBucket) {
  ir::Graph graph = parse(k_f32_graph);
  for (int64_t first : {int64_t{33}, int64_t{257}}) {
    compiler::DimRange bucket = compiler::bucket_of(first, graph.symbols()[0]);
    auto program = build_program(graph, options_for(graph, 90, ir::Precision::high, first));
    ASSERT_TRUE(program) << program.error().message;
    for (int64_t size : {bucket.lo, (bucket.lo + bucket.hi) / 2 + 1, bucket.hi}) {
      auto report = check_at(graph, *program, size);
      ASSERT_TRUE(report) << report.error().message;
      for (const reference::OutputCheck& o : report->outputs)
        EXPECT_TRUE(o.ok) << "S = " << size << " " << o.name << ": rel_l2 " << o.rel_l2;
    }
  }
}

bool same_bits(const std::vector<reference::Tensor>& a, const std::vector<reference::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i].type() == b[i].type()) || a[i].values.size() != b[i].values.size()) return false;
    for (size_t j = 0; j < a[i].values.size(); ++j) {
      double x = a[i].values[j], y = b[i].values[j];
      if (std::memcmp(&x, &y, sizeof x) != 0) return false;
    }
  }
  return true;
}

std::vector<std::string> kernel_names(const Program& program) {
  std::vector<std::string> names;
  for (const auto& k : program.lowered().plan.kernels) names.push_back(k.name);
  return names;
}

// Where the static graph with the size written in gets the same tile plan (always at the
// bucket's upper bound, where the bucket was planned), the results are bit-identical.
TEST(SymbolicBucket, BitIdenticalToTheStaticGraphWhereTheTilePlanIsTheSame) {
  ir::Graph graph = parse(k_f32_graph);
  int compared = 0;
  for (ir::Precision precision : {ir::Precision::highest, ir::Precision::high}) {
    for (int64_t size : {int64_t{2}, int64_t{37}, int64_t{64}}) {
      auto symbolic = build_program(graph, options_for(graph, 90, precision, size));
      ASSERT_TRUE(symbolic) << symbolic.error().message;
      auto bound = graph.bind({size});
      ASSERT_TRUE(bound);
      compiler::CompileOptions options;
      options.target.sm = 90;
      options.precision = precision;
      auto fixed = build_program(*bound, options);
      ASSERT_TRUE(fixed) << fixed.error().message;
      bool same_plan = kernel_names(*symbolic) == kernel_names(*fixed);
      bool at_upper_bound = compiler::bucket_of(size, graph.symbols()[0]).hi == size;
      if (at_upper_bound) {
        EXPECT_TRUE(same_plan) << "S = " << size;
      }
      if (!same_plan) continue;
      auto inputs = reference::random_inputs(*bound, 11);
      auto a = symbolic->run(inputs);
      auto b = fixed->run(inputs);
      ASSERT_TRUE(a) << a.error().message;
      ASSERT_TRUE(b) << b.error().message;
      EXPECT_TRUE(same_bits(*a, *b)) << "S = " << size << " in " << ir::to_string(precision);
      ++compared;
    }
  }
  EXPECT_GE(compared, 4);
}

TEST(SymbolicBucket, SizesOutsideTheBucketOrInconsistentAreRefused) {
  ir::Graph graph = parse(k_f32_graph);
  auto program = build_program(graph, options_for(graph, 90, ir::Precision::high, 40));
  ASSERT_TRUE(program) << program.error().message;
  auto outside = program->run(reference::random_inputs(*graph.bind({65}), 1));
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.error().message.find("S = 65 is outside the compiled bucket"),
            std::string::npos)
      << outside.error().message;
  auto inputs = reference::random_inputs(*graph.bind({40}), 1);
  inputs[4] = reference::random_inputs(*graph.bind({41}), 1)[4];  // t: f32[4, 41]
  auto inconsistent = program->run(inputs);
  ASSERT_FALSE(inconsistent);
  EXPECT_NE(inconsistent.error().message.find("gives S = 41, but input 'x' dim 0 gives S = 40"),
            std::string::npos)
      << inconsistent.error().message;
}

TEST(SymbolicBucket, ASymbolicGraphNeedsABucketOfItsDims) {
  ir::Graph graph = parse(k_f32_graph);
  compiler::CompileOptions options;
  auto none = compiler::lower(graph, options);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("has symbolic dims (S in 1..600)"), std::string::npos)
      << none.error().message;
  options.bucket = {{33, 40}};
  auto wrong = compiler::lower(graph, options);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("[33, 40] is not a bucket of S in 1..600"),
            std::string::npos)
      << wrong.error().message;
}

}  // namespace
}  // namespace kiln::emulation
