// sm_90a's fused attention kernel (design 5b, FlashAttention-3's structure): a producer
// warpgroup (emit_attention_producer.cpp) and two consumer warpgroups running S = Q K^T and
// O += P V on wgmma, ping-ponged by named barriers.
#include "compiler/emit_attention_internal.h"

namespace kiln::compiler::detail::attn {

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
  // Named variables, not a structured binding: the lambdas below capture them (clang before 16
  // cannot capture a binding, and the fuzz targets build with clang).
  const WgmmaAttentionBytes bytes = wgmma_attention_bytes(t);
  const int q_bytes = bytes.q, k_stage = bytes.k_stage, v_stage = bytes.v_stage;
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
      // register r holds accumulator 4 kk + {0, 2, 1, 3}[r]; tf32x3 its small part beside it (P
      // lies in [0, 1] or is NaN: its big part is tf32(P), as kiln_tf32x3_big's for a finite P)
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

}  // namespace kiln::compiler::detail::attn
