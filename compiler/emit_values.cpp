// The per-element part of every kernel: a group's members evaluated at points of their index
// spaces, leaves loaded with broadcasting, layout ops moving the points their operands are read at.
#include "compiler/emit_internal.h"
#include "compiler/points.h"

#include <algorithm>

namespace kiln::compiler::detail {

ValueEmitter::ValueEmitter(Code& code, const KernelContext& ctx) : m_code(code), m_ctx(ctx) {}

bool ValueEmitter::member(ir::NodeId id) const {
  const auto& nodes = m_ctx.kernel.group.nodes;
  return std::binary_search(nodes.begin(), nodes.end(), id);
}

// Names are the kernel's own, not the graph's: member i of the group is v<i>, leaf i (in the
// group's first-use order) l<i>. Two kernels that compute the same thing on the same shapes in
// different places of a graph (a layer's Q, K and V projections) then emit the same text.
std::string ValueEmitter::member_name(ir::NodeId id) const {
  const auto& nodes = m_ctx.kernel.group.nodes;
  return "v" + to_str(std::lower_bound(nodes.begin(), nodes.end(), id) - nodes.begin());
}

std::string ValueEmitter::leaf_name(ir::NodeId leaf) const {
  const auto& leaves = m_ctx.kernel.group.leaves;
  auto at = std::find(leaves.begin(), leaves.end(), leaf);
  // A value read that is not one of the group's leaves (a copy's input) keeps its node id, in
  // names of its own.
  if (at == leaves.end()) return "ln" + to_str(leaf);
  return "l" + to_str(at - leaves.begin());
}

void ValueEmitter::ensure_coords(Point& p, bool plain_names) {
  if (!p.frame.coords.empty()) return;
  std::vector<Extent> dims = dims_of(m_ctx, p.frame.node);
  if (plain_names) {
    ElementIndex index;
    emit_coords(m_code, dims, p.frame.linear, index);
    p.frame.coords = index.coords;
    return;
  }
  std::string rest = "(" + p.frame.linear + ")";
  std::string prefix = "f" + to_str(m_names++) + "_";
  p.frame.coords.assign(dims.size(), "");
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    std::string c = prefix + "c" + to_str(d);
    if (d == 0) {
      m_code.line("const int " + c + " = " + rest + ";");
    } else {
      std::string dim = dims[static_cast<size_t>(d)].expr();
      m_code.line("const int " + c + " = " + rest + " % " + dim + ";");
      m_code.line("const int " + prefix + "r" + to_str(d) + " = " + rest + " / " + dim + ";");
      rest = prefix + "r" + to_str(d);
    }
    p.frame.coords[static_cast<size_t>(d)] = c;
  }
}

// Node `id`'s coordinates at point p (whose value id broadcasts into): the last dims of the
// point's, a dim of size 1 at 0.
std::vector<std::string> ValueEmitter::project(Point& p, ir::NodeId id) {
  ensure_coords(p, &p == &m_points[0]);
  const ir::Shape& shape = m_ctx.graph.node(id).type.shape;
  int rank = shape.rank();
  int frame_rank = static_cast<int>(p.frame.coords.size());
  std::vector<std::string> coords;
  for (int d = 0; d < rank; ++d) {
    coords.push_back(shape.dim(d) == 1 ? "0"
                                       : p.frame.coords[static_cast<size_t>(d + frame_rank - rank)]);
  }
  return coords;
}

std::string ValueEmitter::load(size_t point, ir::NodeId leaf) {
  Point& p = m_points[point];
  for (const auto& [id, name] : p.loaded)
    if (id == leaf) return name;
  const ir::Node& n = m_ctx.graph.node(leaf);
  std::string offset;
  if (n.type.shape == m_ctx.graph.node(p.frame.node).type.shape && !p.frame.linear.empty()) {
    offset = p.frame.linear;
  } else {
    offset = offset_of(leaf, project(p, leaf));
  }
  std::string name = leaf_name(leaf) + (point == 0 ? "" : "_" + to_str(m_names++));
  std::string element = m_ctx.param(leaf) + "[" + offset + "]";
  m_code.line("const " + value_type(n.type.dtype) + " " + name + " = " +
              load_value(n.type.dtype, element) + ";");
  p.loaded.emplace_back(leaf, name);
  return name;
}

