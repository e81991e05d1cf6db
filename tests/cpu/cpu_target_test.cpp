// The CPU target: every example graph in every mode against the fp64 reference, odd sizes and
// layouts, results independent of the thread count, artifacts that survive serialisation (the
// cache's path) bit for bit, and object code that does not link refused.
#include "compiler/cpu/compile.h"
#include "compiler/sizes.h"
#include "ir/parse.h"
#include "reference/audit.h"
#include "reference/check.h"
#include "reference/execute.h"
#include "reference/metrics.h"
#include "reference/rounding.h"
#include "reference/tensor.h"
#include "runtime/cpu_program.h"
#include "tests/emulation/far_rows.h"
#include "tests/emulation/typed_edges.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <utility>

namespace kiln {
namespace {

compiler::cpu::CpuMachine machine() {
  auto m = compiler::cpu::cpu_machine("native");
  EXPECT_TRUE(m) << m.error().message;
  return *m;
}

std::unique_ptr<runtime::CpuProgram> build(const ir::Graph& graph, ir::Precision mode,
                                           const std::vector<compiler::DimRange>& bucket = {}) {
  compiler::CompileOptions options;
  options.precision = mode;
  options.bucket = bucket;
  auto artifact = compiler::cpu::compile_cpu(graph, options, machine());
  EXPECT_TRUE(artifact) << artifact.error().message;
  if (!artifact) return nullptr;
  auto program = runtime::CpuProgram::load(std::move(*artifact));
  EXPECT_TRUE(program) << program.error().message;
  return program ? std::move(*program) : nullptr;
}

// Runs `program` on seeded inputs against fp64 and expects every output within tolerance.
void expect_within_tolerance(const ir::Graph& graph, const runtime::CpuProgram& program,
                             const std::vector<int64_t>& dims, const std::string& what) {
  auto bound = graph.bind(dims);
  ASSERT_TRUE(bound) << bound.error().message;
  auto report = reference::check_against_fp64(
      *bound, *ir::parse_precision(program.artifact().precision), 11,
      reference::bytes_runner(*bound, [&](const std::vector<reference::Bytes>& inputs) {
        return program.run(inputs, dims);
      }));
  ASSERT_TRUE(report) << what << ": " << report.error().message;
  for (const auto& o : report->outputs) {
    EXPECT_TRUE(o.ok) << what << " output " << o.name << ": rel_l2 " << o.rel_l2 << " > "
                      << o.tolerance;
  }
}

struct ExampleCase {
  const char* graph;
  ir::Precision precision;
};

class CpuExamples : public ::testing::TestWithParam<ExampleCase> {};

TEST_P(CpuExamples, OutputsWithinTheModesTolerance) {
  const ExampleCase& c = GetParam();
  auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/" + c.graph);
  ASSERT_TRUE(graph) << graph.error().message;
  if (!graph->symbolic()) {
    auto program = build(*graph, c.precision);
    ASSERT_TRUE(program);
    expect_within_tolerance(*graph, *program, {}, c.graph);
    return;
  }
  // A symbolic graph: the bucket of each size compiled, run at the size and the bucket's top.
  const ir::Symbol& s = graph->symbols()[0];
  for (int64_t v : {int64_t{1}, int64_t{37}}) {
    compiler::DimRange bucket = compiler::bucket_of(v, s);
    auto program = build(*graph, c.precision, {bucket});
    ASSERT_TRUE(program);
    for (int64_t at : {v, bucket.hi}) {
      expect_within_tolerance(*graph, *program, {at},
                              std::string(c.graph) + " at " + std::to_string(at));
    }
  }
}

// The transformer layers in the reduced modes miss their tolerance on uniform [-1, 1] weights
// by design (their attention saturates) on every target; scripts/check_numpy.py --cpu checks
// them on realistic inputs.
const ExampleCase k_examples[] = {
    {"mlp.kg", ir::Precision::highest},        {"mlp.kg", ir::Precision::high},
    {"mlp.kg", ir::Precision::tf32x3},         {"mlp.kg", ir::Precision::medium},
    {"mlp_dynamic.kg", ir::Precision::highest}, {"mlp_dynamic.kg", ir::Precision::high},
    {"mlp_dynamic.kg", ir::Precision::tf32x3}, {"mlp_dynamic.kg", ir::Precision::medium},
    {"attention.kg", ir::Precision::highest},  {"attention.kg", ir::Precision::high},
    {"attention.kg", ir::Precision::tf32x3},   {"attention.kg", ir::Precision::medium},
    {"attention_dynamic.kg", ir::Precision::highest},
    {"attention_dynamic.kg", ir::Precision::high},
    {"attention_dynamic.kg", ir::Precision::tf32x3},
    {"attention_dynamic.kg", ir::Precision::medium},
    {"attention_causal.kg", ir::Precision::automatic},
    {"mixed_head.kg", ir::Precision::highest}, {"mixed_head.kg", ir::Precision::high},
    {"mixed_head.kg", ir::Precision::tf32x3},  {"mixed_head.kg", ir::Precision::medium},
    {"gated_mlp.kg", ir::Precision::automatic}, {"half_epilogue.kg", ir::Precision::automatic},
    {"bert_layer.kg", ir::Precision::highest}, {"bert_layer.kg", ir::Precision::tf32x3},
    {"llama_layer.kg", ir::Precision::highest}, {"llama_layer.kg", ir::Precision::tf32x3},
};

INSTANTIATE_TEST_SUITE_P(Cpu, CpuExamples, ::testing::ValuesIn(k_examples), [](const auto& info) {
  std::string name = info.param.graph;
  name = name.substr(0, name.find('.'));
  return name + "_" + std::string(ir::to_string(info.param.precision));
});

ir::Graph parse(const std::string& text) {
  auto graph = ir::parse_graph(text, "test.kg");
  EXPECT_TRUE(graph) << graph.error().message;
  return *graph;
}

// Sizes that fill no register tile or cache block evenly, every operand orientation, batches
// with broadcast operands, and 16-bit operands converted while packing.
TEST(CpuTarget, OddSizesLayoutsAndBatchesInEveryMode) {
  const char* graphs[] = {
      "graph g { input a: f32[37, 53]\n input b: f32[53, 29]\n input c: f32[29]\n"
      " y = gelu(add(matmul(a, b), c))\n output y }",
      "graph g { input a: f32[53, 37]\n input b: f32[29, 53]\n"
      " y = matmul(a, b, transpose_a=true, transpose_b=true)\n output y }",
      "graph g { input a: f32[3, 97, 300]\n input b: f32[300, 45]\n"
      " y = relu(matmul(a, b))\n output y }",
      "graph g { input a: f32[2, 3, 7, 19]\n input b: f32[2, 1, 19, 5]\n"
      " y = matmul(a, b)\n output y }",
      "graph g { input a: bf16[65, 130]\n input b: bf16[130, 33]\n"
      " y = matmul(a, b)\n output y }",
      "graph g { input a: f16[17, 600]\n input b: f16[33, 600]\n input r: f16[17, 33]\n"
      " y = cast(add(matmul(a, b, transpose_b=true), r), to=f32)\n output y }",
  };
  for (const char* text : graphs) {
    ir::Graph graph = parse(text);
    for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                               ir::Precision::medium}) {
      auto program = build(graph, mode);
      ASSERT_TRUE(program) << text;
      expect_within_tolerance(graph, *program, {}, std::string(text) + " in " +
                                                       std::string(ir::to_string(mode)));
    }
  }
}

