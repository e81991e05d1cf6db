// Tests of the op table (ir/ops.def): kind numbers pinned, the parser's arity and the printer's
// defaults taken from the table, and the generic Builder::add.
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kiln::ir {
namespace {

// The canonical bytes hash a kind as its number: a row moved or removed in ops.def would change
// every graph hash that uses it. New kinds are appended after these.
TEST(OpTable, EveryExistingKindKeepsItsNumber) {
  EXPECT_GE(k_op_kind_count, 31);
  const std::vector<std::pair<std::string, int>> pinned = {
      {"input", 0},       {"matmul", 1},   {"add", 2},          {"sub", 3},
      {"mul", 4},         {"div", 5},      {"relu", 6},         {"gelu", 7},
      {"silu", 8},        {"sigmoid", 9},  {"tanh", 10},        {"exp", 11},
      {"neg", 12},        {"cast", 13},    {"softmax", 14},     {"sqrt", 15},
      {"rsqrt", 16},      {"abs", 17},     {"pow", 18},         {"maximum", 19},
      {"minimum", 20},    {"sum", 21},     {"mean", 22},        {"max", 23},
      {"rms_norm", 24},   {"layer_norm", 25}, {"reshape", 26},  {"permute", 27},
      {"slice", 28},      {"concat", 29},  {"attention", 30}};
  for (const auto& [name, number] : pinned) {
    auto kind = parse_op_kind(name);
    ASSERT_TRUE(kind) << name;
    EXPECT_EQ(static_cast<int>(*kind), number) << name;
    EXPECT_EQ(to_string(static_cast<OpKind>(number)), name);
  }
}

TEST(OpTable, OperandCountsAreConsistentAndReachTheParser) {
  for (int i = 0; i < k_op_kind_count; ++i) {
    auto kind = static_cast<OpKind>(i);
    std::string name(to_string(kind));
    // gelu_tanh is written gelu(x, approximate="tanh"): its text name is gelu's.
    EXPECT_EQ(parse_op_kind(name), kind == OpKind::gelu_tanh ? OpKind::gelu : kind) << name;
    EXPECT_LE(min_operands(kind), max_operands(kind)) << name;
    // Only an input and arange (whose size is not a tensor) take no operand.
    EXPECT_EQ(min_operands(kind) == 0,
              category(kind) == OpCategory::input || category(kind) == OpCategory::arange)
        << name;
  }
  // The parser's counts and messages come from the table.
  auto three = parse_graph("graph g {\n  input x: f32[4, 8]\n  y = relu(x, x)\n  output y\n}\n",
                           "g.kg");
  ASSERT_FALSE(three);
  EXPECT_NE(three.error().message.find("relu takes 1 operand, got 2"), std::string::npos)
      << three.error().message;
  auto norm = parse_graph(
      "graph g {\n  input x: f32[4, 8]\n  input w: f32[8]\n  y = layer_norm(x, w)\n"
      "  output y\n}\n",
      "g.kg");
  ASSERT_FALSE(norm);
  EXPECT_NE(norm.error().message.find("layer_norm takes 3 operands, got 2"), std::string::npos)
      << norm.error().message;
  auto unknown = parse_graph("graph g {\n  input x: f32[4]\n  y = frob(x)\n  output y\n}\n",
                             "g.kg");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("expected one of matmul, add, sub"), std::string::npos);
  EXPECT_NE(unknown.error().message.find(", attention, cos, sin, erf, log, eq, ne, lt, le, gt, ge, "
                                         "logical_and, logical_or, logical_not, where, arange, embedding, expand, cumsum, "
                                         "roll, floor_divide or remainder"),
            std::string::npos)
      << unknown.error().message;
  EXPECT_EQ(unknown.error().message.find("input"), std::string::npos) << unknown.error().message;
}

TEST(OpTable, CosAndSinAreUnaryOpsThatParsePrintAndHash) {
  const char* text = "graph g {\n  input t: f32[4, 8]\n  y = add(cos(t), sin(t))\n  output y\n}\n";
  auto g = parse_graph(text, "g.kg");
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(category(OpKind::cos), OpCategory::unary);
  EXPECT_EQ(fusion_class(OpKind::sin), FusionClass::pointwise);
  EXPECT_EQ(print_graph(*g), text);
  auto swapped = parse_graph(
      "graph g {\n  input t: f32[4, 8]\n  y = add(sin(t), cos(t))\n  output y\n}\n", "g.kg");
  ASSERT_TRUE(swapped);
  EXPECT_NE(graph_hash(*g).hex(), graph_hash(*swapped).hex());
  auto back = graph_from_canonical(canonical_bytes(*g), "g");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(canonical_bytes(*back), canonical_bytes(*g));
  auto bad = parse_graph("graph g {\n  input t: f32[4]\n  y = cos(t, t)\n  output y\n}\n", "g.kg");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("cos takes 1 operand, got 2"), std::string::npos);
}

