// Tile heuristic: big tiles when they fill the GPU, smaller ones otherwise; stages fill smem.
#include "compiler/tile.h"

#include "compiler/schedule.h"
#include "compiler/target.h"

#include <algorithm>

namespace kiln::compiler {

SmemLayout smem_layout(const MatmulTile& tile, const MatmulShape& shape) {
  SmemLayout layout;
  if (!uses_mma(shape.path)) {
    layout.a = {tile.bk, tile.bm, tile.bm + 4, 4};
    layout.b = {tile.bk, tile.bn, tile.bn + 4, 4};
    return layout;
  }
  int eb = shape.elem_bytes;
  // K-contiguous rows are read by ldmatrix on every path; MN-contiguous ones by ldmatrix.trans
  // for 16-bit operands, by scalar loads for fp32 ones (conflict-free with 8 elements of pad).
  auto tile_of = [&](bool k_contiguous, int mn) {
    SmemTile t = k_contiguous ? SmemTile{mn, tile.bk, tile.bk, eb} : SmemTile{tile.bk, mn, mn, eb};
    if (k_contiguous || eb == 2) {
      set_swizzle(t);
    } else {
      t.ld += 8;
    }
    return t;
  };
  layout.a = tile_of(shape.a_k_contiguous, tile.bm);
  layout.b = tile_of(shape.b_k_contiguous, tile.bn);
  return layout;
}

void set_swizzle(SmemTile& tile) {
  int chunks = tile.cols * tile.elem_bytes / 16;
  int log2_chunks = 0;
  while ((2 << log2_chunks) <= chunks) ++log2_chunks;
  tile.ld = tile.cols;
  tile.swizzle_bits = std::min(log2_chunks, 3);
  tile.swizzle_shift = std::max(log2_chunks, 3);
}

int typical_sm_count(int sm) {
  const ArchFacts* facts = arch_facts(sm);
  return facts ? facts->typical_sms : 80;
}

int smem_limit(int sm) {
  const ArchFacts* facts = arch_facts(sm);
  return facts ? static_cast<int>(facts->max_dynamic_smem) : smem_budget(sm);
}

int smem_budget(int sm) {
  if (!arch_has(sm, Feature::smem_96k)) return 48 * 1024;  // no opt-in needed on sm_75
  return 96 * 1024;  // fits the 99 KiB parts (sm_86/89/120) and all larger ones
}

int64_t grid_blocks(const MatmulTile& tile, const MatmulShape& shape) {
  return shape.batch * ((shape.m + tile.bm - 1) / tile.bm) * ((shape.n + tile.bn - 1) / tile.bn);
}

bool deep_k_step(const MatmulTile& tile, const MatmulShape& shape) {
  return tile.bk * shape.elem_bytes > 64;
}

bool tile_fits_registers(const MatmulTile& tile, const MatmulShape& shape) {
  if (!uses_mma(shape.path)) return true;
  int warp_m = tile.bm / tile.warps_m, warp_n = tile.bn / tile.warps_n;
  bool deep = deep_k_step(tile, shape);
  if (warp_m * warp_n >= 64 * 64 &&
      !(shape.a_vector && shape.b_vector && tile.stages >= (deep ? 4 : 3))) {
    return false;
  }
  // medium with an operand copied element by element spilled 24-416 bytes at 2 stages (sm_80,
  // 86, 90; 32x64 to 128x128, K 16 a stage) once K spans more than one tile.
  if (shape.path == MatmulPath::bf16_of_f32 && !(shape.a_vector && shape.b_vector) &&
      tile.stages == 2 && shape.k > tile.bk && tile.bk * shape.elem_bytes == 64) {
    return false;
  }
  // tf32x3 holds the small halves of its fragments and a partial sum per accumulator besides.
  if (shape.path == MatmulPath::tf32x3 && warp_m * warp_n > 64 * 32) return false;
  bool tf32 = shape.path == MatmulPath::tf32 || shape.path == MatmulPath::tf32x3;
  return !(tf32 && deep && warp_m * warp_n > 32 * 32);
}

bool split_k_fits(int64_t k, int bk, int split) {
  if (split < 2 || split > k_max_split_k || bk < 1) return false;
  int64_t k_tiles = (k + bk - 1) / bk;
  int64_t per = (k_tiles + split - 1) / split;
  return (split - 1) * per < k_tiles;
}

namespace {

MatmulTile choose_block_tile(const MatmulShape& shape, int sm) {
  auto tiles_of = [&](int bm, int bn) {
    return shape.batch * ((shape.m + bm - 1) / bm) * ((shape.n + bn - 1) / bn);
  };
  // The stages: as many as fit the arch's shared memory, 2 to 4, at most the K tiles + 1.
  auto staged = [&](MatmulTile tile) {
    if (!arch_has(sm, Feature::cp_async)) return tile;  // synchronous single-stage loads
    int64_t k_tiles = (shape.k + tile.bk - 1) / tile.bk;
    int fit = std::clamp(smem_limit(sm) / smem_layout(tile, shape).stage_bytes(), 2, 4);
    tile.stages = static_cast<int>(std::clamp<int64_t>(k_tiles + 1, 2, fit));
    return tile;
  };
  int sms = typical_sm_count(sm);
  bool big = shape.m >= 128 && shape.n >= 128 && tiles_of(128, 128) >= sms;
  if (!uses_mma(shape.path)) {
    // 16 x 16 threads, each computing (bm/16) x (bn/16) outputs.
    return staged(big ? MatmulTile{128, 128, 16, 2, 4, 1} : MatmulTile{64, 64, 16, 2, 4, 1});
  }
  int bk = shape.elem_bytes == 2 ? 32 : 16;  // 64 bytes of K
  // Fitted to the tuning records of 30 tensor-core problems on an H200 (bench/RESULTS.md,
  // 2026-11-26: squares of 1000 and 4096 in every mode, real layers' projections in bf16 and
  // tf32); measured on sm_90 only.
  if (big) {
    // 128x128 of 2x2 warps, 64x64 each: 128x256 of 2x4 warps ran 1.04-1.21x slower (as many
    // blocks per wave at half the count). 64x32 warp tiles (2x4) where ptxas cannot keep 64x64
    // ones in registers (tf32x3, rows not 16-byte vectors).
    MatmulTile square = staged({128, 128, bk, 2, 2, 1});
    if (tile_fits_registers(square, shape)) return square;
    return staged({128, 128, bk, 2, 4, 1});
  }
  // Smaller grids: 128 bytes of K per stage, where cp.async runs and registers allow, so each
  // block waits at half as many barriers (1.0-1.39x on skinny products). Not for tf32 and tf32x3
  // past one wave of 64x64 blocks with M > 32: there 64 bytes ran 1.15-1.18x faster at 1000^3
  // (not profiled; the deep tiles' registers and shared memory hold fewer blocks per SM).
  MatmulTile small = shape.m <= 32 ? MatmulTile{32, 64, bk, 1, 4, 1}  // 4 warps, 32x16 each
                                   : MatmulTile{64, 64, bk, 2, 2, 1};  // 4 warps, 32x32 each
  bool tf32 = shape.path == MatmulPath::tf32 || shape.path == MatmulPath::tf32x3;
  bool one_wave = tiles_of(small.bm, small.bn) <= sms;
  if (arch_has(sm, Feature::cp_async) && (!tf32 || shape.m <= 32 || one_wave)) {
    MatmulTile deep = small;
    deep.bk = 2 * bk;
    deep = staged(deep);
    if (tile_fits_registers(deep, shape)) return deep;
  }
  return staged(small);
}

}  // namespace

bool double_buffers_fragments(const MatmulTile& tile, const MatmulShape& shape) {
  if (!uses_mma(shape.path) || tile.stages < 2 || shape.path == MatmulPath::tf32x3) return false;
  // An even number of k steps a tile: the last step's set then holds the next tile's first
  // fragments in set 0, where every tile starts (the sets are registers, named at compile time).
  int mma_k = shape.path == MatmulPath::tf32 ? 8 : 16;
  if ((tile.bk / mma_k) % 2 != 0) return false;
  bool deep = deep_k_step(tile, shape);
  int warp_m = tile.bm / tile.warps_m, warp_n = tile.bn / tile.warps_n;
  return !(deep && (warp_m * warp_n >= 64 * 64 || !(shape.a_vector && shape.b_vector)));
}

MatmulTile choose_tile(const MatmulShape& shape, int sm) {
  MatmulTile tile = choose_block_tile(shape, sm);
  if (!uses_mma(shape.path)) return tile;
  // Split-K where the grid fills at most a quarter of the SMs and K runs 32 tiles or more: the
  // most splits of 2, 4 and 8 that keep the grid within one wave and give the splits 4 K tiles
  // or more on average (the last one holds what is left). Unmeasured on hardware so far: a grid
  // this small leaves three SMs in four idle, and each split's block runs 1/S of a long K loop,
  // against a second launch and S partial tiles written and summed, which shorter K loops would
  // not pay for (the tuner's candidates include splits wherever the grid is under one wave).
  int64_t blocks = grid_blocks(tile, shape);
  int sms = typical_sm_count(sm);
  int64_t k_tiles = (shape.k + tile.bk - 1) / tile.bk;
  if (blocks * 4 > sms || k_tiles < 32) return tile;
  for (int split : {8, 4, 2}) {
    if (blocks * split <= sms && k_tiles >= 4 * split && split_k_legal(tile, shape, split)) {
      tile.split_k = split;
      break;
    }
  }
  return tile;
}

AttentionTile attention_tile(MatmulPath path, int64_t d, int64_t dv, int warps, int bc,
                             int stages) {
  AttentionTile t;
  auto pad16 = [](int64_t x) { return static_cast<int>((x + 15) / 16 * 16); };
  t.warps = warps;
  t.bc = bc;
  t.stages = stages;
  t.d = pad16(d);
  // v's head dim in slabs of at most 128 columns, as even as multiples of 16 allow.
  t.dv_slabs = (pad16(dv) + 127) / 128;
  t.dv = pad16((pad16(dv) + t.dv_slabs - 1) / t.dv_slabs);
  bool half = path == MatmulPath::f16 || path == MatmulPath::bf16;
  t.elem_bytes = half ? 2 : 4;
  if (uses_mma(path)) {
    t.br = 16 * t.warps;
    t.q_ld = t.d + 16 / t.elem_bytes;  // rows 16 bytes apart from bank groups, as matmul's A
    t.k_ld = t.q_ld;
    t.v_ld = t.dv + 8;                 // read across rows: 8 elements, as matmul's MN-major B
  } else {
    t.br = 8 * t.warps;  // four threads per query
    t.q_ld = 0;
    t.k_ld = t.d;        // a quad reads 4 neighbours, the warp's 8 queries the same key
    t.v_ld = t.dv;
  }
  return t;
}

AttentionTile choose_attention_tile(MatmulPath path, int64_t d, int64_t dv, int sm) {
  struct Option {
    int bc, stages;
  };
  const Option options[] = {{64, 2}, {32, 2}, {16, 2}, {64, 1}, {32, 1}, {16, 1}};
  AttentionTile t = attention_tile(path, d, dv, 4, 16, 1);
  int max_bc = attention_max_bc(path, t.d);
  for (const Option& o : options) {
    if (o.stages > 1 && !arch_has(sm, Feature::cp_async)) continue;
    if (o.bc > max_bc) continue;
    t = attention_tile(path, d, dv, 4, o.bc, o.stages);
    if (t.smem_bytes() <= smem_budget(sm)) break;
  }
  return t;
}

AttentionTile choose_attention_tile(const AttentionShape& shape, int sm) {
  return choose_attention_tile(shape.path, shape.d, shape.dv, sm);
}

bool wgmma_attention_computes(const AttentionShape& shape) {
  bool half = (shape.path == MatmulPath::bf16 || shape.path == MatmulPath::f16) &&
              shape.elem_bytes == 2;
  // tf32: head dims up to 128 (Q and two stages of fp32 K and V fill shared memory there);
  // tf32x3: up to 64 (the small parts double it)
  int64_t widest = wgmma_attention_splits(shape) ? 64 : wgmma_attention_tf32(shape) ? 128 : 256;
  auto fits = [&](int64_t dim) { return dim >= 8 && dim <= widest && dim % 8 == 0; };
  return (half || wgmma_attention_converts(shape) || wgmma_attention_tf32(shape)) &&
         fits(shape.d) && fits(shape.dv);
}

bool wgmma_attention_converts(const AttentionShape& shape) {
  return shape.path == MatmulPath::bf16_of_f32 && shape.elem_bytes == 4;
}

bool wgmma_attention_tf32(const AttentionShape& shape) {
  return (shape.path == MatmulPath::tf32 || shape.path == MatmulPath::tf32x3) &&
         shape.elem_bytes == 4;
}

bool wgmma_attention_splits(const AttentionShape& shape) {
  return shape.path == MatmulPath::tf32x3 && shape.elem_bytes == 4;
}

bool wgmma_attention_loads(const AttentionShape& shape) {
  return wgmma_attention_converts(shape) || wgmma_attention_tf32(shape);
}

bool wgmma_attention_by_model(const AttentionShape& shape) {
  return wgmma_attention_computes(shape) && !wgmma_attention_loads(shape);
}

AttentionTile choose_wgmma_attention_tile(const AttentionShape& shape) {
  AttentionTile t;
  auto pad64 = [](int64_t x) { return static_cast<int>((x + 63) / 64 * 64); };
  t.wgmma = true;
  t.br = 128;
  // Head dims over 128: 64 keys a tile, so that Q and two stages of K and V fit shared memory
  // (at d = d_v = 256: 64 KiB of Q and two stages of 32 KiB of K and 32 KiB of V, where 128 keys
  // would need 257 KiB) and S's accumulators (32 a thread) leave registers for O's (128).
  t.bc = shape.d > 128 || shape.dv > 128 ? 64 : 128;
  t.stages = 2;
  t.warps = 12;
  t.d = pad64(shape.d);
  // P V's wgmma is m64n{dv}k16, of which the prelude holds n = 64, 128, 192 and 256
  t.dv = pad64(shape.dv);
  t.dv_slabs = 1;
  t.q_ld = t.k_ld = t.d;
  t.v_ld = t.dv;
  t.elem_bytes = 2;
  if (wgmma_attention_tf32(shape)) {
    // fp32 in shared memory: d padded to a multiple of 32 (128-byte rows of 32 fp32), P V's
    // m64n{dv}k8 at n = 64 or 128; 64 keys a tile past a head dim of 64 (at d = d_v = 128: 64 KiB
    // of Q and two stages of 32 KiB of K and 32 KiB of V, where 128 keys would need 320 KiB; at
    // d up to 64 with d_v over 64, 128 keys would fit but hold 192 accumulators a thread).
    t.elem_bytes = 4;
    t.d = static_cast<int>((shape.d + 31) / 32 * 32);
    t.q_ld = t.k_ld = t.d;
    t.bc = shape.d > 64 || shape.dv > 64 ? 64 : 128;
    // tf32x3: each element's small part beside it, 8 bytes an element (at d = d_v = 64: 64 KiB of
    // Q and two stages of 32 KiB of K and 32 KiB of V, 193 KiB), 64 keys a tile (128 would need
    // 321 KiB; S's, P's two parts' and O's two sums' registers, 160 a thread, fit 240)
    if (wgmma_attention_splits(shape)) {
      t.elem_bytes = 8;
      t.bc = 64;
    }
  }
  return t;
}

int wgmma_attention_staging_pieces(const AttentionTile& tile, const AttentionShape& shape) {
  if (!wgmma_attention_loads(shape)) return 0;
  int free = smem_limit(90) - tile.smem_bytes();
  for (int pieces : {32, 16, 8, 4})
    if (128 * 16 * pieces <= free) return pieces;
  return 0;
}

int wgmma_attention_smem_bytes(const AttentionTile& tile, const AttentionShape& shape) {
  return tile.smem_bytes() + 128 * 16 * wgmma_attention_staging_pieces(tile, shape);
}

int attention_max_bc(MatmulPath path, int d) {
  if (path == MatmulPath::tf32x3) return d > 64 ? 16 : 32;
  if (!uses_mma(path)) return d > 128 ? 16 : 32;
  return 64;
}

namespace {

bool wgmma_tf32(const MatmulShape& shape) {
  return (shape.path == MatmulPath::tf32 || shape.path == MatmulPath::tf32x3) &&
         shape.elem_bytes == 4;
}

}  // namespace

bool wgmma_transposes_b(const MatmulShape& shape) {
  return wgmma_tf32(shape) && !shape.b_k_contiguous;
}

bool wgmma_transposes_a(const MatmulShape& shape) {
  return wgmma_tf32(shape) && !shape.a_k_contiguous;
}

bool wgmma_splits(const MatmulShape& shape) {
  return shape.path == MatmulPath::tf32x3 && shape.elem_bytes == 4;
}

bool wgmma_converts(const MatmulShape& shape) {
  return shape.path == MatmulPath::bf16_of_f32 && shape.elem_bytes == 4;
}

int wgmma_smem_bytes(const MatmulTile& tile, const MatmulShape& shape) {
  int rows = tile.bm + tile.bn;                     // A and B
  // the small parts: B's, and A's where A is staged (K-major, A's are in the consumers' registers)
  if (wgmma_splits(shape)) rows += tile.bn + (wgmma_transposes_a(shape) ? tile.bm : 0);
  if (wgmma_converts(shape)) rows *= 3;             // their fp32 staging areas, 256-byte rows
  if (wgmma_transposes_b(shape)) rows += tile.bn;   // B's staging area
  if (wgmma_transposes_a(shape)) rows += tile.bm;   // A's
  return 1024 + tile.stages * rows * 128 + 3 * 8 * tile.stages;
}

bool wgmma_computes(const MatmulShape& shape) {
  bool half = (shape.path == MatmulPath::bf16 || shape.path == MatmulPath::f16) &&
              shape.elem_bytes == 2;
  bool fp32 = wgmma_tf32(shape) || wgmma_converts(shape);
  auto aligned = [&](int64_t elements) { return elements * shape.elem_bytes % 16 == 0; };
  return (half || fp32) && aligned(shape.lda) && aligned(shape.ldb) &&
         aligned(shape.a_batch_stride) && aligned(shape.b_batch_stride) && shape.m >= 1 &&
         shape.n >= 1 && shape.k >= 1;
}

int wgmma_bk(const MatmulShape& shape) {
  return wgmma_converts(shape) ? 64 : 128 / shape.elem_bytes;
}

namespace {

MatmulTile wgmma_tile(const MatmulShape& shape, int bn, int stages) {
  MatmulTile t;
  t.wgmma = true;
  t.bm = 128;
  t.bn = bn;
  t.bk = wgmma_bk(shape);
  t.warps_m = 8;
  t.warps_n = 1;
  t.stages = stages;
  return t;
}

}  // namespace

MatmulTile choose_wgmma_tile(const MatmulShape& shape) {
  bool wide = shape.n >= 256 && !wgmma_transposes_b(shape) && !wgmma_transposes_a(shape) &&
              !wgmma_splits(shape) && !wgmma_converts(shape);
  MatmulTile t = wgmma_tile(shape, wide ? 256 : 128, wide ? 4 : 6);
  while (t.stages > 2 && wgmma_smem_bytes(t, shape) > smem_limit(90)) --t.stages;
  return t;
}

bool wgmma_fills(const MatmulShape& shape) {
  int64_t tiles = shape.batch * ((shape.m + 127) / 128) * ((shape.n + 127) / 128);
  return tiles >= typical_sm_count(90) / 2;
}

std::vector<MatmulTile> wgmma_candidates(const MatmulShape& shape) {
  // bn and stages; the staging areas of a transposed A or B take the room of the deeper rings
  // (both: 128x128 at 3 stages, 128x256 at 2)
  const int plain[][2] = {{128, 4}, {128, 6}, {256, 3}, {256, 4}};
  const int transposed[][2] = {{128, 3}, {128, 4}, {256, 2}};
  std::vector<MatmulTile> out;
  if (wgmma_converts(shape)) {  // the staging areas leave room for 2 stages of 128x128
    out.push_back(wgmma_tile(shape, 128, 2));
  } else if (wgmma_splits(shape)) {  // 128 columns (acc and a stage's part: 128 registers)
    for (int stages : {2, 3, 4}) {
      MatmulTile t = wgmma_tile(shape, 128, stages);
      if (wgmma_smem_bytes(t, shape) <= smem_limit(90)) out.push_back(t);
    }
  } else if (wgmma_transposes_b(shape) || wgmma_transposes_a(shape)) {
    for (const auto& c : transposed) {
      MatmulTile t = wgmma_tile(shape, c[0], c[1]);
      if (wgmma_smem_bytes(t, shape) <= smem_limit(90)) out.push_back(t);
    }
  } else {
    for (const auto& c : plain) out.push_back(wgmma_tile(shape, c[0], c[1]));
  }
  return out;
}

}  // namespace kiln::compiler
