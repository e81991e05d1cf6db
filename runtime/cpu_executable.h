// The Executable of the CPU target: a compiled bucket (or static graph) run on host memory.
#pragma once

#include "kiln/kiln.h"
#include "runtime/compile_service.h"

#include <memory>

namespace kiln::runtime {

// Loads the result's object code (fails when it does not link or lacks an entry).
Expected<std::shared_ptr<Executable>> make_cpu_executable(const ir::Graph& graph,
                                                          CompileResult result);

}  // namespace kiln::runtime
