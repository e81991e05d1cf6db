// Where kernels run, as one value: CUDA at an arch, or a CPU by its LLVM name.
#pragma once

#include "support/expected.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::compiler {

// An instruction family or resource kernels may use, asked of a target by name rather than by
// comparing arch numbers (Target::has, arch_has).
enum class Feature : uint8_t {
  tf32_bf16_mma,  // tf32 and bf16 mma.sync, cvt.rna.tf32 (sm_80 and newer)
  f16_mma_k16,    // f16 mma.sync m16n8k16 (sm_80 and newer; sm_75 has m16n8k8 only)
  cp_async,       // cp.async global-to-shared copies, so pipelines of several stages
  smem_96k,       // 96 KiB of dynamic shared memory per block with the opt-in (sm_75: 64 KiB,
                  // of which kiln plans 48 without it)
  tma,            // cp.async.bulk.tensor with tensor maps, mbarrier transaction counts and
                  // parity waits (sm_90 and newer)
  // Arch-specific (an "a" arch, sm_90a): code that uses them runs on that compute capability
  // only, so a target has them only with its suffix.
  wgmma,          // wgmma.mma_async from shared-memory descriptors, warpgroup fences
  setmaxnreg,     // setmaxnreg: warpgroups hand registers to each other
};

// The CUDA arch whose mode resolution and matmul paths the CPU target follows: every mode and
// path exists there.
constexpr int k_cpu_modes_as_on_sm = 90;

// Where kernels run, the one value a compile carries from the command line or the runtime's
// options to the key: its kind, the CUDA arch (and its suffix, "a" of sm_90a) or the LLVM CPU
// and its feature string, asked for features rather than compared by number.
struct Target {
  // emulate: the CUDA kernels of arch `sm`, run on this CPU under the host emulation of CUDA
  // (emulation/): lowered as for CUDA, built for the host when loaded; for tests and `kiln run
  // --emulate`, not for speed.
  enum class Kind : uint8_t { cuda, cpu, emulate };
  Kind kind = Kind::cuda;
  // cuda: compute capability x 10; 0: the GPU's (resolved before a compile). cpu: the CUDA arch
  // whose mode resolution and matmul paths the CPU target follows (check_request sets
  // k_cpu_modes_as_on_sm).
  int sm = 0;
  // cuda, emulate: the arch's suffix: "" or "a", an arch-specific target (sm_90a) whose
  // kernels may use the arch's own instructions (ArchFacts::specific) and load only on that
  // exact compute capability. A key value of its own: sm_90a's entries are not sm_90's.
  std::string suffix;
  std::string cpu;           // cpu: an LLVM CPU name; "native": this machine's (resolved, e.g.
                             // "znver4", before a compile)
  std::string cpu_features;  // cpu: the LLVM feature string; "" for the CPU's own
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_emulated() const { return kind == Kind::emulate; }
  // Whether the executable takes host pointers (cpu, emulate).
  bool on_host() const { return kind != Kind::cuda; }
  static Target cuda(int sm, std::string suffix = {}) {
    Target t;
    t.sm = sm;
    t.suffix = std::move(suffix);
    return t;
  }
  // The CPU target of LLVM CPU `cpu` and feature string `features`.
  static Target for_cpu(std::string cpu, std::string features) {
    Target t;
    t.kind = Kind::cpu;
    t.sm = k_cpu_modes_as_on_sm;
    t.cpu = std::move(cpu);
    t.cpu_features = std::move(features);
    return t;
  }
  bool operator==(const Target&) const = default;
  // Whether kernels for this target may use `feature`: a CUDA arch's from arch_table(); the CPU
  // target and a CUDA target of no arch yet (sm 0) have none.
  bool has(Feature feature) const;
  // Whether the kernels load only on compute capability sm exactly (an "a" arch).
  bool arch_specific() const { return kind != Kind::cpu && suffix == "a"; }
  // The CUDA arch with its suffix, as NVRTC and the key name it: "sm_90", "sm_90a"; "" for the
  // CPU target and a CUDA target of no arch yet.
  std::string arch() const;
  // "cuda", "cuda:sm_90", "cuda:sm_90a", "cpu:native", "cpu:x86-64-v3", "emulate:sm_90".
  std::string name() const;
};

// What kiln knows of one CUDA arch. arch_table() is the one list of archs and their facts that
// the planner, the emitters, the emulator and the CLI read.
struct ArchFacts {
  int sm = 0;                   // compute capability x 10
  int typical_sms = 0;          // SMs of the arch's common part, for choosing tile sizes
  size_t max_dynamic_smem = 0;  // bytes one block may use with the opt-in attribute
  uint32_t features = 0;        // bit (1 << Feature) for each Feature the arch has
  // The features its "a" target adds (sm_90a: wgmma, setmaxnreg); 0 where kiln plans no
  // arch-specific target for the arch, so "sm_XXa" is refused.
  uint32_t specific = 0;
  bool has(Feature feature) const { return features >> static_cast<unsigned>(feature) & 1u; }
};

// The archs CUDA 13's NVRTC compiles for, oldest first.
std::span<const ArchFacts> arch_table();
// The facts of `sm`; nullptr for an arch not in the table.
const ArchFacts* arch_facts(int sm);
// Whether arch `sm` has `feature`. check_request() refuses an arch outside the table, even one a
// newer NVRTC lists; for such an arch reached otherwise (a pass called directly), it has the
// features of sm_80 when sm >= 80, else those of sm_75.
bool arch_has(int sm, Feature feature);

// The CUDA target kiln compiles for on a device of compute capability `sm` when none is named
// (RuntimeOptions::arch empty, `kiln compile` without --arch): the arch-specific target where
// the table has one (an H100 or H200, 9.0: sm_90a), else sm_XX.
Target device_target(int sm);

// Parses "cuda", "cuda:sm_90" (or "sm_90", "cuda:sm_90a"), "cpu" (this machine's CPU),
// "cpu:NAME", "emulate" (as sm_90) and "emulate:sm_XX" (or sm_90a). The error names the text and what is accepted; whether LLVM
// knows a CPU name is cpu_machine()'s to say.
Expected<Target> parse_target(std::string_view text);

}  // namespace kiln::compiler
