// Pass: turns kernel groups into kernel plans (buffers, parameters, tile, launch shape).
#pragma once

#include "compiler/artifact.h"
#include "compiler/fusion.h"
#include "compiler/precision.h"
#include "compiler/schedule.h"
#include "compiler/sizes.h"
#include "compiler/tile.h"

#include <array>
#include <string>
#include <vector>

namespace kiln::compiler {

// An attention kernel's sizes: S_q, S_k, the true head dims, and per operand the element strides
// of the result's batch dims (outer, inner; 0 where the operand broadcasts); the mask's strides
// along queries and keys (0 where it broadcasts).
//
// Grouped-query attention: k (or v) with H_kv heads on axis -3 against the result's H_q, a
// multiple, has k_group (v_group) = H_q / H_kv, and result head h reads its head h / group;
// 1 elsewhere.
struct AttentionExtents {
  Extent sq, sk;
  int64_t d = 0, dv = 0;
  int64_t k_group = 1, v_group = 1;
  std::array<Extent, 2> q, k, v, mask;
  // A 5-D or 6-D result: per batch dim strides (MatmulExtents::per_dim), k's and v's head
  // coordinate (the last batch dim) divided by k_group and v_group.
  std::vector<Extent> q_dims, k_dims, v_dims, mask_dims;
  Extent mask_row = Extent::constant(0), mask_col = Extent::constant(0);
};

// A split-K matmul (MatmulTile::split_k > 1) runs as two kernels: `partials` computes each
// split's fp32 product into a temporary ([split][batch][M][N]), `sum` adds them in split order
// and runs the group's epilogue.
enum class SplitRole : uint8_t { none, partials, sum };

struct KernelPlan {
  KernelGroup group;
  SplitRole split = SplitRole::none;
  int partial_param = -1;  // split kernels: the parameter of the partials' temporary
  // wgmma matmul kernels (MatmulTile::wgmma): the tensor-map parameters of A and B, after the
  // group's own (which keep A's and B's pointers, unread unless the epilogue reads them)
  int a_map_param = -1, b_map_param = -1;
  // wgmma attention kernels (AttentionTile::wgmma): the tensor-map parameters of Q, K and V
  int q_map_param = -1, k_map_param = -1, v_map_param = -1;
  std::string name;   // "k0_matmul_tf32", also the entry point with "kiln_" before it
  MatmulShape shape;  // matmul kernels
  MatmulTile tile;    // matmul kernels, CUDA only (schedule_cuda)
  // matmul and attention kernels, CUDA only: ScheduleProvider::source_for() of their tile
  std::string tile_source;
  MatmulExtents extents;  // matmul kernels: `shape`'s sizes as the kernel computes them;
                          // attention kernels: batch, inner_batch, m = S_q and n = D_v
  AttentionTile attention_tile;        // attention kernels, CUDA only (schedule_cuda)
  AttentionExtents attention_extents;  // attention kernels
  AttentionShape attention_shape;      // attention kernels: the problem its tile is chosen for
  // Attention kernels, CUDA only: a batch past what the grid's z holds
  // (ScheduleProvider::grid_limit, CUDA's 65535) spreads over y as well, y holding
  // dv_slabs x batch_fold blocks, z ceil(batch / batch_fold), and a block's batch is
  // blockIdx.z + gridDim.z x (blockIdx.y / dv_slabs); the blocks past the batch return at once
  int64_t batch_fold = 1;
  // Matmul kernels (not wgmma), CUDA only: past grid_limit() row tiles, or batches x splits, the
  // two fold over y and z together: the block's flat index blockIdx.y + gridDim.y x blockIdx.z is
  // row tile + row_tiles x (batch x splits + split), with row_tiles `folded_rows` (for a symbolic
  // graph whose M is not fixed, ceil(M / bm) computed in the kernel and `folded_rows` its most);
  // the grid's y and z are constants (a symbolic graph's at the bucket's upper bounds), and the
  // blocks past the problem return at once. 0: not folded (y the row tiles, z batch x splits).
  int64_t folded_rows = 0;
  // CUDA only (schedule_cuda), default before it and on the CPU:
  LaunchShape launch;          // for a symbolic graph, at the bucket's upper bounds
  std::vector<SizeTerm> grid;  // symbolic graphs: the grid's x, y, z as size terms
  std::vector<KernelParam> params;  // stores first, then reads, each buffer once, then dims
  Target target;  // the CUDA target schedule_cuda() planned for (CUDA of no arch before it, and on
                  // the CPU): the emitters ask it for features
  // The parameter index holding node `id`'s value (a read), or -1.
  int param_of(const std::vector<BufferRef>& location, ir::NodeId id) const;
};

struct ProgramPlan {
  std::vector<KernelPlan> kernels;
  std::vector<BufferRef> location;  // per node id: where its value lives (roots and inputs)
  std::vector<uint64_t> input_bytes, output_bytes, temporary_bytes;  // at the upper bounds
  uint64_t workspace_bytes = 0;
  // Symbolic graphs only: each buffer's bytes as a size term.
  std::vector<SizeTerm> input_sizes, output_sizes, temporary_sizes;
};

// The values a kernel of `group` reads from buffers, possibly repeated: the anchor's operands
// that are not members (an attention's q, k, v and mask), then the group's leaves.
std::vector<ir::NodeId> kernel_reads(const ir::Graph& graph, const KernelGroup& group);

// CUDA's kernel parameter space on every arch kiln supports (sm_75 and newer, CUDA 12.1 and
// newer); param_space_bytes() (artifact.h) measures a kernel's parameters in it.
inline constexpr uint64_t k_max_param_bytes = 32764;

// The target-free plan. `graph` is static: a symbolic graph bound at its bucket's upper bounds,
// whose sizes `sizes` gives as extents (Sizes(graph) for a static graph).
// Assigns every group's value a buffer (graph output, else a temporary), orders parameters
// (stores, reads, then the symbols' values as dims), names kernels and gives matmul and attention
// kernels their shapes and extents. No tile, launch shape or grid: each target schedules the plan
// its own way (schedule_cuda; the CPU target in compiler/cpu).
Expected<ProgramPlan> plan_kernels(const ir::Graph& graph, const std::vector<KernelGroup>& groups,
                                   const PrecisionPlan& precision, const Sizes& sizes);

// Whether matmul kernel `k` of a plan of `graph` (bound) runs on sm_90a's wgmma kernel when its
// schedule is the model's: `target` has wgmma, the problem is one it computes (wgmma_computes),
// each operand's strides are whole 16-byte units (a symbolic graph's at every size of the bucket:
// its tensor maps' dims and strides are then size terms), and neither operand has more than three
// batch dims it does not broadcast over (operand_batch_dims; its tensor map holds them).
bool wgmma_plans(const ir::Graph& graph, const KernelPlan& k, const Target& target);

// Whether attention kernel `k` of a plan of `graph` (bound) runs on sm_90a's wgmma attention
// kernel when its schedule is the model's: `target` has wgmma, the result has two batch dims at
// most, the kernel computes the problem (wgmma_attention_computes) and q's, k's and v's batch
// strides are whole 16-byte units at every size (TMA's rule); for a symbolic graph, its heads
// are fixed and divide the batch, and k's and v's head groups divide the heads.
bool wgmma_attention_plans(const ir::Graph& graph, const KernelPlan& k, const Target& target,
                           bool symbolic);

// The CUDA target's part of the plan, for `target` (its arch): matmul and attention tiles (from
// `schedule`: the heuristic unless a caller provides another; a tile that is not legal for the
// kernel fails, naming the kernel and the tiles it runs; a symbolic graph's tiles run unsplit),
// the tile in matmul kernels' names, a split-K matmul's two kernels and its partials' temporary,
// launch shapes and, for a symbolic graph, grid terms. Fails for launches beyond CUDA's grid limits
// (65535 blocks along y and z: a matmul's row tiles and batches, and an attention's batch, fold
// over both past 65535 of either, a matmul's up to k_max_folded_blocks blocks, an attention's up to
// 65535 x 65535; for sm_90a's persistent wgmma matmul,
// k_max_wgmma_work_tiles work tiles) and for a kernel whose parameters would not fit in
// k_max_param_bytes (fuse() keeps kernels far below it, so only groups formed otherwise get
// there); the message names the kernel and the bytes.
Status schedule_cuda(const ir::Graph& graph, ProgramPlan& plan, const Target& target,
                     const Sizes& sizes, const ScheduleProvider& schedule = heuristic_schedule());

}  // namespace kiln::compiler
