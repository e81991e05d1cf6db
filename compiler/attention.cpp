// The attention pass: the op and the explicit chain become one fused kernel, or a recorded
// fallback that names its reason and the scores it costs.
#include "compiler/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

namespace kiln::compiler {

namespace {

bool is_output(const ir::Graph& graph, ir::NodeId id) {
  const auto& outs = graph.outputs();
  return std::find(outs.begin(), outs.end(), id) != outs.end();
}

// A value only its consumer in the chain reads: one use and not a graph output.
bool private_value(const ir::Graph& graph, ir::NodeId id) {
  return graph.use_counts()[static_cast<size_t>(id)] == 1 && !is_output(graph, id);
}

// The explicit chain ending at matmul `pv`, or nullopt when `pv` does not end one. `scores` is
// set to the QK^T matmul; `problem` to what keeps a matched chain from one kernel, found while
// matching (a mask that enlarges the scores), else left empty.
std::optional<AttentionMatch> match_chain(const ir::Graph& graph, ir::NodeId pv,
                                          ir::NodeId& scores, std::string& problem) {
  const ir::Node& out = graph.node(pv);
  if (out.kind != ir::OpKind::matmul) return std::nullopt;
  AttentionMatch m;
  m.root = pv;
  m.v = out.operands[1];
  ir::NodeId p = out.operands[0];
  const ir::Node& softmax = graph.node(p);
  if (softmax.kind != ir::OpKind::softmax || !private_value(graph, p) ||
      softmax.attrs.axis != softmax.type.shape.rank() - 1)
    return std::nullopt;
  m.chain.push_back(p);
  ir::NodeId x = softmax.operands[0];
  // add(x, mask) or add(mask, x): the side of the scores' shape that is a chain value.
  auto chain_value = [&](ir::NodeId id) {
    const ir::Node& n = graph.node(id);
    return private_value(graph, id) &&
           (n.kind == ir::OpKind::matmul || n.kind == ir::OpKind::mul || n.kind == ir::OpKind::div);
  };
  if (const ir::Node& add = graph.node(x);
      add.kind == ir::OpKind::add && add.attrs.literal_side == ir::LiteralSide::none &&
      private_value(graph, x)) {
    ir::NodeId a = add.operands[0], b = add.operands[1];
    bool left = chain_value(a) && graph.node(a).type.shape == add.type.shape;
    bool right = chain_value(b) && graph.node(b).type.shape == add.type.shape;
    if (!left && !right) {
      // A mask with more batch entries than the scores broadcasts them: still attention, but
      // each of its batches would need the same q, k and v again.
      left = chain_value(a);
      right = !left && chain_value(b);
      if (!left && !right) return std::nullopt;
      const ir::Node& mask = graph.node(left ? b : a);
      problem = "its mask " + ir::to_string(mask.type.shape) + " is larger than the scores " +
                ir::to_string(graph.node(left ? a : b).type.shape) +
                " (the fused kernel broadcasts a mask to the scores, not the scores to a mask)";
    }
    m.chain.push_back(x);
    m.mask = left ? b : a;
    x = left ? a : b;
  }
  if (const ir::Node& s = graph.node(x);
      (s.kind == ir::OpKind::mul || s.kind == ir::OpKind::div) &&
      s.attrs.literal_side != ir::LiteralSide::none && private_value(graph, x)) {
    if (s.kind == ir::OpKind::div && s.attrs.literal_side == ir::LiteralSide::lhs)
      return std::nullopt;  // literal / scores is no scale
    m.scale = s.kind == ir::OpKind::mul ? s.attrs.literal : 1.0 / s.attrs.literal;
    m.chain.push_back(x);
    x = s.operands[0];
  }
  const ir::Node& qk = graph.node(x);
  if (qk.kind != ir::OpKind::matmul || !private_value(graph, x)) return std::nullopt;
  m.chain.push_back(x);
  m.q = qk.operands[0];
  m.k = qk.operands[1];
  m.chain.push_back(pv);
  std::sort(m.chain.begin(), m.chain.end());
  scores = x;
  return m;
}

// Why the fused kernel cannot compute `m` (empty when it can); `problem` is the chain matcher's.
std::string unfusable(const ir::Graph& graph, const PrecisionPlan& precision,
                      const AttentionMatch& m, ir::NodeId scores, const std::string& problem) {
  if (!problem.empty()) return problem;
  if (scores >= 0) {
    const ir::Node& qk = graph.node(scores);
    const ir::Node& pv = graph.node(m.root);
    if (qk.attrs.transpose_a) return "q is read transposed (transpose_a=true)";
    if (!qk.attrs.transpose_b)
      return "k is read as [..., D, S_k]; the fused form is matmul(q, k, transpose_b=true)";
    if (pv.attrs.transpose_a || pv.attrs.transpose_b) return "its second matmul reads transposed";
    MatmulPath a = precision.paths[static_cast<size_t>(scores)];
    MatmulPath b = precision.paths[static_cast<size_t>(m.root)];
    if (a != b) {
      return "its two matmuls run different paths (" + std::string(to_string(a)) + " and " +
             std::string(to_string(b)) + ")";
    }
    if (!std::isfinite(m.scale) || m.scale == 0.0) return "its scale is not finite and non-zero";
  }
  const ir::Shape& q = graph.node(m.q).type.shape;
  const ir::Shape& v = graph.node(m.v).type.shape;
  if (q.symbol(q.rank() - 1) >= 0 || v.symbol(v.rank() - 1) >= 0) return "a symbolic head dim";
  int64_t d = q.dim(q.rank() - 1), dv = v.dim(v.rank() - 1);
  if (d > k_max_attention_head_dim || dv > k_max_attention_head_dim) {
    return "head dim " + std::to_string(std::max(d, dv)) + " > " +
           std::to_string(k_max_attention_head_dim);
  }
  return {};
}

// "[16, 128, 128] f32, 1048576 bytes (1.0 MiB)" for the scores matmul `scores` of a chain.
std::string scores_cost(const ir::Graph& graph, ir::NodeId scores) {
  const ir::TensorType& type = graph.node(scores).type;
  auto bytes = static_cast<uint64_t>(type.bytes());
  std::string text = ir::to_string(type.shape) + " " + std::string(ir::to_string(type.dtype)) +
                     ", " + std::to_string(bytes) + " bytes";
  char human[48] = "";
  if (bytes >= (1u << 20)) {
    std::snprintf(human, sizeof human, " (%.1f MiB)", static_cast<double>(bytes) / (1 << 20));
  } else if (bytes >= (1u << 10)) {
    std::snprintf(human, sizeof human, " (%.1f KiB)", static_cast<double>(bytes) / (1 << 10));
  }
  return text + human + (type.shape.symbolic() ? " at the largest dims" : "");
}

}  // namespace

Expected<AttentionPlan> plan_attention(const ir::Graph& graph, const PrecisionPlan& precision,
                                       FallbackPolicy policy) {
  AttentionPlan plan;
  const auto& nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto id = static_cast<ir::NodeId>(i);
    std::optional<AttentionMatch> m;
    ir::NodeId scores = -1;
    std::string problem;
    if (nodes[i].kind == ir::OpKind::attention) {
      const ir::Node& node = nodes[i];
      m.emplace();
      m->root = id;
      m->chain = {id};
      m->q = node.operands[0];
      m->k = node.operands[1];
      m->v = node.operands[2];
      if (node.operands.size() > 3) m->mask = node.operands[3];
      m->scale = node.attrs.scale;
      m->causal = node.attrs.causal;
    } else if (nodes[i].kind == ir::OpKind::matmul) {
      m = match_chain(graph, id, scores, problem);
    }
    if (!m) continue;
    m->path = precision.paths[i];
    std::string reason = unfusable(graph, precision, *m, scores, problem);
    if (reason.empty()) {
      plan.fused.push_back(std::move(*m));
      continue;
    }
    if (scores < 0) {
      return make_error(error_location(graph, id), describe_node(graph, id), ": ", reason,
                        ": the fused kernel takes static head dims up to ",
                        std::to_string(k_max_attention_head_dim),
                        ", and the attention op has no unfused form; write it as the explicit "
                        "chain matmul(softmax(mul(matmul(q, k, transpose_b=true), scale)), v) to "
                        "run it unfused");
    }
    std::string line = "attention at " + describe_node(graph, id) + " runs unfused: " + reason +
                       "; its scores " + scores_cost(graph, scores) + " are written and read back";
    if (policy == FallbackPolicy::refuse) {
      return make_error(error_location(graph, id), line,
                        "; refused by the fallback policy (--no-fallback, "
                        "RuntimeOptions::fallbacks = FallbackPolicy::refuse)");
    }
    plan.fallbacks.push_back(std::move(line));
  }
  return plan;
}

}  // namespace kiln::compiler
