// Tensor-core matmul kernels: warp-tiled mma.sync over a shared-memory pipeline, fused epilogue.
#include "compiler/emit_internal.h"

#include "compiler/target.h"

namespace kiln::compiler::detail {

namespace {

std::string pack(const std::string& lo, const std::string& hi) {
  return "kiln_pack_bf16x2(" + lo + ", " + hi + ")";
}

// An ldmatrix row address in shared-memory tile `tile`: row r0 + rl, 16-byte chunk c0 + cl, where
// r0 is a multiple of 8 (the swizzle's period in rows), c0's bits are disjoint from cl's, and rl
// and cl depend on the lane only. Swizzled, the chunk is (c0 + cl) ^ key(rl) = c0 ^ (cl ^ key(rl)):
// the lane's part (`lanes`_row, `lanes`_chunk, emit_fragment_lanes) is computed once per thread,
// and each unrolled read adds a constant and XORs one. Not swizzled (the attention kernel's
// padded tiles), `plain`, the offset as written.
struct LdmatrixSite {
  std::string r0, rl, c0, cl;
};

std::string ldmatrix_at(const SmemTile& tile, const std::string& lanes, const LdmatrixSite& site,
                        const std::string& c0, const std::string& plain) {
  if (tile.swizzle_bits == 0) return plain;
  return "(" + site.r0 + ") * " + to_str(tile.ld) + " + " + lanes + "_row + (((" + c0 + ") ^ " +
         lanes + "_chunk) << " + to_str(tile.chunk_shift()) + ")";
}

// The A and B ldmatrix sites of `geo`'s path and orientations (r0 and c0 as written at each read).
LdmatrixSite a_site(const MmaGeometry& geo) {
  if (geo.half) {
    return geo.s.a_k_contiguous ? LdmatrixSite{"am", "(lane & 15)", "ks / 8", "(lane >> 4)"}
                                : LdmatrixSite{"ks", "((lane & 7) + (lane >> 4) * 8)", "am / 8",
                                               "((lane >> 3) & 1)"};
  }
  return {"am", "(lane & 15)", "ks / 4", "(lane >> 4)"};  // fp32: tf32 and bf16 from fp32
}

// `pairs`: where the path reads two n8 tiles per ldmatrix.x4 (b_pairs), the lanes 16..31 address
// the second tile.
LdmatrixSite b_site(const MmaGeometry& geo, bool pairs) {
  bool two = pairs && (geo.half || geo.s.path == MatmulPath::tf32 ||
                       geo.s.path == MatmulPath::tf32x3);
  std::string rows = two ? "((lane & 7) + (lane >> 4) * 8)" : "(lane & 7)";
  if (geo.half) {
    return geo.s.b_k_contiguous
               ? LdmatrixSite{"bn", rows, "ks / 8", "((lane >> 3) & 1)"}
               : LdmatrixSite{"ks", "(lane & 15)", "bn / 8", two ? "(lane >> 4)" : "0"};
  }
  if (geo.s.path == MatmulPath::bf16_of_f32) return {"bn", "(lane & 7)", "ks / 4", "(lane >> 3)"};
  return {"bn", rows, "ks / 4", "((lane >> 3) & 1)"};
}

void emit_lanes(Code& code, const SmemTile& tile, const std::string& lanes,
                const LdmatrixSite& site) {
  if (tile.swizzle_bits == 0) return;
  int period_shift = tile.chunk_shift() + tile.swizzle_shift;
  code.line("const int " + lanes + "_row = " + site.rl + " * " + to_str(tile.ld) + ";");
  code.line("const int " + lanes + "_chunk = " + site.cl + " ^ ((" + lanes + "_row >> " +
            to_str(period_shift) + ") & " + to_str((1 << tile.swizzle_bits) - 1) + ");");
}

}  // namespace

void emit_fragment_lanes(Code& code, const MmaGeometry& geo) {
  bool a_ldmatrix = geo.half || geo.s.a_k_contiguous;
  bool b_ldmatrix = geo.half || geo.s.b_k_contiguous;
  if (a_ldmatrix) emit_lanes(code, geo.layout.a, "a_lane", a_site(geo));
  if (b_ldmatrix) emit_lanes(code, geo.layout.b, "b_lane", b_site(geo, geo.nt % 2 == 0));
}

void emit_a_fragment(Code& code, const MmaGeometry& geo) {
  std::string lda = to_str(geo.layout.a.ld);
  LdmatrixSite site = a_site(geo);
  auto a_at = [&](const std::string& plain, const std::string& c0 = "") {
    return ldmatrix_at(geo.layout.a, "a_lane", site, c0.empty() ? site.c0 : c0, plain);
  };
  MatmulPath path = geo.s.path;
  if (geo.half) {
    if (geo.s.a_k_contiguous) {
      code.line("kiln_ldmatrix_x4(af[mt], as + " +
                a_at("(am + (lane & 15)) * " + lda + " + ks + (lane >> 4) * 8") + ");");
    } else {
      code.line("kiln_ldmatrix_x4_trans(af[mt], as + " +
                a_at("(ks + (lane & 7) + (lane >> 4) * 8) * " + lda +
                     " + am + ((lane >> 3) & 1) * 8") +
                ");");
    }
    return;
  }
  if (path == MatmulPath::bf16_of_f32) {
    // k is permuted consistently for A and B: logical pair (2t, 2t+1) holds physical (t, t+4).
    if (geo.s.a_k_contiguous) {
      code.line("unsigned x[4], y[4];");
      code.line("kiln_ldmatrix_x4(x, as + " +
                a_at("(am + (lane & 15)) * " + lda + " + ks + (lane >> 4) * 4") + ");");
      code.line("kiln_ldmatrix_x4(y, as + " +
                a_at("(am + (lane & 15)) * " + lda + " + ks + 8 + (lane >> 4) * 4", "ks / 4 + 2") +
                ");");
      code.line("af[mt][0] = " + pack("kiln_as_float(x[0])", "kiln_as_float(x[2])") + ";");
      code.line("af[mt][1] = " + pack("kiln_as_float(x[1])", "kiln_as_float(x[3])") + ";");
      code.line("af[mt][2] = " + pack("kiln_as_float(y[0])", "kiln_as_float(y[2])") + ";");
      code.line("af[mt][3] = " + pack("kiln_as_float(y[1])", "kiln_as_float(y[3])") + ";");
    } else {
      auto at = [&](const std::string& row, const std::string& k) {
        return "as[(ks + " + k + ") * " + lda + " + am + " + row + "]";
      };
      code.line("af[mt][0] = " + pack(at("g", "t4"), at("g", "t4 + 4")) + ";");
      code.line("af[mt][1] = " + pack(at("g + 8", "t4"), at("g + 8", "t4 + 4")) + ";");
      code.line("af[mt][2] = " + pack(at("g", "t4 + 8"), at("g", "t4 + 12")) + ";");
      code.line("af[mt][3] = " + pack(at("g + 8", "t4 + 8"), at("g + 8", "t4 + 12")) + ";");
    }
    return;
  }
  // tf32: f[i] = A(g, t) A(g+8, t) A(g, t+4) A(g+8, t+4)
  code.line("float f[4];");
  if (geo.s.a_k_contiguous) {
    code.line("unsigned r[4];");
    code.line("kiln_ldmatrix_x4(r, as + " +
              a_at("(am + (lane & 15)) * " + lda + " + ks + (lane >> 4) * 4") + ");");
    code.line("for (int i = 0; i < 4; ++i) f[i] = kiln_as_float(r[i]);");
  } else {
    code.line("f[0] = as[(ks + t4) * " + lda + " + am + g];");
    code.line("f[1] = as[(ks + t4) * " + lda + " + am + g + 8];");
    code.line("f[2] = as[(ks + t4 + 4) * " + lda + " + am + g];");
    code.line("f[3] = as[(ks + t4 + 4) * " + lda + " + am + g + 8];");
  }
  if (path == MatmulPath::tf32x3) {
    code.open("for (int i = 0; i < 4; ++i) {");
    code.line("af[mt][i] = kiln_tf32x3_big(f[i]);");
    code.line("as_small[mt][i] = kiln_cvt_rna_tf32(f[i] - kiln_as_float(af[mt][i]));");
    code.close();
  } else {
    code.line("for (int i = 0; i < 4; ++i) af[mt][i] = kiln_cvt_rna_tf32(f[i]);");
  }
}

void emit_b_fragment(Code& code, const MmaGeometry& geo) {
  std::string ldb = to_str(geo.layout.b.ld);
  LdmatrixSite site = b_site(geo, false);
  auto b_at = [&](const std::string& plain) {
    return ldmatrix_at(geo.layout.b, "b_lane", site, site.c0, plain);
  };
  MatmulPath path = geo.s.path;
  if (geo.half) {
    if (geo.s.b_k_contiguous) {
      code.line("kiln_ldmatrix_x2(bf[nt], bs + " +
                b_at("(bn + (lane & 7)) * " + ldb + " + ks + ((lane >> 3) & 1) * 8") + ");");
    } else {
      code.line("kiln_ldmatrix_x2_trans(bf[nt], bs + " +
                b_at("(ks + (lane & 15)) * " + ldb + " + bn") + ");");
    }
    return;
  }
  if (path == MatmulPath::bf16_of_f32) {
    if (geo.s.b_k_contiguous) {
      code.line("unsigned r[4];");
      code.line("kiln_ldmatrix_x4(r, bs + " +
                b_at("(bn + (lane & 7)) * " + ldb + " + ks + (lane >> 3) * 4") + ");");
      code.line("bf[nt][0] = " + pack("kiln_as_float(r[0])", "kiln_as_float(r[1])") + ";");
      code.line("bf[nt][1] = " + pack("kiln_as_float(r[2])", "kiln_as_float(r[3])") + ";");
    } else {
      auto at = [&](const std::string& k) { return "bs[(ks + " + k + ") * " + ldb + " + bn + g]"; };
      code.line("bf[nt][0] = " + pack(at("t4"), at("t4 + 4")) + ";");
      code.line("bf[nt][1] = " + pack(at("t4 + 8"), at("t4 + 12")) + ";");
    }
    return;
  }
  // tf32: f[i] = B(t, g) B(t+4, g)
  code.line("float f[2];");
  if (geo.s.b_k_contiguous) {
    code.line("unsigned r[2];");
    code.line("kiln_ldmatrix_x2(r, bs + " +
              b_at("(bn + (lane & 7)) * " + ldb + " + ks + ((lane >> 3) & 1) * 4") + ");");
    code.line("f[0] = kiln_as_float(r[0]);");
    code.line("f[1] = kiln_as_float(r[1]);");
  } else {
    code.line("f[0] = bs[(ks + t4) * " + ldb + " + bn + g];");
    code.line("f[1] = bs[(ks + t4 + 4) * " + ldb + " + bn + g];");
  }
  if (path == MatmulPath::tf32x3) {
    code.open("for (int i = 0; i < 2; ++i) {");
    code.line("bf[nt][i] = kiln_tf32x3_big(f[i]);");
    code.line("bs_small[nt][i] = kiln_cvt_rna_tf32(f[i] - kiln_as_float(bf[nt][i]));");
    code.close();
  } else {
    code.line("for (int i = 0; i < 2; ++i) bf[nt][i] = kiln_cvt_rna_tf32(f[i]);");
  }
}

void emit_mma(Code& code, MatmulPath path, const Target& target, const MmaNames& n) {
  assert(uses_mma(path));
  switch (path.numerics) {
    case Numerics::tf32:
      code.line("kiln_mma_m16n8k8_tf32(" + n.acc + ", " + n.a + ", " + n.b + ");");
      return;
    case Numerics::tf32x3:
      code.line("kiln_mma_m16n8k8_tf32(" + n.acc + ", " + n.a_small + ", " + n.b + ");");
      code.line("kiln_mma_m16n8k8_tf32(" + n.acc + ", " + n.a + ", " + n.b_small + ");");
      code.line("kiln_mma_m16n8k8_tf32(" + n.acc + ", " + n.a + ", " + n.b + ");");
      return;
    case Numerics::f16:
      if (target.has(Feature::f16_mma_k16)) {
        code.line("kiln_mma_m16n8k16_f16(" + n.acc + ", " + n.a + ", " + n.b + ");");
      } else {
        code.line("kiln_mma_m16n8k8_f16(" + n.acc + ", " + n.a + ", " + n.b + ");");
        code.line("kiln_mma_m16n8k8_f16(" + n.acc + ", " + n.a + " + 2, " + n.b + " + 1);");
      }
      return;
    case Numerics::bf16_of_f32:
    case Numerics::bf16:
      code.line("kiln_mma_m16n8k16_bf16(" + n.acc + ", " + n.a + ", " + n.b + ");");
      return;
    case Numerics::fp32:
      assert(false && "emit_mma: fp32 numerics run on CUDA cores, not mma.sync");
      return;
  }
}

void emit_zeroed_accumulators(Code& code, const std::string& name, int mt, int nt) {
  code.line("float " + name + "[" + to_str(mt) + "][" + to_str(nt) + "][4];");
  code.line("#pragma unroll");
  code.line("for (int mt = 0; mt < " + to_str(mt) + "; ++mt)");
  code.line("  for (int nt = 0; nt < " + to_str(nt) + "; ++nt)");
  code.line("    for (int i = 0; i < 4; ++i) " + name + "[mt][nt][i] = 0.0f;");
}

namespace {

// Whether B's fragments of two neighbouring n8 tiles come from one ldmatrix.x4 (16-bit operands
// either way, fp32 K-contiguous for tf32 and tf32x3); medium's and the scalar reads go a tile
// at a time (emit_b_fragment).
bool b_pairs(const MmaGeometry& geo) {
  if (geo.half) return true;
  return geo.s.b_k_contiguous &&
         (geo.s.path == MatmulPath::tf32 || geo.s.path == MatmulPath::tf32x3);
}

// bf[nt] and bf[nt + 1] (bn = wn0 + nt * 8, nt even) from one ldmatrix.x4: lanes 16..31 address
// the second tile's rows (K-contiguous) or its chunk (N-contiguous, .trans).
void emit_b_fragment_pair(Code& code, const MmaGeometry& geo) {
  const SmemTile& tile = geo.layout.b;
  std::string ldb = to_str(tile.ld);
  // r[2 j + i]: register i of tile nt + j.
  code.line("unsigned r[4];");
  if (geo.half && !geo.s.b_k_contiguous) {
    LdmatrixSite site{"ks", "(lane & 15)", "bn / 8", "(lane >> 4)"};
    code.line("kiln_ldmatrix_x4_trans(r, bs + " +
              ldmatrix_at(tile, "b_lane", site, site.c0,
                          "(ks + (lane & 15)) * " + ldb + " + bn + (lane >> 4) * 8") +
              ");");
    code.line("for (int i = 0; i < 4; ++i) bf[nt + (i >> 1)][i & 1] = r[i];");
    return;
  }
  std::string chunk = geo.half ? "ks / 8" : "ks / 4";
  LdmatrixSite site{"bn", "((lane & 7) + (lane >> 4) * 8)", chunk, "((lane >> 3) & 1)"};
  std::string plain = "(bn + (lane & 7) + (lane >> 4) * 8) * " + ldb +
                      " + ks + ((lane >> 3) & 1) * " + (geo.half ? "8" : "4");
  std::string at = "bs + " + ldmatrix_at(tile, "b_lane", site, site.c0, plain);
  code.line("kiln_ldmatrix_x4(r, " + at + ");");
  if (geo.half) {
    code.line("for (int i = 0; i < 4; ++i) bf[nt + (i >> 1)][i & 1] = r[i];");
    return;
  }
  // tf32: B(t + 4 i, g) of tile nt + j, rounded as emit_b_fragment rounds it.
  code.open("for (int i = 0; i < 4; ++i) {");
  code.line("const float f = kiln_as_float(r[i]);");
  if (geo.s.path == MatmulPath::tf32x3) {
    code.line("bf[nt + (i >> 1)][i & 1] = kiln_tf32x3_big(f);");
    code.line("bs_small[nt + (i >> 1)][i & 1] = "
              "kiln_cvt_rna_tf32(f - kiln_as_float(bf[nt + (i >> 1)][i & 1]));");
  } else {
    code.line("bf[nt + (i >> 1)][i & 1] = kiln_cvt_rna_tf32(f);");
  }
  code.close();
}

// The warp's A fragments (af[mt], every m tile) and B fragments (bf[nt], every n tile, two at a
// time where b_pairs allows) at k offset `ks` of the tiles `as` and `bs`.
void emit_warp_fragments(Code& code, const MmaGeometry& geo) {
  code.line("#pragma unroll");
  code.open("for (int mt = 0; mt < " + to_str(geo.mt) + "; ++mt) {");
  code.line("const int am = wm0 + mt * 16;");
  emit_a_fragment(code, geo);
  code.close();
  bool pairs = b_pairs(geo) && geo.nt % 2 == 0;
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(geo.nt) + "; nt += " + (pairs ? "2" : "1") + ") {");
  code.line("const int bn = wn0 + nt * 8;");
  if (pairs) {
    emit_b_fragment_pair(code, geo);
  } else {
    emit_b_fragment(code, geo);
  }
  code.close();
}

void emit_compute(Code& code, const MmaGeometry& geo, const Target& target,
                  const std::string& stage) {
  std::string smem_t = geo.half ? "unsigned short" : "float";
  bool x3 = geo.s.path == MatmulPath::tf32x3;
  code.open("{");
  code.line("const " + smem_t + "* as = sa + " + stage + " * " +
            to_str(geo.layout.a.rows * geo.layout.a.ld) + ";");
  code.line("const " + smem_t + "* bs = sb + " + stage + " * " +
            to_str(geo.layout.b.rows * geo.layout.b.ld) + ";");
  if (x3) {
    code.line("// tf32x3: the k tile's products summed on the tensor cores from zero, then added to");
    code.line("// acc in fp32 to nearest: tensor cores truncate their sums, and a truncated running");
    code.line("// sum would drift by K / 4 truncations (KERNELS.md, \"Accumulation model\")");
    emit_zeroed_accumulators(code, "part", geo.mt, geo.nt);
  }
  code.line("#pragma unroll");
  code.open("for (int ks = 0; ks < " + to_str(geo.t.bk) + "; ks += " + to_str(geo.mma_k) + ") {");
  code.line("unsigned af[" + to_str(geo.mt) + "][4];");
  code.line("unsigned bf[" + to_str(geo.nt) + "][2];");
  if (x3) {
    code.line("unsigned as_small[" + to_str(geo.mt) + "][4];");
    code.line("unsigned bs_small[" + to_str(geo.nt) + "][2];");
  }
  emit_warp_fragments(code, geo);
  code.line("#pragma unroll");
  code.open("for (int mt = 0; mt < " + to_str(geo.mt) + "; ++mt) {");
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(geo.nt) + "; ++nt) {");
  MmaNames names;
  if (x3) names.acc = "part[mt][nt]";
  emit_mma(code, geo.s.path, target, names);
  code.close();
  code.close();
  code.close();
  if (x3) {
    code.line("#pragma unroll");
    code.line("for (int mt = 0; mt < " + to_str(geo.mt) + "; ++mt)");
    code.line("  for (int nt = 0; nt < " + to_str(geo.nt) + "; ++nt)");
    code.line("    for (int i = 0; i < 4; ++i) acc[mt][nt][i] += part[mt][nt][i];");
  }
  code.close();
}

