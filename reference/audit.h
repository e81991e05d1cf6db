// Precision audit: a mode's emulated rounding against the fp64 reference on seeded random inputs.
#pragma once

#include "ir/graph.h"
#include "reference/execute.h"
#include "support/expected.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::reference {

// Relative-L2 tolerances of f32 graphs per matmul precision, and of anything touching f16/bf16.
inline constexpr double k_tolerance_highest = 1e-5;
inline constexpr double k_tolerance_tf32x3 = 2e-5;
inline constexpr double k_tolerance_high = 2e-3;
inline constexpr double k_tolerance_medium = 1.5e-2;
inline constexpr double k_tolerance_half = 1.5e-2;

// Long sums: a product of k terms is allowed a relative-L2 error of at least
// k_tolerance_sum_growth * sqrt(k) * 2^-24, the probabilistic bound of an fp32 sum of k terms
// with 13 times the margin over what the kernels measure (compiler/KERNELS.md, "Accumulation
// model"); past k of about 1,760 it loosens `highest`, past about 7,040 `tf32x3`.
inline constexpr double k_tolerance_sum_growth = 4.0;

// An f32 product of f16/bf16 operands (out_dtype=f32): exact products, but the tensor cores
// truncate the running fp32 sum at each k step (compiler/KERNELS.md, "Accumulation model"), so
// on data of one sign its error grows with k, not √k: k * 2^-24, at least k_tolerance_highest.
double half_product_tolerance(int64_t k);

// The tolerance of a resolved precision (asserts on `automatic`).
double tolerance(ir::Precision precision);
// The tolerance of a product whose sums run over `k` terms, in a resolved precision: the larger
// of tolerance(precision) and the long-sum term above.
double tolerance(ir::Precision precision, int64_t k);

// The tolerance of one output under graph-wide `precision`: the loosest among the f32 matmuls
// and attention ops it depends on (each at its own `precision=` or the graph's, and its longest
// sum: a matmul's contraction, an attention's head dim or key count; an f32 matmul of f16/bf16
// operands at half_product_tolerance) and k_tolerance_half when any value computed on the way is
// f16/bf16
// (an f16/bf16 input alone is read exactly); k_tolerance_highest when neither (fp32
// elementwise only).
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

// Where a run's inputs come from: tensors a caller gives (e.g. read from files), the rest drawn
// from the seed.
struct InputSource {
  uint64_t seed = 0;
  // Empty, or one slot per graph input in calling-convention order; an empty slot is drawn.
  std::vector<std::optional<Tensor>> given;
};

// random_inputs(graph, source.seed) with each given tensor in its slot. Every input is drawn
// first, so an input not given is the same whichever others are given. Fails when `given` is
// neither empty nor one slot per input, or a given tensor is not of its input's type.
Expected<std::vector<Tensor>> make_inputs(const ir::Graph& graph, InputSource source);

// Checks the ids an embedding reads straight from a graph input (`inputs` in calling-convention
// order; a null entry is not checked): each in [0, V). The error names the input, the id's
// position, the id and V: "input 'ids' holds 40 at [1, 3], outside the embedding table 'emb' of
// 32 rows ([0, 32))". (Ids computed inside the graph are not checked: their rows are zeros.)
Status check_embedding_ids(const ir::Graph& graph, const std::vector<const Tensor*>& inputs);

// Runs `graph` on random_inputs(graph, seed) in fp64 and emulated at `precision` (resolved, not
// `automatic`) and compares each output. Errors come from run() (unresolved precision, memory
// limit).
Expected<AuditReport> audit(const ir::Graph& graph, ir::Precision precision, uint64_t seed,
                            RunLimits limits = {});

// An audit and the outputs it compared (declaration order), e.g. to save them.
struct AuditRun {
  AuditReport report;
  std::vector<Tensor> emulated;  // the mode's rounding
  std::vector<Tensor> fp64;      // the reference
};

// audit() on make_inputs(graph, inputs); also fails as make_inputs does.
Expected<AuditRun> audit(const ir::Graph& graph, ir::Precision precision, InputSource inputs,
                         RunLimits limits = {});

}  // namespace kiln::reference
