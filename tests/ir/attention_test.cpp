// The attention op: shape and dtype inference with broadcast batch dims and masks, every builder
// and parser error, printing, canonical bytes and the hash.
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace kiln::ir::attention_test {
namespace {

TensorType type_of(DType dtype, std::vector<int64_t> dims) {
  return TensorType{dtype, Shape::make(std::move(dims)).value()};
}

TensorType f32(std::vector<int64_t> dims) { return type_of(DType::f32, std::move(dims)); }

Graph parse_ok(const std::string& text) {
  auto graph = parse_graph(text, "g.kg");
  EXPECT_TRUE(graph) << graph.error().message << "\n" << text;
  return graph ? *graph
               : *parse_graph("graph e {\n input a: f32[1]\n o = neg(a)\n output o\n}\n", "e");
}

// A graph of the given input declarations and one statement `o = EXPR`, output o.
std::string graph_text(const std::string& inputs, const std::string& expr) {
  return "graph g {\n" + inputs + "  o = " + expr + "\n  output o\n}\n";
}

const char* k_qkv = "  input q: f32[2, 4, 16, 8]\n  input k: f32[2, 4, 12, 8]\n"
                    "  input v: f32[2, 4, 12, 5]\n";

std::string out_type(const std::string& inputs, const std::string& expr) {
  Graph g = parse_ok(graph_text(inputs, expr));
  return to_string(g.node(g.outputs()[0]).type);
}

TEST(Attention, InfersQueriesByValueWidth) {
  EXPECT_EQ(out_type(k_qkv, "attention(q, k, v)"), "f32[2, 4, 16, 5]");
  EXPECT_EQ(out_type("  input q: bf16[16, 8]\n  input k: bf16[12, 8]\n  input v: bf16[12, 3]\n",
                     "attention(q, k, v)"),
            "bf16[16, 3]");
  EXPECT_EQ(out_type("  input q: f16[4, 16, 8]\n  input k: f16[4, 12, 8]\n"
                     "  input v: f16[4, 12, 8]\n",
                     "attention(q, k, v, causal=true)"),
            "f16[4, 16, 8]");
}

TEST(Attention, BatchDimsBroadcastAsMatmuls) {
  // k and v shared by the batch ([1, H, S, D] against q's [B, H, S, D]).
  EXPECT_EQ(out_type("  input q: f32[3, 4, 16, 8]\n  input k: f32[1, 4, 12, 8]\n"
                     "  input v: f32[1, 4, 12, 8]\n",
                     "attention(q, k, v)"),
            "f32[3, 4, 16, 8]");
  // Fewer batch dims broadcast on the left; each operand may bring its own.
  EXPECT_EQ(out_type("  input q: f32[3, 1, 16, 8]\n  input k: f32[4, 12, 8]\n"
                     "  input v: f32[12, 6]\n",
                     "attention(q, k, v)"),
            "f32[3, 4, 16, 6]");
  EXPECT_EQ(out_type("  input q: f32[16, 8]\n  input k: f32[2, 12, 8]\n  input v: f32[12, 8]\n",
                     "attention(q, k, v)"),
            "f32[2, 16, 8]");
}

// Grouped- and multi-query attention: k and v with H_kv heads (axis -3) where q has a multiple;
// the result has q's heads. Symbolic heads group only when equal.
TEST(Attention, KvHeadsMayDivideTheQueryHeads) {
  EXPECT_EQ(out_type("  input q: f32[2, 8, 16, 8]\n  input k: f32[2, 2, 12, 8]\n"
                     "  input v: f32[2, 2, 12, 5]\n",
                     "attention(q, k, v)"),
            "f32[2, 8, 16, 5]");
  EXPECT_EQ(out_type("  input q: f32[4, 16, 8]\n  input k: f32[2, 12, 8]\n"
                     "  input v: f32[1, 12, 5]\n",
                     "attention(q, k, v, causal=true)"),
            "f32[4, 16, 5]");
  EXPECT_EQ(out_type("  input q: f32[2, 4, 16, 8]\n  input k: f32[2, 12, 8]\n"
                     "  input v: f32[2, 12, 5]\n",
                     "attention(q, k, v)"),
            "f32[2, 4, 16, 5]");
  auto symbolic = parse_graph(
      "graph g {\n  dim H: 1..8\n  input q: f32[2, H, 16, 8]\n  input k: f32[2, 2, 12, 8]\n"
      "  input v: f32[2, 2, 12, 5]\n  o = attention(q, k, v)\n  output o\n}\n", "g.kg");
  ASSERT_FALSE(symbolic);
  EXPECT_NE(symbolic.error().message.find("k has 2 heads (axis -3) and q H"), std::string::npos)
      << symbolic.error().message;
  // A mask of any float dtype (read as fp32) against 16-bit q, k and v.
  EXPECT_EQ(out_type("  input q: bf16[2, 4, 16, 8]\n  input k: bf16[2, 2, 12, 8]\n"
                     "  input v: bf16[2, 2, 12, 8]\n  input m: f32[2, 1, 1, 12]\n",
                     "attention(q, k, v, mask=m)"),
            "bf16[2, 4, 16, 8]");
}

TEST(Attention, MasksBroadcastToTheScores) {
  for (const char* mask : {"f32[16, 12]", "f32[12]", "f32[1]", "f32[2, 1, 16, 12]",
                           "f32[4, 1, 12]", "f32[1, 1, 1, 1]"}) {
    std::string inputs = std::string(k_qkv) + "  input m: " + mask + "\n";
    EXPECT_EQ(out_type(inputs, "attention(q, k, v, mask=m)"), "f32[2, 4, 16, 5]") << mask;
  }
}

TEST(Attention, CausalWithMoreKeysThanQueries) {
  Graph g = parse_ok(graph_text(k_qkv, "attention(q, k, v, causal=true, scale=0.25)"));
  const Node& o = g.node(g.outputs()[0]);
  EXPECT_TRUE(o.attrs.causal);
  EXPECT_EQ(o.attrs.scale, 0.25);
  EXPECT_EQ(to_string(o.type), "f32[2, 4, 16, 5]");
}

TEST(Attention, ScaleDefaultsToOneOverRootOfTheHeadDim) {
  Graph g = parse_ok(graph_text(k_qkv, "attention(q, k, v)"));
  const Node& o = g.node(g.outputs()[0]);
  EXPECT_EQ(o.attrs.scale, 1.0 / std::sqrt(8.0));
  EXPECT_FALSE(o.attrs.causal);
  EXPECT_EQ(o.operands.size(), 3u);
  Graph d64 = parse_ok(graph_text("  input q: f32[4, 64]\n  input k: f32[4, 64]\n"
                                  "  input v: f32[4, 64]\n",
                                  "attention(q, k, v)"));
  EXPECT_EQ(d64.node(d64.outputs()[0]).attrs.scale, 0.125);
  // The default and the value written out are one graph.
  Graph written = parse_ok(graph_text("  input q: f32[4, 64]\n  input k: f32[4, 64]\n"
                                      "  input v: f32[4, 64]\n",
                                      "attention(q, k, v, scale=0.125)"));
  EXPECT_EQ(graph_hash(written), graph_hash(d64));
}

TEST(Attention, PrintsScaleAlwaysAndMaskAndCausalWhenSet) {
  std::string inputs = std::string(k_qkv) + "  input m: f32[16, 12]\n";
  EXPECT_EQ(print_expr(parse_ok(graph_text(inputs, "attention(q, k, v, mask=m)")), 4),
            "attention(q, k, v, mask=m, scale=0.35355339059327373)");
  EXPECT_EQ(print_expr(parse_ok(graph_text(
                           inputs, "attention(q, k, v, causal=true, mask=m, scale=0.125)")),
                       4),
            "attention(q, k, v, mask=m, scale=0.125, causal=true)");
  EXPECT_EQ(print_expr(parse_ok(graph_text(inputs, "attention(q, k, v, causal=false, scale=2.0)")),
                       4),
            "attention(q, k, v, scale=2.0)");
  Graph nested = parse_ok(graph_text(
      inputs, "attention(neg(q), k, relu(v), mask=m, scale=-0.5)"));
  std::string printed = print_graph(nested);
  EXPECT_NE(printed.find("  o = attention(neg(q), k, relu(v), mask=m, scale=-0.5)\n"),
            std::string::npos)
      << printed;
}

// Printed text parses back to the same graph, and the canonical bytes read back to it.
void expect_round_trips(const Graph& g) {
  std::string printed = print_graph(g);
  Graph again = parse_ok(printed);
  EXPECT_EQ(print_graph(again), printed);
  EXPECT_EQ(graph_hash(again), graph_hash(g)) << printed;
  std::string bytes = canonical_bytes(g);
  auto back = graph_from_canonical(bytes, "back");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(canonical_bytes(*back), bytes);
  Graph reparsed = parse_ok(print_graph(*back));
  EXPECT_EQ(graph_hash(reparsed), graph_hash(g));
}

TEST(Attention, PrintParseAndCanonicalRoundTrip) {
  std::string inputs = std::string(k_qkv) + "  input m: f32[2, 1, 16, 12]\n";
  expect_round_trips(parse_ok(
      "graph g {\n" + inputs +
      "  s = mul(m, 0.5)\n"
      "  a = attention(q, k, v, mask=s, scale=0.1, causal=true)\n"
      "  b = attention(neg(q), k, attention(k, k, v, scale=3e-7), scale=1.0)\n"
      "  c = attention(b, a, a)\n"
      "  output c\n}\n"));
}

// A mask the builder got unnamed is given a name, even where it could have printed nested.
TEST(Attention, BuilderNamesAnUnnamedMask) {
  Builder b("g");
  NodeId q = b.add_input("q", f32({4, 8})).value();
  NodeId k = b.add_input("k", f32({6, 8})).value();
  NodeId v = b.add_input("v", f32({6, 2})).value();
  NodeId x = b.add_input("x", f32({4, 6})).value();
  NodeId vv = b.add_unary(OpKind::relu, v).value();
  NodeId mask = b.add_unary(OpKind::neg, x).value();  // just before its user
  NodeId o = b.add_attention(q, k, vv, mask, 0.5, true, "o").value();
  ASSERT_TRUE(b.add_output(o));
  Graph g = std::move(b).finish().value();
  EXPECT_FALSE(g.node(mask).name.empty());
  std::string printed = print_graph(g);
  EXPECT_NE(printed.find("mask=" + g.node(mask).name + ", scale=0.5, causal=true)"),
            std::string::npos)
      << printed;
  expect_round_trips(g);
}

// Random graphs of attentions with named and unnamed operands round-trip.
TEST(Attention, RandomAttentionGraphsRoundTrip) {
  std::mt19937_64 rng(3);
  int names = 0;
  for (int round = 0; round < 200; ++round) {
    Builder b("g");
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
    auto name = [&](const char* prefix) {
      return pick(2) ? std::string(prefix) + std::to_string(names++) : std::string();
    };
    DType dtype = static_cast<DType>(pick(3));
    NodeId x = b.add_input("x", type_of(dtype, {2, 6, 8})).value();
    NodeId m = b.add_input("m", type_of(dtype, {6, 6})).value();
    std::vector<NodeId> values = {x};
    for (int n = 0; n < 1 + pick(5); ++n) {
      auto any = [&] { return values[static_cast<size_t>(pick(static_cast<int>(values.size())))]; };
      NodeId qq = pick(2) ? b.add_unary(OpKind::neg, any(), name("q")).value() : any();
      NodeId kk = pick(2) ? b.add_unary(OpKind::tanh, any(), name("k")).value() : any();
      NodeId vv = pick(2) ? b.add_unary(OpKind::relu, any(), name("v")).value() : any();
      std::optional<NodeId> mask;
      if (pick(3) == 0) mask = m;
      if (pick(3) == 0) mask = b.add_binary_literal(OpKind::mul, m, 0.5, LiteralSide::rhs,
                                                    name("mask")).value();
      double scale = pick(2) ? 0.125 : 1.0 / (1 + pick(100));
      values.push_back(
          b.add_attention(qq, kk, vv, mask, scale, pick(2) == 1, name("a")).value());
    }
    // Output whatever nothing uses.
    std::vector<int> uses(b.size(), 0);
    for (size_t i = 0; i < b.size(); ++i)
      for (NodeId op : b.node(static_cast<NodeId>(i)).operands) ++uses[static_cast<size_t>(op)];
    for (size_t i = 0; i < b.size(); ++i) {
      if (b.node(static_cast<NodeId>(i)).kind != OpKind::input && uses[i] == 0) {
        ASSERT_TRUE(b.add_output(static_cast<NodeId>(i)));
      }
    }
    if (uses[static_cast<size_t>(m)] == 0) {
      ASSERT_TRUE(b.add_output(b.add_unary(OpKind::exp, m).value()));
    }
    auto g = std::move(b).finish();
    ASSERT_TRUE(g) << g.error().message;
    SCOPED_TRACE(print_graph(*g));
    expect_round_trips(*g);
  }
}

TEST(Attention, EveryAttributeAndOperandChangesTheHash) {
  std::string inputs = std::string(k_qkv) + "  input m: f32[16, 12]\n  input n: f32[16, 12]\n";
  auto hash = [&](const std::string& expr) {
    std::string text = "graph g {\n" + inputs + "  o = " + expr + "\n  p = add(m, n)\n" +
                       "  output o, p\n}\n";
    return graph_hash(parse_ok(text));
  };
  const char* base = "attention(q, k, v, mask=m, scale=0.5, causal=true)";
  for (const char* other : {"attention(q, k, v, mask=m, scale=0.25, causal=true)",
                            "attention(q, k, v, mask=m, scale=-0.5, causal=true)",
                            "attention(q, k, v, mask=m, scale=0.5)",
                            "attention(q, k, v, mask=n, scale=0.5, causal=true)",
                            "attention(q, k, v, scale=0.5, causal=true)",
                            "attention(q, neg(k), v, mask=m, scale=0.5, causal=true)"}) {
    EXPECT_NE(hash(other), hash(base)) << other;
  }
  EXPECT_EQ(hash("attention(q, k, v, causal=true, scale=5e-1, mask=m)"), hash(base));
}

// Appending attention to ops.def kept every other op's number: graphs without it hash as before
// (the values computed before attention existed; a cache keyed by them stays valid).
TEST(Attention, ExistingGraphsKeepTheirHashes) {
  const std::pair<const char*, const char*> pinned[] = {
      {"attention.kg", "4f6400e5f08f33aa3a8b05cf66e643d3"},
      {"attention_dynamic.kg", "055b9341dc704810665b1ef19f643457"},
      {"bert_layer.kg", "daeab87bea94f5f13a8713c10fc9eb4a"},
      {"gated_mlp.kg", "ccca0b4fc54cf4ab723f953f882eb595"},
      {"half_epilogue.kg", "15ec3e58606550c78ee55f74b785bc5b"},
      {"llama_layer.kg", "e717cff5402725d0bf0693497247b40d"},
      {"mixed_head.kg", "d61be3fac58b4acc5541403b607788bc"},
      {"mlp.kg", "82442d80152b110787b42ac36e4ee49f"},
      {"mlp_dynamic.kg", "c7868e10070c1f293b04e2424703de18"},
  };
  for (const auto& [file, hex] : pinned) {
    auto graph = parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/" + file);
    ASSERT_TRUE(graph) << graph.error().message;
    EXPECT_EQ(graph_hash(*graph).hex(), hex) << file;
  }
}

struct BadAttention {
  const char* name;
  std::string inputs;
  std::string expr;
  int column;  // on the line of `o = ...`, after the inputs
  const char* says;
};

class AttentionError : public ::testing::TestWithParam<BadAttention> {};

TEST_P(AttentionError, IsLocatedAndExplained) {
  const BadAttention& bad = GetParam();
  auto graph = parse_graph(graph_text(bad.inputs, bad.expr), "bad.kg");
  ASSERT_FALSE(graph) << "parsed: " << bad.expr;
  int line = 2 + static_cast<int>(std::count(bad.inputs.begin(), bad.inputs.end(), '\n'));
  std::string prefix = "bad.kg:" + std::to_string(line) + ":" + std::to_string(bad.column) +
                       ": error: ";
  const std::string& message = graph.error().message;
  EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
  EXPECT_NE(message.find(bad.says), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

std::string qkv(const char* q, const char* k, const char* v) {
  return std::string("  input q: ") + q + "\n  input k: " + k + "\n  input v: " + v + "\n";
}

const std::string k_ok = qkv("f32[2, 16, 64]", "f32[2, 12, 64]", "f32[2, 12, 32]");
const std::string k_mask = k_ok + "  input m: f32[16, 12]\n";

INSTANTIATE_TEST_SUITE_P(
    Ops, AttentionError,
    ::testing::Values(
        BadAttention{"HeadDim", qkv("f32[16, 64]", "f32[12, 32]", "f32[12, 32]"),
                     "attention(q, k, v)", 7,
                     "attention: k's last dim 32 does not match q's head dim 64"},
        BadAttention{"KeyCount", qkv("f32[16, 64]", "f32[12, 64]", "f32[10, 32]"),
                     "attention(q, k, v)", 7,
                     "attention: v's second-to-last dim 10 does not match k's key count 12"},
        BadAttention{"BatchQK", qkv("f32[2, 4, 16, 64]", "f32[3, 4, 12, 64]", "f32[12, 32]"),
                     "attention(q, k, v)", 7,
                     "attention: the batch dims of k and q do not broadcast"},
        BadAttention{"HeadsNotAMultiple", qkv("f32[2, 16, 64]", "f32[3, 12, 64]", "f32[12, 32]"),
                     "attention(q, k, v)", 7,
                     "attention: k has 3 heads (axis -3) and q 2: q's heads must equal them, be a "
                     "constant multiple of them (grouped-query attention) or be 1"},
        BadAttention{"MoreKvHeads", qkv("f32[2, 2, 16, 64]", "f32[2, 4, 12, 64]", "f32[2, 4, 12, 32]"),
                     "attention(q, k, v)", 7, "attention: k has 4 heads (axis -3) and q 2"},
        BadAttention{"VHeads", qkv("f32[2, 6, 16, 64]", "f32[2, 3, 12, 64]", "f32[2, 4, 12, 32]"),
                     "attention(q, k, v)", 7, "attention: v has 4 heads (axis -3) and q 6"},
        BadAttention{"BatchV", qkv("f32[2, 1, 16, 64]", "f32[1, 4, 12, 64]",
                                   "f32[3, 4, 12, 32]"),
                     "attention(q, k, v)", 7, "the batch dims of v do not broadcast"},
        BadAttention{"DtypeK", qkv("f32[16, 64]", "bf16[12, 64]", "f32[12, 32]"),
                     "attention(q, k, v)", 7, "attention: k differs from q in dtype"},
        BadAttention{"DtypeV", qkv("f16[16, 64]", "f16[12, 64]", "bf16[12, 32]"),
                     "attention(q, k, v)", 7, "attention: v differs from q in dtype"},
        BadAttention{"RankQ", qkv("f32[64]", "f32[12, 64]", "f32[12, 32]"), "attention(q, k, v)",
                     7, "attention: q must be 2-D to 6-D"},
        BadAttention{"RankV", qkv("f32[16, 64]", "f32[12, 64]", "f32[32]"), "attention(q, k, v)",
                     7, "attention: v must be 2-D to 6-D"},
        BadAttention{"MaskShape", k_ok + "  input m: f32[12, 16]\n",
                     "attention(q, k, v, mask=m)", 7,
                     "does not broadcast to the scores [2, 16, 12]: its dim 0 is 12 against 16"},
        BadAttention{"MaskEnlarges",
                     qkv("f32[1, 16, 64]", "f32[1, 12, 64]", "f32[12, 32]") +
                         "  input m: f32[3, 16, 12]\n",
                     "attention(q, k, v, mask=m)", 7, "its dim 0 is 3 against 1"},
        BadAttention{"MaskRank", k_ok + "  input m: f32[1, 2, 16, 12]\n",
                     "attention(q, k, v, mask=m)", 7, "more dims than the scores [2, 16, 12]"},
        BadAttention{"ZeroScale", k_ok, "attention(q, k, v, scale=0.0)", 7,
                     "attention: scale must be finite and non-zero"},
        BadAttention{"InfScale", k_ok, "attention(q, k, v, scale=inf)", 32,
                     "expected a number for 'scale', got identifier 'inf'"},
        BadAttention{"HugeScale", k_ok, "attention(q, k, v, scale=1e999)", 32,
                     "expected a number for 'scale'"},
        BadAttention{"ListScale", k_ok, "attention(q, k, v, scale=[1])", 32,
                     "expected a number for 'scale'"},
        BadAttention{"UnknownMask", k_ok, "attention(q, k, v, mask=nope)", 31,
                     "undefined value 'nope'"},
        BadAttention{"MaskNumber", k_ok, "attention(q, k, v, mask=1.0)", 31,
                     "expected the name of a value or an expression for 'mask'"},
        BadAttention{"Causal", k_ok, "attention(q, k, v, causal=1)", 33,
                     "expected true or false for 'causal'"},
        BadAttention{"UnknownArg", k_ok, "attention(q, k, v, dropout=0.1)", 34,
                     "attention has no argument 'dropout'; expected mask, scale or causal"},
        BadAttention{"MaskTwice", k_mask, "attention(q, k, v, mask=m, mask=m)", 34,
                     "argument 'mask' is given twice"},
        BadAttention{"FourOperands", k_mask, "attention(q, k, v, m)", 7,
                     "attention takes 3 operands, got 4 (a mask is written mask=NAME)"},
        BadAttention{"TwoOperands", k_ok, "attention(q, k)", 7,
                     "attention takes 3 operands, got 2"},
        BadAttention{"LiteralOperand", k_ok, "attention(q, k, 1.0)", 23,
                     "attention operand 3 must be a tensor"},
        BadAttention{"SymbolicHeadDim",
                     "  dim D: 1..64\n" + qkv("f32[16, D]", "f32[12, D]", "f32[12, 8]"),
                     "attention(q, k, v)", 7,
                     "attention needs scale= when q's head dim is the symbolic dim D"},
        // A rank-0 q and no scale=: its default (1 / sqrt of q's last dim) has no dim to read.
        BadAttention{"ScalarQueries", qkv("f32[]", "f32[2, 12, 64]", "f32[2, 12, 32]"),
                     "attention(q, k, v)", 7, "attention: q must be 2-D to 6-D"},
        BadAttention{"Misspelt", k_ok, "atention(q, k, v)", 7, "concat, attention"}),
    [](const ::testing::TestParamInfo<BadAttention>& info) {
      return std::string(info.param.name);
    });

TEST(AttentionBuilder, RejectsBadScalesAndOperands) {
  Builder b("g");
  NodeId q = b.add_input("q", f32({4, 8})).value();
  NodeId k = b.add_input("k", f32({6, 8})).value();
  NodeId v = b.add_input("v", f32({6, 2})).value();
  for (double scale : {0.0, -0.0, std::numeric_limits<double>::infinity(),
                       -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
    auto bad = b.add_attention(q, k, v, std::nullopt, scale, false);
    ASSERT_FALSE(bad) << scale;
    EXPECT_NE(bad.error().message.find("attention: scale must be finite and non-zero"),
              std::string::npos)
        << bad.error().message;
  }
  auto nowhere = b.add_attention(q, k, v, NodeId{42}, 1.0, false);
  ASSERT_FALSE(nowhere);
  EXPECT_NE(nowhere.error().message.find("does not name a value"), std::string::npos);
  EXPECT_FALSE(b.add_attention(q, k, NodeId{-1}, std::nullopt, 1.0, false));
  EXPECT_EQ(b.size(), 3u);  // nothing was added
  // Attention takes 2-D to 6-D, as shapes go.
  NodeId five = b.add_input("five", TensorType{DType::f32, Shape::make({1, 1, 1, 4, 8}).value()}).value();
  EXPECT_TRUE(b.add_attention(five, five, five, std::nullopt, 1.0, false));
  NodeId flat = b.add_input("flat", TensorType{DType::f32, Shape::make({8}).value()}).value();
  auto shallow = b.add_attention(flat, five, five, std::nullopt, 1.0, false);
  ASSERT_FALSE(shallow);
  EXPECT_NE(shallow.error().message.find("attention: q must be 2-D to 6-D"), std::string::npos)
      << shallow.error().message;
  EXPECT_FALSE(Shape::make({1, 1, 1, 1, 1, 4, 8}));
}

TEST(AttentionSymbolic, SymbolicQueryAndKeyCountsFlowIntoTheResult) {
  const char* text = R"(graph g {
  dim B: 1..8
  dim S: 1..128
  dim T: 1..128
  input q: f16[B, 4, S, 32]
  input k: f16[1, 4, T, 32]
  input v: f16[4, T, 16]
  input m: f16[S, T]
  o = attention(q, k, v, mask=m, causal=true)
  output o
}
)";
  Graph g = parse_ok(text);
  const Node& o = g.node(g.outputs()[0]);
  EXPECT_EQ(to_string(o.type), "f16[B, 4, S, 16]");
  EXPECT_EQ(o.attrs.scale, 1.0 / std::sqrt(32.0));
  expect_round_trips(g);
  auto bound = g.bind({2, 5, 7});
  ASSERT_TRUE(bound) << bound.error().message;
  EXPECT_EQ(to_string(bound->node(bound->outputs()[0]).type), "f16[2, 4, 5, 16]");
  // Symbols compare as symbols: T is not S, even at the same range.
  std::string wrong_keys = text;
  wrong_keys.replace(wrong_keys.find("v: f16[4, T, 16]"), 16, "v: f16[4, S, 16]");
  auto bad = parse_graph(wrong_keys, "bad.kg");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("bad.kg:9:7: error: attention: v's second-to-last dim S "
                                     "does not match k's key count T"),
            std::string::npos)
      << bad.error().message;
  std::string wrong_mask = text;
  wrong_mask.replace(wrong_mask.find("m: f16[S, T]"), 12, "m: f16[S, S]");
  bad = parse_graph(wrong_mask, "bad.kg");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("its dim 1 is S against T"), std::string::npos)
      << bad.error().message;
  // A symbolic head dim works once the scale is given.
  Graph d = parse_ok(
      "graph g {\n  dim D: 1..64\n  input q: f32[3, D]\n  input k: f32[5, D]\n"
      "  input v: f32[5, D]\n  o = attention(q, k, v, scale=0.5)\n  output o\n}\n");
  EXPECT_EQ(to_string(d.node(d.outputs()[0]).type), "f32[3, D]");
  expect_round_trips(d);
}

// The canonical reader refuses every truncation and damaged attention fields, without crashing.
TEST(AttentionCanonical, DamagedBytesAreRefused) {
  Graph g = parse_ok(graph_text(k_mask, "attention(q, k, v, mask=m, scale=0.5, causal=true)"));
  std::string bytes = canonical_bytes(g);
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(graph_from_canonical(bytes.substr(0, n), "g")) << "truncated to " << n;
  // The attention is the last node: after its f64 scale and u8 causal come the input count and
  // 4 inputs, the output count and 1 output (u32 each).
  size_t causal_at = bytes.size() - 4 * (1 + 4 + 1 + 1) - 1;
  size_t scale_at = causal_at - 8;
  size_t arity_at = scale_at - 4 * 4 - 1;
  ASSERT_EQ(bytes[causal_at], 1);
  ASSERT_EQ(bytes[arity_at], 4);
  std::string bad = bytes;
  bad[causal_at] = 2;
  EXPECT_FALSE(graph_from_canonical(bad, "g"));
  bad = bytes;
  for (size_t i = 0; i < 8; ++i) bad[scale_at + i] = 0;  // scale 0.0
  auto zero = graph_from_canonical(bad, "g");
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.error().message.find("scale must be finite and non-zero"), std::string::npos)
      << zero.error().message;
  for (uint8_t arity : {0, 1, 2, 3, 5, 255}) {
    bad = bytes;
    bad[arity_at] = static_cast<char>(arity);
    EXPECT_FALSE(graph_from_canonical(bad, "g")) << int(arity);
  }
  std::mt19937_64 rng(5);
  for (int i = 0; i < 3000; ++i) {
    std::string damaged = bytes;
    damaged[rng() % damaged.size()] = static_cast<char>(rng());
    auto back = graph_from_canonical(damaged, "g");  // a valid graph or an error, no crash
    if (back) {
      EXPECT_EQ(canonical_bytes(*back), damaged);
    }
  }
}

}  // namespace
}  // namespace kiln::ir::attention_test
