// Builder: validating constructors for every op kind, shape/dtype inference, and graph checks.
#include "ir/graph.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kiln::ir {

namespace {

struct OpInfo {
  std::string_view name;
  OpCategory category;
};

constexpr std::array k_ops = {
#define KILN_OP(op, arity, cat) OpInfo{#op, OpCategory::cat},
#include "ir/ops.def"
#undef KILN_OP
};

std::string describe(const Node& node) {
  if (!node.name.empty()) return "'" + node.name + "' (" + to_string(node.type) + ")";
  return std::string(to_string(node.kind)) + " result (" + to_string(node.type) + ")";
}

// numpy broadcasting of two shapes, aligned at their last dimension.
Expected<Shape> broadcast(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    int ia = a.rank() - rank + i;
    int ib = b.rank() - rank + i;
    int64_t da = ia >= 0 ? a.dim(ia) : 1;
    int64_t db = ib >= 0 ? b.dim(ib) : 1;
    if (da != db && da != 1 && db != 1) {
      return make_error("shapes ", to_string(a), " and ", to_string(b),
                        " do not broadcast: dimension ", std::to_string(i), " is ",
                        std::to_string(da), " against ", std::to_string(db));
    }
    dims[static_cast<size_t>(i)] = std::max(da, db);
  }
  return Shape::make(std::move(dims));
}

}  // namespace

std::string_view to_string(OpKind kind) {
  return k_ops[static_cast<size_t>(kind)].name;
}

