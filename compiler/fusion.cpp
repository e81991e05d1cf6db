// Greedy producer-into-consumer fusion over the node list, walked from the end, then wide groups
// cut where their kernels would read too many buffers.
#include "compiler/fusion.h"

#include <algorithm>

namespace kiln::compiler {

GroupKind anchor_kind(ir::OpKind kind) {
  switch (ir::category(kind)) {
    case ir::OpCategory::matmul:
      return GroupKind::matmul;
    case ir::OpCategory::softmax:
      return GroupKind::softmax;
    case ir::OpCategory::reduce:
      return GroupKind::reduce;
    case ir::OpCategory::norm:
      return GroupKind::norm;
    case ir::OpCategory::attention:
      return GroupKind::attention;
    case ir::OpCategory::gather:
      return GroupKind::gather;
    case ir::OpCategory::scan:
      return GroupKind::scan;
    case ir::OpCategory::input:
    case ir::OpCategory::binary:
    case ir::OpCategory::unary:
    case ir::OpCategory::cast:
    case ir::OpCategory::layout:
    case ir::OpCategory::select:
    case ir::OpCategory::arange:
      return GroupKind::elementwise;
  }
  return GroupKind::elementwise;
}

bool is_row_op(GroupKind kind) {
  return kind == GroupKind::softmax || kind == GroupKind::reduce || kind == GroupKind::norm ||
         kind == GroupKind::scan;
}

bool is_layout(ir::OpKind kind) { return ir::fusion_class(kind) == ir::FusionClass::layout; }

bool is_elementwise(ir::OpKind kind) {
  ir::FusionClass c = ir::fusion_class(kind);
  return c == ir::FusionClass::pointwise || c == ir::FusionClass::layout;
}

bool is_view(const ir::Graph& graph, ir::NodeId id) {
  if (graph.node(id).kind != ir::OpKind::reshape) return false;
  const auto& outs = graph.outputs();
  return std::find(outs.begin(), outs.end(), id) == outs.end();
}

namespace {

// Splits group #g (members in node order; group_of[v] == g for its members) into groups that
// read at most `max_reads` buffers each (for max_reads >= 2), appending them to `out`.
// Bottom-up, a member reads what its operands read, a fused operand's reads counted once per use
// (an upper bound on the distinct buffers); where that passes the limit, the member's fused
// operands with the most reads become roots of kernels of their own, read once each. So a long
// chain is cut into kernels that read close to the limit, and a balanced tree into full
// subtrees. Linear in the group's size. `reads` and `owner` (-1 for every member on entry) are
// scratch indexed by node.
void cut_wide_group(const ir::Graph& graph, const KernelGroup& group, int g,
                    const std::vector<int>& group_of, const std::vector<ir::NodeId>& consumer,
                    size_t max_reads, std::vector<size_t>& reads, std::vector<int>& owner,
                    std::vector<KernelGroup>& out) {
  // A fused operand: a member of this group not cut off (owner[v] becomes v when it is).
  auto fused = [&](ir::NodeId v) {
    return group_of[static_cast<size_t>(v)] == g && owner[static_cast<size_t>(v)] < 0;
  };
  bool any_cut = false;
  for (ir::NodeId m : group.nodes) {
    const auto& operands = graph.node(m).operands;
    size_t total = 0;
    std::vector<ir::NodeId> inside;  // at most two
    for (auto it = operands.begin(); it != operands.end(); ++it) {
      if (fused(*it)) {
        inside.push_back(*it);
        total += reads[static_cast<size_t>(*it)];
      } else if (std::find(operands.begin(), it, *it) == it) {
        total += 1;  // add(x, x) reads x once
      }
    }
    std::sort(inside.begin(), inside.end(), [&](ir::NodeId a, ir::NodeId b) {
      return reads[static_cast<size_t>(a)] > reads[static_cast<size_t>(b)];
    });
    for (ir::NodeId op : inside) {
      if (total <= max_reads) break;
      owner[static_cast<size_t>(op)] = op;
      total -= reads[static_cast<size_t>(op)] - 1;
      any_cut = true;
    }
    reads[static_cast<size_t>(m)] = total;
  }
  if (!any_cut) {
    out.push_back(group);
    return;
  }
  // From the root down, a member not cut off computes in its consumer's kernel.
  owner[static_cast<size_t>(group.root)] = group.root;
  for (auto it = group.nodes.rbegin(); it != group.nodes.rend(); ++it) {
    auto m = static_cast<size_t>(*it);
    if (owner[m] < 0) owner[m] = owner[static_cast<size_t>(consumer[m])];
  }
  size_t first = out.size();
  for (ir::NodeId m : group.nodes) {
    if (owner[static_cast<size_t>(m)] != m) continue;
    KernelGroup part;
    part.root = m;
    out.push_back(part);
  }
  for (ir::NodeId m : group.nodes) {
    // Parts were appended in root order: find the member's by binary search.
    ir::NodeId root = owner[static_cast<size_t>(m)];
    auto part = std::lower_bound(
        out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), root,
        [](const KernelGroup& candidate, ir::NodeId r) { return candidate.root < r; });
    part->nodes.push_back(m);
    if (m == group.anchor) {
      part->anchor = m;
      part->kind = group.kind;
    }
  }
}

// True when a short single-use elementwise chain under `id` starts at a matmul or row op of
// `id`'s shape: that chain is better fused as the anchor's epilogue than as a row op's prologue
// (one kernel either way; the anchor keeps its epilogue). Looks at most 8 levels down.
bool feeds_on_anchor(const ir::Graph& graph, ir::NodeId id,
                     const std::vector<std::vector<ir::NodeId>>& consumers) {
  const ir::Shape& shape = graph.node(id).type.shape;
  std::vector<ir::NodeId> frontier{id};
  for (int depth = 0; depth < 8 && !frontier.empty(); ++depth) {
    std::vector<ir::NodeId> next;
    for (ir::NodeId v : frontier) {
      for (ir::NodeId op : graph.node(v).operands) {
        const ir::Node& n = graph.node(op);
        bool single = graph.use_counts()[static_cast<size_t>(op)] == 1 &&
                      consumers[static_cast<size_t>(op)].size() == 1;
        if (!single) continue;
        GroupKind kind = anchor_kind(n.kind);
        if (kind != GroupKind::elementwise && kind != GroupKind::gather) {  // a gather joins too
          if (n.type.shape == shape) return true;
        } else if (ir::category(n.kind) != ir::OpCategory::layout && next.size() < 16) {
          next.push_back(op);
        }
      }
    }
    frontier = std::move(next);
  }
  return false;
}

}  // namespace

