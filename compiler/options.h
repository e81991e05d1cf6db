// What a compile is asked for: target arch, precision mode, fallback policy, NVRTC location.
#pragma once

#include "compiler/target.h"
#include "ir/types.h"
#include "support/expected.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::compiler {

class ScheduleProvider;
class KernelMemo;

// What happens where kiln cannot compile what was asked for as asked: refuse (an error naming
// the reason), warn (take the fallback, record it, and warn), or allow (take it and record it).
enum class FallbackPolicy : uint8_t { refuse, warn, allow };

// The sizes one compiled entry serves for one symbol of a symbolic graph: lo..hi inclusive.
struct DimRange {
  int64_t lo = 1;
  int64_t hi = 1;
  bool operator==(const DimRange&) const = default;
};

struct CompileOptions {
  // Where the kernels run: a CUDA arch (default sm_90), or the CPU target (compiler/cpu) with
  // its LLVM CPU name ("native" resolved, e.g. "znver4" or "x86-64-v3") and feature string
  // ("" for the CPU's own), whose modes resolve as on sm_90. The CPU target has key fields of
  // its own ("target", "cpu_features").
  Target target = Target::cuda(90);
  ir::Precision precision = ir::Precision::automatic;  // the graph-wide mode
  // Precision fallbacks (a combination the arch cannot run, compiled on the best available
  // path): refused unless allowed, since they change the arithmetic.
  FallbackPolicy fallback = FallbackPolicy::refuse;
  // Fusion fallbacks (an attention run as unfused kernels that write and read its scores): the
  // same numbers at a cost in memory and time, so warned about unless refused or allowed.
  FallbackPolicy fusion_fallback = FallbackPolicy::warn;
  // Exact libnvrtc to load; empty: KILN_NVRTC_PATH, then the usual places (see nvrtc.h).
  std::string nvrtc_path;
  // Symbolic graphs: the bucket to compile, one range per symbol (a bucket of it, see
  // compiler/sizes.h); empty for a static graph. A key field of its own ("dims").
  std::vector<DimRange> bucket;
  // Where CUDA matmul kernels get their tiles; null: the analytic heuristic. A provider whose
  // key() is not empty (tiles chosen per problem: tuning records, kiln tune's candidates) adds a
  // key field of its own ("schedule").
  std::shared_ptr<const ScheduleProvider> schedule;
  // Compile threads; 0: KILN_COMPILE_THREADS, else the core count.
  int threads = 0;
  // Called after each kernel's NVRTC compile with (kernels done, kernels to compile: those sharing
  // a binary count once), from the compile threads one call at a time; for a progress line. Not
  // part of the key.
  std::function<void(size_t, size_t)> on_kernel_done;
  // NVRTC outputs shared by compiles that hold the same memo (kiln tune's candidates: one graph,
  // one kernel's tile changed each time): a kernel it holds (same source, name, arch and NVRTC)
  // is not compiled again. Null: none shared. Not part of the key: NVRTC's output is a function
  // of what it is keyed by.
  std::shared_ptr<KernelMemo> kernel_memo;
};

// The one place a user's fallback settings become a compile's two policies (RuntimeOptions'
// `fallbacks` and `allow_fallback`; the CLI's --no-fallback and --allow-fallback): `policy`
// becomes the fusion fallbacks' policy and, when it refuses, refuses precision fallbacks too;
// otherwise precision fallbacks are allowed only with `allow_precision`.
void set_fallback_policy(CompileOptions& options, FallbackPolicy policy, bool allow_precision);

// The architectures kiln knows when no NVRTC is loaded (CUDA 13's list).
const std::vector<int>& known_archs();

// Parses "sm_90" (also "90", "sm90") into the CUDA target of sm 90, and "sm_90a" into that of sm
// 90 with suffix "a" (an arch-specific target: only where ArchFacts::specific says kiln plans
// one); the error names the text. A virtual arch ("compute_90") is refused with a message that
// names the sm_XX to give instead.
Expected<Target> parse_arch(std::string_view text);

// "sm_90".
std::string arch_name(int sm);

// Whether `target`'s suffix (a CUDA or emulate target's) is one parse_arch gives its sm: "", or
// "a" where kiln plans an arch-specific target. For a Target not made by parse_arch (an
// embedding's own, an artifact's from a cache); the error names the suffix, bounded.
Status check_suffix(const Target& target);

// Checks `sm` against `supported` (e.g. NVRTC's list); the error lists what is supported.
Status check_arch(int sm, const std::vector<int>& supported);

// The "options" key field: every option that changes the generated binary.
std::string options_key(const CompileOptions& options);

}  // namespace kiln::compiler