// Fragment set `set` (af0/bf0 or af1/bf1; not tf32x3, double_buffers_fragments) from stage
// `stage` (an int expression) at k step `ks`: the loaders of emit_compute, writing through
// references named as they expect.
void emit_fragment_set(Code& code, const MmaGeometry& geo, const std::string& stage, int ks,
                       int set) {
  std::string smem_t = geo.half ? "unsigned short" : "float";
  std::string n = to_str(set), mt = to_str(geo.mt), nt = to_str(geo.nt);
  code.open("{");
  code.line("unsigned (&af)[" + mt + "][4] = af" + n + ";");
  code.line("unsigned (&bf)[" + nt + "][2] = bf" + n + ";");
  code.line("const " + smem_t + "* as = sa + (" + stage + ") * " +
            to_str(geo.layout.a.rows * geo.layout.a.ld) + ";");
  code.line("const " + smem_t + "* bs = sb + (" + stage + ") * " +
            to_str(geo.layout.b.rows * geo.layout.b.ld) + ";");
  code.line("const int ks = " + to_str(ks) + ";");
  emit_warp_fragments(code, geo);
  code.close();
}

// The mmas of one k step on fragment set `set`.
void emit_mma_step(Code& code, const MmaGeometry& geo, const Target& target, int set) {
  std::string n = to_str(set);
  MmaNames names;
  names.a = "af" + n + "[mt]";
  names.b = "bf" + n + "[nt]";
  code.line("#pragma unroll");
  code.open("for (int mt = 0; mt < " + to_str(geo.mt) + "; ++mt) {");
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(geo.nt) + "; ++nt) {");
  emit_mma(code, geo.s.path, target, names);
  code.close();
  code.close();
}

