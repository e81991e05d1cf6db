// --target: CUDA (the default) or the CPU through LLVM.
#include "tools/cli.h"

#include "compiler/target.h"

namespace kiln::tools {

void add_target_option(CLI::App* cmd, std::string& target) {
  cmd->add_option("--target", target,
                  "cuda (default), cpu (this machine's CPU through LLVM) or cpu:NAME (an LLVM CPU, "
                  "e.g. x86-64-v3)");
}

std::optional<std::optional<compiler::cpu::CpuMachine>> parse_cpu_target(const std::string& target,
                                                                         const std::string& command,
                                                                         int& exit_code) {
  exit_code = k_exit_usage;
  auto parsed = compiler::parse_target(target);
  if (!parsed) {
    // The forms the CLI takes (the library's cuda:sm_XX and emulate:sm_XX are flags here).
    print_error(command + ": --target " + target + ": unknown target (expected cuda or "
                "cpu[:NAME]; a CUDA arch is --arch sm_XX, the emulator `kiln run --emulate`)");
    return std::nullopt;
  }
  if (parsed->is_emulated()) {
    print_error(command + ": --target " + target + ": the emulator is `kiln run --emulate [--arch "
                "sm_XX]` (RuntimeOptions::target \"emulate:sm_XX\" when embedding)");
    return std::nullopt;
  }
  if (!parsed->is_cpu()) {
    if (parsed->sm == 0) return std::optional<compiler::cpu::CpuMachine>{};
    print_error(command + ": --target " + target + ": give the CUDA arch with --arch");
    return std::nullopt;
  }
  auto machine = compiler::cpu::cpu_machine(parsed->cpu);
  if (!machine) {
    // The plugin that would say whether the name is known did not load: this machine's
    // failure (the message says which file, and KILN_CPU_PLUGIN), not the user's.
    if (!compiler::cpu::llvm_version()) exit_code = k_exit_failure;
    print_error(command + ": --target " + target + ": " + machine.error().message);
    return std::nullopt;
  }
  return std::optional<compiler::cpu::CpuMachine>{std::move(*machine)};
}

}  // namespace kiln::tools
