// How the emulator orders a block's threads and lands its cp.async copies: the kind schedule
// every launch used to run, a seeded random one, and an adversarial one (shim/kiln_emu_abi.h).
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::emulation {

struct Schedule {
  enum class Mode : uint8_t {
    kind,         // threads in order, then reversed; copies land at their wait (the latest)
    seeded,       // orders, run-ahead warps and landing points drawn from `seed`
    adversarial,  // copies land at issue; the last warp first, running ahead, lanes from the last
  };
  Mode mode = Mode::kind;
  uint64_t seed = 0;  // seeded
  // The multiprocessors a persistent kernel (LaunchShape::persistent) is launched for: it runs
  // min(its work tiles, sm_count) blocks, as the runtime does on a device with that many (an
  // H100 SXM's 132 by default; 1 to k_max_sm_count).
  uint32_t sm_count = 132;

  static Schedule seeded_by(uint64_t seed) { return {Mode::seeded, seed, 132}; }
  static Schedule adversarial() { return {Mode::adversarial, 0, 132}; }
};

// The most multiprocessors an emulated device may have (Schedule::sm_count).
constexpr uint32_t k_max_sm_count = 1024;

// "kind", "adversarial", or a seed (decimal digits, below 2^64); anything else is an error that
// names what is accepted.
Expected<Schedule> parse_schedule(std::string_view text);
// The text parse_schedule reads back: "kind", "adversarial" or the seed.
std::string to_string(const Schedule& schedule);

}  // namespace kiln::emulation
