// Global -> shared tile copies (16-byte vectors where the layout allows, else per element, with
// bounds checks only on dimensions that do not divide) and the k-loop pipeline around them.
#include "compiler/emit_internal.h"

namespace kiln::compiler::detail {

void emit_tile_copy(Code& code, const TileCopy& c) {
  int elem_bytes = static_cast<int>(ir::byte_size(c.dtype));
  int vec = 16 / elem_bytes;
  bool vector = !c.transpose && !c.smem_float && c.ld_global.multiple_of(vec) &&
                c.col_bound.multiple_of(vec) && c.cols % vec == 0;
  if (!vector) vec = 1;
  int per_row = c.cols / vec;
  int total = c.rows * per_row;
  int iters = (total + c.threads - 1) / c.threads;
  bool check_rows = !c.row_bound.multiple_of(c.rows);
  bool check_cols = !c.col_bound.multiple_of(c.cols);

  code.line("#pragma unroll");
  code.open("for (int i = 0; i < " + to_str(iters) + "; ++i) {");
  code.line("const int c = tid + i * " + to_str(c.threads) + ";");
  if (total % c.threads != 0) code.line("if (c >= " + to_str(total) + ") break;");
  code.line("const int r = c / " + to_str(per_row) + ";");
  code.line("const int cc = (c % " + to_str(per_row) + ")" + (vec > 1 ? " * " + to_str(vec) : "") +
            ";");
  std::string ok;
  if (check_rows) ok = c.row0 + " + r < " + c.row_bound.expr();
  if (check_cols) ok += (ok.empty() ? "" : " && ") + c.col0 + " + cc < " + c.col_bound.expr();
  std::string offset = "(" + c.row0 + " + r) * " + c.ld_global.expr() + " + " + c.col0 + " + cc";
  std::string dst =
      c.dst + " + " +
      (c.transpose ? "cc * " + to_str(c.smem_ld) + " + r"
                   : smem_at(c.smem, "r * " + to_str(c.smem_ld) + " + cc"));
  if (!ok.empty()) code.line("const bool ok = " + ok + ";");
  std::string src = ok.empty() ? c.src + " + " + offset : c.src + " + (ok ? " + offset + " : 0)";
  std::string n = to_str(vec * elem_bytes);
  // cp.async copies 4 or 16 bytes: a lone 16-bit element is copied synchronously.
  if (c.async && vec * elem_bytes >= 4) {
    std::string bytes = ok.empty() ? n : "ok ? " + n + " : 0";
    code.line(std::string(vec > 1 ? "kiln_cp_async_16(" : "kiln_cp_async_4(") + dst + ", " + src +
              ", " + bytes + ");");
  } else if (vec > 1) {
    if (ok.empty()) {
      code.line("kiln_copy_16(" + dst + ", " + src + ");");
    } else {
      code.line("if (ok) kiln_copy_16(" + dst + ", " + src + "); else kiln_zero_16(" + dst + ");");
    }
  } else {
    std::string value = c.smem_float                ? load_as_float(c.dtype, "*(" + src + ")")
                        : c.dtype == ir::DType::f32 ? "*(" + src + ")"
                                                    : "(" + src + ")->bits";
    std::string zero = c.smem_float || c.dtype == ir::DType::f32 ? "0.0f" : "(unsigned short)0";
    code.line("*(" + dst + ") = " + (ok.empty() ? value : "ok ? " + value + " : " + zero) + ";");
  }
  code.close();
}

std::string smem_at(const SmemTile& tile, const std::string& offset) {
  if (tile.swizzle_bits == 0) return offset;
  std::string o = "(" + offset + ")";
  return "(" + o + " ^ ((" + o + " >> " + to_str(tile.chunk_shift() + tile.swizzle_shift) +
         ") & " + to_str((1 << tile.swizzle_bits) - 1) + ") << " + to_str(tile.chunk_shift()) + ")";
}

void emit_block_origin(Code& code, const KernelPlan& k) {
  const int64_t k_group = k.tile.group;
  // the most a symbolic graph's can be
  int64_t gx = k.launch.grid[0], gy = k.folded_rows > 0 ? k.folded_rows : k.launch.grid[1];
  std::string bm = to_str(k.tile.bm), bn = to_str(k.tile.bn);
  std::string row = "(int)blockIdx.y", rows = "(int)gridDim.y";
  if (k.folded_rows > 0) {
    // plan_matmul_grid: the block's flat index over y and z is row tile + rows x (batch x splits
    // + split); the blocks past the problem (the last z's, or a smaller size's) have nothing to do
    const MatmulExtents& e = k.extents;
    int splits = k.split == SplitRole::partials ? k.tile.split_k : 1;
    code.line("// the row tiles and batches x splits folded over the grid's y and z");
    code.line("const unsigned yz = blockIdx.y + gridDim.y * blockIdx.z;");
    rows = e.m.fixed() ? to_str(k.folded_rows) : "row_tiles";
    if (!e.m.fixed()) {
      code.line("const int row_tiles = (" + e.m.expr() + " + " + to_str(k.tile.bm - 1) + ") / " +
                bm + ";");
    }
    // compared unsigned: the spare blocks' index may pass 2^31 - 1
    std::string problem = e.batch.expr();
    if (splits > 1) problem = "(" + problem + ") * " + to_str(splits);
    code.line("if (yz / (unsigned)" + rows + " >= (unsigned)(" + problem + ")) return;");
    code.line("const int by = (int)(yz % (unsigned)" + rows + ");");
    code.line("const int bzs = (int)(yz / (unsigned)" + rows + ");");
    row = "by";
  }
  if (!grouped_order(k.tile.group, gx, gy)) {
    code.line("const int bm0 = " + row + " * " + bm + ";");
    code.line("const int bn0 = (int)blockIdx.x * " + bn + ";");
    return;
  }
  code.line("// grouped order: " + to_str(k_group) +
            " row tiles sweep the columns together (operand reuse in L2)");
  std::string x = to_str(gx), y = to_str(gy), group_size = to_str(k_group * gx);
  if (!k.grid.empty()) {
    x = "(int)gridDim.x", y = rows, group_size = "(" + to_str(k_group) + " * " + x + ")";
  }
  code.line("const int pid = " + row + " * " + x + " + (int)blockIdx.x;");
  code.line("const int first = pid / " + group_size + " * " + to_str(k_group) + ";");
  code.line("const int rows = " + y + " - first < " + to_str(k_group) + " ? " + y +
            " - first : " + to_str(k_group) + ";");
  code.line("const int in_group = pid % " + group_size + ";");
  code.line("const int bm0 = (first + in_group % rows) * " + bm + ";");
  code.line("const int bn0 = (in_group / rows) * " + bn + ";");
}

std::string KTiles::k0_of(const std::string& kt) const {
  return first.empty() ? kt + " * " + to_str(bk) : "(" + first + " + " + kt + ") * " + to_str(bk);
}

KTiles declare_k_tiles(Code& code, const Extent& k, int bk, const std::string& limit,
                       const std::string& first) {
  KTiles t;
  t.bk = bk;
  t.first = first;
  t.most = (k.hi + bk - 1) / bk;
  t.count = to_str(t.most);
  t.fixed = k.fixed() && limit.empty();
  if (!limit.empty()) {
    code.line("const int k_tiles = " + limit + ";");
    t.count = "k_tiles";
  } else if (!k.fixed()) {
    code.line("const int k_tiles = (" + k.expr() + " + " + to_str(bk - 1) + ") / " + to_str(bk) + ";");
    t.count = "k_tiles";
  }
  return t;
}

void emit_k_prologue(Code& code, const KTiles& t, int stages, const LoadFn& load) {
  for (int st = 0; st < stages - 1; ++st) {
    if (st < t.most) {
      code.open(t.fixed || st == 0 ? "{" : "if (" + to_str(st) + " < k_tiles) {");
      code.line("const int k0 = " + (t.first.empty() ? to_str(st * t.bk) : t.k0_of(to_str(st))) +
                ";");
      load(to_str(st), "k0");
      code.close();
    }
    code.line("kiln_cp_async_commit();");
  }
}

void emit_k_refill(Code& code, const KTiles& t, int stages, const LoadFn& load) {
  code.open("{");
  code.line("const int next = kt + " + to_str(stages - 1) + ";");
  code.open("if (next < " + t.count + ") {");
  code.line("const int k0 = " + t.k0_of("next") + ";");
  code.line("const int ns = next % " + to_str(stages) + ";");
  load("ns", "k0");
  code.close();
  code.line("kiln_cp_async_commit();");
  code.close();
}

void emit_k_loop(Code& code, int stages, const Extent& k, int bk, const LoadFn& load,
                 const std::function<void(const std::string&)>& compute,
                 const std::string& limit, const std::string& first) {
  KTiles t = declare_k_tiles(code, k, bk, limit, first);
  if (stages < 2) {
    code.open("for (int kt = 0; kt < " + t.count + "; ++kt) {");
    code.line("const int k0 = " + t.k0_of("kt") + ";");
    load("0", "k0");
    code.line("__syncthreads();");
    compute("0");
    code.line("__syncthreads();");
    code.close();
    return;
  }
  code.line("// prologue: the first " + to_str(stages - 1) + " stages in flight");
  emit_k_prologue(code, t, stages, load);
  code.open("for (int kt = 0; kt < " + t.count + "; ++kt) {");
  code.line("kiln_cp_async_wait<" + to_str(stages - 2) + ">();");
  code.line("__syncthreads();");
  emit_k_refill(code, t, stages, load);
  code.line("const int cs = kt % " + to_str(stages) + ";");
  compute("cs");
  code.close();
}

}  // namespace kiln::compiler::detail
