// The edge-value graph and inputs both code generators' tests run (the emulator's and the CPU
// target's): float -> integer casts that truncate, saturate and take NaN to 0, i64 -> i32
// wrapping, i32 products and negations past the range, comparisons with NaN, bools to and from
// floats, embedding rows for ids inside and outside the table (past it, negative, past 2^32:
// zeros, never a read outside the table).
#pragma once

#include "ir/parse.h"
#include "reference/tensor.h"

#include <cmath>
#include <string>
#include <vector>

namespace kiln::testing {

inline const char* k_typed_edges =
    "graph edges {\n  input f: f32[8]\n  input i: i64[8]\n  input j: i32[8]\n"
    "  input c: bool[8]\n  input tab: f32[3, 2]\n"
    "  a = cast(f, to=i32)\n  b = cast(f, to=i64)\n  t = cast(f, to=bool)\n"
    "  d = cast(i, to=i32)\n  e = mul(j, j)\n  g = add(j, 1)\n  h = neg(j)\n  k = abs(j)\n"
    "  l = ne(f, 2.7)\n  m = where(c, f, -inf)\n  n = cast(c, to=f32)\n  o = cast(i, to=f32)\n"
    "  r = embedding(tab, i)\n  s = embedding(tab, j)\n"
    "  output a, b, t, d, e, g, h, k, l, m, n, o, r, s\n}\n";

// The inputs of k_typed_edges, each value as the device holds it.
inline std::vector<reference::Tensor> typed_edge_inputs(const ir::Graph& graph) {
  auto tensor = [&](size_t input, std::vector<double> values) {
    reference::Tensor x = reference::zeros(graph.node(graph.inputs()[input]).type);
    for (double& v : values) v = reference::store_value(x.dtype, v);
    x.values = std::move(values);
    return x;
  };
  const double nan = std::nan("");
  return {tensor(0, {2.7, -2.7, 3e9, -3e9, nan, -0.5, 1e19, -1e19}),
          tensor(1, {4294967297.0, -1, 2147483648.0, 1099511627776.0, -1099511627776.0, 2,
                     16777217, 1}),
          tensor(2, {2147483647.0, -2147483648.0, 65536, 1000000007, -4, 5, 0, -5}),
          tensor(3, {1, 0, 1, 1, 0, 0, 1, 0}),
          tensor(4, {1, 2, 3, 4, 5, 6})};
}

}  // namespace kiln::testing