std::vector<KernelGroup> fuse(const ir::Graph& graph, size_t max_reads,
                              const std::vector<AttentionMatch>& attention) {
  const auto& nodes = graph.nodes();
  const size_t n = nodes.size();
  std::vector<std::vector<ir::NodeId>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    for (ir::NodeId op : nodes[i].operands)
      consumers[static_cast<size_t>(op)].push_back(static_cast<ir::NodeId>(i));
  }
  std::vector<bool> is_output(n, false);
  for (ir::NodeId out : graph.outputs()) is_output[static_cast<size_t>(out)] = true;

  std::vector<KernelGroup> groups;  // in creation order (roots descending), attention first
  std::vector<int> group_of(n, -1);
  for (const AttentionMatch& m : attention) {
    KernelGroup group;
    group.kind = GroupKind::attention;
    group.root = group.anchor = m.root;
    group.nodes = m.chain;
    std::reverse(group.nodes.begin(), group.nodes.end());  // reversed back below
    group.attention = m;
    for (ir::NodeId id : m.chain) group_of[static_cast<size_t>(id)] = static_cast<int>(groups.size());
    groups.push_back(std::move(group));
  }
  // plain[v]: member v's value is computed at its group's output element (no layout op and no
  // row op between it and the root), so an anchor may join there.
  std::vector<bool> plain(n, false);
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
    if (is_view(graph, id) || group_of[r] >= 0) continue;
    bool single_use = !is_output[r] && graph.use_counts()[r] == 1 && consumers[r].size() == 1;
    GroupKind kind = anchor_kind(node.kind);
    int target = -1;
    if (single_use) {
      ir::NodeId c = consumers[r][0];
      const ir::Node& consumer = nodes[static_cast<size_t>(c)];
      int g = group_of[static_cast<size_t>(c)];
      // An attention kernel reads its operands from buffers: nothing joins it.
      if (g >= 0 && groups[static_cast<size_t>(g)].kind == GroupKind::attention) g = -1;
      GroupKind consumer_kind = anchor_kind(consumer.kind);
      if (g >= 0 && kind == GroupKind::elementwise && node.kind != ir::OpKind::reshape) {
        // An elementwise value joins an elementwise consumer, or a row op as its prologue.
        bool row_op = is_row_op(consumer_kind);
        if (is_elementwise(consumer.kind) ||
            (row_op && consumer.operands[0] == id && !feeds_on_anchor(graph, id, consumers)))
          target = g;
      } else if (g >= 0 && kind == GroupKind::gather &&
                 groups[static_cast<size_t>(g)].anchor >= 0 &&
                 is_row_op(groups[static_cast<size_t>(g)].kind) &&
                 (is_elementwise(consumer.kind) ||
                  (c == groups[static_cast<size_t>(g)].anchor && consumer.operands[0] == id))) {
        // An embedding read by a norm, softmax or reduction (or by its elementwise prologue or
        // epilogue) joins that kernel: each element it reads is gathered from the table there.
        target = g;
      } else if (g >= 0 && kind != GroupKind::elementwise && is_elementwise(consumer.kind) &&
                 !is_layout(consumer.kind) && plain[static_cast<size_t>(c)]) {
        KernelGroup& group = groups[static_cast<size_t>(g)];
        if (group.anchor < 0 && node.type.shape == graph.node(group.root).type.shape) {
          target = g;
          group.anchor = id;
          group.kind = kind;
        }
      }
      if (target >= 0) {
        plain[r] = plain[static_cast<size_t>(c)] && !is_layout(consumer.kind) &&
                   consumer_kind == GroupKind::elementwise;
      }
    }
    if (target < 0) {
      KernelGroup group;
      group.root = id;
      if (kind != GroupKind::elementwise) {
        group.anchor = id;
        group.kind = kind;
      }
      groups.push_back(group);
      target = static_cast<int>(groups.size()) - 1;
      plain[r] = true;
    }
    group_of[r] = target;
    groups[static_cast<size_t>(target)].nodes.push_back(id);
  }

  // Members in node order, then wide groups cut. Every member but the root has one consumer, a
  // member too.
  std::vector<ir::NodeId> consumer(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (consumers[i].size() == 1) consumer[i] = consumers[i][0];
  }
  std::vector<size_t> reads(n, 0);
  std::vector<int> owner(n, -1);
  std::vector<KernelGroup> cut;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::reverse(groups[g].nodes.begin(), groups[g].nodes.end());
    if (groups[g].kind == GroupKind::attention) {
      cut.push_back(groups[g]);
      continue;
    }
    cut_wide_group(graph, groups[g], static_cast<int>(g), group_of, consumer, max_reads, reads,
                   owner, cut);
  }
  groups = std::move(cut);

  // Leaves in first-use order: operands of members (the anchor's are read by the anchor itself)
  // that are not members.
  for (size_t g = 0; g < groups.size(); ++g) {
    for (ir::NodeId member : groups[g].nodes) {
      group_of[static_cast<size_t>(member)] = static_cast<int>(g);
    }
  }
  std::vector<int> listed(n, -1);  // listed[v] == g: v is already a leaf of group g
  for (size_t g = 0; g < groups.size(); ++g) {
    KernelGroup& group = groups[g];
    if (group.kind == GroupKind::attention) continue;
    for (ir::NodeId member : group.nodes) {
      // The anchor reads its operands itself, unless its first operand is a fused member.
      if (member == group.anchor) continue;
      for (ir::NodeId op : graph.node(member).operands) {
        auto o = static_cast<size_t>(op);
        if (group_of[o] == static_cast<int>(g) || listed[o] == static_cast<int>(g)) continue;
        listed[o] = static_cast<int>(g);
        group.leaves.push_back(op);
      }
    }
  }
  std::sort(groups.begin(), groups.end(),
            [](const KernelGroup& a, const KernelGroup& b) { return a.root < b.root; });
  return groups;
}

}  // namespace kiln::compiler
