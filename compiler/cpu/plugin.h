// The LLVM plugin's one entry point: a table of the CPU target's functions. The plugin
// (libkiln_cpu_llvm.so) holds compiler/cpu with LLVM; the loader (loader.cpp) opens it with dlopen
// on the first use of the CPU target. Both sides are built from the same sources: the table
// carries the build's codegen version, and a plugin from another build is refused.
#pragma once

#include "compiler/cpu/compile.h"
#include "compiler/cpu/jit.h"

#include <string_view>

namespace kiln::compiler::cpu {

// Changes whenever the table's layout does.
inline constexpr uint32_t k_plugin_abi = 3;

struct PluginApi {
  uint32_t abi = k_plugin_abi;
  std::string_view (*codegen_version)();  // cpu_codegen_version() of the build it came from
  Expected<CpuMachine> (*cpu_machine)(const std::string& cpu, const std::string& features);
  std::string (*llvm_version)();
  Expected<std::unique_ptr<LoadedObject>> (*load_object)(const std::string& object,
                                                         const std::vector<std::string>& entries);
  Expected<Artifact> (*compile_cpu)(const ir::Graph& graph, const CompileRequest& request,
                                    const CpuMachine& machine);
  Expected<std::string> (*cpu_ir)(const ir::Graph& graph, const CompileRequest& request,
                                  const CpuMachine& machine);
  Status (*runs_here)(const std::string& cpu);
};

}  // namespace kiln::compiler::cpu

// The symbol the loader looks up.
extern "C" const kiln::compiler::cpu::PluginApi* kiln_cpu_plugin_v1();
