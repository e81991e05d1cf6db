// Fused attention (FlashAttention-2): each block owns a tile of queries and walks the keys a
// tile at a time through shared memory, with an online softmax (running max and sum in fp32,
// the accumulator rescaled when the max moves). QK^T and PV run on tensor cores (their P taken
// from the QK^T accumulators in registers) or, for `highest`, on FFMA.
#include "compiler/emit_internal.h"

#include <functional>
#include <stdexcept>

namespace kiln::compiler::detail {

namespace {

// Per-block setup shared by both kernels: q0 (the first query), n0 (the first column of the
// slab of v's head dim, where there are several), bz (the batch: blockIdx.z, or past 65535
// batches folded over y and z, the blocks past the batch returning), the operand pointers Q, K,
// V (and M, the mask) offset to this block's batch.
void emit_operands(Code& code, const KernelContext& ctx, const std::string& gtype,
                   bool pointers = true) {
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

// Whether a score depends on its key's index: a mask, causality, or keys past S_k in the last tile.
bool reads_key(const KernelContext& ctx) {
  const AttentionMatch& m = ctx.kernel.group.attention;
  return m.mask >= 0 || m.causal ||
         !ctx.kernel.attention_extents.sk.multiple_of(ctx.kernel.attention_tile.bc);
}

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
      code.line("if (" + inside + " && !" + at + ") x = kiln_neg_inf;");  // false: masked out
    } else {
      code.line("if (" + inside + ") x = fmaf(" + load_as_float(dtype, at) + ", " +
                literal(k_log2e) + ", x);");
    }
  }
  std::string masked;
  if (keys_past_end) masked = key + " >= " + a.sk.expr();
  if (m.causal) masked += (masked.empty() ? "" : " || ") + key + " > " + row;
  if (!masked.empty()) code.line("if (" + masked + ") x = kiln_neg_inf;");
  return "x";
}

// The number of key tiles a block runs: all of S_k, or for a causal block those up to its last
// query.
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

// The block's first column of v's head dim: "n0" where the grid's y splits it, else "0".
std::string slab_start(const AttentionTile& t) { return t.dv_slabs > 1 ? "n0" : "0"; }

// "n0 + " where the grid's y splits v's head dim, else "".
std::string slab_offset(const AttentionTile& t) { return t.dv_slabs > 1 ? "n0 + " : ""; }

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

// The loop over key tiles (a causal block's up to its last query), K and V copied into the
// stages; compute(stage) emits one tile's math.
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

// Opens one key tile's block: kc, its first key (where scores read it), and kst / vs, its K
// and V stage.
void open_key_tile(Code& code, const KernelContext& ctx, const std::string& smem_t,
                   const std::string& stage) {
  const AttentionTile& t = ctx.kernel.attention_tile;
  code.open("{");
  if (reads_key(ctx)) code.line("const int kc = kt * " + to_str(t.bc) + ";");
  code.line("const " + smem_t + "* kst = sk + " + stage + " * " + to_str(t.bc * t.k_ld) + ";");
  code.line("const " + smem_t + "* vs = sv + " + stage + " * " + to_str(t.bc * t.v_ld) + ";");
}

// The kernel's signature and the names both kernels use: tid, t4 (tid % 4) and -inf.
void open_kernel(Code& code, const KernelContext& ctx, int threads) {
  code.open(kernel_signature(ctx, threads, 1));
  code.line("const int tid = (int)threadIdx.x;");
  code.line("const int t4 = tid & 3;");
  code.line("const float kiln_neg_inf = kiln_as_float(0xff800000u);");
}

// A row's output o / l. With a mask, a row of the attention op may have no key left (l = 0): its
// output is 0 (the op's rule), where 0 / 0 would be NaN. The explicit chain keeps softmax's NaN.
std::string row_output(const KernelContext& ctx, const std::string& o, const std::string& l) {
  if (!zero_masked_rows(ctx.graph, ctx.kernel.group.attention)) return o + " / " + l;
  return "(" + l + " > 0.0f ? " + o + " / " + l + " : 0.0f)";
}

// Stores o / l at every element (m, n) the thread holds, through the group's epilogue.
void emit_output(Code& code, const KernelContext& ctx, const std::string& value) {
  const AttentionExtents& a = ctx.kernel.attention_extents;
  code.line("if (m >= " + a.sq.expr() + " || n >= " + to_str(a.dv) + ") continue;");
  ElementIndex index = matmul_output_index(ctx);
  emit_store(code, ctx, value, index.linear);
}

// O's rows scaled by `alpha` (inside the loop over the thread's two rows r).
void emit_rescale(Code& code, int dt_count, const std::string& o_lo, const std::string& o_hi,
                  const std::string& alpha) {
  code.line("#pragma unroll");
  code.line("for (int j = 0; j < " + to_str(dt_count) + "; ++j) {");
  code.line("  " + o_lo + " *= " + alpha + ";");
  code.line("  " + o_hi + " *= " + alpha + ";");
  code.line("}");
}

