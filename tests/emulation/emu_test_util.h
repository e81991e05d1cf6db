// Helpers for tests that compile hand-written kernels against the host shim directly.
#pragma once

#include "cuda_host.h"
#include "reference/rounding.h"

#include <array>
#include <string>
#include <vector>

namespace kiln::emulation::testing {

// Installs kiln's reference roundings into the directly-included shim.
inline void install_rounding() {
  static const KilnEmuApi k_api = {
      reference::tf32_rna_bits,   reference::tf32_truncate_bits, reference::bf16_from_float,
      reference::float_from_bf16, reference::f16_from_float,     reference::float_from_f16,
  };
  ::kiln_emu::g_api = &k_api;
}

// A launch's schedule (KILN_EMU_KIND, KILN_EMU_SEEDED with a seed, KILN_EMU_ADVERSARIAL).
struct LaunchSchedule {
  uint32_t kind = KILN_EMU_KIND;
  uint64_t seed = 0;
};

// Launches `kernel` (all-pointer parameters) with `args` over grid x block threads under
// `schedule`; returns the emulator's error, empty on success. Every buffer in `args` is
// registered with `bytes`, and so are `extra` (buffers a tensor map reads).
template <typename... P>
std::string launch(void (*kernel)(P...), std::vector<void*> args, std::vector<size_t> bytes,
                   unsigned grid, unsigned block, size_t smem_bytes = 0,
                   LaunchSchedule schedule = {}, std::vector<KilnEmuRange> extra = {}) {
  install_rounding();
  static void (*s_kernel)(P...) = nullptr;
  s_kernel = kernel;
  std::vector<KilnEmuRange> ranges;
  ranges.reserve(args.size() + extra.size());
  for (size_t i = 0; i < args.size(); ++i)
    ranges.push_back({args[i], static_cast<unsigned char*>(args[i]) + bytes[i]});
  ranges.insert(ranges.end(), extra.begin(), extra.end());
  KilnEmuLaunch l{};
  l.thunk = [](void** a) { ::kiln_emu::call_kernel(s_kernel, a); };
  l.args = args.data();
  l.grid[0] = grid;
  l.grid[1] = l.grid[2] = 1;
  l.block[0] = block;
  l.block[1] = l.block[2] = 1;
  l.dynamic_smem_bytes = smem_bytes;
  l.ranges = ranges.data();
  l.range_count = ranges.size();
  l.schedule = schedule.kind;
  l.schedule_seed = schedule.seed;
  return ::kiln_emu::launch(l);
}

}  // namespace kiln::emulation::testing
