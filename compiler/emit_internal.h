// Pieces shared by the kernel emitters (not part of the compiler's interface).
#pragma once

#include "compiler/plan.h"

#include <functional>
#include <string>
#include <vector>

namespace kiln::compiler::detail {

// Appends formatted lines with a fixed indent.
class Code {
 public:
  void line(const std::string& text) { m_text += m_indent + text + "\n"; }
  void open(const std::string& text) {
    line(text);
    m_indent += "  ";
  }
  void close(const std::string& text = "}") {
    m_indent.resize(m_indent.size() - 2);
    line(text);
  }
  void raw(const std::string& text) { m_text += text; }
  const std::string& text() const { return m_text; }

 private:
  std::string m_text;
  std::string m_indent;
};

// Where the output element being computed is: per-dim coordinates (names of ints) and its
// linear index (an expression). Either may be empty when not available.
struct ElementIndex {
  std::vector<std::string> coords;
  std::string linear;
};

// Everything an emitter needs to know about one kernel's parameters.
struct KernelContext {
  const ir::Graph& graph;  // static (a symbolic graph bound at its bucket's upper bounds)
  const ProgramPlan& plan;
  const KernelPlan& kernel;
  const Sizes& sizes;  // graph's sizes as the kernel computes them
  // "p3" for node `id` read through a parameter.
  std::string param(ir::NodeId id) const;
};

std::string to_str(int64_t v);
// "float", "kiln_bf16" or "kiln_f16".
std::string storage_type(ir::DType dtype);
// Converts `p[i]` (an element of dtype) to float.
std::string load_as_float(ir::DType dtype, const std::string& element);
// The kernel's parameter list: written buffers as T*, read ones as const T*, all __restrict__,
// then for a symbolic graph each symbol's value as `int kiln_dimI`.
std::string param_list(const KernelContext& ctx);
// The "extern C __global__" line up to the opening brace. min_blocks > 0 adds the second
// __launch_bounds__ argument: matmul kernels pass 1, which lets ptxas use the registers it needs
// instead of spilling a few bytes for occupancy it does not need.
std::string kernel_signature(const KernelContext& ctx, int threads, int min_blocks = 0);

// True when some leaf of the group is broadcast (needs per-dim coordinates, not the linear index).
bool needs_coords(const KernelContext& ctx);

// Emits statements computing the group's value at one element; `anchor_value` is the float
// expression for the anchor (accumulator or softmax value). Returns the root value's variable.
std::string emit_epilogue(Code& code, const KernelContext& ctx, const std::string& anchor_value,
                          const ElementIndex& index);
// Declares `bz` (the batch, blockIdx.z; for batched results only) and the matmul operand pointers
// A and B of element type `gtype`, offset to that batch.
void emit_batch_operands(Code& code, const KernelContext& ctx, const std::string& gtype);
// The output element (bz, m, n) of a matmul kernel: coordinates and row-major linear index of an
// [M, N] or [batch, M, N] result, with `bz`, `m` and `n` declared by the caller.
ElementIndex matmul_output_index(const KernelContext& ctx);
// Stores `value` to every written parameter at `linear`.
void emit_store(Code& code, const KernelContext& ctx, const std::string& value,
                const std::string& linear);

// Declares c0..c{rank-1} (ints) for the element at `linear` of a row-major tensor of `dims`.
void emit_coords(Code& code, const std::vector<Extent>& dims, const std::string& linear,
                 ElementIndex& index);
// Node `id`'s dims as extents.
std::vector<Extent> dims_of(const KernelContext& ctx, ir::NodeId id);

// One operand tile copy from global to shared memory, as seen in global orientation: `rows` rows
// starting at row0 (< row_bound), `cols` contiguous elements starting at col0 (< col_bound).
struct TileCopy {
  std::string dst;  // smem pointer of the stage (typed)
  std::string src;  // global base pointer (typed)
  std::string row0, col0;
  int rows = 0, cols = 0;
  Extent row_bound, col_bound, ld_global;
  int smem_ld = 0;
  bool transpose = false;  // store element (r, c) at c * smem_ld + r (fp32 ffma kernels)
  ir::DType dtype = ir::DType::f32;
  bool smem_float = false;  // convert to float on the way (ffma kernels)
  bool async = false;       // cp.async (sm_80+) instead of plain loads
  int threads = 0;
};
void emit_tile_copy(Code& code, const TileCopy& copy);

// Declares bm0 and bn0, the block's first row and column. Grids taller than 8 row tiles run in
// grouped order (8 row tiles sweep the columns together) so their operand tiles stay in L2; a
// symbolic graph's grid is read from gridDim.
void emit_block_origin(Code& code, const KernelPlan& kernel);

// The k loop: a `stages`-deep cp.async pipeline (stages >= 2) or synchronous single-stage loads.
// load(stage, k0) emits one stage's copies; compute(stage) its math.
void emit_k_loop(Code& code, int stages, const Extent& k, int bk,
                 const std::function<void(const std::string&, const std::string&)>& load,
                 const std::function<void(const std::string&)>& compute);

// Kernel bodies by group kind.
void emit_matmul_mma(Code& code, const KernelContext& ctx);
void emit_matmul_ffma(Code& code, const KernelContext& ctx);
void emit_softmax(Code& code, const KernelContext& ctx);
void emit_elementwise(Code& code, const KernelContext& ctx);

}  // namespace kiln::compiler::detail
