// The transformer ops (reductions, norms, reshape, permute, slice, concat, sqrt/rsqrt/abs,
// pow/maximum/minimum, 4-D matmul): shape and dtype inference, located errors, printing round
// trips and hash sensitivity.
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::ir::transformer_ops_test {
namespace {

// A graph with inputs x: f32[2, 6, 8], w: f32[8], b: f32[8], y: f32[2, 6, 8] and `body`.
std::string wrap(const std::string& body) {
  return "graph g {\n  input x: f32[2, 6, 8]\n  input w: f32[8]\n  input b: f32[8]\n"
         "  input y: f32[2, 6, 8]\n" + body + "}\n";
}

Graph parse_ok(const std::string& text) {
  auto graph = parse_graph(text, "g.kg");
  EXPECT_TRUE(graph) << graph.error().message;
  return graph ? *graph : Graph(*parse_graph("graph e {\n input a: f32[1]\n o = neg(a)\n output o\n}\n", "e"));
}

// The type of the graph's first output.
std::string out_type(const std::string& body) {
  Graph g = parse_ok(wrap(body));
  return to_string(g.node(g.outputs()[0]).type);
}

std::string error_of(const std::string& body) {
  auto graph = parse_graph(wrap(body), "bad.kg");
  EXPECT_FALSE(graph) << "parsed: " << body;
  return graph ? "" : graph.error().message;
}

TEST(TransformerOps, ReductionsDropOrKeepTheAxis) {
  EXPECT_EQ(out_type("  o = sum(x)\n  output o\n"), "f32[2, 6]");
  EXPECT_EQ(out_type("  o = mean(x, axis=1)\n  output o\n"), "f32[2, 8]");
  EXPECT_EQ(out_type("  o = max(x, axis=-3, keepdim=true)\n  output o\n"), "f32[1, 6, 8]");
  EXPECT_EQ(out_type("  o = sum(w, keepdim=true)\n  output o\n"), "f32[1]");
}

TEST(TransformerOps, NormsKeepTheShape) {
  EXPECT_EQ(out_type("  o = rms_norm(x, w)\n  output o\n"), "f32[2, 6, 8]");
  EXPECT_EQ(out_type("  o = layer_norm(add(x, y), w, b, eps=1e-3)\n  output o\n"),
            "f32[2, 6, 8]");
}

TEST(TransformerOps, LayoutOpsInferTheirShapes) {
  EXPECT_EQ(out_type("  o = reshape(x, shape=[12, -1])\n  output o\n"), "f32[12, 8]");
  EXPECT_EQ(out_type("  o = reshape(x, shape=[2, 6, 2, 4])\n  output o\n"), "f32[2, 6, 2, 4]");
  EXPECT_EQ(out_type("  o = permute(x, dims=[2, 0, 1])\n  output o\n"), "f32[8, 2, 6]");
  EXPECT_EQ(out_type("  o = permute(x, dims=[-1, 0, 1])\n  output o\n"), "f32[8, 2, 6]");
  EXPECT_EQ(out_type("  o = slice(x, axis=1, start=1, end=4)\n  output o\n"), "f32[2, 3, 8]");
  EXPECT_EQ(out_type("  o = slice(x, start=-3, end=-1)\n  output o\n"), "f32[2, 6, 2]");
  EXPECT_EQ(out_type("  o = concat(x, y, x, axis=1)\n  output o\n"), "f32[2, 18, 8]");
  EXPECT_EQ(out_type("  o = concat(slice(x, start=0, end=3), x)\n  output o\n"),
            "f32[2, 6, 11]");
}

// Rank 0 (`f32[]`, one element): an input, an output, a reduction's result over the only axis,
// a reshape to and from `[]`, an expand from it, broadcasting and an embedding of one id.
TEST(TransformerOps, ScalarsAreTensorsOfRankZero) {
  Graph g = parse_ok("graph g {\n  input s: f32[]\n  input x: f32[2, 3]\n  input id: i64[]\n"
                     "  input table: f32[5, 4]\n"
                     "  total = sum(sum(x))\n  scaled = mul(x, s)\n"
                     "  back = reshape(reshape(total, shape=[1, 1]), shape=[])\n"
                     "  wide = expand(s, shape=[2, 3])\n  row = embedding(table, id)\n"
                     "  both = add(s, back)\n  output total, scaled, both, wide, row\n}\n");
  std::vector<std::string> types;
  for (NodeId out : g.outputs()) types.push_back(to_string(g.node(out).type));
  EXPECT_EQ(types, (std::vector<std::string>{"f32[]", "f32[2, 3]", "f32[]", "f32[2, 3]", "f32[4]"}));
  EXPECT_EQ(to_string(g.node(g.inputs()[0]).type), "f32[]");
  std::string printed = print_graph(g);
  EXPECT_NE(printed.find("input s: f32[]"), std::string::npos) << printed;
  EXPECT_NE(printed.find(", shape=[])"), std::string::npos) << printed;
  auto again = parse_graph(printed, "printed.kg");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(graph_hash(*again), graph_hash(g));
  // A scalar input's hash differs from a one-element vector's.
  Graph one = parse_ok("graph g {\n  input s: f32[1]\n  o = neg(s)\n  output o\n}\n");
  Graph zero = parse_ok("graph g {\n  input s: f32[]\n  o = neg(s)\n  output o\n}\n");
  EXPECT_NE(graph_hash(one), graph_hash(zero));
}

TEST(TransformerOps, ElementwiseAdditions) {
  EXPECT_EQ(out_type("  o = pow(sqrt(abs(x)), 3.0)\n  output o\n"), "f32[2, 6, 8]");
  EXPECT_EQ(out_type("  o = maximum(rsqrt(abs(x)), minimum(w, 0.5))\n  output o\n"),
            "f32[2, 6, 8]");
}

TEST(TransformerOps, MatmulTakesFourDimsAndBroadcastsBatches) {
  std::string g = "graph g {\n  input q: f32[2, 4, 16, 8]\n  input k: f32[2, 1, 16, 8]\n"
                  "  input w: f32[8, 5]\n  input v: f32[4, 16, 8]\n"
                  "  s = matmul(q, k, transpose_b=true)\n  p = matmul(q, w)\n"
                  "  r = matmul(v, q, transpose_b=true)\n  output s, p, r\n}\n";
  Graph graph = parse_ok(g);
  EXPECT_EQ(to_string(graph.node(graph.outputs()[0]).type), "f32[2, 4, 16, 16]");
  EXPECT_EQ(to_string(graph.node(graph.outputs()[1]).type), "f32[2, 4, 16, 5]");
  EXPECT_EQ(to_string(graph.node(graph.outputs()[2]).type), "f32[2, 4, 16, 16]");
  auto bad = parse_graph("graph g {\n  input q: f32[2, 4, 16, 8]\n  input k: f32[3, 4, 8, 16]\n"
                         "  s = matmul(q, k)\n  output s\n}\n", "bad.kg");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("bad.kg:4:7: error: matmul batch dimensions differ"),
            std::string::npos) << bad.error().message;
}

// Up to 4 batch dims (rank 6), broadcasting in any pattern, for matmul and attention alike.
TEST(TransformerOps, MatmulAndAttentionTakeSixDims) {
  Graph graph = parse_ok("graph g {\n  input a: f32[2, 1, 3, 1, 9, 12]\n"
                         "  input b: f32[4, 1, 5, 12, 10]\n  input q: f32[2, 3, 2, 4, 7, 16]\n"
                         "  input k: f32[3, 1, 2, 11, 16]\n  input v: f32[2, 11, 8]\n"
                         "  c = matmul(a, b)\n  o = attention(q, k, v, causal=true)\n"
                         "  output c, o\n}\n");
  EXPECT_EQ(to_string(graph.node(graph.outputs()[0]).type), "f32[2, 4, 3, 5, 9, 10]");
  EXPECT_EQ(to_string(graph.node(graph.outputs()[1]).type), "f32[2, 3, 2, 4, 7, 8]");
  auto bad = parse_graph("graph g {\n  input a: f32[12]\n  input b: f32[12, 4]\n"
                         "  c = matmul(a, b)\n  output c\n}\n", "bad.kg");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("matmul takes 2-D to 6-D operands"), std::string::npos)
      << bad.error().message;
}

