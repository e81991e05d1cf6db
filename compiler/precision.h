// Pass: resolves the precision mode per matmul for one arch and picks its arithmetic path.
#pragma once

#include "compiler/options.h"
#include "ir/graph.h"

#include <string>
#include <vector>

namespace kiln::compiler {

// How a matmul's products and sums are computed.
enum class MatmulPath : uint8_t {
  ffma,         // fp32 fused multiply-add on CUDA cores (highest; also fallbacks)
  tf32,         // m16n8k8 tf32 mma, operands rounded with cvt.rna (high)
  tf32x3,       // m16n8k8 tf32 mma, big/small split, three mmas (tf32x3)
  bf16_of_f32,  // fp32 operands rounded to bf16, m16n8k16 bf16 mma (medium)
  f16,          // f16 operands, m16n8k16 (sm_80+) or two m16n8k8 (sm_75) mma
  bf16,         // bf16 operands, m16n8k16 mma (sm_80+)
};

std::string_view to_string(MatmulPath path);
// True for the paths that run on tensor cores.
bool uses_mma(MatmulPath path);

struct PrecisionPlan {
  ir::Precision graph_mode = ir::Precision::highest;  // the graph mode, `automatic` resolved
  std::vector<MatmulPath> paths;  // per node id; meaningful for matmuls and attention ops
  std::vector<std::string> fallbacks;                 // one line per op that fell back
  std::string decision;                               // e.g. "auto -> high on sm_90"
};

// What `auto` means on `sm`: high (TF32) where tensor cores take it, else highest.
ir::Precision automatic_precision(int sm);

// Resolves `auto` (high on sm >= 80, else highest) and each matmul's and attention op's mode (a
// matmul's precision= attribute overrides the graph mode). A path the arch cannot run is an
// error naming the op, mode and arch, unless options.fallback allows it: then the best
// available path is used and a line is added to `fallbacks`.
Expected<PrecisionPlan> resolve_precision(const ir::Graph& graph, const CompileOptions& options);

// "FILE:LINE:COL: error: " where node `id` came from a file (as a parse error is located), else "".
std::string error_location(const ir::Graph& graph, ir::NodeId id);
// "matmul 'h'" or "matmul #4" for messages.
std::string describe_node(const ir::Graph& graph, ir::NodeId id);

}  // namespace kiln::compiler
