// Where plan_kernels gets each matmul kernel's tile: a schedule provider. The analytic heuristic
// by default; tiles chosen per problem (tuning records, `kiln tune`'s candidates); a test forces
// any legal tile.
#pragma once

#include "compiler/tile.h"
#include "support/expected.h"

#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln::compiler {

// "128x128x16, 2x4 warps, 3 stages", then ", split 4" for a split-K tile and ", group 16" for a
// block order other than the model's groups of 8 row tiles (", group 1": row-major).
std::string to_string(const MatmulTile& tile);
// An attention tile's choice: "64x64, 4 warps, 2 stages" (queries x keys per block), or for
// sm_90a's kernel "128x128, wgmma, 2 stages".
std::string to_string(const AttentionTile& tile);

// A kernel's tile as schedules choose and tuning records hold it: a matmul's or an attention's.
using KernelTile = std::variant<MatmulTile, AttentionTile>;
std::string to_string(const KernelTile& tile);

class ScheduleProvider {
public:
  virtual ~ScheduleProvider() = default;
  // The tile of the matmul kernel computing `shape` on `sm`. plan_kernels checks it with
  // check_tile and fails naming the kernel when it is not a legal one.
  virtual MatmulTile matmul_tile(const MatmulShape& shape, int sm) const = 0;
  // Where its tiles come from, as kernel reports name it: "model" (the analytic heuristic, the
  // same on every machine), "fixed" (one tile for every kernel).
  virtual std::string source() const = 0;
  // Where the tile of `shape` on `sm` comes from; source() unless a provider chooses per problem.
  virtual std::string source_for(const MatmulShape& shape, int sm) const {
    (void)shape, (void)sm;
    return source();
  }
  // The tile of the attention kernel computing `shape` on `sm` (checked with
  // check_attention_tile), and where it comes from: the heuristic's unless a provider chooses.
  virtual AttentionTile attention_tile(const AttentionShape& shape, int sm) const {
    return choose_attention_tile(shape, sm);
  }
  virtual std::string source_for(const AttentionShape& shape, int sm) const {
    (void)shape, (void)sm;
    return source();
  }
  // The most blocks a kernel's grid holds along y and z before it folds: CUDA's 65535. Past it an
  // attention's batch folds over y as well (plan_attention_grid) and a matmul's row tiles and
  // batches over y and z together (plan_matmul_grid). Tests lower it to fold small problems.
  virtual int64_t grid_limit() const { return 65535; }
  // What a compile's key must hold for this provider's choices: "" for the heuristic alone (the
  // key names no schedule), else text that differs whenever its tiles can (a digest of them).
  virtual std::string key() const = 0;
};

// choose_tile(): what every compile uses unless a caller provides otherwise.
const ScheduleProvider& heuristic_schedule();

// One tile for every matmul kernel (tests: runs chosen tiles through the emulator).
class FixedSchedule final : public ScheduleProvider {
public:
  explicit FixedSchedule(MatmulTile tile) : m_tile(tile) {}
  MatmulTile matmul_tile(const MatmulShape&, int) const override { return m_tile; }
  std::string source() const override { return "fixed"; }
  // Attention kernels keep the heuristic's tile, and say so.
  std::string source_for(const AttentionShape&, int) const override { return "model"; }
  using ScheduleProvider::source_for;
  std::string key() const override { return "fixed " + to_string(m_tile); }

private:
  MatmulTile m_tile;
};

// A matmul problem as tuning records name it: every field of `shape` that a tile's legality or
// speed depends on, e.g. "matmul batch=1 m=4096 n=4096 k=4096 a=k-major lda=4096 b=n-major
// ldb=4096 a_batch=0 b_batch=0 elem=2 path=bf16 vec=11". The arch is not in it.
std::string problem_signature(const MatmulShape& shape);
// An attention problem likewise: "attention batch=32 sq=4096 sk=4096 d=128 dv=128 elem=2
// path=bf16 causal=1 mask=0 k_group=1 v_group=1".
std::string problem_signature(const AttentionShape& shape);

// A tile chosen for one problem, and where the choice came from ("tuned on NVIDIA H200 (132 SMs)
// 2026-11-26", "tuning candidate").
struct ChosenTile {
  KernelTile tile;
  std::string source;
};

// Tiles chosen per problem signature; every other problem gets the heuristic's. Its key() is a
// digest of the chosen tiles (not of where they came from), so two devices that chose alike
// share binaries.
class ChosenSchedule final : public ScheduleProvider {
public:
  explicit ChosenSchedule(std::map<std::string, ChosenTile> chosen);
  MatmulTile matmul_tile(const MatmulShape& shape, int sm) const override;
  AttentionTile attention_tile(const AttentionShape& shape, int sm) const override;
  std::string source() const override { return "model"; }
  std::string source_for(const MatmulShape& shape, int sm) const override;
  std::string source_for(const AttentionShape& shape, int sm) const override;
  std::string key() const override { return m_key; }
  const std::map<std::string, ChosenTile>& chosen() const { return m_chosen; }

  // Where the tile of each kernel (by its CUDA name, cuda_kernel_name) came from, for kernels
  // whose entry another provider compiled: binaries are shared by the tiles' digest, so a hit's
  // artifact may name another device's record or a tuner's candidate, and callers report these
  // instead. Filled by whoever planned the graph (runtime::tuned_schedule).
  std::map<std::string, std::string> kernel_sources;

private:
  std::map<std::string, ChosenTile> m_chosen;
  std::string m_key;
};

