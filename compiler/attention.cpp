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

// True when `reader` is the only node that reads `id` (once or more) and `id` is no output: a
// value the chain keeps to itself.
bool private_to(const ir::Graph& graph, ir::NodeId id, ir::NodeId reader) {
  const auto& ops = graph.node(reader).operands;
  auto reads = std::count(ops.begin(), ops.end(), id);
  return reads > 0 && graph.use_counts()[static_cast<size_t>(id)] == reads && !is_output(graph, id);
}

bool is_scores_step(ir::OpKind kind) {
  ir::OpCategory c = ir::category(kind);
  return c == ir::OpCategory::binary || c == ir::OpCategory::unary || c == ir::OpCategory::cast;
}

// The most nodes one look-ahead below a binary step visits: it keeps the search linear.
constexpr int k_lookahead_budget = 64;

// True when `id`, private to `reader`, is a matmul or a step above one (within `budget` visits).
bool reaches_matmul(const ir::Graph& graph, ir::NodeId id, ir::NodeId reader, int& budget) {
  if (--budget < 0 || !private_to(graph, id, reader)) return false;
  const ir::Node& n = graph.node(id);
  if (n.kind == ir::OpKind::matmul) return true;
  if (!is_scores_step(n.kind)) return false;
  for (ir::NodeId op : n.operands) {
    if (reaches_matmul(graph, op, id, budget)) return true;
  }
  return false;
}

// An attention-shaped chain, found by its shape alone: matmul `pv` reads P, the softmax over the
// last axis of the scores (then casts), as its first operand; the scores are matmul `qk` after
// unary, binary and cast steps; every value from `qk` to P is read only by the next step.
struct Chain {
  ir::NodeId qk = -1, softmax = -1, pv = -1;
  std::vector<ir::NodeId> steps;  // between qk and the softmax, qk's reader first
  std::vector<ir::NodeId> casts;  // between the softmax and pv, the softmax's reader first
};

// The chain ending at matmul `pv`, or nullopt when `pv` does not end one.
std::optional<Chain> find_chain(const ir::Graph& graph, ir::NodeId pv) {
  if (graph.node(pv).kind != ir::OpKind::matmul) return std::nullopt;
  Chain c;
  c.pv = pv;
  ir::NodeId reader = pv, x = graph.node(pv).operands[0];
  while (graph.node(x).kind == ir::OpKind::cast && private_to(graph, x, reader)) {
    c.casts.push_back(x);
    reader = x;
    x = graph.node(x).operands[0];
  }
  const ir::Node& softmax = graph.node(x);
  if (softmax.kind != ir::OpKind::softmax || !private_to(graph, x, reader) ||
      softmax.attrs.axis != softmax.type.shape.rank() - 1)
    return std::nullopt;
  std::reverse(c.casts.begin(), c.casts.end());
  c.softmax = x;
  reader = x;
  x = softmax.operands[0];
  // Down the scores' steps to the matmul: at a binary step with two tensor operands, the first
  // that reaches a matmul (the other is a mask or another tensor the step reads).
  while (true) {
    if (!private_to(graph, x, reader)) return std::nullopt;
    const ir::Node& n = graph.node(x);
    if (n.kind == ir::OpKind::matmul) break;
    if (!is_scores_step(n.kind)) return std::nullopt;
    c.steps.push_back(x);
    ir::NodeId next = -1;
    for (ir::NodeId op : n.operands) {
      int budget = k_lookahead_budget;
      if (n.operands.size() == 1 || reaches_matmul(graph, op, x, budget)) {
        next = op;
        break;
      }
    }
    if (next < 0) return std::nullopt;
    reader = x;
    x = next;
  }
  std::reverse(c.steps.begin(), c.steps.end());
  c.qk = x;
  return c;
}

// True when the cast `id` changes no value: to f32 (which holds every f16 and bf16 value) or to
// the dtype its operand already has.
bool widening_cast(const ir::Graph& graph, ir::NodeId id) {
  ir::DType to = graph.node(id).type.dtype;
  return to == ir::DType::f32 || to == graph.node(graph.node(id).operands[0]).type.dtype;
}

