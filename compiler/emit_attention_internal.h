// The attention emitters' shared pieces (emit_attention.cpp) and kernels, in files of their own:
// the mma.sync kernel (emit_attention_mma.cpp), sm_90a's (emit_attention_wgmma.cpp) and its
// producers (emit_attention_producer.cpp). Not part of the compiler's interface.
#pragma once

#include "compiler/emit_internal.h"

#include <functional>
#include <string>

namespace kiln::compiler::detail::attn {

// Per-block setup shared by the kernels: q0 (the first query), n0 (the first column of the
// slab of v's head dim, where there are several), bz (the batch: blockIdx.z, or past 65535
// batches folded over y and z, the blocks past the batch returning), the operand pointers Q, K,
// V (and M, the mask) offset to this block's batch.
void emit_operands(Code& code, const KernelContext& ctx, const std::string& gtype,
                   bool pointers = true);

// Whether a score depends on its key's index: a mask, causality, or keys past S_k in the last tile.
bool reads_key(const KernelContext& ctx);

// The number of key tiles a block runs: all of S_k, or for a causal block those up to its last
// query.
std::string key_tiles(const KernelContext& ctx);

// "n0 + " where the grid's y splits v's head dim, else "".
std::string slab_offset(const AttentionTile& t);

// The loop over key tiles (a causal block's up to its last query), K and V copied into the
// stages; compute(stage) emits one tile's math.
void emit_key_loop(Code& code, const KernelContext& ctx, bool async,
                   const std::function<void(const std::string&)>& compute);

// Opens one key tile's block: kc, its first key (where scores read it), and kst / vs, its K
// and V stage.
void open_key_tile(Code& code, const KernelContext& ctx, const std::string& smem_t,
                   const std::string& stage);

// The kernel's signature and the names the kernels use: tid, t4 (tid % 4) and -inf.
void open_kernel(Code& code, const KernelContext& ctx, int threads);

// A row's output o / l. With a mask, a row of the attention op may have no key left (l = 0): its
// output is 0 (the op's rule), where 0 / 0 would be NaN. The explicit chain keeps softmax's NaN.
std::string row_output(const KernelContext& ctx, const std::string& o, const std::string& l);

// Stores o / l at every element (m, n) the thread holds, through the group's epilogue.
void emit_output(Code& code, const KernelContext& ctx, const std::string& value);

// O's rows scaled by `alpha` (inside the loop over the thread's two rows r).
void emit_rescale(Code& code, int dt_count, const std::string& o_lo, const std::string& o_hi,
                  const std::string& alpha);

// One key tile's online softmax over scores in m16n8 accumulators: `acc` (in terms of nt, the
// accumulator of keys 8 nt .., and i, its element) holds the raw products of query `row` (in
// terms of i) and keys kc + 8 nt + 2 t4 + (i & 1), `nt_count` of them. It turns them into
// scores and then p = exp2(score - the row's new max), rescales the running sum and the output
// (o_lo and o_hi, in terms of j < dt_count and r, the row: o's elements of that row), and adds
// p to the running sum. m_run and l_run hold rows g and g + 8 (r 0 and 1). With `alpha_out` it
// leaves the output alone and stores each row's factor in alpha_out[r] (for emit_rescale once
// nothing in flight writes the output).
void emit_softmax_step(Code& code, const KernelContext& ctx, int nt_count, int dt_count,
                       const std::string& acc, const std::string& row, const std::string& o_lo,
                       const std::string& o_hi, const std::string& alpha_out = "");

// O / l's l: each of the thread's two rows (g and g + 8) summed over the quad that holds it.
void emit_quad_sums(Code& code);

// The tensor-core kernel on mma.sync.
void emit_mma_kernel(Code& code, const KernelContext& ctx);

// The bytes of the sm_90a attention kernel's Q area and of one stage of K and of V in shared
// memory (the tile's element size: 2, 4 for tf32, or 8 for tf32x3's two parts).
struct WgmmaAttentionBytes {
  int q, k_stage, v_stage;
};

inline WgmmaAttentionBytes wgmma_attention_bytes(const AttentionTile& t) {
  int eb = t.elem_bytes;
  return {t.br * t.d * eb, t.bc * t.d * eb, t.bc * t.dv * eb};
}

// sm_90a's producers: TMA for 16-bit operands, the producer's own loads through a cp.async
// staging ring for fp32 ones.
void emit_tma_producer(Code& code, const KernelContext& ctx);
void emit_loading_producer(Code& code, const KernelContext& ctx);

// sm_90a's kernel (design 5b).
void emit_wgmma_kernel(Code& code, const KernelContext& ctx);

}  // namespace kiln::compiler::detail::attn
