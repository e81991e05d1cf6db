// sm_90a matmul kernel: TMA loads into an mbarrier ring, wgmma from shared-memory descriptors,
// one producer and two consumer warpgroups, a persistent grid, the fused epilogue on the
// accumulators (KERNELS.md, design 1b). The consumers' stage rewrites are in
// emit_matmul_wgmma_stage.cpp.
#include "compiler/emit_matmul_wgmma_internal.h"

#include "compiler/target.h"

namespace kiln::compiler::detail {

WgmmaMatmul::WgmmaMatmul(const KernelPlan& k) : t(k.tile), s(k.shape) {
  conv = wgmma_converts(s);
  type = s.path == MatmulPath::bf16 || conv ? "bf16" : s.path == MatmulPath::f16 ? "f16" : "tf32";
  x3 = wgmma_splits(s);
  tf32 = s.path == MatmulPath::tf32 || x3;
  a_staged = wgmma_transposes_a(s);
  a_regs = tf32 && !a_staged;
  a_sets = x3 ? 1 : 2;
  rewrites = tf32 || conv;
  bk = to_str(t.bk);
  stages = t.stages;
  a_stage = t.bm * 128;
  b_stage = t.bn * 128;
  b_n_major = !s.b_k_contiguous;
  staged = wgmma_transposes_b(s);
  a_m_major = !s.a_k_contiguous;
  a_trans = a_m_major && !tf32;
  n_block = conv ? 32 : 128 / s.elem_bytes;
  block_bytes = conv ? 64 * 128 : t.bk * 128;
  at_stage = t.bm * 256;
  bt_stage = t.bn * 256;
}

void emit_matmul_wgmma(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const MatmulTile& t = k.tile;
  const MatmulExtents& e = k.extents;
  const WgmmaMatmul w(k);
  int rank = ctx.graph.node(k.group.root).type.shape.rank();
  bool batched = rank >= 3;
  std::string pa = "p" + to_str(k.a_map_param), pb = "p" + to_str(k.b_map_param);
  // Each operand's map holds the batch dims it does not broadcast over after its matrix's two
  // (plan_wgmma), its coordinates along them the result's batch coordinates (from bz) for those
  // dims: none for an operand broadcast over the whole batch (a rank-2 map).
  ElementIndex result_index = matmul_output_index(ctx);
  auto batch_coords = [&](bool b) {
    std::vector<std::string> coords;
    for (const OperandBatchDim& d : operand_batch_dims(e, rank, b))
      coords.push_back(result_index.coords[static_cast<size_t>(d.dim)]);
    return coords;
  };
  const std::vector<std::string> a_batch = batch_coords(false), b_batch = batch_coords(true);
  int64_t tiles_m = (e.m.hi + t.bm - 1) / t.bm, tiles_n = (e.n.hi + t.bn - 1) / t.bn;
  int64_t k_tiles = (e.k.hi + t.bk - 1) / t.bk;
  // The tile counts: numbers for a static graph; for a symbolic one, names the kernel declares
  // from its dims (the counts above are then the bucket's upper bounds).
  bool symbolic = !(e.m.fixed() && e.n.fixed() && e.k.fixed() && e.batch.fixed());
  std::string tiles_m_text = symbolic ? "tiles_m" : to_str(tiles_m);
  std::string tiles_n_text = symbolic ? "tiles_n" : to_str(tiles_n);
  std::string mn_text = symbolic ? "tiles_m * tiles_n" : to_str(tiles_m * tiles_n);
  std::string k_tiles_text = symbolic ? "k_tiles" : to_str(k_tiles);
  auto ceil_text = [](const Extent& x, int d) {
    return x.fixed() ? to_str((x.hi + d - 1) / d)
                     : "(" + x.expr() + " + " + to_str(d - 1) + ") / " + to_str(d);
  };

  // An MN-major operand's blocks in the stage: 64 16-bit columns (medium's too, once converted).
  int stage_columns = 64;
  code.open(kernel_signature(ctx, t.threads(), 1));
  code.line("// shared memory, from a 1024-byte boundary (128-byte swizzle atoms): " +
            to_str(w.stages) + " stages of A (" +
            (w.a_m_major && !w.a_staged ? to_str(t.bm / stage_columns) + " blocks of " + w.bk +
                                              " k rows x " + to_str(stage_columns) + " columns"
                                        : to_str(t.bm) + " rows of 128 bytes") +
            ") and B (" +
            (w.b_n_major && !w.staged ? to_str(t.bn / stage_columns) + " blocks of " + w.bk +
                                            " k rows x " + to_str(stage_columns) + " columns"
                                      : to_str(t.bn) + " rows of 128 bytes") +
            ")" +
            (w.x3 ? (w.a_regs ? ", the small parts of B (as many again)"
                              : ", the small parts of A and B (as many again)")
                  : "") +
            (w.conv ? ", " + to_str(w.stages) + " fp32 staging areas of A and B as TMA loads them"
                    : "") +
            (w.staged ? ", " + to_str(w.stages) + " staging areas of B as TMA loads it (" +
                            to_str(t.bn / w.n_block) + " blocks of " + w.bk + " k rows x " +
                            to_str(w.n_block) + " columns)"
                      : "") +
            (w.a_staged ? ", " + to_str(w.stages) + " staging areas of A as TMA loads it (" +
                              to_str(t.bm / w.n_block) + " blocks of " + w.bk + " k rows x " +
                              to_str(w.n_block) + " columns)"
                        : "") +
            ", then full[" + to_str(w.stages) + "], empty[" + to_str(w.stages) + "] and rounded[" +
            to_str(w.stages) + "] mbarriers" + (w.rewrites ? "" : " (rounded unused)"));
  code.line("unsigned char* smem = kiln_dynamic_smem();");
  code.line("smem += (1024u - (kiln_smem_addr(smem) & 1023u)) & 1023u;");
  code.line("unsigned char* sa = smem;");
  code.line("unsigned char* sb = smem + " + to_str(int64_t{w.stages} * w.a_stage) + ";");
  std::string last = "sb";  // the last region before the barriers
  if (w.x3 && w.a_regs) {
    code.line("// tf32x3: the small parts of B, laid out as B (A's are in registers)");
    code.line("unsigned char* sbs = sb + " + to_str(int64_t{w.stages} * w.b_stage) + ";");
    last = "sbs";
  } else if (w.x3) {
    code.line("// tf32x3: the small parts of A and B, laid out as A and B");
    code.line("unsigned char* sas = sb + " + to_str(int64_t{w.stages} * w.b_stage) + ";");
    code.line("unsigned char* sbs = sas + " + to_str(int64_t{w.stages} * w.a_stage) + ";");
    last = "sbs";
  }
  int64_t last_bytes = int64_t{w.stages} * w.b_stage;
  if (w.staged) {
    code.line("unsigned char* sbt = " + last + " + " + to_str(last_bytes) + ";");
    last = "sbt";
  }
  if (w.a_staged) {
    code.line("unsigned char* sat = " + last + " + " + to_str(last_bytes) + ";");
    last = "sat";
    last_bytes = int64_t{w.stages} * w.a_stage;
  }
  if (w.conv) {
    code.line("unsigned char* sac = " + last + " + " + to_str(last_bytes) + ";");
    code.line("unsigned char* sbc = sac + " + to_str(int64_t{w.stages} * w.at_stage) + ";");
    last = "sbc";
    last_bytes = int64_t{w.stages} * w.bt_stage;
  }
  code.line("unsigned long long* full = (unsigned long long*)(" + last + " + " +
            to_str(last_bytes) + ");");
  code.line("unsigned long long* empty = full + " + to_str(w.stages) + ";");
  if (w.rewrites) code.line("unsigned long long* rounded = empty + " + to_str(w.stages) + ";");
  code.line("const int tid = (int)threadIdx.x;");
  code.open("if (tid == 0) {");
  code.open("for (int s = 0; s < " + to_str(w.stages) + "; ++s) {");
  code.line("kiln_mbarrier_init(&full[s], 1);     // the producer's expect_tx, then TMA's bytes");
  code.line("kiln_mbarrier_init(&empty[s], 256);  // every consumer thread, once its wgmmas are done");
  if (w.rewrites) code.line("kiln_mbarrier_init(&rounded[s], 256);  // every consumer thread, its share rounded");
  code.close();
  code.line("kiln_fence_proxy_async();  // the initialised barriers, to the async proxy (TMA)");
  code.close();
  code.line("__syncthreads();");
  std::string tiles = to_str(e.batch.hi * tiles_m * tiles_n);
  if (symbolic) {
    code.line("// the tiles at this launch's dims (at most " + tiles + ": " + to_str(e.batch.hi) +
              " x " + to_str(tiles_m) + " row tiles x " + to_str(tiles_n) + " column tiles, " +
              to_str(k_tiles) + " k tiles)");
    code.line("const int tiles_m = " + ceil_text(e.m, t.bm) + ";");
    code.line("const int tiles_n = " + ceil_text(e.n, t.bn) + ";");
    code.line("const int k_tiles = " + ceil_text(e.k, t.bk) + ";");
    code.line("const int tiles = " + (e.batch.fixed() ? to_str(e.batch.hi) : e.batch.expr()) +
              " * tiles_m * tiles_n;");
    code.line("// persistent: block b computes tiles b, b + gridDim.x, ... of them");
    tiles = "tiles";
  } else {
    code.line("// persistent: block b computes tiles b, b + gridDim.x, ... of " + tiles + " (" +
              to_str(e.batch.hi) + " x " + to_str(tiles_m) + " row tiles x " + to_str(tiles_n) +
              " column tiles)");
  }
  // The batch coordinate where it is read: the producer's for an operand with a batch, the
  // consumers' for the epilogue's index of a batched result.
  auto decode_tile = [&](bool batch) {
    if (batch) code.line("const int bz = tile / " + (symbolic ? "(" + mn_text + ")" : mn_text) + ";");
    code.line("const int bm0 = tile / " + tiles_n_text + " % " + tiles_m_text + " * " +
              to_str(t.bm) + ";");
    code.line("const int bn0 = tile % " + tiles_n_text + " * " + to_str(t.bn) + ";");
  };
  auto tma = [&](const std::string& dst, const std::string& map, const std::string& c0,
                 const std::string& c1, const std::vector<std::string>& batch) {
    std::string coords = c0 + ", " + c1;
    for (const std::string& c : batch) coords += ", " + c;
    std::string rank_text = to_str(2 + static_cast<int64_t>(batch.size()));
    code.line("kiln_tma_load_" + rank_text + "d(" + dst + ", &" + map + ", " + coords + ", &full[s]);");
  };

  // A stage of one operand from map `map` into `dst` (`stage_bytes` a stage), its tile's `rows`
  // from `origin`: K-major in one box at (k, origin), or MN-major in blocks of n_block columns.
  auto load = [&](const std::string& dst, int stage_bytes, const std::string& map, bool mn_major,
                  int rows, const std::string& origin, const std::vector<std::string>& batch) {
    if (!mn_major) {
      tma(dst + " + s * " + to_str(stage_bytes), map, "kt * " + w.bk, origin, batch);
      return;
    }
    for (int j = 0; j < rows / w.n_block; ++j)
      tma(dst + " + s * " + to_str(stage_bytes) + " + " + to_str(j * w.block_bytes), map,
          origin + " + " + to_str(j * w.n_block), "kt * " + w.bk, batch);
  };

  code.open("if (tid < 128) {");
  code.line("// producer warpgroup: one thread issues every load");
  code.line("// registers: 128 x 24 here and 256 x 240 in the consumers, the 384 x 168 = 64512 the");
  code.line("// block holds from launch (__launch_bounds__(384, 1)): setmaxnreg.inc waits for the rest");
  code.line("kiln_setmaxnreg_dec<24>();");
  code.open("if (tid == 0) {");
  code.line("int it = 0;");
  code.open("for (int tile = (int)blockIdx.x; tile < " + tiles + "; tile += (int)gridDim.x) {");
  decode_tile(!a_batch.empty() || !b_batch.empty());
  code.open("for (int kt = 0; kt < " + k_tiles_text + "; ++kt, ++it) {");
  code.line("const int s = it % " + to_str(w.stages) + ";");
  code.line("// the stage's previous use released by both consumers");
  code.line("if (it >= " + to_str(w.stages) + ") kiln_mbarrier_wait(&empty[s], ((it / " +
            to_str(w.stages) + ") - 1) & 1);");
  if (w.conv) {
    code.line("kiln_mbarrier_arrive_expect_tx(&full[s], " + to_str(w.at_stage + w.bt_stage) + ");");
    for (int h = 0; h < 2; ++h) {
      std::string k0 = "kt * 64" + std::string(h ? " + 32" : "");
      if (!w.a_m_major)
        tma("sac + s * " + to_str(w.at_stage) + " + " + to_str(h * t.bm * 128), pa, k0, "bm0", a_batch);
      if (!w.b_n_major)
        tma("sbc + s * " + to_str(w.bt_stage) + " + " + to_str(h * t.bn * 128), pb, k0, "bn0", b_batch);
    }
    if (w.a_m_major) load("sac", w.at_stage, pa, true, t.bm, "bm0", a_batch);
    if (w.b_n_major) load("sbc", w.bt_stage, pb, true, t.bn, "bn0", b_batch);
  } else {
    code.line("kiln_mbarrier_arrive_expect_tx(&full[s], " + to_str(w.a_stage + w.b_stage) + ");");
    load(w.a_staged ? "sat" : "sa", w.a_stage, pa, w.a_m_major, t.bm, "bm0", a_batch);
    load(w.staged ? "sbt" : "sb", w.b_stage, pb, w.b_n_major, t.bn, "bn0", b_batch);
  }
  code.close();
  code.close();
  code.close();
  code.close();
  code.open("else {");
  code.line("// consumer warpgroups: rows 64 c .. 64 c + 63 of the tile");
  code.line("kiln_setmaxnreg_inc<240>();");
  code.line("const int c = tid / 128 - 1;");
  code.line("const int warp = (tid & 127) >> 5;");
  code.line("const int lane = tid & 31;");
  code.line("const int g = lane >> 2;");
  code.line("const int t4 = lane & 3;");
  code.line("float acc[" + to_str(t.bn / 2) + "];");
  if (w.a_regs) {
    code.line("// A's fragments of a stage's 4 k steps" +
              std::string(w.a_sets > 1 ? ", two sets (stages alternate)" : "") +
              (w.x3 ? "; afs their small parts" : ""));
    code.line("unsigned af[" + to_str(w.a_sets) + "][4][4];");
    if (w.x3) code.line("unsigned afs[4][4];");
  }
  code.line("int it = 0;");
  code.open("for (int tile = (int)blockIdx.x; tile < " + tiles + "; tile += (int)gridDim.x) {");
  decode_tile(batched);
  if (w.x3) {
    code.line("#pragma unroll");
    code.line("for (int v = 0; v < " + to_str(t.bn / 2) + "; ++v) acc[v] = 0.0f;");
  }
  // tf32 with A in registers: k tiles two at a time, the first with A's fragment set 0, the
  // second with set 1 (h, unrolled: the sets stay registers)
  bool pairs = w.a_regs && w.a_sets > 1;
  if (pairs) {
    code.open("for (int kt2 = 0; kt2 < " + k_tiles_text + "; kt2 += 2) {");
    code.line("#pragma unroll");
    code.open("for (int h = 0; h < 2; ++h) {");
    code.line("const int kt = kt2 + h;");
    code.line("if (kt >= " + k_tiles_text + ") break;");
  } else {
    code.open("for (int kt = 0; kt < " + k_tiles_text + "; ++kt, ++it) {");
  }
  code.line("const int s = it % " + to_str(w.stages) + ";");
  code.line("kiln_mbarrier_wait(&full[s], (it / " + to_str(w.stages) + ") & 1);");
  emit_wgmma_stage_rewrite(code, w);
  if (w.x3) {
    code.line("// tf32x3: the stage's products summed on the tensor cores from zero (part), then added");
    code.line("// to acc in fp32 to nearest, as design 1 sums a k tile (tensor cores truncate their");
    code.line("// sums: a truncated running sum would drift)");
    code.line("float part[" + to_str(t.bn / 2) + "];");
  }
  code.line("kiln_wgmma_fence();");
  code.line("#pragma unroll");
  code.open("for (int ks = 0; ks < 4; ++ks) {");
  if (w.a_trans) {
    code.line("// A M-major: the consumer's one 64-column block (LBO 0, as CuTe gives a single block), 8 k");
    code.line("// rows a 1024-byte atom (SBO)");
    code.line("const unsigned long long da = kiln_gmma_desc_128b(sa + s * " + to_str(w.a_stage) +
              " + c * 8192 + ks * 2048, 0, 1024);");
  } else if (!w.a_regs) {  // (A from registers: af)
    code.line("const unsigned long long da = kiln_gmma_desc_128b(sa + s * " + to_str(w.a_stage) +
              " + c * 8192 + ks * 32, 16, 1024);");
  }
  if (w.x3 && !w.a_regs) {
    code.line("const unsigned long long das = kiln_gmma_desc_128b(sas + s * " + to_str(w.a_stage) +
              " + c * 8192 + ks * 32, 16, 1024);");
  }
  if (w.x3) {
    code.line("const unsigned long long dbs = kiln_gmma_desc_128b(sbs + s * " + to_str(w.b_stage) +
              " + ks * 32, 16, 1024);");
  }
  if (w.b_n_major && !w.staged) {
    code.line("// B N-major: 64-column blocks 8192 bytes apart (LBO), 8 k rows a 1024-byte atom (SBO)");
    code.line("const unsigned long long db = kiln_gmma_desc_128b(sb + s * " + to_str(w.b_stage) +
              " + ks * 2048, 8192, 1024);");
  } else {
    code.line("const unsigned long long db = kiln_gmma_desc_128b(sb + s * " + to_str(w.b_stage) +
              " + ks * 32, 16, 1024);");
  }
  std::string tf32_op = "kiln_wgmma_m64n" + to_str(t.bn) + "k8_tf32";
  if (w.x3 && w.a_regs) {  // design 1's order: small A x B, A x small B, A x B; A from registers
    code.line(tf32_op + "_rs(part, afs[ks], db, ks > 0 ? 1 : 0);");
    code.line(tf32_op + "_rs(part, af[0][ks], dbs, 1);");
    code.line(tf32_op + "_rs(part, af[0][ks], db, 1);");
  } else if (w.x3) {  // design 1's order: small A x B, A x small B, A x B
    code.line(tf32_op + "(part, das, db, ks > 0 ? 1 : 0);");
    code.line(tf32_op + "(part, da, dbs, 1);");
    code.line(tf32_op + "(part, da, db, 1);");
  } else if (w.a_regs) {  // A from this set of registers, B K-major (as loaded, or as transposed)
    code.line(tf32_op + "_rs(acc, af[h][ks], db, (kt > 0 || ks > 0) ? 1 : 0);");
  } else if (w.tf32) {  // both K-major (as loaded, or as transposed): tf32 wgmma has no transpose
    code.line(tf32_op + "(acc, da, db, (kt > 0 || ks > 0) ? 1 : 0);");
  } else {
    code.line("kiln_wgmma_m64n" + to_str(t.bn) + "k16_" + w.type + "<" + (w.b_n_major ? "1" : "0") +
              (w.a_trans ? ", 1" : "") + ">(acc, da, db, (kt > 0 || ks > 0) ? 1 : 0);");
  }
  code.close();
  code.line("kiln_wgmma_commit();");
  if (w.x3) {
    code.line("// part is complete (and the stage read): release the stage, add part");
    code.line("kiln_wgmma_wait<0>();");
    code.line("kiln_mbarrier_arrive(&empty[s]);");
    code.line("#pragma unroll");
    code.line("for (int v = 0; v < " + to_str(t.bn / 2) + "; ++v) acc[v] += part[v];");
    code.close();
  } else {
    code.line("// the previous stage's wgmmas are done: release it to the producer" +
              std::string(pairs ? " (and the other set of A's" : ""));
    if (pairs) code.line("// fragments, which they read)");
    code.line("kiln_wgmma_wait<1>();");
    code.line("if (kt > 0) kiln_mbarrier_arrive(&empty[(it + " + to_str(w.stages - 1) + ") % " +
              to_str(w.stages) + "]);");
    if (pairs) {
      code.line("++it;");
      code.close();
    }
    code.close();
    code.line("kiln_wgmma_wait<0>();");
    code.line("kiln_mbarrier_arrive(&empty[(it + " + to_str(w.stages - 1) + ") % " + to_str(w.stages) +
              "]);");
  }
  code.line("// epilogue: acc[4 j + i] is D(16 warp + g + 8 (i >> 1), 8 j + 2 t + (i & 1)) of the");
  code.line("// consumer's 64 rows, four m16n8 accumulators stacked per warp");
  code.line("#pragma unroll");
  code.open("for (int v = 0; v < " + to_str(t.bn / 2) + "; ++v) {");
  code.line("const int m = bm0 + c * 64 + warp * 16 + g + ((v >> 1) & 1) * 8;");
  code.line("const int n = bn0 + (v >> 2) * 8 + t4 * 2 + (v & 1);");
  emit_output_element(code, ctx, "acc[v]", t.bm, t.bn);
  code.close();
  code.close();
  code.close();
  code.close();
}

}  // namespace kiln::compiler::detail
