// The schedule providers and the legal tiles they choose from.
#include "compiler/schedule.h"

#include "compiler/target.h"
#include "ir/hash.h"

#include <algorithm>
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
         a.warps_n == b.warps_n && a.stages == b.stages && a.split_k == b.split_k &&
         a.group == b.group && a.wgmma == b.wgmma;
}

bool same_tile(const AttentionTile& a, const AttentionTile& b) {
  return a.br == b.br && a.bc == b.bc && a.warps == b.warps && a.stages == b.stages &&
         a.wgmma == b.wgmma;
}

bool same_tile(const KernelTile& a, const KernelTile& b) {
  if (a.index() != b.index()) return false;
  if (const auto* m = std::get_if<MatmulTile>(&a)) return same_tile(*m, std::get<MatmulTile>(b));
  return same_tile(std::get<AttentionTile>(a), std::get<AttentionTile>(b));
}

std::string problem_signature(const AttentionShape& s) {
  return "attention batch=" + std::to_string(s.batch) + " sq=" + std::to_string(s.sq) +
         " sk=" + std::to_string(s.sk) + " d=" + std::to_string(s.d) +
         " dv=" + std::to_string(s.dv) + " elem=" + std::to_string(s.elem_bytes) +
         " path=" + std::string(to_string(s.path)) +
         " causal=" + (s.causal ? "1" : "0") + " mask=" + (s.mask ? "1" : "0") +
         " k_group=" + std::to_string(s.k_group) + " v_group=" + std::to_string(s.v_group);
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
    // A matmul tile's text as before attention tiles were chosen too: the same choices keep
    // their key.
    std::string tile = to_string(choice.tile);
    text += std::to_string(signature.size()) + ":" + signature + std::to_string(tile.size()) +
            ":" + tile;
  }
  m_key = "tiles " + ir::hash_bytes(text.data(), text.size()).hex();
}

MatmulTile ChosenSchedule::matmul_tile(const MatmulShape& shape, int sm) const {
  auto it = m_chosen.find(problem_signature(shape));
  const MatmulTile* tile =
      it == m_chosen.end() ? nullptr : std::get_if<MatmulTile>(&it->second.tile);
  return tile ? *tile : choose_tile(shape, sm);
}

AttentionTile ChosenSchedule::attention_tile(const AttentionShape& shape, int sm) const {
  auto it = m_chosen.find(problem_signature(shape));
  const AttentionTile* tile =
      it == m_chosen.end() ? nullptr : std::get_if<AttentionTile>(&it->second.tile);
  return tile ? complete_attention_tile(*tile, shape) : choose_attention_tile(shape, sm);
}

AttentionTile complete_attention_tile(const AttentionTile& choice, const AttentionShape& shape) {
  if (choice.wgmma) {  // schedule_cuda gives way where the kernel cannot run
    // The problem's form, at the chosen stages, queries and keys: a record of another key tile
    // (128 keys at a head dim over 128) then fails check_wgmma_attention_tile, not runs as 64.
    AttentionTile t = choose_wgmma_attention_tile(shape);
    t.stages = choice.stages;
    t.br = choice.br;
    t.bc = choice.bc;
    return t;
  }
  AttentionTile t =
      attention_tile(shape.path, shape.d, shape.dv, choice.warps, choice.bc, choice.stages);
  t.br = choice.br;
  return t;
}

std::string ChosenSchedule::source_for(const MatmulShape& shape, int sm) const {
  (void)sm;
  auto it = m_chosen.find(problem_signature(shape));
  return it == m_chosen.end() ? source() : it->second.source;
}

