// Tests of the canonical printer: exact form, idempotence, and round trips of random graphs.
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "random_graph.h"

#include <gtest/gtest.h>

#include <bit>
#include <filesystem>
#include <set>

namespace kiln::ir {
namespace {

Graph parse_ok(const std::string& text) {
  auto graph = parse_graph(text, "t.kg");
  EXPECT_TRUE(graph) << graph.error().message;
  return std::move(graph).value();
}

TEST(Print, CanonicalFormDropsCommentsDefaultsAndSpacing) {
  Graph g = parse_ok(R"(# header
graph  attn{input q:f32[2,8,4];input k :f32[2, 8, 4]   # keys
  s=softmax( mul(matmul(q,k,transpose_a=false,transpose_b=true),0.5),axis=-1 )
  c = cast(s, to=bf16) output c,s }
)");
  EXPECT_EQ(print_graph(g),
            "graph attn {\n"
            "  input q: f32[2, 8, 4]\n"
            "  input k: f32[2, 8, 4]\n"
            "  s = softmax(mul(matmul(q, k, transpose_b=true), 0.5))\n"
            "  c = cast(s, to=bf16)\n"
            "  output c, s\n"
            "}\n");
}

// state_dict names: dot-joined segments, a later one may start with a digit.
TEST(Print, DottedNamesParsePrintAndHashAsWritten) {
  const char* text = R"(graph g {
  input model.layers.0.self_attn.q_proj.weight: f32[8, 8]
  input x: f32[2, 8]
  model.layers.0.out = matmul(x, model.layers.0.self_attn.q_proj.weight, transpose_b=true)
  output model.layers.0.out
}
)";
  auto graph = parse_graph(text, "dotted.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  EXPECT_EQ(graph->node(graph->inputs()[0]).name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(graph->node(graph->outputs()[0]).name, "model.layers.0.out");
  std::string printed = print_graph(*graph);
  EXPECT_NE(printed.find("input model.layers.0.self_attn.q_proj.weight: f32[8, 8]"),
            std::string::npos)
      << printed;
  auto again = parse_graph(printed, "printed.kg");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(print_graph(*again), printed);
  EXPECT_EQ(graph_hash(*again), graph_hash(*graph));
  // A dot joins segments only: "1..4096" in a dim range and numbers like ".5" read as before.
  auto numbers = parse_graph(
      "graph h {\n  dim B: 1..64\n  input x: f32[B, 4]\n  y = mul(x, .5)\n  output y\n}\n",
      "h.kg");
  ASSERT_TRUE(numbers) << numbers.error().message;
}

TEST(Print, KeepsNonDefaultAttributes) {
  Graph g = parse_ok(
      "graph g { input a: f32[3, 4, 5]\n input b: f32[4, 6]\n"
      " y = softmax(matmul(a, b, transpose_a=true, precision=tf32x3), axis=1)\n"
      " z = sub(2, y)\n output z }");
  EXPECT_EQ(print_expr(g, g.outputs()[0]), "sub(2.0, y)");
  EXPECT_NE(print_graph(g).find("softmax(matmul(a, b, transpose_a=true, precision=tf32x3), "
                                "axis=1)"),
            std::string::npos);
}

TEST(Print, LiteralsRoundTripExactly) {
  for (const char* literal : {"0.1", "-3.5e-12", "1e+20", "2", "-0.0", "123456789.125"}) {
    Graph g = parse_ok(std::string("graph g { input x: f32[2]\n y = mul(x, ") + literal +
                       ")\n output y }");
    Graph again = parse_ok(print_graph(g));
    EXPECT_EQ(std::bit_cast<uint64_t>(again.node(again.outputs()[0]).attrs.literal),
              std::bit_cast<uint64_t>(g.node(g.outputs()[0]).attrs.literal))
        << literal;
  }
}

TEST(Print, ExampleGraphsAreIdempotent) {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(KILN_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".kg") continue;
    auto graph = parse_graph_file(entry.path().string());
    ASSERT_TRUE(graph) << graph.error().message;
    std::string once = print_graph(*graph);
    Graph reparsed = parse_ok(once);
    EXPECT_EQ(print_graph(reparsed), once) << entry.path();
    EXPECT_EQ(graph_hash(reparsed), graph_hash(*graph)) << entry.path();
    ++seen;
  }
  EXPECT_GE(seen, 4);
}

TEST(Print, RandomGraphsRoundTripThroughText) {
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    Graph g = testing::random_graph(seed);
    std::string once = print_graph(g);
    auto reparsed = parse_graph(once, "random.kg");
    ASSERT_TRUE(reparsed) << "seed " << seed << ": " << reparsed.error().message << "\n" << once;
    EXPECT_EQ(print_graph(*reparsed), once) << "seed " << seed;
    EXPECT_EQ(graph_hash(*reparsed), graph_hash(g)) << "seed " << seed << "\n" << once;
    EXPECT_EQ(canonical_bytes(*reparsed), canonical_bytes(g)) << "seed " << seed;
  }
}

TEST(Print, RandomGeneratorCoversEveryOpKind) {
  std::set<OpKind> kinds;
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    Graph g = testing::random_graph(seed);
    for (const Node& n : g.nodes()) kinds.insert(n.kind);
  }
  // input, matmul, 4 binary, 12 unary, cast, softmax; 6 comparisons, 3 logical ops, maximum and
  // minimum, where, arange, expand, embedding, cumsum, roll, floor_divide and remainder: every
  // kind the generator writes.
  EXPECT_EQ(kinds.size(), 39u);
  for (OpKind kind : {OpKind::embedding, OpKind::cumsum, OpKind::roll, OpKind::floor_divide,
                      OpKind::remainder})
    EXPECT_TRUE(kinds.count(kind)) << to_string(kind);
}

}  // namespace
}  // namespace kiln::ir
