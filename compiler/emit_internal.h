// Pieces shared by the kernel emitters (not part of the compiler's interface).
#pragma once

#include "compiler/plan.h"

#include <cassert>
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
// "float", "kiln_bf16", "kiln_f16", "int", "long long" or "unsigned char" (a bool, 0 or 1).
std::string storage_type(ir::DType dtype);
// Converts `p[i]` (an element of dtype) to float.
std::string load_as_float(ir::DType dtype, const std::string& element);

// The typed layer (emit_typed.cpp): values of every dtype as kernels compute them, float for the
// float dtypes (rounded at each value), int, long long and bool for the others.
// "float", "int", "long long" or "bool".
std::string value_type(ir::DType dtype);
// Reads `p[i]` (an element of dtype) as its value type.
std::string load_value(ir::DType dtype, const std::string& element);
// The value `value` stored as `dtype` (the inverse of load_value).
std::string store_value(ir::DType dtype, const std::string& value);
// A literal in `dtype`: a float (infinities included), an integer or true/false.
std::string typed_literal(ir::DType dtype, double value);
// The ops ir::is_exact_op names, in CUDA text.
std::string exact_binary(ir::OpKind kind, ir::DType dtype, const std::string& a,
                         const std::string& b);
std::string exact_unary(ir::OpKind kind, ir::DType dtype, const std::string& x);
// `x` (a value of `from`) converted to `to`'s value type: float -> integer toward zero,
// saturated, NaN -> 0; -> bool is != 0; i64 -> i32 wraps; float -> float is `x` (round_to then
// rounds it).
std::string cast_value(ir::DType from, ir::DType to, const std::string& x);
// The kernel's parameter list: written buffers as T*, read ones as const T*, all __restrict__,
// then for a symbolic graph each symbol's value as `int kiln_dimI`.
std::string param_list(const KernelContext& ctx);
// The "extern C __global__" line up to the opening brace. min_blocks > 0 adds the second
// __launch_bounds__ argument: matmul kernels pass 1, which lets ptxas use the registers it needs
// instead of spilling a few bytes for occupancy it does not need.
std::string kernel_signature(const KernelContext& ctx, int threads, int min_blocks = 0);

// The float expressions of the elementwise ops: unary(kind, x), binary(kind, a, b), a float
// literal, and a value rounded to a dtype (nothing for f32).
std::string unary(ir::OpKind kind, const std::string& x);
std::string binary(ir::OpKind kind, const std::string& a, const std::string& b);
std::string literal(double value);
std::string round_to(ir::DType dtype, const std::string& expr);

// A point of some value's index space: the value `node` (whose shape it indexes) at per-dim
// coordinates `coords` (int expressions) and/or row-major index `linear`; either may be empty,
// and coordinates are derived from the linear index when needed.
struct Frame {
  ir::NodeId node = -1;
  std::vector<std::string> coords;
  std::string linear;
};

// Emits the values of a group's members, each member at the point its consumers read it: a
// layout member (permute, slice, concat, reshape) moves its operands to points of their own
// (a permute's coordinates reordered, a slice's shifted, a concat's clamped into each operand
// and selected by the axis coordinate), and operands broadcast by dropping coordinates. Leaves
// are loaded once per point.
class ValueEmitter {
 public:
  ValueEmitter(Code& code, const KernelContext& ctx);
  // Emits the value of member `top` at `frame` (top's own index space) and of the members under
  // it, down to the group's anchor, whose value is `anchor_value` (its operands are not
  // evaluated); returns the variable holding it. A member is emitted by one call per scope:
  // `top` the root for the epilogue, or the anchor's first operand for a row op's prologue.
  std::string value(ir::NodeId top, Frame frame, const std::string& anchor_value);

 private:
  struct Point {
    Frame frame;
    std::vector<std::pair<ir::NodeId, std::string>> loaded;  // leaf -> variable
  };
  bool member(ir::NodeId id) const;
  std::string member_name(ir::NodeId id) const;
  std::string leaf_name(ir::NodeId leaf) const;
  void ensure_coords(Point& p, bool plain_names);
  std::vector<std::string> project(Point& p, ir::NodeId id);
  std::string load(size_t point, ir::NodeId leaf);
  // A fused embedding's value at `point`: its table's row ids[...] at the point's last
  // coordinate, 0.0f where the id is outside [0, V).
  std::string gathered(size_t point, ir::NodeId id);
  // The row-major element offset in node `node`'s buffer of the element at `coords` (its first
  // rank entries), a dim of 1 contributing nothing: "c0 * 64 + c1", or "0".
  std::string offset_of(ir::NodeId node, const std::vector<std::string>& coords) const;

  Code& m_code;
  const KernelContext& m_ctx;
  std::vector<Point> m_points;
  int m_names = 0;
};

