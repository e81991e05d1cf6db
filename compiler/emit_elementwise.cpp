// Elementwise kernels: one thread per output element, broadcast operands read through strides.
#include "compiler/emit_internal.h"
#include "ir/scalar.h"

#include <algorithm>

namespace kiln::compiler::detail {

namespace {
using T = CudaText::Value;
std::string text(const T& v) { return v.text; }
}  // namespace


namespace {

// Opens a kernel of one thread per element of the group's root: `e` is the element's index.
void open_per_element(Code& code, const KernelContext& ctx) {
  int threads = static_cast<int>(ctx.kernel.launch.block[0]);
  code.open(kernel_signature(ctx, threads));
  // Unsigned: the last block's indices may pass 2^31 - 1 when the tensor is that large.
  code.line("const unsigned eu = (unsigned)blockIdx.x * " + to_str(threads) +
            "u + (unsigned)threadIdx.x;");
  Extent total = ctx.sizes.elements(ctx.kernel.group.root);
  code.line("if (eu >= " + (total.fixed() ? total.expr() + "u" : "(unsigned)" + total.expr()) +
            ") return;");
  code.line("const int e = (int)eu;");
}

}  // namespace

void emit_elementwise(Code& code, const KernelContext& ctx) {
  open_per_element(code, ctx);
  ElementIndex index;
  index.linear = "e";
  std::string value = emit_epilogue(code, ctx, "", index);
  emit_store(code, ctx, value, "e");
  code.close();
}

void emit_gather(Code& code, const KernelContext& ctx) {
  // embedding(table, ids): element e is column e % D of the table's row ids[e / D], or 0 where
  // that id is outside [0, V); then the group's epilogue.
  const ir::Node& anchor = ctx.graph.node(ctx.kernel.group.anchor);
  ir::NodeId table = anchor.operands[0], ids = anchor.operands[1];
  open_per_element(code, ctx);
  std::string width = ctx.sizes.dim(table, 1).expr(), rows = ctx.sizes.dim(table, 0).expr();
  code.line("const long long gid = (long long)" + ctx.param(ids) + "[e / " + width + "];");
  ir::DType dtype = ctx.graph.node(table).type.dtype;
  code.line("const float gathered = gid >= 0 && gid < " + rows + " ? " +
            load_as_float(dtype, ctx.param(table) + "[gid * " + width + " + e % " + width + "]") +
            " : 0.0f;");
  // The element's coordinates for the epilogue's broadcast reads (a position embedding added to
  // a batch's), each marked used: the epilogue may read only some of them.
  ElementIndex index;
  emit_coords(code, dims_of(ctx, ctx.kernel.group.root), "e", index);
  index.linear = "e";
  std::string used;
  for (const std::string& c : index.coords) used += "(void)" + c + "; ";
  code.line(used.substr(0, used.size() - 1));
  std::string value = emit_epilogue(code, ctx, "gathered", index);
  emit_store(code, ctx, value, "e");
  code.close();
}

namespace {

// One row of a row op's input: `len` elements `inner` apart from `base`, read through the
// group's prologue when the anchor's first operand is a fused member.
class RowInput {
 public:
  RowInput(Code& code, const KernelContext& ctx, ValueEmitter& values)
      : m_code(code), m_ctx(ctx), m_values(values) {
    const ir::Node& anchor = ctx.graph.node(ctx.kernel.group.anchor);
    m_in = anchor.operands[0];
    const auto& nodes = ctx.kernel.group.nodes;
    m_fused = std::binary_search(nodes.begin(), nodes.end(), m_in);
    const ir::Shape& shape = ctx.graph.node(m_in).type.shape;
    int axis = anchor.attrs.axis;
    m_len = ctx.sizes.dim(m_in, axis);
    m_inner = ctx.sizes.product(m_in, axis + 1, shape.rank());
    m_rows = ctx.sizes.product(m_in, 0, axis) * m_inner;
    m_unit_inner = m_inner.fixed() && m_inner.coef == 1;
  }

