// Fused attention (FlashAttention-2): each block owns a tile of queries and walks the keys a
// tile at a time through shared memory, with an online softmax (running max and sum in fp32,
// the accumulator rescaled when the max moves). QK^T and PV run on tensor cores (their P taken
// from the QK^T accumulators in registers) or, for `highest`, on FFMA. This file holds the
// pieces the kernels share and the FFMA kernel; emit_attention_mma.cpp the mma.sync kernel,
// emit_attention_wgmma.cpp and emit_attention_producer.cpp sm_90a's.
#include "compiler/emit_attention_internal.h"

#include <cfloat>
#include <functional>

namespace kiln::compiler::detail {

namespace attn {

// The pieces emit_attention_internal.h declares (and documents), and the helpers only this file
// uses.

void emit_operands(Code& code, const KernelContext& ctx, const std::string& gtype,
                   bool pointers) {
  const KernelPlan& k = ctx.kernel;
  const AttentionMatch& m = k.group.attention;
  const AttentionExtents& a = k.attention_extents;
  const MatmulExtents& e = k.extents;
  int rank = ctx.graph.node(m.root).type.shape.rank();
  int slabs = k.attention_tile.dv_slabs;
  code.line("const int q0 = (int)blockIdx.x * " + to_str(k.attention_tile.br) + ";");
  if (slabs > 1) {
    code.line("const int n0 = (int)blockIdx.y" + (k.batch_fold > 1 ? " % " + to_str(slabs) : "") +
              " * " + to_str(k.attention_tile.dv) + ";");
  }
  if (rank >= 3 && k.batch_fold > 1) {
    // the batch folded over y and z (plan_attention_grid): the blocks past it have nothing to do
    std::string fold = slabs > 1 ? "(int)blockIdx.y / " + to_str(slabs) : "(int)blockIdx.y";
    code.line("const int bz = (int)blockIdx.z + (int)gridDim.z * (" + fold + ");");
    code.line("if (bz >= " + e.batch.expr() + ") return;");
  } else if (rank >= 3) {
    code.line("const int bz = (int)blockIdx.z;");
  }
  auto offset = [&](const std::array<Extent, 2>& strides, int64_t group = 1) {
    std::string text;
    std::string b = rank == 4 ? "(bz % " + e.inner_batch.expr() + ")" : "bz";
    if (group > 1) b = "(" + b + " / " + to_str(group) + ")";  // grouped heads
    if (strides[1].coef) text += " + " + b + " * " + strides[1].expr();
    if (strides[0].coef) text += " + (bz / " + e.inner_batch.expr() + ") * " + strides[0].expr();
    return text;
  };
  if (!pointers) {
    // (the wgmma kernel reads Q, K and V through its tensor maps)
  } else if (e.per_dim()) {
    code.line("const " + gtype + "* Q = " + ctx.param(m.q) + batch_offset(e, a.q_dims) + ";");
    code.line("const " + gtype + "* K = " + ctx.param(m.k) + batch_offset(e, a.k_dims, a.k_group) +
              ";");
    code.line("const " + gtype + "* V = " + ctx.param(m.v) + batch_offset(e, a.v_dims, a.v_group) +
              ";");
  } else {
    code.line("const " + gtype + "* Q = " + ctx.param(m.q) + offset(a.q) + ";");
    code.line("const " + gtype + "* K = " + ctx.param(m.k) + offset(a.k, a.k_group) + ";");
    code.line("const " + gtype + "* V = " + ctx.param(m.v) + offset(a.v, a.v_group) + ";");
  }
  if (m.mask >= 0) {
    std::string mtype = storage_type(ctx.graph.node(m.mask).type.dtype);
    code.line("const " + mtype + "* M = " + ctx.param(m.mask) +
              (e.per_dim() ? batch_offset(e, a.mask_dims) : offset(a.mask)) + ";");
  }
}

bool reads_key(const KernelContext& ctx) {
  const AttentionMatch& m = ctx.kernel.group.attention;
  return m.mask >= 0 || m.causal ||
         !ctx.kernel.attention_extents.sk.multiple_of(ctx.kernel.attention_tile.bc);
}

namespace {

// The score of query `row`, key `key` (int expressions) from the raw product `dot`: scaled, the
// mask added, and -inf where the key is past S_k or (causal) after the query, in base 2 (the
// score times log2(e)): softmax's exponentials are then exp2f, as FlashAttention's are, and the
// scale and log2(e) fold into one multiply. Declares `row` and `key` as locals only where the
// score reads them (NVRTC warns of unused variables).
std::string score(Code& code, const KernelContext& ctx, const std::string& dot,
                  const std::string& row_expr, const std::string& key_expr) {
  const AttentionMatch& m = ctx.kernel.group.attention;
  const AttentionExtents& a = ctx.kernel.attention_extents;
  const AttentionTile& t = ctx.kernel.attention_tile;
  bool keys_past_end = !a.sk.multiple_of(t.bc);
  bool needs_row = m.mask >= 0 || m.causal;
  bool needs_key = reads_key(ctx);
  std::string row = row_expr, key = key_expr;
  if (needs_row && row_expr != "row") {
    code.line("const int qrow = " + row_expr + ";");
    row = "qrow";
  }
  if (needs_key) {
    code.line("const int key = " + key_expr + ";");
    key = "key";
  }
  constexpr double k_log2e = 1.4426950408889634;
  code.line("float x = " + dot + " * " + literal(m.scale * k_log2e) + ";");
  if (m.mask >= 0) {
    ir::DType dtype = ctx.graph.node(m.mask).type.dtype;
    std::string at = "M[" + row + " * " + a.mask_row.expr() + " + " + key + " * " +
                     a.mask_col.expr() + "]";
    std::string inside = row + " < " + a.sq.expr() + " && " + key + " < " + a.sk.expr();
    if (dtype == ir::DType::boolean) {
      // false: masked out by adding -inf, as PyTorch's scaled_dot_product_attention does with a
      // bool mask, so a +inf or NaN score there still makes its row NaN.
      code.line("if (" + inside + " && !" + at + ") x += kiln_neg_inf;");
    } else {
      // A finite mask past FLT_MAX / log2(e) (PyTorch's finfo(float32).min and finfo(bfloat16)
      // .min, which transformers writes for a padded key) overflows in base 2. Such a score
      // stays the largest finite one of its sign, so a row masked only by such values weighs its
      // keys evenly, as PyTorch's does, where -inf would mask the row out (zeros, or NaN).
      code.open("if (" + inside + ") {");
      code.line("const float mk = " + load_as_float(dtype, at) + ";");
      code.line("const float xm = fmaf(mk, " + literal(k_log2e) + ", x);");
      code.line("x = fabsf(xm) > " + literal(FLT_MAX) + " && fabsf(mk) <= " + literal(FLT_MAX) +
                " && fabsf(x) <= " + literal(FLT_MAX) + " ? copysignf(" + literal(FLT_MAX) +
                ", xm) : xm;");
      code.close();
    }
  }
  std::string masked;
  if (keys_past_end) masked = key + " >= " + a.sk.expr();
  if (m.causal) masked += (masked.empty() ? "" : " || ") + key + " > " + row;
  if (!masked.empty()) code.line("if (" + masked + ") x = kiln_neg_inf;");
  return "x";
}

}  // namespace

std::string key_tiles(const KernelContext& ctx) {
  const AttentionMatch& m = ctx.kernel.group.attention;
  if (!m.causal) return "";
  const AttentionExtents& a = ctx.kernel.attention_extents;
  const AttentionTile& t = ctx.kernel.attention_tile;
  std::string bc = to_str(t.bc), bc1 = to_str(t.bc - 1);
  std::string all = "(" + a.sk.expr() + " + " + bc1 + ") / " + bc;
  std::string upto = "(q0 + " + to_str(t.br) + " + " + bc1 + ") / " + bc;
  return upto + " < " + all + " ? " + upto + " : " + all;
}

namespace {

// The block's first column of v's head dim: "n0" where the grid's y splits it, else "0".
std::string slab_start(const AttentionTile& t) { return t.dv_slabs > 1 ? "n0" : "0"; }

}  // namespace

std::string slab_offset(const AttentionTile& t) { return t.dv_slabs > 1 ? "n0 + " : ""; }

namespace {

// Copies of one key tile's K and V rows (k0 .. k0 + bc) into stage `stage`.
void emit_kv_copy(Code& code, const KernelContext& ctx, const std::string& stage,
                  const std::string& k0, bool async) {
  const KernelPlan& k = ctx.kernel;
  const AttentionTile& t = k.attention_tile;
  const AttentionExtents& a = k.attention_extents;
  ir::DType dtype = ctx.graph.node(k.group.attention.k).type.dtype;
  bool mma = uses_mma(k.group.attention.path);
  TileCopy c;
  c.dtype = dtype;
  c.async = async;
  c.threads = 32 * t.warps;
  c.smem_float = !mma && dtype != ir::DType::f32;
  c.row0 = k0;
  c.col0 = "0";
  c.rows = t.bc;
  c.row_bound = a.sk;
  c.cols = t.d;
  c.col_bound = Extent::constant(a.d);
  c.ld_global = Extent::constant(a.d);
  c.smem_ld = t.k_ld;
  c.src = "K";
  c.dst = "sk + " + stage + " * " + to_str(t.bc * t.k_ld);
  emit_tile_copy(code, c);
  c.cols = t.dv;
  c.col0 = slab_start(t);
  c.col_bound = c.ld_global = Extent::constant(a.dv);
  c.smem_ld = t.v_ld;
  c.src = "V";
  c.dst = "sv + " + stage + " * " + to_str(t.bc * t.v_ld);
  emit_tile_copy(code, c);
}

}  // namespace

void emit_key_loop(Code& code, const KernelContext& ctx, bool async,
                   const std::function<void(const std::string&)>& compute) {
  const AttentionTile& t = ctx.kernel.attention_tile;
  emit_k_loop(
      code, t.stages, ctx.kernel.attention_extents.sk, t.bc,
      [&](const std::string& stage, const std::string& k0) {
        emit_kv_copy(code, ctx, stage, k0, async);
      },
      compute, key_tiles(ctx));
}

void open_key_tile(Code& code, const KernelContext& ctx, const std::string& smem_t,
                   const std::string& stage) {
  const AttentionTile& t = ctx.kernel.attention_tile;
  code.open("{");
  if (reads_key(ctx)) code.line("const int kc = kt * " + to_str(t.bc) + ";");
  code.line("const " + smem_t + "* kst = sk + " + stage + " * " + to_str(t.bc * t.k_ld) + ";");
  code.line("const " + smem_t + "* vs = sv + " + stage + " * " + to_str(t.bc * t.v_ld) + ";");
}

void open_kernel(Code& code, const KernelContext& ctx, int threads) {
  code.open(kernel_signature(ctx, threads, 1));
  code.line("const int tid = (int)threadIdx.x;");
  code.line("const int t4 = tid & 3;");
  code.line("const float kiln_neg_inf = kiln_as_float(0xff800000u);");
}

std::string row_output(const KernelContext& ctx, const std::string& o, const std::string& l) {
  if (!zero_masked_rows(ctx.graph, ctx.kernel.group.attention)) return o + " / " + l;
  // l is 0 exactly where every score is -inf (every key masked out, or an infinite q or k: each
  // exp then 0), NaN where a score is NaN: that row stays NaN, as the reference's and PyTorch's.
  return "(" + l + " == 0.0f ? 0.0f : " + o + " / " + l + ")";
}

void emit_output(Code& code, const KernelContext& ctx, const std::string& value) {
  const AttentionExtents& a = ctx.kernel.attention_extents;
  code.line("if (m >= " + a.sq.expr() + " || n >= " + to_str(a.dv) + ") continue;");
  ElementIndex index = matmul_output_index(ctx);
  emit_store(code, ctx, value, index.linear);
}

void emit_rescale(Code& code, int dt_count, const std::string& o_lo, const std::string& o_hi,
                  const std::string& alpha) {
  code.line("#pragma unroll");
  code.line("for (int j = 0; j < " + to_str(dt_count) + "; ++j) {");
  code.line("  " + o_lo + " *= " + alpha + ";");
  code.line("  " + o_hi + " *= " + alpha + ";");
  code.line("}");
}

void emit_softmax_step(Code& code, const KernelContext& ctx, int nt_count, int dt_count,
                       const std::string& acc, const std::string& row, const std::string& o_lo,
                       const std::string& o_hi, const std::string& alpha_out) {
  code.line("// scores, and the rows' new max (over the quad that holds each row)");
  code.line("float mx[2] = {m_run[0], m_run[1]};");
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(nt_count) + "; ++nt) {");
  code.line("#pragma unroll");
  code.open("for (int i = 0; i < 4; ++i) {");
  std::string x = score(code, ctx, acc, row, "kc + nt * 8 + t4 * 2 + (i & 1)");
  code.line(acc + " = " + x + ";");
  code.line("mx[i >> 1] = fmaxf(mx[i >> 1], " + x + ");");
  code.close();
  code.close();
  code.line("float base[2];");
  code.line("#pragma unroll");
  code.open("for (int r = 0; r < 2; ++r) {");
  code.line("mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));");
  code.line("mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));");
  code.line("// a row with no finite score yet keeps exp2() finite: its p and l stay 0");
  code.line("base[r] = mx[r] == kiln_neg_inf ? 0.0f : mx[r];");
  code.line("const float alpha = exp2f(m_run[r] - base[r]);");
  code.line("m_run[r] = mx[r];");
  code.line("l_run[r] *= alpha;");
  if (!alpha_out.empty()) {
    code.line(alpha_out + "[r] = alpha;");
  } else {
    emit_rescale(code, dt_count, o_lo, o_hi, "alpha");
  }
  code.close();
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(nt_count) + "; ++nt) {");
  code.line("#pragma unroll");
  code.open("for (int i = 0; i < 4; ++i) {");
  code.line("const float p = exp2f(" + acc + " - base[i >> 1]);");
  code.line(acc + " = p;");
  code.line("l_run[i >> 1] += p;");
  code.close();
  code.close();
}

