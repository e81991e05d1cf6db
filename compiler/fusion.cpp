// Greedy producer-into-consumer fusion over the node list, walked from the end.
#include "compiler/fusion.h"

#include <algorithm>

namespace kiln::compiler {

namespace {

bool is_elementwise(ir::OpKind kind) {
  ir::OpCategory c = ir::category(kind);
  return c == ir::OpCategory::binary || c == ir::OpCategory::unary || c == ir::OpCategory::cast;
}

}  // namespace

std::vector<KernelGroup> fuse(const ir::Graph& graph) {
  const auto& nodes = graph.nodes();
  const size_t n = nodes.size();
  std::vector<std::vector<ir::NodeId>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    for (ir::NodeId op : nodes[i].operands)
      consumers[static_cast<size_t>(op)].push_back(static_cast<ir::NodeId>(i));
  }
  std::vector<bool> is_output(n, false);
  for (ir::NodeId out : graph.outputs()) is_output[static_cast<size_t>(out)] = true;

  std::vector<KernelGroup> groups;  // in creation order (roots descending)
  std::vector<int> group_of(n, -1);
  for (size_t r = n; r-- > 0;) {
    const ir::Node& node = nodes[r];
    auto id = static_cast<ir::NodeId>(r);
    if (node.kind == ir::OpKind::input) {
      if (is_output[r]) {
        KernelGroup copy;
        copy.root = id;
        copy.leaves = {id};
        groups.push_back(copy);
      }
      continue;
    }
    bool single_use = !is_output[r] && graph.use_counts()[r] == 1 && consumers[r].size() == 1;
    int target = -1;
    if (single_use) {
      ir::NodeId c = consumers[r][0];
      int g = group_of[static_cast<size_t>(c)];
      if (g >= 0 && is_elementwise(nodes[static_cast<size_t>(c)].kind)) {
        KernelGroup& group = groups[static_cast<size_t>(g)];
        if (is_elementwise(node.kind)) {
          target = g;
        } else if (group.anchor < 0 && node.type.shape == graph.node(group.root).type.shape &&
                   (node.kind == ir::OpKind::matmul || node.kind == ir::OpKind::softmax)) {
          target = g;
          group.anchor = id;
          group.kind = node.kind == ir::OpKind::matmul ? GroupKind::matmul : GroupKind::softmax;
        }
      }
    }
    if (target < 0) {
      KernelGroup group;
      group.root = id;
      if (node.kind == ir::OpKind::matmul || node.kind == ir::OpKind::softmax) {
        group.anchor = id;
        group.kind = node.kind == ir::OpKind::matmul ? GroupKind::matmul : GroupKind::softmax;
      }
      groups.push_back(group);
      target = static_cast<int>(groups.size()) - 1;
    }
    group_of[r] = target;
    groups[static_cast<size_t>(target)].nodes.push_back(id);
  }

  for (KernelGroup& group : groups) {
    std::reverse(group.nodes.begin(), group.nodes.end());
    for (ir::NodeId member : group.nodes) {
      if (member == group.anchor) continue;
      for (ir::NodeId op : graph.node(member).operands) {
        bool inside = std::find(group.nodes.begin(), group.nodes.end(), op) != group.nodes.end();
        bool seen = std::find(group.leaves.begin(), group.leaves.end(), op) != group.leaves.end();
        if (!inside && !seen) group.leaves.push_back(op);
      }
    }
  }
  std::sort(groups.begin(), groups.end(),
            [](const KernelGroup& a, const KernelGroup& b) { return a.root < b.root; });
  return groups;
}

}  // namespace kiln::compiler