// cos and sin (LLVM's intrinsics, libm's cosf/sinf) in a matmul epilogue and alone, rotary-style.
// A constant window along a symbolic dim (BERT's pooler reads token 0 of the sequence): its
// buckets at their smallest and largest sizes, and at sizes between.
TEST(CpuTarget, AWindowAlongASymbolicDimMatchesTheReferenceInEveryMode) {
  ir::Graph graph = parse(
      "graph pool {\n  dim B: 1..8\n  dim S: 1..300\n  input x: f32[B, S, 40]\n"
      "  input w: f32[40, 24]\n  f = reshape(slice(x, axis=1, start=0, end=1), shape=[B, 40])\n"
      "  y = tanh(matmul(f, w))\n  z = add(slice(x, axis=-2, start=0, end=1), 1.0)\n"
      "  output y, z\n}\n");
  for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                             ir::Precision::medium}) {
    for (auto [b, s] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {8, 300}, {2, 2}}) {
      std::vector<compiler::DimRange> bucket = {compiler::bucket_of(b, graph.symbols()[0]),
                                                compiler::bucket_of(s, graph.symbols()[1])};
      auto program = build(graph, mode, bucket);
      ASSERT_TRUE(program);
      expect_within_tolerance(graph, *program, {b, s},
                              std::string(ir::to_string(mode)) + " at B=" + std::to_string(b) +
                                  ", S=" + std::to_string(s));
    }
  }
}

TEST(CpuTarget, CosAndSinMatchTheReferenceInEveryMode) {
  ir::Graph graph = parse(
      "graph g { input x: f32[37, 24]\n input t: f32[37, 24]\n input w: f32[24, 24]\n"
      " y = add(mul(x, cos(t)), mul(matmul(x, w), sin(t)))\n"
      " z = sin(mul(t, 3.0))\n output y, z }");
  for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                             ir::Precision::medium}) {
    auto program = build(graph, mode);
    ASSERT_TRUE(program);
    expect_within_tolerance(graph, *program, {}, "cos/sin in " + std::string(ir::to_string(mode)));
  }
}

// erf, log and both gelu forms in a matmul epilogue and alone.
TEST(CpuTarget, ErfLogAndTanhGeluMatchTheReferenceInEveryMode) {
  ir::Graph graph = parse(
      "graph g { input x: f32[37, 24]\n input w: f32[24, 24]\n"
      " y = add(gelu(matmul(x, w), approximate=\"tanh\"), erf(x))\n"
      " z = log(add(abs(y), 1.0))\n u = gelu(x)\n output z, u }");
  for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                             ir::Precision::medium}) {
    auto program = build(graph, mode);
    ASSERT_TRUE(program);
    expect_within_tolerance(graph, *program, {}, "erf/log/gelu in " + std::string(ir::to_string(mode)));
  }
}

// exp, tanh and erf are arithmetic in the kernels (vectorizable, no libm call): over a sweep of
// every 613th float of each sign, plus the edges, each is within one ulp of the exact value, in
// the vectorized body and the scalar tail alike; infinities, NaN and -0 come out as libm's do.
TEST(CpuTarget, ExpTanhAndErfAreWithinOneUlp) {
  std::vector<float> xs = {0.0f, -0.0f, 1e-40f, -1e-40f, 88.72f, 88.73f, -87.5f, -103.0f,
                           -103.97f, -104.5f, 0.9f, -0.9f, 0.921875f, 2.0f, 3.9375f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (uint32_t u = 0; u < 0x7f800000u; u += 613) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      uint32_t bits = u | sign;
      float x;
      std::memcpy(&x, &bits, sizeof x);
      xs.push_back(x);
    }
  }
  const std::string n = std::to_string(xs.size());
  ir::Graph graph = parse("graph g { input x: f32[" + n +
                          "]\n e = exp(x)\n t = tanh(x)\n f = erf(x)\n output e, t, f }");
  auto program = build(graph, ir::Precision::highest);
  ASSERT_TRUE(program);
  std::vector<unsigned char> in(xs.size() * sizeof(float));
  std::memcpy(in.data(), xs.data(), in.size());
  auto out = program->run({in}, {});
  ASSERT_TRUE(out) << out.error().message;
  ASSERT_EQ(out->size(), 3u);
  // One ulp of a float near `exact`: 2^(exponent - 23), 2^-149 among the subnormals.
  auto ulp = [](double exact) {
    int e = 0;
    std::frexp(exact, &e);
    return std::ldexp(1.0, std::max(e - 1, -126) - 23);
  };
  const std::function<double(double)> exact[] = {[](double x) { return std::exp(x); },
                                                 [](double x) { return std::tanh(x); },
                                                 [](double x) { return std::erf(x); }};
  const char* names[] = {"exp", "tanh", "erf"};
  for (size_t o = 0; o < 3; ++o) {
    ASSERT_EQ((*out)[o].size(), in.size());
    std::vector<float> got(xs.size());
    std::memcpy(got.data(), (*out)[o].data(), in.size());
    double worst = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      double want = exact[o](xs[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << names[o] << "(" << xs[i] << ")";
        continue;
      }
      if (std::isinf(static_cast<float>(want)) || want == 0.0) {
        // Infinities and zeros exactly, their signs included (-0 for tanh(-0) and erf(-0)).
        EXPECT_EQ(got[i], static_cast<float>(want)) << names[o] << "(" << xs[i] << ")";
        EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << names[o] << "(" << xs[i] << ")";
        continue;
      }
      double err = std::fabs(got[i] - want) / ulp(want);
      worst = std::max(worst, err);
      EXPECT_LE(err, 1.0) << names[o] << "(" << xs[i] << ") = " << got[i] << ", exactly " << want;
    }
    EXPECT_GT(worst, 0.0) << names[o];  // the sweep reaches values the polynomials round
  }
}