// One key tile's online softmax over scores in m16n8 accumulators: `acc` (in terms of nt, the
// accumulator of keys 8 nt .., and i, its element) holds the raw products of query `row` (in
// terms of i) and keys kc + 8 nt + 2 t4 + (i & 1), `nt_count` of them. It turns them into
// scores and then p = exp2(score - the row's new max), rescales the running sum and the output
// (o_lo and o_hi, in terms of j < dt_count and r, the row: o's elements of that row), and adds
// p to the running sum. m_run and l_run hold rows g and g + 8 (r 0 and 1). With `alpha_out` it
// leaves the output alone and stores each row's factor in alpha_out[r] (for emit_rescale once
// nothing in flight writes the output).
void emit_softmax_step(Code& code, const KernelContext& ctx, int nt_count, int dt_count,
                       const std::string& acc, const std::string& row, const std::string& o_lo,
                       const std::string& o_hi, const std::string& alpha_out = "") {
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

// O / l's l: each of the thread's two rows (g and g + 8) summed over the quad that holds it.
void emit_quad_sums(Code& code) {
  code.line("// O / l: each row's sum is split over its quad");
  code.line("#pragma unroll");
  code.open("for (int r = 0; r < 2; ++r) {");
  code.line("l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);");
  code.line("l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);");
  code.close();
}

void emit_mma_kernel(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const AttentionMatch& m = k.group.attention;
  const AttentionTile& t = k.attention_tile;
  const AttentionExtents& a = k.attention_extents;
  ir::DType dtype = ctx.graph.node(m.q).type.dtype;
  std::string gtype = storage_type(dtype);
  bool half = t.elem_bytes == 2;
  std::string smem_t = half ? "unsigned short" : "float";
  bool tf32 = m.path == MatmulPath::tf32 || m.path == MatmulPath::tf32x3;
  bool x3 = m.path == MatmulPath::tf32x3;
  int threads = 32 * t.warps;
  bool async = t.stages >= 2;
  int nt = t.bc / 8, dt = t.dv / 8;

  MmaGeometry geo;
  geo.s.path = m.path;
  geo.s.a_k_contiguous = true;
  geo.s.b_k_contiguous = true;
  geo.layout.a.ld = t.q_ld;
  geo.layout.b.ld = t.k_ld;
  geo.half = half;
  geo.mma_k = tf32 ? 8 : 16;

  open_kernel(code, ctx, threads);
  code.line("const int lane = tid & 31;");
  code.line("const int g = lane >> 2;");
  code.line("const int wm0 = (tid >> 5) * 16;");
  emit_operands(code, ctx, gtype);
  code.line(smem_t + "* sq = (" + smem_t + "*)kiln_dynamic_smem();");
  code.line(smem_t + "* sk = sq + " + to_str(t.br * t.q_ld) + ";");
  code.line(smem_t + "* sv = sk + " + to_str(t.stages * t.bc * t.k_ld) + ";");
  code.line("// running max and sum of rows g and g + 8 of the warp's 16, and their outputs");
  code.line("float m_run[2] = {kiln_neg_inf, kiln_neg_inf};");
  code.line("float l_run[2] = {0.0f, 0.0f};");
  code.line("float o[" + to_str(dt) + "][4];");
  code.line("#pragma unroll");
  code.line("for (int j = 0; j < " + to_str(dt) + "; ++j)");
  code.line("  for (int i = 0; i < 4; ++i) o[j][i] = 0.0f;");

  code.line("// the block's queries, with the first key tile (the same commit group)");
  TileCopy qc;
  qc.dtype = dtype;
  qc.async = async;
  qc.threads = threads;
  qc.row0 = "q0";
  qc.col0 = "0";
  qc.rows = t.br;
  qc.row_bound = a.sq;
  qc.cols = t.d;
  qc.col_bound = qc.ld_global = Extent::constant(a.d);
  qc.smem_ld = t.q_ld;
  qc.src = "Q";
  qc.dst = "sq";
  emit_tile_copy(code, qc);

  // The warp's Q fragments stay in registers from the first key tile on, where they take 32
  // registers or fewer (16-bit and medium head dims up to 128, tf32 up to 64, tf32x3 up to 32);
  // past that they are read from shared memory again for every key tile.
  int q_steps = t.d / geo.mma_k;
  bool q_in_registers = q_steps * 4 * (x3 ? 2 : 1) <= 32;
  auto q_fragment = [&]() {
    code.open("{");
    code.line("const int mt = 0;");
    code.line("const int am = wm0;");
    code.line("const " + smem_t + "* as = sq;");
    emit_a_fragment(code, geo);
    code.close();
  };
  if (q_in_registers) {
    code.line("// the warp's Q fragments, read once (at the first key tile, when Q has landed)");
    code.line("unsigned qf[" + to_str(q_steps) + "][4];");
    if (x3) code.line("unsigned qf_small[" + to_str(q_steps) + "][4];");
  }
  auto compute = [&](const std::string& stage) {
    open_key_tile(code, ctx, smem_t, stage);
    if (q_in_registers) {
      code.open("if (kt == 0) {");
      code.line("#pragma unroll");
      code.open("for (int ks = 0; ks < " + to_str(t.d) + "; ks += " + to_str(geo.mma_k) + ") {");
      code.line("unsigned af[1][4];");
      if (x3) code.line("unsigned as_small[1][4];");
      q_fragment();
      code.line("#pragma unroll");
      code.open("for (int i = 0; i < 4; ++i) {");
      code.line("qf[ks / " + to_str(geo.mma_k) + "][i] = af[0][i];");
      if (x3) code.line("qf_small[ks / " + to_str(geo.mma_k) + "][i] = as_small[0][i];");
      code.close();
      code.close();
      code.close();
    }
    code.line("// S = Q K^T for the warp's 16 queries and the tile's keys");
    emit_zeroed_accumulators(code, "acc", 1, nt);
    code.line("#pragma unroll");
    code.open("for (int ks = 0; ks < " + to_str(t.d) + "; ks += " + to_str(geo.mma_k) + ") {");
    code.line("unsigned af[1][4];");
    code.line("unsigned bf[" + to_str(nt) + "][2];");
    if (x3) {
      code.line("unsigned as_small[1][4];");
      code.line("unsigned bs_small[" + to_str(nt) + "][2];");
    }
    if (q_in_registers) {
      code.line("#pragma unroll");
      code.open("for (int i = 0; i < 4; ++i) {");
      code.line("af[0][i] = qf[ks / " + to_str(geo.mma_k) + "][i];");
      if (x3) code.line("as_small[0][i] = qf_small[ks / " + to_str(geo.mma_k) + "][i];");
      code.close();
    } else {
      q_fragment();
    }
    code.line("#pragma unroll");
    code.open("for (int nt = 0; nt < " + to_str(nt) + "; ++nt) {");
    code.line("const int bn = nt * 8;");
    code.line("const " + smem_t + "* bs = kst;");
    emit_b_fragment(code, geo);
    code.close();
    code.line("#pragma unroll");
    code.open("for (int nt = 0; nt < " + to_str(nt) + "; ++nt) {");
    code.line("const int mt = 0;");
    emit_mma(code, m.path, k.target, MmaNames{});
    code.close();
    code.close();

    emit_softmax_step(code, ctx, nt, dt, "acc[0][nt][i]", "q0 + wm0 + g + (i >> 1) * 8",
                      "o[j][2 * r]", "o[j][2 * r + 1]");

    int pv_k = tf32 ? 8 : 16;
    code.line("// O += P V: P's A fragments come from the accumulators of S (for tf32, key pair");
    code.line("// 2t, 2t+1 of each 8 is the fragment's k = t, t + 4; V is read to match)");
    code.line("#pragma unroll");
    code.open("for (int kk = 0; kk < " + to_str(t.bc) + "; kk += " + to_str(pv_k) + ") {");
    code.line("unsigned pf[4];");
    if (x3) code.line("unsigned pf_small[4];");
    if (tf32) {
      code.line("const int j = kk / 8;");
      code.line("const float pv[4] = {acc[0][j][0], acc[0][j][2], acc[0][j][1], acc[0][j][3]};");
      code.open("for (int i = 0; i < 4; ++i) {");
      code.line("pf[i] = kiln_cvt_rna_tf32(pv[i]);");
      if (x3) code.line("pf_small[i] = kiln_cvt_rna_tf32(pv[i] - kiln_as_float(pf[i]));");
      code.close();
    } else {
      std::string pack = m.path == MatmulPath::f16 ? "kiln_pack_f16x2" : "kiln_pack_bf16x2";
      code.line("const int j = kk / 8;");
      code.line("pf[0] = " + pack + "(acc[0][j][0], acc[0][j][1]);");
      code.line("pf[1] = " + pack + "(acc[0][j][2], acc[0][j][3]);");
      code.line("pf[2] = " + pack + "(acc[0][j + 1][0], acc[0][j + 1][1]);");
      code.line("pf[3] = " + pack + "(acc[0][j + 1][2], acc[0][j + 1][3]);");
    }
    std::string vld = to_str(t.v_ld);
    code.line("#pragma unroll");
    code.open("for (int dt = 0; dt < " + to_str(dt) + "; ++dt) {");
    code.line("unsigned vf[2];");
    if (x3) code.line("unsigned vf_small[2];");
    if (half) {
      code.line("kiln_ldmatrix_x2_trans(vf, vs + (kk + (lane & 15)) * " + vld + " + dt * 8);");
    } else if (tf32) {
      code.line("const float f[2] = {vs[(kk + 2 * t4) * " + vld + " + dt * 8 + g], " +
                "vs[(kk + 2 * t4 + 1) * " + vld + " + dt * 8 + g]};");
      code.open("for (int i = 0; i < 2; ++i) {");
      code.line("vf[i] = kiln_cvt_rna_tf32(f[i]);");
      if (x3) code.line("vf_small[i] = kiln_cvt_rna_tf32(f[i] - kiln_as_float(vf[i]));");
      code.close();
    } else {
      auto at = [&](const std::string& key) {
        return "vs[(kk + " + key + ") * " + vld + " + dt * 8 + g]";
      };
      code.line("vf[0] = kiln_pack_bf16x2(" + at("2 * t4") + ", " + at("2 * t4 + 1") + ");");
      code.line("vf[1] = kiln_pack_bf16x2(" + at("2 * t4 + 8") + ", " + at("2 * t4 + 9") + ");");
    }
    MmaNames names;
    names.acc = "o[dt]";
    names.a = "pf";
    names.b = "vf";
    names.a_small = "pf_small";
    names.b_small = "vf_small";
    if (x3) {
      // Summed from zero on the tensor cores, then added to o in fp32 to nearest: a running
      // tensor-core sum over S_k keys would drift by a truncation per MMA (KERNELS.md).
      code.line("float pv[4] = {0.0f, 0.0f, 0.0f, 0.0f};");
      names.acc = "pv";
    }
    emit_mma(code, m.path, k.target, names);
    if (x3) code.line("for (int i = 0; i < 4; ++i) o[dt][i] += pv[i];");
    code.close();
    code.close();
    code.close();
  };
  emit_key_loop(code, ctx, async, compute);

  emit_quad_sums(code);
  code.line("#pragma unroll");
  code.open("for (int dt = 0; dt < " + to_str(dt) + "; ++dt) {");
  code.line("#pragma unroll");
  code.open("for (int i = 0; i < 4; ++i) {");
  code.line("const int m = q0 + wm0 + g + (i >> 1) * 8;");
  code.line("const int n = " + slab_offset(k.attention_tile) + "dt * 8 + t4 * 2 + (i & 1);");
  emit_output(code, ctx, row_output(ctx, "o[dt][i]", "l_run[i >> 1]"));
  code.close();
  code.close();
  code.close();
}

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

// The bytes of the sm_90a attention kernel's Q area and of one stage of K and of V in shared
// memory (the tile's element size: 2, 4 for tf32, or 8 for tf32x3's two parts).
struct WgmmaAttentionBytes {
  int q, k_stage, v_stage;
};

WgmmaAttentionBytes wgmma_attention_bytes(const AttentionTile& t) {
  int eb = t.elem_bytes;
  return {t.br * t.d * eb, t.bc * t.d * eb, t.bc * t.dv * eb};
}

// sm_90a's attention producer for 16-bit operands: one thread arms the barriers and issues
// every TMA copy, Q once and K and V a key tile at a time.
void emit_tma_producer(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const AttentionTile& t = k.attention_tile;
  const AttentionExtents& a = k.attention_extents;
  const MatmulExtents& e = k.extents;
  int rank = ctx.graph.node(k.group.attention.root).type.shape.rank();
  int stages = t.stages, br = t.br, bc = t.bc;
  auto [q_bytes, k_stage, v_stage] = wgmma_attention_bytes(t);
  std::string pq = "p" + to_str(k.q_map_param), pk = "p" + to_str(k.k_map_param),
              pv = "p" + to_str(k.v_map_param);
  int64_t batch = e.batch.hi;
  int64_t inner = rank == 4 ? e.inner_batch.hi : batch;
  code.line("// producer warpgroup: one thread issues every load");
  code.line("kiln_setmaxnreg_dec<24>();");
  code.open("if (tid == 0) {");
  // The map coordinates of the block's batch: head (inner) and outer batch, 0 where the operand
  // broadcasts; k's and v's heads grouped.
  auto coords = [&](const std::array<Extent, 2>& strides, int64_t group) {
    std::string h = "0", o = "0";
    if (strides[1].hi != 0 && rank >= 3) {
      h = inner == batch ? "bz" : "bz % " + to_str(inner);
      if (group > 1) h = "(" + h + ") / " + to_str(group);
    }
    if (strides[0].hi != 0 && rank == 4 && inner != batch) o = "bz / " + to_str(inner);
    return h + ", " + o;
  };
  code.line("kiln_mbarrier_arrive_expect_tx(qbar, " + to_str(q_bytes) + ");");
  for (int j = 0; j < t.d / 64; ++j)
    code.line("kiln_tma_load_4d(sq + " + to_str(j * br * 128) + ", &" + pq + ", " +
              to_str(j * 64) + ", q0, " + coords(a.q, 1) + ", qbar);");
  code.open("for (int kt = 0; kt < key_tiles; ++kt) {");
  code.line("const int s = kt % " + to_str(stages) + ";");
  code.line("// the stage's previous use released by both consumers");
  code.line("if (kt >= " + to_str(stages) + ") kiln_mbarrier_wait(&empty[s], ((kt / " +
            to_str(stages) + ") - 1) & 1);");
  code.line("kiln_mbarrier_arrive_expect_tx(&full[s], " + to_str(k_stage + v_stage) + ");");
  for (int j = 0; j < t.d / 64; ++j)
    code.line("kiln_tma_load_4d(sk + s * " + to_str(k_stage) + " + " + to_str(j * bc * 128) +
              ", &" + pk + ", " + to_str(j * 64) + ", kt * " + to_str(bc) + ", " +
              coords(a.k, a.k_group) + ", &full[s]);");
  for (int j = 0; j < t.dv / 64; ++j)
    code.line("kiln_tma_load_4d(sv + s * " + to_str(v_stage) + " + " + to_str(j * bc * 128) +
              ", &" + pv + ", " + to_str(j * 64) + ", kt * " + to_str(bc) + ", " +
              coords(a.v, a.v_group) + ", &full[s]);");
  code.close();
  code.close();
}

// sm_90a's attention producer for fp32 operands (`medium`, `high` and `tf32x3`,
// wgmma_attention_loads):
// TMA copies without converting or rounding, so the producer warpgroup's 128 threads load Q
// once and K and V a key tile at a time themselves and write them where the consumers'
// descriptors read them, zeros past the rows and columns. A thread's loads are 16-byte pieces
// (4 columns of a row) copied by cp.async into its own slots of a staging ring, `pieces` of them
// (wgmma_attention_staging_pieces; slot u of thread x at (u * 128 + x) * 16, so a warp's slots
// are 512 contiguous bytes), in groups of 4 with pieces / 4 groups in flight: the copies need no
// registers, where a load into registers kept one piece in flight within the producer's 24.
// The pieces are one stream, Q's and then each key tile's K and V, so the ring stays full across
// operands and key tiles: the next copies are issued while a group is converted, and before a
// stage's `empty` wait (they run while the consumers still read the stage). Each thread converts
// only the pieces it copied itself (cp.async.wait_group: no barrier), reuses a slot once it has
// read it, and after Q's or a key tile's last pieces makes its writes visible to the async proxy
// (wgmma's operand reads) and arrives on the barrier, which counts the 128 arrivals.
// - `medium`: converted to bf16 (cvt.rn, as `medium` promises) where TMA would have put bf16
//   operands: 64-column blocks of 128-byte rows, 16-byte chunk c of row r at
//   r * 128 + 16 (c ^ (r & 7)) (the 128-byte swizzle).
// - `high`: rounded to tf32 (cvt.rna, as `high` promises), fp32 in 32-column blocks of 128-byte
//   rows, swizzled alike. Q and K as they lie (K-major for Q K^T); V transposed, K-major for
//   P V (tf32 wgmma reads B K-major only): key r of the tile is V^T's column p(r), with pairs of
//   keys 2l, 2l + 1 of each 8 at l and l + 4, where P's A fragment holds them (S's accumulator
//   holds a row's keys 2t and 2t + 1 in one thread, the tf32 A fragment its k = t and t + 4).
// - `tf32x3`: as `high`, and each element's small part tf32(x - tf32(x)) (cvt.rna twice, as the
//   mma.sync kernel splits its fragments) at the same place in the area's second half.
void emit_loading_producer(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const AttentionTile& t = k.attention_tile;
  const AttentionExtents& a = k.attention_extents;
  bool tf32 = wgmma_attention_tf32(k.attention_shape);
  bool x3 = wgmma_attention_splits(k.attention_shape);
  int stages = t.stages, bc = t.bc;
  WgmmaAttentionBytes bytes = wgmma_attention_bytes(t);
  int pieces = wgmma_attention_staging_pieces(t, k.attention_shape);
  if (pieces < 4 || pieces % 4 != 0)
    throw std::logic_error("emit_loading_producer: no staging ring (check_wgmma_attention_tile)");
  std::string slot_mask = to_str(pieces - 1), in_flight = to_str(pieces / 4 - 1);
  // The operands a thread copies, one stream of pieces: Q's, then each key tile's K and V.
  // Piece n of an operand's tile is its 16-byte piece i = tid + 128 n: quad j = i % quads of row
  // r = i / quads; every operand's pieces a thread are a multiple of 4 (a group).
  struct Part {
    std::string src, row0;  // its tensor, and the row its tile starts at
    int rows, cols;          // the tile (cols padded)
    int64_t ld;              // the tensor's row length
    Extent bound;            // its rows
    int quads() const { return cols / 4; }
    int per_thread() const { return rows * quads() / 128; }
  };
  Part q{"Q", "q0", t.br, t.d, a.d, a.sq};
  Part kp{"K", "kt * " + to_str(bc), bc, t.d, a.d, a.sk};
  Part vp{"V", "kt * " + to_str(bc), bc, t.dv, a.dv, a.sk};
  for (const Part* part : {&q, &kp, &vp})
    if (part->rows * part->quads() % 512 != 0)
      throw std::logic_error("emit_loading_producer: an operand tile not a multiple of 4 pieces a thread");
  std::string nq = to_str(q.per_thread()), nk = to_str(kp.per_thread()),
              nkv = to_str(kp.per_thread() + vp.per_thread());
  // Piece u's slot and place, of thread `thread`'s pieces.
  auto slot = [&](const std::string& thread) {
    return "stg + (((u & " + slot_mask + ") << 7) + " + thread + ") * 16";
  };
  std::string thread = "tid";
  // The piece's i, and its row and quad (r, j) within the tile.
  auto place = [&](const Part& part, const std::string& n) {
    code.line("const int i = " + thread + " + 128 * " + n + ";");
    code.line("const int r = i / " + to_str(part.quads()) + ", j = i % " + to_str(part.quads()) + ";");
  };
  // Copies piece u of the stream into its slot (zeros past the rows and the row length).
  auto issue_piece = [&](const Part& part, const std::string& n) {
    place(part, n);
    code.line("const int row = " + part.row0 + " + r;");
    std::string inside = "row < " + part.bound.expr();
    if (part.cols > part.ld) inside += " && j < " + to_str(part.ld / 4);
    code.line("const bool in = " + inside + ";");
    code.line("kiln_cp_async_16(" + slot("tid") + ", " + part.src + " + (in ? (long long)row * " +
              to_str(part.ld) + " + j * 4 : 0), in ? 16 : 0);");
  };
  // Pieces first .. first + 3 of the stream (one group: never two operands'), each from its
  // operand: Q's first, then key tile kt's K and V.
  auto issue = [&](const std::string& first) {
    code.line("#pragma unroll 1");
    code.open("for (int u = " + first + "; u < " + first + " + 4; ++u) {");
    code.open("if (u < " + nq + ") {");
    issue_piece(q, "u");
    code.close();
    code.open("else {");
    code.line("const int kt = (u - " + nq + ") / " + nkv + ", pk = (u - " + nq + ") % " + nkv + ";");
    code.open("if (pk < " + nk + ") {");
    issue_piece(kp, "pk");
    code.close();
    code.open("else {");
    issue_piece(vp, "(pk - " + nk + ")");
    code.close();
    code.close();
    code.close();
  };
  // Rows into `dst` as they lie: bf16 (quad j is half j & 1 of chunk (j / 2) mod 8 of the row in
  // block j / 16) or tf32 (quad j is chunk j mod 8 of the row in block j / 8).
  auto copy = [&](const Part& part, const std::string& dst) {
    int rows = part.rows, cols = part.cols;
    std::string at = dst + " + (j >> 3) * " + to_str(rows * 128) +
                     " + r * 128 + (((j & 7) ^ (r & 7)) << 4)";
    if (x3) {
      code.line("const uint4 big = make_uint4(kiln_cvt_rna_tf32(f.x), kiln_cvt_rna_tf32(f.y), "
                "kiln_cvt_rna_tf32(f.z), kiln_cvt_rna_tf32(f.w));");
      code.line("*(uint4*)(" + at + ") = big;");
      code.line("*(uint4*)(" + at + " + " + to_str(rows * cols * 4) +
                ") = make_uint4(kiln_cvt_rna_tf32(f.x - kiln_as_float(big.x)), "
                "kiln_cvt_rna_tf32(f.y - kiln_as_float(big.y)), kiln_cvt_rna_tf32(f.z - "
                "kiln_as_float(big.z)), kiln_cvt_rna_tf32(f.w - kiln_as_float(big.w)));");
    } else if (tf32) {
      code.line("*(uint4*)(" + at + ") = make_uint4(kiln_cvt_rna_tf32(f.x), "
                "kiln_cvt_rna_tf32(f.y), kiln_cvt_rna_tf32(f.z), kiln_cvt_rna_tf32(f.w));");
    } else {
      code.line("*(uint2*)(" + dst + " + (j >> 4) * " + to_str(rows * 128) +
                " + r * 128 + ((((j >> 1) & 7) ^ (r & 7)) << 4) + (j & 1) * 8) = "
                "make_uint2(kiln_pack_bf16x2(f.x, f.y), kiln_pack_bf16x2(f.z, f.w));");
    }
  };
  // V's tile into `dst` transposed (tf32): column n = 4 j + e of key r is row n of V^T, its
  // k position p = p(r) in 32-key blocks of t.dv rows x 128 bytes.
  auto transpose = [&](const std::string& dst) {
    code.line("const int p = (r & ~7) | ((r & 1) << 2) | ((r & 7) >> 1);");
    code.line("unsigned char* col = " + dst + " + (p >> 5) * " + to_str(t.dv * 128) +
              " + ((p & 3) << 2);");
    code.line("const float e[4] = {f.x, f.y, f.z, f.w};");
    code.line("#pragma unroll");
    code.open("for (int x = 0; x < 4; ++x) {");
    code.line("const int n = 4 * j + x;");
    code.line("unsigned* to = (unsigned*)(col + n * 128 + ((((p & 31) >> 2) ^ (n & 7)) << 4));");
    code.line("const unsigned big = kiln_cvt_rna_tf32(e[x]);");
    code.line("*to = big;");
    if (x3) {
      code.line("to[" + to_str(bc * t.dv) + "] = kiln_cvt_rna_tf32(e[x] - kiln_as_float(big));  "
                "// the small part");
    }
    code.close();
  };
  code.line(std::string("// producer warpgroup: its 128 threads load Q, K and V, ") +
            (x3     ? "split them into tf32 big and small parts and write V transposed"
             : tf32 ? "round them to tf32 and write V transposed"
                    : "convert them to bf16"));
  code.line("kiln_setmaxnreg_dec<24>();");
  code.line("// this thread's pieces: Q's " + nq + ", then each key tile's " + nk + " of K and " +
            to_str(vp.per_thread()) + " of V; " + to_str(pieces) + " in flight, 4 a group");
  code.line("const int total = " + nq + " + key_tiles * " + nkv + ";");
  code.line("#pragma unroll 1");
  code.open("for (int piece = 0; piece < " + to_str(pieces) + "; piece += 4) {");
  code.open("if (piece < total) {");
  issue("piece");
  code.close();
  code.line("kiln_cp_async_commit();");
  code.close();
  code.line("#pragma unroll 1");
  code.open("for (int piece = 0; piece < total; piece += 4) {");
  code.line("// the key tile of pieces piece .. piece + 3 (past Q's) and its stage");
  code.line("const int kt = piece < " + nq + " ? 0 : (piece - " + nq + ") / " + nkv + ";");
  code.line("const int s = kt % " + to_str(stages) + ";");
  code.open("if (piece >= " + nq + " && (piece - " + nq + ") % " + nkv + " == 0) {");
  code.line("// the stage's previous use released by both consumers");
  code.line("if (kt >= " + to_str(stages) + ") kiln_mbarrier_wait(&empty[s], ((kt / " +
            to_str(stages) + ") - 1) & 1);");
  code.close();
  code.line("kiln_cp_async_wait<" + in_flight + ">();  // this thread's pieces piece .. piece + 3 have landed");
  code.line("#pragma unroll 1");
  code.open("for (int u = piece; u < piece + 4; ++u) {");
  code.line("const int copier = tid;  // the thread that copied the piece: this one");
  code.line("const float4 f = *(const float4*)(" + slot("copier") + ");");
  thread = "copier";
  code.open("if (u < " + nq + ") {");
  place(q, "u");
  copy(q, "sq");
  code.close();
  code.open("else {");
  code.line("const int pk = (u - " + nq + ") % " + nkv + ";");
  code.open("if (pk < " + nk + ") {");
  place(kp, "pk");
  copy(kp, "sk + s * " + to_str(bytes.k_stage));
  code.close();
  code.open("else {");
  place(vp, "(pk - " + nk + ")");
  if (tf32) {
    transpose("sv + s * " + to_str(bytes.v_stage));
  } else {
    copy(vp, "sv + s * " + to_str(bytes.v_stage));
  }
  code.close();
  code.close();
  code.close();
  thread = "tid";
  code.line("// the slots just read take the pieces " + to_str(pieces) + " on");
  code.open("if (piece + " + to_str(pieces) + " < total) {");
  issue("piece + " + to_str(pieces));
  code.close();
  code.line("kiln_cp_async_commit();");
  code.line("// Q's, or a key tile's, last pieces written: this thread's writes to the async proxy");
  code.line("// (wgmma), then its arrival");
  code.open("if (piece + 4 == " + nq + ") {");
  code.line("kiln_fence_proxy_async();");
  code.line("kiln_mbarrier_arrive(qbar);");
  code.close();
  code.open("else if (piece + 4 > " + nq + " && (piece + 4 - " + nq + ") % " + nkv + " == 0) {");
  code.line("kiln_fence_proxy_async();");
  code.line("kiln_mbarrier_arrive(&full[s]);");
  code.close();
  code.close();
}

// sm_90a (design 5b): warpgroup 0 loads the block's Q once and K and V a key tile at a time
// with TMA (fp32 operands: with its own loads, emit_loading_producer) into a ring of stages;
// warpgroups 1 and 2 each own 64 of the block's 128 queries: S = Q K^T by wgmma m64n{Bc}k16
// (tf32: k8) from shared memory, the online softmax on S's accumulators (four m16n8
// accumulators stacked per warp: the mma.sync kernel's layout), then O += P V by wgmma with P
// packed from S into registers (the RS form) and V N-major (tf32: V^T K-major) from shared
// memory. Shared memory holds every operand in blocks of 128-byte rows, 128-byte swizzled.
// tf32x3: each product three tf32 wgmmas over big and small parts, P V summed from zero each
// key tile and added to O in fp32.
void emit_wgmma_kernel(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const AttentionMatch& m = k.group.attention;
  const AttentionTile& t = k.attention_tile;
  const AttentionExtents& a = k.attention_extents;
  // fp32 q, k and v (`medium`, `high`, `tf32x3`): loaded by the producer, converted to bf16,
  // rounded to tf32 or split into tf32 parts on their way to shared memory; `high` and `tf32x3`
  // run tf32 wgmma (m64nNk8) on them
  bool loads = wgmma_attention_loads(k.attention_shape);
  bool tf32 = wgmma_attention_tf32(k.attention_shape);
  // tf32x3: every operand's small part in the second half of its area; three wgmmas a product
  bool x3 = wgmma_attention_splits(k.attention_shape);
  std::string type = m.path == MatmulPath::f16 ? "f16" : "bf16";
  std::string pack = m.path == MatmulPath::f16 ? "kiln_pack_f16x2" : "kiln_pack_bf16x2";
  int stages = t.stages, br = t.br, bc = t.bc;
  auto [q_bytes, k_stage, v_stage] = wgmma_attention_bytes(t);
  int step = tf32 ? 8 : 16;                   // keys or head-dim columns a wgmma takes (its k)
  std::string cols = to_str(tf32 ? 32 : 64);  // head-dim columns a 128-byte row holds

  open_kernel(code, ctx, 384);
  emit_operands(code, ctx, storage_type(ctx.graph.node(m.q).type.dtype), loads);
  if (tf32) {
    code.line("// shared memory, from a 1024-byte boundary (128-byte swizzle atoms), fp32 rounded to");
    if (x3) code.line("// tf32 (each area's second half the small parts, laid out alike)");
    code.line("// tf32: Q (" + to_str(t.d / 32) + " blocks of " + to_str(br) + " rows x 32 columns), " +
              to_str(stages) + " stages of K (" + to_str(t.d / 32) + " blocks of " + to_str(bc) +
              " keys x 32) and V transposed (" + to_str(bc / 32) + " blocks of " + to_str(t.dv) +
              " columns x 32 keys), then the mbarriers: Q's, full[" + to_str(stages) +
              "], empty[" + to_str(stages) + "]");
  } else {
    code.line("// shared memory, from a 1024-byte boundary (128-byte swizzle atoms): Q (" +
              to_str(t.d / 64) + " blocks of " + to_str(br) + " rows x 64 columns), " +
              to_str(stages) + " stages of K (" + to_str(t.d / 64) + " blocks of " + to_str(bc) +
              " keys x 64) and V (" + to_str(t.dv / 64) + " blocks of " + to_str(bc) +
              " keys x 64), then the mbarriers: Q's, full[" + to_str(stages) + "], empty[" +
              to_str(stages) + "]");
  }
  code.line("unsigned char* smem = kiln_dynamic_smem();");
  code.line("smem += (1024u - (kiln_smem_addr(smem) & 1023u)) & 1023u;");
  code.line("unsigned char* sq = smem;");
  code.line("unsigned char* sk = sq + " + to_str(q_bytes) + ";");
  code.line("unsigned char* sv = sk + " + to_str(stages * k_stage) + ";");
  if (loads) {
    int pieces = wgmma_attention_staging_pieces(t, k.attention_shape);
    code.line("// the producer's staging ring: " + to_str(pieces) +
              " 16-byte slots a producer thread, slot u of thread x at (u * 128 + x) * 16");
    code.line("unsigned char* stg = sv + " + to_str(stages * v_stage) + ";");
    code.line("unsigned long long* qbar = (unsigned long long*)(stg + " + to_str(128 * 16 * pieces) +
              ");");
  } else {
    code.line("unsigned long long* qbar = (unsigned long long*)(sv + " + to_str(stages * v_stage) +
              ");");
  }
  code.line("unsigned long long* full = qbar + 1;");
  code.line("unsigned long long* empty = full + " + to_str(stages) + ";");
  code.open("if (tid == 0) {");
  if (loads) {
    code.line("// every producer thread arrives once its share is written");
    code.line("kiln_mbarrier_init(qbar, 128);");
  } else {
    code.line("kiln_mbarrier_init(qbar, 1);");
  }
  code.open("for (int s = 0; s < " + to_str(stages) + "; ++s) {");
  if (loads) {
    code.line("kiln_mbarrier_init(&full[s], 128);");
  } else {
    code.line("kiln_mbarrier_init(&full[s], 1);     // the producer's expect_tx, then TMA's bytes");
  }
  code.line("kiln_mbarrier_init(&empty[s], 256);  // every consumer thread, once its P V is done");
  code.close();
  code.line("kiln_fence_proxy_async();  // the initialised barriers, to the async proxy (TMA)");
  code.close();
  code.line("__syncthreads();");
  std::string tiles = key_tiles(ctx);
  if (tiles.empty())
    tiles = a.sk.fixed() ? to_str((a.sk.hi + bc - 1) / bc)
                         : "(" + a.sk.expr() + " + " + to_str(bc - 1) + ") / " + to_str(bc);
  code.line("const int key_tiles = " + tiles + ";");

  code.open("if (tid < 128) {");
  if (loads) {
    emit_loading_producer(code, ctx);
  } else {
    emit_tma_producer(code, ctx);
  }
  code.close();

  code.open("else {");
  code.line("// consumer warpgroups: queries q0 + 64 c .. q0 + 64 c + 63");
  code.line("kiln_setmaxnreg_inc<240>();");
  code.line("const int c = tid / 128 - 1;");
  code.line("const int warp = (tid & 127) >> 5;");
  code.line("const int g = (tid & 31) >> 2;");
  code.line("// running max and sum of rows g and g + 8 of the warp's 16, their outputs, S and P");
  code.line("float m_run[2] = {kiln_neg_inf, kiln_neg_inf};");
  code.line("float l_run[2] = {0.0f, 0.0f};");
  code.line("float o[" + to_str(t.dv / 2) + "];");
  code.line("#pragma unroll");
  code.line("for (int v = 0; v < " + to_str(t.dv / 2) + "; ++v) o[v] = 0.0f;");
  code.line("float acc[" + to_str(bc / 2) + "];");
  code.line("unsigned pf[" + to_str(bc / step) + "][4];");
  if (x3) {
    code.line("unsigned pf_small[" + to_str(bc / step) + "][4];");
    code.line("// a key tile's P V, summed from zero on the tensor cores, then added to o in fp32");
    code.line("float part[" + to_str(t.dv / 2) + "];");
  }
  code.line("float o_scale[2];  // each row's rescale of O, applied once the P V writing O retires");
  code.line("kiln_mbarrier_wait(qbar, 0);");
  std::string stage_of = "% " + to_str(stages);
  // S = Q K^T of the stage `s`, issued and committed
  auto issue_s = [&](const std::string& s) {
    code.line("// S = Q K^T: both K-major, " + to_str(step) + " head-dim columns (32 bytes) a step, " +
              cols + " a block");
    code.line("#pragma unroll");
    code.open("for (int ks = 0; ks < " + to_str(t.d / step) + "; ++ks) {");
    code.line("const unsigned long long da = kiln_gmma_desc_128b(sq + (ks >> 2) * " +
              to_str(br * 128) + " + c * 8192 + (ks & 3) * 32, 16, 1024);");
    code.line("const unsigned long long db = kiln_gmma_desc_128b(sk + " + s + " * " +
              to_str(k_stage) + " + (ks >> 2) * " + to_str(bc * 128) + " + (ks & 3) * 32, 16, 1024);");
    if (x3) {
      // (a descriptor's start address is its low bits, in 16-byte units: the small parts lie
      // half the area further on)
      code.line("const unsigned long long da_small = da + " + to_str(q_bytes / 2 / 16) + ";");
      code.line("const unsigned long long db_small = db + " + to_str(k_stage / 2 / 16) + ";");
      code.line("// small Q x K, Q x small K, Q x K, as the mma.sync kernel orders them");
      std::string wg = "kiln_wgmma_m64n" + to_str(bc) + "k8_tf32(acc, ";
      code.line(wg + "da_small, db, ks > 0 ? 1 : 0);");
      code.line(wg + "da, db_small, 1);");
      code.line(wg + "da, db, 1);");
    } else if (tf32) {
      code.line("kiln_wgmma_m64n" + to_str(bc) + "k8_tf32(acc, da, db, ks > 0 ? 1 : 0);");
    } else {
      code.line("kiln_wgmma_m64n" + to_str(bc) + "k16_" + type + "<0>(acc, da, db, ks > 0 ? 1 : 0);");
    }
    code.close();
    code.line("kiln_wgmma_commit();");
  };
  // O += P V with the stage `s`'s V, issued and committed
  auto issue_pv = [&](const std::string& s) {
    if (tf32) {
      code.line("// O += P V: V^T K-major, 32-key blocks " + to_str(t.dv * 128) +
                " bytes apart, 8 keys (32 bytes) a step");
      code.line("#pragma unroll");
      code.open("for (int kk = 0; kk < " + to_str(bc / 8) + "; ++kk) {");
      code.line("const unsigned long long dv = kiln_gmma_desc_128b(sv + " + s + " * " +
                to_str(v_stage) + " + (kk >> 2) * " + to_str(t.dv * 128) +
                " + (kk & 3) * 32, 16, 1024);");
      std::string wg = "kiln_wgmma_m64n" + to_str(t.dv) + "k8_tf32_rs(";
      if (x3) {
        code.line("const unsigned long long dv_small = dv + " + to_str(v_stage / 2 / 16) + ";");
        code.line("// into part, from zero: small P x V, P x small V, P x V");
        code.line(wg + "part, pf_small[kk], dv, kk > 0 ? 1 : 0);");
        code.line(wg + "part, pf[kk], dv_small, 1);");
        code.line(wg + "part, pf[kk], dv, 1);");
      } else {
        code.line(wg + "o, pf[kk], dv, 1);");
      }
      code.close();
      code.line("kiln_wgmma_commit();");
      return;
    }
    code.line("// O += P V: V N-major, 64-column blocks " + to_str(bc * 128) +
              " bytes apart (LBO), 8 keys a 1024-byte atom (SBO), 16 keys (2048 bytes) a step");
    code.line("#pragma unroll");
    code.open("for (int kk = 0; kk < " + to_str(bc / 16) + "; ++kk) {");
    code.line("const unsigned long long dv = kiln_gmma_desc_128b(sv + " + s + " * " +
              to_str(v_stage) + " + kk * 2048, " + to_str(bc * 128) + ", 1024);");
    code.line("kiln_wgmma_m64n" + to_str(t.dv) + "k16_" + type + "_rs<1>(o, pf[kk], dv, 1);");
    code.close();
    code.line("kiln_wgmma_commit();");
  };
  // The softmax of S (key tile kt) with O's rescale deferred to o_scale
  auto softmax = [&] {
    if (reads_key(ctx)) code.line("const int kc = kt * " + to_str(bc) + ";");
    emit_softmax_step(code, ctx, bc / 8, t.dv / 8, "acc[4 * nt + i]",
                      "q0 + c * 64 + warp * 16 + g + (i >> 1) * 8", "o[4 * j + 2 * r]",
                      "o[4 * j + 2 * r + 1]", "o_scale");
  };
  // O rescaled, then P to registers (once the P V reading the previous P has retired)
  auto rescale_and_pack = [&] {
    code.line("#pragma unroll");
    code.open("for (int r = 0; r < 2; ++r) {");
    emit_rescale(code, t.dv / 8, "o[4 * j + 2 * r]", "o[4 * j + 2 * r + 1]", "o_scale[r]");
    code.close();
    if (tf32) {
      code.line("// P to registers as the tf32 RS form's A, rounded (cvt.rna): keys 8 kk .. 8 kk + 7 from");
      code.line("// S's accumulator kk, key pair 2 t, 2 t + 1 as the fragment's k = t, t + 4 (V^T's");
      code.line("// columns are ordered to match), as the mma.sync kernel packs its tf32 A fragments");
      code.line("#pragma unroll");
      code.open("for (int kk = 0; kk < " + to_str(bc / 8) + "; ++kk) {");
      // register r holds accumulator 4 kk + {0, 2, 1, 3}[r]; tf32x3 its small part beside it
      const char* const from[4] = {"acc[4 * kk]", "acc[4 * kk + 2]", "acc[4 * kk + 1]",
                                   "acc[4 * kk + 3]"};
      for (int r = 0; r < 4; ++r)
        code.line("pf[kk][" + to_str(r) + "] = kiln_cvt_rna_tf32(" + from[r] + ");");
      for (int r = 0; x3 && r < 4; ++r) {
        code.line("pf_small[kk][" + to_str(r) + "] = kiln_cvt_rna_tf32(" + from[r] +
                  " - kiln_as_float(pf[kk][" + to_str(r) + "]));");
      }
      code.close();
      return;
    }
    code.line("// P to registers as the RS form's A: keys 16 kk .. 16 kk + 15 from S's accumulators");
    code.line("// 2 kk and 2 kk + 1, as the mma.sync kernel packs its A fragments");
    code.line("#pragma unroll");
    code.open("for (int kk = 0; kk < " + to_str(bc / 16) + "; ++kk) {");
    code.line("pf[kk][0] = " + pack + "(acc[8 * kk], acc[8 * kk + 1]);");
    code.line("pf[kk][1] = " + pack + "(acc[8 * kk + 2], acc[8 * kk + 3]);");
    code.line("pf[kk][2] = " + pack + "(acc[8 * kk + 4], acc[8 * kk + 5]);");
    code.line("pf[kk][3] = " + pack + "(acc[8 * kk + 6], acc[8 * kk + 7]);");
    code.close();
  };
  // tf32x3: the retired P V's part added to O (before O's rescale: both are at that tile's max)
  auto promote = [&] {
    if (!x3) return;
    code.line("#pragma unroll");
    code.line("for (int v = 0; v < " + to_str(t.dv / 2) + "; ++v) o[v] += part[v];");
  };
  // FlashAttention-3's inter-warpgroup ping-pong: consumer c issues its wgmmas once the other
  // has issued its own (named barrier 1 + c: its 128 threads sync, the other's 128 arrive), so
  // the tensor cores take the two consumers' GEMMs in turn and one's softmax runs while the
  // other's GEMMs do. Consumer 1 lets consumer 0 go first and arrives after each turn but its
  // last, so every arrival is matched.
  auto take_turn = [&] { code.line("kiln_bar_sync(1 + c, 256);  // my turn to issue"); };
  auto pass_turn = [&](bool last) {
    code.line(std::string(last ? "if (c == 0) " : "") + "kiln_bar_arrive(2 - c, 256);  // the other consumer's turn");
  };
  code.line("// FlashAttention-3's intra-warpgroup overlap: key tile kt's S = Q K^T and tile kt - 1's");
  code.line("// O += P V are in flight together, and tile kt's softmax runs while P V still does");
  code.open("if (key_tiles > 0) {");
  code.line("if (c == 1) kiln_bar_arrive(1, 256);  // consumer 0 issues first");
  code.open("{");
  code.line("const int kt = 0;");
  code.line("kiln_mbarrier_wait(&full[0], 0);");
  take_turn();
  code.line("kiln_wgmma_fence();");
  issue_s("0");
  pass_turn(false);
  code.line("kiln_wgmma_wait<0>();");
  softmax();
  rescale_and_pack();
  code.close();
  code.open("for (int kt = 1; kt < key_tiles; ++kt) {");
  code.line("const int s = kt " + stage_of + ", sp = (kt - 1) " + stage_of + ";");
  code.line("kiln_mbarrier_wait(&full[s], (kt / " + to_str(stages) + ") & 1);");
  take_turn();
  code.line("kiln_wgmma_fence();");
  issue_s("s");
  issue_pv("sp");
  pass_turn(false);
  code.line("// S of tile kt is done; tile kt - 1's P V may still run");
  code.line("kiln_wgmma_wait<1>();");
  softmax();
  code.line("kiln_wgmma_wait<0>();");
  code.line("// tile kt - 1's K and V are read: release its stage to the producer");
  code.line("kiln_mbarrier_arrive(&empty[sp]);");
  promote();
  rescale_and_pack();
  code.close();
  code.line("// the last key tile's P V");
  take_turn();
  code.line("kiln_wgmma_fence();");
  issue_pv("((key_tiles - 1) " + stage_of + ")");
  pass_turn(true);
  code.line("kiln_wgmma_wait<0>();");
  code.line("kiln_mbarrier_arrive(&empty[(key_tiles - 1) " + stage_of + "]);");
  promote();
  code.close();

  emit_quad_sums(code);
  code.line("// o[4 j + i] is O(16 warp + g + 8 (i >> 1), 8 j + 2 t4 + (i & 1)) of the 64 queries");
  code.line("#pragma unroll");
  code.open("for (int v = 0; v < " + to_str(t.dv / 2) + "; ++v) {");
  code.line("const int m = q0 + c * 64 + warp * 16 + g + ((v >> 1) & 1) * 8;");
  code.line("const int n = (v >> 2) * 8 + t4 * 2 + (v & 1);");
  emit_output(code, ctx, row_output(ctx, "o[v]", "l_run[(v >> 1) & 1]"));
  code.close();
  code.close();
  code.close();
}

}  // namespace

void emit_attention(Code& code, const KernelContext& ctx) {
  if (ctx.kernel.attention_tile.wgmma) {
    emit_wgmma_kernel(code, ctx);
  } else if (uses_mma(ctx.kernel.group.attention.path)) {
    emit_mma_kernel(code, ctx);
  } else {
    emit_ffma_kernel(code, ctx);
  }
}

}  // namespace kiln::compiler::detail
