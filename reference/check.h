// Checks a graph's outputs, computed by anything (emulated kernels, a GPU), against fp64.
#pragma once

#include "ir/graph.h"
#include "reference/audit.h"
#include "reference/tensor.h"
#include "support/expected.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::reference {

struct OutputCheck {
  std::string name;        // the output's value name, or "output #i"
  double rel_l2 = 0.0;     // relative L2 error against fp64
  double max_abs = 0.0;    // largest absolute error
  double tolerance = 0.0;  // relative L2 allowed for this output
  bool ok = false;         // rel_l2 <= tolerance (false for NaN)
};

struct CheckReport {
  bool ok = false;         // every output within its tolerance
  double tolerance = 0.0;  // the loosest output tolerance
  ir::Precision precision = ir::Precision::highest;  // the resolved graph mode
  uint64_t seed = 0;
  std::vector<OutputCheck> outputs;
};

// Computes the graph's outputs from its inputs; its errors are passed on.
using Runner = std::function<Expected<std::vector<Tensor>>(const std::vector<Tensor>&)>;

using Bytes = std::vector<unsigned char>;
// Computes the graph's outputs in device layout (see store_device_bytes) from its inputs'.
using ByteRunner = std::function<Expected<std::vector<Bytes>>(const std::vector<Bytes>&)>;

// A Runner over device-layout bytes, e.g. kiln::Executable::run_host on a GPU.
Runner bytes_runner(const ir::Graph& graph, ByteRunner run);

// Runs `run` and the fp64 reference on random_inputs(graph, seed) (uniform in [-1, 1]) and
// compares each output with output_tolerance for `precision` (resolved: highest 1e-5, tf32x3
// 2e-5, high 2e-3, medium 1.5e-2, anything touching f16/bf16 1.5e-2).
Expected<CheckReport> check_against_fp64(const ir::Graph& graph, ir::Precision precision,
                                         uint64_t seed, const Runner& run);

// A check and the outputs it compared (declaration order), e.g. to save them.
struct CheckRun {
  CheckReport report;
  std::vector<Tensor> actual;  // the runner's
  std::vector<Tensor> fp64;    // the reference's
};

// check_against_fp64 on make_inputs(graph, inputs): given tensors in their slots, the rest drawn
// from inputs.seed. Also fails as make_inputs does (a given tensor of the wrong type).
Expected<CheckRun> check_against_fp64(const ir::Graph& graph, ir::Precision precision,
                                      InputSource inputs, const Runner& run);

}  // namespace kiln::reference
