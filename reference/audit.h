// Precision audit: a mode's emulated rounding against the fp64 reference on seeded random inputs.
#pragma once

#include "ir/graph.h"
#include "reference/execute.h"
#include "support/expected.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::reference {

// Relative-L2 tolerances of f32 graphs per matmul precision, and of anything touching f16/bf16.
inline constexpr double k_tolerance_highest = 1e-5;
inline constexpr double k_tolerance_tf32x3 = 2e-5;
inline constexpr double k_tolerance_high = 2e-3;
inline constexpr double k_tolerance_medium = 1.5e-2;
inline constexpr double k_tolerance_half = 1.5e-2;

// The tolerance of a resolved precision (asserts on `automatic`).
double tolerance(ir::Precision precision);

// The tolerance of one output under graph-wide `precision`: the loosest among the f32 matmuls it
// depends on (each at its own `precision=` or the graph's) and k_tolerance_half when any tensor it
// depends on is f16/bf16; k_tolerance_highest when it depends on neither (fp32 elementwise only).
double output_tolerance(const ir::Graph& graph, ir::NodeId output, ir::Precision precision);

struct OutputAudit {
  std::string name;
  double rel_l2 = 0.0;
  double max_abs = 0.0;
  double tolerance = 0.0;
  bool ok = true;  // rel_l2 <= tolerance (false for NaN)
};

struct AuditReport {
  ir::Precision precision = ir::Precision::highest;
  uint64_t seed = 0;
  std::vector<OutputAudit> outputs;
  // One line per output past its tolerance, e.g. "output 'y': relative l2 error 3.1e-03 exceeds
  // the tolerance 2e-03 of precision high".
  std::vector<std::string> warnings;
};

// Runs `graph` on random_inputs(graph, seed) in fp64 and emulated at `precision` (resolved, not
// `automatic`) and compares each output. Errors come from run() (unresolved precision, memory
// limit).
Expected<AuditReport> audit(const ir::Graph& graph, ir::Precision precision, uint64_t seed,
                            RunLimits limits = {});

}  // namespace kiln::reference
