// One test per class of bad graph text: each names file:line:col and says what was expected.
#include "ir/parse.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace kiln::ir {
namespace {

struct BadGraph {
  const char* name;
  std::string source;
  int line;
  int column;
  const char* says;
};

std::string wrap(const std::string& body) {
  return "graph g {\n  input x: f32[4, 8]\n  input w: f32[8, 16]\n" + body + "}\n";
}

class ParseError : public ::testing::TestWithParam<BadGraph> {};

TEST_P(ParseError, IsLocatedAndExplained) {
  const BadGraph& bad = GetParam();
  auto graph = parse_graph(bad.source, "bad.kg");
  ASSERT_FALSE(graph) << "parsed: " << bad.source;
  std::string prefix = "bad.kg:" + std::to_string(bad.line) + ":" + std::to_string(bad.column) +
                       ": error: ";
  const std::string& message = graph.error().message;
  EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
  EXPECT_NE(message.find(bad.says), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line only: " << message;
}

const BadGraph k_bad_graphs[] = {
    {"EmptyFile", "", 1, 1, "empty graph file"},
    {"OnlyComments", "# nothing here\n\n", 3, 1, "empty graph file"},
    {"RandomBytes", std::string("\x07\xff\x13graph", 8), 1, 1, "unexpected character '\\x07'"},
    {"NotAGraph", "grph g {}", 1, 1, "expected 'graph'"},
    {"MissingBrace", "graph g\n  input x: f32[4]\n", 2, 3, "expected '{'"},
    {"UnclosedGraph", "graph g {\n  input x: f32[4]\n", 3, 1, "expected '}'"},
    {"TrailingText", wrap("  y = relu(x)\n  output y\n") + "extra", 7, 1,
     "expected end of file"},
    {"DuplicateInput", "graph g {\n  input x: f32[4]\n  input x: f32[4]\n}\n", 3, 9,
     "'x' is already defined at 2:9"},
    {"DuplicateValue", wrap("  y = relu(x)\n  y = exp(x)\n  output y\n"), 5, 3,
     "'y' is already defined at 4:3"},
    {"UndefinedValue", wrap("  y = relu(z)\n  output y\n"), 4, 12, "undefined value 'z'"},
    {"UndefinedOutput", wrap("  y = relu(x)\n  output q\n"), 5, 10, "undefined value 'q'"},
    {"BadDtype", "graph g {\n  input x: f64[4]\n}\n", 2, 12, "unknown dtype 'f64'"},
    {"NegativeDim", "graph g {\n  input x: f32[4, -2]\n}\n", 2, 19,
     "dimension -2 must be positive"},
    {"ZeroDim", "graph g {\n  input x: f32[0]\n}\n", 2, 16, "dimension 0 must be positive"},
    {"Dim2Pow63", "graph g {\n  input x: f32[9223372036854775808]\n}\n", 2, 16,
     "dimension 9223372036854775808 is too large"},
    {"ElementCountOverflow", "graph g {\n  input x: f32[4294967296, 4294967296]\n}\n", 2, 15,
     "2^31 - 1"},
    {"RankSeven", "graph g {\n  input x: f32[1, 2, 3, 4, 5, 6, 7]\n}\n", 2, 34, "at most 6 dimensions"},
    {"FractionalDim", "graph g {\n  input x: f32[2.5]\n}\n", 2, 16, "positive integer"},
    {"MatmulShapeMismatch", wrap("  y = matmul(w, x)\n  output y\n"), 4, 7,
     "matmul inner dimensions differ"},
    {"MatmulRankOne",
     "graph g {\n  input v: f32[8]\n  input w: f32[8, 16]\n  y = matmul(v, w)\n  output y\n}\n",
     4, 7, "2-D to 6-D"},
    {"BadBroadcast", wrap("  y = add(x, w)\n  output y\n"), 4, 7, "do not broadcast"},
    {"DtypeMismatch",
     "graph g {\n  input x: f32[4]\n  input h: bf16[4]\n  y = mul(x, h)\n  output y\n}\n", 4, 7,
     "differ in dtype"},
    {"UnknownOp", wrap("  y = frobnicate(x)\n  output y\n"), 4, 7, "unknown op 'frobnicate'"},
    {"InputIsNotAnOp", wrap("  y = input(x)\n  output y\n"), 4, 7, "unknown op 'input'"},
    {"MissingOutput", wrap("  y = relu(x)\n"), 5, 1, "has no output"},
    {"UnusedValue", wrap("  y = relu(x)\n  z = exp(x)\n  output y\n"), 5, 3,
     "value 'z' is never used"},
    {"OutputOfInput", wrap("  output x\n"), 4, 10, "is a graph input"},
    {"DuplicateOutput", wrap("  y = relu(x)\n  output y, y\n"), 5, 13, "already an output"},
    {"WrongArity", wrap("  y = relu(x, w)\n  output y\n"), 4, 7, "relu takes 1 operand, got 2"},
    {"LiteralAsMatmulOperand", wrap("  y = matmul(x, 2.0)\n  output y\n"), 4, 17,
     "must be a tensor, got the literal 2.0"},
    {"TwoLiterals", wrap("  y = add(1.0, 2.0)\n  output y\n"), 4, 7, "at least one tensor"},
    {"UnknownArgument", wrap("  y = matmul(x, w, transpose=true)\n  output y\n"), 4, 30,
     "no argument 'transpose'"},
    {"DuplicateArgument",
     wrap("  y = matmul(x, w, transpose_a=false, transpose_a=false)\n  output y\n"), 4, 39,
     "given twice"},
    {"BadBoolean", wrap("  y = matmul(x, w, transpose_b=yes)\n  output y\n"), 4, 32,
     "expected true or false"},
    {"BadPrecision", wrap("  y = matmul(x, w, precision=low)\n  output y\n"), 4, 30,
     "highest, high, tf32x3 or medium"},
    {"AutoPrecisionOnOp", wrap("  y = matmul(x, w, precision=auto)\n  output y\n"), 4, 7,
     "graph-wide mode"},
    {"PrecisionOnHalfMatmul",
     "graph g {\n  input a: bf16[4, 8]\n  input b: bf16[8, 4]\n"
     "  y = matmul(a, b, precision=high)\n  output y\n}\n",
     4, 7, "applies to f32 matmuls"},
    {"OutDtypeOfF32Operands", wrap("  y = matmul(x, w, out_dtype=bf16)\n  output y\n"), 4, 7,
     "matmul out_dtype=bf16 of f32 operands: a matmul gives its operands' dtype, or f32 from "
     "f16 or bf16 operands"},
    {"OutDtypeOtherHalf",
     "graph g {\n  input a: bf16[4, 8]\n  input b: bf16[8, 4]\n"
     "  y = matmul(a, b, out_dtype=f16)\n  output y\n}\n",
     4, 7, "out_dtype=f16 of bf16 operands"},
    {"OutDtypeInteger",
     "graph g {\n  input a: f16[4, 8]\n  input b: f16[8, 4]\n"
     "  y = matmul(a, b, out_dtype=i32)\n  output y\n}\n",
     4, 7, "out_dtype=i32 of f16 operands"},
    {"OutDtypeUnknown", wrap("  y = matmul(x, w, out_dtype=f64)\n  output y\n"), 4, 30,
     "a dtype (f32, "},
    {"CastWithoutTarget", wrap("  y = cast(x)\n  output y\n"), 4, 7, "needs a target dtype"},
    {"CastToUnknownDtype", wrap("  y = cast(x, to=f8)\n  output y\n"), 4, 18, "a dtype"},
    {"SoftmaxAxisOutOfRange", wrap("  y = softmax(x, axis=2)\n  output y\n"), 4, 7,
     "axis 2 is out of range"},
    {"SoftmaxAxisNotInteger", wrap("  y = softmax(x, axis=last)\n  output y\n"), 4, 23,
     "an integer axis"},
    {"PositionalAfterNamed", wrap("  y = softmax(axis=0, x)\n  output y\n"), 4, 23,
     "operands must come before named arguments"},
    {"RenameOnly", wrap("  y = x\n  output y\n"), 4, 7, "only renames a value"},
    {"LiteralStatement", wrap("  y = 3.0\n  output y\n"), 4, 7, "got the literal 3.0"},
    {"MissingEquals", wrap("  y relu(x)\n  output y\n"), 4, 5, "expected '='"},
    {"UnclosedCall", wrap("  y = relu(x\n  output y\n"), 5, 3, "expected ',' or ')'"},
    {"OpWithoutParens", wrap("  y = relu\n  output y\n"), 5, 3, "expected '(' after op 'relu'"},
    {"LiteralOutOfRange", wrap("  y = mul(x, 1e999)\n  output y\n"), 4, 14, "out of range"},
    {"StrayPunctuation", wrap("  y = relu(x) @\n  output y\n"), 4, 15, "unexpected character '@'"},
    {"NameEndingInADot", wrap("  y. = relu(x)\n  output y\n"), 4, 4,
     "'.' after a name (a name's segments are joined by single dots"},
    {"DoubledDotInAName", wrap("  layer..y = relu(x)\n  output y\n"), 4, 8, "'.' after a name"},
    {"NameStartingWithADot", wrap("  .y = relu(x)\n  output y\n"), 4, 3,
     "unexpected character '.'"},
    {"ValueNamedLikeAnOp", wrap("  cos = relu(x)\n  output cos\n"), 4, 3,
     "'cos' is an op; a value needs another name"},
    {"InputNamedLikeAnOp", "graph g {\n  input matmul: f32[4]\n}\n", 2, 9,
     "'matmul' is an op; an input needs another name"},
    {"InputNamedLikeADtype", "graph g {\n  input i64: i64[4]\n}\n", 2, 9,
     "'i64' is a dtype; an input needs another name"},
    {"ValueNamedLikeADtype", wrap("  bool = relu(x)\n  output bool\n"), 4, 3,
     "'bool' is a dtype; a value needs another name"},
    {"InputNamedLikeADim", "graph g {\n  dim B: 1..8\n  input B: f32[B]\n}\n", 3, 9,
     "'B' is the dim declared at 2:7; an input needs another name"},
    {"ValueNamedLikeADim", "graph g {\n  dim S: 1..8\n  input x: f32[S]\n  S = relu(x)\n}\n",
     4, 3, "'S' is the dim declared at 2:7; a value needs another name"},
    {"DimNamedLikeAnOp", "graph g {\n  dim exp: 1..8\n}\n", 2, 7,
     "'exp' is an op; a dim needs another name"},
    {"DimNamedLikeAValue", "graph g {\n  r = arange(4)\n  dim r: 1..8\n}\n", 3, 7,
     "'r' is the value defined at 2:3; a dim needs another name"},
    {"NonAsciiByteInAValueName", wrap("  y = rel\xc3\xa9(x)\n  output y\n"), 4, 10,
     "'\\xc3' in a name (names are ASCII)"},
    {"NonAsciiByteInAnAssignedName", wrap("  y\xc3\xa9 = relu(x)\n  output y\n"), 4, 4,
     "'\\xc3' in a name"},
    {"SoftmaxAxisAsAList", wrap("  y = softmax(x, axis=[0])\n  output y\n"), 4, 23,
     "expected an integer axis for 'axis', got a list"},
    {"SumAxisAsACall", wrap("  y = sum(x, axis=relu(x))\n  output y\n"), 4, 19,
     "expected an integer axis for 'axis', got a call of 'relu'"},
    {"SumKeepdimAsAList", wrap("  y = sum(x, keepdim=[true])\n  output y\n"), 4, 22,
     "expected true or false for 'keepdim', got a list"},
    {"SliceAxisAsAList", wrap("  y = slice(x, axis=[0], start=0, end=2)\n  output y\n"), 4, 21,
     "expected an integer axis for 'axis', got a list"},
    {"NormEpsAsAList", wrap("  y = rms_norm(x, x, eps=[1])\n  output y\n"), 4, 26,
     "expected a positive number for 'eps', got a list"},
    {"MatmulTransposeAsAList", wrap("  y = matmul(x, w, transpose_b=[true])\n  output y\n"), 4,
     32, "expected true or false for 'transpose_b', got a list"},
    {"GeluTanhSpellingIsAnOpName", wrap("  gelu = relu(x)\n  output gelu\n"), 4, 3,
     "'gelu' is an op"},
};

INSTANTIATE_TEST_SUITE_P(Parser, ParseError, ::testing::ValuesIn(k_bad_graphs),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Parser, DeepNestingIsALocatedErrorNotAStackOverflow) {
  const int depth = 200000;
  std::string text = "graph g {\n  input x: f32[4]\n  y = ";
  for (int i = 0; i < depth; ++i) text += "relu(";
  text += "x";
  text.append(depth, ')');
  text += "\n  output y\n}\n";
  auto graph = parse_graph(text, "deep.kg");
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.error().message.rfind("deep.kg:3:", 0), 0u) << graph.error().message;
  EXPECT_NE(graph.error().message.find("nest deeper than 256"), std::string::npos);
}

TEST(Parser, NestingAtTheLimitParses) {
  std::string text = "graph g {\n  input x: f32[4]\n  y = ";
  for (int i = 0; i < k_max_nesting; ++i) text += "neg(";
  text += "x";
  text.append(k_max_nesting, ')');
  text += "\n  output y\n}\n";
  auto graph = parse_graph(text, "deep.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  EXPECT_EQ(graph->nodes().size(), size_t(k_max_nesting) + 1);
}

TEST(Parser, RandomBytesNeverCrashAndAlwaysLocate) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 2000; ++i) {
    std::string text(static_cast<size_t>(rng() % 200), '\0');
    for (char& c : text) c = static_cast<char>(rng() % 256);
    auto graph = parse_graph(text, "noise.kg");
    ASSERT_FALSE(graph);
    EXPECT_EQ(graph.error().message.rfind("noise.kg:", 0), 0u) << graph.error().message;
  }
}

TEST(Parser, UnreadableFileNamesTheFile) {
  auto graph = parse_graph_file("/nonexistent/dir/g.kg");
  ASSERT_FALSE(graph);
  EXPECT_EQ(graph.error().message,
            "/nonexistent/dir/g.kg: error: cannot read: No such file or directory");
  auto dir = parse_graph_file("/");
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.error().message.find("Is a directory"), std::string::npos);
}

}  // namespace
}  // namespace kiln::ir
