// Emulated kernels against the fp64 reference: per-output relative L2, max error, tolerance.
#include "emulation/check.h"

#include "reference/audit.h"
#include "reference/execute.h"
#include "reference/metrics.h"

#include <algorithm>
#include <cmath>

namespace kiln::emulation {

Expected<CheckReport> check_program(const ir::Graph& graph, const Program& program, uint64_t seed) {
  std::vector<reference::Tensor> inputs = reference::random_inputs(graph, seed);
  auto expected = reference::run(graph, inputs, reference::RunMode::fp64());
  if (!expected) return make_error("reference: ", expected.error().message);
  auto actual = program.run(inputs);
  if (!actual) return actual.error();

  CheckReport report;
  report.precision = program.lowered().precision.graph_mode;
  report.seed = seed;
  report.ok = true;
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    ir::NodeId id = graph.outputs()[i];
    OutputCheck check;
    check.name = graph.node(id).name.empty() ? "output #" + std::to_string(i) : graph.node(id).name;
    check.rel_l2 = reference::relative_l2((*actual)[i].values, (*expected)[i].values);
    check.max_abs = reference::max_abs_error((*actual)[i].values, (*expected)[i].values);
    check.tolerance = reference::output_tolerance(graph, id, report.precision);
    check.ok = check.rel_l2 <= check.tolerance;  // false for NaN
    report.ok = report.ok && check.ok;
    report.tolerance = std::max(report.tolerance, check.tolerance);
    report.outputs.push_back(std::move(check));
  }
  return report;
}

}  // namespace kiln::emulation
