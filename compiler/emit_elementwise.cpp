// Elementwise kernels: one thread per output element, broadcast operands read through strides.
#include "compiler/emit_internal.h"

namespace kiln::compiler::detail {

void emit_elementwise(Code& code, const KernelContext& ctx) {
  const ir::Node& root = ctx.graph.node(ctx.kernel.group.root);
  int threads = static_cast<int>(ctx.kernel.launch.block[0]);
  code.open(kernel_signature(ctx, threads));
  // Unsigned: the last block's indices may pass 2^31 - 1 when the tensor is that large.
  code.line("const unsigned eu = (unsigned)blockIdx.x * " + to_str(threads) +
            "u + (unsigned)threadIdx.x;");
  code.line("if (eu >= " + to_str(root.type.shape.elements()) + "u) return;");
  code.line("const int e = (int)eu;");
  ElementIndex index;
  index.linear = "e";
  if (needs_coords(ctx)) emit_coords(code, root.type.shape, "e", index);
  std::string value = emit_epilogue(code, ctx, "", index);
  emit_store(code, ctx, value, "e");
  code.close();
}

void emit_softmax(Code& code, const KernelContext& ctx) {
  const ir::Graph& g = ctx.graph;
  const ir::Node& sm = g.node(ctx.kernel.group.anchor);
  const ir::Node& in = g.node(sm.operands[0]);
  const ir::Shape& shape = sm.type.shape;
  int64_t len = shape.dim(sm.attrs.axis);
  int64_t inner = 1;
  for (int d = sm.attrs.axis + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  int64_t rows = shape.elements() / len;
  int warps = static_cast<int>(ctx.kernel.launch.block[0]) / 32;
  std::string x = ctx.param(sm.operands[0]);
  auto element = [&](const std::string& j) {
    std::string offset = inner == 1 ? "base + " + j : "base + " + j + " * " + to_str(inner);
    return load_as_float(in.type.dtype, x + "[" + offset + "]");
  };
  auto offset = [&](const std::string& j) {
    return inner == 1 ? "base + " + j : "base + " + j + " * " + to_str(inner);
  };

  code.open(kernel_signature(ctx, warps * 32));
  code.line("const int row = (int)blockIdx.x * " + to_str(warps) + " + ((int)threadIdx.x >> 5);");
  code.line("const int lane = (int)threadIdx.x & 31;");
  code.line("if (row >= " + to_str(rows) + ") return;");
  if (inner == 1) {
    code.line("const int base = row * " + to_str(len) + ";");
  } else {
    code.line("const int base = (row / " + to_str(inner) + ") * " + to_str(len * inner) +
              " + row % " + to_str(inner) + ";");
  }
  // Rows up to 1024 stay in registers (one read); longer rows are read three times.
  int64_t per_lane = (len + 31) / 32;
  bool cached = len <= 1024;
  code.line("float mx = kiln_as_float(0xff800000u);");
  if (cached) {
    code.line("float x[" + to_str(per_lane) + "];");
    code.line("#pragma unroll");
    code.open("for (int i = 0; i < " + to_str(per_lane) + "; ++i) {");
    code.line("const int j = lane + 32 * i;");
    code.line("x[i] = j < " + to_str(len) + " ? " + element("j") +
              " : kiln_as_float(0xff800000u);");
    code.line("mx = fmaxf(mx, x[i]);");
    code.close();
  } else {
    code.open("for (unsigned j = lane; j < " + to_str(len) + "u; j += 32) {");
    code.line("mx = fmaxf(mx, " + element("j") + ");");
    code.close();
  }
  code.line(
      "for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));");
  code.line("float sum = 0.0f;");
  if (cached) {
    code.line("#pragma unroll");
    code.open("for (int i = 0; i < " + to_str(per_lane) + "; ++i) {");
    code.line("x[i] = lane + 32 * i < " + to_str(len) + " ? expf(x[i] - mx) : 0.0f;");
    code.line("sum += x[i];");
    code.close();
  } else {
    code.line("for (unsigned j = lane; j < " + to_str(len) + "u; j += 32) sum += expf(" +
              element("j") + " - mx);");
  }
  code.line("for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);");
  code.line("const float inv = 1.0f / sum;");
  if (cached) {
    code.line("#pragma unroll");
    code.open("for (int i = 0; i < " + to_str(per_lane) + "; ++i) {");
    code.line("const int j = lane + 32 * i;");
    code.line("if (j >= " + to_str(len) + ") break;");
  } else {
    code.open("for (unsigned j = lane; j < " + to_str(len) + "u; j += 32) {");
  }
  code.line("const int e = " + offset("j") + ";");
  ElementIndex index;
  index.linear = "e";
  if (needs_coords(ctx)) {
    emit_coords(code, shape, "e", index);
  }
  std::string value = cached ? "x[i] * inv" : "expf(" + element("j") + " - mx) * inv";
  std::string result = emit_epilogue(code, ctx, value, index);
  emit_store(code, ctx, result, "e");
  code.close();
  code.close();
}

}  // namespace kiln::compiler::detail