// The k loop of a cp.async pipeline (stages >= 2) with fragments double-buffered in registers:
// each k step's mmas run on one fragment set while the next step's fragments are read into the
// other, and the last step of a tile reads the next tile's first fragments, after the wait and
// barrier that land its stage. The refill S - 1 tiles ahead is issued at the tile's first step,
// before that wait; the stage it overwrites was last read before the previous tile's barrier,
// so each tile costs one barrier, as emit_k_loop's does.
// `limit` and `first`: as emit_k_loop's.
void emit_pipelined_k_loop(Code& code, const MmaGeometry& geo, const KernelPlan& k,
                           const LoadFn& load, const std::string& limit,
                           const std::string& first) {
  int stages = k.tile.stages;
  int steps = k.tile.bk / geo.mma_k;
  assert(geo.s.path != MatmulPath::tf32x3 && "double_buffers_fragments: not for tf32x3");
  KTiles t = declare_k_tiles(code, k.extents.k, k.tile.bk, limit, first);
  std::string s = to_str(stages), wait = "kiln_cp_async_wait<" + to_str(stages - 2) + ">();";
  std::string mt = to_str(geo.mt), nt = to_str(geo.nt);
  code.line("// two fragment sets: one k step's mmas run on one while the next step's are read");
  code.line("unsigned af0[" + mt + "][4], af1[" + mt + "][4];");
  code.line("unsigned bf0[" + nt + "][2], bf1[" + nt + "][2];");
  code.line("// prologue: the first " + to_str(stages - 1) +
            " stages in flight, then the first tile's first fragments");
  emit_k_prologue(code, t, stages, load);
  code.line(wait);
  code.line("__syncthreads();");
  emit_fragment_set(code, geo, "0", 0, 0);
  code.open("for (int kt = 0; kt < " + t.count + "; ++kt) {");
  if (steps > 1) code.line("const int cs = kt % " + s + ";");
  for (int j = 0; j < steps; ++j) {
    int now = j % 2, next = (j + 1) % 2;
    code.line("// k step " + to_str(j) + " of " + to_str(steps));
    // The refill first: the tile it copies must be committed before the wait below that lands
    // the next tile, and the stage it overwrites was last read before the previous tile's
    // barrier.
    if (j == 0) emit_k_refill(code, t, stages, load);
    if (j + 1 < steps) {
      emit_fragment_set(code, geo, "cs", (j + 1) * geo.mma_k, next);
    } else {
      code.line("// the next tile's stage lands; every read of the stage refilled next is done");
      code.open("if (kt + 1 < " + t.count + ") {");
      code.line(wait);
      code.line("__syncthreads();");
      emit_fragment_set(code, geo, "(kt + 1) % " + s, 0, next);
      code.close();
    }
    emit_mma_step(code, geo, k.target, now);
  }
  code.close();
}

