// Matmul in fp64: 2-D, each transpose, batched with a shared or broadcast batch dim.
#include "test_util.h"

#include <gtest/gtest.h>

namespace kiln::reference {
namespace {

using testing::f32;
using testing::parse_or_die;
using testing::run_values;

// a = [[1, 2, 3], [4, 5, 6]], b = [[7, 8], [9, 10], [11, 12]], a b = [[58, 64], [139, 154]].
const std::vector<double> k_a{1, 2, 3, 4, 5, 6};
const std::vector<double> k_a_t{1, 4, 2, 5, 3, 6};
const std::vector<double> k_b{7, 8, 9, 10, 11, 12};
const std::vector<double> k_b_t{7, 9, 11, 8, 10, 12};
const std::vector<double> k_ab{58, 64, 139, 154};

ir::Graph matmul_graph(const std::string& a_type, const std::string& b_type,
                       const std::string& flags = "") {
  return parse_or_die("graph g {\n input a: " + a_type + "\n input b: " + b_type +
                      "\n y = matmul(a, b" + flags + ")\n output y\n}\n");
}

TEST(Fp64Matmul, TwoDimensional) {
  ir::Graph graph = matmul_graph("f32[2, 3]", "f32[3, 2]");
  EXPECT_EQ(run_values(graph, {f32({2, 3}, k_a), f32({3, 2}, k_b)}), k_ab);
}

TEST(Fp64Matmul, TransposeA) {
  ir::Graph graph = matmul_graph("f32[3, 2]", "f32[3, 2]", ", transpose_a=true");
  EXPECT_EQ(run_values(graph, {f32({3, 2}, k_a_t), f32({3, 2}, k_b)}), k_ab);
}

TEST(Fp64Matmul, TransposeB) {
  ir::Graph graph = matmul_graph("f32[2, 3]", "f32[2, 3]", ", transpose_b=true");
  EXPECT_EQ(run_values(graph, {f32({2, 3}, k_a), f32({2, 3}, k_b_t)}), k_ab);
}

TEST(Fp64Matmul, BothTransposes) {
  ir::Graph graph =
      matmul_graph("f32[3, 2]", "f32[2, 3]", ", transpose_a=true, transpose_b=true");
  EXPECT_EQ(run_values(graph, {f32({3, 2}, k_a_t), f32({2, 3}, k_b_t)}), k_ab);
}

TEST(Fp64Matmul, BatchedAgainstASharedTwoDimensionalB) {
  ir::Graph graph = matmul_graph("f32[2, 2, 3]", "f32[3, 2]");
  std::vector<double> a = k_a;
  a.insert(a.end(), {1, 0, 0, 0, 1, 0});  // batch 1 picks the first two rows of b
  auto y = run_values(graph, {f32({2, 2, 3}, a), f32({3, 2}, k_b)});
  EXPECT_EQ(y, (std::vector<double>{58, 64, 139, 154, 7, 8, 9, 10}));
}

TEST(Fp64Matmul, BatchedWithABroadcastBatchOfOne) {
  ir::Graph graph = matmul_graph("f32[1, 2, 3]", "f32[2, 3, 2]");
  std::vector<double> b = k_b;
  for (double v : k_b) b.push_back(2 * v);
  auto y = run_values(graph, {f32({1, 2, 3}, k_a), f32({2, 3, 2}, b)});
  EXPECT_EQ(y, (std::vector<double>{58, 64, 139, 154, 116, 128, 278, 308}));
}

TEST(Fp64Matmul, TwoDimensionalAAgainstBatchedTransposedB) {
  ir::Graph graph = matmul_graph("f32[2, 3]", "f32[2, 2, 3]", ", transpose_b=true");
  std::vector<double> b = k_b_t;
  for (double v : k_b_t) b.push_back(-v);
  auto y = run_values(graph, {f32({2, 3}, k_a), f32({2, 2, 3}, b)});
  EXPECT_EQ(y, (std::vector<double>{58, 64, 139, 154, -58, -64, -139, -154}));
}

TEST(Fp64Matmul, EstimatedCostCountsTensorsAndMultiplyAdds) {
  ir::Graph graph = matmul_graph("f32[2, 2, 3]", "f32[3, 2]");
  RunCost cost = estimate_cost(graph);
  EXPECT_EQ(cost.multiply_adds, 2 * 2 * 2 * 3);
  EXPECT_EQ(cost.bytes, (12 + 6 + 8) * 8);
}

}  // namespace
}  // namespace kiln::reference
