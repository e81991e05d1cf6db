// Tile heuristic: big tiles when they fill the GPU, smaller ones otherwise; stages fill smem.
#include "compiler/tile.h"

#include "compiler/target.h"

#include <algorithm>
#include <span>

namespace kiln::compiler {

SmemLayout smem_layout(const MatmulTile& tile, const MatmulShape& shape) {
  SmemLayout layout;
  if (!uses_mma(shape.path)) {
    layout.a = {tile.bk, tile.bm, tile.bm + 4, 4};
    layout.b = {tile.bk, tile.bn, tile.bn + 4, 4};
    return layout;
  }
  int eb = shape.elem_bytes;
  int pad_k = 16 / eb;  // K-contiguous rows: 80 bytes apart, so 8 ldmatrix rows hit 8 bank groups
  int pad_mn = 8;       // MN-contiguous rows: 8 elements (conflict-free scalar fragment reads)
  layout.a = shape.a_k_contiguous ? SmemTile{tile.bm, tile.bk, tile.bk + pad_k, eb}
                                  : SmemTile{tile.bk, tile.bm, tile.bm + pad_mn, eb};
  layout.b = shape.b_k_contiguous ? SmemTile{tile.bn, tile.bk, tile.bk + pad_k, eb}
                                  : SmemTile{tile.bk, tile.bn, tile.bn + pad_mn, eb};
  return layout;
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

MatmulTile choose_tile(const MatmulShape& shape, int sm) {
  MatmulTile tile;
  int64_t big_tiles = shape.batch * ((shape.m + 127) / 128) * ((shape.n + 127) / 128);
  bool big = shape.m >= 128 && shape.n >= 128 && big_tiles >= typical_sm_count(sm);
  if (uses_mma(shape.path)) {
    int bk = shape.elem_bytes == 2 ? 32 : 16;  // 64 bytes of K per stage
    if (big) {
      tile = {128, 128, bk, 2, 4, 1};  // 8 warps, 64x32 per warp
    } else if (shape.m <= 32) {
      tile = {32, 64, bk, 1, 4, 1};  // 4 warps, 32x16 per warp
    } else {
      tile = {64, 64, bk, 2, 2, 1};  // 4 warps, 32x32 per warp
    }
  } else {
    // 16 x 16 threads, each computing (bm/16) x (bn/16) outputs.
    tile = big ? MatmulTile{128, 128, 16, 2, 4, 1} : MatmulTile{64, 64, 16, 2, 4, 1};
  }
  if (!arch_has(sm, Feature::cp_async)) return tile;  // synchronous single-stage loads
  int64_t k_tiles = (shape.k + tile.bk - 1) / tile.bk;
  int per_stage = smem_layout(tile, shape).stage_bytes();
  int fit = std::clamp(smem_budget(sm) / per_stage, 2, 4);
  tile.stages = static_cast<int>(std::clamp<int64_t>(k_tiles + 1, 2, fit));
  return tile;
}

AttentionTile choose_attention_tile(MatmulPath path, int64_t d, int64_t dv, int sm) {
  AttentionTile t;
  auto pad16 = [](int64_t x) { return static_cast<int>((x + 15) / 16 * 16); };
  t.d = pad16(d);
  // v's head dim in slabs of at most 128 columns, as even as multiples of 16 allow.
  t.dv_slabs = (pad16(dv) + 127) / 128;
  t.dv = pad16((pad16(dv) + t.dv_slabs - 1) / t.dv_slabs);
  bool mma = uses_mma(path);
  bool half = path == MatmulPath::f16 || path == MatmulPath::bf16;
  t.elem_bytes = half ? 2 : 4;
  if (mma) {
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
  struct Option {
    int bc, stages;
  };
  const Option mma_options[] = {{64, 2}, {32, 2}, {16, 2}, {64, 1}, {32, 1}, {16, 1}};
  const Option ffma_options[] = {{32, 2}, {32, 1}, {16, 1}};
  // Past 128, a thread's quarter of q takes 48 to 64 registers: 16 scores per key tile, not 32,
  // keep the kernel from spilling.
  const Option ffma_wide_options[] = {{16, 2}, {16, 1}};
  std::span<const Option> options = mma         ? std::span<const Option>(mma_options)
                                    : t.d > 128 ? std::span<const Option>(ffma_wide_options)
                                                : std::span<const Option>(ffma_options);
  for (const Option& o : options) {
    if (o.stages > 1 && !arch_has(sm, Feature::cp_async)) continue;
    // tf32x3 holds each score's split parts and P V's promoted partial besides: 64-key tiles
    // (32 past a head dim of 64) would spill.
    if (path == MatmulPath::tf32x3 && o.bc > (t.d > 64 ? 16 : 32)) continue;
    t.bc = o.bc;
    t.stages = o.stages;
    if (t.smem_bytes() <= smem_budget(sm)) break;
  }
  return t;
}

}  // namespace kiln::compiler