// A split-K partials kernel's epilogue: the accumulators as they are, to its range's slice of
// the partials ([split][batch][M][N] fp32), two neighbouring columns at a time where N is even.
void emit_partials_store(Code& code, const KernelContext& ctx, const MmaGeometry& geo) {
  const KernelPlan& k = ctx.kernel;
  const MatmulExtents& e = k.extents;
  bool batched = ctx.graph.node(k.group.root).type.shape.rank() >= 3;
  std::string mn = to_str(e.m.hi * e.n.hi);
  code.line("// this range's partial products, to its slice of the partials");
  code.line("float* P = p" + to_str(k.partial_param) + " + ((long long)split * " +
            to_str(e.batch.hi) + (batched ? " + bz" : "") + ") * " + mn + ";");
  bool pairs = e.n.hi % 2 == 0;
  bool check = !e.m.multiple_of(k.tile.bm) || !e.n.multiple_of(k.tile.bn);
  std::string n_count = to_str(e.n.hi), m_count = to_str(e.m.hi);
  code.line("#pragma unroll");
  code.open("for (int mt = 0; mt < " + to_str(geo.mt) + "; ++mt) {");
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(geo.nt) + "; ++nt) {");
  code.line("#pragma unroll");
  if (pairs) {
    code.open("for (int h = 0; h < 2; ++h) {");
    code.line("const int m = bm0 + wm0 + mt * 16 + g + h * 8;");
    code.line("const int n = bn0 + wn0 + nt * 8 + t4 * 2;");
    if (check) code.line("if (m >= " + m_count + " || n >= " + n_count + ") continue;");
    code.line("*(float2*)(P + m * " + n_count +
              " + n) = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);");
  } else {
    code.open("for (int i = 0; i < 4; ++i) {");
    code.line("const int m = bm0 + wm0 + mt * 16 + g + (i >> 1) * 8;");
    code.line("const int n = bn0 + wn0 + nt * 8 + t4 * 2 + (i & 1);");
    if (check) code.line("if (m >= " + m_count + " || n >= " + n_count + ") continue;");
    code.line("P[m * " + n_count + " + n] = acc[mt][nt][i];");
  }
  code.close();
  code.close();
  code.close();
}

}  // namespace

