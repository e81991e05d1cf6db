// Seeded random graph generator: draws ops at random and keeps those the builder accepts.
#include "random_graph.h"

#include <random>
#include <string>
#include <vector>

namespace kiln::ir::testing {

namespace {

class Generator {
public:
  explicit Generator(uint64_t seed) : m_rng(seed), m_builder("g" + std::to_string(seed % 1000)) {}

  Graph run() {
    m_dtype = pick(3) == 0 ? DType::f32 : static_cast<DType>(pick(3));
    int inputs = 1 + pick(4);
    for (int i = 0; i < inputs; ++i) add_input(i);
    int ops = 1 + pick(24);
    for (int attempts = 0; static_cast<int>(m_values.size()) < inputs + ops && attempts < 400;
         ++attempts) {
      try_op();
    }
    // Output every computed value nobody uses, so the graph is complete.
    std::vector<int> uses(m_builder.size(), 0);
    for (size_t i = 0; i < m_builder.size(); ++i) {
      for (NodeId op : m_builder.node(static_cast<NodeId>(i)).operands) ++uses[op];
    }
    bool any = false;
    for (size_t i = 0; i < m_builder.size(); ++i) {
      if (m_builder.node(static_cast<NodeId>(i)).kind != OpKind::input && uses[i] == 0) {
        (void)m_builder.add_output(static_cast<NodeId>(i));
        any = true;
      }
    }
    if (!any) (void)m_builder.add_output(*m_builder.add_unary(OpKind::relu, m_values[0]));
    return std::move(m_builder).finish().value();
  }

private:
  int pick(int n) { return static_cast<int>(m_rng() % static_cast<uint64_t>(n)); }
  NodeId any_value() { return m_values[static_cast<size_t>(pick(static_cast<int>(m_values.size())))]; }
  std::string maybe_name() {
    if (pick(2) == 0) return {};
    return "v" + std::to_string(m_next_name++);
  }

  void add_input(int index) {
    static const int64_t k_dims[] = {1, 3, 4, 8, 16, 17, 32, 64};
    int rank = 1 + pick(3);
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(k_dims[pick(8)]);
    // Reuse an earlier input's shape sometimes, so binary ops and matmuls find partners.
    if (index > 0 && pick(2) == 0) dims = m_builder.node(m_values[0]).type.shape.dims();
    auto shape = Shape::make(dims).value();
    m_values.push_back(
        m_builder.add_input("in" + std::to_string(index), TensorType{m_dtype, shape}).value());
  }

  void try_op() {
    static const OpKind k_binary[] = {OpKind::add, OpKind::sub, OpKind::mul, OpKind::div};
    static const OpKind k_unary[] = {OpKind::relu, OpKind::gelu, OpKind::silu, OpKind::sigmoid,
                                     OpKind::tanh, OpKind::exp,  OpKind::neg,  OpKind::cos,
                                     OpKind::sin,  OpKind::erf,  OpKind::log,  OpKind::gelu_tanh};
    static const double k_literals[] = {0.5, -1.0, 2.0, 0.125, 1e-3, 3.0e20};
    Expected<NodeId> result = Error{};
    switch (pick(6)) {
      case 0: {
        std::optional<Precision> precision;
        if (m_dtype == DType::f32 && pick(3) == 0) precision = static_cast<Precision>(pick(4));
        result = m_builder.add_matmul(any_value(), any_value(), pick(2), pick(2), precision,
                                      maybe_name());
        break;
      }
      case 1:
        result = m_builder.add_binary(k_binary[pick(4)], any_value(), any_value(), maybe_name());
        break;
      case 2:
        result = m_builder.add_binary_literal(k_binary[pick(4)], any_value(), k_literals[pick(6)],
                                              pick(2) ? LiteralSide::lhs : LiteralSide::rhs,
                                              maybe_name());
        break;
      case 3:
        result = m_builder.add_unary(k_unary[pick(12)], any_value(), maybe_name());
        break;
      case 4:
        result = m_builder.add_cast(any_value(), static_cast<DType>(pick(3)), maybe_name());
        break;
      default:
        result = m_builder.add_softmax(any_value(), -1 - pick(2), maybe_name());
        break;
    }
    if (result) m_values.push_back(*result);
  }

  std::mt19937_64 m_rng;
  Builder m_builder;
  DType m_dtype = DType::f32;
  std::vector<NodeId> m_values;
  int m_next_name = 0;
};

}  // namespace

Graph random_graph(uint64_t seed) {
  return Generator(seed).run();
}

}  // namespace kiln::ir::testing
