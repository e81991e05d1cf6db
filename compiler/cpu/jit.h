// The CPU target's machine and object loading, as the rest of kiln sees them. LLVM itself lives in
// a plugin (libkiln_cpu_llvm.so, compiler/cpu/plugin.h) loaded on the first call, so that
// programs that never use the CPU target do not pay for loading LLVM at start-up.
#pragma once

#include "compiler/cpu/codegen.h"
#include "support/expected.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::compiler::cpu {

// A CPU as LLVM names it: "x86-64-v3", "znver4", or the host's ("native" resolved). `features`
// is LLVM's feature string for it ("+avx2,+fma,..."), empty for the CPU's own set.
struct CpuMachine {
  std::string cpu;
  std::string features;
  CpuFacts facts;  // vector width and blocking for this CPU
};

// Resolves a CPU name ("native": the host's name and features) against LLVM's tables for this
// host's architecture, with `features` (LLVM's "+avx2,..." string) for a named CPU. Fails for a
// name LLVM does not know here (the message names it), or when the plugin cannot be loaded.
Expected<CpuMachine> cpu_machine(const std::string& cpu, const std::string& features = "");

// Whether this machine can run code compiled for LLVM CPU `cpu`: fails naming the features the
// CPU has and this one lacks (code for it would die of SIGILL), or when the plugin cannot load.
Status runs_here(const std::string& cpu);

// The plugin's LLVM version, "16.0.6"; fails when the plugin cannot be loaded.
Expected<std::string> llvm_version();

// A kernel's entry point.
using KernelFunction = void (*)(void* const* buffers, const int64_t* dims, int64_t begin,
                                int64_t end, float* scratch);

// Object code loaded into a fresh JITDylib of the process's one LLJIT; its symbols resolved
// against an allow-list of the process's (the math library, memcpy/memset, half conversions).
// Removed from the JIT on destruction.
class LoadedObject {
 public:
  // Fails when the object is not an object file, imports a symbol off the allow-list (named in
  // the message; nothing of it is linked), does not link (a corrupt payload), an entry is
  // missing, or the plugin cannot be loaded.
  static Expected<std::unique_ptr<LoadedObject>> load(const std::string& object,
                                                      const std::vector<std::string>& entries);
  virtual ~LoadedObject() = default;
  // The entries in the order asked for.
  virtual const std::vector<KernelFunction>& functions() const = 0;
};

}  // namespace kiln::compiler::cpu
