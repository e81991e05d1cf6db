// The LLVM plugin's table (built into libkiln_cpu_llvm.so only).
#include "compiler/cpu/plugin.h"

#include "compiler/cpu/impl.h"
#include "compiler/key.h"

extern "C" __attribute__((visibility("default"))) const kiln::compiler::cpu::PluginApi*
kiln_cpu_plugin_v1() {
  using namespace kiln::compiler;
  static const cpu::PluginApi api{cpu::k_plugin_abi, &cpu_codegen_version,  &cpu::impl::cpu_machine,
                                  &cpu::impl::llvm_version, &cpu::impl::load_object,
                                  &cpu::impl::compile_cpu,  &cpu::impl::cpu_ir,
                                  &cpu::impl::runs_here};
  return &api;
}
