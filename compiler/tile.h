// Matmul geometry, shared-memory layout and the tile-shape heuristic (KERNELS.md, "Tile table").
#pragma once

#include "compiler/precision.h"

#include <cstdint>
#include <vector>

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
  // Whether each operand's tile rows are copied as 16-byte vectors (its row stride and its
  // contiguous extent are multiples of 16 bytes at every size: emit_tile_copy's rule), else
  // element by element.
  bool a_vector = true, b_vector = true;
};

struct MatmulTile {
  int bm = 64;      // block tile rows (M)
  int bn = 64;      // block tile columns (N)
  int bk = 16;      // K per pipeline stage
  int warps_m = 2;  // warps along M (mma kernels)
  int warps_n = 2;  // warps along N (mma kernels)
  int stages = 1;   // shared-memory stages (1: synchronous loads, no cp.async)
  // Split-K (mma kernels of static graphs): the K tiles are cut into `split_k` contiguous
  // ranges, one block per range and output tile, each writing its fp32 partial product to a
  // temporary; a second kernel sums the partials in split order (deterministic) and runs the
  // epilogue. 1: no split.
  int split_k = 1;
  // Block order: the grid runs in groups of `group` row tiles that sweep the columns together
  // (neighbouring blocks share A's rows and B's columns in L2), where it has more row tiles than
  // that and two column tiles or more; 1: plain row-major order.
  int group = 8;
  // sm_90a: the warp-specialised wgmma kernel (emit_matmul_wgmma): one producer warpgroup that
  // loads A and B with TMA into `stages` stages, and two consumer warpgroups of 64 rows each
  // (bm 128) running wgmma m64n`bn`k16 (bn 128 or 256), bk 64 (128 bytes of 16-bit K), a
  // persistent grid. warps_m and warps_n are 8 and 1 (the consumers' warps).
  bool wgmma = false;
  int threads() const { return wgmma ? 384 : 32 * warps_m * warps_n; }
};

// Whether the wgmma kernel transposes B in shared memory for `shape`: fp32 B read as [K, N] on
// the tf32 or tf32x3 path. tf32 wgmma reads both operands K-major only, so TMA brings B N-major into a
// staging area and the consumers write it K-major, rounded to tf32, where wgmma reads it.
bool wgmma_transposes_b(const MatmulShape& shape);
// Whether it transposes A for `shape`: fp32 A read as [K, M] (transpose_a) on the tf32 or tf32x3
// path, staged and written K-major as B is. 16-bit A read as [K, M] stays as TMA loads it (M-major
// blocks of 64 columns, read by wgmma with imm-trans-a); medium's conversion writes it so.
bool wgmma_transposes_a(const MatmulShape& shape);
// Whether it splits the operands for `shape`: tf32x3, whose consumers write each operand's small
// part (x - tf32(x), rounded) beside it in shared memory for the two extra wgmmas.
bool wgmma_splits(const MatmulShape& shape);
// Whether it converts the operands for `shape`: fp32 operands on the bf16 path (medium). TMA
// loads them into fp32 staging areas (64 of K a stage, two 128-byte boxes a row) and the
// consumers write them as bf16 where the 16-bit kernel's wgmmas read them.
bool wgmma_converts(const MatmulShape& shape);
// The wgmma kernel's shared memory for `shape`: a 1 KiB alignment margin, `stages` stages of A
// (bm rows of 128 bytes), B (bn rows of 128 bytes), where it splits them their small parts (as
// many again), where it transposes B B's staging area (bn x 128 bytes), where it transposes A A's
// (bm x 128 bytes), where it converts them
// their fp32 staging areas ((bm + bn) x 256 bytes), then a full, an empty and (tf32, tf32x3,
// medium) a rounded mbarrier per stage.
int wgmma_smem_bytes(const MatmulTile& tile, const MatmulShape& shape);
// Whether the wgmma kernel computes `shape`: 16-bit operands on the bf16 or f16 path, or fp32
// operands on the tf32, tf32x3 or bf16_of_f32 path (A and B of either layout: [K, M] and [K, N]
// are transposed in shared memory for tf32); row strides and (innermost) batch strides multiples
// of 16 bytes (TMA's rule for global strides). The plan checks the rest of a batched operand's
// strides and how many batch dims it has (wgmma_plans).
bool wgmma_computes(const MatmulShape& shape);
// Its K step: 128 bytes of K a stage (64 16-bit elements, 32 fp32 ones), 64 where it converts
// fp32 operands to bf16.
int wgmma_bk(const MatmulShape& shape);
// The wgmma tile for `shape`: 128x256 where N spans 256 columns or more (4 stages), else 128x128
// (6 stages), within smem_limit(90); 128x128 where the kernel transposes A or B (their staging
// areas leave 128x256 two stages) or splits the operands (tf32x3: 3 stages, 2 with A or B
// transposed); 128x128 at 2 stages where it converts them.
MatmulTile choose_wgmma_tile(const MatmulShape& shape);
// Whether the model runs `shape` (one the wgmma kernel computes) on it: when its 128x128 work
// tiles number at least half of typical_sm_count(90). Fewer 128-row tiles leave most SMs idle
// where the mma.sync tiles (down to 32x64, and split-K) spread the same work over more blocks:
// decode-shaped products (M = 16 against N = 4096: 32 tiles) stay on mma.sync. A reasoned rule,
// not a measured one.
bool wgmma_fills(const MatmulShape& shape);
// The wgmma tiles `kiln tune` times beside the mma.sync ones: 128x128 at 4 and 6 stages, 128x256
// at 3 and 4 (the model's among them); where the kernel transposes B, 128x128 at 3 and 4 stages
// and 128x256 at 2; where it splits the operands, 128x128 at 2 and 3 stages (2 with B
// transposed); where it converts them, 128x128 at 2.
std::vector<MatmulTile> wgmma_candidates(const MatmulShape& shape);

