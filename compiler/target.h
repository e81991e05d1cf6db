// Where kernels run, as one value: CUDA at an arch, or a CPU by its LLVM name.
#pragma once

#include "support/expected.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::compiler {

struct Target {
  enum class Kind : uint8_t { cuda, cpu };
  Kind kind = Kind::cuda;
  int sm = 0;       // cuda: compute capability x 10; 0: the GPU's
  std::string cpu;  // cpu: an LLVM CPU name; "native": this machine's
  bool is_cpu() const { return kind == Kind::cpu; }
  // "cuda", "cuda:sm_90", "cpu:native", "cpu:x86-64-v3".
  std::string name() const;
};

// What kiln knows of one CUDA arch. arch_table() is the one list of archs and their facts that
// the planner, the emitters, the emulator and the CLI read.
struct ArchFacts {
  int sm = 0;                   // compute capability x 10
  int typical_sms = 0;          // SMs of the arch's common part, for choosing tile sizes
  size_t max_dynamic_smem = 0;  // bytes one block may use with the opt-in attribute
  bool sm80_mma = false;        // tf32/bf16 mma.sync, f16 m16n8k16, cvt.rna.tf32, cp.async
};

// The archs CUDA 13's NVRTC compiles for, oldest first.
std::span<const ArchFacts> arch_table();
// The facts of `sm`; nullptr for an arch not in the table.
const ArchFacts* arch_facts(int sm);
// Whether `sm` has Ampere's tensor-core instructions and cp.async. check_request() refuses an
// arch outside the table, even one a newer NVRTC lists; for such an arch reached otherwise (a
// pass called directly), sm >= 80 decides.
bool has_sm80_mma(int sm);

// The CUDA arch whose mode resolution and matmul paths the CPU target follows: every mode and
// path exists there.
constexpr int k_cpu_modes_as_on_sm = 90;

// Parses "cuda", "cuda:sm_90" (or "sm_90"), "cpu" (this machine's CPU) and "cpu:NAME". The error
// names the text and what is accepted; whether LLVM knows a CPU name is cpu_machine()'s to say.
Expected<Target> parse_target(std::string_view text);

}  // namespace kiln::compiler
