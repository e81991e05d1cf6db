// Elementwise kernels: one thread per output element, broadcast operands read through strides.
#include "compiler/emit_internal.h"

namespace kiln::compiler::detail {

void emit_elementwise(Code& code, const KernelContext& ctx) {
  ir::NodeId root_id = ctx.kernel.group.root;
  int threads = static_cast<int>(ctx.kernel.launch.block[0]);
  code.open(kernel_signature(ctx, threads));
  // Unsigned: the last block's indices may pass 2^31 - 1 when the tensor is that large.
  code.line("const unsigned eu = (unsigned)blockIdx.x * " + to_str(threads) +
            "u + (unsigned)threadIdx.x;");
  Extent total = ctx.sizes.elements(ctx.kernel.group.root);
  code.line("if (eu >= " + (total.fixed() ? total.expr() + "u" : "(unsigned)" + total.expr()) +
            ") return;");
  code.line("const int e = (int)eu;");
  ElementIndex index;
  index.linear = "e";
  if (needs_coords(ctx)) emit_coords(code, dims_of(ctx, root_id), "e", index);
  std::string value = emit_epilogue(code, ctx, "", index);
  emit_store(code, ctx, value, "e");
  code.close();
}

void emit_softmax(Code& code, const KernelContext& ctx) {
  const ir::Graph& g = ctx.graph;
  const ir::Node& sm = g.node(ctx.kernel.group.anchor);
  const ir::Node& in = g.node(sm.operands[0]);
  const ir::Shape& shape = sm.type.shape;
  ir::NodeId anchor = ctx.kernel.group.anchor;
  int axis = sm.attrs.axis;
  Extent len_e = ctx.sizes.dim(anchor, axis);
  Extent inner_e = ctx.sizes.product(anchor, axis + 1, shape.rank());
  Extent rows_e = ctx.sizes.product(anchor, 0, axis) * inner_e;
  std::string len = len_e.expr(), inner = inner_e.expr();
  // With u appended: an unsigned loop bound.
  std::string len_u = len_e.fixed() ? len + "u" : "(unsigned)" + len;
  bool unit_inner = inner_e.fixed() && inner_e.coef == 1;
  int warps = static_cast<int>(ctx.kernel.launch.block[0]) / 32;
  std::string x = ctx.param(sm.operands[0]);
  auto offset = [&](const std::string& j) {
    return unit_inner ? "base + " + j : "base + " + j + " * " + inner;
  };
  auto element = [&](const std::string& j) {
    return load_as_float(in.type.dtype, x + "[" + offset(j) + "]");
  };

  code.open(kernel_signature(ctx, warps * 32));
  code.line("const int row = (int)blockIdx.x * " + to_str(warps) + " + ((int)threadIdx.x >> 5);");
  code.line("const int lane = (int)threadIdx.x & 31;");
  code.line("if (row >= " + rows_e.expr() + ") return;");
  if (unit_inner) {
    code.line("const int base = row * " + len + ";");
  } else {
    code.line("const int base = (row / " + inner + ") * " + (len_e * inner_e).expr() +
              " + row % " + inner + ";");
  }
  // Rows up to 1024 stay in registers (one read); longer rows are read three times. A symbolic
  // row length is planned for at its upper bound.
  int64_t per_lane = (len_e.hi + 31) / 32;
  bool cached = len_e.hi <= 1024;
  code.line("float mx = kiln_as_float(0xff800000u);");
  if (cached) {
    code.line("float x[" + to_str(per_lane) + "];");
    code.line("#pragma unroll");
    code.open("for (int i = 0; i < " + to_str(per_lane) + "; ++i) {");
    code.line("const int j = lane + 32 * i;");
    code.line("x[i] = j < " + len + " ? " + element("j") +
              " : kiln_as_float(0xff800000u);");
    code.line("mx = fmaxf(mx, x[i]);");
    code.close();
  } else {
    code.open("for (unsigned j = lane; j < " + len_u + "; j += 32) {");
    code.line("mx = fmaxf(mx, " + element("j") + ");");
    code.close();
  }
  code.line(
      "for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));");
  code.line("float sum = 0.0f;");
  if (cached) {
    code.line("#pragma unroll");
    code.open("for (int i = 0; i < " + to_str(per_lane) + "; ++i) {");
    code.line("x[i] = lane + 32 * i < " + len + " ? expf(x[i] - mx) : 0.0f;");
    code.line("sum += x[i];");
    code.close();
  } else {
    code.line("for (unsigned j = lane; j < " + len_u + "; j += 32) sum += expf(" +
              element("j") + " - mx);");
  }
  code.line("for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);");
  code.line("const float inv = 1.0f / sum;");
  if (cached) {
    code.line("#pragma unroll");
    code.open("for (int i = 0; i < " + to_str(per_lane) + "; ++i) {");
    code.line("const int j = lane + 32 * i;");
    code.line("if (j >= " + len + ") break;");
  } else {
    code.open("for (unsigned j = lane; j < " + len_u + "; j += 32) {");
  }
  code.line("const int e = " + offset("j") + ";");
  ElementIndex index;
  index.linear = "e";
  if (needs_coords(ctx)) {
    emit_coords(code, dims_of(ctx, anchor), "e", index);
  }
  std::string value = cached ? "x[i] * inv" : "expf(" + element("j") + " - mx) * inv";
  std::string result = emit_epilogue(code, ctx, value, index);
  emit_store(code, ctx, result, "e");
  code.close();
  code.close();
}

}  // namespace kiln::compiler::detail
