// compile_cpu(): the CPU target's lowering: the passes shared with CUDA (plan_program), then
// LLVM IR, O3 and object code.
#include "compiler/cpu/impl.h"

#include "compiler/compiler.h"
#include "compiler/cpu/codegen.h"
#include "compiler/target.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

namespace kiln::compiler::cpu::impl {

namespace {

Expected<PlannedProgram> lower_for_cpu(const ir::Graph& graph, const CompileRequest& request) {
  if (request.sm != k_cpu_modes_as_on_sm) {
    return make_error("a CPU compile needs a request checked as on ",
                      arch_name(k_cpu_modes_as_on_sm), " (this one: ", arch_name(request.sm), ")");
  }
  auto planned = plan_program(graph, request);
  if (!planned) return planned.error();
  planned->precision.decision += " (cpu: modes as on " + arch_name(k_cpu_modes_as_on_sm) + ")";
  return planned;
}

// A lowered program's module: one function per kernel.
struct Built {
  std::unique_ptr<llvm::LLVMContext> context = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> module = std::make_unique<llvm::Module>("kiln", *context);
  std::vector<CpuKernel> kernels;
};

Expected<Built> build(const PlannedProgram& lowered, const CpuMachine& machine) {
  Built built;
  auto kernels =
      build_module(*built.module, lowered.bound, lowered.plan, lowered.sizes, machine.facts);
  if (!kernels) return kernels.error();
  built.kernels = std::move(*kernels);
  return built;
}

}  // namespace

Expected<Artifact> compile_cpu(const ir::Graph& graph, const CompileRequest& request,
                               const CpuMachine& machine) {
  const CompileOptions& options = request.options;
  auto lowered = lower_for_cpu(graph, request);
  if (!lowered) return lowered.error();
  auto built = build(*lowered, machine);
  if (!built) return built.error();
  llvm::Module& module = *built->module;
  std::vector<CpuKernel>* kernels = &built->kernels;
  auto object = compile_object(module, machine);
  if (!object) return object.error();

  const ProgramPlan& plan = lowered->plan;
  Artifact artifact;
  artifact.target = Target::for_cpu(machine.cpu, machine.features);
  artifact.arch = target_name(machine);
  artifact.precision = std::string(ir::to_string(lowered->precision.graph_mode));
  artifact.decision = lowered->precision.decision;
  artifact.nvrtc_version = "LLVM " + llvm_version();
  artifact.fallbacks = lowered->diagnostics.fallbacks;
  artifact.input_bytes = plan.input_bytes;
  artifact.output_bytes = plan.output_bytes;
  artifact.temporary_bytes = plan.temporary_bytes;
  artifact.workspace_bytes = plan.workspace_bytes;
  for (const DimRange& range : options.bucket) artifact.bucket.push_back({range.lo, range.hi});
  artifact.input_sizes = plan.input_sizes;
  artifact.output_sizes = plan.output_sizes;
  artifact.temporary_sizes = plan.temporary_sizes;
  artifact.object = std::move(*object);
  for (CpuKernel& k : *kernels) {
    KernelArtifact out;
    out.name = k.name;
    out.entry = k.entry;
    out.params = k.params;
    out.items = std::move(k.items);
    out.scratch_floats = k.scratch_floats;
    artifact.kernels.push_back(std::move(out));
  }
  return artifact;
}

Expected<std::string> cpu_ir(const ir::Graph& graph, const CompileRequest& request,
                             const CpuMachine& machine) {
  auto lowered = lower_for_cpu(graph, request);
  if (!lowered) return lowered.error();
  auto built = build(*lowered, machine);
  if (!built) return built.error();
  return module_text(*built->module);
}

}  // namespace kiln::compiler::cpu::impl
