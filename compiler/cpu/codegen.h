// CPU code generation: every kernel of a program plan as an LLVM IR function (IRBuilder only;
// optimising and compiling to object code is compiler/cpu/jit.h's).
#pragma once

#include "compiler/artifact.h"
#include "compiler/plan.h"
#include "compiler/sizes.h"
#include "support/expected.h"

#include <string>
#include <vector>

namespace llvm {
class Module;
}

namespace kiln::compiler::cpu {

// What code generation needs of the target CPU: its vector width in floats and the matmul
// micro-kernel's register tile (MR rows by NR columns, NR a multiple of the width).
struct CpuFacts {
  int vector_width = 8;  // floats: 4 (SSE, NEON), 8 (AVX2), 16 (AVX-512)
  int mr = 6, nr = 16;
  // The blocking of the GEMM: MC rows of A and KC of K packed per pass, NC columns per work item.
  int mc = 96, kc = 256, nc = 256;
};

// Every kernel is `void ENTRY(void* const* buffers, const int64_t* dims, int64_t begin,
// int64_t end, float* scratch)`: buffers in the plan's parameter order, the symbols' values
// (none for a static graph), the work items [begin, end) to compute, and `scratch_floats` floats
// of the calling thread's own. Items are independent: any split over threads gives the same
// result, bit for bit.
struct CpuKernel {
  std::string name;   // kiln's name, e.g. "k0_matmul_tf32_64x64"
  std::string entry;  // "kiln_" + name
  std::vector<KernelParam> params;
  std::vector<SizeTerm> items;  // the work items: the product of these terms at the dims
  uint64_t scratch_floats = 0;
  bool operator==(const CpuKernel&) const = default;
};

// Builds `module`'s functions for every kernel of `plan` (of `graph`, bound at the bucket's upper
// bounds, with `sizes` its extents). Fails only where the module does not pass LLVM's verifier:
// a bug of the builders (tests/fuzz/fuzz_cpu.cpp fuzzes them for it).
Expected<std::vector<CpuKernel>> build_module(llvm::Module& module, const ir::Graph& graph,
                                              const ProgramPlan& plan, const Sizes& sizes,
                                              const CpuFacts& facts);

}  // namespace kiln::compiler::cpu
