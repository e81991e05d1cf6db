// Tensor-core matmul kernels: warp-tiled mma.sync over a shared-memory pipeline, fused epilogue.
#include "compiler/emit_internal.h"

#include "compiler/target.h"

namespace kiln::compiler::detail {

namespace {

std::string pack(const std::string& lo, const std::string& hi) {
  return "kiln_pack_bf16x2(" + lo + ", " + hi + ")";
}

}  // namespace

void emit_a_fragment(Code& code, const MmaGeometry& geo) {
  std::string lda = to_str(geo.layout.a.ld);
  MatmulPath path = geo.s.path;
  if (geo.half) {
    if (geo.s.a_k_contiguous) {
      code.line("kiln_ldmatrix_x4(af[mt], as + (am + (lane & 15)) * " + lda +
                " + ks + (lane >> 4) * 8);");
    } else {
      code.line("kiln_ldmatrix_x4_trans(af[mt], as + (ks + (lane & 7) + (lane >> 4) * 8) * " + lda +
                " + am + ((lane >> 3) & 1) * 8);");
    }
    return;
  }
  if (path == MatmulPath::bf16_of_f32) {
    // k is permuted consistently for A and B: logical pair (2t, 2t+1) holds physical (t, t+4).
    if (geo.s.a_k_contiguous) {
      code.line("unsigned x[4], y[4];");
      code.line("kiln_ldmatrix_x4(x, as + (am + (lane & 15)) * " + lda +
                " + ks + (lane >> 4) * 4);");
      code.line("kiln_ldmatrix_x4(y, as + (am + (lane & 15)) * " + lda +
                " + ks + 8 + (lane >> 4) * 4);");
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
    code.line("kiln_ldmatrix_x4(r, as + (am + (lane & 15)) * " + lda + " + ks + (lane >> 4) * 4);");
    code.line("for (int i = 0; i < 4; ++i) f[i] = kiln_as_float(r[i]);");
  } else {
    code.line("f[0] = as[(ks + t4) * " + lda + " + am + g];");
    code.line("f[1] = as[(ks + t4) * " + lda + " + am + g + 8];");
    code.line("f[2] = as[(ks + t4 + 4) * " + lda + " + am + g];");
    code.line("f[3] = as[(ks + t4 + 4) * " + lda + " + am + g + 8];");
  }
  if (path == MatmulPath::tf32x3) {
    code.open("for (int i = 0; i < 4; ++i) {");
    code.line("af[mt][i] = kiln_cvt_rna_tf32(f[i]);");
    code.line("as_small[mt][i] = kiln_cvt_rna_tf32(f[i] - kiln_as_float(af[mt][i]));");
    code.close();
  } else {
    code.line("for (int i = 0; i < 4; ++i) af[mt][i] = kiln_cvt_rna_tf32(f[i]);");
  }
}

void emit_b_fragment(Code& code, const MmaGeometry& geo) {
  std::string ldb = to_str(geo.layout.b.ld);
  MatmulPath path = geo.s.path;
  if (geo.half) {
    if (geo.s.b_k_contiguous) {
      code.line("kiln_ldmatrix_x2(bf[nt], bs + (bn + (lane & 7)) * " + ldb +
                " + ks + ((lane >> 3) & 1) * 8);");
    } else {
      code.line("kiln_ldmatrix_x2_trans(bf[nt], bs + (ks + (lane & 15)) * " + ldb + " + bn);");
    }
    return;
  }
  if (path == MatmulPath::bf16_of_f32) {
    if (geo.s.b_k_contiguous) {
      code.line("unsigned r[4];");
      code.line("kiln_ldmatrix_x4(r, bs + (bn + (lane & 7)) * " + ldb +
                " + ks + (lane >> 3) * 4);");
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
    code.line("kiln_ldmatrix_x2(r, bs + (bn + (lane & 7)) * " + ldb +
              " + ks + ((lane >> 3) & 1) * 4);");
    code.line("f[0] = kiln_as_float(r[0]);");
    code.line("f[1] = kiln_as_float(r[1]);");
  } else {
    code.line("f[0] = bs[(ks + t4) * " + ldb + " + bn + g];");
    code.line("f[1] = bs[(ks + t4 + 4) * " + ldb + " + bn + g];");
  }
  if (path == MatmulPath::tf32x3) {
    code.open("for (int i = 0; i < 2; ++i) {");
    code.line("bf[nt][i] = kiln_cvt_rna_tf32(f[i]);");
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
  code.line("#pragma unroll");
  code.open("for (int mt = 0; mt < " + to_str(geo.mt) + "; ++mt) {");
  code.line("const int am = wm0 + mt * 16;");
  emit_a_fragment(code, geo);
  code.close();
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(geo.nt) + "; ++nt) {");
  code.line("const int bn = wn0 + nt * 8;");
  emit_b_fragment(code, geo);
  code.close();
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

}  // namespace

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
  emit_k_loop(code, k.tile.stages, e.k, k.tile.bk, load,
              [&](const std::string& stage) { emit_compute(code, geo, k.target, stage); });

  code.line("// epilogue: D(g, 2t..2t+1) and D(g+8, 2t..2t+1) of every mma tile");
  code.line("#pragma unroll");
  code.open("for (int mt = 0; mt < " + to_str(geo.mt) + "; ++mt) {");
  code.line("#pragma unroll");
  code.open("for (int nt = 0; nt < " + to_str(geo.nt) + "; ++nt) {");
  code.line("#pragma unroll");
  code.open("for (int i = 0; i < 4; ++i) {");
  code.line("const int m = bm0 + wm0 + mt * 16 + g + (i >> 1) * 8;");
  code.line("const int n = bn0 + wn0 + nt * 8 + t4 * 2 + (i & 1);");
  bool check = !e.m.multiple_of(k.tile.bm) || !e.n.multiple_of(k.tile.bn);
  if (check) code.line("if (m >= " + e.m.expr() + " || n >= " + e.n.expr() + ") continue;");
  ElementIndex index = matmul_output_index(ctx);
  std::string value = emit_epilogue(code, ctx, "acc[mt][nt][i]", index);
  emit_store(code, ctx, value, index.linear);
  code.close();
  code.close();
  code.close();
  code.close();
}

}  // namespace kiln::compiler::detail
