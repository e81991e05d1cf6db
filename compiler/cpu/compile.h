// The CPU target's compile: the target-independent passes (precision, attention, fusion, buffer
// plan) as for CUDA, then LLVM IR, O3 and object code in one Artifact.
#pragma once

#include "compiler/artifact.h"
#include "compiler/cpu/jit.h"
#include "compiler/options.h"
#include "compiler/request.h"
#include "ir/graph.h"
#include "support/expected.h"

#include <string>

namespace kiln::compiler::cpu {

// "cpu:x86-64-v3".
inline std::string target_name(const CpuMachine& machine) { return "cpu:" + machine.cpu; }

// Compiles `graph` for `machine` from a checked request (compiler/request.h: modes resolved as
// on sm_90, auto -> high). Modes keep their meaning: operands are rounded as the mode's
// tensor-core path rounds them.
Expected<Artifact> compile_cpu(const ir::Graph& graph, const CompileRequest& request,
                               const CpuMachine& machine);
// check_request() (as on sm_90, whatever options.target.sm says) then compile_cpu(): its errors
// are the caller's to fix too (exit 2): a symbolic graph without a bucket, a refused attention
// fallback.
// The request overload refuses a request checked for another arch.
Expected<Artifact> compile_cpu(const ir::Graph& graph, const CompileOptions& options,
                               const CpuMachine& machine);

// The generated LLVM IR of every kernel, before optimisation (`kiln emit --target cpu --llvm`).
Expected<std::string> cpu_ir(const ir::Graph& graph, const CompileRequest& request,
                             const CpuMachine& machine);
Expected<std::string> cpu_ir(const ir::Graph& graph, const CompileOptions& options,
                             const CpuMachine& machine);

}  // namespace kiln::compiler::cpu