TEST(OpTable, ErfLogAndTanhGeluParsePrintAndHash) {
  const char* text =
      "graph g {\n  input t: f32[4, 8]\n  y = add(erf(t), log(t))\n"
      "  z = mul(gelu(y, approximate=\"tanh\"), gelu(t))\n  output z\n}\n";
  auto g = parse_graph(text, "g.kg");
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(print_graph(*g), text);
  EXPECT_EQ(g->node(4).kind, OpKind::gelu_tanh);
  EXPECT_EQ(g->node(5).kind, OpKind::gelu);
  EXPECT_EQ(category(OpKind::gelu_tanh), OpCategory::unary);
  EXPECT_EQ(fusion_class(OpKind::log), FusionClass::pointwise);
  // The new kinds come after every pinned one; approximate="none" is the plain gelu, hash and all.
  EXPECT_EQ(static_cast<int>(OpKind::erf), 33);
  EXPECT_EQ(static_cast<int>(OpKind::log), 34);
  EXPECT_EQ(static_cast<int>(OpKind::gelu_tanh), 35);
  auto plain = parse_graph("graph g {\n  input t: f32[4]\n  y = gelu(t)\n  output y\n}\n", "g.kg");
  auto none = parse_graph(
      "graph g {\n  input t: f32[4]\n  y = gelu(t, approximate=\"none\")\n  output y\n}\n", "g.kg");
  auto tanh = parse_graph(
      "graph g {\n  input t: f32[4]\n  y = gelu(t, approximate=\"tanh\")\n  output y\n}\n", "g.kg");
  ASSERT_TRUE(plain && none && tanh);
  EXPECT_EQ(graph_hash(*plain).hex(), graph_hash(*none).hex());
  EXPECT_NE(graph_hash(*plain).hex(), graph_hash(*tanh).hex());
  EXPECT_EQ(print_graph(*none), print_graph(*plain));
  auto back = graph_from_canonical(canonical_bytes(*g), "g");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(canonical_bytes(*back), canonical_bytes(*g));
  EXPECT_EQ(print_graph(*back).find("approximate=\"tanh\"") != std::string::npos, true);
}

TEST(OpTable, GeluApproximateErrorsAreLocated) {
  struct Case {
    const char* call;
    const char* message;
  };
  const Case cases[] = {
      {"gelu(t, approximate=\"fast\")",
       "3:27: error: expected \"none\" or \"tanh\" for 'approximate', got string \"fast\""},
      {"gelu(t, approximate=tanh)", "expected \"none\" or \"tanh\" for 'approximate', got identifier"},
      {"gelu(t, approximate=\"tanh)", "3:27: error: expected a value for argument 'approximate', got "
                                     "unexpected character '\"' that opens a string not closed"},
      {"relu(t, approximate=\"tanh\")", "relu has no argument 'approximate'"},
      {"gelu(t, approx=\"tanh\")", "gelu has no argument 'approx'; expected approximate"},
      {"gelu_tanh(t)", "3:7: error: unknown op 'gelu_tanh'"},
      {"gelu(\"tanh\")", "3:12: error: expected a value name, a number or an op call"},
  };
  for (const Case& c : cases) {
    std::string text = "graph g {\n  input t: f32[4]\n  y = " + std::string(c.call) +
                       "\n  output y\n}\n";
    auto g = parse_graph(text, "g.kg");
    ASSERT_FALSE(g) << c.call;
    EXPECT_NE(g.error().message.find(c.message), std::string::npos)
        << c.call << ": " << g.error().message;
  }
}