// Grouped-query attention (6 query heads over 2 kv heads) with a bool padding mask, every mode.
TEST(CpuTarget, GroupedQueryAttentionMatchesTheReferenceInEveryMode) {
  // A bool mask, seeded true or false: a row may lose every key (then zeros, as the reference).
  ir::Graph graph = parse(
      "graph g { input q: f32[2, 6, 19, 16]\n input k: f32[2, 2, 23, 16]\n"
      " input v: f32[2, 2, 23, 8]\n input m: bool[2, 1, 1, 23]\n"
      " o = attention(q, k, v, mask=m, causal=true)\n output o }");
  for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                             ir::Precision::medium}) {
    auto program = build(graph, mode);
    ASSERT_TRUE(program);
    expect_within_tolerance(graph, *program, {}, "gqa in " + std::string(ir::to_string(mode)));
  }
}

TEST(CpuTarget, RowOpsLayoutsAndReductions) {
  ir::Graph graph = parse(
      "graph g { input x: f32[6, 50, 33]\n input w: f32[33]\n input v: f32[33]\n"
      " s = softmax(mul(x, 0.25), axis=1)\n"
      " n = layer_norm(s, w, v)\n"
      " r = rms_norm(permute(x, dims=[1, 0, 2]), w)\n"
      " m = max(x, axis=1)\n"
      " c = concat(slice(r, axis=0, start=3, end=20), slice(r, axis=0, start=0, end=5), axis=0)\n"
      " output n, m, c }");
  auto program = build(graph, ir::Precision::highest);
  ASSERT_TRUE(program);
  expect_within_tolerance(graph, *program, {}, "row ops");
}

std::vector<std::vector<unsigned char>> seeded_inputs(const ir::Graph& graph) {
  std::vector<std::vector<unsigned char>> inputs;
  for (const reference::Tensor& t : reference::random_inputs(graph, 5)) {
    inputs.emplace_back(t.type().bytes());
    reference::store_device_bytes(t, inputs.back().data());
  }
  return inputs;
}

// The GEMM, attention (several query blocks per head) and row kernels (vector partial sums).
TEST(CpuTarget, ResultsDoNotDependOnTheThreadCount) {
  for (const char* name : {"mlp", "llama_layer", "bert_layer"}) {
    auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/" + name + ".kg");
    ASSERT_TRUE(graph);
    auto program = build(*graph, ir::Precision::tf32x3);
    ASSERT_TRUE(program);
    auto inputs = seeded_inputs(*graph);
    auto one = program->run(inputs, {}, 1);
    auto three = program->run(inputs, {}, 3);
    ASSERT_TRUE(one && three);
    EXPECT_EQ(*one, *three) << name;
  }
}

// Integer and bool values through the CPU target in every mode: the emulator's padding-mask graph
// (where, comparisons, logical ops, wrapping i32 products, casts) and its rotary tables computed
// from arange, embeddings, expands, rank 6 and rank 0, running sums of integers and floats,
// rolls, against fp64.
TEST(CpuTarget, IntegerAndBoolGraphsMatchTheReferenceInEveryMode) {
  for (const char* name :
       {"masks_odd", "rotary_positions_odd", "embedding_odd", "expand_odd", "rank6_odd",
        "scalars_odd", "batch6_odd", "scans_odd", "rolls_odd"}) {
    auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/tests/emulation/graphs/" +
                                      name + ".kg");
    ASSERT_TRUE(graph) << graph.error().message;
    for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                               ir::Precision::medium}) {
      auto program = build(*graph, mode);
      ASSERT_TRUE(program);
      expect_within_tolerance(*graph, *program, {},
                              std::string(name) + " in " + std::string(ir::to_string(mode)));
    }
  }
}

// `inputs` as the device holds them (`edit` may change the bytes), through `program`, each
// output read back as the reference holds it, beside fp64's.
struct Compared {
  std::vector<reference::Tensor> got, want;
};
Compared run_beside_fp64(const ir::Graph& graph, runtime::CpuProgram& program,
                         const std::vector<reference::Tensor>& inputs,
                         const std::function<void(std::vector<std::vector<unsigned char>>&)>& edit = {}) {
  Compared c;
  std::vector<std::vector<unsigned char>> bytes;
  for (const reference::Tensor& t : inputs) {
    bytes.emplace_back(t.type().bytes());
    reference::store_device_bytes(t, bytes.back().data());
  }
  if (edit) edit(bytes);
  auto out = program.run(bytes, {});
  EXPECT_TRUE(out) << out.error().message;
  auto truth = reference::run(graph, inputs, reference::RunMode::fp64());
  EXPECT_TRUE(truth) << truth.error().message;
  if (!out || !truth) return c;
  c.want = std::move(*truth);
  for (size_t o = 0; o < c.want.size(); ++o)
    c.got.push_back(reference::load_device_bytes(graph.node(graph.outputs()[o]).type, (*out)[o].data()));
  return c;
}

