// Checks an emulated program against the fp64 reference on seeded random inputs.
#pragma once

#include "emulation/program.h"
#include "reference/check.h"

#include <cstdint>

namespace kiln::emulation {

using reference::CheckReport;
using reference::OutputCheck;

// reference::check_against_fp64 with the program's emulated run (under `schedule`) and its
// resolved graph mode. Errors come from the emulated run or the reference (memory limit).
Expected<CheckReport> check_program(const ir::Graph& graph, const Program& program, uint64_t seed,
                                    const Schedule& schedule = {});

}  // namespace kiln::emulation
