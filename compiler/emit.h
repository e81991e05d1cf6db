// Pass: CUDA C++ text for planned kernels. Text only: nothing here compiles or launches.
#pragma once

#include "compiler/plan.h"

#include <string>

namespace kiln::compiler {

// Whether emitted text starts with the device prelude. Without it, the text is exactly the
// kernels, for a host emulation that supplies its own definitions of the prelude's names.
enum class Prelude : uint8_t { include, omit };

// The kernel's entry point name: "kiln_" + plan.name.
std::string entry_name(const KernelPlan& kernel);

// One kernel's source: a comment naming the fused ops, then one extern "C" __global__ function.
// Deterministic: the same graph, plan and arch give the same bytes. `graph` is static (a
// symbolic graph bound at the bucket's upper bounds); `sizes` says which sizes are symbolic.
std::string emit_kernel(const ir::Graph& graph, const ProgramPlan& plan, const KernelPlan& kernel,
                        const Sizes& sizes);

}  // namespace kiln::compiler
