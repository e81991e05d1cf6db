// Kernel emission entry points: per-kernel dispatch and whole-program text.
#include "compiler/emit.h"

#include "compiler/emit_internal.h"

#include <map>

namespace kiln::compiler {

std::string entry_name(const KernelPlan& kernel) { return "kiln_" + kernel.name; }

namespace {

constexpr size_t k_max_description = 160;

// The kernel's expression over its parameters, e.g. "gelu(add(matmul(p1, p2), p3))". Built in
// node order (no recursion); value names stay out so the text depends only on the graph's
// canonical form.
std::string describe(const ir::Graph& graph, const ProgramPlan& plan, const KernelPlan& kernel) {
  std::map<ir::NodeId, std::string> text;
  auto operand = [&](ir::NodeId id) {
    auto it = text.find(id);
    if (it != text.end()) return it->second;
    return "p" + std::to_string(kernel.param_of(plan.location, id));
  };
  for (ir::NodeId id : kernel.group.nodes) {
    const ir::Node& n = graph.node(id);
    std::string args;
    if (n.attrs.literal_side == ir::LiteralSide::lhs) args = "literal, ";
    for (size_t i = 0; i < n.operands.size(); ++i) args += (i ? ", " : "") + operand(n.operands[i]);
    if (n.attrs.literal_side == ir::LiteralSide::rhs) args += ", literal";
    if (n.kind == ir::OpKind::matmul && n.attrs.transpose_a) args += ", transpose_a";
    if (n.kind == ir::OpKind::matmul && n.attrs.transpose_b) args += ", transpose_b";
    if (n.kind == ir::OpKind::matmul && n.attrs.out_dtype)
      args += ", out_dtype=" + std::string(ir::to_string(*n.attrs.out_dtype));
    if (n.kind == ir::OpKind::cast) args += ", to=" + std::string(ir::to_string(n.type.dtype));
    if (n.kind == ir::OpKind::softmax || ir::category(n.kind) == ir::OpCategory::reduce ||
        ir::category(n.kind) == ir::OpCategory::scan ||
        n.kind == ir::OpKind::slice || n.kind == ir::OpKind::concat || n.kind == ir::OpKind::roll)
      args += ", axis=" + std::to_string(n.attrs.axis);
    if (n.attrs.keepdim) args += ", keepdim";
    if (n.kind == ir::OpKind::slice)
      args += ", " + std::to_string(n.attrs.start) + ".." + std::to_string(n.attrs.end);
    if (n.kind == ir::OpKind::roll) args += ", shift=" + std::to_string(n.attrs.shift);
    if (ir::category(n.kind) == ir::OpCategory::norm) args += ", eps";
    if (n.kind == ir::OpKind::permute) {
      args += ", dims=";
      for (int d : n.attrs.dims) args += std::to_string(d);
    }
    if (n.kind == ir::OpKind::reshape) args += ", to=" + ir::to_string(n.type.shape);
    if (n.kind == ir::OpKind::attention && n.attrs.causal) args += ", causal";
    std::string expr = std::string(ir::to_string(n.kind)) + "(" + args + ")";
    // A comment, not a program: long fused chains are cut so the text stays linear in size.
    if (expr.size() > k_max_description) expr = expr.substr(0, k_max_description - 3) + "...";
    text[id] = std::move(expr);
  }
  if (kernel.split == SplitRole::partials)
    return "the fp32 partial products of " + operand(kernel.group.anchor) + " over " +
           std::to_string(kernel.tile.split_k) + " ranges of K, to p" +
           std::to_string(kernel.partial_param);
  if (kernel.split == SplitRole::sum)
    return operand(kernel.group.root) + ", its matmul the sum of the " +
           std::to_string(kernel.tile.split_k) + " partial products in p" +
           std::to_string(kernel.partial_param);
  return operand(kernel.group.root);
}

}  // namespace

std::string emit_kernel(const ir::Graph& graph, const ProgramPlan& plan, const KernelPlan& kernel,
                        const Sizes& sizes) {
  detail::Code code;
  detail::KernelContext ctx{graph, plan, kernel, sizes};
  code.line("// " + kernel.name + ": " + describe(graph, plan, kernel));
  // A symbolic size shows as its range over the bucket.
  auto size = [](const Extent& x) {
    return x.fixed() ? x.expr() : detail::to_str(x.lo) + ".." + detail::to_str(x.hi);
  };
  if (kernel.split == SplitRole::sum) {
    detail::emit_split_sum(code, ctx);
  } else if (kernel.group.kind == GroupKind::matmul) {
    const MatmulShape& s = kernel.shape;
    const MatmulExtents& e = kernel.extents;
    const MatmulTile& t = kernel.tile;
    code.line("// batch " + size(e.batch) + ", m " + size(e.m) + ", n " + size(e.n) + ", k " +
              size(e.k) + "; tile " +
              detail::to_str(t.bm) + "x" + detail::to_str(t.bn) + "x" + detail::to_str(t.bk) +
              ", " + detail::to_str(t.stages) + " stage(s), " +
              (t.split_k > 1 ? "split " + detail::to_str(t.split_k) + ", " : std::string()) +
              detail::to_str(t.threads()) +
              " threads; " + std::string(to_string(s.path)) + " on " + arch_name(kernel.target.sm));
    if (t.wgmma) {
      detail::emit_matmul_wgmma(code, ctx);
    } else if (uses_mma(s.path)) {
      detail::emit_matmul_mma(code, ctx);
    } else {
      detail::emit_matmul_ffma(code, ctx);
    }
  } else if (kernel.group.kind == GroupKind::attention) {
    const AttentionTile& t = kernel.attention_tile;
    const AttentionExtents& a = kernel.attention_extents;
    code.line("// batch " + size(kernel.extents.batch) + ", s_q " + size(a.sq) + ", s_k " +
              size(a.sk) + ", d " + detail::to_str(a.d) + ", d_v " + detail::to_str(a.dv) +
              "; " + detail::to_str(t.br) + " queries x " + detail::to_str(t.bc) + " keys, " +
              detail::to_str(t.stages) + " stage(s), " +
              (t.dv_slabs > 1 ? "d_v in " + detail::to_str(t.dv_slabs) + " slabs of " +
                                    detail::to_str(t.dv) + ", "
                              : std::string()) +
              detail::to_str(32 * t.warps) +
              " threads; " + std::string(to_string(kernel.group.attention.path)) + " on " +
              arch_name(kernel.target.sm));
    detail::emit_attention(code, ctx);
  } else if (kernel.group.kind == GroupKind::gather) {
    detail::emit_gather(code, ctx);
  } else if (kernel.group.kind != GroupKind::elementwise) {
    detail::emit_rows(code, ctx);
  } else {
    detail::emit_elementwise(code, ctx);
  }
  return code.text();
}

}  // namespace kiln::compiler
