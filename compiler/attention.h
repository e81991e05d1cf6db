// Pass: finds the attentions one fused kernel computes (the attention op, and the explicit chain
// matmul(cast*(softmax(add?(mul?(matmul(q, k, transpose_b=true), s), mask?))), v) with casts to
// f32 among the scores' steps), and records every attention that runs unfused: why, and the
// bytes of the scores it materialises.
#pragma once

#include "compiler/options.h"
#include "compiler/precision.h"
#include "ir/graph.h"
#include "support/expected.h"

#include <string>
#include <vector>

namespace kiln::compiler {

// The widest head dim (of q and k, and of v) the fused kernel takes: the block's queries, head
// dim wide, sit in shared memory beside a key tile (at 256: 66 KiB in fp32, 33 KiB in 16 bits).
// The output's head dim is split over the grid's y in slabs of at most 128, each a warp's 16
// rows in registers.
inline constexpr int64_t k_max_attention_head_dim = 256;

// One attention a fused kernel computes: softmax(q k^T * scale + mask, causal) v.
struct AttentionMatch {
  ir::NodeId root = -1;           // the attention op, or the chain's matmul(p, v)
  std::vector<ir::NodeId> chain;  // the nodes it replaces, in node order, root last
  ir::NodeId q = -1, k = -1, v = -1;
  ir::NodeId mask = -1;  // an additive mask broadcast to [..., S_q, S_k], or -1
  double scale = 1.0;
  bool causal = false;      // key j > query i masked (top-left aligned)
  MatmulPath path = MatmulPath::ffma;  // of QK^T and PV
};

// True when a row of `m` whose every score is -inf (every key masked out, or an infinite q or k)
// is zeros: the attention op, as PyTorch's scaled_dot_product_attention (the explicit chain gives
// NaN there, as softmax does).
inline bool zero_masked_rows(const ir::Graph& graph, const AttentionMatch& m) {
  return graph.node(m.root).kind == ir::OpKind::attention;
}

struct AttentionPlan {
  std::vector<AttentionMatch> fused;
  // One line per attention that runs unfused: the op or chain, the reason, and the bytes of the
  // scores tensor the unfused kernels write and read.
  std::vector<std::string> fallbacks;
};

// Finds the attentions of `graph` (its symbols unbound) with each matmul's path from `precision`.
// A chain is any matmul whose first operand is a softmax over the last axis (through casts) of
// scores that a matmul computes through unary, binary and cast steps, every value between the
// two matmuls read only by the next step and no output. A chain the fused kernel cannot compute
// (a step or rounding it does not do, a transposed read, two paths or dtypes, a head dim) is a
// fallback: an error under FallbackPolicy::refuse, else a line in `fallbacks`. An attention op
// that cannot be fused (a head dim over 256 or symbolic) is an error: it has no unfused form.
Expected<AttentionPlan> plan_attention(const ir::Graph& graph, const PrecisionPlan& precision,
                                       FallbackPolicy policy);

}  // namespace kiln::compiler