// Edge values bit for bit against the reference: casts that truncate, saturate and take NaN to
// 0, i64 -> i32 wrapping, wrapping i32 products, a bool byte of 7 read as true; and i64 values
// past 2^53 through every kind of integer op, exact.
TEST(CpuTarget, IntegerAndBoolEdgeValuesMatchTheReferenceExactly) {
  for (bool wide : {false, true}) {
    ir::Graph graph = parse(wide ? kiln::testing::k_wide_integers : kiln::testing::k_typed_edges);
    SCOPED_TRACE(graph.name());
    auto program = build(graph, ir::Precision::highest);
    ASSERT_TRUE(program);
    Compared c = wide ? run_beside_fp64(graph, *program, kiln::testing::wide_integer_inputs(graph))
                      : run_beside_fp64(graph, *program, kiln::testing::typed_edge_inputs(graph),
                                        [](auto& bytes) { bytes[3][2] = 7; });
    ASSERT_EQ(c.got.size(), graph.outputs().size());
    for (size_t o = 0; o < c.got.size(); ++o)
      EXPECT_TRUE(kiln::testing::same_values(c.got[o], c.want[o]))
          << graph.node(graph.outputs()[o]).name;
  }
}

// Embeddings fused into the row ops that read them: ids outside [0, V) give zero rows there too
// (the row read is row 0's, a valid address, then selected away), against fp64.
TEST(CpuTarget, FusedGathersReadZerosForIdsOutsideTheTable) {
  ir::Graph graph = parse(kiln::testing::k_fused_embeddings);
  auto program = build(graph, ir::Precision::highest);
  ASSERT_TRUE(program);
  Compared c = run_beside_fp64(graph, *program, kiln::testing::fused_embedding_inputs(graph));
  ASSERT_EQ(c.got.size(), graph.outputs().size());
  for (size_t o = 0; o < c.got.size(); ++o)
    for (size_t i = 0; i < c.got[o].values.size(); ++i)
      EXPECT_NEAR(c.got[o].values[i], c.want[o].values[i], 1e-5)
          << graph.node(graph.outputs()[o]).name << "[" << i << "]";
  for (size_t i = 24; i < 36; ++i) EXPECT_EQ(c.got[1].values[i], 0.0);  // r's row 2: id -1
}

// layer_norm of rows far from 0 next to their spread keeps their deviations (it works on the row
// less its first element): within highest's tolerance of fp64 in every mode, where it was 4% off.
TEST(CpuTarget, LayerNormOfRowsFarFromZeroKeepsTheirDeviations) {
  ir::Graph graph = parse(testing::k_far_rows);
  for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high}) {
    SCOPED_TRACE(ir::to_string(mode));
    auto program = build(graph, mode);
    ASSERT_TRUE(program);
    auto run = reference::check_against_fp64(
        graph, ir::Precision::highest, testing::far_row_inputs(graph, 3),
        reference::bytes_runner(graph, [&](const std::vector<reference::Bytes>& inputs) {
          return program->run(inputs, {});
        }));
    ASSERT_TRUE(run) << run.error().message;
    for (const auto& o : run->report.outputs)
      EXPECT_TRUE(o.ok) << o.name << ": rel_l2 " << o.rel_l2 << " > " << o.tolerance;
  }
}

// A row of the attention op whose every key is masked out is zeros (0 / 0 would be NaN), even
// where a masked key's v holds a NaN (which reaches the other rows through its weight of 0); a
// row with a NaN score (a NaN in its query) is NaN, as softmax's, not taken for a masked-out one.
TEST(CpuTarget, AttentionRowsWithoutAKeyAreZeros) {
  ir::Graph graph = parse(
      "graph g { input q: f32[1, 4, 5, 8]\n input k: f32[1, 2, 6, 8]\n input v: f32[1, 2, 6, 3]\n"
      " input m: f32[5, 6]\n o = attention(q, k, v, mask=m)\n output o }");
  auto program = build(graph, ir::Precision::highest);
  ASSERT_TRUE(program);
  auto inputs = seeded_inputs(graph);
  // Row 2 masks every key, every row key 5.
  std::vector<float> mask(30, 0.0f);
  for (int j = 0; j < 6; ++j) mask[2 * 6 + j] = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < 5; ++i) mask[i * 6 + 5] = -std::numeric_limits<float>::infinity();
  std::memcpy(inputs[3].data(), mask.data(), mask.size() * sizeof(float));
  // Head 1's query 4 holds a NaN, and kv head 1's value of key 5 (query heads 2 and 3).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(inputs[0].data() + ((1 * 5 + 4) * 8 + 3) * sizeof(float), &nan, sizeof(float));
  std::memcpy(inputs[2].data() + ((1 * 6 + 5) * 3 + 1) * sizeof(float), &nan, sizeof(float));
  auto out = program->run(inputs, {});
  ASSERT_TRUE(out) << out.error().message;
  std::vector<float> o((*out)[0].size() / sizeof(float));
  std::memcpy(o.data(), (*out)[0].data(), (*out)[0].size());
  ASSERT_EQ(o.size(), 4u * 5 * 3);
  for (size_t e = 0; e < o.size(); ++e) {
    size_t column = e % 3, row = (e / 3) % 5, head = e / 15;
    if (row == 2) {
      EXPECT_EQ(o[e], 0.0f) << e;
    } else if ((head == 1 && row == 4) || (head >= 2 && column == 1)) {
      EXPECT_TRUE(std::isnan(o[e])) << e;
    } else {
      ASSERT_TRUE(std::isfinite(o[e])) << e;
      EXPECT_NE(o[e], 0.0f) << e;
    }
  }
}

