// Symbolic dimensions: declaration errors, shape inference, canonical numbering, hash, bind and
// reading values from input shapes.
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::ir::symbolic_test {
namespace {

const char* k_mlp = R"(graph mlp {
  dim B: 1..64          # batch
  dim S: 1..2048
  input x: f32[B, S, 768]
  input w: f32[768, 3072]
  y = gelu(matmul(x, w))
  output y
}
)";

Graph parse_ok(const std::string& text) {
  auto graph = parse_graph(text, "g.kg");
  EXPECT_TRUE(graph) << graph.error().message;
  return *graph;
}

std::string error_of(const std::string& text) {
  auto graph = parse_graph(text, "bad.kg");
  EXPECT_FALSE(graph) << "parsed: " << text;
  return graph ? "" : graph.error().message;
}

TEST(Symbolic, ShapesCarrySymbolsThroughMatmulAndEpilogue) {
  Graph g = parse_ok(k_mlp);
  ASSERT_EQ(g.symbols().size(), 2u);
  EXPECT_EQ(g.symbols()[0].name, "B");
  EXPECT_EQ(g.symbols()[0].hi, 64);
  const Node& y = g.node(g.outputs()[0]);
  EXPECT_EQ(to_string(y.type), "f32[B, S, 3072]");
  EXPECT_EQ(y.type.shape.symbol(0), 0);
  EXPECT_EQ(y.type.shape.symbol(1), 1);
  EXPECT_EQ(y.type.shape.symbol(2), -1);
  // Sizes at the upper bounds, so byte counts are the most a buffer can need.
  EXPECT_EQ(y.type.shape.elements(), 64 * 2048 * 3072);
}

TEST(Symbolic, PrintsAndParsesBackToTheSameGraph) {
  Graph g = parse_ok(k_mlp);
  std::string printed = print_graph(g);
  EXPECT_NE(printed.find("  dim B: 1..64\n  dim S: 1..2048\n"), std::string::npos) << printed;
  Graph again = parse_ok(printed);
  EXPECT_EQ(print_graph(again), printed);
  EXPECT_EQ(graph_hash(again), graph_hash(g));
}

TEST(Symbolic, RenamingOrReorderingDimsKeepsTheHashAndARangeChangesIt) {
  Hash128 h = graph_hash(parse_ok(k_mlp));
  std::string renamed = k_mlp;
  for (size_t at; (at = renamed.find("B")) != std::string::npos;) renamed.replace(at, 1, "N");
  EXPECT_EQ(graph_hash(parse_ok(renamed)), h);
  Graph r = parse_ok(
      "graph mlp {\n  dim S: 1..2048\n  dim B: 1..64\n  input x: f32[B, S, 768]\n"
      "  input w: f32[768, 3072]\n  y = gelu(matmul(x, w))\n  output y\n}\n");
  EXPECT_EQ(graph_hash(r), h);
  std::string narrower = k_mlp;
  narrower.replace(narrower.find("1..64"), 5, "1..32");
  EXPECT_NE(graph_hash(parse_ok(narrower)), h);
  std::string wider = k_mlp;
  wider.replace(wider.find("1..2048"), 7, "2..2048");
  EXPECT_NE(graph_hash(parse_ok(wider)), h);
}

TEST(Symbolic, SymbolsAreNumberedByFirstUse) {
  Graph g = parse_ok(
      "graph g {\n  dim S: 1..8\n  dim B: 1..4\n  input x: f32[B, S]\n  y = softmax(x)\n"
      "  output y\n}\n");
  ASSERT_EQ(g.symbols().size(), 2u);
  EXPECT_EQ(g.symbols()[0].name, "B");
  EXPECT_EQ(g.symbols()[1].name, "S");
  EXPECT_EQ(g.node(g.inputs()[0]).type.shape.symbol(0), 0);
}

TEST(Symbolic, StaticGraphsKeepTheirCanonicalFormat) {
  Graph g = parse_ok("graph g {\n  input x: f32[4, 8]\n  y = relu(x)\n  output y\n}\n");
  std::string bytes = canonical_bytes(g);
  EXPECT_EQ(bytes.substr(10, 4), std::string("\x01\x00\x00\x00", 4));
  Graph s = parse_ok(k_mlp);
  EXPECT_EQ(canonical_bytes(s).substr(10, 4), std::string("\x02\x00\x00\x00", 4));
}

TEST(Symbolic, CanonicalBytesRoundTrip) {
  Graph g = parse_ok(k_mlp);
  auto back = graph_from_canonical(canonical_bytes(g), "mlp");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(canonical_bytes(*back), canonical_bytes(g));
  EXPECT_EQ(to_string(back->node(back->outputs()[0]).type), "f32[D0, D1, 3072]");
}

struct BadDims {
  const char* name;
  std::string body;
  const char* at;
  const char* says;
};

class SymbolicError : public ::testing::TestWithParam<BadDims> {};

TEST_P(SymbolicError, IsLocatedAndExplained) {
  std::string message = error_of(GetParam().body);
  EXPECT_EQ(message.rfind(std::string("bad.kg:") + GetParam().at + ": error: ", 0), 0u) << message;
  EXPECT_NE(message.find(GetParam().says), std::string::npos) << message;
}

std::string graph_with(const std::string& dims, const std::string& shape = "[B, 4]",
                       const std::string& body = "  y = relu(x)\n  output y\n") {
  return "graph g {\n" + dims + "  input x: f32" + shape + "\n" + body + "}\n";
}