// Emits the group's value at the output element `index` (the root's coordinates and linear
// index), with `anchor_value` the float expression of the anchor (accumulator or row result).
// Returns the root value's variable.
std::string emit_epilogue(Code& code, const KernelContext& ctx, const std::string& anchor_value,
                          const ElementIndex& index);
// Declares `bz` (the batch, blockIdx.z or emit_block_origin's folded index; for batched results
// only), `split` (a split-K partials kernel's range of K tiles) and the matmul operand pointers A
// and B of element type `gtype`, offset to that batch.
void emit_batch_operands(Code& code, const KernelContext& ctx, const std::string& gtype);
// The output element (bz, m, n) of a matmul kernel: coordinates and row-major linear index of an
// [M, N] or [batch, M, N] result, with `bz`, `m` and `n` declared by the caller.
ElementIndex matmul_output_index(const KernelContext& ctx);
// A 5-D or 6-D result (MatmulExtents::per_dim): batch coordinate d of bz, and an operand's
// offset " + c0 * s0 + ..." over its per-dim strides, the last coordinate (the head) divided by
// `group` for grouped heads.
std::string batch_coord(const MatmulExtents& e, int d);
std::string batch_offset(const MatmulExtents& e, const std::vector<Extent>& strides,
                         int64_t group = 1);
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
  SmemTile smem;           // its swizzle, when swizzle_bits > 0 (smem_ld is then smem.ld)
  bool transpose = false;  // store element (r, c) at c * smem_ld + r (fp32 ffma kernels)
  ir::DType dtype = ir::DType::f32;
  bool smem_float = false;  // convert to float on the way (ffma kernels)
  bool async = false;       // cp.async (sm_80+) instead of plain loads
  int threads = 0;
};
void emit_tile_copy(Code& code, const TileCopy& copy);

// The element offset `offset` (an int expression, r * ld + c) of shared-memory tile `tile` as
// the place it is kept: SmemTile::swizzled in CUDA text, or `offset` itself when not swizzled.
std::string smem_at(const SmemTile& tile, const std::string& offset);

// Declares bm0 and bn0, the block's first row and column. Grids taller than the tile's group (8
// row tiles unless a schedule chose otherwise) run in grouped order (that many row tiles sweep the
// columns together) so their operand tiles stay in L2; a symbolic graph's grid is read from
// gridDim. A grid folded over y and z (KernelPlan::folded_rows) declares `by`, the row tile, and
// `bzs`, batch x splits + split, and its blocks past the problem return.
void emit_block_origin(Code& code, const KernelPlan& kernel);

// Emits one stage's operand copies: load(stage, k0), both int expressions.
using LoadFn = std::function<void(const std::string&, const std::string&)>;

// The K tiles a k loop runs, and the pieces of the loops that run them (emit_k_loop; the mma
// kernels' double-buffered loop).
struct KTiles {
  std::string count;  // a constant, or "k_tiles" (declared by declare_k_tiles)
  int64_t most = 0;   // the most there can be
  bool fixed = false; // a constant count: the prologue needs no guards
  int bk = 0;
  std::string first;  // the first tile (an int expression), or "" for 0
  // The k offset of tile `kt` (an int expression) of this loop.
  std::string k0_of(const std::string& kt) const;
};
// Declares `k_tiles` where the count is `limit` or K is symbolic (as emit_k_loop's arguments).
KTiles declare_k_tiles(Code& code, const Extent& k, int bk, const std::string& limit,
                       const std::string& first);
// The first stages - 1 tiles' copies, each committed (a group even where the tile is past K).
void emit_k_prologue(Code& code, const KTiles& tiles, int stages, const LoadFn& load);
// Tile kt + stages - 1's copies into its stage, where there is such a tile, then a commit.
void emit_k_refill(Code& code, const KTiles& tiles, int stages, const LoadFn& load);

// The k loop: a `stages`-deep cp.async pipeline (stages >= 2) or synchronous single-stage loads.
// load(stage, k0) emits one stage's copies; compute(stage) its math, tile `kt`. `limit`, when
// given, is an int expression of the tiles to run (at most k's), e.g. a causal block's;
// `first`, when given, an int expression of the first tile (a split-K block's range).
void emit_k_loop(Code& code, int stages, const Extent& k, int bk, const LoadFn& load,
                 const std::function<void(const std::string&)>& compute,
                 const std::string& limit = "", const std::string& first = "");

