// Canonical printer: one statement per named value, nested values inline, defaults omitted.
#include "ir/print.h"

#include <charconv>
#include <cmath>

namespace kiln::ir {

namespace {

// Shortest text that reads back as the same double, always with a '.' or exponent.
std::string format_literal(double value, DType dtype = DType::f32) {
  if (dtype == DType::boolean) return value != 0.0 ? "true" : "false";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (is_integer(dtype)) return std::to_string(static_cast<int64_t>(value));
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, end);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

class Printer {
public:
  explicit Printer(const Graph& graph) : m_graph(graph) {}

  // Writes node `id` as an expression; named operands appear by name. Recursion follows only
  // unnamed values, whose nesting Builder::finish keeps below k_max_nesting.
  void expr(NodeId id, std::string& out) const {
    const Node& node = m_graph.node(id);
    out += to_string(node.kind);
    out += '(';
    const Attrs& attrs = node.attrs;
    bool first = true;
    auto separator = [&] {
      if (!first) out += ", ";
      first = false;
    };
    // A literal is written in the dtype of the tensor it meets (where's values: the result's).
    DType literal_dtype = node.kind == OpKind::where || node.operands.empty()
                              ? node.type.dtype
                              : m_graph.node(node.operands[0]).type.dtype;
    auto literal = [&](double value) {
      separator();
      out += format_literal(value, literal_dtype);
    };
    // An attention's mask (operand 3) is written as mask=NAME below.
    size_t positional = node.kind == OpKind::attention ? 3 : node.operands.size();
    if (node.kind == OpKind::where) {
      separator();
      operand_ref(node.operands[0], out);
      size_t next = 1;
      LiteralSide side = attrs.literal_side;
      if (side == LiteralSide::lhs || side == LiteralSide::both) literal(attrs.literal);
      else {
        separator();
        operand_ref(node.operands[next++], out);
      }
      if (side == LiteralSide::rhs) literal(attrs.literal);
      else if (side == LiteralSide::both) literal(attrs.literal2);
      else {
        separator();
        operand_ref(node.operands[next], out);
      }
      positional = 0;
    }
    if (node.kind != OpKind::where && attrs.literal_side == LiteralSide::lhs) literal(attrs.literal);
    for (size_t i = 0; i < positional; ++i) {
      separator();
      operand_ref(node.operands[i], out);
    }
    if (node.kind != OpKind::where && attrs.literal_side == LiteralSide::rhs) literal(attrs.literal);
    switch (category(node.kind)) {
      case OpCategory::matmul:
        if (attrs.transpose_a) out += ", transpose_a=true";
        if (attrs.transpose_b) out += ", transpose_b=true";
        if (attrs.precision) {
          out += ", precision=";
          out += to_string(*attrs.precision);
        }
        if (attrs.out_dtype) {
          out += ", out_dtype=";
          out += to_string(*attrs.out_dtype);
        }
        break;
      case OpCategory::cast:
        out += ", to=";
        out += to_string(attrs.cast_to);
        break;
      case OpCategory::softmax:
      case OpCategory::scan:
        if (attrs.axis != node.type.shape.rank() - 1) {
          out += ", axis=" + std::to_string(attrs.axis);
        }
        break;
      case OpCategory::reduce:
        if (attrs.axis != operand_rank(node) - 1) out += ", axis=" + std::to_string(attrs.axis);
        if (attrs.keepdim) out += ", keepdim=true";
        break;
      case OpCategory::norm:
        if (attrs.eps != default_attrs(node.kind).eps) {
          out += ", eps=" + format_literal(attrs.eps);
        }
        break;
      case OpCategory::layout:
        layout_attrs(node, out);
        break;
      case OpCategory::attention:
        if (node.operands.size() > 3) {
          out += ", mask=";
          operand_ref(node.operands[3], out);  // Builder::finish names every mask
        }
        out += ", scale=" + format_literal(attrs.scale);
        if (attrs.causal) out += ", causal=true";
        break;
      case OpCategory::unary:
        if (approximate_of(node.kind) != "none") {
          out += ", approximate=\"";
          out += approximate_of(node.kind);
          out += '"';
        }
        break;
      case OpCategory::arange: {
        const Shape& shape = node.type.shape;
        out += shape.symbol(0) >= 0 ? shape.symbols()[0].name : std::to_string(shape.dim(0));
        if (node.type.dtype != default_attrs(OpKind::arange).cast_to) {
          out += ", dtype=";
          out += to_string(node.type.dtype);
        }
        break;
      }
      case OpCategory::input:
      case OpCategory::binary:
      case OpCategory::select:
      case OpCategory::gather:
        break;
    }
    out += ')';
  }

  // The named arguments of reshape, permute, slice and concat.
  void layout_attrs(const Node& node, std::string& out) const {
    const Attrs& attrs = node.attrs;
    if (node.kind == OpKind::reshape || node.kind == OpKind::expand) {
      const Shape& shape = node.type.shape;
      out += ", shape=[";
      for (int i = 0; i < shape.rank(); ++i) {
        if (i) out += ", ";
        out += shape.symbol(i) >= 0 ? shape.symbols()[static_cast<size_t>(i)].name
                                    : std::to_string(shape.dim(i));
      }
      out += ']';
      return;
    }
    if (node.kind == OpKind::permute) {
      out += ", dims=[";
      for (size_t i = 0; i < attrs.dims.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(attrs.dims[i]);
      }
      out += ']';
      return;
    }
    // slice, concat and roll
    if (node.kind == OpKind::roll) out += ", shift=" + std::to_string(attrs.shift);
    if (attrs.axis != operand_rank(node) - 1) out += ", axis=" + std::to_string(attrs.axis);
    if (node.kind == OpKind::slice) {
      out += ", start=" + std::to_string(attrs.start) + ", end=" + std::to_string(attrs.end);
    }
  }

  int operand_rank(const Node& node) const {
    return m_graph.node(node.operands[0]).type.shape.rank();
  }

  void operand_ref(NodeId id, std::string& out) const {
    const Node& node = m_graph.node(id);
    if (!node.name.empty()) {
      out += node.name;
      return;
    }
    expr(id, out);
  }

  std::string graph() const {
    std::string out = "graph " + m_graph.name() + " {\n";
    for (const Symbol& symbol : m_graph.symbols()) {
      out += "  dim " + symbol.name + ": " + std::to_string(symbol.lo) + ".." +
             std::to_string(symbol.hi) + "\n";
    }
    for (size_t i = 0; i < m_graph.nodes().size(); ++i) {
      const Node& node = m_graph.nodes()[i];
      if (node.name.empty()) continue;  // printed inside its user
      out += "  ";
      if (node.kind == OpKind::input) {
        out += "input " + node.name + ": " + to_string(node.type) + "\n";
        continue;
      }
      out += node.name + " = ";
      expr(static_cast<NodeId>(i), out);
      out += '\n';
    }
    out += "  output ";
    for (size_t i = 0; i < m_graph.outputs().size(); ++i) {
      if (i) out += ", ";
      out += m_graph.node(m_graph.outputs()[i]).name;
    }
    out += "\n}\n";
    return out;
  }

private:
  const Graph& m_graph;
};

}  // namespace

std::string print_graph(const Graph& graph) {
  return Printer(graph).graph();
}

std::string print_expr(const Graph& graph, NodeId id) {
  std::string out;
  Printer(graph).expr(id, out);
  return out;
}

}  // namespace kiln::ir
