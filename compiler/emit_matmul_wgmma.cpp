// sm_90a matmul kernel: TMA loads into an mbarrier ring, wgmma from shared-memory descriptors,
// one producer and two consumer warpgroups, a persistent grid, the fused epilogue on the
// accumulators (KERNELS.md, design 1b).
#include "compiler/emit_internal.h"

#include "compiler/target.h"

namespace kiln::compiler::detail {

void emit_matmul_wgmma(Code& code, const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const MatmulTile& t = k.tile;
  const MatmulShape& s = k.shape;
  const MatmulExtents& e = k.extents;
  int rank = ctx.graph.node(k.group.root).type.shape.rank();
  bool batched = rank >= 3;
  // medium (conv): fp32 operands staged by TMA and written as bf16 by the consumers; from there
  // on the 16-bit kernel's stages, descriptors and wgmmas.
  bool conv = wgmma_converts(s);
  std::string type = s.path == MatmulPath::bf16 || conv ? "bf16"
                     : s.path == MatmulPath::f16        ? "f16"
                                                        : "tf32";
  // tf32: fp32 operands, 32 of K a stage in 4 steps of k8, rounded to tf32 in shared memory by
  // the consumers (cvt.rna, the mode's rounding) before any wgmma reads them. tf32x3: the same
  // pass also writes each element's small part, tf32(x - tf32(x)), beside the stage (x3).
  bool x3 = wgmma_splits(s);
  bool tf32 = s.path == MatmulPath::tf32 || x3;
  // tf32 with A K-major as TMA loads it: A from registers (the RS form). Each consumer reads its
  // rows' A fragments from the stage and rounds them (tf32x3: splits them) in registers, where a
  // pass rounded A in place (and wrote its small part) for wgmma to read it again from shared
  // memory: a stage's A crosses shared memory once, not three times. Two sets of fragments in
  // tf32 (a stage's wgmmas read theirs until the next stage's wait_group 1 retires them), one in
  // tf32x3 (each stage's wgmmas retire before the next stage's fragments are read).
  bool a_regs = tf32 && s.a_k_contiguous;
  int a_sets = x3 ? 1 : 2;
  // Whether the consumers rewrite each stage (round, split or convert) before its wgmmas: then a
  // `rounded` mbarrier a stage says both have.
  bool rewrites = tf32 || conv;
  std::string bk = to_str(t.bk);
  int stages = t.stages;
  int a_stage = t.bm * 128, b_stage = t.bn * 128;
  // B N-major ([K, N]): TMA loads it in blocks of 128 bytes of N x bk rows of K. 16-bit wgmma
  // reads those blocks as they are (imm-trans-b); tf32 wgmma has no transpose, so TMA loads them
  // into a staging area and the consumers write B K-major into the stage, rounded.
  bool b_n_major = !s.b_k_contiguous;
  bool staged = wgmma_transposes_b(s);
  // A M-major ([K, M], transpose_a) likewise: TMA loads blocks of 128 bytes of M x bk rows of K;
  // 16-bit wgmma reads consumer c's block c as it is (imm-trans-a, 64 columns: one block), and
  // tf32's are staged and written K-major by the consumers.
  bool a_m_major = !s.a_k_contiguous;
  bool a_staged = wgmma_transposes_a(s);
  bool a_trans = a_m_major && !tf32;
  int n_block = 128 / s.elem_bytes, block_bytes = t.bk * 128;
  // conv: the staging areas hold 64 of K in fp32, two boxes of 32 (128 bytes) a row: A K-major
  // as two blocks of bm rows, B K-major as two blocks of bn rows, A M-major and B N-major as
  // bm / 32 and bn / 32 blocks of 64 k rows x 32 columns; 8 KiB a block at 128 rows.
  int at_stage = t.bm * 256, bt_stage = t.bn * 256;
  if (conv) {
    n_block = 32;
    block_bytes = 64 * 128;
  }
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
            to_str(stages) + " stages of A (" +
            (a_m_major && !a_staged ? to_str(t.bm / stage_columns) + " blocks of " + bk +
                                          " k rows x " + to_str(stage_columns) + " columns"
                                    : to_str(t.bm) + " rows of 128 bytes") +
            ") and B (" +
            (b_n_major && !staged ? to_str(t.bn / stage_columns) + " blocks of " + bk +
                                        " k rows x " + to_str(stage_columns) + " columns"
                                  : to_str(t.bn) + " rows of 128 bytes") +
            ")" +
            (x3 ? (a_regs ? ", the small parts of B (as many again)"
                          : ", the small parts of A and B (as many again)")
                : "") +
            (conv ? ", " + to_str(stages) + " fp32 staging areas of A and B as TMA loads them" : "") +
            (staged ? ", " + to_str(stages) + " staging areas of B as TMA loads it (" +
                          to_str(t.bn / n_block) + " blocks of " + bk + " k rows x " +
                          to_str(n_block) + " columns)"
                    : "") +
            (a_staged ? ", " + to_str(stages) + " staging areas of A as TMA loads it (" +
                            to_str(t.bm / n_block) + " blocks of " + bk + " k rows x " +
                            to_str(n_block) + " columns)"
                      : "") +
            ", then full[" + to_str(stages) + "], empty[" + to_str(stages) + "] and rounded[" +
            to_str(stages) + "] mbarriers" + (rewrites ? "" : " (rounded unused)"));
  code.line("unsigned char* smem = kiln_dynamic_smem();");
  code.line("smem += (1024u - (kiln_smem_addr(smem) & 1023u)) & 1023u;");
  code.line("unsigned char* sa = smem;");
  code.line("unsigned char* sb = smem + " + to_str(int64_t{stages} * a_stage) + ";");
  std::string last = "sb";  // the last region before the barriers
  if (x3 && a_regs) {
    code.line("// tf32x3: the small parts of B, laid out as B (A's are in registers)");
    code.line("unsigned char* sbs = sb + " + to_str(int64_t{stages} * b_stage) + ";");
    last = "sbs";
  } else if (x3) {
    code.line("// tf32x3: the small parts of A and B, laid out as A and B");
    code.line("unsigned char* sas = sb + " + to_str(int64_t{stages} * b_stage) + ";");
    code.line("unsigned char* sbs = sas + " + to_str(int64_t{stages} * a_stage) + ";");
    last = "sbs";
  }
  int64_t last_bytes = int64_t{stages} * b_stage;
  if (staged) {
    code.line("unsigned char* sbt = " + last + " + " + to_str(last_bytes) + ";");
    last = "sbt";
  }
  if (a_staged) {
    code.line("unsigned char* sat = " + last + " + " + to_str(last_bytes) + ";");
    last = "sat";
    last_bytes = int64_t{stages} * a_stage;
  }
  if (conv) {
    code.line("unsigned char* sac = " + last + " + " + to_str(last_bytes) + ";");
    code.line("unsigned char* sbc = sac + " + to_str(int64_t{stages} * at_stage) + ";");
    last = "sbc";
    last_bytes = int64_t{stages} * bt_stage;
  }
  code.line("unsigned long long* full = (unsigned long long*)(" + last + " + " +
            to_str(last_bytes) + ");");
  code.line("unsigned long long* empty = full + " + to_str(stages) + ";");
  if (rewrites) code.line("unsigned long long* rounded = empty + " + to_str(stages) + ";");
  code.line("const int tid = (int)threadIdx.x;");
  code.open("if (tid == 0) {");
  code.open("for (int s = 0; s < " + to_str(stages) + "; ++s) {");
  code.line("kiln_mbarrier_init(&full[s], 1);     // the producer's expect_tx, then TMA's bytes");
  code.line("kiln_mbarrier_init(&empty[s], 256);  // every consumer thread, once its wgmmas are done");
  if (rewrites) code.line("kiln_mbarrier_init(&rounded[s], 256);  // every consumer thread, its share rounded");
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
      tma(dst + " + s * " + to_str(stage_bytes), map, "kt * " + bk, origin, batch);
      return;
    }
    for (int j = 0; j < rows / n_block; ++j)
      tma(dst + " + s * " + to_str(stage_bytes) + " + " + to_str(j * block_bytes), map,
          origin + " + " + to_str(j * n_block), "kt * " + bk, batch);
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
  code.line("const int s = it % " + to_str(stages) + ";");
  code.line("// the stage's previous use released by both consumers");
  code.line("if (it >= " + to_str(stages) + ") kiln_mbarrier_wait(&empty[s], ((it / " +
            to_str(stages) + ") - 1) & 1);");
  if (conv) {
    code.line("kiln_mbarrier_arrive_expect_tx(&full[s], " + to_str(at_stage + bt_stage) + ");");
    for (int h = 0; h < 2; ++h) {
      std::string k0 = "kt * 64" + std::string(h ? " + 32" : "");
      if (!a_m_major)
        tma("sac + s * " + to_str(at_stage) + " + " + to_str(h * t.bm * 128), pa, k0, "bm0", a_batch);
      if (!b_n_major)
        tma("sbc + s * " + to_str(bt_stage) + " + " + to_str(h * t.bn * 128), pb, k0, "bn0", b_batch);
    }
    if (a_m_major) load("sac", at_stage, pa, true, t.bm, "bm0", a_batch);
    if (b_n_major) load("sbc", bt_stage, pb, true, t.bn, "bn0", b_batch);
  } else {
    code.line("kiln_mbarrier_arrive_expect_tx(&full[s], " + to_str(a_stage + b_stage) + ");");
    load(a_staged ? "sat" : "sa", a_stage, pa, a_m_major, t.bm, "bm0", a_batch);
    load(staged ? "sbt" : "sb", b_stage, pb, b_n_major, t.bn, "bn0", b_batch);
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
  if (a_regs) {
    code.line("// A's fragments of a stage's 4 k steps" +
              std::string(a_sets > 1 ? ", two sets (stages alternate)" : "") +
              (x3 ? "; afs their small parts" : ""));
    code.line("unsigned af[" + to_str(a_sets) + "][4][4];");
    if (x3) code.line("unsigned afs[4][4];");
  }
  code.line("int it = 0;");
  code.open("for (int tile = (int)blockIdx.x; tile < " + tiles + "; tile += (int)gridDim.x) {");
  decode_tile(batched);
  if (x3) {
    code.line("#pragma unroll");
    code.line("for (int v = 0; v < " + to_str(t.bn / 2) + "; ++v) acc[v] = 0.0f;");
  }
  // tf32 with A in registers: k tiles two at a time, the first with A's fragment set 0, the
  // second with set 1 (h, unrolled: the sets stay registers)
  bool pairs = a_regs && a_sets > 1;
  if (pairs) {
    code.open("for (int kt2 = 0; kt2 < " + k_tiles_text + "; kt2 += 2) {");
    code.line("#pragma unroll");
    code.open("for (int h = 0; h < 2; ++h) {");
    code.line("const int kt = kt2 + h;");
    code.line("if (kt >= " + k_tiles_text + ") break;");
  } else {
    code.open("for (int kt = 0; kt < " + k_tiles_text + "; ++kt, ++it) {");
  }
  code.line("const int s = it % " + to_str(stages) + ";");
  code.line("kiln_mbarrier_wait(&full[s], (it / " + to_str(stages) + ") & 1);");
  // The end of a consumer's rewrite of the stage: its writes to the async proxy, then both
  // consumers' shares done.
  auto publish_stage = [&] {
    code.line("kiln_fence_proxy_async();");
    code.line("kiln_mbarrier_arrive(&rounded[s]);");
    code.line("kiln_mbarrier_wait(&rounded[s], (it / " + to_str(stages) + ") & 1);");
  };
  if (conv) {
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
    if (a_m_major) {
      code.line("// A M-major: this consumer's 64 columns m (its rows of the tile), every k, pairs of m;");
      code.line("// fp32 (k, m) of block m / 32 and bf16 (k, m) of block m / 64 as B N-major's below");
      mn_major("sac + s * " + to_str(at_stage), "sa + s * " + to_str(a_stage), 2048,
               "const int k = i >> 5, m = c * 64 + (i & 31) * 2;", "m");
    } else {
      k_major("sac + s * " + to_str(at_stage), "sa + s * " + to_str(a_stage), t.bm, 64, "c * 64");
    }
    if (b_n_major) {
      code.line("// B N-major: this consumer's 32 k rows, pairs of n; fp32 (k, n) of block n / 32 at");
      code.line("// k * 128 + 16 (((n & 31) / 4) ^ (k & 7)) + 4 (n & 3), bf16 (k, n) of block n / 64");
      code.line("// (8 KiB apart) at k * 128 + 16 (((n & 63) / 8) ^ (k & 7)) + 2 (n & 7)");
      mn_major("sbc + s * " + to_str(bt_stage), "sb + s * " + to_str(b_stage), 32 * t.bn / 2,
               "const int k = c * 32 + i / " + to_str(t.bn / 2) + ", n = (i % " +
                   to_str(t.bn / 2) + ") * 2;",
               "n");
    } else {
      k_major("sbc + s * " + to_str(bt_stage), "sb + s * " + to_str(b_stage), t.bn, t.bn / 2,
              "c * " + to_str(t.bn / 2));
    }
    publish_stage();
    code.close();
  }
  if (a_regs) {
    code.line("// A from registers: warp w's 16 of this consumer's rows as the tf32 A fragment of each k");
    code.line("// step (register r: row g + 8 (r & 1), k = t + 4 (r >> 1)), read from the stage (row m at");
    code.line("// m * 128 + 16 ((k / 4) ^ (m & 7)) + 4 (k & 3)) and rounded (cvt.rna, as `high` promises)" +
              std::string(x3 ? "; its small part tf32(x - tf32(x)) beside it" : ""));
    code.open("{");
    code.line("const float* fa = (const float*)(sa + s * " + to_str(a_stage) + " + c * 8192);");
    code.line("#pragma unroll");
    code.open("for (int ks = 0; ks < 4; ++ks) {");
    code.line("#pragma unroll");
    code.open("for (int r = 0; r < 4; ++r) {");
    code.line("const int m = warp * 16 + g + 8 * (r & 1), k = ks * 8 + t4 + 4 * (r >> 1);");
    code.line("const float x = fa[m * 32 + (((k >> 2) ^ (m & 7)) << 2) + (k & 3)];");
    if (x3) {
      code.line("const unsigned big = kiln_cvt_rna_tf32(x);");
      code.line("af[" + std::string(a_sets > 1 ? "h][" : "0][") + "ks][r] = big;");
      code.line("afs[ks][r] = kiln_cvt_rna_tf32(x - kiln_as_float(big));");
    } else {
      code.line("af[h][ks][r] = kiln_cvt_rna_tf32(x);");
    }
    code.close();
    code.close();
    code.close();
  }
  if (tf32) {
    code.line(a_regs ? "// round B in place (cvt.rna, as `high` promises; wgmma would read the fp32 bits as they"
                     : "// round the stage to tf32 in place (cvt.rna, as `high` promises; wgmma would read the");
    code.line(a_regs ? "// are): this consumer's half of B's rows, then the writes to the async proxy, then wait"
                     : "// fp32 bits as they are): this consumer's 64 rows of A and half of B's rows, then the");
    code.line(a_regs ? "// until the other consumer has rounded its half"
                     : "// writes to the async proxy, then wait until the other consumer has rounded its half");
    code.open("{");
    // The rounded value of `x` to `dst`, and with x3 its small part to `small`.
    auto round_to = [&](const std::string& x, const std::string& dst, const std::string& small) {
      if (!x3) {
        code.line(dst + " = kiln_as_float(kiln_cvt_rna_tf32(" + x + "));");
        return;
      }
      code.line("const float big = kiln_as_float(kiln_cvt_rna_tf32(" + x + "));");
      code.line(small + " = kiln_as_float(kiln_cvt_rna_tf32(" + x + " - big));");
      code.line(dst + " = big;");
    };
    // A staged operand ("a" or "b", its stage `stage_bytes`) written K-major and rounded: this
    // consumer's `rows` rows `x` ("m" or "n"), each 32 k read from the staging area.
    auto write_k_major = [&](const std::string& op, int stage_bytes, int rows, const std::string& x) {
      std::string stage = " + s * " + to_str(stage_bytes);
      code.line("const float* t" + op + " = (const float*)(s" + op + "t" + stage + ");");
      code.line("float* r" + op + " = (float*)(s" + op + stage + ");");
      if (x3) code.line("float* r" + op + "s = (float*)(s" + op + "s" + stage + ");");
      code.line("#pragma unroll 4");
      code.open("for (int i = tid & 127; i < " + to_str(rows * 32) + "; i += 128) {");
      code.line("const int " + x + " = c * " + to_str(rows) + " + (i >> 5), k = i & 31;");
      code.line("const float x = t" + op + "[(" + x + " >> 5) * 1024 + k * 32 + ((((" + x +
                " & 31) >> 2) ^ (k & 7)) << 2) + (" + x + " & 3)];");
      code.line("const int at = " + x + " * 32 + (((k >> 2) ^ (" + x + " & 7)) << 2) + (k & 3);");
      round_to("x", "r" + op + "[at]", "r" + op + "s[at]");
      code.close();
    };
    if (a_staged) {
      code.line("// A: this consumer's 64 rows m, each 32 k read from the staging area (element (k, m) of");
      code.line("// a block of 32 m at k * 128 + 16 ((m / 4) ^ (k & 7)) + 4 (m & 3)) and written K-major");
      code.line("// (row m at m * 128 + 16 ((k / 4) ^ (m & 7)) + 4 (k & 3))");
      write_k_major("a", a_stage, 64, "m");
    } else if (!a_regs) {
      code.line("float* ra = (float*)(sa + s * " + to_str(a_stage) + " + c * 8192);");
      if (x3) code.line("float* ras = (float*)(sas + s * " + to_str(a_stage) + " + c * 8192);");
      code.line("#pragma unroll 4");
      if (x3) {
        code.open("for (int i = tid & 127; i < 2048; i += 128) {");
        code.line("const float x = ra[i];");
        round_to("x", "ra[i]", "ras[i]");
        code.close();
      } else {
        code.line("for (int i = tid & 127; i < 2048; i += 128) ra[i] = kiln_as_float(kiln_cvt_rna_tf32(ra[i]));");
      }
    }
    if (staged) {
      code.line("// B: this consumer's " + to_str(t.bn / 2) + " of its rows n, each 32 k read from");
      code.line("// the staging area (element (k, n) of a block of 32 n at k * 128 + 16 ((n / 4) ^ (k & 7))");
      code.line("// + 4 (n & 3)) and written K-major (row n at n * 128 + 16 ((k / 4) ^ (n & 7)) + 4 (k & 3))");
      write_k_major("b", b_stage, t.bn / 2, "n");
    } else {
      code.line("float* rb = (float*)(sb + s * " + to_str(b_stage) + " + c * " + to_str(b_stage / 2) +
                ");");
      if (x3)
        code.line("float* rbs = (float*)(sbs + s * " + to_str(b_stage) + " + c * " +
                  to_str(b_stage / 2) + ");");
      code.line("#pragma unroll 4");
      if (x3) {
        code.open("for (int i = tid & 127; i < " + to_str(b_stage / 8) + "; i += 128) {");
        code.line("const float x = rb[i];");
        round_to("x", "rb[i]", "rbs[i]");
        code.close();
      } else {
        code.line("for (int i = tid & 127; i < " + to_str(b_stage / 8) +
                  "; i += 128) rb[i] = kiln_as_float(kiln_cvt_rna_tf32(rb[i]));");
      }
    }
    publish_stage();
    code.close();
  }
  if (x3) {
    code.line("// tf32x3: the stage's products summed on the tensor cores from zero (part), then added");
    code.line("// to acc in fp32 to nearest, as design 1 sums a k tile (tensor cores truncate their");
    code.line("// sums: a truncated running sum would drift)");
    code.line("float part[" + to_str(t.bn / 2) + "];");
  }
  code.line("kiln_wgmma_fence();");
  code.line("#pragma unroll");
  code.open("for (int ks = 0; ks < 4; ++ks) {");
  if (a_trans) {
    code.line("// A M-major: the consumer's one 64-column block (LBO 0, as CuTe gives a single block), 8 k");
    code.line("// rows a 1024-byte atom (SBO)");
    code.line("const unsigned long long da = kiln_gmma_desc_128b(sa + s * " + to_str(a_stage) +
              " + c * 8192 + ks * 2048, 0, 1024);");
  } else if (!a_regs) {  // (A from registers: af)
    code.line("const unsigned long long da = kiln_gmma_desc_128b(sa + s * " + to_str(a_stage) +
              " + c * 8192 + ks * 32, 16, 1024);");
  }
  if (x3 && !a_regs) {
    code.line("const unsigned long long das = kiln_gmma_desc_128b(sas + s * " + to_str(a_stage) +
              " + c * 8192 + ks * 32, 16, 1024);");
  }
  if (x3) {
    code.line("const unsigned long long dbs = kiln_gmma_desc_128b(sbs + s * " + to_str(b_stage) +
              " + ks * 32, 16, 1024);");
  }
  if (b_n_major && !staged) {
    code.line("// B N-major: 64-column blocks 8192 bytes apart (LBO), 8 k rows a 1024-byte atom (SBO)");
    code.line("const unsigned long long db = kiln_gmma_desc_128b(sb + s * " + to_str(b_stage) +
              " + ks * 2048, 8192, 1024);");
  } else {
    code.line("const unsigned long long db = kiln_gmma_desc_128b(sb + s * " + to_str(b_stage) +
              " + ks * 32, 16, 1024);");
  }
  std::string tf32_op = "kiln_wgmma_m64n" + to_str(t.bn) + "k8_tf32";
  if (x3 && a_regs) {  // design 1's order: small A x B, A x small B, A x B; A from registers
    code.line(tf32_op + "_rs(part, afs[ks], db, ks > 0 ? 1 : 0);");
    code.line(tf32_op + "_rs(part, af[0][ks], dbs, 1);");
    code.line(tf32_op + "_rs(part, af[0][ks], db, 1);");
  } else if (x3) {  // design 1's order: small A x B, A x small B, A x B
    code.line(tf32_op + "(part, das, db, ks > 0 ? 1 : 0);");
    code.line(tf32_op + "(part, da, dbs, 1);");
    code.line(tf32_op + "(part, da, db, 1);");
  } else if (a_regs) {  // A from this set of registers, B K-major (as loaded, or as transposed)
    code.line(tf32_op + "_rs(acc, af[h][ks], db, (kt > 0 || ks > 0) ? 1 : 0);");
  } else if (tf32) {  // both K-major (as loaded, or as transposed): tf32 wgmma has no transpose
    code.line(tf32_op + "(acc, da, db, (kt > 0 || ks > 0) ? 1 : 0);");
  } else {
    code.line("kiln_wgmma_m64n" + to_str(t.bn) + "k16_" + type + "<" + (b_n_major ? "1" : "0") +
              (a_trans ? ", 1" : "") + ">(acc, da, db, (kt > 0 || ks > 0) ? 1 : 0);");
  }
  code.close();
  code.line("kiln_wgmma_commit();");
  if (x3) {
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
    code.line("if (kt > 0) kiln_mbarrier_arrive(&empty[(it + " + to_str(stages - 1) + ") % " +
              to_str(stages) + "]);");
    if (pairs) {
      code.line("++it;");
      code.close();
    }
    code.close();
    code.line("kiln_wgmma_wait<0>();");
    code.line("kiln_mbarrier_arrive(&empty[(it + " + to_str(stages - 1) + ") % " + to_str(stages) +
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
