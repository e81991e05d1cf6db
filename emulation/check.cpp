// Emulated kernels against the fp64 reference.
#include "emulation/check.h"

namespace kiln::emulation {

Expected<CheckReport> check_program(const ir::Graph& graph, const Program& program, uint64_t seed,
                                    const Schedule& schedule) {
  return reference::check_against_fp64(
      graph, program.lowered().precision.graph_mode, seed,
      [&](const std::vector<reference::Tensor>& inputs) { return program.run(inputs, schedule); });
}

}  // namespace kiln::emulation