std::optional<OpKind> parse_op_kind(std::string_view text) {
  for (size_t i = 0; i < k_ops.size(); ++i) {
    if (k_ops[i].name == text) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

OpCategory category(OpKind kind) {
  return k_ops[static_cast<size_t>(kind)].category;
}

Builder::Builder(std::string graph_name) : m_name(std::move(graph_name)) {}

Status Builder::check_operand(NodeId id) const {
  if (id < 0 || static_cast<size_t>(id) >= m_nodes.size()) {
    return make_error("operand ", std::to_string(id), " does not name a value of this graph");
  }
  return Status::success();
}

Expected<NodeId> Builder::push(Node node) {
  std::string name = std::move(node.name);
  auto id = static_cast<NodeId>(m_nodes.size());
  m_nodes.push_back(std::move(node));
  if (!name.empty()) {
    if (Status named = set_name(id, std::move(name)); !named) {
      m_nodes.pop_back();
      return named.error();
    }
  }
  return id;
}

Status Builder::set_name(NodeId id, std::string name) {
  if (Status s = check_operand(id); !s) return s;
  if (name.empty()) return make_error("a value name must not be empty");
  if (m_names.count(name)) return make_error("'", name, "' is already defined");
  m_nodes[static_cast<size_t>(id)].name = name;
  m_names.emplace(std::move(name), id);
  return Status::success();
}

void Builder::set_location(NodeId id, int line, int column) {
  if (id < 0 || static_cast<size_t>(id) >= m_nodes.size()) return;
  m_nodes[static_cast<size_t>(id)].line = line;
  m_nodes[static_cast<size_t>(id)].column = column;
}

std::optional<NodeId> Builder::find(std::string_view name) const {
  auto it = m_names.find(std::string(name));
  if (it == m_names.end()) return std::nullopt;
  return it->second;
}

Expected<NodeId> Builder::add_input(std::string name, TensorType type) {
  if (name.empty()) return make_error("an input needs a name");
  if (type.shape.rank() == 0) return make_error("input '", name, "' needs a shape");
  Node node;
  node.kind = OpKind::input;
  node.type = std::move(type);
  node.name = std::move(name);
  auto id = push(std::move(node));
  if (id) m_inputs.push_back(*id);
  return id;
}

Expected<NodeId> Builder::add_matmul(NodeId a, NodeId b, bool transpose_a, bool transpose_b,
                                     std::optional<Precision> precision, std::string name) {
  if (Status s = check_operand(a); !s) return s.error();
  if (Status s = check_operand(b); !s) return s.error();
  const Node& na = node(a);
  const Node& nb = node(b);
  const Shape& sa = na.type.shape;
  const Shape& sb = nb.type.shape;
  if (sa.rank() < 2 || sa.rank() > 3 || sb.rank() < 2 || sb.rank() > 3) {
    return make_error("matmul takes 2-D or 3-D (batched) operands, got ", describe(na), " and ",
                      describe(nb));
  }
  if (na.type.dtype != nb.type.dtype) {
    return make_error("matmul operands differ in dtype: ", describe(na), " and ", describe(nb),
                      "; cast one of them");
  }
  if (precision == Precision::automatic) {
    return make_error("precision=auto is a graph-wide mode; a matmul takes highest, high, tf32x3 "
                      "or medium");
  }
  if (precision && na.type.dtype != DType::f32) {
    return make_error("precision= applies to f32 matmuls; this one is ",
                      std::string(to_string(na.type.dtype)));
  }
  int64_t m = sa.dim(sa.rank() - (transpose_a ? 1 : 2));
  int64_t ka = sa.dim(sa.rank() - (transpose_a ? 2 : 1));
  int64_t kb = sb.dim(sb.rank() - (transpose_b ? 1 : 2));
  int64_t n = sb.dim(sb.rank() - (transpose_b ? 2 : 1));
  if (ka != kb) {
    return make_error("matmul inner dimensions differ: ", describe(na), " has k = ",
                      std::to_string(ka), ", ", describe(nb), " has k = ", std::to_string(kb));
  }
  std::vector<int64_t> dims;
  if (sa.rank() == 3 || sb.rank() == 3) {
    int64_t ba = sa.rank() == 3 ? sa.dim(0) : 1;
    int64_t bb = sb.rank() == 3 ? sb.dim(0) : 1;
    if (ba != bb && ba != 1 && bb != 1) {
      return make_error("matmul batch dimensions differ: ", describe(na), " and ", describe(nb));
    }
    dims.push_back(std::max(ba, bb));
  }
  dims.push_back(m);
  dims.push_back(n);
  auto shape = Shape::make(std::move(dims));
  if (!shape) return make_error("matmul result: ", shape.error().message);
  Node node;
  node.kind = OpKind::matmul;
  node.operands = {a, b};
  node.attrs.transpose_a = transpose_a;
  node.attrs.transpose_b = transpose_b;
  node.attrs.precision = precision;
  node.type = TensorType{na.type.dtype, std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_binary(OpKind kind, NodeId a, NodeId b, std::string name) {
  if (category(kind) != OpCategory::binary) {
    return make_error("'", std::string(to_string(kind)), "' is not a binary op");
  }
  if (Status s = check_operand(a); !s) return s.error();
  if (Status s = check_operand(b); !s) return s.error();
  const Node& na = node(a);
  const Node& nb = node(b);
  if (na.type.dtype != nb.type.dtype) {
    return make_error(std::string(to_string(kind)), " operands differ in dtype: ", describe(na),
                      " and ", describe(nb), "; cast one of them");
  }
  auto shape = broadcast(na.type.shape, nb.type.shape);
  if (!shape) return make_error(std::string(to_string(kind)), ": ", shape.error().message);
  Node node;
  node.kind = kind;
  node.operands = {a, b};
  node.type = TensorType{na.type.dtype, std::move(*shape)};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_binary_literal(OpKind kind, NodeId tensor, double literal,
                                             LiteralSide side, std::string name) {
  if (category(kind) != OpCategory::binary) {
    return make_error("'", std::string(to_string(kind)), "' is not a binary op");
  }
  if (side == LiteralSide::none) return make_error("a literal operand needs a side");
  if (!std::isfinite(literal)) return make_error("a literal operand must be finite");
  if (Status s = check_operand(tensor); !s) return s.error();
  Node node;
  node.kind = kind;
  node.operands = {tensor};
  node.attrs.literal_side = side;
  node.attrs.literal = literal;
  node.type = this->node(tensor).type;
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_unary(OpKind kind, NodeId x, std::string name) {
  if (category(kind) != OpCategory::unary) {
    return make_error("'", std::string(to_string(kind)), "' is not a unary op");
  }
  if (Status s = check_operand(x); !s) return s.error();
  Node node;
  node.kind = kind;
  node.operands = {x};
  node.type = this->node(x).type;
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_cast(NodeId x, DType to, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  Node node;
  node.kind = OpKind::cast;
  node.operands = {x};
  node.attrs.cast_to = to;
  node.type = TensorType{to, this->node(x).type.shape};
  node.name = std::move(name);
  return push(std::move(node));
}

Expected<NodeId> Builder::add_softmax(NodeId x, int axis, std::string name) {
  if (Status s = check_operand(x); !s) return s.error();
  const TensorType& type = node(x).type;
  int rank = type.shape.rank();
  if (axis < -rank || axis >= rank) {
    return make_error("softmax axis ", std::to_string(axis), " is out of range for ",
                      describe(node(x)), " (rank ", std::to_string(rank), ")");
  }
  Node node;
  node.kind = OpKind::softmax;
  node.operands = {x};
  node.attrs.axis = axis < 0 ? axis + rank : axis;
  node.type = type;
  node.name = std::move(name);
  return push(std::move(node));
}

Status Builder::add_output(NodeId value) {
  if (Status s = check_operand(value); !s) return s;
  const Node& n = node(value);
  if (n.kind == OpKind::input) {
    return make_error("output '", n.name, "' is a graph input; an output must be computed");
  }
  if (std::find(m_outputs.begin(), m_outputs.end(), value) != m_outputs.end()) {
    return make_error(describe(n), " is already an output");
  }
  m_outputs.push_back(value);
  return Status::success();
}

Expected<Graph> Builder::finish() && {
  if (m_outputs.empty()) return make_error("graph '", m_name, "' has no output");
  size_t count = m_nodes.size();
  std::vector<int> uses(count, 0);
  for (const Node& n : m_nodes) {
    for (NodeId op : n.operands) ++uses[static_cast<size_t>(op)];
  }
  for (NodeId out : m_outputs) ++uses[static_cast<size_t>(out)];
  for (size_t i = 0; i < count; ++i) {
    if (m_nodes[i].kind != OpKind::input && uses[i] == 0) {
      return make_error(describe(m_nodes[i]), " is never used: it is neither an output nor an "
                        "operand");
    }
  }

  // Decide which unnamed values stay nested. A nested value prints inside its single user, so
  // after parsing it must land exactly where it stands: the user's nested operands, last to first,
  // must fill the indices just below the user, and nesting stays below k_max_nesting.
  std::vector<bool> needs_name(count, false);
  std::vector<NodeId> start(count);  // first index of each node's nested subtree
  std::vector<int> depth(count, 0);
  for (size_t u = 0; u < count; ++u) {
    Node& n = m_nodes[u];
    if (n.name.empty() && uses[u] != 1) needs_name[u] = true;
    if (n.name.empty() && std::find(m_outputs.begin(), m_outputs.end(), NodeId(u)) !=
                              m_outputs.end()) {
      needs_name[u] = true;
    }
    auto cursor = static_cast<NodeId>(u);
    int deepest = 0;
    for (auto it = n.operands.rbegin(); it != n.operands.rend(); ++it) {
      auto a = static_cast<size_t>(*it);
      if (!m_nodes[a].name.empty() || needs_name[a]) continue;
      if (*it == cursor - 1 && depth[a] + 1 < k_max_nesting) {
        cursor = start[a];
        deepest = std::max(deepest, depth[a] + 1);
      } else {
        needs_name[a] = true;
      }
    }
    start[u] = cursor;
    depth[u] = deepest;
  }
  int next = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!needs_name[i]) continue;
    std::string name;
    do {
      name = std::to_string(next++);
      name.insert(0, 1, 't');
    } while (m_names.count(name));
    if (Status s = set_name(static_cast<NodeId>(i), name); !s) return s.error();
  }

  auto data = std::make_shared<Graph::Data>();
  data->name = std::move(m_name);
  data->file = std::move(m_file);
  data->nodes = std::move(m_nodes);
  data->inputs = std::move(m_inputs);
  data->outputs = std::move(m_outputs);
  data->use_counts = std::move(uses);
  return Graph(std::move(data));
}

}  // namespace kiln::ir
