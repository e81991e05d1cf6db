// The layer_norm graph and inputs both code generators' tests run (the emulator's and the CPU
// target's): rows far from 0 next to their spread (1e4 and -3e4, noise of 0.01), 37 elements
// (the CPU target's vector loop and its tail; held in registers on CUDA) and 1500 (read once per
// pass on CUDA). A mean of the row itself lost the deviations to its fp32 rounding: 5% off fp64.
#pragma once

#include "ir/graph.h"
#include "reference/audit.h"
#include "reference/tensor.h"

#include <optional>

namespace kiln::testing {

inline const char* k_far_rows =
    "graph far {\n  input x: f32[6, 37]\n  input y: f32[3, 1500]\n  input w: f32[37]\n"
    "  input b: f32[37]\n  input v: f32[1500]\n  input c: f32[1500]\n"
    "  lx = layer_norm(x, w, b, eps=1e-5)\n  ly = layer_norm(y, v, c, eps=1e-5)\n"
    "  output lx, ly\n}\n";

// x and y as above, each value as the device holds it; the weights and biases drawn from `seed`.
inline reference::InputSource far_row_inputs(const ir::Graph& graph, uint64_t seed) {
  reference::Rng rng(seed);
  reference::InputSource source{seed, std::vector<std::optional<reference::Tensor>>(6)};
  for (size_t input : {size_t{0}, size_t{1}}) {
    reference::Tensor t = reference::zeros(graph.node(graph.inputs()[input]).type);
    int64_t len = t.shape.dims().back();
    for (size_t e = 0; e < t.values.size(); ++e) {
      double centre = (static_cast<int64_t>(e) / len) % 2 == 0 ? 1e4 : -3e4;
      t.values[e] = reference::store_value(t.dtype, centre + 0.01 * rng.next_symmetric());
    }
    source.given[input] = std::move(t);
  }
  return source;
}

}  // namespace kiln::testing
