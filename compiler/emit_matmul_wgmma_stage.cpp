// The sm_90a matmul kernel's consumers rewrite a stage before its wgmmas read it (design 1b):
// fp32 operands converted to bf16 (`medium`), A's tf32 fragments read into registers, B (and A,
// where it is staged) rounded to tf32, split (tf32x3) and transposed to K-major in place.
#include "compiler/emit_matmul_wgmma_internal.h"

namespace kiln::compiler::detail {

namespace {

// The end of a consumer's rewrite of the stage: its writes to the async proxy, then both
// consumers' shares done.
void publish_stage(Code& code, const WgmmaMatmul& w) {
  code.line("kiln_fence_proxy_async();");
  code.line("kiln_mbarrier_arrive(&rounded[s]);");
  code.line("kiln_mbarrier_wait(&rounded[s], (it / " + to_str(w.stages) + ") & 1);");
}

// medium: the stage converted to bf16 from the fp32 staging areas.
void convert_stage(Code& code, const WgmmaMatmul& w) {
  const MatmulTile& t = w.t;
  code.line("// convert the stage to bf16 (cvt.rn, as `medium` promises) from the staging areas into");
  code.line("// the 16-bit kernel's layout: this consumer's 64 rows of A and half of B, two elements");
  code.line("// a write; then the writes to the async proxy, then wait for the other consumer's half.");
  code.line("// fp32 (k, r) of a staging block at r * 128 + 16 (((k & 31) / 4) ^ (r & 7)) + 4 (k & 3),");
  code.line("// bf16 (k, r) of the stage at r * 128 + 16 ((k / 8) ^ (r & 7)) + 2 (k & 7)");
  code.open("{");
  // K-major operand: `rows` rows from `first`, pairs of k.
  auto k_major = [&](const std::string& src, const std::string& dst, int rows_all, int rows,
                     const std::string& first) {
    code.line("#pragma unroll 4");
    code.open("for (int i = tid & 127; i < " + to_str(rows * 32) + "; i += 128) {");
    code.line("const int r = " + first + " + (i >> 5), k = (i & 31) * 2;");
    code.line("const float* f = (const float*)(" + src + ") + (k >> 5) * " + to_str(rows_all * 32) +
              " + r * 32 + ((((k & 31) >> 2) ^ (r & 7)) << 2) + (k & 3);");
    code.line("((unsigned*)(" + dst + "))[(r * 64 + (((k >> 3) ^ (r & 7)) << 3) + (k & 7)) >> 1] = "
              "kiln_pack_bf16x2(f[0], f[1]);");
    code.close();
  };
  // MN-major operand: `count` pairs of columns `x` ("m" or "n"), each thread's k and x from i by
  // `place`; fp32 from blocks of 32 columns x 64 k rows, bf16 into blocks of 64 columns.
  auto mn_major = [&](const std::string& src, const std::string& dst, int count,
                      const std::string& place, const std::string& x) {
    code.line("#pragma unroll 4");
    code.open("for (int i = tid & 127; i < " + to_str(count) + "; i += 128) {");
    code.line(place);
    code.line("const float* f = (const float*)(" + src + ") + (" + x + " >> 5) * 2048 + k * 32 + ((((" +
              x + " & 31) >> 2) ^ (k & 7)) << 2) + (" + x + " & 3);");
    code.line("((unsigned*)(" + dst + "))[((" + x + " >> 6) * 4096 + k * 64 + ((((" + x +
              " & 63) >> 3) ^ (k & 7)) << 3) + (" + x + " & 7)) >> 1] = kiln_pack_bf16x2(f[0], f[1]);");
    code.close();
  };
  if (w.a_m_major) {
    code.line("// A M-major: this consumer's 64 columns m (its rows of the tile), every k, pairs of m;");
    code.line("// fp32 (k, m) of block m / 32 and bf16 (k, m) of block m / 64 as B N-major's below");
    mn_major("sac + s * " + to_str(w.at_stage), "sa + s * " + to_str(w.a_stage), 2048,
             "const int k = i >> 5, m = c * 64 + (i & 31) * 2;", "m");
  } else {
    k_major("sac + s * " + to_str(w.at_stage), "sa + s * " + to_str(w.a_stage), t.bm, 64, "c * 64");
  }
  if (w.b_n_major) {
    code.line("// B N-major: this consumer's 32 k rows, pairs of n; fp32 (k, n) of block n / 32 at");
    code.line("// k * 128 + 16 (((n & 31) / 4) ^ (k & 7)) + 4 (n & 3), bf16 (k, n) of block n / 64");
    code.line("// (8 KiB apart) at k * 128 + 16 (((n & 63) / 8) ^ (k & 7)) + 2 (n & 7)");
    mn_major("sbc + s * " + to_str(w.bt_stage), "sb + s * " + to_str(w.b_stage), 32 * t.bn / 2,
             "const int k = c * 32 + i / " + to_str(t.bn / 2) + ", n = (i % " +
                 to_str(t.bn / 2) + ") * 2;",
             "n");
  } else {
    k_major("sbc + s * " + to_str(w.bt_stage), "sb + s * " + to_str(w.b_stage), t.bn, t.bn / 2,
            "c * " + to_str(t.bn / 2));
  }
  publish_stage(code, w);
  code.close();
}

// tf32 with A K-major: A's fragments of the stage's four k steps read into registers, rounded
// (tf32x3: split).
void load_a_fragments(Code& code, const WgmmaMatmul& w) {
  code.line("// A from registers: warp w's 16 of this consumer's rows as the tf32 A fragment of each k");
  code.line("// step (register r: row g + 8 (r & 1), k = t + 4 (r >> 1)), read from the stage (row m at");
  code.line("// m * 128 + 16 ((k / 4) ^ (m & 7)) + 4 (k & 3)) and rounded (cvt.rna, as `high` promises)" +
            std::string(w.x3 ? "; its small part tf32(x - tf32(x)) beside it" : ""));
  code.open("{");
  code.line("const float* fa = (const float*)(sa + s * " + to_str(w.a_stage) + " + c * 8192);");
  code.line("#pragma unroll");
  code.open("for (int ks = 0; ks < 4; ++ks) {");
  code.line("#pragma unroll");
  code.open("for (int r = 0; r < 4; ++r) {");
  code.line("const int m = warp * 16 + g + 8 * (r & 1), k = ks * 8 + t4 + 4 * (r >> 1);");
  code.line("const float x = fa[m * 32 + (((k >> 2) ^ (m & 7)) << 2) + (k & 3)];");
  if (w.x3) {
    code.line("const unsigned big = kiln_tf32x3_big(x);");
    code.line("af[" + std::string(w.a_sets > 1 ? "h][" : "0][") + "ks][r] = big;");
    code.line("afs[ks][r] = kiln_cvt_rna_tf32(x - kiln_as_float(big));");
  } else {
    code.line("af[h][ks][r] = kiln_cvt_rna_tf32(x);");
  }
  code.close();
  code.close();
  code.close();
}

// tf32 and tf32x3: B (and A where it is staged) rounded in place, split beside the stage, or
// written K-major from its staging area.
void round_stage(Code& code, const WgmmaMatmul& w) {
  const MatmulTile& t = w.t;
  code.line(w.a_regs ? "// round B in place (cvt.rna, as `high` promises; wgmma would read the fp32 bits as they"
                     : "// round the stage to tf32 in place (cvt.rna, as `high` promises; wgmma would read the");
  code.line(w.a_regs ? "// are): this consumer's half of B's rows, then the writes to the async proxy, then wait"
                     : "// fp32 bits as they are): this consumer's 64 rows of A and half of B's rows, then the");
  code.line(w.a_regs ? "// until the other consumer has rounded its half"
                     : "// writes to the async proxy, then wait until the other consumer has rounded its half");
  code.open("{");
  // The rounded value of `x` to `dst`, and with x3 its small part to `small`.
  auto round_to = [&](const std::string& x, const std::string& dst, const std::string& small) {
    if (!w.x3) {
      code.line(dst + " = kiln_as_float(kiln_cvt_rna_tf32(" + x + "));");
      return;
    }
    code.line("const float big = kiln_as_float(kiln_tf32x3_big(" + x + "));");
    code.line(small + " = kiln_as_float(kiln_cvt_rna_tf32(" + x + " - big));");
    code.line(dst + " = big;");
  };
  // A staged operand ("a" or "b", its stage `stage_bytes`) written K-major and rounded: this
  // consumer's `rows` rows `x` ("m" or "n"), each 32 k read from the staging area.
  auto write_k_major = [&](const std::string& op, int stage_bytes, int rows, const std::string& x) {
    std::string stage = " + s * " + to_str(stage_bytes);
    code.line("const float* t" + op + " = (const float*)(s" + op + "t" + stage + ");");
    code.line("float* r" + op + " = (float*)(s" + op + stage + ");");
    if (w.x3) code.line("float* r" + op + "s = (float*)(s" + op + "s" + stage + ");");
    code.line("#pragma unroll 4");
    code.open("for (int i = tid & 127; i < " + to_str(rows * 32) + "; i += 128) {");
    code.line("const int " + x + " = c * " + to_str(rows) + " + (i >> 5), k = i & 31;");
    code.line("const float x = t" + op + "[(" + x + " >> 5) * 1024 + k * 32 + ((((" + x +
              " & 31) >> 2) ^ (k & 7)) << 2) + (" + x + " & 3)];");
    code.line("const int at = " + x + " * 32 + (((k >> 2) ^ (" + x + " & 7)) << 2) + (k & 3);");
    round_to("x", "r" + op + "[at]", "r" + op + "s[at]");
    code.close();
  };
  if (w.a_staged) {
    code.line("// A: this consumer's 64 rows m, each 32 k read from the staging area (element (k, m) of");
    code.line("// a block of 32 m at k * 128 + 16 ((m / 4) ^ (k & 7)) + 4 (m & 3)) and written K-major");
    code.line("// (row m at m * 128 + 16 ((k / 4) ^ (m & 7)) + 4 (k & 3))");
    write_k_major("a", w.a_stage, 64, "m");
  } else if (!w.a_regs) {
    code.line("float* ra = (float*)(sa + s * " + to_str(w.a_stage) + " + c * 8192);");
    if (w.x3) code.line("float* ras = (float*)(sas + s * " + to_str(w.a_stage) + " + c * 8192);");
    code.line("#pragma unroll 4");
    if (w.x3) {
      code.open("for (int i = tid & 127; i < 2048; i += 128) {");
      code.line("const float x = ra[i];");
      round_to("x", "ra[i]", "ras[i]");
      code.close();
    } else {
      code.line("for (int i = tid & 127; i < 2048; i += 128) ra[i] = kiln_as_float(kiln_cvt_rna_tf32(ra[i]));");
    }
  }
  if (w.staged) {
    code.line("// B: this consumer's " + to_str(t.bn / 2) + " of its rows n, each 32 k read from");
    code.line("// the staging area (element (k, n) of a block of 32 n at k * 128 + 16 ((n / 4) ^ (k & 7))");
    code.line("// + 4 (n & 3)) and written K-major (row n at n * 128 + 16 ((k / 4) ^ (n & 7)) + 4 (k & 3))");
    write_k_major("b", w.b_stage, t.bn / 2, "n");
  } else {
    code.line("float* rb = (float*)(sb + s * " + to_str(w.b_stage) + " + c * " + to_str(w.b_stage / 2) +
              ");");
    if (w.x3)
      code.line("float* rbs = (float*)(sbs + s * " + to_str(w.b_stage) + " + c * " +
                to_str(w.b_stage / 2) + ");");
    code.line("#pragma unroll 4");
    if (w.x3) {
      code.open("for (int i = tid & 127; i < " + to_str(w.b_stage / 8) + "; i += 128) {");
      code.line("const float x = rb[i];");
      round_to("x", "rb[i]", "rbs[i]");
      code.close();
    } else {
      code.line("for (int i = tid & 127; i < " + to_str(w.b_stage / 8) +
                "; i += 128) rb[i] = kiln_as_float(kiln_cvt_rna_tf32(rb[i]));");
    }
  }
  publish_stage(code, w);
  code.close();
}

}  // namespace

void emit_wgmma_stage_rewrite(Code& code, const WgmmaMatmul& w) {
  if (w.conv) convert_stage(code, w);
  if (w.a_regs) load_a_fragments(code, w);
  if (w.tf32) round_stage(code, w);
}

}  // namespace kiln::compiler::detail
