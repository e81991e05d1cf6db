// Tuning: matmul and attention tiles timed on the device and kept as tuning records in the
// cache, and the schedule a compile takes from them.
//
// A tuning record is a cache entry of its own (cache/FORMAT.md, "Tuning records"). Its key fields
// are the problem (compiler::problem_signature of a matmul or an attention), the arch, the device
// ("NVIDIA H200 (132 SMs)"), the NVRTC version and the codegen version; its payload "tuning" is a
// JSON object holding the winning tile, the model's tile, every candidate's median time and status,
// and the date. Records travel through the remote tier, push and pull as entries do, signed alike.
#pragma once

#include "cache/cache.h"
#include "compiler/options.h"
#include "compiler/schedule.h"
#include "ir/graph.h"
#include "runtime/driver.h"
#include "support/expected.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln::runtime {

inline constexpr const char* k_payload_tuning = "tuning";

// One candidate as timed.
struct CandidateTime {
  compiler::KernelTile tile;
  double median_ms = -1;  // of the graph's run (the other kernels at their own tiles); -1: untimed
  // "ok"; else why it was left out ("output differs from the model tile's: rel_l2 ...",
  // "compile: ...", "run: ...").
  std::string status;
};

struct TuningRecord {
  std::string signature;  // compiler::problem_signature
  std::string kernel;     // the kernel it was tuned in (for display)
  std::string arch;       // "sm_90"
  std::string device;     // DeviceIdentity::text()
  std::string date;       // "2026-11-26" (UTC)
  int repeats = 0;        // timed runs per candidate (after the warm-up)
  compiler::KernelTile winner;  // a MatmulTile or an AttentionTile, as the signature's problem
  compiler::KernelTile model;   // the analytic model's choice
  std::vector<CandidateTime> candidates;

  // "tuned on NVIDIA H200 (132 SMs) 2026-11-26": what kernel reports say of its tile.
  std::string source() const { return "tuned on " + device + " " + date; }
};

// The record as its payload's JSON, and back; decode fails naming what is wrong.
std::string encode_record(const TuningRecord& record);
Expected<TuningRecord> decode_record(const std::string& json);

// The key fields of the record for `signature` on `device`, for kernels of `arch` (the target's:
// "sm_90" or "sm_90a", whose kernels differ) with `nvrtc_version`.
std::vector<cache::KeyField> tuning_fields(const std::string& signature,
                                           const DeviceIdentity& device, const std::string& arch,
                                           const std::string& nvrtc_version);

// The matmul and attention problems of `graph` compiled with `options` (CUDA): each kernel's
// name, signature and shape, one per signature, in kernel order.
struct TuningProblem {
  std::string kernel;
  std::string signature;  // compiler::problem_signature(shape)
  std::variant<compiler::MatmulShape, compiler::AttentionShape> shape;
  ir::DType product = ir::DType::f32;  // the matmul's or attention's own dtype (its result's)
  bool symbolic = false;  // of a symbolic graph: its kernels run unsplit (no split-K tiles)
  // sm_90a: the model runs it on a wgmma kernel (MatmulTile::wgmma, AttentionTile::wgmma),
  // whose tiles are then candidates beside the mma.sync ones
  bool wgmma = false;
};
Expected<std::vector<TuningProblem>> tuning_problems(const ir::Graph& graph,
                                                     const compiler::CompileOptions& options);

// The tuning records `cache`'s local tier holds for `device` and target arch `arch` (any
// problem): the runtime asks
// this once, before planning a graph to look its problems up, so a device without records pays
// one indexed query per runtime. Keyed by signature; each record is read and checked once, when
// a graph first needs it (`checked`).
struct TunedTiles {
  DeviceIdentity device;
  std::string arch;  // the target's, "sm_90a"
  std::string nvrtc_version;
  std::map<std::string, std::string> keys;  // signature -> record key (this arch, NVRTC, codegen)
  // signature (with " wgmma" where the wgmma kernel computes the problem, which the signature
  // does not say) -> the record's tile and source, or why it is not used (read once each).
  std::map<std::string, Expected<compiler::ChosenTile>> checked;
  bool empty() const { return keys.empty(); }
};
TunedTiles tuned_tiles(cache::Cache& cache, const DeviceIdentity& device, const std::string& arch,
                       const std::string& nvrtc_version);

// tuned_tiles() for CUDA device `device`, `target` and the NVRTC `nvrtc_path` finds (the
// runtime's RuntimeOptions::autotune, kiln compile and why): nullopt when either cannot be
// identified, or the device is not of the target's compute capability.
// With `probe`, a cache holding no tuning record at all answers nullopt after one index probe,
// without starting the driver.
std::optional<TunedTiles> device_tiles(cache::Cache& cache, int device,
                                       const compiler::Target& target,
                                       const std::string& nvrtc_path, bool probe);

// The largest tuning payload read (a record of 27 candidates is about 3 KiB).
inline constexpr size_t k_max_tuning_record_bytes = 1 << 20;

// The schedule the records in `tiles` give `graph`'s matmul and attention problems: null when none
// of them has a record, else a ChosenSchedule naming the records' tiles ("tuned on ..."). A record
// is read through Cache::lookup (its use counts, as a hit's does, against eviction) and checked: at
// most k_max_tuning_record_bytes, it decodes, it names this problem, device and arch, its date is a
// date, its winner is one of its candidates that timed "ok", and that tile is legal for the
// problem. One that is not is left out with a warning (once per runtime).
Expected<std::shared_ptr<const compiler::ScheduleProvider>> tuned_schedule(
    const ir::Graph& graph, const compiler::CompileOptions& options, cache::Cache& cache,
    TunedTiles& tiles, const std::function<void(const std::string&)>& warn);

struct TuneOptions {
  int device = 0;
  int warmup = 2;   // untimed runs per candidate
  int repeats = 7;  // timed runs per candidate (the median is kept); at least 5
  // Only these signatures (empty: every matmul and attention problem of the graph).
  std::vector<std::string> only;
  // A line per step ("tuning k0_matmul: 14 candidates", "  128x256x64, ...: 0.412 ms").
  std::function<void(const std::string&)> progress;
};

// Times every legal tile of each matmul and attention problem of `graph` (candidate_tiles,
// attention_candidates) on device `options.device` and stores a tuning record per problem in
// `cache` (locally, and on the remote tier when there is one). Each candidate is compiled
// through the cache (its key names the tile) with the other problems at the model's tiles, run
// on the same inputs (seeded, uniform in [-1, 1]) after a warm-up, and timed with CUDA events
// around each run; its outputs must equal the model tile's within 1e-6 relative L2 where it
// sums in the same order (the same split of K; the same key tile), else within about a unit in
// the last place of the coarser of what the products round to and the output's dtype
// (max_candidate_rel_l2 in tuning.cpp); one that does not is left out. A symbolic graph's
// problems get no split-K candidates. Fails without a device, when `options` target another
// arch than the device's, or when the model's own tile does not compile or run.
Expected<std::vector<TuningRecord>> tune_graph(const ir::Graph& graph,
                                               const compiler::CompileOptions& options,
                                               cache::Cache* cache, const TuneOptions& tune);

}  // namespace kiln::runtime