std::string ValueEmitter::offset_of(ir::NodeId node, const std::vector<std::string>& coords) const {
  const ir::Shape& shape = m_ctx.graph.node(node).type.shape;
  std::string offset;
  Extent stride;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    if (shape.dim(d) != 1) {
      const std::string& c = coords[static_cast<size_t>(d)];
      std::string term = stride.fixed() && stride.coef == 1 ? c : c + " * " + stride.expr();
      offset = offset.empty() ? term : term + " + " + offset;
    }
    stride = stride * m_ctx.sizes.dim(node, d);
  }
  return offset.empty() ? "0" : offset;
}

std::string ValueEmitter::gathered(size_t point, ir::NodeId id) {
  const ir::Graph& g = m_ctx.graph;
  const ir::Node& n = g.node(id);
  ir::NodeId table = n.operands[0], ids = n.operands[1];
  // The embedding's coordinates: the ids' first, then the column.
  std::vector<std::string> c = project(m_points[point], id);
  std::string gid = "f" + to_str(m_names++);
  m_code.line("const long long " + gid + " = (long long)" + m_ctx.param(ids) + "[" +
              offset_of(ids, c) + "];");
  std::string width = m_ctx.sizes.dim(table, 1).expr(), rows = m_ctx.sizes.dim(table, 0).expr();
  return "(" + gid + " >= 0 && " + gid + " < " + rows + " ? " +
         load_as_float(g.node(table).type.dtype,
                       m_ctx.param(table) + "[" + gid + " * " + width + " + " + c.back() + "]") +
         " : 0.0f)";
}