void emit_quad_sums(Code& code) {
  code.line("// O / l: each row's sum is split over its quad");
  code.line("#pragma unroll");
  code.open("for (int r = 0; r < 2; ++r) {");
  code.line("l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);");
  code.line("l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);");
  code.close();
}

namespace {

// highest: four threads per query, each holding a quarter of q and of the output (elements
// t4, t4 + 4, ...), K and V tiles in shared memory as fp32.
void emit_ffma_kernel(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const AttentionMatch& m = k.group.attention;
  const AttentionTile& t = k.attention_tile;
  const AttentionExtents& a = k.attention_extents;
  ir::DType dtype = ctx.graph.node(m.q).type.dtype;
  bool async = t.stages >= 2 && dtype == ir::DType::f32;
  int threads = 32 * t.warps;
  int dq = t.d / 4, dvq = t.dv / 4;

  open_kernel(code, ctx, threads);
  emit_operands(code, ctx, storage_type(dtype));
  code.line("const int row = q0 + (tid >> 2);");
  code.line("float* sk = (float*)kiln_dynamic_smem();");
  code.line("float* sv = sk + " + to_str(t.stages * t.bc * t.k_ld) + ";");
  code.line("float q[" + to_str(dq) + "];");
  code.line("#pragma unroll");
  code.open("for (int j = 0; j < " + to_str(dq) + "; ++j) {");
  code.line("const int d = t4 + 4 * j;");
  code.line("q[j] = row < " + a.sq.expr() + " && d < " + to_str(a.d) + " ? " +
            load_as_float(dtype, "Q[row * " + to_str(a.d) + " + d]") + " : 0.0f;");
  code.close();
  code.line("float o[" + to_str(dvq) + "];");
  code.line("#pragma unroll");
  code.line("for (int j = 0; j < " + to_str(dvq) + "; ++j) o[j] = 0.0f;");
  code.line("float m_run = kiln_neg_inf, l_run = 0.0f;");

  auto compute = [&](const std::string& stage) {
    open_key_tile(code, ctx, "float", stage);
    code.line("float s[" + to_str(t.bc) + "];");
    code.line("float mx = m_run;");
    code.line("#pragma unroll");
    code.open("for (int j = 0; j < " + to_str(t.bc) + "; ++j) {");
    code.line("float dot = 0.0f;");
    code.line("#pragma unroll");
    code.line("for (int e = 0; e < " + to_str(dq) + "; ++e) dot = fmaf(q[e], kst[j * " +
              to_str(t.k_ld) + " + t4 + 4 * e], dot);");
    code.line("dot += __shfl_xor_sync(0xffffffffu, dot, 1);");
    code.line("dot += __shfl_xor_sync(0xffffffffu, dot, 2);");
    std::string x = score(code, ctx, "dot", "row", "kc + j");
    code.line("s[j] = " + x + ";");
    code.line("mx = fmaxf(mx, " + x + ");");
    code.close();
    code.line("// a row with no finite score yet keeps exp2() finite: its p and l stay 0");
    code.line("const float base = mx == kiln_neg_inf ? 0.0f : mx;");
    code.line("const float alpha = exp2f(m_run - base);");
    code.line("m_run = mx;");
    code.line("l_run *= alpha;");
    code.line("#pragma unroll");
    code.line("for (int e = 0; e < " + to_str(dvq) + "; ++e) o[e] *= alpha;");
    code.line("#pragma unroll");
    code.open("for (int j = 0; j < " + to_str(t.bc) + "; ++j) {");
    code.line("const float p = exp2f(s[j] - base);");
    code.line("l_run += p;");
    code.line("#pragma unroll");
    code.line("for (int e = 0; e < " + to_str(dvq) + "; ++e) o[e] = fmaf(p, vs[j * " +
              to_str(t.v_ld) + " + t4 + 4 * e], o[e]);");
    code.close();
    code.close();
  };
  emit_key_loop(code, ctx, async, compute);

  code.line("#pragma unroll");
  code.open("for (int e = 0; e < " + to_str(dvq) + "; ++e) {");
  code.line("const int m = row;");
  code.line("const int n = " + slab_offset(t) + "t4 + 4 * e;");
  emit_output(code, ctx, row_output(ctx, "o[e]", "l_run"));
  code.close();
  code.close();
}

}  // namespace

}  // namespace attn

void emit_attention(Code& code, const KernelContext& ctx) {
  if (ctx.kernel.attention_tile.wgmma) {
    attn::emit_wgmma_kernel(code, ctx);
  } else if (uses_mma(ctx.kernel.group.attention.path)) {
    attn::emit_mma_kernel(code, ctx);
  } else {
    attn::emit_ffma_kernel(code, ctx);
  }
}

}  // namespace kiln::compiler::detail