// `graph`'s output (f32) in `mode` on seeded inputs that `plant` edits: q and k (inputs 0 and 1,
// f32) and every input's bytes. Empty, and the test failed, where it does not build or run.
using Plant = std::function<void(float* q, float* k, std::vector<std::vector<unsigned char>>&)>;
std::vector<float> run_planted(const ir::Graph& graph, ir::Precision mode, const Plant& plant) {
  auto program = build(graph, mode);
  if (!program) return {};
  auto inputs = seeded_inputs(graph);
  plant(reinterpret_cast<float*>(inputs[0].data()), reinterpret_cast<float*>(inputs[1].data()),
        inputs);
  auto out = program->run(inputs, {});
  EXPECT_TRUE(out) << out.error().message;
  if (!out) return {};
  std::vector<float> o((*out)[0].size() / sizeof(float));
  std::memcpy(o.data(), (*out)[0].data(), (*out)[0].size());
  return o;
}

// A bool mask adds -inf where it is false, as PyTorch's scaled_dot_product_attention does: a
// masked key whose score is +inf makes its row NaN (+inf + -inf), one whose score is -inf
// leaves the row finite, and a row masking every key is zeros. Key 5 holds a +inf; rows 1 and 2
// meet it negatively (score -inf), the others positively; rows 0 to 3 mask it, row 2 masks all.
TEST(CpuTarget, ABoolMaskAddsMinusInfinityAsPyTorchDoes) {
  ir::Graph graph = parse(
      "graph g { input q: f32[1, 1, 5, 8]\n input k: f32[1, 1, 6, 8]\n input v: f32[1, 1, 6, 3]\n"
      " input m: bool[5, 6]\n o = attention(q, k, v, mask=m)\n output o }");
  for (ir::Precision mode : {ir::Precision::highest, ir::Precision::tf32x3}) {
    SCOPED_TRACE(std::string(ir::to_string(mode)));
    std::vector<float> o = run_planted(graph, mode, [](float* q, float* k, auto& inputs) {
      for (int i = 0; i < 5; ++i) q[i * 8] = i == 1 || i == 2 ? -0.5f : 0.5f;
      k[5 * 8] = std::numeric_limits<float>::infinity();
      for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 6; ++j) inputs[3][i * 6 + j] = i == 2 || (j == 5 && i < 4) ? 0 : 1;
    });
    ASSERT_EQ(o.size(), 5u * 3);
    for (size_t e = 0; e < o.size(); ++e) {
      size_t row = e / 3;
      if (row == 2) {
        EXPECT_EQ(o[e], 0.0f) << e;
      } else if (row == 1) {
        EXPECT_TRUE(std::isfinite(o[e]) && o[e] != 0.0f) << e << ": " << o[e];
      } else {
        EXPECT_TRUE(std::isnan(o[e])) << e << ": " << o[e];
      }
    }
  }
}

// Without a mask, a row whose every score is -inf (an infinite q) is zeros, as PyTorch's
// scaled_dot_product_attention gives, in every mode; one with a +inf score among -inf ones NaN.
TEST(CpuTarget, AttentionRowsWhoseScoresAreAllMinusInfinityAreZeros) {
  ir::Graph graph = parse("graph g { input q: f32[1, 2, 5, 8]\n input k: f32[1, 2, 6, 8]\n"
                          " input v: f32[1, 2, 6, 3]\n o = attention(q, k, v)\n output o }");
  for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                             ir::Precision::medium}) {
    SCOPED_TRACE(std::string(ir::to_string(mode)));
    std::vector<float> o = run_planted(graph, mode, [](float* q, float* k, auto&) {
      for (int key = 0; key < 12; ++key) k[key * 8 + 2] = 0.5f + 0.25f * static_cast<float>(key % 3);
      k[(6 + 4) * 8 + 2] = -0.5f;                              // head 1, key 4
      q[3 * 8 + 2] = -std::numeric_limits<float>::infinity();  // head 0, query 3: all -inf
      q[(5 + 1) * 8 + 2] = -std::numeric_limits<float>::infinity();  // head 1, query 1: one +inf
    });
    ASSERT_EQ(o.size(), 2u * 5 * 3);
    for (size_t e = 0; e < o.size(); ++e) {
      size_t row = (e / 3) % 5, head = e / 15;
      if (head == 0 && row == 3) {
        EXPECT_EQ(o[e], 0.0f) << e;
      } else if (head == 1 && row == 1) {
        EXPECT_TRUE(std::isnan(o[e])) << e << ": " << o[e];
      } else {
        EXPECT_TRUE(std::isfinite(o[e])) << e << ": " << o[e];
      }
    }
  }
}

