// The Executable behind kiln.h: an artifact plus the CUDA modules loaded for it per context.
#pragma once

#include "kiln/kiln.h"
#include "runtime/compile_service.h"

#include <memory>

namespace kiln::runtime {

// Wraps a compile result; modules are loaded once per CUDA context (by context id), by prepare()
// or the first run in that context.
std::shared_ptr<Executable> make_executable(const ir::Graph& graph, CompileResult result,
                                            int device);

// The byte offset of each temporary in the workspace (each 256-byte aligned) and the total.
std::vector<uint64_t> temporary_offsets(const compiler::Artifact& artifact, uint64_t* total);

// Checks run() arguments against the specs: counts, null pointers, dtypes, shapes; the error
// names the tensor ("input 'x' has shape [4, 8], expected [4, 16]").
Status check_tensors(const std::vector<TensorSpec>& specs, const std::vector<TensorRef>& refs,
                     const char* role);

// The alignment every tensor pointer needs: tile loads and stores are 16 bytes wide.
inline constexpr uintptr_t k_tensor_alignment = 16;

// Checks each pointer's alignment; the error names the tensor and its address ("input 'x' at
// 0x7f0000000004 is not 16-byte aligned: ...").
Status check_alignment(const std::vector<TensorSpec>& specs, const std::vector<TensorRef>& refs,
                       const char* role);

}  // namespace kiln::runtime
