// The CPU target's implementation inside the LLVM plugin (not for use outside compiler/cpu):
// what compiler/cpu/jit.h and compile.h forward to through compiler/cpu/plugin.h.
#pragma once

#include "compiler/cpu/compile.h"
#include "compiler/cpu/jit.h"

namespace llvm {
class Module;
}  // namespace llvm

namespace kiln::compiler::cpu::impl {

Expected<CpuMachine> cpu_machine(const std::string& cpu, const std::string& features);
std::string llvm_version();
Status runs_here(const std::string& cpu);
Expected<std::unique_ptr<LoadedObject>> load_object(const std::string& object,
                                                    const std::vector<std::string>& entries);
Expected<Artifact> compile_cpu(const ir::Graph& graph, const CompileRequest& request,
                               const CpuMachine& machine);
Expected<std::string> cpu_ir(const ir::Graph& graph, const CompileRequest& request,
                             const CpuMachine& machine);

// The module's IR as text.
std::string module_text(const llvm::Module& module);
// Optimises `module` at O3 for `machine` (new pass manager) and compiles it to an ELF object.
Expected<std::string> compile_object(llvm::Module& module, const CpuMachine& machine);

}  // namespace kiln::compiler::cpu::impl