void emit_split_sum(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const MatmulExtents& e = k.extents;
  int threads = static_cast<int>(k.launch.block[0]);
  int64_t total = e.batch.hi * e.m.hi * e.n.hi;
  code.open(kernel_signature(ctx, threads));
  code.line("const unsigned eu = (unsigned)blockIdx.x * " + to_str(threads) +
            "u + (unsigned)threadIdx.x;");
  code.line("if (eu >= " + to_str(total) + "u) return;");
  code.line("const int e = (int)eu;");
  code.line("const int n = e % " + to_str(e.n.hi) + ";");
  code.line("const int m = e / " + to_str(e.n.hi) + " % " + to_str(e.m.hi) + ";");
  if (ctx.graph.node(k.group.root).type.shape.rank() >= 3)
    code.line("const int bz = e / " + to_str(e.m.hi * e.n.hi) + ";");
  std::string p = "p" + to_str(k.partial_param);
  code.line("// the splits' partial products, added in split order");
  code.line("float sum = " + p + "[e];");
  code.line("#pragma unroll");
  code.line("for (int s = 1; s < " + to_str(k.tile.split_k) + "; ++s) sum += " + p +
            "[(long long)s * " + to_str(total) + " + e];");
  ElementIndex index = matmul_output_index(ctx);
  std::string value = emit_epilogue(code, ctx, "sum", index);
  emit_store(code, ctx, value, index.linear);
  code.close();
}

