// fp32 CUDA-core matmul kernels (highest, and fallbacks): 16x16 threads, register-blocked FFMA.
#include "compiler/emit_internal.h"

namespace kiln::compiler::detail {

void emit_matmul_ffma(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const MatmulShape& s = k.shape;
  const MatmulExtents& e = k.extents;
  const MatmulTile& t = k.tile;
  SmemLayout layout = smem_layout(t, s);
  const ir::Node& mm = ctx.graph.node(k.group.anchor);
  ir::DType dtype = ctx.graph.node(mm.operands[0]).type.dtype;
  std::string gtype = storage_type(dtype);
  const int threads = 256;
  int tm = t.bm / 16, tn = t.bn / 16;
  int a_elems = layout.a.rows * layout.a.ld;
  int b_elems = layout.b.rows * layout.b.ld;
  bool async = t.stages >= 2 && dtype == ir::DType::f32;

  code.open(kernel_signature(ctx, threads, 1));
  code.line("const int tid = (int)threadIdx.x;");
  code.line("const int tx = tid & 15;");
  code.line("const int ty = tid >> 4;");
  emit_block_origin(code, k);
  emit_batch_operands(code, ctx, gtype);
  code.line("float* sa = (float*)kiln_dynamic_smem();  // [stage][k][m]");
  code.line("float* sb = sa + " + to_str(static_cast<int64_t>(t.stages) * a_elems) +
            ";  // [stage][k][n]");
  code.line("float acc[" + to_str(tm) + "][" + to_str(tn) + "];");
  code.line("#pragma unroll");
  code.line("for (int i = 0; i < " + to_str(tm) + "; ++i)");
  code.line("  for (int j = 0; j < " + to_str(tn) + "; ++j) acc[i][j] = 0.0f;");

  auto load = [&](const std::string& stage, const std::string& k0) {
    TileCopy a;
    a.dtype = dtype;
    a.smem_float = dtype != ir::DType::f32;
    a.async = async;
    a.threads = threads;
    a.dst = "sa + " + stage + " * " + to_str(a_elems);
    a.src = "A";
    a.smem_ld = layout.a.ld;
    a.ld_global = e.lda;
    if (s.a_k_contiguous) {  // global [m][k] -> smem [k][m]
      a.row0 = "bm0", a.col0 = k0, a.rows = t.bm, a.cols = t.bk, a.transpose = true;
      a.row_bound = e.m, a.col_bound = e.k;
    } else {
      a.row0 = k0, a.col0 = "bm0", a.rows = t.bk, a.cols = t.bm;
      a.row_bound = e.k, a.col_bound = e.m;
    }
    TileCopy b = a;
    b.transpose = false;
    b.dst = "sb + " + stage + " * " + to_str(b_elems);
    b.src = "B";
    b.smem_ld = layout.b.ld;
    b.ld_global = e.ldb;
    if (s.b_k_contiguous) {  // global [n][k] -> smem [k][n]
      b.row0 = "bn0", b.col0 = k0, b.rows = t.bn, b.cols = t.bk, b.transpose = true;
      b.row_bound = e.n, b.col_bound = e.k;
    } else {
      b.row0 = k0, b.col0 = "bn0", b.rows = t.bk, b.cols = t.bn;
      b.row_bound = e.k, b.col_bound = e.n;
    }
    emit_tile_copy(code, a);
    emit_tile_copy(code, b);
  };
  auto compute = [&](const std::string& stage) {
    code.open("{");
    code.line("const float* as = sa + " + stage + " * " + to_str(a_elems) + ";");
    code.line("const float* bs = sb + " + stage + " * " + to_str(b_elems) + ";");
    code.line("#pragma unroll");
    code.open("for (int kk = 0; kk < " + to_str(t.bk) + "; ++kk) {");
    code.line("float a[" + to_str(tm) + "], b[" + to_str(tn) + "];");
    code.line("#pragma unroll");
    code.line("for (int i = 0; i < " + to_str(tm) + "; ++i) a[i] = as[kk * " + to_str(layout.a.ld) +
              " + ty + 16 * i];");
    code.line("#pragma unroll");
    code.line("for (int j = 0; j < " + to_str(tn) + "; ++j) b[j] = bs[kk * " + to_str(layout.b.ld) +
              " + tx + 16 * j];");
    code.line("#pragma unroll");
    code.line("for (int i = 0; i < " + to_str(tm) + "; ++i)");
    code.line("  for (int j = 0; j < " + to_str(tn) +
              "; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);");
    code.close();
    code.close();
  };
  emit_k_loop(code, t.stages, e.k, t.bk, load, compute);

  code.line("// epilogue: thread (tx, ty) owns rows ty + 16 i and columns tx + 16 j");
  code.line("#pragma unroll");
  code.open("for (int i = 0; i < " + to_str(tm) + "; ++i) {");
  code.line("#pragma unroll");
  code.open("for (int j = 0; j < " + to_str(tn) + "; ++j) {");
  code.line("const int m = bm0 + ty + 16 * i;");
  code.line("const int n = bn0 + tx + 16 * j;");
  if (!e.m.multiple_of(t.bm) || !e.n.multiple_of(t.bn)) {
    code.line("if (m >= " + e.m.expr() + " || n >= " + e.n.expr() + ") continue;");
  }
  ElementIndex index = matmul_output_index(ctx);
  std::string value = emit_epilogue(code, ctx, "acc[i][j]", index);
  emit_store(code, ctx, value, index.linear);
  code.close();
  code.close();
  code.close();
}

}  // namespace kiln::compiler::detail