TEST(OpTable, NormDefaultsComeFromTheTableInParserBuilderAndPrinter) {
  EXPECT_EQ(default_attrs(OpKind::rms_norm).eps, 1e-6);
  EXPECT_EQ(default_attrs(OpKind::layer_norm).eps, 1e-5);
  auto g = parse_graph(
      "graph g {\n  input x: f32[4, 8]\n  input w: f32[8]\n  input b: f32[8]\n"
      "  r = rms_norm(x, w)\n  l = layer_norm(r, w, b)\n  e = rms_norm(l, w, eps=0.001)\n"
      "  output e\n}\n",
      "g.kg");
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(g->node(3).attrs.eps, 1e-6);
  EXPECT_EQ(g->node(4).attrs.eps, 1e-5);
  std::string text = print_graph(*g);
  EXPECT_EQ(text.find("eps=1e-06"), std::string::npos) << text;
  EXPECT_EQ(text.find("eps=1e-05"), std::string::npos) << text;
  EXPECT_NE(text.find("eps=0.001"), std::string::npos) << text;
  Builder b("g");
  NodeId x = b.add_input("x", TensorType{DType::f32, Shape::make({4, 8}).value()}).value();
  NodeId w = b.add_input("w", TensorType{DType::f32, Shape::make({8}).value()}).value();
  EXPECT_EQ(b.node(b.add_rms_norm(x, w).value()).attrs.eps, 1e-6);
  // Builder::add from default_attrs: the text's defaults (axis -1 is the last).
  auto norm = b.add(OpKind::rms_norm, {x, w}, default_attrs(OpKind::rms_norm));
  ASSERT_TRUE(norm) << norm.error().message;
  EXPECT_EQ(b.node(*norm).attrs.eps, 1e-6);
  auto total = b.add(OpKind::sum, {x}, default_attrs(OpKind::sum));
  ASSERT_TRUE(total) << total.error().message;
  EXPECT_EQ(b.node(*total).type.shape.dims(), (std::vector<int64_t>{4}));
  EXPECT_FALSE(b.add(OpKind::rms_norm, {x, w}, Attrs{}));  // eps 0 is refused, not defaulted
}

// Builder::add rebuilds every node of every example graph (and of the emulator's test graphs:
// half_bias_odd's out_dtype among them) from its kind, operands and attributes alone: the same
// canonical bytes, so the same hash.
TEST(OpTable, GenericAddRebuildsEveryExampleGraph) {
  int graphs = 0;
  std::vector<std::filesystem::directory_entry> files;
  for (const char* dir : {KILN_EXAMPLES_DIR, KILN_EMU_GRAPHS_DIR})
    for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry);
  for (const auto& entry : files) {
    if (entry.path().extension() != ".kg") continue;
    auto g = parse_graph_file(entry.path().string());
    ASSERT_TRUE(g) << g.error().message;
    Builder b(g->name());
    for (const Symbol& s : g->symbols()) ASSERT_TRUE(b.add_symbol(s.name, s.lo, s.hi));
    for (const Node& n : g->nodes()) {
      Expected<NodeId> id = make_error("unset");
      if (n.kind == OpKind::input) {
        id = b.add_input(n.name, n.type);
      } else {
        Attrs attrs = n.attrs;
        // reshape's, expand's and arange's sizes are the result type.
        if (n.kind == OpKind::reshape || n.kind == OpKind::expand || n.kind == OpKind::arange) {
          attrs.shape = n.type.shape.dims();
          attrs.shape_symbols = n.type.shape.symbols();
        }
        id = b.add(n.kind, n.operands, attrs, n.name);
      }
      ASSERT_TRUE(id) << entry.path() << ": " << to_string(n.kind) << ": " << id.error().message;
    }
    for (NodeId o : g->outputs()) ASSERT_TRUE(b.add_output(o));
    auto rebuilt = std::move(b).finish();
    ASSERT_TRUE(rebuilt) << rebuilt.error().message;
    EXPECT_EQ(canonical_bytes(*rebuilt), canonical_bytes(*g)) << entry.path();
    ++graphs;
  }
  EXPECT_GE(graphs, 60);
}

TEST(OpTable, GenericAddChecksTheOperandCount) {
  Builder b("g");
  NodeId x = b.add_input("x", TensorType{DType::f32, Shape::make({4}).value()}).value();
  auto bad = b.add(OpKind::add, {x}, Attrs{});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("add takes 2 operands, got 1"), std::string::npos)
      << bad.error().message;
  Attrs literal;
  literal.literal_side = LiteralSide::rhs;
  literal.literal = 2.0;
  auto scaled = b.add(OpKind::mul, {x}, literal);
  ASSERT_TRUE(scaled) << scaled.error().message;
  EXPECT_EQ(b.node(*scaled).attrs.literal, 2.0);
  EXPECT_FALSE(b.add(OpKind::input, {}, Attrs{}));
  EXPECT_FALSE(b.add(OpKind::concat, {}, Attrs{}));
}

}  // namespace
}  // namespace kiln::ir
