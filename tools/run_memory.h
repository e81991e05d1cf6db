// The host memory of a `kiln run` (run --max-memory), estimated from its graph before anything
// of the run is allocated or compiled.
#pragma once

#include "compiler/options.h"
#include "ir/graph.h"

#include <cstdint>

namespace kiln::tools {

// The host memory a run of `graph` (static: bound to its dims) holds at its peak, in bytes (an
// fp64 tensor of i64 holds its exact values beside its doubles: 16 bytes an element): the
// largest of its three phases (reference::check_against_fp64):
// 1. every input drawn as an fp64 tensor, beside those read from files (`read_from_files`
//    bytes; reference::make_inputs);
// 2. the fp64 reference beside those inputs, as reference::run holds it: its own copy of the
//    inputs, each result freed after its last use, a matmul's per-batch copies of its operands
//    and result, the outputs copied out at the end;
// 3. the kernels' run beside the inputs and the reference's outputs: the inputs' and outputs'
//    bytes in their dtypes, `host_temporaries`, and the outputs read back as doubles.
// Not counted: the process itself (with LLVM's code and the JIT, about 64 MB) and the CPU
// kernels' GEMM scratch (a few hundred KB per thread). Measured with --target cpu as peak RSS
// less that of a run of a 1x16 by 16x16 matmul (64 MB): the estimate is 1 to 2% above it on
// mlp (103.1 MB estimated, 101.5 MB used), gated_mlp and a 2048-row mlp, 9 to 20% above it on
// llama_layer (12.5 MB, 11.3 MB), llama_layer at batch 32, bert_layer and attention;
// reference::estimate_cost (every tensor at once, as doubles) is half of what mlp uses and 3.5
// times what llama_layer at batch 32 does.
int64_t run_host_bytes(const ir::Graph& graph, int64_t read_from_files, int64_t host_temporaries);

// The bytes of the temporaries the kernels of `bound` (static) keep in host memory, each as
// CpuProgram allocates it: planned as the CPU target (`cpu`) or the CUDA plan the emulator runs
// plans them at `options`; every intermediate tensor where the graph does not plan (the compile
// then says why).
int64_t host_temporary_bytes(const ir::Graph& bound, const compiler::CompileOptions& options,
                             bool cpu);

}  // namespace kiln::tools
