// The fused attention kernel on mma.sync (sm_75 to sm_121): a block's query tile in warps of
// 16 rows, K and V tiles through a ring of shared-memory stages, S = Q K^T and O += P V on the
// tensor cores with P taken from S's accumulators in registers (KERNELS.md, design 5).
#include "compiler/emit_attention_internal.h"

namespace kiln::compiler::detail::attn {

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
      // P lies in [0, 1] or is NaN: tf32x3's big part is tf32(P), as kiln_tf32x3_big's for a finite
      // P (a NaN P's small part is NaN either way)
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
      code.line(std::string("vf[i] = ") + (x3 ? "kiln_tf32x3_big" : "kiln_cvt_rna_tf32") +
                "(f[i]);");
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

}  // namespace kiln::compiler::detail::attn