// The most splits a split-K tile takes.
inline constexpr int k_max_split_k = 16;
// The row tiles of a group in the model's block order, and the most a tile may name.
inline constexpr int k_default_group = 8;
inline constexpr int k_max_group = 64;
// Whether `group` orders the blocks of a grid of `grid_x` column and `grid_y` row tiles
// otherwise than row-major: more row tiles than the group, and two column tiles or more.
inline bool grouped_order(int group, int64_t grid_x, int64_t grid_y) {
  return group > 1 && grid_y > group && grid_x >= 2;
}

// Whether `split` contiguous ranges of whole K tiles of `bk`, each non-empty, cover K: every
// range but the last holds ceil(k_tiles / split) tiles.
bool split_k_fits(int64_t k, int bk, int split);

// One operand tile in shared memory: `rows` rows of `ld` elements, `cols` of them used. A
// swizzled tile (swizzle_bits > 0) has ld == cols and permutes the 16-byte chunks of each row
// instead of padding it: element (r, c) lives at swizzled(r * ld + c), CuTe's
// Swizzle<swizzle_bits, log2(16 / elem_bytes), swizzle_shift>.
struct SmemTile {
  int rows = 0, cols = 0, ld = 0;
  int elem_bytes = 4;
  int swizzle_bits = 0;   // B: how many chunk-index bits are XORed (0: not swizzled)
  int swizzle_shift = 0;  // S: how far above the chunk bits the row bits XORed in start
  int bytes() const { return rows * ld * elem_bytes; }
  // log2 of the elements in 16 bytes (M of Swizzle<B, M, S>).
  int chunk_shift() const { return elem_bytes == 2 ? 3 : elem_bytes == 4 ? 2 : 4; }
  // Where element offset `offset` (r * ld + c) lives: its 16-byte chunk index XORed with
  // bits of its row (the identity when not swizzled).
  int64_t swizzled(int64_t offset) const {
    int m = chunk_shift();
    int64_t mask = (int64_t{1} << swizzle_bits) - 1;
    return offset ^ (((offset >> (m + swizzle_shift)) & mask) << m);
  }
};

// The swizzle that makes rows of `row_bytes` (a multiple of 16) conflict-free for ldmatrix: the
// 8 addresses of one 8x8 matrix (8 consecutive rows, one 16-byte chunk each) land in 8 different
// 16-byte bank groups. B = min(log2 chunks, 3), S = max(log2 chunks, 3).
void set_swizzle(SmemTile& tile);

struct SmemLayout {
  SmemTile a, b;
  int stage_bytes() const { return a.bytes() + b.bytes(); }
};

// mma kernels keep each operand in its global orientation (so 16-byte copies work). A layout
// whose fragments are read by ldmatrix is swizzled (set_swizzle); one read by scalar loads (fp32
// MN-contiguous) has rows padded by 8 elements. The ffma kernel stores fp32 [k][m] and [k][n].
SmemLayout smem_layout(const MatmulTile& tile, const MatmulShape& shape);

