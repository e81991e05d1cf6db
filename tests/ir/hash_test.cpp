// Tests of the graph hash: blind to names, comments and layout; sensitive to everything else.
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "random_graph.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace kiln::ir {
namespace {

const char* k_base = R"(graph g {
  input x: f32[4, 8]
  input w: f32[8, 16]
  input b: f32[16]
  h = gelu(add(matmul(x, w), b))
  y = softmax(mul(h, 0.5))
  output y
})";

std::string hash_of(const std::string& text) {
  auto graph = parse_graph(text, "t.kg");
  EXPECT_TRUE(graph) << graph.error().message << "\n" << text;
  return graph ? graph_hash(*graph).hex() : std::string();
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(Hash, Is32HexDigits) {
  std::string hex = hash_of(k_base);
  EXPECT_EQ(hex.size(), 32u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(Hash, IgnoresValueNamesAndGraphName) {
  const char* renamed = R"(graph other {
  input input0: f32[4, 8]
  input weight: f32[8, 16]
  input bias: f32[16]
  hidden = gelu(add(matmul(input0, weight), bias))
  probs = softmax(mul(hidden, 0.5))
  output probs
})";
  EXPECT_EQ(hash_of(renamed), hash_of(k_base));
}

TEST(Hash, IgnoresCommentsAndWhiteSpace) {
  std::string spaced = "# a comment\n\n" + replaced(k_base, "h = gelu(", "h   =\tgelu(  # why\n");
  spaced = replaced(spaced, "output y", "output    y   ");
  EXPECT_EQ(hash_of(spaced), hash_of(k_base));
}

TEST(Hash, NestedAndFlatFormsAgree) {
  std::string flat = replaced(k_base, "h = gelu(add(matmul(x, w), b))",
                              "m = matmul(x, w)\n  s = add(m, b)\n  h = gelu(s)");
  EXPECT_EQ(hash_of(flat), hash_of(k_base));
}

TEST(Hash, EquivalentSpellingsAgree) {
  EXPECT_EQ(hash_of(replaced(k_base, "softmax(mul(h, 0.5))", "softmax(mul(h, 5e-1), axis=1)")),
            hash_of(k_base));
  EXPECT_EQ(hash_of(replaced(k_base, "matmul(x, w)", "matmul(x, w, transpose_a=false)")),
            hash_of(k_base));
}

struct Change {
  const char* what;
  const char* from;
  const char* to;
};

class HashSensitivity : public ::testing::TestWithParam<Change> {};

TEST_P(HashSensitivity, ChangesTheHash) {
  const Change& c = GetParam();
  EXPECT_NE(hash_of(replaced(k_base, c.from, c.to)), hash_of(k_base)) << c.what;
}

const Change k_changes[] = {
    {"Op", "gelu(", "silu("},
    {"BinaryOp", "add(matmul", "sub(matmul"},
    {"OperandOrder", "add(matmul(x, w), b)", "add(b, matmul(x, w))"},
    {"LiteralValue", "0.5", "0.25"},
    {"LiteralSide", "mul(h, 0.5)", "mul(0.5, h)"},
    {"InputDim", "input b: f32[16]", "input b: f32[1, 16]"},
    {"TransposeB", "input w: f32[8, 16]\n  input b: f32[16]\n  h = gelu(add(matmul(x, w), b))",
     "input w: f32[16, 8]\n  input b: f32[16]\n  h = gelu(add(matmul(x, w, transpose_b=true), b))"},
    {"PrecisionHighest", "matmul(x, w)", "matmul(x, w, precision=highest)"},
    {"PrecisionHigh", "matmul(x, w)", "matmul(x, w, precision=high)"},
    {"PrecisionTf32x3", "matmul(x, w)", "matmul(x, w, precision=tf32x3)"},
    {"PrecisionMedium", "matmul(x, w)", "matmul(x, w, precision=medium)"},
    {"SoftmaxAxis", "softmax(mul(h, 0.5))", "softmax(mul(h, 0.5), axis=0)"},
    {"InputOrder", "input x: f32[4, 8]\n  input w: f32[8, 16]",
     "input w: f32[8, 16]\n  input x: f32[4, 8]"},
    {"ExtraOutput", "output y", "output y, h"},
    {"Cast", "y = softmax(mul(h, 0.5))\n  output y",
     "y = cast(softmax(mul(h, 0.5)), to=bf16)\n  output y"},
};

INSTANTIATE_TEST_SUITE_P(Hash, HashSensitivity, ::testing::ValuesIn(k_changes),
                         [](const auto& info) { return std::string(info.param.what); });

TEST(Hash, DtypeChangesTheHash) {
  std::set<std::string> hashes;
  for (const char* dtype : {"f32", "f16", "bf16"}) {
    hashes.insert(hash_of(std::string("graph g { input x: ") + dtype +
                          "[4]\n y = relu(x)\n output y }"));
  }
  EXPECT_EQ(hashes.size(), 3u);
}

// out_dtype=f32 on f16 or bf16 operands changes the result's dtype, so the hash; written as the
// operands' dtype it is the default: the same graph, printed without it. The canonical bytes
// carry it in the result's dtype, and rebuild it.
TEST(Hash, AMatmulsOutDtypeIsItsResultsDtype) {
  auto text = [](const std::string& args) {
    return "graph g { input x: bf16[4, 8]\n input w: bf16[8, 16]\n y = matmul(x, w" + args +
           ")\n output y }";
  };
  EXPECT_NE(hash_of(text(", out_dtype=f32")), hash_of(text("")));
  EXPECT_EQ(hash_of(text(", out_dtype=bf16")), hash_of(text("")));
  auto wide = parse_graph(text(", transpose_a=false, out_dtype=f32"), "g.kg");
  ASSERT_TRUE(wide) << wide.error().message;
  const Node& y = wide->node(wide->outputs()[0]);
  EXPECT_EQ(y.type.dtype, DType::f32);
  EXPECT_EQ(y.attrs.out_dtype, DType::f32);
  EXPECT_NE(print_graph(*wide).find("y = matmul(x, w, out_dtype=f32)"), std::string::npos);
  auto plain = parse_graph(text(", out_dtype=bf16"), "g.kg");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->node(plain->outputs()[0]).attrs.out_dtype, std::nullopt);
  EXPECT_NE(print_graph(*plain).find("y = matmul(x, w)\n"), std::string::npos);
  std::string bytes = canonical_bytes(*wide);
  auto back = graph_from_canonical(bytes, "back");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->node(back->outputs()[0]).attrs.out_dtype, DType::f32);
  EXPECT_EQ(canonical_bytes(*back), bytes);
  EXPECT_EQ(graph_hash(*back), graph_hash(*wide));
}

