// Tests of the C++ builder: inference, validation and naming of nested values.
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::ir {
namespace {

TensorType f32(std::vector<int64_t> dims) {
  return TensorType{DType::f32, Shape::make(std::move(dims)).value()};
}

TEST(Builder, InfersBatchedMatmulWithBroadcastBatch) {
  Builder b("g");
  NodeId a = b.add_input("a", f32({8, 16, 32})).value();
  NodeId w = b.add_input("w", f32({32, 64})).value();
  auto c = b.add_matmul(a, w);
  ASSERT_TRUE(c);
  EXPECT_EQ(b.node(*c).type.shape.dims(), (std::vector<int64_t>{8, 16, 64}));
  NodeId a1 = b.add_input("a1", f32({1, 32, 16})).value();
  auto d = b.add_matmul(a1, a, true, true);  // [1,16,32] x [8,32,16]
  ASSERT_TRUE(d);
  EXPECT_EQ(b.node(*d).type.shape.dims(), (std::vector<int64_t>{8, 16, 16}));
}

TEST(Builder, RejectsMismatchedBatch) {
  Builder b("g");
  NodeId a = b.add_input("a", f32({4, 8, 8})).value();
  NodeId c = b.add_input("c", f32({3, 8, 8})).value();
  auto bad = b.add_matmul(a, c);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("batch dimensions differ"), std::string::npos);
}

TEST(Builder, BroadcastsElementwiseNumpyStyle) {
  Builder b("g");
  NodeId x = b.add_input("x", f32({4, 1, 8})).value();
  NodeId y = b.add_input("y", f32({3, 1})).value();
  auto z = b.add_binary(OpKind::mul, x, y);
  ASSERT_TRUE(z);
  EXPECT_EQ(b.node(*z).type.shape.dims(), (std::vector<int64_t>{4, 3, 8}));
}

TEST(Builder, RejectsMixedDtypes) {
  Builder b("g");
  NodeId x = b.add_input("x", f32({4})).value();
  NodeId y = b.add_input("y", TensorType{DType::bf16, Shape::make({4}).value()}).value();
  auto z = b.add_binary(OpKind::add, x, y);
  ASSERT_FALSE(z);
  EXPECT_NE(z.error().message.find("cast one of them"), std::string::npos);
}

TEST(Builder, RejectsOperandsFromNowhere) {
  Builder b("g");
  auto r = b.add_unary(OpKind::relu, 7);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("does not name a value"), std::string::npos);
  EXPECT_FALSE(b.add_unary(OpKind::add, 0));
  EXPECT_FALSE(b.add_binary(OpKind::relu, 0, 0));
}

TEST(Builder, NormalisesNegativeSoftmaxAxis) {
  Builder b("g");
  NodeId x = b.add_input("x", f32({2, 3, 4})).value();
  EXPECT_EQ(b.node(b.add_softmax(x, -2).value()).attrs.axis, 1);
  EXPECT_FALSE(b.add_softmax(x, 3));
  EXPECT_FALSE(b.add_softmax(x, -4));
}

// A float literal may be an infinity (where(keep, 0.0, -inf), maximum(x, -inf)), never NaN.
TEST(Builder, RejectsANaNLiteralAndTakesInfinities) {
  Builder b("g");
  NodeId x = b.add_input("x", f32({2})).value();
  EXPECT_FALSE(b.add_binary_literal(OpKind::mul, x, std::nan(""), LiteralSide::rhs));
  EXPECT_TRUE(b.add_binary_literal(OpKind::maximum, x, -1.0 / 0.0, LiteralSide::rhs));
}

TEST(Builder, FinishNamesSharedUnnamedValues) {
  Builder b("g");
  NodeId x = b.add_input("x", f32({4})).value();
  NodeId r = b.add_unary(OpKind::relu, x).value();  // unnamed, used twice
  NodeId y = b.add_binary(OpKind::add, r, r, "y").value();
  ASSERT_TRUE(b.add_output(y));
  auto g = std::move(b).finish();
  ASSERT_TRUE(g);
  EXPECT_EQ(g->node(r).name, "t0");
  EXPECT_EQ(print_graph(*g), "graph g {\n  input x: f32[4]\n  t0 = relu(x)\n  y = add(t0, t0)\n"
                             "  output y\n}\n");
}

TEST(Builder, OutOfOrderUnnamedValuesKeepTheirHashThroughText) {
  // b is created before a but used second: printing both nested would swap them on reparse.
  Builder b("g");
  NodeId x = b.add_input("x", f32({4})).value();
  NodeId second = b.add_unary(OpKind::exp, x).value();
  NodeId first = b.add_unary(OpKind::relu, x).value();
  NodeId y = b.add_binary(OpKind::sub, first, second, "y").value();
  ASSERT_TRUE(b.add_output(y));
  auto g = std::move(b).finish().value();
  auto reparsed = parse_graph(print_graph(g), "t.kg");
  ASSERT_TRUE(reparsed) << reparsed.error().message;
  EXPECT_EQ(graph_hash(*reparsed), graph_hash(g));
}

TEST(Builder, DeepUnnamedChainPrintsWithBoundedNesting) {
  Builder b("g");
  NodeId v = b.add_input("x", f32({4})).value();
  for (int i = 0; i < 5000; ++i) v = b.add_unary(OpKind::neg, v).value();
  ASSERT_TRUE(b.add_output(v));
  auto g = std::move(b).finish().value();
  auto reparsed = parse_graph(print_graph(g), "t.kg");
  ASSERT_TRUE(reparsed) << reparsed.error().message;
  EXPECT_EQ(graph_hash(*reparsed), graph_hash(g));
}

TEST(Builder, FinishRefusesUnusedValuesAndMissingOutput) {
  Builder none("g");
  NodeId x = none.add_input("x", f32({4})).value();
  (void)none.add_unary(OpKind::relu, x, "r");
  auto g = std::move(none).finish();
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("no output"), std::string::npos);

  Builder unused("g");
  NodeId x2 = unused.add_input("x", f32({4})).value();
  NodeId r = unused.add_unary(OpKind::relu, x2, "r").value();
  (void)unused.add_unary(OpKind::exp, x2, "e");
  ASSERT_TRUE(unused.add_output(r));
  auto g2 = std::move(unused).finish();
  ASSERT_FALSE(g2);
  EXPECT_NE(g2.error().message.find("'e'"), std::string::npos);
}

TEST(Builder, OutputMustBeComputedAndUnique) {
  Builder b("g");
  NodeId x = b.add_input("x", f32({4})).value();
  EXPECT_FALSE(b.add_output(x));
  NodeId r = b.add_unary(OpKind::relu, x, "r").value();
  EXPECT_TRUE(b.add_output(r));
  EXPECT_FALSE(b.add_output(r));
}

}  // namespace
}  // namespace kiln::ir