// An attention kernel's tile: each block owns `br` queries (16 per warp on tensor cores, 8 per
// warp on FFMA) and walks the keys `bc` at a time through `stages` shared-memory stages. Head
// dims are padded to multiples of 16 (zeros); shared-memory rows are `*_ld` elements apart.
struct AttentionTile {
  int br = 64, bc = 64, stages = 1, warps = 4;
  int d = 64;       // padded head dim of q and k
  int dv = 64;      // padded width of the slab of v's head dim one block computes (<= 128; the
                    // wgmma kernel's: <= 256)
  int dv_slabs = 1; // blocks along the grid's y, each a slab of dv columns of the output
  int q_ld = 0, k_ld = 0, v_ld = 0;  // q_ld 0: q is read into registers (FFMA)
  int elem_bytes = 4;                // in shared memory (the wgmma kernel's tf32x3: 8, an
                                     // element's big and small parts)
  // sm_90a: the FlashAttention-3-style kernel (emit_attention, KERNELS.md design 5b): one
  // producer warpgroup loading Q, K and V with TMA into an mbarrier ring and two consumer
  // warpgroups of 64 queries each (br 128, warps 12), S = Q K^T by wgmma from shared memory and
  // O += P V by wgmma with P from registers; d and dv padded to multiples of 64 up to 256
  // (choose_wgmma_attention_tile), unpadded in shared
  // memory (q_ld = d, k_ld = d, v_ld = dv: TMA's 128-byte swizzle keeps banks apart).
  bool wgmma = false;
  int smem_bytes() const {
    if (wgmma)  // a 1 KiB alignment margin, Q, the stages of K and V, then 1 + 2 stages mbarriers
      return 1024 + elem_bytes * (br * q_ld + stages * bc * (k_ld + v_ld)) + 8 * (1 + 2 * stages);
    return elem_bytes * (br * q_ld + stages * bc * (k_ld + v_ld));
  }
};

// An attention kernel's problem as schedules and tuning records see it: `batch` blocks along
// the grid's z (batches times heads), S_q and S_k (a symbolic graph's at the bucket's upper
// bounds), the head dims, grouped heads, the operands' element size, the path, causality and
// whether a mask is read.
struct AttentionShape {
  int64_t batch = 1, sq = 1, sk = 1, d = 64, dv = 64;
  int64_t k_group = 1, v_group = 1;
  int elem_bytes = 4;  // of q, k and v in global memory
  MatmulPath path = MatmulPath::ffma;
  bool causal = false, mask = false;
};

// The attention tile of `warps` warps walking the keys `bc` at a time through `stages` stages,
// for `path` and head dims `d` and `dv`: the padded head dims, v's slabs, the shared-memory row
// strides and element size follow from these.
AttentionTile attention_tile(MatmulPath path, int64_t d, int64_t dv, int warps, int bc,
                             int stages);

// Picks the attention tile for `path` and padded head dims on `sm`: 4 warps, the widest key tile
// and the deepest pipeline (2 stages on sm_80+, cp.async) that fit the shared-memory budget.
AttentionTile choose_attention_tile(MatmulPath path, int64_t d, int64_t dv, int sm);
AttentionTile choose_attention_tile(const AttentionShape& shape, int sm);
// Whether the sm_90a attention kernel computes `shape`: 16-bit operands on the bf16 or f16 path,
// or fp32 operands on the bf16_of_f32 path (`medium`, wgmma_attention_converts), head dims d and
// dv multiples of 8 (rows of whole 16-byte units, as TMA wants) up to 256; or fp32 operands on
// the tf32 path (`high`, wgmma_attention_tf32) with head dims up to 128, or on the tf32x3 path
// (wgmma_attention_splits) with head dims up to 64.
bool wgmma_attention_computes(const AttentionShape& shape);
// Whether it converts fp32 q, k and v to bf16 on their way to shared memory (`medium`): its
// producer warpgroup then loads them itself, not by TMA, which copies without converting.
bool wgmma_attention_converts(const AttentionShape& shape);
// Whether it runs tf32 wgmma (`high`, head dims up to 128, or `tf32x3`): its producer loads q, k
// and v itself, rounds them to tf32 and writes V transposed (tf32 wgmma reads B K-major only).
bool wgmma_attention_tf32(const AttentionShape& shape);
// Whether it runs tf32x3 (head dims up to 64): the producer also writes each operand's small
// part, tf32(x - tf32(x)), beside it (8 bytes an element in shared memory), and each product is
// three tf32 wgmmas.
bool wgmma_attention_splits(const AttentionShape& shape);
// Whether its producer loads q, k and v itself (either of the above), with no tensor maps.
bool wgmma_attention_loads(const AttentionShape& shape);
// Whether the analytic model plans `shape` on it: 16-bit operands. fp32 ones stay on the
// mma.sync kernel (design 5) unless a tuning record or a fixed schedule chooses the wgmma tile
// (`kiln tune` times it beside design 5's and checks its result against the model's): whether
// the producer's own loads (cp.async through a staging ring) keep the consumers fed is not
// measured yet.
bool wgmma_attention_by_model(const AttentionShape& shape);
// Its tile: 128 queries (two consumer warpgroups) x 128 keys, 2 stages; 64 keys where d or dv is
// over 128 (Q and two stages of K and V then fit shared memory). d and dv padded to a multiple
// of 64 (P V's wgmma is m64n{dv}k16: the prelude holds 64, 128, 192 and 256). tf32: fp32 in
// shared memory, d padded to a multiple of 32, 64 keys where d or dv is over 64.
AttentionTile choose_wgmma_attention_tile(const AttentionShape& shape);
// The loading producer's staging ring (fp32 operands, wgmma_attention_loads): the 16-byte pieces
// each of the producer's 128 threads keeps in flight with cp.async, the most of 32, 16, 8 and 4
// that fit smem_limit(90) beside `tile`'s operands (32 where they leave 64 KiB, 16 at the
// fullest model tiles, 193 KiB); 0 where the kernel does not load (TMA) or where not even 4 fit.
int wgmma_attention_staging_pieces(const AttentionTile& tile, const AttentionShape& shape);
// The attention kernel's dynamic shared memory on sm_90a: the tile's (AttentionTile::smem_bytes)
// and, where it loads, the staging ring's 128 x pieces x 16 bytes.
int wgmma_attention_smem_bytes(const AttentionTile& tile, const AttentionShape& shape);
// The widest key tile the attention kernel of `path` keeps in registers at padded head dim `d`
// (FusedAttentionCompilesWithoutSpills in tests/compiler): 64 on tensor cores, but tf32x3 (its
// split parts and P V's promoted partial besides: 32, and 16 past a head dim of 64); FFMA 32,
// and 16 past a head dim of 128 (a thread's quarter of q takes 48 to 64 registers there).
int attention_max_bc(MatmulPath path, int d);