TEST(Hash, CastTargetChangesTheHash) {
  std::string to_bf16 = replaced(k_base, "y = softmax(mul(h, 0.5))", "y = cast(h, to=bf16)");
  std::string to_f16 = replaced(k_base, "y = softmax(mul(h, 0.5))", "y = cast(h, to=f16)");
  EXPECT_NE(hash_of(to_bf16), hash_of(to_f16));
}

TEST(Hash, DistinctRandomGraphsHashApart) {
  std::set<std::string> canon;
  std::set<std::string> hashes;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    Graph g = testing::random_graph(seed);
    canon.insert(canonical_bytes(g));
    hashes.insert(graph_hash(g).hex());
  }
  EXPECT_EQ(hashes.size(), canon.size());
  EXPECT_GT(canon.size(), 250u);
}

TEST(Hash, RandomRenamingAndRespacingKeepTheHash) {
  std::mt19937_64 rng(7);
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Graph g = testing::random_graph(seed);
    std::string text = print_graph(g);
    // Respace: every ", " and " = " gets random blanks, newlines or a comment.
    std::string noisy;
    for (char c : text) {
      noisy += c;
      if (c == ',' || c == '(' || c == '=') {
        switch (rng() % 3) {
          case 0: noisy += "  "; break;
          case 1: noisy += "\n\t"; break;
          default: noisy += " # note\n"; break;
        }
      }
    }
    // Rename: prefix every value name (names are v<N>, t<N>, in<N>; the literal inf is none).
    std::string renamed;
    for (size_t i = 0; i < noisy.size(); ++i) {
      bool starts_name = (noisy[i] == 'v' || noisy[i] == 't' || noisy.compare(i, 2, "in") == 0) &&
                         i + 1 < noisy.size() && (isdigit(noisy[i + 1]) || noisy[i] == 'i') &&
                         (i == 0 || !isalnum(noisy[i - 1]));
      bool infinity = noisy.compare(i, 3, "inf") == 0 &&
                      (i + 3 >= noisy.size() || !isalnum(noisy[i + 3]));
      if (starts_name && !infinity && noisy.compare(i, 5, "input") != 0) renamed += "renamed_";
      renamed += noisy[i];
    }
    auto again = parse_graph(renamed, "noisy.kg");
    ASSERT_TRUE(again) << again.error().message << "\n" << renamed;
    EXPECT_EQ(graph_hash(*again), graph_hash(g)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace kiln::ir

namespace kiln::ir {
namespace {

// `kiln show KEY --graph` rebuilds a cached graph from the canonical bytes its key hashes.
TEST(CanonicalBytes, RebuildTheSameGraph) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    Graph g = testing::random_graph(seed);
    std::string bytes = canonical_bytes(g);
    auto back = graph_from_canonical(bytes, "back");
    ASSERT_TRUE(back) << "seed " << seed << ": " << back.error().message;
    EXPECT_EQ(canonical_bytes(*back), bytes) << "seed " << seed;
    auto reparsed = parse_graph(print_graph(*back), "printed");
    ASSERT_TRUE(reparsed) << reparsed.error().message;
    EXPECT_EQ(graph_hash(*reparsed), graph_hash(g)) << "seed " << seed;
  }
}

TEST(CanonicalBytes, DamagedBytesAreRefusedNotTrusted) {
  std::string bytes = canonical_bytes(testing::random_graph(7));
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(graph_from_canonical(bytes.substr(0, n), "g")) << "truncated to " << n;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 3000; ++i) {
    std::string damaged = bytes;
    damaged[rng() % damaged.size()] = static_cast<char>(rng());
    auto g = graph_from_canonical(damaged, "g");  // either a valid graph or an error, no crash
    if (g) {
      EXPECT_EQ(canonical_bytes(*g), damaged);
    }
  }
}

}  // namespace
}  // namespace kiln::ir
