// The schedule providers and the legal tiles they choose from.
#include "compiler/schedule.h"

#include "compiler/target.h"

namespace kiln::compiler {

namespace {

class Heuristic final : public ScheduleProvider {
public:
  MatmulTile matmul_tile(const MatmulShape& shape, int sm) const override {
    return choose_tile(shape, sm);
  }
};

bool same(const MatmulTile& a, const MatmulTile& b) {
  return a.bm == b.bm && a.bn == b.bn && a.bk == b.bk && a.warps_m == b.warps_m &&
         a.warps_n == b.warps_n && a.stages == b.stages;
}

}  // namespace

const ScheduleProvider& heuristic_schedule() {
  static const Heuristic k_heuristic;
  return k_heuristic;
}

std::vector<MatmulTile> candidate_tiles(const MatmulShape& shape, int sm) {
  std::vector<MatmulTile> blocks;
  if (uses_mma(shape.path)) {
    int bk = shape.elem_bytes == 2 ? 32 : 16;
    blocks = {{128, 128, bk, 2, 4, 1}, {64, 64, bk, 2, 2, 1}, {32, 64, bk, 1, 4, 1}};
  } else {
    blocks = {{128, 128, 16, 2, 4, 1}, {64, 64, 16, 2, 4, 1}};
  }
  if (!arch_has(sm, Feature::cp_async)) return blocks;  // no cp.async: one synchronous stage
  std::vector<MatmulTile> tiles;
  for (MatmulTile tile : blocks) {
    for (int stages = 2; stages <= 4; ++stages) {
      tile.stages = stages;
      if (stages * smem_layout(tile, shape).stage_bytes() <= smem_limit(sm)) tiles.push_back(tile);
    }
  }
  return tiles;
}

Status check_tile(const MatmulTile& tile, const MatmulShape& shape, int sm) {
  for (const MatmulTile& legal : candidate_tiles(shape, sm))
    if (same(tile, legal)) return Status::success();
  std::string list;
  for (const MatmulTile& legal : candidate_tiles(shape, sm))
    list += (list.empty() ? "" : "; ") + to_string(legal);
  return make_error("tile ", to_string(tile), " is not one the ", to_string(shape.path),
                    " matmul kernel runs on sm_", std::to_string(sm), " (it runs: ", list, ")");
}

std::string to_string(const MatmulTile& tile) {
  return std::to_string(tile.bm) + "x" + std::to_string(tile.bn) + "x" + std::to_string(tile.bk) +
         ", " + std::to_string(tile.warps_m) + "x" + std::to_string(tile.warps_n) + " warps, " +
         std::to_string(tile.stages) + (tile.stages == 1 ? " stage" : " stages");
}

}  // namespace kiln::compiler
