// Integer and bool tensors in the graph format: dtypes, literals by the dtype they meet,
// comparisons, logical ops, where and casts; parse/print/hash round trips, the dtype rules and
// their located errors.
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::ir {
namespace {

TEST(Dtypes, NamesSizesAndKinds) {
  EXPECT_EQ(parse_dtype("i32"), DType::i32);
  EXPECT_EQ(parse_dtype("i64"), DType::i64);
  EXPECT_EQ(parse_dtype("bool"), DType::boolean);
  EXPECT_EQ(to_string(DType::boolean), "bool");
  EXPECT_EQ(byte_size(DType::i32), 4);
  EXPECT_EQ(byte_size(DType::i64), 8);
  EXPECT_EQ(byte_size(DType::boolean), 1);
  EXPECT_TRUE(is_float(DType::bf16));
  EXPECT_FALSE(is_float(DType::i32));
  EXPECT_TRUE(is_integer(DType::i64));
  EXPECT_FALSE(is_integer(DType::boolean));
  // The hashed numbering: the float dtypes keep 0..2.
  EXPECT_EQ(static_cast<int>(DType::bf16), 2);
  EXPECT_EQ(static_cast<int>(DType::boolean), 5);
}

// Parses `text` and checks that it prints back as written and that its canonical bytes build the
// same graph again.
Expected<Graph> parse_round_trip(const std::string& text) {
  auto g = parse_graph(text, "g.kg");
  if (!g) return g;
  EXPECT_EQ(print_graph(*g), text);
  auto back = graph_from_canonical(canonical_bytes(*g), "g");
  EXPECT_TRUE(back) << back.error().message;
  if (back) {
    EXPECT_EQ(canonical_bytes(*back), canonical_bytes(*g));
  }
  return g;
}

const char* k_masks =
    "graph g {\n"
    "  input ids: i64[2, 8]\n"
    "  input mask: i64[2, 8]\n"
    "  input x: f32[2, 8]\n"
    "  input flags: bool[8]\n"
    "  keep = logical_and(eq(mask, 1), logical_not(flags))\n"
    "  s = add(mul(ids, 3), -5)\n"
    "  y = where(keep, x, -inf)\n"
    "  z = where(logical_or(keep, gt(s, 10)), 1.0, 0.0)\n"
    "  u = where(flags, 7, s)\n"
    "  v = where(ne(x, 0.5), x, inf)\n"
    "  c = cast(ge(x, 0.0), to=i32)\n"
    "  e = eq(flags, true)\n"
    "  output y, z, u, v, c, e\n"
    "}\n";

TEST(Dtypes, IntegerAndBoolGraphsParsePrintAndHash) {
  auto g = parse_round_trip(k_masks);
  ASSERT_TRUE(g) << g.error().message;
  auto type = [&](const std::string& name) {
    for (const Node& n : g->nodes())
      if (n.name == name) return to_string(n.type);
    return std::string("none");
  };
  EXPECT_EQ(type("keep"), "bool[2, 8]");
  EXPECT_EQ(type("s"), "i64[2, 8]");
  EXPECT_EQ(type("y"), "f32[2, 8]");
  EXPECT_EQ(type("z"), "f32[2, 8]");  // two literals: f32
  EXPECT_EQ(type("u"), "i64[2, 8]");
  EXPECT_EQ(type("c"), "i32[2, 8]");
  // Each literal and each side of where changes the hash.
  std::string text = k_masks;
  for (auto [from, to] : {std::pair{"-inf)", "-1e30)"}, std::pair{"where(flags, 7, s)", "where(flags, s, 7)"},
                          std::pair{"1.0, 0.0", "0.0, 1.0"}, std::pair{"add(mul(ids, 3)", "add(mul(ids, 4)"}}) {
    std::string changed = text;
    changed.replace(changed.find(from), std::string(from).size(), to);
    auto other = parse_graph(changed, "g.kg");
    ASSERT_TRUE(other) << changed << other.error().message;
    EXPECT_NE(graph_hash(*other).hex(), graph_hash(*g).hex()) << from;
  }
}

// A graph of the given inputs and one statement `o = EXPR`; the error or "".
std::string error_of(const std::string& inputs, const std::string& expr) {
  auto g = parse_graph("graph g {\n" + inputs + "  o = " + expr + "\n  output o\n}\n", "g.kg");
  return g ? "" : g.error().message;
}

// Each statement `o = EXPR` fails with an error that holds its message.
struct ErrorCase {
  const char* expr;
  const char* message;
};
template <size_t N>
void expect_errors(const std::string& inputs, const ErrorCase (&cases)[N]) {
  for (const ErrorCase& c : cases) {
    std::string message = error_of(inputs, c.expr);
    EXPECT_NE(message.find(c.message), std::string::npos) << c.expr << ": " << message;
  }
}

TEST(Dtypes, RulesAreLocatedErrors) {
  const std::string in = "  input i: i64[4]\n  input f: f32[4]\n  input b: bool[4]\n  input j: i32[4]\n";
  const ErrorCase cases[] = {
      {"mul(i, 2.5)", "g.kg:6:14: error: mul: the literal 2.5 meets an i64 tensor, which takes an "
                      "integer (no '.', exponent or inf); tensors and literals never convert: cast"},
      {"add(i, 2.0)", "the literal 2.0 meets an i64 tensor"},
      {"add(i, inf)", "the literal inf meets an i64 tensor"},
      {"add(f, true)", "the literal true meets an f32 tensor, which takes a number"},
      {"eq(b, 1)", "the literal 1 meets a bool tensor, which takes true or false"},
      {"div(i, 2)", "6:7: error: div takes float operands, got i64"},
      {"pow(j, j)", "pow takes float operands, got i32"},
      {"exp(i)", "exp takes float operands, got i64"},
      {"add(b, b)", "add does no arithmetic on bool; use logical_and, logical_or, logical_not or where"},
      {"logical_and(i, i)", "logical_and takes bool operands, got i64"},
      {"logical_not(f)", "logical_not takes bool operands, got f32"},
      {"add(i, j)", "add operands differ in dtype"},
      {"add(i, f)", "add operands differ in dtype"},
      {"where(i, f, f)", "where: the condition must be bool, got 'i' (i64[4]); compare it"},
      {"where(b, i, f)", "where: its values differ in dtype"},
      {"where(b, i, 0.5)", "the literal 0.5 meets an i64 tensor"},
      {"where(b, f, false)", "the literal false meets an f32 tensor"},
      // Two literals make f32 (no tensor to meet: it used to say "meets an f32 tensor").
      {"where(b, true, false)", "6:16: error: where: two literals make an f32 result, and true is "
                                "no number; for a bool, write the condition itself"},
      {"where(1.0, f, f)", "where operand 1 must be a tensor"},
      {"where(b, f)", "where takes 3 operands, got 2"},
      {"matmul(reshape(i, shape=[2, 2]), reshape(i, shape=[2, 2]))",
       "matmul: an operand must be a float tensor (f32, f16 or bf16), got reshape result (i64[2, 2])"},
      {"softmax(i)", "softmax: its operand must be a float tensor"},
      {"sum(j)", "sum: its operand must be a float tensor"},
      {"mul(j, 2147483648)", "6:14: error: mul: a literal against an i32 tensor is an integer "
                             "within i32, got 2147483648"},
      // read from its text: as a double, 2^53 + 1 is 2^53 and would pass
      {"add(i, 9007199254740993)", "6:14: error: add: a literal against an i64 tensor is an "
                                   "integer within +-2^53, got 9007199254740993"},
      {"true(f)", "'true' is a literal, not an op"},
      {"cast(f, to=i16)", "expected a dtype (f32, f16, bf16, i32, i64 or bool) for 'to'"},
  };
  expect_errors(in, cases);
  EXPECT_NE(error_of("  input inf: f32[4]\n", "neg(inf)").find("'inf' is a literal"), std::string::npos);
  EXPECT_NE(error_of("  input x: f32[4]\n  true = neg(x)\n", "neg(x)").find("'true' is a literal"),
            std::string::npos);
  EXPECT_NE(error_of("  input x: u8[4]\n", "neg(x)")
                .find("unknown dtype 'u8'; expected f32, f16, bf16, i32, i64 or bool"),
            std::string::npos);
  // What the rules allow.
  EXPECT_EQ(error_of(in, "maximum(neg(abs(i)), -3)"), "");
  EXPECT_EQ(error_of(in, "lt(b, b)"), "");
  EXPECT_EQ(error_of(in, "where(b, 0.0, -inf)"), "");
  EXPECT_EQ(error_of(in, "cast(cast(b, to=f32), to=bool)"), "");
  EXPECT_EQ(error_of(in, "permute(concat(i, i, axis=0), dims=[0])"), "");
}

// An attention mask is a float tensor (added to the scores) or bool (true keeps a key, as
// PyTorch's scaled_dot_product_attention); an integer one is refused.
TEST(Dtypes, AttentionTakesFloatAndBoolMasks) {
  const std::string qkv = "  input q: f32[2, 4, 8, 16]\n  input k: f32[2, 2, 8, 16]\n"
                          "  input v: f32[2, 2, 8, 16]\n  input ids: i64[2, 8]\n";
  EXPECT_EQ(error_of(qkv + "  keep = reshape(ne(ids, 0), shape=[2, 1, 1, 8])\n",
                     "attention(q, k, v, mask=keep)"),
            "");
  EXPECT_EQ(error_of(qkv + "  additive = reshape(where(ne(ids, 0), 0.0, -inf), shape=[2, 1, 1, 8])\n",
                     "attention(q, k, v, mask=additive, causal=true)"),
            "");
  EXPECT_NE(error_of(qkv + "  m = reshape(ids, shape=[2, 1, 1, 8])\n", "attention(q, k, v, mask=m)")
                .find("attention: the mask must be a float tensor (f32, f16 or bf16) or bool, got 'm' "
                      "(i64[2, 1, 1, 8])"),
            std::string::npos);
  EXPECT_NE(error_of(qkv, "attention(cast(q, to=i32), k, v)").find("attention: q must be a float"),
            std::string::npos);
}

// arange(n, dtype=...): n a constant or a declared dim, the dtype i64 unless given (and then
// printed); its size and dtype are all the hash needs.
TEST(Dtypes, ArangeOfAConstantOrADim) {
  const char* text =
      "graph g {\n  dim S: 1..64\n  input ids: i64[2, S]\n"
      "  z = add(ids, arange(S))\n"
      "  f = cos(mul(cast(arange(S, dtype=i32), to=f32), arange(1, dtype=f32)))\n"
      "  output z, f\n}\n";
  auto g = parse_round_trip(text);
  ASSERT_TRUE(g) << g.error().message;
  auto explicit_default = parse_graph(
      "graph g {\n  input ids: i64[4]\n  z = add(ids, arange(4, dtype=i64))\n  output z\n}\n", "g.kg");
  auto implicit = parse_graph(
      "graph g {\n  input ids: i64[4]\n  z = add(ids, arange(4))\n  output z\n}\n", "g.kg");
  ASSERT_TRUE(explicit_default && implicit);
  EXPECT_EQ(graph_hash(*explicit_default).hex(), graph_hash(*implicit).hex());
  const std::string in = "  input ids: i64[4]\n  input x: f32[4]\n";
  EXPECT_NE(error_of(in, "arange(x)").find("4:14: error: arange: 'x' is not a declared dim"),
            std::string::npos) << error_of(in, "arange(x)");
  EXPECT_NE(error_of(in, "arange(0)").find("arange: expected a positive integer size"),
            std::string::npos);
  EXPECT_NE(error_of(in, "arange(4, dtype=bf16)").find("arange: dtype is i32, i64 or f32, got bf16"),
            std::string::npos);
  EXPECT_NE(error_of(in, "arange(4, step=2)").find("arange has one argument, dtype="),
            std::string::npos);
  EXPECT_NE(error_of(in, "arange(2.5)").find("arange: expected a positive integer size"),
            std::string::npos);
  EXPECT_NE(error_of(in, "add(ids, arange(5))").find("do not broadcast"), std::string::npos);
}

// embedding(table, ids): a float [V, D] table and i32/i64 ids of rank 1 to 5 give ids.shape + [D].
TEST(Dtypes, EmbeddingTakesAFloatTableAndIntegerIds) {
  const char* text =
      "graph g {\n  dim S: 1..64\n  input ids: i64[2, S]\n  input emb: bf16[100, 16]\n"
      "  x = embedding(emb, ids)\n  y = embedding(emb, cast(arange(S), to=i32))\n"
      "  output x, y\n}\n";
  auto g = parse_round_trip(text);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(to_string(g->node(g->outputs()[0]).type), "bf16[2, S, 16]");
  EXPECT_EQ(to_string(g->node(g->outputs()[1]).type), "bf16[S, 16]");
  const std::string in = "  input t: f32[10, 4]\n  input ids: i64[3]\n  input f: f32[3]\n"
                         "  input deep: i32[2, 2, 2, 2, 2, 2]\n  input it: i32[10, 4]\n";
  const ErrorCase cases[] = {
      {"embedding(t, f)", "embedding: the ids must be i32 or i64, got 'f' (f32[3]); cast them"},
      {"embedding(f, ids)", "embedding: the table must be 2-D [V, D]"},
      {"embedding(it, ids)", "embedding: the table must be a float tensor"},
      {"embedding(t, deep)", "embedding: the ids have 6 dims; the result adds one and holds at most 6"},
      {"embedding(t)", "embedding takes 2 operands, got 1"},
      {"embedding(t, ids, scale=2.0)", "embedding has no argument 'scale'"},
  };
  expect_errors(in, cases);
}

// expand(x, shape=[...]): numpy broadcasting to the shape, -1 keeping a dim, dim names allowed;
// printed with the result's dims, hashed by its type.
TEST(Dtypes, ExpandBroadcastsToAShape) {
  const char* text =
      "graph g {\n  dim S: 1..64\n  input keep: bool[2, S]\n  input b: f32[16]\n"
      "  m = expand(reshape(keep, shape=[2, 1, S]), shape=[2, 4, S])\n"
      "  y = add(expand(b, shape=[S, 16]), 1.0)\n  output m, y\n}\n";
  auto g = parse_round_trip(text);
  ASSERT_TRUE(g) << g.error().message;
  auto kept = parse_graph(
      "graph g {\n  dim S: 1..64\n  input keep: bool[2, S]\n  input b: f32[16]\n"
      "  m = expand(reshape(keep, shape=[2, 1, S]), shape=[-1, 4, -1])\n"
      "  y = add(expand(b, shape=[S, -1]), 1.0)\n  output m, y\n}\n", "g.kg");
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_EQ(print_graph(*kept), text);
  EXPECT_EQ(graph_hash(*kept).hex(), graph_hash(*g).hex());
  const std::string in = "  input x: f32[3, 4]\n";
  const ErrorCase cases[] = {
      {"expand(x, shape=[3, 5])",
       "expand: 'x' (f32[3, 4]) does not broadcast to [3, 5]: its dim 1 is 4 against 5"},
      {"expand(x, shape=[4])", "expand of 'x' (f32[3, 4]) needs 2 to 6 dims, got 1"},
      {"expand(x, shape=[-1, 3, 4])", "expand: dim 0 is -1 where 'x' (f32[3, 4]) has no dim"},
      {"expand(x, shape=[2, 0, 4])", "expand: dim 1 is 0; a dimension is at least 1"},
      {"expand(x, shape=[T, 3, 4])", "'T' is not a declared dim"},
      {"expand(x)", "expand needs a shape: expand(x, shape=[B, 4, -1, 64])"},
      {"expand(x, dims=[3, 4])", "expand has no argument 'dims'"},
  };
  expect_errors(in, cases);
}

// cumsum(x, axis): every dtype but bool, the result x's type; the axis printed only when it is
// not the last, and hashed.
TEST(Dtypes, CumsumRunsAlongOneAxisOfANumericTensor) {
  const char* text =
      "graph g {\n  dim S: 1..64\n  input mask: i64[2, S]\n  input x: bf16[S, 3]\n"
      "  p = sub(mul(cumsum(mask), mask), 1)\n  c = cumsum(x, axis=0)\n"
      "  k = cumsum(cast(ne(mask, 0), to=i32))\n  output p, c, k\n}\n";
  auto g = parse_round_trip(text);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(to_string(g->node(g->outputs()[0]).type), "i64[2, S]");
  EXPECT_EQ(to_string(g->node(g->outputs()[1]).type), "bf16[S, 3]");
  EXPECT_EQ(to_string(g->node(g->outputs()[2]).type), "i32[2, S]");
  auto last = parse_graph("graph g {\n  input x: f32[4, 8]\n  y = cumsum(x, axis=-1)\n"
                          "  output y\n}\n", "g.kg");
  auto first = parse_graph("graph g {\n  input x: f32[4, 8]\n  y = cumsum(x, axis=0)\n"
                           "  output y\n}\n", "g.kg");
  ASSERT_TRUE(last && first);
  EXPECT_EQ(print_graph(*last), "graph g {\n  input x: f32[4, 8]\n  y = cumsum(x)\n  output y\n}\n");
  EXPECT_NE(graph_hash(*last).hex(), graph_hash(*first).hex());
  const std::string in = "  input x: f32[3, 4]\n  input b: bool[3, 4]\n  input s: f32[]\n";
  const ErrorCase cases[] = {
      {"cumsum(b)", "g.kg:5:7: error: cumsum adds numbers; 'b' (bool[3, 4]) is bool: cast it to "
                    "i64 (or i32) first, as PyTorch's cumsum does"},
      {"cumsum(x, axis=2)", "cumsum axis 2 is out of range for 'x' (f32[3, 4]) (rank 2)"},
      {"cumsum(s)", "cumsum axis -1 is out of range for 's' (f32[]) (rank 0)"},
      {"cumsum(x, keepdim=true)", "expected axis"},
      {"cumsum(x, x)", "cumsum takes 1 operand, got 2"},
  };
  expect_errors(in, cases);
}

// roll(x, shift, axis): any dtype, the shift kept as written (reduced mod the dim where it
// runs), along a symbolic dim too.
TEST(Dtypes, RollRotatesAlongOneAxis) {
  const char* text =
      "graph g {\n  dim S: 1..64\n  input p: i64[2, S]\n  input keep: bool[S, 3]\n"
      "  d = sub(p, roll(p, shift=1))\n  k = roll(keep, shift=-70, axis=0)\n"
      "  output d, k\n}\n";
  auto g = parse_round_trip(text);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(to_string(g->node(g->outputs()[1]).type), "bool[S, 3]");
  auto one = parse_graph("graph g {\n  input x: f32[4, 8]\n  y = roll(x, shift=1, axis=-1)\n"
                         "  output y\n}\n", "g.kg");
  auto nine = parse_graph("graph g {\n  input x: f32[4, 8]\n  y = roll(x, shift=9)\n"
                          "  output y\n}\n", "g.kg");
  ASSERT_TRUE(one && nine);
  EXPECT_EQ(print_graph(*one),
            "graph g {\n  input x: f32[4, 8]\n  y = roll(x, shift=1)\n  output y\n}\n");
  // The same values, written differently: the hash follows the text, as slice's does not.
  EXPECT_NE(graph_hash(*one).hex(), graph_hash(*nine).hex());
  const std::string in = "  input x: f32[3, 4]\n  input s: f32[]\n";
  const ErrorCase cases[] = {
      {"roll(x)", "g.kg:4:7: error: roll needs a shift: roll(x, shift=1, axis=-1)"},
      {"roll(x, shift=1, axis=2)", "roll axis 2 is out of range for 'x' (f32[3, 4]) (rank 2)"},
      {"roll(s, shift=1)", "roll axis -1 is out of range for 's' (f32[]) (rank 0)"},
      {"roll(x, shift=1.5)", "an integer"},
      {"roll(x, shift=4294967296)", "an integer"},
      {"roll(x, shifts=1)", "expected shift or axis"},
  };
  expect_errors(in, cases);
}

// attention's mask may be written as an expression (mask=where(...)); the printer names it.
TEST(Dtypes, AnAttentionMaskMayBeAnExpression) {
  const char* inline_text =
      "graph g {\n  input q: f32[2, 4, 8, 16]\n  input ids: i64[2, 8]\n"
      "  o = attention(q, q, q, mask=reshape(where(ne(ids, 0), 0.0, -inf), shape=[2, 1, 1, 8]), "
      "causal=true)\n  output o\n}\n";
  const char* named_text =
      "graph g {\n  input q: f32[2, 4, 8, 16]\n  input ids: i64[2, 8]\n"
      "  m = reshape(where(ne(ids, 0), 0.0, -inf), shape=[2, 1, 1, 8])\n"
      "  o = attention(q, q, q, mask=m, causal=true)\n  output o\n}\n";
  auto a = parse_graph(inline_text, "g.kg");
  auto b = parse_graph(named_text, "g.kg");
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(graph_hash(*a).hex(), graph_hash(*b).hex());
  auto again = parse_graph(print_graph(*a), "g.kg");
  ASSERT_TRUE(again) << print_graph(*a);
  EXPECT_EQ(graph_hash(*again).hex(), graph_hash(*a).hex());
  EXPECT_NE(error_of("  input q: f32[2, 8]\n", "attention(q, q, q, scale=sqrt(q))")
                .find("expected a number for 'scale', got a call of 'sqrt'"),
            std::string::npos);
  EXPECT_NE(error_of("  input q: f32[2, 8]\n", "attention(q, q, q, mask=frob(q))")
                .find("unknown op 'frob'"),
            std::string::npos);
}

TEST(Dtypes, TheBuilderChecksLiteralsByValue) {
  Builder b("g");
  NodeId i = b.add_input("i", TensorType{DType::i32, Shape::make({4}).value()}).value();
  NodeId c = b.add_input("c", TensorType{DType::boolean, Shape::make({4}).value()}).value();
  EXPECT_FALSE(b.add_binary_literal(OpKind::add, i, 0.5, LiteralSide::rhs));
  EXPECT_FALSE(b.add_binary_literal(OpKind::add, i, 1.0 / 0.0, LiteralSide::rhs));
  EXPECT_TRUE(b.add_binary_literal(OpKind::add, i, -2147483648.0, LiteralSide::rhs));
  EXPECT_FALSE(b.add_binary_literal(OpKind::eq, c, 2.0, LiteralSide::rhs));
  auto w = b.add_where(c, std::nullopt, std::nullopt, 0.0, -1.0 / 0.0);
  ASSERT_TRUE(w);
  EXPECT_EQ(b.node(*w).type.dtype, DType::f32);
  EXPECT_EQ(b.node(*w).attrs.literal_side, LiteralSide::both);
  // Builder::add takes where's literals as attrs.
  Attrs attrs;
  attrs.literal_side = LiteralSide::lhs;
  attrs.literal = 3.0;
  auto generic = b.add(OpKind::where, {c, i}, attrs);
  ASSERT_TRUE(generic) << generic.error().message;
  EXPECT_EQ(b.node(*generic).type.dtype, DType::i32);
  EXPECT_EQ(b.node(*generic).attrs.literal, 3.0);
}

}  // namespace
}  // namespace kiln::ir