// tf32x3 with infinite operands gives what fp32 gives (split_tf32x3: an infinity's big part is ±1,
// its small part the infinity): an infinity times tf32-exact values (whose small part is 0), times
// inexact ones, times 0 and times another infinity, in A and B, beside a NaN, through the packed
// GEMM at two sizes; and an infinity of v through attention, +inf and -inf in one column NaN.
TEST(CpuTarget, Tf32x3InfiniteOperandsGiveWhatFp32Gives) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t scale : {1, 3}) {
    const int64_t M = 37 * scale, K = 64 * scale, N = 45 * scale;
    SCOPED_TRACE("M " + std::to_string(M));
    ir::Graph graph = parse("graph g { input a: f32[" + std::to_string(M) + ", " + std::to_string(K) +
                            "]\n input b: f32[" + std::to_string(K) + ", " + std::to_string(N) +
                            "]\n c = matmul(a, b)\n output c }");
    auto program = build(graph, ir::Precision::tf32x3);
    ASSERT_TRUE(program);
    auto inputs = seeded_inputs(graph);
    float* a = reinterpret_cast<float*>(inputs[0].data());
    float* b = reinterpret_cast<float*>(inputs[1].data());
    for (int64_t n = 0; n < N; ++n) b[17 * N + n] = static_cast<float>((n % 7) - 3) / 4 + 0.125f;
    for (int64_t m = 0; m < M; ++m) a[m * K + 40] = static_cast<float>((m % 5) - 2) / 8 + 0.0625f;
    a[5 * K + 17] = inf;    // times B's tf32-exact row 17
    a[9 * K + 30] = -inf;   // times inexact values
    a[20 * K + 17] = -inf;  // and -inf x -inf at n = 3
    b[17 * N + 3] = -inf;
    a[11 * K + 40] = 0.0f;  // 0 x inf
    b[40 * N + 7] = inf;    // times A's tf32-exact column 40
    a[30 * K + 3] = std::numeric_limits<float>::quiet_NaN();  // row 30 NaN
    auto out = program->run(inputs, {});
    ASSERT_TRUE(out) << out.error().message;
    const float* c = reinterpret_cast<const float*>((*out)[0].data());
    size_t infinite = 0, wrong = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double exact = 0, size = 0;  // IEEE's infinities and NaN, as fp32 makes them
        for (int64_t k = 0; k < K; ++k) {
          exact += static_cast<double>(a[m * K + k]) * b[k * N + n];
          size += std::fabs(static_cast<double>(a[m * K + k]) * b[k * N + n]);
        }
        double got = c[m * N + n];
        infinite += std::isinf(exact) ? 1 : 0;
        bool ok = std::isnan(exact)   ? std::isnan(got)
                  : std::isinf(exact) ? got == exact
                                      : std::fabs(got - exact) <= 1e-5 * size + 1e-30;
        if (!ok && wrong++ < 5) ADD_FAILURE() << "(" << m << ", " << n << "): " << got << " where fp32 gives " << exact;
      }
    EXPECT_EQ(wrong, 0u);
    EXPECT_GE(infinite, static_cast<size_t>(3 * N + M - 10));  // rows 5, 9 and 20, column 7
  }
  ir::Graph graph = parse("graph g { input q: f32[1, 2, 37, 32]\n input k: f32[1, 2, 41, 32]\n"
                          " input v: f32[1, 2, 41, 24]\n o = attention(q, k, v, scale=0.25)\n output o }");
  auto program = build(graph, ir::Precision::tf32x3);
  ASSERT_TRUE(program);
  auto inputs = seeded_inputs(graph);
  float* v = reinterpret_cast<float*>(inputs[2].data());
  for (int64_t key = 0; key < 41; ++key) v[(41 + key) * 24 + 3] = 0.25f * static_cast<float>(key % 3 - 1) + 0.5f;
  v[(41 + 7) * 24 + 3] = inf;  // head 1, column 3: every row +inf
  v[2 * 24 + 5] = -inf;        // head 0, column 5: NaN
  v[30 * 24 + 5] = inf;
  auto out = program->run(inputs, {});
  ASSERT_TRUE(out) << out.error().message;
  const float* o = reinterpret_cast<const float*>((*out)[0].data());
  for (size_t e = 0; e < 2u * 37 * 24; ++e) {
    size_t head = e / (37 * 24), column = e % 24;
    if (head == 1 && column == 3) {
      ASSERT_EQ(o[e], inf) << e;
    } else if (head == 0 && column == 5) {
      ASSERT_TRUE(std::isnan(o[e])) << e << ": " << o[e];
    } else {
      ASSERT_TRUE(std::isfinite(o[e])) << e << ": " << o[e];
    }
  }
}

// A matmul of bf16 or f16 operands with out_dtype=f32 gives its fp32 sums unrounded, so a bias
// added before one cast rounds once (as PyTorch's addmm and linear): against fp64's exact sum
// rounded once, and far from the result of rounding the product first. Both GEMM layouts of B.
TEST(CpuTarget, AnF32MatmulOfHalfOperandsIsNotRoundedSoABiasRoundsOnce) {
  for (const char* dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    std::string t = dtype;
    ir::Graph graph = parse("graph g { input x: " + t + "[3, 40, 160]\n input w: " + t +
                            "[96, 160]\n input wn: " + t + "[160, 96]\n input b: " + t +
                            "[96]\n y = cast(add(matmul(x, w, transpose_b=true, out_dtype=f32), "
                            "cast(b, to=f32)), to=" + t + ")\n p = matmul(x, wn, out_dtype=f32)\n"
                            " output y, p }");
    auto program = build(graph, ir::Precision::high);
    ASSERT_TRUE(program);
    std::vector<reference::Tensor> in = reference::random_inputs(graph, 4);
    for (int64_t k = 0; k < 160; ++k)  // wn holds w transposed, so p is y's product
      for (int64_t n = 0; n < 96; ++n) in[2].values[k * 96 + n] = in[1].values[n * 160 + k];
    Compared c = run_beside_fp64(graph, *program, in);
    ASSERT_EQ(c.got.size(), 2u);
    auto round = t == "bf16" ? reference::round_bf16 : reference::round_f16;
    const std::vector<double>&y = c.got[0].values, &p = c.got[1].values, &x = in[0].values,
                      &w = in[1].values, &b = in[3].values;
    ASSERT_EQ(y.size(), size_t{120 * 96});
    size_t once = 0, twice = 0, far = 0, wide = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      double dot = 0, size = 0;
      for (size_t k = 0; k < 160; ++k) {
        dot += x[i / 96 * 160 + k] * w[i % 96 * 160 + k];
        size += std::fabs(x[i / 96 * 160 + k] * w[i % 96 * 160 + k]);
      }
      float bias = static_cast<float>(b[i % 96]);
      once += y[i] != round(static_cast<float>(dot + bias)) ? 1 : 0;
      twice += y[i] != round(round(static_cast<float>(dot)) + bias) ? 1 : 0;
      far += std::fabs(p[i] - dot) > 160 * 0x1p-24 * size ? 1 : 0;
      wide += round(static_cast<float>(p[i])) != static_cast<float>(p[i]) ? 1 : 0;
    }
    EXPECT_LE(once, y.size() / 100) << "of " << y.size();
    EXPECT_GE(twice, y.size() / 10) << "of " << y.size();  // as rounding the product first would
    EXPECT_EQ(far, 0u);
    EXPECT_GE(wide, p.size() * 9 / 10) << "of " << p.size();
  }
}

