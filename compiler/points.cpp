// plan_points(): each member's point, from the top of a group down.
#include "compiler/points.h"

#include <algorithm>

namespace kiln::compiler {

bool moves_elements(ir::OpKind kind) {
  return is_layout(kind) || ir::fusion_class(kind) == ir::FusionClass::reshape;
}

PointPlan plan_points(const ir::Graph& graph, const KernelGroup& group, ir::NodeId top) {
  const auto& nodes = group.nodes;
  auto pos = [&](ir::NodeId id) {
    return static_cast<size_t>(std::lower_bound(nodes.begin(), nodes.end(), id) - nodes.begin());
  };
  auto member = [&](ir::NodeId id) { return std::binary_search(nodes.begin(), nodes.end(), id); };
  // Each member's consumer in the group (fusion gives a member one), or -1.
  std::vector<ir::NodeId> consumer(nodes.size(), -1);
  for (ir::NodeId u : nodes) {
    for (ir::NodeId op : graph.node(u).operands)
      if (member(op)) consumer[pos(op)] = u;
  }
  size_t top_pos = pos(top);
  PointPlan plan;
  plan.point_of.assign(top_pos + 1, -1);
  plan.operand_points.resize(top_pos + 1);
  plan.point_of[top_pos] = 0;
  for (size_t i = top_pos + 1; i-- > 0;) {
    if (i != top_pos) {
      ir::NodeId c = consumer[i];
      if (c < 0 || c == group.anchor || c > top || plan.point_of[pos(c)] < 0) continue;
      const ir::Node& cn = graph.node(c);
      if (moves_elements(cn.kind)) {
        auto which = static_cast<size_t>(
            std::find(cn.operands.begin(), cn.operands.end(), nodes[i]) - cn.operands.begin());
        plan.point_of[i] = static_cast<int>(plan.operand_points[pos(c)][which]);
      } else {
        plan.point_of[i] = plan.point_of[pos(c)];
      }
    }
    const ir::Node& n = graph.node(nodes[i]);
    if (nodes[i] != group.anchor && moves_elements(n.kind)) {
      for (size_t k = 0; k < n.operands.size(); ++k) {
        plan.operand_points[i].push_back(plan.derived.size() + 1);
        plan.derived.push_back({static_cast<size_t>(plan.point_of[i]), nodes[i], k});
      }
    }
  }
  return plan;
}

}  // namespace kiln::compiler
