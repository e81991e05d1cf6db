// Pass: resolves the precision mode per matmul for one arch and picks its arithmetic path.
#pragma once

#include "compiler/options.h"
#include "ir/graph.h"

#include <string>
#include <vector>

namespace kiln::compiler {

// What a mode promises of a matmul's arithmetic: how the operands are rounded before they are
// multiplied (products are then exact in fp32 and summed in fp32). It follows from the resolved
// mode and the operands' dtype, which the key holds; the CPU target rounds by it, as do the
// emulator's tensor-core models and the fp64 reference's mode emulation.
enum class Numerics : uint8_t {
  fp32,         // operands as stored (fp32, or f16/bf16 values exact in fp32)
  tf32,         // fp32 operands rounded to tf32 (cvt.rna: 10 mantissa bits, ties away) (high)
  tf32x3,       // each fp32 operand split into a tf32 big part and a tf32 small part; the three
                // products big*big + big*small + small*big (tf32x3)
  bf16_of_f32,  // fp32 operands rounded to bf16 (nearest even) (medium)
  f16,          // f16 operands
  bf16,         // bf16 operands
};

// How the GPU computes the products: an instruction choice, free of what the mode promises.
enum class MmaStrategy : uint8_t {
  ffma,      // fp32 fused multiply-add on CUDA cores
  mma_sync,  // warp-level mma.sync on tensor cores (m16n8k8 tf32/f16, m16n8k16 bf16/f16)
};

// One matmul's arithmetic: its numerics and the strategy that runs them. The named paths are
// the pairs kiln plans today.
struct MatmulPath {
  Numerics numerics = Numerics::fp32;
  MmaStrategy strategy = MmaStrategy::ffma;
  bool operator==(const MatmulPath&) const = default;

  static const MatmulPath ffma;         // fp32 on CUDA cores (highest; also fallbacks)
  static const MatmulPath tf32;         // m16n8k8 tf32 mma.sync (high)
  static const MatmulPath tf32x3;       // three m16n8k8 tf32 mma.sync (tf32x3)
  static const MatmulPath bf16_of_f32;  // m16n8k16 bf16 mma.sync (medium)
  static const MatmulPath f16;          // m16n8k16 (sm_80+) or two m16n8k8 (sm_75) mma.sync
  static const MatmulPath bf16;         // m16n8k16 bf16 mma.sync (sm_80+)
};
inline constexpr MatmulPath MatmulPath::ffma{Numerics::fp32, MmaStrategy::ffma};
inline constexpr MatmulPath MatmulPath::tf32{Numerics::tf32, MmaStrategy::mma_sync};
inline constexpr MatmulPath MatmulPath::tf32x3{Numerics::tf32x3, MmaStrategy::mma_sync};
inline constexpr MatmulPath MatmulPath::bf16_of_f32{Numerics::bf16_of_f32, MmaStrategy::mma_sync};
inline constexpr MatmulPath MatmulPath::f16{Numerics::f16, MmaStrategy::mma_sync};
inline constexpr MatmulPath MatmulPath::bf16{Numerics::bf16, MmaStrategy::mma_sync};

// The path's name in kernel names: "ffma" for fp32 on CUDA cores, else the numerics ("tf32",
// "tf32x3", "bf16f32", "f16", "bf16").
std::string_view to_string(MatmulPath path);
std::string_view to_string(Numerics numerics);
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
