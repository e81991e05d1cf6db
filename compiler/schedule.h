// Where plan_kernels gets each matmul kernel's tile: a schedule provider. Today's analytic
// heuristic by default; a test forces any legal tile; tuned records from the cache later.
#pragma once

#include "compiler/tile.h"
#include "support/expected.h"

#include <string>
#include <vector>

namespace kiln::compiler {

class ScheduleProvider {
public:
  virtual ~ScheduleProvider() = default;
  // The tile of the matmul kernel computing `shape` on `sm`. plan_kernels checks it with
  // check_tile and fails naming the kernel when it is not a legal one.
  virtual MatmulTile matmul_tile(const MatmulShape& shape, int sm) const = 0;
  // Where its tiles come from, as kernel reports name it: "model" (the analytic heuristic, the
  // same on every machine), "fixed" (one tile for every kernel).
  virtual std::string source() const = 0;
};

// choose_tile(): what every compile uses unless a caller provides otherwise.
const ScheduleProvider& heuristic_schedule();

// One tile for every matmul kernel (tests: runs chosen tiles through the emulator).
class FixedSchedule final : public ScheduleProvider {
public:
  explicit FixedSchedule(MatmulTile tile) : m_tile(tile) {}
  MatmulTile matmul_tile(const MatmulShape&, int) const override { return m_tile; }
  std::string source() const override { return "fixed"; }

private:
  MatmulTile m_tile;
};

// Every tile the matmul emitters can run for `shape` on `sm`: the block shapes of their warp
// layouts (mma.sync: 128x256 of 2x4 warps, 256x128 of 4x2 and 128x128 of 2x2, each warp 64x64;
// 128x128 of 2x4, 64x64 of 2x2, 32x64 of 1x4; each with 64 bytes of K per stage, and 128 where
// cp.async runs. FFMA: 128x128 and 64x64 of 16x16 threads, K 16), at the stage counts the arch
// allows (1 without cp.async, else 2 to 4 within smem_limit, the arch's opt-in maximum), as far
// as tile_fits_registers allows. choose_tile picks one of them.
std::vector<MatmulTile> candidate_tiles(const MatmulShape& shape, int sm);

// Fails, saying why, when `tile` is not one of candidate_tiles(shape, sm).
Status check_tile(const MatmulTile& tile, const MatmulShape& shape, int sm);

// "128x128x16, 2x4 warps, 3 stages".
std::string to_string(const MatmulTile& tile);

}  // namespace kiln::compiler
