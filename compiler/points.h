// Where a group's members are evaluated: the point of its index space each member is read at,
// shared by the CUDA emitter (compiler/emit_values.cpp) and the CPU one (compiler/cpu/values.cpp).
#pragma once

#include "compiler/fusion.h"

#include <cstddef>
#include <vector>

namespace kiln::compiler {

// Point 0 is where `top` is evaluated; each layout member (permute, slice, concat, and a reshape
// copied as an output) reads its operands at points of their own, derived from its point.
struct PointPlan {
  // Point d + 1: operand `operand` of member `layout`, at a point derived from point `parent`.
  struct Derived {
    size_t parent = 0;
    ir::NodeId layout = -1;
    size_t operand = 0;
  };
  std::vector<int> point_of;  // per member position up to top's: its point, -1 when top needs none
  std::vector<std::vector<size_t>> operand_points;  // per layout member: its operands' points
  std::vector<Derived> derived;
};

// True for a member whose operands are read at points of their own.
bool moves_elements(ir::OpKind kind);

// The points of the members under `top` (a member of `group`), down to the group's anchor, whose
// operands are not evaluated. From top down, so that a consumer comes before its operands.
PointPlan plan_points(const ir::Graph& graph, const KernelGroup& group, ir::NodeId top);

}  // namespace kiln::compiler
