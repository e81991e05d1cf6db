// build_module(): one LLVM function per kernel of the plan, by group kind.
#include "compiler/cpu/codegen.h"

#include "compiler/cpu/codegen_internal.h"

#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

namespace kiln::compiler::cpu {

Expected<std::vector<CpuKernel>> build_module(llvm::Module& module, const ir::Graph& graph,
                                              const ProgramPlan& plan, const Sizes& sizes,
                                              const CpuFacts& facts) {
  std::vector<CpuKernel> kernels;
  for (const KernelPlan& kernel : plan.kernels) {
    detail::KernelBuilder kb(module, graph, plan, kernel, sizes, facts);
    detail::WorkShape shape;
    switch (kernel.group.kind) {
      case GroupKind::elementwise:
        shape = detail::build_elementwise(kb);
        break;
      case GroupKind::softmax:
      case GroupKind::reduce:
      case GroupKind::norm:
        shape = detail::build_rows(kb);
        break;
      case GroupKind::scan:
        shape = detail::build_scan(kb);
        break;
      case GroupKind::matmul:
        shape = detail::build_matmul(kb);
        break;
      case GroupKind::attention:
        shape = detail::build_attention(kb);
        break;
      case GroupKind::gather:
        shape = detail::build_gather(kb);
        break;
    }
    kb.finish();
    CpuKernel k;
    k.name = kernel.name;
    k.entry = "kiln_" + kernel.name;
    k.params = kernel.params;
    k.items = std::move(shape.items);
    k.scratch_floats = shape.scratch_floats;
    kernels.push_back(std::move(k));
  }
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(module, &os)) {
    // A bug in the builders, not in the user's graph; the message says where.
    return make_error("cpu codegen: the generated module is not valid LLVM IR: ", os.str());
  }
  return kernels;
}

}  // namespace kiln::compiler::cpu
