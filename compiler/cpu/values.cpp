// The per-element part of every CPU kernel: a group's members evaluated at points of their index
// spaces (as compiler/emit_values.cpp does for CUDA), built as LLVM IR.
#include "compiler/cpu/codegen_internal.h"
#include "compiler/points.h"

#include <algorithm>

namespace kiln::compiler::cpu::detail {

namespace {

class Values {
 public:
  explicit Values(KernelBuilder& kb) : m_kb(kb), m_nodes(kb.kernel().group.nodes) {}

  llvm::Value* value(ir::NodeId top, Point point, llvm::Value* anchor_value);

 private:
  struct At {
    Point point;
    std::vector<std::pair<ir::NodeId, llvm::Value*>> loaded;
  };
  bool member(ir::NodeId id) const { return std::binary_search(m_nodes.begin(), m_nodes.end(), id); }
  size_t pos(ir::NodeId id) const {
    return static_cast<size_t>(std::lower_bound(m_nodes.begin(), m_nodes.end(), id) - m_nodes.begin());
  }
  void ensure_coords(At& at) {
    if (!at.point.coords.empty() || m_kb.graph().node(at.point.node).type.shape.rank() == 0) return;
    at.point.coords = coords_of(m_kb, dims_of(m_kb, at.point.node), at.point.linear);
  }
  // Node `id`'s coordinates at a point its value broadcasts into: the point's last dims, a dim of
  // size 1 at 0.
  std::vector<llvm::Value*> project(At& at, ir::NodeId id) {
    ensure_coords(at);
    const ir::Shape& shape = m_kb.graph().node(id).type.shape;
    size_t rank = static_cast<size_t>(shape.rank());
    size_t frame_rank = at.point.coords.size();
    std::vector<llvm::Value*> coords;
    for (size_t d = 0; d < rank; ++d) {
      coords.push_back(shape.dim(static_cast<int>(d)) == 1 ? m_kb.i64c(0)
                                                           : at.point.coords[d + frame_rank - rank]);
    }
    return coords;
  }
  llvm::Value* load(At& at, ir::NodeId leaf) {
    for (const auto& [id, v] : at.loaded)
      if (id == leaf) return v;
    const ir::Node& n = m_kb.graph().node(leaf);
    llvm::Value* offset = nullptr;
    if (n.type.shape == m_kb.graph().node(at.point.node).type.shape && at.point.linear) {
      offset = at.point.linear;
    } else {
      offset = offset_of(leaf, project(at, leaf));
    }
    llvm::Value* v = m_kb.load_value(n.type.dtype, m_kb.param_of(leaf), offset);
    at.loaded.emplace_back(leaf, v);
    return v;
  }

  // The row-major element offset in node `node`'s buffer of the element at `coords` (its first
  // rank entries), a dim of 1 contributing nothing.
  llvm::Value* offset_of(ir::NodeId node, const std::vector<llvm::Value*>& coords) {
    const ir::Shape& shape = m_kb.graph().node(node).type.shape;
    llvm::IRBuilder<>& b = m_kb.b();
    llvm::Value* offset = m_kb.i64c(0);
    Extent stride;
    for (int d = shape.rank() - 1; d >= 0; --d) {
      if (shape.dim(d) != 1)
        offset = b.CreateAdd(offset, b.CreateMul(coords[static_cast<size_t>(d)], m_kb.extent(stride)));
      stride = stride * m_kb.sizes().dim(node, d);
    }
    return offset;
  }

  // A fused embedding's value at `at`: its table's row ids[...] at the point's last coordinate,
  // 0 where the id is outside [0, V) (the row read is then row 0's, a valid address).
  llvm::Value* gathered(At& at, ir::NodeId id) {
    const ir::Graph& g = m_kb.graph();
    const ir::Node& n = g.node(id);
    ir::NodeId table = n.operands[0], ids = n.operands[1];
    llvm::IRBuilder<>& b = m_kb.b();
    std::vector<llvm::Value*> c = project(at, id);  // the ids' coordinates, then the column
    llvm::Value* gid = b.CreateSExt(
        m_kb.load_value(g.node(ids).type.dtype, m_kb.param_of(ids), offset_of(ids, c)), m_kb.i64());
    llvm::Value* rows = m_kb.extent(m_kb.sizes().dim(table, 0));
    llvm::Value* inside = b.CreateAnd(b.CreateICmpSGE(gid, m_kb.i64c(0)), b.CreateICmpSLT(gid, rows));
    llvm::Value* row = b.CreateSelect(inside, gid, m_kb.i64c(0));
    llvm::Value* element = b.CreateAdd(b.CreateMul(row, m_kb.extent(m_kb.sizes().dim(table, 1))), c.back());
    llvm::Value* v = m_kb.load_float(g.node(table).type.dtype, m_kb.param_of(table), element);
    return b.CreateSelect(inside, v, m_kb.f32c(0.0));
  }