struct BadOp {
  const char* name;
  const char* body;
  const char* says;
};

class TransformerOpError : public ::testing::TestWithParam<BadOp> {};

TEST_P(TransformerOpError, IsLocatedAndExplained) {
  const BadOp& bad = GetParam();
  std::string message = error_of(bad.body);
  EXPECT_EQ(message.rfind("bad.kg:6:", 0), 0u) << message;
  EXPECT_NE(message.find(bad.says), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Ops, TransformerOpError,
    ::testing::Values(
        BadOp{"ReduceAxis", "  o = sum(x, axis=3)\n  output o\n", "sum axis 3 is out of range"},
        BadOp{"ReduceOfAScalar", "  o = mean(mean(w))\n  output o\n",
              "mean axis -1 is out of range for mean result (f32[]) (rank 0)"},
        BadOp{"NormOfAScalar", "  o = rms_norm(mean(w), w)\n  output o\n",
              "rms_norm normalises x's last dimension; mean result (f32[]) has none (rank 0)"},
        BadOp{"ReduceKeepdim", "  o = max(x, keepdim=2)\n  output o\n", "true or false"},
        BadOp{"NormWeight", "  o = rms_norm(x, y)\n  output o\n",
              "weight must be 1-D of x's last dimension 8"},
        BadOp{"NormBias", "  o = layer_norm(x, w, y)\n  output o\n", "bias must be 1-D"},
        BadOp{"NormArity", "  o = layer_norm(x, w)\n  output o\n", "takes 3 operands"},
        BadOp{"NormEps", "  o = rms_norm(x, w, eps=0.0)\n  output o\n", "a positive number"},
        BadOp{"ReshapeCount", "  o = reshape(x, shape=[5, 8])\n  output o\n",
              "changes the element count (96 to 40)"},
        BadOp{"ReshapeInfer", "  o = reshape(x, shape=[5, -1])\n  output o\n",
              "cannot infer dim 1"},
        BadOp{"ReshapeTwoInferred", "  o = reshape(x, shape=[-1, -1])\n  output o\n",
              "one dim (-1), not two"},
        BadOp{"ReshapeZero", "  o = reshape(x, shape=[0, 8])\n  output o\n", "at least 1"},
        BadOp{"ReshapeNoShape", "  o = reshape(x)\n  output o\n", "needs a shape"},
        BadOp{"ReshapeNotAList", "  o = reshape(x, shape=8)\n  output o\n",
              "expected a list of dims"},
        BadOp{"ReshapeUnknownDim", "  o = reshape(x, shape=[B, 8])\n  output o\n",
              "'B' is not a declared dim"},
        BadOp{"PermuteRepeats", "  o = permute(x, dims=[0, 1, 1])\n  output o\n",
              "not a permutation of 0..2: dim 1 appears twice"},
        BadOp{"PermuteCount", "  o = permute(x, dims=[1, 0])\n  output o\n", "needs 3 dims"},
        BadOp{"PermuteRange", "  o = permute(x, dims=[0, 1, 3])\n  output o\n",
              "permute dim 3 is out of range"},
        BadOp{"SliceRange", "  o = slice(x, axis=1, start=2, end=9)\n  output o\n",
              "is empty or out of range"},
        BadOp{"SliceEmpty", "  o = slice(x, start=3, end=3)\n  output o\n", "empty"},
        BadOp{"SliceNoEnd", "  o = slice(x, start=3)\n  output o\n", "needs start and end"},
        BadOp{"SliceAxis", "  o = slice(x, axis=3, start=0, end=1)\n  output o\n",
              "slice axis 3 is out of range"},
        BadOp{"SliceAxisNumber", "  o = slice(x, axis=9, start=0, end=1)\n  output o\n",
              "expected an integer axis"},
        BadOp{"ConcatShape", "  o = concat(x, slice(y, axis=1, start=0, end=2))\n  output o\n",
              "concat operands differ in dim 1"},
        BadOp{"ConcatRank", "  o = concat(x, w)\n  output o\n", "differ in rank"},
        BadOp{"ConcatDtype", "  o = concat(x, cast(y, to=bf16))\n  output o\n",
              "differ in dtype"},
        BadOp{"ListTooLong",
              "  o = permute(x, dims=[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16])\n  output o\n",
              "more than 16 items"},
        BadOp{"ListItem", "  o = permute(x, dims=[0, (])\n  output o\n", "a number or a dim name"},
        BadOp{"UnknownArg", "  o = slice(x, begin=0, end=1)\n  output o\n",
              "expected axis, start or end"}),
    [](const ::testing::TestParamInfo<BadOp>& info) { return std::string(info.param.name); });

TEST(TransformerOps, SymbolicDimsFlowThroughReshapeAndPermute) {
  Graph g = parse_ok(
      "graph g {\n  dim B: 1..8\n  dim S: 1..64\n  input x: f32[B, S, 32]\n  input w: f32[32]\n"
      "  h = reshape(rms_norm(x, w), shape=[B, S, 4, 8])\n  p = permute(h, dims=[0, 2, 1, 3])\n"
      "  o = sum(p, axis=-1)\n  output o\n}\n");
  EXPECT_EQ(to_string(g.node(g.outputs()[0]).type), "f32[B, 4, S]");
  auto bad = parse_graph(
      "graph g {\n  dim B: 1..8\n  input x: f32[B, 32]\n  o = reshape(x, shape=[-1])\n"
      "  output o\n}\n", "bad.kg");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("must keep its symbolic dims"), std::string::npos)
      << bad.error().message;
  // Along a symbolic dim, a window every size of its range holds (0 <= start < end <= lo).
  Graph first = parse_ok(
      "graph g {\n  dim B: 2..8\n  input x: f32[B, 32]\n  o = slice(x, axis=0, start=1, end=2)\n"
      "  output o\n}\n");
  EXPECT_EQ(to_string(first.node(first.outputs()[0]).type), "f32[1, 32]");
  for (const char* window : {"start=0, end=3", "start=-1, end=2", "start=0, end=-1"}) {
    auto slice = parse_graph("graph g {\n  dim B: 2..8\n  input x: f32[B, 32]\n  o = slice(x, axis=0, " +
                                 std::string(window) + ")\n  output o\n}\n",
                             "bad.kg");
    ASSERT_FALSE(slice) << window;
    EXPECT_NE(slice.error().message.find("along the symbolic dim B of 'x' (f32[B, 32]): along a "
                                         "symbolic dim kiln slices a constant window of indices, "
                                         "0 <= start < end <= 2 (B's smallest size)"),
              std::string::npos)
        << slice.error().message;
  }
}