std::string ValueEmitter::value(ir::NodeId top, Frame frame, const std::string& anchor_value) {
  const ir::Graph& g = m_ctx.graph;
  const KernelGroup& group = m_ctx.kernel.group;
  const auto& nodes = group.nodes;
  auto pos = [&](ir::NodeId id) {
    return static_cast<size_t>(std::lower_bound(nodes.begin(), nodes.end(), id) - nodes.begin());
  };
  m_points.clear();
  m_points.push_back({std::move(frame), {}});
  if (!member(top)) return load(0, top);  // a copy: the root is a graph input
  size_t top_pos = pos(top);

  // Members under top (the anchor's operands are its own business), each with its point; a
  // layout member's operands get points of their own.
  PointPlan points = plan_points(g, group, top);
  const std::vector<int>& point_of = points.point_of;
  const std::vector<std::vector<size_t>>& operand_points = points.operand_points;
  const std::vector<PointPlan::Derived>& derived = points.derived;  // for m_points[1..]
  for (const PointPlan::Derived& d : derived) {
    m_points.push_back({Frame{g.node(d.layout).operands[d.operand], {}, {}}, {}});
  }

  // Point 0's coordinates first when a leaf read there is broadcast (as the output element's).
  const ir::Shape& top_shape = g.node(m_points[0].frame.node).type.shape;
  bool coords0 = false;
  std::vector<ir::NodeId> read0;  // leaves read at point 0, sorted
  for (size_t i = 0; i <= top_pos; ++i) {
    if (point_of[i] != 0 || nodes[i] == group.anchor) continue;
    const ir::Node& n = g.node(nodes[i]);
    if (moves_elements(n.kind) || n.kind == ir::OpKind::embedding) continue;
    for (ir::NodeId op : n.operands)
      if (!member(op)) read0.push_back(op);
  }
  std::sort(read0.begin(), read0.end());
  std::vector<ir::NodeId> leaves0;  // read at point 0, in the group's leaf order
  for (ir::NodeId leaf : group.leaves) {
    if (!std::binary_search(read0.begin(), read0.end(), leaf)) continue;
    leaves0.push_back(leaf);
    if (!(g.node(leaf).type.shape == top_shape)) coords0 = true;
  }
  if (coords0 || m_points[0].frame.linear.empty()) ensure_coords(m_points[0], true);

  // The derived points' coordinates, top down.
  for (size_t d = 0; d < derived.size(); ++d) {
    const PointPlan::Derived& rule = derived[d];
    const ir::Node& l = g.node(rule.layout);
    std::vector<std::string> lc = project(m_points[rule.parent], rule.layout);
    Point& p = m_points[d + 1];
    ir::NodeId operand = l.operands[rule.operand];
    std::vector<std::string> c = lc;
    int axis = l.attrs.axis;
    // Derived points come from layout ops only (PointPlan).
    if (l.kind == ir::OpKind::permute) {
      for (size_t j = 0; j < lc.size(); ++j) c[static_cast<size_t>(l.attrs.dims[j])] = lc[j];
    } else if (l.kind == ir::OpKind::slice) {
      if (l.attrs.start != 0)
        c[static_cast<size_t>(axis)] = "(" + lc[static_cast<size_t>(axis)] + " + " +
                                       to_str(l.attrs.start) + ")";
    } else if (l.kind == ir::OpKind::roll) {
      // Element i reads element (i - shift) mod n: the shift reduced here for a fixed n, at run
      // time for a symbolic one.
      Extent n = m_ctx.sizes.dim(operand, axis);
      std::string i = lc[static_cast<size_t>(axis)];
      std::string t = "f" + to_str(m_names++);
      std::string k = to_str(n.fixed() ? ((l.attrs.shift % n.coef) + n.coef) % n.coef : 0);
      if (!n.fixed()) {
        k = t + "k";
        m_code.line("const int " + k + " = (int)((" + to_str(l.attrs.shift) + "LL % " +
                    n.expr() + " + " + n.expr() + ") % " + n.expr() + ");");
      }
      if (k != "0") {
        m_code.line("const int " + t + " = " + i + " >= " + k + " ? " + i + " - " + k + " : " +
                    i + " + (" + n.expr() + " - " + k + ");");
        c[static_cast<size_t>(axis)] = t;
      }
    } else if (l.kind == ir::OpKind::concat) {
      int64_t offset = 0;
      for (size_t k = 0; k < rule.operand; ++k)
        offset += g.node(l.operands[k]).type.shape.dim(axis);
      int64_t len = g.node(operand).type.shape.dim(axis);
      std::string t = "f" + to_str(m_names++);
      std::string shifted = lc[static_cast<size_t>(axis)] +
                            (offset ? " - " + to_str(offset) : "");
      std::string clamped = "(" + t + "s > " + to_str(len - 1) + " ? " + to_str(len - 1) +
                            " : " + t + "s)";
      if (offset) clamped = "(" + t + "s < 0 ? 0 : " + clamped + ")";
      // Only the operand the axis coordinate falls in is selected; the others read a clamped,
      // valid element.
      m_code.line("const int " + t + "s = " + shifted + ";");
      m_code.line("const int " + t + " = " + clamped + ";");
      c[static_cast<size_t>(axis)] = t;
    } else {
      assert(l.kind == ir::OpKind::reshape);
      // The same row-major index over the operand's dims.
      std::string linear;
      Extent stride;
      std::vector<Extent> dims = dims_of(m_ctx, rule.layout);
      for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
        if (g.node(rule.layout).type.shape.dim(k) != 1) {
          std::string term = stride.fixed() && stride.coef == 1
                                 ? lc[static_cast<size_t>(k)]
                                 : lc[static_cast<size_t>(k)] + " * " + stride.expr();
          linear = linear.empty() ? term : term + " + " + linear;
        }
        stride = stride * dims[static_cast<size_t>(k)];
      }
      std::string name = "f" + to_str(m_names++);
      m_code.line("const int " + name + " = " + (linear.empty() ? "0" : linear) + ";");
      p.frame.linear = name;
      c.clear();
    }
    p.frame.coords = std::move(c);
  }

  for (ir::NodeId leaf : leaves0) load(0, leaf);
  for (size_t i = 0; i <= top_pos; ++i) {
    if (point_of[i] < 0) continue;
    ir::NodeId id = nodes[i];
    const ir::Node& n = g.node(id);
    bool layout = moves_elements(n.kind);
    auto operand = [&](size_t k) {
      ir::NodeId o = n.operands[k];
      if (member(o)) return member_name(o);
      size_t point = layout ? operand_points[i][k] : static_cast<size_t>(point_of[i]);
      return load(point, o);
    };
    std::string expr;
    if (id == group.anchor) {
      expr = anchor_value;
    } else if (ir::category(n.kind) == ir::OpCategory::binary) {
      ir::DType dtype = g.node(n.operands[0]).type.dtype;  // the operands'
      bool exact = ir::is_exact_op(n.kind, dtype);
      auto op = [&](const std::string& a, const std::string& b) {
        return exact ? exact_binary(n.kind, dtype, a, b) : binary(n.kind, a, b);
      };
      if (n.attrs.literal_side == ir::LiteralSide::lhs) {
        expr = op(typed_literal(dtype, n.attrs.literal), operand(0));
      } else if (n.attrs.literal_side == ir::LiteralSide::rhs) {
        expr = op(operand(0), typed_literal(dtype, n.attrs.literal));
      } else {
        expr = op(operand(0), operand(1));
      }
    } else if (ir::category(n.kind) == ir::OpCategory::unary) {
      ir::DType dtype = g.node(n.operands[0]).type.dtype;
      expr = ir::is_exact_op(n.kind, dtype) ? exact_unary(n.kind, dtype, operand(0))
                                        : unary(n.kind, operand(0));
    } else if (n.kind == ir::OpKind::cast) {
      expr = cast_value(g.node(n.operands[0]).type.dtype, n.type.dtype, operand(0));
    } else if (n.kind == ir::OpKind::arange) {
      // Its value is its own index.
      std::string c = project(m_points[static_cast<size_t>(point_of[i])], id)[0];
      expr = "(" + value_type(n.type.dtype) + ")(" + c + ")";
    } else if (n.kind == ir::OpKind::where) {
      // cond ? a : b, a literal in the result's dtype where the text writes one.
      ir::LiteralSide side = n.attrs.literal_side;
      std::string c = operand(0);
      size_t next = 1;
      std::string a = side == ir::LiteralSide::lhs || side == ir::LiteralSide::both
                          ? typed_literal(n.type.dtype, n.attrs.literal)
                          : operand(next++);
      std::string b = side == ir::LiteralSide::rhs ? typed_literal(n.type.dtype, n.attrs.literal)
                      : side == ir::LiteralSide::both
                          ? typed_literal(n.type.dtype, n.attrs.literal2)
                          : operand(next);
      expr = "(" + c + " ? " + a + " : " + b + ")";
    } else if (n.kind == ir::OpKind::embedding) {
      expr = gathered(static_cast<size_t>(point_of[i]), id);
    } else if (n.kind == ir::OpKind::concat) {
      // The operand the axis coordinate falls in.
      std::string c = project(m_points[static_cast<size_t>(point_of[i])], id)
          [static_cast<size_t>(n.attrs.axis)];
      std::vector<std::string> values;
      for (size_t k = 0; k < n.operands.size(); ++k) values.push_back(operand(k));
      expr = values.back();
      int64_t end = n.type.shape.dim(n.attrs.axis);
      for (size_t k = n.operands.size() - 1; k-- > 0;) {
        end -= g.node(n.operands[k + 1]).type.shape.dim(n.attrs.axis);
        expr = "(" + c + " < " + to_str(end) + " ? " + values[k] + " : " + expr + ")";
      }
    } else {
      expr = operand(0);  // permute, slice, reshape
    }
    m_code.line("const " + value_type(n.type.dtype) + " " + member_name(id) + " = " +
                round_to(n.type.dtype, expr) + ";  // " + std::string(ir::to_string(n.kind)));
  }
  return member_name(top);
}

std::string emit_epilogue(Code& code, const KernelContext& ctx, const std::string& anchor_value,
                          const ElementIndex& index) {
  ValueEmitter values(code, ctx);
  ir::NodeId root = ctx.kernel.group.root;
  return values.value(root, Frame{root, index.coords, index.linear}, anchor_value);
}

}  // namespace kiln::compiler::detail