  const Extent& len() const { return m_len; }
  const Extent& inner() const { return m_inner; }
  const Extent& rows() const { return m_rows; }
  bool unit_inner() const { return m_unit_inner; }
  bool fused() const { return m_fused; }
  ir::DType dtype() const { return m_ctx.graph.node(m_in).type.dtype; }
  // The input element's index for row element j.
  std::string offset(const std::string& j) const {
    return m_unit_inner ? "base + " + j : "base + " + j + " * " + m_inner.expr();
  }
  // Emits what element j needs and returns its float value: a load, or the prologue's value
  // computed in a block of its own into `into` (declared here).
  std::string element(const std::string& j, const std::string& into) {
    return read(j, into, false);
  }
  // As element(), in the input's value type (value_type: an integer stays one).
  std::string typed_element(const std::string& j, const std::string& into) {
    return read(j, into, true);
  }

 private:
  Code& m_code;
  const KernelContext& m_ctx;
  ValueEmitter& m_values;
  ir::NodeId m_in = -1;
  bool m_fused = false;
  bool m_unit_inner = true;
  Extent m_len, m_inner, m_rows;

  std::string read(const std::string& j, const std::string& into, bool typed) {
    if (!m_fused) {
      std::string at = m_ctx.param(m_in) + "[" + offset(j) + "]";
      return typed ? load_value(dtype(), at) : load_as_float(dtype(), at);
    }
    // A fused input is computed here from the prologue: it has no parameter of its own.
    m_code.line((typed ? value_type(dtype()) : std::string("float")) + " " + into + ";");
    m_code.open("{");
    std::string v = m_values.value(m_in, Frame{m_in, {}, offset(j)}, "");
    m_code.line(into + " = " + v + ";");
    m_code.close();
    return into;
  }
};

const char* k_minus_inf = "kiln_as_float(0xff800000u)";

void warp_sum(Code& code, const std::string& v) {
  code.line("for (int o = 16; o > 0; o >>= 1) " + v + " += __shfl_xor_sync(0xffffffffu, " + v +
            ", o);");
}

// `fn` fmaxf (a softmax's row max: a NaN reaches every output through exp anyway) or kiln_max
// (the max reduction, which keeps a NaN as PyTorch's amax does).
void warp_max(Code& code, const std::string& v, const char* fn = "fmaxf") {
  code.line("for (int o = 16; o > 0; o >>= 1) " + v + " = " + fn + "(" + v +
            ", __shfl_xor_sync(0xffffffffu, " + v + ", o));");
}

// Stores the epilogue of the row op's value `value` at row element j (softmax, norms).
void emit_row_store(Code& code, const KernelContext& ctx, ValueEmitter& values,
                    const RowInput& row, const std::string& value) {
  code.line("const int e = " + row.offset("j") + ";");
  std::string result = values.value(ctx.kernel.group.root,
                                    Frame{ctx.kernel.group.root, {}, "e"}, value);
  emit_store(code, ctx, result, "e");
}

void emit_reduce(Code& code, const KernelContext& ctx, ValueEmitter& values, RowInput& row,
                 const ir::Node& anchor) {
  bool is_max = anchor.kind == ir::OpKind::max;
  std::string len_u = row.len().fixed() ? row.len().expr() + "u" : "(unsigned)" + row.len().expr();
  code.line(std::string("float acc = ") + (is_max ? k_minus_inf : "0.0f") + ";");
  code.open("for (unsigned j = lane; j < " + len_u + "; j += 32) {");
  std::string x = row.element("j", "x");
  code.line(is_max ? "acc = kiln_max(acc, " + x + ");" : "acc += " + x + ";");
  code.close();
  if (is_max) warp_max(code, "acc", "kiln_max");
  else warp_sum(code, "acc");
  code.line("if (lane != 0) return;");
  CudaText m;
  std::string value = anchor.kind == ir::OpKind::mean
                          ? ir::row_mean(m, T{"acc"}, T{"(float)" + row.len().expr()}).text
                          : "acc";
  // The reduced value's index is the row's: the outer and inner coordinates in order.
  std::string result = values.value(ctx.kernel.group.root,
                                    Frame{ctx.kernel.group.root, {}, "row"}, value);
  emit_store(code, ctx, result, "row");
}

// cumsum along the row, 32 elements at a time: each lane's element, an inclusive scan across
// the warp (log2(32) shuffle steps), plus the carry of the elements before. Integers add as
// unsigned (two's complement wrapping), floats in fp32, each result rounded to its dtype by the
// epilogue's store.
void emit_scan(Code& code, const KernelContext& ctx, ValueEmitter& values, RowInput& row) {
  ir::DType dtype = row.dtype();
  bool integer = ir::is_integer(dtype);
  std::string acc = !integer ? "float" : dtype == ir::DType::i32 ? "unsigned" : "unsigned long long";
  std::string len_u = row.len().fixed() ? row.len().expr() + "u" : "(unsigned)" + row.len().expr();
  code.line(acc + " carry = 0;");
  code.open("for (unsigned c = 0; c < " + len_u + "; c += 32u) {");
  code.line("const unsigned j = c + (unsigned)lane;");
  code.line(acc + " x = 0;");
  code.open("if (j < " + len_u + ") {");
  code.line("x = (" + acc + ")(" + row.typed_element("j", "xj") + ");");
  code.close();
  code.open("for (int o = 1; o < 32; o <<= 1) {");
  code.line("const " + acc + " y = __shfl_up_sync(0xffffffffu, x, o);");
  code.line("if (lane >= o) x += y;");
  code.close();
  code.line("x += carry;");
  code.line("carry = __shfl_sync(0xffffffffu, x, 31);");
  code.open("if (j < " + len_u + ") {");
  emit_row_store(code, ctx, values, row, integer ? "(" + value_type(dtype) + ")(x)" : "x");
  code.close();
  code.close();
}

}  // namespace

void emit_rows(Code& code, const KernelContext& ctx) {
  const ir::Graph& g = ctx.graph;
  const ir::Node& anchor = g.node(ctx.kernel.group.anchor);
  ValueEmitter values(code, ctx);
  RowInput row(code, ctx, values);
  const Extent& len_e = row.len();
  std::string len = len_e.expr();
  // With u appended: an unsigned loop bound.
  std::string len_u = len_e.fixed() ? len + "u" : "(unsigned)" + len;
  int warps = static_cast<int>(ctx.kernel.launch.block[0]) / 32;

  code.open(kernel_signature(ctx, warps * 32));
  code.line("const int row = (int)blockIdx.x * " + to_str(warps) + " + ((int)threadIdx.x >> 5);");
  code.line("const int lane = (int)threadIdx.x & 31;");
  code.line("if (row >= " + row.rows().expr() + ") return;");
  if (row.unit_inner()) {
    code.line("const int base = row * " + len + ";");
  } else {
    code.line("const int base = (row / " + row.inner().expr() + ") * " +
              (len_e * row.inner()).expr() + " + row % " + row.inner().expr() + ";");
  }
  if (anchor.kind == ir::OpKind::sum || anchor.kind == ir::OpKind::mean ||
      anchor.kind == ir::OpKind::max) {
    emit_reduce(code, ctx, values, row, anchor);
    code.close();
    return;
  }
  if (anchor.kind == ir::OpKind::cumsum) {
    emit_scan(code, ctx, values, row);
    code.close();
    return;
  }
  // Rows up to 1024 stay in registers (one read); longer rows are read again per pass. A
  // symbolic row length is planned for at its upper bound.
  int64_t per_lane = (len_e.hi + 31) / 32;
  bool cached = len_e.hi <= 1024;
  bool softmax = anchor.kind == ir::OpKind::softmax;
  CudaText m;  // the row formulas of ir/scalar.h as text
  auto for_cached = [&](bool stop_at_end) {
    code.line("#pragma unroll");
    code.open("for (int i = 0; i < " + to_str(per_lane) + "; ++i) {");
    code.line("const int j = lane + 32 * i;");
    if (stop_at_end) code.line("if (j >= " + len + ") break;");
  };
  auto for_uncached = [&] { code.open("for (unsigned j = lane; j < " + len_u + "; j += 32) {"); };

  if (softmax) {
    code.line(std::string("float mx = ") + k_minus_inf + ";");
    if (cached) {
      code.line("float x[" + to_str(per_lane) + "];");
      for_cached(false);
      if (row.fused()) {
        code.line(std::string("x[i] = ") + k_minus_inf + ";");
        code.open("if (j < " + len + ") {");
        code.line("x[i] = " + row.element("j", "xj") + ";");
        code.close();
      } else {
        code.line("x[i] = j < " + len + " ? " + row.element("j", "xj") + " : " + k_minus_inf +
                  ";");
      }
      code.line("mx = fmaxf(mx, x[i]);");
      code.close();
    } else {
      for_uncached();
      code.line("mx = fmaxf(mx, " + row.element("j", "xj") + ");");
      code.close();
    }
    warp_max(code, "mx");
    code.line("float sum = 0.0f;");
    if (cached) {
      code.line("#pragma unroll");
      code.open("for (int i = 0; i < " + to_str(per_lane) + "; ++i) {");
      code.line("x[i] = lane + 32 * i < " + len + " ? " + text(ir::softmax_exp(m, T{"x[i]"}, T{"mx"})) +
                " : 0.0f;");
      code.line("sum += x[i];");
      code.close();
    } else {
      for_uncached();
      code.line("sum += " + text(ir::softmax_exp(m, T{row.element("j", "xj")}, T{"mx"})) + ";");
      code.close();
    }
    warp_sum(code, "sum");
    code.line("const float inv = " + text(ir::reciprocal(m, T{"sum"})) + ";");
    if (cached) {
      for_cached(true);
      emit_row_store(code, ctx, values, row, text(m.mul(T{"x[i]"}, T{"inv"})));
    } else {
      for_uncached();
      T e = ir::softmax_exp(m, T{row.element("j", "xj")}, T{"mx"});
      emit_row_store(code, ctx, values, row, text(m.mul(e, T{"inv"})));
    }
    code.close();
    code.close();
    return;
  }

  // rms_norm and layer_norm over the last axis, statistics in fp32 over two passes: the mean
  // (layer_norm), then the mean squared deviation from it (rms_norm: from 0). layer_norm works on
  // the row less its first element x0 (the CPU target's build_rows does the same): x - x0 is
  // exact for a row far from 0 next to its spread (1e4 and noise of 0.01), where the mean of the
  // row itself loses the deviations to its own fp32 rounding (5% off fp64 there).
  bool layer = anchor.kind == ir::OpKind::layer_norm;
  std::string weight = ctx.param(anchor.operands[1]);
  std::string bias = layer ? ctx.param(anchor.operands[2]) : "";
  ir::DType pdtype = g.node(anchor.operands[1]).type.dtype;
  if (layer) code.line("const float x0 = " + row.element("0", "x0f") + ";");
  auto less_x0 = [&](const std::string& x) { return layer ? "(" + x + " - x0)" : x; };
  code.line("float mean = 0.0f;");
  if (cached) {
    code.line("float x[" + to_str(per_lane) + "];");
    for_cached(false);
    code.line("x[i] = 0.0f;");
    code.open("if (j < " + len + ") {");
    code.line("x[i] = " + less_x0(row.element("j", "xj")) + ";");
    code.close();
    if (layer) code.line("mean += x[i];");
    code.close();
  } else if (layer) {
    for_uncached();
    code.line("mean += " + less_x0(row.element("j", "xj")) + ";");
    code.close();
  }
  if (layer) {
    warp_sum(code, "mean");
    code.line("mean = " + text(ir::row_mean(m, T{"mean"}, T{"(float)" + len})) + ";");
  }
  code.line("float squares = 0.0f;");
  if (cached) {
    for_cached(true);
    code.line("const float d = x[i] - mean;");
  } else {
    for_uncached();
    code.line("const float d = " + less_x0(row.element("j", "xj")) + " - mean;");
  }
  code.line("squares += d * d;");
  code.close();
  warp_sum(code, "squares");
  code.line("const float scale = " +
            text(ir::norm_scale(m, T{"squares"}, T{"(float)" + len}, T{literal(anchor.attrs.eps)})) +
            ";");
  std::string x;
  if (cached) {
    for_cached(true);
    x = "x[i]";
  } else {
    for_uncached();
    x = less_x0(row.element("j", "xj"));
  }
  T y = ir::norm_output(
      m, T{x}, T{"mean"}, T{"scale"}, [&] { return T{load_as_float(pdtype, weight + "[j]")}; },
      [&] { return T{load_as_float(pdtype, bias + "[j]")}; }, layer);
  emit_row_store(code, ctx, values, row, y.text);
  code.close();
  code.close();
}

}  // namespace kiln::compiler::detail