  KernelBuilder& m_kb;
  const std::vector<ir::NodeId>& m_nodes;
};

llvm::Value* Values::value(ir::NodeId top, Point point, llvm::Value* anchor_value) {
  const ir::Graph& g = m_kb.graph();
  const KernelGroup& group = m_kb.kernel().group;
  llvm::IRBuilder<>& b = m_kb.b();
  std::vector<At> ats;
  ats.push_back({std::move(point), {}});
  if (!member(top)) return load(ats[0], top);  // a copy: the root is a graph input
  size_t top_pos = pos(top);

  // Each member's point; a layout member's operands get points of their own.
  PointPlan points = plan_points(g, group, top);
  const std::vector<int>& point_of = points.point_of;
  const std::vector<std::vector<size_t>>& operand_points = points.operand_points;
  const std::vector<PointPlan::Derived>& derived = points.derived;
  for (const PointPlan::Derived& d : derived) {
    ats.push_back({Point{g.node(d.layout).operands[d.operand], {}, nullptr}, {}});
  }

  // The derived points' coordinates, top down.
  for (size_t d = 0; d < derived.size(); ++d) {
    const PointPlan::Derived& rule = derived[d];
    const ir::Node& l = g.node(rule.layout);
    std::vector<llvm::Value*> lc = project(ats[rule.parent], rule.layout);
    At& at = ats[d + 1];
    ir::NodeId operand = l.operands[rule.operand];
    std::vector<llvm::Value*> c = lc;
    auto axis = static_cast<size_t>(l.attrs.axis);
    // Derived points come from layout ops only (PointPlan).
    if (l.kind == ir::OpKind::permute) {
      for (size_t j = 0; j < lc.size(); ++j) c[static_cast<size_t>(l.attrs.dims[j])] = lc[j];
    } else if (l.kind == ir::OpKind::slice) {
      if (l.attrs.start != 0) c[axis] = b.CreateAdd(lc[axis], m_kb.i64c(l.attrs.start));
    } else if (l.kind == ir::OpKind::roll) {
      // Element i reads element (i - shift) mod n, n fixed or symbolic.
      llvm::Value* n = m_kb.extent(m_kb.sizes().dim(operand, l.attrs.axis));
      llvm::Value* k = b.CreateSRem(b.CreateAdd(b.CreateSRem(m_kb.i64c(l.attrs.shift), n), n), n);
      llvm::Value* back = b.CreateSub(lc[axis], k);
      c[axis] = b.CreateSelect(b.CreateICmpSGE(lc[axis], k), back, b.CreateAdd(back, n));
    } else if (l.kind == ir::OpKind::concat) {
      int64_t offset = 0;
      for (size_t k = 0; k < rule.operand; ++k)
        offset += g.node(l.operands[k]).type.shape.dim(l.attrs.axis);
      int64_t len = g.node(operand).type.shape.dim(l.attrs.axis);
      // Only the operand the axis coordinate falls in is selected; the others read a clamped,
      // valid element.
      llvm::Value* s = b.CreateSub(lc[axis], m_kb.i64c(offset));
      s = b.CreateSelect(b.CreateICmpSGT(s, m_kb.i64c(len - 1)), m_kb.i64c(len - 1), s);
      c[axis] = b.CreateSelect(b.CreateICmpSLT(s, m_kb.i64c(0)), m_kb.i64c(0), s);
    } else {
      assert(l.kind == ir::OpKind::reshape);
      // The same row-major index over the operand's dims.
      llvm::Value* linear = m_kb.i64c(0);
      Extent stride;
      std::vector<Extent> dims = dims_of(m_kb, rule.layout);
      for (size_t k = dims.size(); k-- > 0;) {
        linear = b.CreateAdd(linear, b.CreateMul(lc[k], m_kb.extent(stride)));
        stride = stride * dims[k];
      }
      at.point.linear = linear;
      c.clear();
    }
    at.point.coords = std::move(c);
  }

  std::vector<llvm::Value*> values(top_pos + 1, nullptr);
  for (size_t i = 0; i <= top_pos; ++i) {
    if (point_of[i] < 0) continue;
    ir::NodeId id = m_nodes[i];
    const ir::Node& n = g.node(id);
    bool layout = moves_elements(n.kind);
    auto operand = [&](size_t k) {
      ir::NodeId o = n.operands[k];
      if (member(o)) return values[pos(o)];
      size_t at = layout ? operand_points[i][k] : static_cast<size_t>(point_of[i]);
      return load(ats[at], o);
    };
    llvm::Value* v = nullptr;
    if (id == group.anchor) {
      v = anchor_value;
    } else if (ir::category(n.kind) == ir::OpCategory::binary) {
      ir::DType dtype = g.node(n.operands[0]).type.dtype;  // the operands'
      bool exact = ir::is_exact_op(n.kind, dtype);
      auto op = [&](llvm::Value* a, llvm::Value* c) {
        return exact ? m_kb.exact_binary(n.kind, dtype, a, c) : m_kb.binary(n.kind, a, c);
      };
      if (n.attrs.literal_side == ir::LiteralSide::lhs) {
        llvm::Value* x = operand(0);
        v = op(m_kb.typed_literal(dtype, n.attrs.literal), x);
      } else if (n.attrs.literal_side == ir::LiteralSide::rhs) {
        v = op(operand(0), m_kb.typed_literal(dtype, n.attrs.literal));
      } else {
        // The second operand's loads first, as the code generator has always emitted them.
        llvm::Value* rhs = operand(1);
        v = op(operand(0), rhs);
      }
    } else if (ir::category(n.kind) == ir::OpCategory::unary) {
      ir::DType dtype = g.node(n.operands[0]).type.dtype;
      v = ir::is_exact_op(n.kind, dtype) ? m_kb.exact_unary(n.kind, dtype, operand(0))
                                                    : m_kb.unary(n.kind, operand(0));
    } else if (n.kind == ir::OpKind::cast) {
      v = m_kb.cast_value(g.node(n.operands[0]).type.dtype, n.type.dtype, operand(0));
    } else if (n.kind == ir::OpKind::arange) {
      // Its value is its own index (an i64 coordinate).
      llvm::Value* c = project(ats[static_cast<size_t>(point_of[i])], id)[0];
      v = n.type.dtype == ir::DType::f32 ? b.CreateSIToFP(c, m_kb.f32())
                                         : b.CreateSExtOrTrunc(c, m_kb.value_type(n.type.dtype));
    } else if (n.kind == ir::OpKind::where) {
      // cond ? a : b, a literal in the result's dtype where the text writes one.
      ir::LiteralSide side = n.attrs.literal_side;
      llvm::Value* c = operand(0);
      size_t next = 1;
      llvm::Value* a = side == ir::LiteralSide::lhs || side == ir::LiteralSide::both
                           ? m_kb.typed_literal(n.type.dtype, n.attrs.literal)
                           : operand(next++);
      llvm::Value* d = side == ir::LiteralSide::rhs ? m_kb.typed_literal(n.type.dtype, n.attrs.literal)
                       : side == ir::LiteralSide::both
                           ? m_kb.typed_literal(n.type.dtype, n.attrs.literal2)
                           : operand(next);
      v = b.CreateSelect(c, a, d);
    } else if (n.kind == ir::OpKind::embedding) {
      v = gathered(ats[static_cast<size_t>(point_of[i])], id);
    } else if (n.kind == ir::OpKind::concat) {
      llvm::Value* c = project(ats[static_cast<size_t>(point_of[i])], id)[static_cast<size_t>(n.attrs.axis)];
      std::vector<llvm::Value*> parts;
      for (size_t k = 0; k < n.operands.size(); ++k) parts.push_back(operand(k));
      v = parts.back();
      int64_t end = n.type.shape.dim(n.attrs.axis);
      for (size_t k = n.operands.size() - 1; k-- > 0;) {
        end -= g.node(n.operands[k + 1]).type.shape.dim(n.attrs.axis);
        v = b.CreateSelect(b.CreateICmpSLT(c, m_kb.i64c(end)), parts[k], v);
      }
    } else {
      v = operand(0);  // permute, slice, reshape
    }
    values[i] = m_kb.round_to(n.type.dtype, v);
  }
  return values[top_pos];
}

}  // namespace

llvm::Value* group_value(KernelBuilder& kb, ir::NodeId top, Point point, llvm::Value* anchor_value) {
  Values values(kb);
  return values.value(top, std::move(point), anchor_value);
}

}  // namespace kiln::compiler::cpu::detail