// `chain` as one fused attention. `problem` is set to what keeps it from one kernel, found in
// its shape: a step between the scores and the softmax the kernel does not compute, a rounding
// of the scores or of P it does not do, or a mask that enlarges the scores; else left empty.
AttentionMatch match_chain(const ir::Graph& graph, const Chain& c, std::string& problem) {
  AttentionMatch m;
  m.root = c.pv;
  m.v = graph.node(c.pv).operands[1];
  m.q = graph.node(c.qk).operands[0];
  m.k = graph.node(c.qk).operands[1];
  m.chain = {c.qk, c.softmax, c.pv};
  m.chain.insert(m.chain.end(), c.steps.begin(), c.steps.end());
  m.chain.insert(m.chain.end(), c.casts.begin(), c.casts.end());
  std::sort(m.chain.begin(), m.chain.end());
  // The steps in the kernel's order: casts that change no value anywhere, then at most one
  // scale (mul by a literal, or div by one), then at most one additive mask.
  enum class Seen { nothing, scale, mask } seen = Seen::nothing;
  ir::NodeId below = c.qk;  // the step's operand on the scores' side
  auto unsupported = [&](ir::NodeId id, const std::string& why) {
    if (problem.empty()) problem = "its scores go through " + describe_node(graph, id) + why;
  };
  for (ir::NodeId id : c.steps) {
    const ir::Node& s = graph.node(id);
    ir::NodeId at = below;
    below = id;
    if (s.kind == ir::OpKind::cast) {
      if (!widening_cast(graph, id)) {
        unsupported(id, " to " + std::string(ir::to_string(s.type.dtype)) +
                            ", a rounding the fused kernel (scores in fp32) does not do");
      }
      continue;
    }
    bool literal = s.attrs.literal_side != ir::LiteralSide::none;
    bool scale = s.kind == ir::OpKind::mul ? literal
                                           : s.kind == ir::OpKind::div &&
                                                 s.attrs.literal_side == ir::LiteralSide::rhs;
    if (scale && seen == Seen::nothing) {
      m.scale = s.kind == ir::OpKind::mul ? s.attrs.literal : 1.0 / s.attrs.literal;
      seen = Seen::scale;
      continue;
    }
    bool mask = s.kind == ir::OpKind::add && !literal && s.operands[0] != s.operands[1];
    if (mask && seen != Seen::mask) {
      m.mask = s.operands[0] == at ? s.operands[1] : s.operands[0];
      seen = Seen::mask;
      const ir::Shape& scores = graph.node(at).type.shape;
      if (problem.empty() && scores != s.type.shape) {
        // A mask with more batch entries than the scores broadcasts them: still attention, but
        // each of its batches would need the same q, k and v again.
        problem = "its mask " + ir::to_string(graph.node(m.mask).type.shape) +
                  " is larger than the scores " + ir::to_string(scores) +
                  " (the fused kernel broadcasts a mask to the scores, not the scores to a mask)";
      }
      continue;
    }
    unsupported(id, ", which the fused kernel does not compute (it takes a literal scale, then "
                    "an additive mask)");
  }
  // P reaches the second matmul rounded once, from fp32, to v's dtype (as the tensor-core
  // kernels round it) when every dtype it takes on the way is f32 or v's.
  ir::DType v_dtype = graph.node(m.v).type.dtype;
  std::vector<ir::NodeId> p_values = {c.softmax};
  p_values.insert(p_values.end(), c.casts.begin(), c.casts.end());
  for (ir::NodeId p : p_values) {
    ir::DType d = graph.node(p).type.dtype;
    if (problem.empty() && d != ir::DType::f32 && d != v_dtype) {
      problem = "its probabilities are rounded to " + std::string(ir::to_string(d)) +
                " on the way to a matmul that reads " + std::string(ir::to_string(v_dtype)) +
                " (the fused kernel rounds them once, to v's dtype)";
    }
  }
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
    ir::DType qd = graph.node(m.q).type.dtype, vd = graph.node(m.v).type.dtype;
    if (qd != vd) {
      return "q and k are " + std::string(ir::to_string(qd)) + " and v is " +
             std::string(ir::to_string(vd)) + " (the fused kernel reads all three in one dtype)";
    }
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
    } else if (auto chain = find_chain(graph, id)) {
      m = match_chain(graph, *chain, problem);
      scores = chain->qk;
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