// A reshape of a symbolic shape that changes its element count names the dims as written: a
// symbolic dim's entry holds only its upper bound, which is not its size.
TEST(TransformerOps, ASymbolicReshapeErrorNamesTheDimsNotTheirBounds) {
  auto bad = parse_graph(
      "graph g {\n  dim B: 1..4096\n  input x: f32[B, 12]\n  o = reshape(x, shape=[B, 5])\n"
      "  output o\n}\n", "bad.kg");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "bad.kg:4:7: error: reshape of 'x' (f32[B, 12]) to [B, 5] changes the element count "
            "(B * 12 to B * 5)");
  auto two = parse_graph(
      "graph g {\n  dim B: 1..8\n  dim S: 1..64\n  input x: f32[B, S, 32]\n"
      "  o = reshape(x, shape=[S, B, 4, 7])\n  output o\n}\n", "bad.kg");
  ASSERT_FALSE(two);
  EXPECT_NE(two.error().message.find("to [S, B, 4, 7] changes the element count (B * S * 32 to "
                                     "B * S * 28)"),
            std::string::npos)
      << two.error().message;
}

// Every new op prints back to the same graph (text and hash) and round-trips through the
// canonical bytes.
TEST(TransformerOps, PrintParseAndCanonicalRoundTrip) {
  std::string text = wrap(
      "  n = rms_norm(x, w, eps=1e-5)\n  l = layer_norm(add(x, y), w, b)\n"
      "  s = sum(mul(n, n), axis=1, keepdim=true)\n  m = mean(l, axis=0)\n  mx = max(l)\n"
      "  r = reshape(l, shape=[2, 6, 2, 4])\n  p = permute(r, dims=[0, 2, 1, 3])\n"
      "  c = concat(neg(slice(p, start=2, end=4)), slice(p, start=0, end=2))\n"
      "  e = maximum(pow(sqrt(abs(c)), 2.0), minimum(rsqrt(add(abs(c), 1.0)), c))\n"
      "  mm = matmul(e, p, transpose_b=true)\n  output s, m, mx, mm\n");
  Graph g = parse_ok(text);
  std::string printed = print_graph(g);
  Graph again = parse_ok(printed);
  EXPECT_EQ(print_graph(again), printed);
  EXPECT_EQ(graph_hash(again), graph_hash(g));
  auto back = graph_from_canonical(canonical_bytes(g), "g");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(canonical_bytes(*back), canonical_bytes(g));
}

