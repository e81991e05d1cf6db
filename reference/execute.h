// The CPU reference executor: runs every op of a graph in fp64, or with a precision mode's
// rounding emulated, on host tensors.
//
// What is bit-exact and what is only close, in the emulated modes:
// - Bit-exact: every rounding of a value into a number format (tf32 cvt.rna, bf16/fp16
//   round-to-nearest-even, fp32 storage, the tf32x3 split), every single product of matmul
//   operands (tf32, bf16 and fp16 products are exact in fp32), each fused multiply-add of
//   `highest`, and fp32 add/sub/mul/div (IEEE on both sides).
// - Close only: the order and grouping of fp32 matmul accumulation (the reference adds in k
//   order; an MMA adds its k-slice in an unspecified order and internal precision; `highest`'s
//   FFMA steps are each bit-exact, see fma_f32, but a kernel may split k differently),
//   transcendental functions (the host libm's expf/tanhf/erff, not CUDA's), and attention, which
//   runs in fp32 throughout (FFMA dot products, probabilities kept in fp32) whatever the dtype and
//   precision mode. Between ops every tensor is stored at its dtype; a fused kernel
//   that keeps an epilogue chain in fp32 registers can be slightly more accurate than that.
#pragma once

#include "ir/graph.h"
#include "reference/tensor.h"
#include "support/expected.h"

#include <cstdint>
#include <vector>

namespace kiln::reference {

enum class Arithmetic : uint8_t {
  fp64,      // every op in double; casts are the identity; the ground truth
  emulated,  // fp32/f16/bf16 storage and the precision mode's matmul arithmetic
};

struct RunMode {
  Arithmetic arithmetic = Arithmetic::fp64;
  // The graph-wide matmul precision for Arithmetic::emulated (a matmul's own `precision=` wins).
  // Must be resolved: `automatic` is an error.
  ir::Precision precision = ir::Precision::highest;

  static RunMode fp64() { return RunMode{}; }
  static RunMode emulate(ir::Precision precision) {
    return RunMode{Arithmetic::emulated, precision};
  }
};

// Refuse graphs whose tensors would need more host memory than this (all values as doubles, an
// i64 tensor's exact values too).
inline constexpr int64_t k_default_max_bytes = int64_t{4} << 30;

struct RunLimits {
  int64_t max_bytes = k_default_max_bytes;
};

// Host memory (bytes; an upper bound: every tensor of the graph as doubles, an i64 one with its
// exact values beside them, though run() frees intermediates after their last use) and matmul
// and attention multiply-adds of one run, without running it.
struct RunCost {
  int64_t bytes = 0;
  int64_t multiply_adds = 0;
};
RunCost estimate_cost(const ir::Graph& graph);

// Fails, with the bytes needed and the limit, when the graph's host tensors exceed `limits`;
// callers check before they allocate inputs.
Status check_limits(const ir::Graph& graph, RunLimits limits);

// Runs `graph` on `inputs` (calling-convention order, each of its input's exact type) and returns
// the outputs in declaration order. A symbolic graph runs at the sizes its inputs give
// (ir::Graph::symbol_values, then bind). Errors: wrong input count or type, an unresolved precision,
// a graph above `limits.max_bytes` (the message gives both numbers), host memory exhausted.
Expected<std::vector<Tensor>> run(const ir::Graph& graph, const std::vector<Tensor>& inputs,
                                  RunMode mode, RunLimits limits = {});

}  // namespace kiln::reference