const BadDims k_bad_dims[] = {
    {"Undeclared", graph_with(""), "2:16", "undeclared dim 'B'"},
    {"Unused", graph_with("  dim B: 1..8\n  dim C: 1..8\n"), "3:7", "dim 'C' is never used"},
    {"Redeclared", graph_with("  dim B: 1..8\n  dim B: 1..4\n"), "3:7", "already declared at 2:7"},
    {"Inverted", graph_with("  dim B: 8..4\n"), "2:10", "inverted range 8..4"},
    {"Zero", graph_with("  dim B: 0..4\n"), "2:10", "at least 1"},
    {"TooLarge", graph_with("  dim B: 1..2147483648\n"), "2:10", "2^31 - 1"},
    {"FarTooLarge", graph_with("  dim B: 1..99999999999999999999\n"), "2:10",
     "99999999999999999999 is above kiln's limit of 2^31 - 1"},
    {"NotARange", graph_with("  dim B: 4\n"), "2:10", "expected a range LO..HI"},
    {"NoUpperBound", graph_with("  dim B: 4..\n"), "2:10", "expected a range LO..HI"},
    {"AfterAnInput",
     "graph g {\n  input w: f32[4]\n  dim B: 1..8\n  input x: f32[B, 4]\n  y = relu(x)\n"
     "  output y, \n}\n",
     "3:3", "declare dims before the inputs"},
    {"AgainstAnotherSymbol",
     graph_with("  dim B: 1..8\n  dim S: 1..8\n", "[B, 4]",
                "  input z: f32[S, 4]\n  y = add(x, z)\n  output y\n"),
     "6:7", "B against S; a symbolic dimension matches only itself or 1"},
    {"AgainstAConstant",
     graph_with("  dim B: 1..8\n", "[B, 4]", "  input z: f32[8, 4]\n  y = add(x, z)\n  output y\n"),
     "5:7", "B against 8"},
    {"MatmulInnerDims",
     graph_with("  dim K: 1..8\n", "[3, K]", "  input w: f32[8, 5]\n  y = matmul(x, w)\n  output y\n"),
     "5:7", "has k = K"},
    {"OverflowAtTheUpperBound", graph_with("  dim B: 1..4096\n  dim S: 1..2048\n", "[B, S, 768]"),
     "4:15", "at its dims' upper bounds (B = 4096, S = 2048)"},
};

INSTANTIATE_TEST_SUITE_P(Dims, SymbolicError, ::testing::ValuesIn(k_bad_dims),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Symbolic, ASymbolBroadcastsAgainstOne) {
  Graph g = parse_ok(graph_with("  dim B: 1..8\n", "[B, 4]",
                                "  input b: f32[1, 4]\n  y = add(x, b)\n  output y\n"));
  EXPECT_EQ(to_string(g.node(g.outputs()[0]).type), "f32[B, 4]");
}

TEST(Symbolic, ASymbolMayBeTheContractionAndTheSoftmaxAxis) {
  Graph g = parse_ok(graph_with("  dim K: 1..300\n", "[3, K]",
                                "  input w: f32[K, 5]\n  s = softmax(x)\n  y = matmul(s, w)\n"
                                "  output y\n"));
  EXPECT_EQ(to_string(g.node(g.outputs()[0]).type), "f32[3, 5]");
}

TEST(Symbolic, BindGivesTheStaticGraphWithTheValuesWrittenIn) {
  Graph g = parse_ok(k_mlp);
  auto bound = g.bind({37, 100});
  ASSERT_TRUE(bound) << bound.error().message;
  EXPECT_FALSE(bound->symbolic());
  std::string written = k_mlp;
  written.replace(written.find("  dim B: 1..64          # batch\n"), 31, "");
  written.replace(written.find("  dim S: 1..2048\n"), 17, "");
  written.replace(written.find("[B, S, 768]"), 11, "[37, 100, 768]");
  EXPECT_EQ(graph_hash(*bound), graph_hash(parse_ok(written)));
  EXPECT_EQ(bound->node(bound->outputs()[0]).type.shape.dims(),
            (std::vector<int64_t>{37, 100, 3072}));
  auto outside = g.bind({65, 1});
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().message, "B = 65 is outside its range 1..64");
  EXPECT_FALSE(g.bind({1}));
}

TEST(Symbolic, ValuesComeFromTheInputShapes) {
  Graph g = parse_ok(graph_with("  dim B: 1..64\n  dim S: 2..9\n", "[B, S, 4]",
                                "  input z: f32[B, 4]\n  y = relu(x)\n  u = relu(z)\n"
                                "  output y, u\n"));
  auto values = g.symbol_values({{37, 5, 4}, {37, 4}});
  ASSERT_TRUE(values) << values.error().message;
  EXPECT_EQ(*values, (std::vector<int64_t>{37, 5}));
  auto inconsistent = g.symbol_values({{37, 5, 4}, {38, 4}});
  ASSERT_FALSE(inconsistent);
  EXPECT_EQ(inconsistent.error().message,
            "input 'z' dim 0 gives B = 38, but input 'x' dim 0 gives B = 37");
  auto outside = g.symbol_values({{37, 10, 4}, {37, 4}});
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().message, "input 'x' dim 1: S = 10 is outside its range 2..9");
  auto constant = g.symbol_values({{37, 5, 3}, {37, 4}});
  ASSERT_FALSE(constant);
  EXPECT_NE(constant.error().message.find("input 'x' dim 2 must be 4, got 3"), std::string::npos);
  EXPECT_FALSE(g.symbol_values({{37, 5}, {37, 4}}));
  EXPECT_FALSE(g.symbol_values({{37, 5, 4}}));
}

TEST(Symbolic, AValueMayStillBeNamedDim) {
  Graph g = parse_ok("graph g {\n  input x: f32[4]\n  dim = relu(x)\n  output dim\n}\n");
  EXPECT_FALSE(g.symbolic());
}

}  // namespace
}  // namespace kiln::ir::symbolic_test