void emit_matmul_mma(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  MmaGeometry geo{k.shape, k.tile, smem_layout(k.tile, k.shape)};
  geo.mt = k.tile.bm / k.tile.warps_m / 16;
  geo.nt = k.tile.bn / k.tile.warps_n / 8;
  geo.half = k.shape.elem_bytes == 2;
  geo.mma_k = (k.shape.path == MatmulPath::tf32 || k.shape.path == MatmulPath::tf32x3) ? 8 : 16;
  const ir::Node& mm = ctx.graph.node(k.group.anchor);
  ir::DType dtype = ctx.graph.node(mm.operands[0]).type.dtype;
  std::string gtype = storage_type(dtype);
  std::string smem_t = geo.half ? "unsigned short" : "float";
  const MatmulShape& s = k.shape;
  const MatmulExtents& e = k.extents;
  int threads = k.tile.threads();
  bool async = k.tile.stages >= 2;

  code.open(kernel_signature(ctx, threads, 1));
  code.line("const int tid = (int)threadIdx.x;");
  code.line("const int lane = tid & 31;");
  code.line("const int warp = tid >> 5;");
  code.line("const int g = lane >> 2;");
  code.line("const int t4 = lane & 3;");
  code.line("const int wm0 = (warp / " + to_str(k.tile.warps_n) + ") * " +
            to_str(k.tile.bm / k.tile.warps_m) + ";");
  code.line("const int wn0 = (warp % " + to_str(k.tile.warps_n) + ") * " +
            to_str(k.tile.bn / k.tile.warps_n) + ";");
  emit_fragment_lanes(code, geo);
  emit_block_origin(code, k);
  emit_batch_operands(code, ctx, gtype);
  code.line(smem_t + "* sa = (" + smem_t + "*)kiln_dynamic_smem();");
  int a_elems = geo.layout.a.rows * geo.layout.a.ld;
  int b_elems = geo.layout.b.rows * geo.layout.b.ld;
  code.line(smem_t + "* sb = sa + " + to_str(static_cast<int64_t>(k.tile.stages) * a_elems) + ";");
  emit_zeroed_accumulators(code, "acc", geo.mt, geo.nt);

  auto load = [&](const std::string& stage, const std::string& k0) {
    TileCopy a;
    a.dst = "sa + " + stage + " * " + to_str(a_elems);
    a.src = "A";
    a.dtype = dtype;
    a.async = async;
    a.threads = threads;
    a.smem_ld = geo.layout.a.ld;
    a.smem = geo.layout.a;
    a.ld_global = e.lda;
    if (s.a_k_contiguous) {
      a.row0 = "bm0", a.col0 = k0, a.rows = k.tile.bm, a.cols = k.tile.bk;
      a.row_bound = e.m, a.col_bound = e.k;
    } else {
      a.row0 = k0, a.col0 = "bm0", a.rows = k.tile.bk, a.cols = k.tile.bm;
      a.row_bound = e.k, a.col_bound = e.m;
    }
    TileCopy b = a;
    b.dst = "sb + " + stage + " * " + to_str(b_elems);
    b.src = "B";
    b.smem_ld = geo.layout.b.ld;
    b.smem = geo.layout.b;
    b.ld_global = e.ldb;
    if (s.b_k_contiguous) {
      b.row0 = "bn0", b.col0 = k0, b.rows = k.tile.bn, b.cols = k.tile.bk;
      b.row_bound = e.n, b.col_bound = e.k;
    } else {
      b.row0 = k0, b.col0 = "bn0", b.rows = k.tile.bk, b.cols = k.tile.bn;
      b.row_bound = e.k, b.col_bound = e.n;
    }
    emit_tile_copy(code, a);
    emit_tile_copy(code, b);
  };
  auto compute = [&](const std::string& stage) { emit_compute(code, geo, k.target, stage); };
  if (k.split == SplitRole::partials) {
    // This block's range of K tiles: `per` tiles from split * per, the last range the rest
    // (split_k_fits: none is empty).
    int splits = k.tile.split_k;
    int64_t k_tiles = (e.k.hi + k.tile.bk - 1) / k.tile.bk;
    int64_t per = (k_tiles + splits - 1) / splits;
    code.line("// split-K: K tiles [split * " + to_str(per) + ", ...) of " + to_str(k_tiles) +
              " in " + to_str(splits) + " ranges");
    int64_t last = k_tiles - (splits - 1) * per;
    std::string count = last == per ? to_str(per)
                                     : "(split == " + to_str(splits - 1) + " ? " + to_str(last) +
                                           " : " + to_str(per) + ")";
    if (double_buffers_fragments(k.tile, k.shape)) {
      emit_pipelined_k_loop(code, geo, k, load, count, "split * " + to_str(per));
    } else {
      emit_k_loop(code, k.tile.stages, e.k, k.tile.bk, load, compute, count,
                  "split * " + to_str(per));
    }
    emit_partials_store(code, ctx, geo);
    code.close();
    return;
  }
  if (double_buffers_fragments(k.tile, k.shape)) {
    emit_pipelined_k_loop(code, geo, k, load, "", "");
  } else {
    emit_k_loop(code, k.tile.stages, e.k, k.tile.bk, load, compute);
  }

  code.line("// epilogue: D(g, 2t..2t+1) and D(g+8, 2t..2t+1) of every mma tile");
  code.line("#pragma unroll");
  code.open("for (int mt = 0; mt < " + to_str(geo.mt) + "; ++mt) {");
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(geo.nt) + "; ++nt) {");
  code.line("#pragma unroll");
  code.open("for (int i = 0; i < 4; ++i) {");
  code.line("const int m = bm0 + wm0 + mt * 16 + g + (i >> 1) * 8;");
  code.line("const int n = bn0 + wn0 + nt * 8 + t4 * 2 + (i & 1);");
  emit_output_element(code, ctx, "acc[mt][nt][i]", k.tile.bm, k.tile.bn);
  code.close();
  code.close();
  code.close();
  code.close();
}

void emit_output_element(Code& code, const KernelContext& ctx, const std::string& acc, int bm,
                         int bn) {
  const MatmulExtents& e = ctx.kernel.extents;
  if (!e.m.multiple_of(bm) || !e.n.multiple_of(bn))
    code.line("if (m >= " + e.m.expr() + " || n >= " + e.n.expr() + ") continue;");
  ElementIndex index = matmul_output_index(ctx);
  std::string value = emit_epilogue(code, ctx, acc, index);
  emit_store(code, ctx, value, index.linear);
}

}  // namespace kiln::compiler::detail