// The mma fragment loaders shared by the tensor-core emitters. They read the shared-memory
// tiles `as` (A, rows of lda) and `bs` (B, rows of ldb) at k offset `ks` for the m tile `mt`
// (first row `am`) and n tile `nt` (first column `bn`), and write unsigned af[mt][4] and
// bf[nt][2] (tf32x3: also as_small[mt] and bs_small[nt]); g = lane / 4 and t4 = lane % 4.
// bf16_of_f32 permutes k the same way in A and B (logical pair 2t, 2t+1 holds t, t+4).
struct MmaGeometry {
  MatmulShape s;  // path, operand orientations
  MatmulTile t;
  SmemLayout layout;  // lda = layout.a.ld, ldb = layout.b.ld
  int mt = 0, nt = 0;  // mma tiles per warp along M and N
  int mma_k = 16;
  bool half = false;  // 16-bit operands in shared memory
};
// Declares, once per thread, the lane's part of each swizzled operand's ldmatrix addresses
// (a_lane_row/_chunk, b_lane_row/_chunk) that emit_a_fragment and emit_b_fragment read.
void emit_fragment_lanes(Code& code, const MmaGeometry& geo);
void emit_a_fragment(Code& code, const MmaGeometry& geo);
void emit_b_fragment(Code& code, const MmaGeometry& geo);
// One mma of `path` on sm: acc += a * b (tf32x3: the three products of the split operands).
struct MmaNames {
  std::string acc = "acc[mt][nt]", a = "af[mt]", b = "bf[nt]";
  std::string a_small = "as_small[mt]", b_small = "bs_small[nt]";
};
void emit_mma(Code& code, MatmulPath path, const Target& target, const MmaNames& names);
// Declares `float name[mt][nt][4]`, the accumulators of mt x nt mma tiles, all zero.
void emit_zeroed_accumulators(Code& code, const std::string& name, int mt, int nt);

// One output element of a matmul kernel from accumulator `acc`, at `m` and `n` (declared): skipped
// outside M x N where the `bm` x `bn` tile does not divide them, else run through the group's
// epilogue and stored.
void emit_output_element(Code& code, const KernelContext& ctx, const std::string& acc, int bm,
                         int bn);

// Kernel bodies by group kind.
void emit_matmul_mma(Code& code, const KernelContext& ctx);
// sm_90a (MatmulTile::wgmma): TMA into an mbarrier ring, wgmma, warp-specialised, persistent.
void emit_matmul_wgmma(Code& code, const KernelContext& ctx);
// A split-K matmul's sum kernel (SplitRole::sum): one thread per output element adds the
// splits' partial products in split order and runs the group's epilogue.
void emit_split_sum(Code& code, const KernelContext& ctx);
void emit_matmul_ffma(Code& code, const KernelContext& ctx);
// Softmax, reductions and norms: one warp per row along the anchor's axis.
void emit_rows(Code& code, const KernelContext& ctx);
void emit_elementwise(Code& code, const KernelContext& ctx);
// Fused attention: a FlashAttention-2 loop over key tiles, on tensor cores or FFMA.
void emit_attention(Code& code, const KernelContext& ctx);
void emit_gather(Code& code, const KernelContext& ctx);

// ir::scalar.h's Math as CUDA C++ text. A term's precedence decides where it needs parentheses;
// the values it starts from (member names, loads, literals) are single terms.
struct CudaText {
  enum Precedence { additive, multiplicative, prefix, term };
  struct Value {
    std::string text;
    Precedence precedence = term;
  };
  static std::string wrap(const Value& v, bool needs) {
    return needs ? "(" + v.text + ")" : v.text;
  }
  Value infix(const Value& a, const char* op, const Value& b, Precedence p) {
    // Left-associative: the right operand needs parentheses at the same precedence.
    return {wrap(a, a.precedence < p) + op + wrap(b, b.precedence <= p), p};
  }
  Value call(const char* fn, const Value& x) { return {std::string(fn) + "(" + x.text + ")"}; }
  Value call(const char* fn, const Value& a, const Value& b) {
    return {std::string(fn) + "(" + a.text + ", " + b.text + ")"};
  }

  Value constant(double, const char* text) { return {std::string(text) + "f"}; }
  Value add(const Value& a, const Value& b) { return infix(a, " + ", b, additive); }
  Value sub(const Value& a, const Value& b) { return infix(a, " - ", b, additive); }
  Value mul(const Value& a, const Value& b) { return infix(a, " * ", b, multiplicative); }
  Value div(const Value& a, const Value& b) { return infix(a, " / ", b, multiplicative); }
  Value max(const Value& a, const Value& b) { return call("kiln_max", a, b); }
  Value min(const Value& a, const Value& b) { return call("kiln_min", a, b); }
  Value pow(const Value& a, const Value& b) { return call("powf", a, b); }
  Value neg(const Value& x) { return {"-" + wrap(x, x.precedence < prefix), prefix}; }
  Value exp(const Value& x) { return call("expf", x); }
  Value erf(const Value& x) { return call("erff", x); }
  Value tanh(const Value& x) { return call("tanhf", x); }
  Value sqrt(const Value& x) { return call("sqrtf", x); }
  Value abs(const Value& x) { return call("fabsf", x); }
  Value cos(const Value& x) { return call("cosf", x); }
  Value sin(const Value& x) { return call("sinf", x); }
  Value log(const Value& x) { return call("logf", x); }
  Value group(const Value& x) { return {"(" + x.text + ")"}; }
};


}  // namespace kiln::compiler::detail
