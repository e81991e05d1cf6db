// The schedule providers and the legal tiles they choose from.
#include "compiler/schedule.h"

#include "compiler/target.h"
#include "ir/hash.h"

#include <string_view>

namespace kiln::compiler {

namespace {

class Heuristic final : public ScheduleProvider {
public:
  MatmulTile matmul_tile(const MatmulShape& shape, int sm) const override {
    return choose_tile(shape, sm);
  }
  std::string source() const override { return "model"; }
  std::string key() const override { return ""; }
};

}  // namespace

bool same_tile(const MatmulTile& a, const MatmulTile& b) {
  return a.bm == b.bm && a.bn == b.bn && a.bk == b.bk && a.warps_m == b.warps_m &&
         a.warps_n == b.warps_n && a.stages == b.stages && a.split_k == b.split_k;
}

std::string problem_signature(const MatmulShape& s) {
  return "matmul batch=" + std::to_string(s.batch) + " m=" + std::to_string(s.m) +
         " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         " a=" + (s.a_k_contiguous ? "k-major" : "m-major") + " lda=" + std::to_string(s.lda) +
         " b=" + (s.b_k_contiguous ? "k-major" : "n-major") + " ldb=" + std::to_string(s.ldb) +
         " a_batch=" + std::to_string(s.a_batch_stride) +
         " b_batch=" + std::to_string(s.b_batch_stride) +
         " elem=" + std::to_string(s.elem_bytes) + " path=" + std::string(to_string(s.path)) +
         " vec=" + (s.a_vector ? "1" : "0") + (s.b_vector ? "1" : "0");
}

ChosenSchedule::ChosenSchedule(std::map<std::string, ChosenTile> chosen)
    : m_chosen(std::move(chosen)) {
  if (m_chosen.empty()) return;
  // Length-prefixed, in the map's (sorted) order: the same choices give the same key.
  std::string text;
  for (const auto& [signature, choice] : m_chosen) {
    std::string tile = to_string(choice.tile);
    text += std::to_string(signature.size()) + ":" + signature + std::to_string(tile.size()) +
            ":" + tile;
  }
  m_key = "tiles " + ir::hash_bytes(text.data(), text.size()).hex();
}

MatmulTile ChosenSchedule::matmul_tile(const MatmulShape& shape, int sm) const {
  auto it = m_chosen.find(problem_signature(shape));
  return it == m_chosen.end() ? choose_tile(shape, sm) : it->second.tile;
}

std::string ChosenSchedule::source_for(const MatmulShape& shape, int sm) const {
  (void)sm;
  auto it = m_chosen.find(problem_signature(shape));
  return it == m_chosen.end() ? source() : it->second.source;
}

const ScheduleProvider& heuristic_schedule() {
  static const Heuristic k_heuristic;
  return k_heuristic;
}

std::vector<MatmulTile> candidate_tiles(const MatmulShape& shape, int sm) {
  std::vector<MatmulTile> blocks;
  if (uses_mma(shape.path)) {
    int bk = shape.elem_bytes == 2 ? 32 : 16;  // 64 bytes of K
    // 64x64 warp tiles (128x256 of 2x4 warps, 256x128 of 4x2, 128x128 of 2x2), 64x32 (128x128
    // of 2x4), 32x32 (64x64 of 2x2) and 32x16 (32x64 of 1x4); tile_fits_registers decides.
    const MatmulTile warp_layouts[] = {{128, 256, bk, 2, 4, 1}, {256, 128, bk, 4, 2, 1},
                                       {128, 128, bk, 2, 2, 1}, {128, 128, bk, 2, 4, 1},
                                       {64, 64, bk, 2, 2, 1},   {32, 64, bk, 1, 4, 1}};
    // Each with 128 bytes of K per stage too, where a cp.async pipeline runs.
    for (MatmulTile tile : warp_layouts) {
      blocks.push_back(tile);
      tile.bk *= 2;
      if (arch_has(sm, Feature::cp_async)) blocks.push_back(tile);
    }
  } else {
    blocks = {{128, 128, 16, 2, 4, 1}, {64, 64, 16, 2, 4, 1}};
  }
  std::vector<MatmulTile> tiles;
  for (MatmulTile tile : blocks) {
    // No cp.async: one synchronous stage.
    int fewest = arch_has(sm, Feature::cp_async) ? 2 : 1, most = fewest == 1 ? 1 : 4;
    for (int stages = fewest; stages <= most; ++stages) {
      tile.stages = stages;
      if (stages * smem_layout(tile, shape).stage_bytes() <= smem_limit(sm) &&
          tile_fits_registers(tile, shape)) {
        tiles.push_back(tile);
      }
    }
  }
  if (!uses_mma(shape.path)) return tiles;
  // Split-K where a tile's grid is under one wave of the arch's typical part: 2, 4 and 8
  // splits while the grid stays within two blocks per SM and the splits run 4 K tiles or more
  // on average.
  int sms = typical_sm_count(sm);
  size_t unsplit = tiles.size();
  for (size_t i = 0; i < unsplit; ++i) {
    MatmulTile tile = tiles[i];
    int64_t blocks = grid_blocks(tile, shape);
    if (blocks >= sms) continue;
    int64_t k_tiles = (shape.k + tile.bk - 1) / tile.bk;
    for (int split : {2, 4, 8}) {
      if (blocks * split > 2 * sms || k_tiles < 4 * split || !split_k_legal(tile, shape, split))
        continue;
      tile.split_k = split;
      tiles.push_back(tile);
    }
  }
  return tiles;
}

namespace {

// 128 bytes of K per stage with an operand copied element by element: the partials kernel
// spilled 368-600 bytes (16-bit, K = 2050, sm_80 and sm_90) where the unsplit one kept (nearly)
// everything in registers.
bool split_spills(const MatmulTile& tile, const MatmulShape& shape) {
  return deep_k_step(tile, shape) && !(shape.a_vector && shape.b_vector);
}

}  // namespace

bool split_k_legal(const MatmulTile& tile, const MatmulShape& shape, int split) {
  return !split_spills(tile, shape) && uses_mma(shape.path) && shape.batch * split <= 65535 &&
         split_k_fits(shape.k, tile.bk, split);
}

Status check_tile(const MatmulTile& tile, const MatmulShape& shape, int sm) {
  // Any split of a legal tile that split_k_legal allows, not only the ones candidate_tiles
  // offers (a FixedSchedule or a record written by another version may hold others).
  MatmulTile unsplit = tile;
  unsplit.split_k = 1;
  if (tile.split_k != 1 && split_spills(tile, shape)) {
    return make_error("tile ", to_string(tile), ": the ", to_string(shape.path),
                      " matmul kernel does not split K with 128 bytes of K a stage where an "
                      "operand's rows are copied element by element (its partials kernel would "
                      "spill); split the tile with 64 bytes of K a stage instead");
  }
  if (tile.split_k != 1 && !split_k_legal(tile, shape, tile.split_k)) {
    return make_error("tile ", to_string(tile), ": the ", to_string(shape.path),
                      " matmul kernel cannot split K = ", std::to_string(shape.k), " (",
                      std::to_string(shape.batch), " batches) into ", std::to_string(tile.split_k),
                      " ranges of whole ", std::to_string(tile.bk),
                      "-element tiles (split-K runs on tensor-core paths, 2 to ",
                      std::to_string(k_max_split_k), " ranges, none empty)");
  }
  for (const MatmulTile& legal : candidate_tiles(shape, sm))
    if (same_tile(unsplit, legal)) return Status::success();
  std::string list;
  for (const MatmulTile& legal : candidate_tiles(shape, sm))
    list += (list.empty() ? "" : "; ") + to_string(legal);
  return make_error("tile ", to_string(tile), " is not one the ", to_string(shape.path),
                    " matmul kernel runs on sm_", std::to_string(sm), " (it runs: ", list, ")");
}

std::string cuda_kernel_name(const std::string& plan_name, const MatmulTile& tile) {
  return plan_name + "_" + std::to_string(tile.bm) + "x" + std::to_string(tile.bn) +
         (tile.split_k > 1 ? "_split" + std::to_string(tile.split_k) : "");
}

std::string to_string(const MatmulTile& tile) {
  return std::to_string(tile.bm) + "x" + std::to_string(tile.bn) + "x" + std::to_string(tile.bk) +
         ", " + std::to_string(tile.warps_m) + "x" + std::to_string(tile.warps_n) + " warps, " +
         std::to_string(tile.stages) + (tile.stages == 1 ? " stage" : " stages") +
         (tile.split_k > 1 ? ", split " + std::to_string(tile.split_k) : "");
}

std::optional<MatmulTile> parse_tile(const std::string& text) {
  // Strictly what to_string writes, with every number 1..4096: the text can come from a record
  // another machine wrote.
  size_t at = 0;
  auto number = [&](int& out) {
    size_t start = at;
    int64_t value = 0;
    while (at < text.size() && at - start < 5 && text[at] >= '0' && text[at] <= '9')
      value = value * 10 + (text[at++] - '0');
    if (at == start || value < 1 || value > 4096) return false;
    out = static_cast<int>(value);
    return true;
  };
  auto literal = [&](const char* expected) {
    std::string_view e(expected);
    if (text.compare(at, e.size(), e) != 0) return false;
    at += e.size();
    return true;
  };
  MatmulTile t;
  if (!number(t.bm) || !literal("x") || !number(t.bn) || !literal("x") || !number(t.bk) ||
      !literal(", ") || !number(t.warps_m) || !literal("x") || !number(t.warps_n) ||
      !literal(" warps, ") || !number(t.stages) ||
      !literal(t.stages == 1 ? " stage" : " stages"))
    return std::nullopt;
  if (at != text.size() &&
      (!literal(", split ") || !number(t.split_k) || t.split_k < 2 || t.split_k > k_max_split_k))
    return std::nullopt;
  if (at != text.size()) return std::nullopt;
  return t;
}

}  // namespace kiln::compiler
