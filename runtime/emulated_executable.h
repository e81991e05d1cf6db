// The Executable of the emulate target: the CUDA kernels of one arch, built for the host by the
// emulator (emulation/) and run on host memory, for tests and `kiln run --emulate`.
#pragma once

#include "emulation/schedule.h"
#include "kiln/kiln.h"
#include "runtime/compile_service.h"

#include <memory>

namespace kiln::runtime {

// Builds the result's kernel text for the host (the host C++ compiler, $KILN_EMU_CXX or g++;
// seconds) and wraps it. Runs take host pointers, as on the CPU target; `schedule` orders each
// block's threads and lands its cp.async copies. Fails when the artifact is not an emulate
// target's, does not fit the graph, or its text does not build.
Expected<std::shared_ptr<Executable>> make_emulated_executable(const ir::Graph& graph,
                                                               CompileResult result,
                                                               emulation::Schedule schedule = {});

}  // namespace kiln::runtime