// Keys past one chunk (512 at most): the softmax goes online, each query's max, sum and output
// rescaled chunk by chunk. Rows whose first chunk is wholly masked and whose later keys are not
// (their running max is -inf for a while), rows with no key at all (zeros for the attention op),
// causal rows ending in every chunk, and the explicit chain (softmax's own NaN for a row with no
// key), each mode against fp64.
TEST(CpuTarget, AttentionOverSeveralKeyChunksMatchesTheReferenceInEveryMode) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* text;
    bool zero_rows;  // the attention op: a row with no key is 0; the chain: NaN
  };
  const Case cases[] = {
      {"graph g { input q: f32[1, 2, 37, 16]\n input k: f32[1, 2, 1100, 16]\n"
       " input v: f32[1, 2, 1100, 8]\n input m: f32[37, 1100]\n"
       " o = attention(q, k, v, mask=m)\n output o }", true},
      {"graph g { input q: f32[1, 37, 16]\n input k: f32[1, 1100, 16]\n input v: f32[1, 1100, 8]\n"
       " input m: f32[37, 1100]\n"
       " o = matmul(softmax(add(mul(matmul(q, k, transpose_b=true), 0.25), m), axis=-1), v)\n"
       " output o }", false},
      {"graph g { input q: f32[1, 1, 1100, 16]\n input k: f32[1, 1, 1100, 16]\n"
       " input v: f32[1, 1, 1100, 8]\n o = attention(q, k, v, causal=true)\n output o }", true},
  };
  for (const Case& c : cases) {
    ir::Graph graph = parse(c.text);
    for (ir::Precision mode : {ir::Precision::highest, ir::Precision::high, ir::Precision::tf32x3,
                               ir::Precision::medium}) {
      std::string what = std::string(c.text) + " in " + std::string(ir::to_string(mode));
      auto program = build(graph, mode);
      ASSERT_TRUE(program) << what;
      std::vector<reference::Tensor> inputs = reference::random_inputs(graph, 3);
      // Mask rows: r % 3 == 0 sees keys from 700 on only, r % 3 == 1 none (but for the chain,
      // whose row would be NaN: there keys 1000 on), r % 3 == 2 every key.
      std::vector<size_t> empty_rows;
      if (inputs.size() == 4) {
        std::vector<double>& mask = inputs[3].values;
        ASSERT_EQ(mask.size(), 37u * 1100);
        for (size_t r = 0; r < 37; ++r) {
          size_t from = r % 3 == 0 ? 700 : r % 3 == 1 ? (c.zero_rows ? 1100 : 1000) : 0;
          if (from == 1100) empty_rows.push_back(r);
          for (size_t j = 0; j < 1100; ++j) mask[r * 1100 + j] = j < from ? -inf : 0.0;
        }
      }
      Compared got = run_beside_fp64(graph, *program, inputs);
      ASSERT_EQ(got.got.size(), 1u) << what;
      const std::vector<double>& o = got.got[0].values;
      for (double x : o) ASSERT_TRUE(std::isfinite(x)) << what;
      for (size_t r : empty_rows)
        for (size_t h = 0; h < 2; ++h)
          for (size_t e = 0; e < 8; ++e) EXPECT_EQ(o[(h * 37 + r) * 8 + e], 0.0) << what;
      double bound = reference::output_tolerance(graph, graph.outputs()[0], mode);
      EXPECT_LE(reference::relative_l2(o, got.want[0].values), bound) << what;
    }
  }
}

TEST(CpuTarget, ASerialisedArtifactLoadsAndGivesTheSameBits) {
  auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/attention.kg");
  ASSERT_TRUE(graph);
  compiler::CompileOptions options;
  options.precision = ir::Precision::high;
  auto artifact = compiler::cpu::compile_cpu(*graph, options, machine());
  ASSERT_TRUE(artifact) << artifact.error().message;
  auto copy = compiler::deserialize(compiler::serialize(*artifact));
  ASSERT_TRUE(copy) << copy.error().message;
  EXPECT_EQ(*copy, *artifact);
  auto first = runtime::CpuProgram::load(std::move(*artifact));
  auto second = runtime::CpuProgram::load(std::move(*copy));
  ASSERT_TRUE(first && second);
  auto inputs = seeded_inputs(*graph);
  auto a = (*first)->run(inputs, {});
  auto b = (*second)->run(inputs, {});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
}

