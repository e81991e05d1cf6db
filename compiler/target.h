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
};

// The CUDA arch whose mode resolution and matmul paths the CPU target follows: every mode and
// path exists there.
constexpr int k_cpu_modes_as_on_sm = 90;

// Where kernels run, the one value a compile carries from the command line or the runtime's
// options to the key: its kind, the CUDA arch (and its suffix, "a" of a future sm_90a) or the
// LLVM CPU and its feature string, asked for features rather than compared by number.
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
  std::string suffix;        // cuda: an arch suffix ("" today; kiln plans no sm_XXa code yet)
  std::string cpu;           // cpu: an LLVM CPU name; "native": this machine's (resolved, e.g.
                             // "znver4", before a compile)
  std::string cpu_features;  // cpu: the LLVM feature string; "" for the CPU's own
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_emulated() const { return kind == Kind::emulate; }
  // Whether the executable takes host pointers (cpu, emulate).
  bool on_host() const { return kind != Kind::cuda; }
  static Target cuda(int sm) {
    Target t;
    t.sm = sm;
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
  // "cuda", "cuda:sm_90", "cpu:native", "cpu:x86-64-v3", "emulate:sm_90".
  std::string name() const;
};

// What kiln knows of one CUDA arch. arch_table() is the one list of archs and their facts that
// the planner, the emitters, the emulator and the CLI read.
struct ArchFacts {
  int sm = 0;                   // compute capability x 10
  int typical_sms = 0;          // SMs of the arch's common part, for choosing tile sizes
  size_t max_dynamic_smem = 0;  // bytes one block may use with the opt-in attribute
  uint32_t features = 0;        // bit (1 << Feature) for each Feature the arch has
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

// Parses "cuda", "cuda:sm_90" (or "sm_90"), "cpu" (this machine's CPU), "cpu:NAME", "emulate"
// (as sm_90) and "emulate:sm_XX". The error names the text and what is accepted; whether LLVM
// knows a CPU name is cpu_machine()'s to say.
Expected<Target> parse_target(std::string_view text);

}  // namespace kiln::compiler
