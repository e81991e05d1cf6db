// Outputs of any runner against the fp64 reference: per-output relative L2, max error, tolerance.
#include "reference/check.h"

#include "reference/audit.h"
#include "reference/execute.h"
#include "reference/metrics.h"

#include <algorithm>

namespace kiln::reference {

Runner bytes_runner(const ir::Graph& graph, ByteRunner run) {
  return [graph, run = std::move(run)](const std::vector<Tensor>& inputs)
             -> Expected<std::vector<Tensor>> {
    std::vector<Bytes> bytes;
    for (const Tensor& t : inputs) {
      bytes.emplace_back(static_cast<size_t>(t.type().bytes()));
      store_device_bytes(t, bytes.back().data());
    }
    auto outputs = run(bytes);
    if (!outputs) return outputs.error();
    std::vector<Tensor> tensors;
    for (size_t o = 0; o < outputs->size() && o < graph.outputs().size(); ++o) {
      const ir::TensorType& type = graph.node(graph.outputs()[o]).type;
      if ((*outputs)[o].size() != static_cast<size_t>(type.bytes())) {
        return make_error("output #", std::to_string(o), " has ",
                          std::to_string((*outputs)[o].size()), " bytes, expected ",
                          std::to_string(type.bytes()));
      }
      tensors.push_back(load_device_bytes(type, (*outputs)[o].data()));
    }
    return tensors;
  };
}

Expected<CheckReport> check_against_fp64(const ir::Graph& graph, ir::Precision precision,
                                         uint64_t seed, const Runner& run) {
  auto checked = check_against_fp64(graph, precision, InputSource{seed, {}}, run);
  if (!checked) return checked.error();
  return std::move(checked->report);
}

Expected<CheckRun> check_against_fp64(const ir::Graph& graph, ir::Precision precision,
                                      InputSource source, const Runner& run) {
  // The reference's own memory limit, checked before the inputs are drawn.
  if (Status s = check_limits(graph, RunLimits{}); !s) return s.error();
  uint64_t seed = source.seed;
  auto inputs = make_inputs(graph, std::move(source));
  if (!inputs) return inputs.error();
  auto expected = reference::run(graph, *inputs, RunMode::fp64());
  if (!expected) return make_error("reference: ", expected.error().message);
  auto actual = run(*inputs);
  if (!actual) return actual.error();
  if (actual->size() != graph.outputs().size()) {
    return make_error("the run returned ", std::to_string(actual->size()), " outputs, expected ",
                      std::to_string(graph.outputs().size()));
  }

  CheckReport report;
  report.precision = precision;
  report.seed = seed;
  report.ok = true;
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    ir::NodeId id = graph.outputs()[i];
    OutputCheck check;
    check.name = graph.node(id).name.empty() ? "output #" + std::to_string(i) : graph.node(id).name;
    check.rel_l2 = relative_l2((*actual)[i], (*expected)[i]);
    check.max_abs = max_abs_error((*actual)[i], (*expected)[i]);
    check.tolerance = output_tolerance(graph, id, precision);
    check.ok = check.rel_l2 <= check.tolerance;  // false for NaN
    report.ok = report.ok && check.ok;
    report.tolerance = std::max(report.tolerance, check.tolerance);
    report.outputs.push_back(std::move(check));
  }
  return CheckRun{std::move(report), std::move(*actual), std::move(*expected)};
}

}  // namespace kiln::reference