// Rough SM count of a typical part of each arch: decides when big tiles still fill the GPU.
int typical_sm_count(int sm);
// The most dynamic shared memory one block may use on `sm`: the arch table's opt-in maximum
// (ArchFacts::max_dynamic_smem; 227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_86/89/120, 64 KiB
// on sm_75). What a tile may use (candidate_tiles, check_tile); an arch outside the table gets
// smem_budget's.
int smem_limit(int sm);
// What choose_attention_tile plans within: 96 KiB where the arch has Feature::smem_96k, else
// 48 KiB (sm_75 without the opt-in); at most smem_limit(sm). Matmul tiles (choose_tile,
// candidate_tiles) use up to smem_limit.
int smem_budget(int sm);

// The blocks of `tile`'s grid on `shape` (batches x row tiles x column tiles; splits not counted).
int64_t grid_blocks(const MatmulTile& tile, const MatmulShape& shape);
// Whether a stage holds 128 bytes of K per row (32 fp32 or 64 16-bit elements), not 64.
bool deep_k_step(const MatmulTile& tile, const MatmulShape& shape);

// Whether ptxas keeps `tile` in registers on `shape` (EveryCandidateTileCompilesWithoutSpills in
// tests/compiler, every candidate on sm_80, 86, 90 and 120): 64x64 warp tiles need both operands
// copied as 16-byte vectors (a 128x256 tile copied element by element is 32 copies per thread
// per stage, each with its own swizzled address) and 3 stages or more (4 with 128 bytes of K:
// f16 at 3 stages spilled 32 bytes on sm_80), and are not for tf32x3
// (its split fragments and partial sums besides 128 accumulators); tf32 and tf32x3, which
// convert every fragment with cvt.rna, take 128 bytes of K per stage only in warp tiles of
// 32x32 or less; medium with an operand copied element by element and 64 bytes of K per stage
// runs 3 stages or more where K spans more than one tile.
bool tile_fits_registers(const MatmulTile& tile, const MatmulShape& shape);

// Whether the mma kernel keeps two fragment sets in registers (the next k step's read while
// this one's mmas run; emit_matmul_mma): a cp.async pipeline (2 stages or more), an even number
// of k steps a tile (medium's 16 fp32 of K, one m16n8k16 step, is not), and not where
// ptxas spilled them (EveryCandidateTileCompilesWithoutSpills: 8-304 bytes on sm_80 to sm_120):
// tf32x3 (its split fragments and partial sums), and 128 bytes of K per stage in 64x64 warp
// tiles or with an operand copied element by element.
bool double_buffers_fragments(const MatmulTile& tile, const MatmulShape& shape);

// Picks the block tile and stage count for `shape` on `sm` (KERNELS.md, "Tile table"): the
// analytic model, the same on every machine.
MatmulTile choose_tile(const MatmulShape& shape, int sm);

}  // namespace kiln::compiler