// Every tile the matmul emitters can run for `shape` on `sm`: the block shapes of their warp
// layouts (mma.sync: 128x256 of 2x4 warps, 256x128 of 4x2 and 128x128 of 2x2, each warp 64x64;
// 128x128 of 2x4, 64x64 of 2x2, 32x64 of 1x4; each with 64 bytes of K per stage, and 128 where
// cp.async runs. FFMA: 128x128 and 64x64 of 16x16 threads, K 16), at the stage counts the arch
// allows (1 without cp.async, else 2 to 4 within smem_limit, the arch's opt-in maximum), as far
// as tile_fits_registers allows; and on tensor-core paths, each of these whose grid is under one
// wave of typical_sm_count(sm) split 2, 4 and 8 ways (split_k_legal) while the grid stays within
// two blocks per SM and the splits run 4 K tiles or more on average; and each of all these whose
// grid the model's groups of 8 row tiles order (grouped_order) in row-major order (group 1) too,
// and in groups of 16 where the grid has more than 16 row tiles. choose_tile picks one of them.
std::vector<MatmulTile> candidate_tiles(const MatmulShape& shape, int sm);

// Whether the kernel can split `shape`'s K `split` ways with `tile` (its other fields legal):
// tensor-core paths only, split_k_fits, and not 128 bytes of K per stage with an operand copied
// element by element (the partials kernel spills there). (Batches times splits past the grid's
// z limit fold over y: plan_matmul_grid.)
// A symbolic graph's kernels run unsplit whatever the provider says (schedule_cuda).
bool split_k_legal(const MatmulTile& tile, const MatmulShape& shape, int split);

// Whether `tile`'s launch on `shape` fits CUDA's grid: the row tiles x batches x splits (which
// fold over the grid's y and z past 65535 of either, plan_matmul_grid) at most
// k_max_folded_blocks; the persistent wgmma kernel, whose work tiles run along x, at most
// k_max_wgmma_work_tiles of them. schedule_cuda fails where it does not; the tuner offers no such
// candidate.
bool launch_fits(const MatmulTile& tile, const MatmulShape& shape);
// The most blocks CUDA's grid holds along y and along z.
inline constexpr int64_t k_max_grid_yz = 65535;
// The most row tiles x batches x splits of a matmul: the kernel's int row tile and batch x splits
// index stay below 2^31 (its spare blocks' unsigned index may pass it; they return first); a
// tensor's 2^31 - 1 elements keep a graph's matmuls (but for a deep split of a large batch)
// within it.
inline constexpr int64_t k_max_folded_blocks = (int64_t{1} << 31) - 1;
// The work tiles of the persistent wgmma kernel: an int tile index steps by the grid (one block
// per multiprocessor at most), so 2^30 leave room.
inline constexpr int64_t k_max_wgmma_work_tiles = int64_t{1} << 30;

// Fails, saying why, when `tile` is not one of candidate_tiles(shape, sm), or a split of one
// that split_k_legal allows.
Status check_tile(const MatmulTile& tile, const MatmulShape& shape, int sm);

// Fails, saying why, when `tile` is not a wgmma tile the sm_90a kernel runs (MatmulTile::wgmma):
// 128 x 128 or 128 x 256, bk 64, 2 stages or more within smem_limit(90), unsplit, the model's
// block order field (the persistent kernel walks its tiles row by row).
Status check_wgmma_tile(const MatmulTile& tile, const MatmulShape& shape);

// Every tile the attention kernel can run for `shape` on `sm`: 4 or 8 warps (64 or 128 queries
// on tensor cores, 32 or 64 on FFMA), key tiles of 16, 32 and 64 up to attention_max_bc, 1 stage
// without cp.async, else 2 and 3, within smem_limit(sm); the heuristic's tile is one of them.
std::vector<AttentionTile> attention_candidates(const AttentionShape& shape, int sm);

// Fails, saying why, when `tile` (not wgmma) is not one of attention_candidates(shape, sm).
Status check_attention_tile(const AttentionTile& tile, const AttentionShape& shape, int sm);
// Fails, saying why, when `tile` is not the sm_90a attention kernel's for `shape`
// (choose_wgmma_attention_tile at 2 stages or more) or the kernel does not compute `shape`.
Status check_wgmma_attention_tile(const AttentionTile& tile, const AttentionShape& shape);

// A tile's choice (queries, keys, warps, stages: what its text holds) completed for `shape`:
// the padded head dims, slabs and row strides follow from the problem; the queries stay as
// chosen, so a choice whose queries do not match its warps fails check_attention_tile. A wgmma
// choice takes the kernel's form for `shape` (choose_wgmma_attention_tile) at its own queries,
// keys and stages, so a key tile the kernel does not run at `shape` fails
// check_wgmma_attention_tile.
AttentionTile complete_attention_tile(const AttentionTile& choice, const AttentionShape& shape);

// A CUDA matmul kernel's name: its plan's name and its block tile ("k0_matmul_bf16_128x256"),
// and its splits ("k0_matmul_bf16_64x64_split4"; the kernel summing their partials adds
// "_sum").
std::string cuda_kernel_name(const std::string& plan_name, const MatmulTile& tile);
// An attention kernel's: the plan's name, and the block tile of the wgmma kernel
// ("k1_attention_bf16_causal_wg128x128"; the mma.sync kernel's name holds no tile).
std::string cuda_kernel_name(const std::string& plan_name, const AttentionTile& tile);

// The tile to_string() wrote; nullopt for any other text.
std::optional<MatmulTile> parse_tile(const std::string& text);
// Either tile's text (to_string of a MatmulTile or an AttentionTile); nullopt for any other.
std::optional<KernelTile> parse_kernel_tile(const std::string& text);
bool same_tile(const MatmulTile& a, const MatmulTile& b);
// The same choice: queries, keys, warps and stages (the rest follows from the problem).
bool same_tile(const AttentionTile& a, const AttentionTile& b);
bool same_tile(const KernelTile& a, const KernelTile& b);

}  // namespace kiln::compiler