// Every attribute enters the hash.
TEST(TransformerOps, EveryAttributeChangesTheHash) {
  const char* variants[][2] = {
      {"  o = sum(x, axis=1)\n", "  o = sum(x, axis=2)\n"},
      {"  o = sum(x, axis=1)\n", "  o = mean(x, axis=1)\n"},
      {"  o = max(x, keepdim=true)\n", "  o = max(x)\n"},
      {"  o = rms_norm(x, w)\n", "  o = rms_norm(x, w, eps=1e-5)\n"},
      {"  o = layer_norm(x, w, b)\n", "  o = layer_norm(x, b, w)\n"},
      {"  o = reshape(x, shape=[12, 8])\n", "  o = reshape(x, shape=[8, 12])\n"},
      {"  o = permute(x, dims=[0, 2, 1])\n", "  o = permute(x, dims=[1, 0, 2])\n"},
      {"  o = slice(x, start=0, end=4)\n", "  o = slice(x, start=1, end=5)\n"},
      {"  o = concat(x, y)\n", "  o = concat(y, x)\n"},
      {"  o = concat(x, y, axis=1)\n", "  o = concat(x, y, axis=0)\n"},
      {"  o = pow(x, 2.0)\n", "  o = pow(x, 3.0)\n"},
      {"  o = maximum(x, y)\n", "  o = minimum(x, y)\n"},
      {"  o = sqrt(x)\n", "  o = rsqrt(x)\n"},
  };
  for (const auto& v : variants) {
    Graph a = parse_ok(wrap(std::string(v[0]) + "  output o\n"));
    Graph b = parse_ok(wrap(std::string(v[1]) + "  output o\n"));
    EXPECT_NE(graph_hash(a), graph_hash(b)) << v[0] << " vs " << v[1];
  }
}

}  // namespace
}  // namespace kiln::ir::transformer_ops_test
