// The edge-value graph and inputs both code generators' tests run (the emulator's and the CPU
// target's): float -> integer casts that truncate, saturate and take NaN to 0, i64 -> i32
// wrapping, i32 products and negations past the range, comparisons with NaN, bools to and from
// floats, embedding rows for ids inside and outside the table (past it, negative, past 2^32:
// zeros, never a read outside the table), floor divisions and remainders of either sign, by 0
// and of the smallest i32 by -1.
#pragma once

#include "ir/parse.h"
#include "reference/tensor.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::testing {

inline const char* k_typed_edges =
    "graph edges {\n  input f: f32[8]\n  input i: i64[8]\n  input j: i32[8]\n"
    "  input c: bool[8]\n  input tab: f32[3, 2]\n  input p: i32[8]\n"
    "  a = cast(f, to=i32)\n  b = cast(f, to=i64)\n  t = cast(f, to=bool)\n"
    "  d = cast(i, to=i32)\n  e = mul(j, j)\n  g = add(j, 1)\n  h = neg(j)\n  k = abs(j)\n"
    "  l = ne(f, 2.7)\n  m = where(c, f, -inf)\n  n = cast(c, to=f32)\n  o = cast(i, to=f32)\n"
    "  r = embedding(tab, i)\n  s = embedding(tab, j)\n"
    "  u = floor_divide(j, p)\n  v = remainder(j, p)\n  w = floor_divide(i, -3)\n"
    "  x = remainder(i, 7)\n  y = floor_divide(7, p)\n  z = remainder(-7, p)\n"
    "  output a, b, t, d, e, g, h, k, l, m, n, o, r, s, u, v, w, x, y, z\n}\n";

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
          tensor(4, {1, 2, 3, 4, 5, 6}),
          tensor(5, {3, -1, 7, -3, 0, 2, -5, 5})};
}

// i64 values past 2^53, where a double holds them inexactly, through every kind of integer op:
// products that wrap mod 2^64, a difference, a floor quotient and remainder of it, a running sum,
// a where of a compare and one of a literal, equalities only exact values decide (a + 1 == b at
// 2^53 + 2, and a != 2^53 at 2^53 + 1, which doubles miss: they round 2^53 + 1 to 2^53), concat,
// slice, reshape, permute, roll, expand and neg, casts to i32 (the low 32 bits) and to f32
// (2^62 + 2^38 + 1 rounds up to 2^62 + 2^39 once; through a double, first to 2^62 + 2^38, a
// tie, then down to 2^62).
inline const char* k_wide_integers = R"(graph wide {
  input a: i64[4]
  input b: i64[4]
  p = mul(a, b)
  d = sub(p, 1)
  q = floor_divide(d, b)
  r = remainder(d, 1000003)
  s = cumsum(a, axis=0)
  w = where(gt(a, b), a, b)
  e = eq(add(a, 1), b)
  c = concat(reshape(a, shape=[2, 2]), reshape(b, shape=[2, 2]), axis=0)
  t = slice(c, axis=0, start=1, end=3)
  f = cast(a, to=f32)
  g = cast(a, to=i32)
  n = neg(permute(reshape(a, shape=[2, 2]), dims=[1, 0]))
  o = roll(a, shift=1, axis=0)
  x = expand(reshape(b, shape=[4, 1]), shape=[4, 2])
  l = where(lt(a, 0), 7, a)
  k = ne(a, 9007199254740992)
  output p, d, q, r, s, w, e, t, f, g, n, o, x, l, k
}
)";

// The inputs of k_wide_integers, as the device holds them.
inline std::vector<int64_t> wide_a() {
  return {(int64_t{1} << 53) + 1, -(int64_t{1} << 62) + 3, 3 * (int64_t{1} << 51) + 7,
          (int64_t{1} << 62) + (int64_t{1} << 38) + 1};
}
inline std::vector<int64_t> wide_b() {
  return {(int64_t{1} << 53) + 2, 12345, -(int64_t{1} << 40) - 1, (int64_t{1} << 62) + 4};
}
inline std::vector<reference::Tensor> wide_integer_inputs(const ir::Graph& graph) {
  std::vector<reference::Tensor> inputs;
  for (const auto& values : {wide_a(), wide_b()}) {
    std::vector<unsigned char> bytes(8 * values.size());
    std::memcpy(bytes.data(), values.data(), bytes.size());
    inputs.push_back(reference::load_device_bytes(graph.node(graph.inputs()[inputs.size()]).type,
                                                  bytes.data()));
  }
  return inputs;
}

// Whether two outputs hold the same values: an integer one's exactly, past 2^53 too.
inline bool same_values(const reference::Tensor& got, const reference::Tensor& want) {
  if (got.dtype != want.dtype || got.values.size() != want.values.size()) return false;
  for (size_t i = 0; i < got.values.size(); ++i) {
    if (ir::is_float(got.dtype) ? got.values[i] != want.values[i]
                                : got.integer(i) != want.integer(i))
      return false;
  }
  return true;
}

// Embeddings fused into the norms, softmax and reduction that read them (and a norm's prologue
// with a cast bf16 table), read by ids outside [0, V) (negative, V, far past it) as well as
// inside: zero rows, never a read outside the table, in every kernel they are fused into.
inline const char* k_fused_embeddings = R"(graph fused_embeddings {
  input ids: i64[2, 5]
  input types: i32[2, 5]
  input words: f32[7, 12]
  input type_table: bf16[2, 12]
  input w: f32[12]
  input b: f32[12]
  x = add(embedding(words, ids), cast(embedding(type_table, types), to=f32))
  h = layer_norm(x, w, b)
  r = rms_norm(embedding(words, ids), w)
  s = softmax(embedding(words, ids), axis=0)
  m = sum(embedding(words, types), axis=-1)
  output h, r, s, m
}
)";

// The inputs of k_fused_embeddings: ids 0 to 2 at [0, 2] are -1 (so r's row 2 is zeros).
inline std::vector<reference::Tensor> fused_embedding_inputs(const ir::Graph& graph) {
  std::vector<reference::Tensor> inputs;
  for (ir::NodeId id : graph.inputs()) inputs.push_back(reference::zeros(graph.node(id).type));
  inputs[0].values = {0, 6, -1, 7, 3, 1000000, 2, 5, -7, 4};
  inputs[1].values = {0, 1, 2, -1, 1, 0, 0, 1, 1, 3};
  for (size_t t = 2; t < inputs.size(); ++t)
    for (size_t i = 0; i < inputs[t].values.size(); ++i)
      inputs[t].values[i] = reference::store_value(inputs[t].dtype, std::sin(1.0 + 0.7 * i + t));
  return inputs;
}

}  // namespace kiln::testing
