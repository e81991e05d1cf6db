// Checks an emulated program against the fp64 reference on seeded random inputs.
#pragma once

#include "emulation/program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::emulation {

struct OutputCheck {
  std::string name;       // the output's value name, or "output #i"
  double rel_l2 = 0.0;    // relative L2 error against fp64
  double max_abs = 0.0;   // largest absolute error
  double tolerance = 0.0; // relative L2 allowed for this output
  bool ok = false;        // rel_l2 <= tolerance (false for NaN)
};

struct CheckReport {
  bool ok = false;         // every output within its tolerance
  double tolerance = 0.0;  // the loosest output tolerance
  ir::Precision precision = ir::Precision::highest;  // the resolved graph mode
  uint64_t seed = 0;
  std::vector<OutputCheck> outputs;
};

// Runs `program` and the fp64 reference on reference::random_inputs(graph, seed) (uniform in
// [-1, 1]) and compares each output with the reference's tolerance for the resolved mode
// (reference::output_tolerance: highest 1e-5, tf32x3 2e-5, high 2e-3, medium 1.5e-2, anything
// touching f16/bf16 1.5e-2). Errors come from the emulated run or the reference (memory limit).
Expected<CheckReport> check_program(const ir::Graph& graph, const Program& program, uint64_t seed);

}  // namespace kiln::emulation
