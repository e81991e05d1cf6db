// Matmul geometry, shared-memory layout and the tile-shape heuristic (KERNELS.md, "Tile table").
#pragma once

#include "compiler/precision.h"

#include <cstdint>

namespace kiln::compiler {

// A [batch] x M x N x K matmul as the kernel sees it. A(m, k) lives at m*lda + k when
// a_k_contiguous, else at k*lda + m; B(k, n) at n*ldb + k when b_k_contiguous, else k*ldb + n.
struct MatmulShape {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool a_k_contiguous = true;
  bool b_k_contiguous = false;
  int64_t lda = 1, ldb = 1;
  int64_t a_batch_stride = 0, b_batch_stride = 0;  // 0: broadcast over the batch
  int elem_bytes = 4;                              // of A and B in global memory
  MatmulPath path = MatmulPath::ffma;
};

struct MatmulTile {
  int bm = 64;      // block tile rows (M)
  int bn = 64;      // block tile columns (N)
  int bk = 16;      // K per pipeline stage
  int warps_m = 2;  // warps along M (mma kernels)
  int warps_n = 2;  // warps along N (mma kernels)
  int stages = 1;   // shared-memory stages (1: synchronous loads, no cp.async)
  int threads() const { return 32 * warps_m * warps_n; }
};

// One operand tile in shared memory: `rows` rows of `ld` elements, `cols` of them used.
struct SmemTile {
  int rows = 0, cols = 0, ld = 0;
  int elem_bytes = 4;
  int bytes() const { return rows * ld * elem_bytes; }
};

struct SmemLayout {
  SmemTile a, b;
  int stage_bytes() const { return a.bytes() + b.bytes(); }
};

// mma kernels keep each operand in its global orientation (so 16-byte copies work) with rows
// padded against bank conflicts; the ffma kernel stores fp32 [k][m] and [k][n].
SmemLayout smem_layout(const MatmulTile& tile, const MatmulShape& shape);

// An attention kernel's tile: each block owns `br` queries (16 per warp on tensor cores, 8 per
// warp on FFMA) and walks the keys `bc` at a time through `stages` shared-memory stages. Head
// dims are padded to multiples of 16 (zeros); shared-memory rows are `*_ld` elements apart.
struct AttentionTile {
  int br = 64, bc = 64, stages = 1, warps = 4;
  int d = 64;       // padded head dim of q and k
  int dv = 64;      // padded width of the slab of v's head dim one block computes (<= 128)
  int dv_slabs = 1; // blocks along the grid's y, each a slab of dv columns of the output
  int q_ld = 0, k_ld = 0, v_ld = 0;  // q_ld 0: q is read into registers (FFMA)
  int elem_bytes = 4;                // in shared memory
  int smem_bytes() const {
    return elem_bytes * (br * q_ld + stages * bc * (k_ld + v_ld));
  }
};

// Picks the attention tile for `path` and padded head dims on `sm`: the widest key tile and the
// deepest pipeline (2 stages on sm_80+, cp.async) that fit the shared-memory budget.
AttentionTile choose_attention_tile(MatmulPath path, int64_t d, int64_t dv, int sm);

// Rough SM count of a typical part of each arch: decides when big tiles still fill the GPU.
int typical_sm_count(int sm);
// The most dynamic shared memory one block may use on `sm`: the arch table's opt-in maximum
// (ArchFacts::max_dynamic_smem; 227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_86/89/120, 64 KiB
// on sm_75). What a tile may use (candidate_tiles, check_tile); an arch outside the table gets
// smem_budget's.
int smem_limit(int sm);
// What the heuristics (choose_tile, choose_attention_tile) plan within: 96 KiB where the arch has
// Feature::smem_96k, else 48 KiB (sm_75 without the opt-in); at most smem_limit(sm). A policy of
// today's kernels, not a limit of the arch: a tuned schedule may use up to smem_limit.
int smem_budget(int sm);

// Picks the block tile and stage count for `shape` on `sm`.
MatmulTile choose_tile(const MatmulShape& shape, int sm);

}  // namespace kiln::compiler