// The CPU resolves modes as on sm_90 whatever arch the options name; a request checked for
// another arch is refused rather than lowered with its paths.
TEST(CpuTarget, ModesResolveAsOnSm90WhateverTheOptionsArch) {
  ir::Graph graph = parse(
      "graph g { input a: f32[8, 16]\n input b: f32[16, 8]\n y = matmul(a, b)\n output y }");
  compiler::CompileOptions options;
  options.target.sm = 75;  // no TF32 there
  options.precision = ir::Precision::high;
  auto artifact = compiler::cpu::compile_cpu(graph, options, machine());
  ASSERT_TRUE(artifact) << artifact.error().message;
  EXPECT_EQ(artifact->precision, "high");
  options.precision = ir::Precision::automatic;
  auto automatic = compiler::cpu::compile_cpu(graph, options, machine());
  ASSERT_TRUE(automatic) << automatic.error().message;
  EXPECT_EQ(automatic->precision, "high") << automatic->decision;

  options.precision = ir::Precision::highest;
  auto for_sm75 = compiler::check_request(graph, options);
  ASSERT_TRUE(for_sm75) << for_sm75.error().message;
  auto refused = compiler::cpu::compile_cpu(graph, *for_sm75, machine());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("checked as on sm_90"), std::string::npos)
      << refused.error().message;
}

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// A serving process loads and drops programs for its whole life: an unloaded object's memory is
// reused (an allocator that kept it grew by 12 KiB a load, 36 MiB over this loop).
TEST(CpuTarget, LoadingAndDroppingProgramsReusesTheirMemory) {
  ir::Graph graph = parse(
      "graph g { input a: f32[8, 16]\n input b: f32[16, 8]\n y = gelu(matmul(a, b))\n output y }");
  auto artifact = compiler::cpu::compile_cpu(graph, compiler::CompileOptions{}, machine());
  ASSERT_TRUE(artifact) << artifact.error().message;
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(runtime::CpuProgram::load(*artifact));  // warm up
  long before = resident_kib();
  ASSERT_GT(before, 0);
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(runtime::CpuProgram::load(*artifact));
  EXPECT_LT(resident_kib() - before, 8 * 1024) << "KiB resident grew over 3000 loads";
}

TEST(CpuTarget, ObjectCodeThatDoesNotLinkIsRefused) {
  auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/mlp.kg");
  ASSERT_TRUE(graph);
  compiler::CompileOptions options;
  auto artifact = compiler::cpu::compile_cpu(*graph, options, machine());
  ASSERT_TRUE(artifact);
  compiler::Artifact truncated = *artifact;
  truncated.object.resize(truncated.object.size() / 3);
  auto loaded = runtime::CpuProgram::load(truncated);
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().message.find("cpu object"), std::string::npos) << loaded.error().message;
  compiler::Artifact garbage = *artifact;
  garbage.object = std::string(4096, '\x5a');
  EXPECT_FALSE(runtime::CpuProgram::load(garbage));
  compiler::Artifact renamed = *artifact;
  renamed.kernels[0].entry = "kiln_no_such_kernel";
  auto missing = runtime::CpuProgram::load(renamed);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("kiln_no_such_kernel"), std::string::npos);
}

TEST(CpuTarget, ObjectCodeImportingAnythingOffTheAllowListIsRefusedUnlinked) {
  auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/mlp.kg");
  ASSERT_TRUE(graph);
  auto artifact = compiler::cpu::compile_cpu(*graph, compiler::CompileOptions{}, machine());
  ASSERT_TRUE(artifact);
  std::ifstream in(KILN_FORGED_OBJECT, std::ios::binary);
  ASSERT_TRUE(in) << KILN_FORGED_OBJECT;
  compiler::Artifact forged = *artifact;
  forged.object.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  for (compiler::KernelArtifact& kernel : forged.kernels) kernel.entry = "kiln_forged_entry";
  std::string marker = ::testing::TempDir() + "/kiln_forged_marker";
  std::remove(marker.c_str());
  ::setenv("KILN_FORGED_MARKER", marker.c_str(), 1);
  auto loaded = runtime::CpuProgram::load(forged);
  ASSERT_FALSE(loaded) << "an object that imports system() was linked";
  EXPECT_NE(loaded.error().message.find("cpu object: refused: it imports 'system'"),
            std::string::npos)
      << loaded.error().message;
  EXPECT_FALSE(std::ifstream(marker).good()) << "the forged kernel ran";
}

TEST(CpuTarget, WrongInputsAndDimsAreErrors) {
  auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/mlp_dynamic.kg");
  ASSERT_TRUE(graph);
  compiler::DimRange bucket = compiler::bucket_of(40, graph->symbols()[0]);
  auto program = build(*graph, ir::Precision::highest, {bucket});
  ASSERT_TRUE(program);
  auto outside = program->run(std::vector<std::vector<unsigned char>>(5), {bucket.hi + 1});
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.error().message.find("outside the compiled bucket"), std::string::npos);
  auto short_inputs = program->run(std::vector<std::vector<unsigned char>>(5), {bucket.hi});
  ASSERT_FALSE(short_inputs);
  EXPECT_NE(short_inputs.error().message.find("bytes"), std::string::npos);
}

// CUDA's grid limits (65535 blocks along y and z, which CUDA's kernels fold past) are CUDA's: the
// CPU has no grid.
TEST(CpuTarget, BatchesPastCudasGridLimitRun) {
  ir::Graph graph = parse("graph g { input a: f32[70000, 2, 3]\n input b: f32[70000, 3, 2]\n"
                          " c = matmul(a, b)\n output c }");
  auto program = build(graph, ir::Precision::highest);
  ASSERT_TRUE(program);
  expect_within_tolerance(graph, *program, {}, "70000 batches");
}

// Code for a CPU with instructions this one lacks is refused by name, not run into SIGILL.
TEST(CpuTarget, CodeForACpuThisOneCannotRunIsRefused) {
  const std::string cpu = "sapphirerapids";  // AMX, AVX512-FP16: absent from most hosts
  if (compiler::cpu::runs_here(cpu)) GTEST_SKIP() << "this host runs " << cpu << " code";
  auto machine = compiler::cpu::cpu_machine(cpu);
  ASSERT_TRUE(machine) << machine.error().message;
  auto graph = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/mlp.kg");
  ASSERT_TRUE(graph);
  auto artifact = compiler::cpu::compile_cpu(*graph, compiler::CompileOptions{}, *machine);
  ASSERT_TRUE(artifact) << artifact.error().message;  // compiling for it is fine
  auto loaded = runtime::CpuProgram::load(std::move(*artifact));
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().message.find("cannot run here"), std::string::npos)
      << loaded.error().message;
}

TEST(CpuTarget, UnknownCpuIsAnError) {
  auto m = compiler::cpu::cpu_machine("no-such-cpu");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("no-such-cpu"), std::string::npos);
}

}  // namespace
}  // namespace kiln