std::string ChosenSchedule::source_for(const AttentionShape& shape, int sm) const {
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
  // Split-K where a tile's grid is under one wave of the arch's typical part: 2, 4 and 8
  // splits while the grid stays within two blocks per SM and the splits run 4 K tiles or more
  // on average.
  int sms = typical_sm_count(sm);
  size_t unsplit = uses_mma(shape.path) ? tiles.size() : 0;
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
  // Other block orders where the model's groups of 8 row tiles order the grid: row-major, and
  // groups of 16 where the grid has more than 16 row tiles.
  size_t ordered = tiles.size();
  for (size_t i = 0; i < ordered; ++i) {
    MatmulTile tile = tiles[i];
    int64_t gx = (shape.n + tile.bn - 1) / tile.bn, gy = (shape.m + tile.bm - 1) / tile.bm;
    if (!grouped_order(tile.group, gx, gy)) continue;
    for (int group : {1, 16}) {
      if (group > 1 && !grouped_order(group, gx, gy)) continue;
      tile.group = group;
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

bool launch_fits(const MatmulTile& tile, const MatmulShape& shape) {
  if (tile.wgmma) return grid_blocks(tile, shape) <= k_max_wgmma_work_tiles;
  int64_t row_tiles = (shape.m + tile.bm - 1) / tile.bm;
  return row_tiles * shape.batch * std::max(tile.split_k, 1) <= k_max_folded_blocks;
}

bool split_k_legal(const MatmulTile& tile, const MatmulShape& shape, int split) {
  return !split_spills(tile, shape) && uses_mma(shape.path) &&
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

std::vector<AttentionTile> attention_candidates(const AttentionShape& shape, int sm) {
  std::vector<AttentionTile> out;
  AttentionTile padded = attention_tile(shape.path, shape.d, shape.dv, 4, 16, 1);
  int max_bc = attention_max_bc(shape.path, padded.d);
  std::vector<int> stages = {1};
  if (arch_has(sm, Feature::cp_async)) stages = {2, 3};
  for (int warps : {4, 8}) {
    for (int bc : {16, 32, 64}) {
      if (bc > max_bc) continue;
      for (int s : stages) {
        AttentionTile t = attention_tile(shape.path, shape.d, shape.dv, warps, bc, s);
        if (t.smem_bytes() <= smem_limit(sm)) out.push_back(t);
      }
    }
  }
  // The heuristic's tile (1 stage where 2 do not fit its budget) is a candidate wherever it
  // fits (every path the arch runs, at every head dim up to 256).
  AttentionTile model = choose_attention_tile(shape, sm);
  if (model.smem_bytes() <= smem_limit(sm) &&
      std::none_of(out.begin(), out.end(),
                   [&](const AttentionTile& t) { return same_tile(t, model); }))
    out.push_back(model);
  return out;
}

Status check_attention_tile(const AttentionTile& tile, const AttentionShape& shape, int sm) {
  std::vector<AttentionTile> legal = attention_candidates(shape, sm);
  for (const AttentionTile& t : legal) {
    // Every field, not only the choice: the padded dims and strides follow from the problem.
    if (same_tile(t, tile) && t.d == tile.d && t.dv == tile.dv && t.dv_slabs == tile.dv_slabs &&
        t.q_ld == tile.q_ld && t.k_ld == tile.k_ld && t.v_ld == tile.v_ld &&
        t.elem_bytes == tile.elem_bytes)
      return Status::success();
  }
  std::string list;
  for (const AttentionTile& t : legal) list += (list.empty() ? "" : "; ") + to_string(t);
  return make_error("tile ", to_string(tile), " is not one the ", to_string(shape.path),
                    " attention kernel runs on sm_", std::to_string(sm), " at head dim ",
                    std::to_string(shape.d), " (it runs: ", list, ")");
}

Status check_wgmma_tile(const MatmulTile& tile, const MatmulShape& shape) {
  bool legal = tile.wgmma && tile.bm == 128 &&
               (tile.bn == 128 || (tile.bn == 256 && !wgmma_splits(shape))) &&
               tile.bk == wgmma_bk(shape) && tile.warps_m == 8 && tile.warps_n == 1 && tile.split_k == 1 &&
               tile.group == k_default_group && tile.stages >= 2 &&
               wgmma_smem_bytes(tile, shape) <= smem_limit(90);
  if (legal) return Status::success();
  std::string bk = std::to_string(wgmma_bk(shape));
  return make_error("tile ", to_string(tile), " is not one the wgmma kernel runs (128x128x", bk,
                    wgmma_splits(shape) ? "" : " or 128x256x" + bk, ", 2 stages or more within ",
                    std::to_string(smem_limit(90) / 1024), " KiB of shared memory)");
}

Status check_wgmma_attention_tile(const AttentionTile& tile, const AttentionShape& shape) {
  AttentionTile model = choose_wgmma_attention_tile(shape);
  model.stages = tile.stages;
  bool legal = tile.wgmma && wgmma_attention_computes(shape) && same_tile(tile, model) &&
               tile.d == model.d && tile.dv == model.dv && tile.q_ld == model.q_ld &&
               tile.k_ld == model.k_ld && tile.v_ld == model.v_ld &&
               tile.elem_bytes == model.elem_bytes && tile.dv_slabs == 1 && tile.stages >= 2 &&
               tile.smem_bytes() <= smem_limit(90) &&
               (!wgmma_attention_loads(shape) || wgmma_attention_staging_pieces(tile, shape) > 0);
  if (legal) return Status::success();
  return make_error("tile ", to_string(tile), " is not one the sm_90a attention kernel runs (",
                    "128x128, or 128x64 at head dims over 128 (fp32 in `high`: over 64; in "
                    "`tf32x3`: always), wgmma, 2 stages or more within ",
                    std::to_string(smem_limit(90) / 1024),
                    " KiB of shared memory (fp32 operands: with 8 KiB or more to stage their "
                    "loads), for 16-bit operands or fp32 ones in `medium` at head "
                    "dims that are multiples of 8 up to 256, fp32 ones in `high` up to 128, or in "
                    "`tf32x3` up to 64)");
}

std::string cuda_kernel_name(const std::string& plan_name, const MatmulTile& tile) {
  return plan_name + (tile.wgmma ? "_wg" : "_") + std::to_string(tile.bm) + "x" + std::to_string(tile.bn) +
         (tile.split_k > 1 ? "_split" + std::to_string(tile.split_k) : "");
}

std::string cuda_kernel_name(const std::string& plan_name, const AttentionTile& tile) {
  if (!tile.wgmma) return plan_name;
  return plan_name + "_wg" + std::to_string(tile.br) + "x" + std::to_string(tile.bc);
}

std::string to_string(const MatmulTile& tile) {
  if (tile.wgmma) {
    return std::to_string(tile.bm) + "x" + std::to_string(tile.bn) + "x" +
           std::to_string(tile.bk) + ", wgmma, " + std::to_string(tile.stages) +
           (tile.stages == 1 ? " stage" : " stages") +
           (tile.group != k_default_group ? ", group " + std::to_string(tile.group) : "");
  }
  return std::to_string(tile.bm) + "x" + std::to_string(tile.bn) + "x" + std::to_string(tile.bk) +
         ", " + std::to_string(tile.warps_m) + "x" + std::to_string(tile.warps_n) + " warps, " +
         std::to_string(tile.stages) + (tile.stages == 1 ? " stage" : " stages") +
         (tile.split_k > 1 ? ", split " + std::to_string(tile.split_k) : "") +
         (tile.group != k_default_group ? ", group " + std::to_string(tile.group) : "");
}

std::string to_string(const AttentionTile& tile) {
  if (tile.wgmma) {
    return std::to_string(tile.br) + "x" + std::to_string(tile.bc) + ", wgmma, " +
           std::to_string(tile.stages) + (tile.stages == 1 ? " stage" : " stages");
  }
  return std::to_string(tile.br) + "x" + std::to_string(tile.bc) + ", " +
         std::to_string(tile.warps) + " warps, " + std::to_string(tile.stages) +
         (tile.stages == 1 ? " stage" : " stages");
}

std::string to_string(const KernelTile& tile) {
  return std::visit([](const auto& t) { return to_string(t); }, tile);
}

namespace {

// Reads strictly what to_string writes, with every number 1..4096 and no leading zero: the text
// can come from a record another machine wrote.
struct TileText {
  const std::string& text;
  size_t at = 0;
  bool number(int& out) {
    size_t start = at;
    int64_t value = 0;
    while (at < text.size() && at - start < 5 && text[at] >= '0' && text[at] <= '9')
      value = value * 10 + (text[at++] - '0');
    if (at == start || text[start] == '0' || value > 4096) return false;
    out = static_cast<int>(value);
    return true;
  }
  bool literal(std::string_view expected) {
    if (text.compare(at, expected.size(), expected) != 0) return false;
    at += expected.size();
    return true;
  }
  bool stages(int& out) { return number(out) && literal(out == 1 ? " stage" : " stages"); }
  bool done() const { return at == text.size(); }
};

}  // namespace

std::optional<MatmulTile> parse_tile(const std::string& text) {
  TileText p{text};
  MatmulTile t;
  if (!p.number(t.bm) || !p.literal("x") || !p.number(t.bn) || !p.literal("x") ||
      !p.number(t.bk) || !p.literal(", "))
    return std::nullopt;
  if (p.literal("wgmma, ")) {
    t.wgmma = true;
    t.warps_m = 8;
    t.warps_n = 1;
    if (!p.stages(t.stages)) return std::nullopt;
  } else if (!p.number(t.warps_m) || !p.literal("x") || !p.number(t.warps_n) ||
             !p.literal(" warps, ") || !p.stages(t.stages)) {
    return std::nullopt;
  }
  if (p.literal(", split ") &&
      (!p.number(t.split_k) || t.split_k < 2 || t.split_k > k_max_split_k))
    return std::nullopt;
  if (p.literal(", group ") &&
      (!p.number(t.group) || t.group == k_default_group || t.group > k_max_group))
    return std::nullopt;
  if (!p.done()) return std::nullopt;
  return t;
}

std::optional<KernelTile> parse_kernel_tile(const std::string& text) {
  if (auto matmul = parse_tile(text)) return KernelTile(*matmul);
  // An attention tile's choice; its head dims, strides and element size come from the problem
  // (ChosenSchedule::attention_tile).
  TileText p{text};
  AttentionTile t;
  if (!p.number(t.br) || !p.literal("x") || !p.number(t.bc) || !p.literal(", "))
    return std::nullopt;
  if (p.literal("wgmma, ")) {
    t.wgmma = true;
    t.warps = 12;
    if (!p.stages(t.stages) || !p.done()) return std::nullopt;
    return KernelTile(t);
  }
  if (!p.number(t.warps) || !p.literal(" warps, ") || !p.stages(t.stages) || !p.done())
    return std::nullopt;
  return KernelTile(t);
}

}  // namespace kiln::compiler
