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
    int rank = pick(4);  // 0 (a scalar) to 3
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
    switch (pick(9)) {
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
      case 5:
        result = m_builder.add_softmax(any_value(), -1 - pick(2), maybe_name());
        break;
      case 6:
        result = try_typed();
        break;
      case 7:
        result = try_where();
        break;
      default:
        result = try_shaped();
        break;
    }
    if (result) m_values.push_back(*result);
  }

  // A literal that fits `dtype` (the builder refuses the rest): a float (an infinity at times),
  // an integer, or true/false.
  double literal_for(DType dtype) {
    static const double k_floats[] = {0.5, -1.0, 3.0e20, -1.0 / 0.0, 1.0 / 0.0};
    static const double k_integers[] = {0, 1, -3, 7, 2147483647.0};
    if (dtype == DType::boolean) return pick(2);
    if (is_integer(dtype)) return k_integers[pick(5)];
    return k_floats[pick(5)];
  }

  // Integer and bool values: a cast to i32, i64 or bool, a comparison, logical and integer ops.
  Expected<NodeId> try_typed() {
    static const OpKind k_compare[] = {OpKind::eq, OpKind::ne, OpKind::lt,
                                       OpKind::le, OpKind::gt, OpKind::ge};
    static const OpKind k_integer[] = {OpKind::add,         OpKind::sub,
                                       OpKind::mul,         OpKind::maximum,
                                       OpKind::minimum,     OpKind::logical_and,
                                       OpKind::logical_or,  OpKind::floor_divide,
                                       OpKind::remainder};
    NodeId v = any_value();
    DType dtype = m_builder.node(v).type.dtype;
    switch (pick(5)) {
      case 0:
        return m_builder.add_cast(v, static_cast<DType>(3 + pick(3)), maybe_name());
      case 1:
        return m_builder.add_binary(k_compare[pick(6)], v, any_value(), maybe_name());
      case 2:
        return m_builder.add_binary_literal(k_compare[pick(6)], v, literal_for(dtype),
                                            pick(2) ? LiteralSide::lhs : LiteralSide::rhs,
                                            maybe_name());
      case 3:
        return m_builder.add_binary_literal(k_integer[pick(9)], v, literal_for(dtype),
                                            pick(2) ? LiteralSide::lhs : LiteralSide::rhs,
                                            maybe_name());
      default:
        return m_builder.add_unary(pick(2) ? OpKind::logical_not : OpKind::neg, v, maybe_name());
    }
  }

  // where(cond, a, b) with each value a tensor or a literal.
  Expected<NodeId> try_where() {
    NodeId cond = any_value(), a = any_value(), b = any_value();
    DType dtype = m_builder.node(a).type.dtype;
    switch (pick(4)) {
      case 0:
        return m_builder.add_where(cond, a, b, 0.0, 0.0, maybe_name());
      case 1:
        return m_builder.add_where(cond, a, std::nullopt, 0.0, literal_for(dtype), maybe_name());
      case 2:
        return m_builder.add_where(cond, std::nullopt, b, literal_for(m_builder.node(b).type.dtype),
                                   0.0, maybe_name());
      default:
        return m_builder.add_where(cond, std::nullopt, std::nullopt, literal_for(DType::f32),
                                   literal_for(DType::f32), maybe_name());
    }
  }

  // arange, expand (a new leading dim of 2, or a dim of 1 broadcast to 3), embedding, cumsum and
  // roll.
  Expected<NodeId> try_shaped() {
    NodeId v = any_value();
    const Shape& shape = m_builder.node(v).type.shape;
    switch (pick(5)) {
      case 0:
        return m_builder.add_arange(Shape::make({1 + pick(16)}).value(),
                                    pick(2) ? DType::i64 : static_cast<DType>(pick(2) ? 0 : 3),
                                    maybe_name());
      case 1: {
        std::vector<int64_t> dims = shape.dims();
        if (pick(2) && dims.size() < 6) dims.insert(dims.begin(), 2);
        for (int64_t& d : dims)
          if (d == 1) d = 3;
        if (pick(2) && !dims.empty()) dims.back() = -1;
        return m_builder.add_expand(v, std::move(dims), {}, maybe_name());
      }
      case 2:
        return m_builder.add_embedding(any_value(), v, maybe_name());
      case 3:
        return m_builder.add_scan(OpKind::cumsum, v, shape.rank() ? pick(shape.rank()) : -1,
                                  maybe_name());
      default:
        return m_builder.add_roll(v, pick(41) - 20, shape.rank() ? pick(shape.rank()) : -1,
                                  maybe_name());
    }
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
