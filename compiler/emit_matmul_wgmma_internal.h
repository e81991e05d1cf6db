// The sm_90a matmul kernel's layout, derived once from its tile and shape, for the emitters
// that share it: emit_matmul_wgmma.cpp (the producer, the consumers' wgmmas and the epilogue)
// and emit_matmul_wgmma_stage.cpp (the consumers' rewrites of a stage). Not part of the
// compiler's interface.
#pragma once

#include "compiler/emit_internal.h"

#include <string>

namespace kiln::compiler::detail {

struct WgmmaMatmul {
  explicit WgmmaMatmul(const KernelPlan& k);

  const MatmulTile& t;
  const MatmulShape& s;
  // medium (conv): fp32 operands staged by TMA and written as bf16 by the consumers; from there
  // on the 16-bit kernel's stages, descriptors and wgmmas.
  bool conv = false;
  std::string type;  // the wgmmas' operand type: "bf16", "f16" or "tf32"
  // tf32: fp32 operands, 32 of K a stage in 4 steps of k8, rounded to tf32 in shared memory by
  // the consumers (cvt.rna, the mode's rounding) before any wgmma reads them. tf32x3: the same
  // pass also writes each element's small part, tf32(x - tf32(x)), beside the stage (x3).
  bool x3 = false;
  bool tf32 = false;
  // tf32 with A K-major as TMA loads it: A from registers (the RS form). Each consumer reads its
  // rows' A fragments from the stage and rounds them (tf32x3: splits them) in registers, where a
  // pass rounded A in place (and wrote its small part) for wgmma to read it again from shared
  // memory: a stage's A crosses shared memory once, not three times. Two sets of fragments in
  // tf32 (a stage's wgmmas read theirs until the next stage's wait_group 1 retires them), one in
  // tf32x3 (each stage's wgmmas retire before the next stage's fragments are read). The
  // complement of a_staged among tf32 kernels, as wgmma_smem_bytes sizes the stage.
  bool a_regs = false;
  int a_sets = 2;
  // Whether the consumers rewrite each stage (round, split or convert) before its wgmmas: then a
  // `rounded` mbarrier a stage says both have.
  bool rewrites = false;
  std::string bk;  // t.bk as text
  int stages = 0;
  int a_stage = 0, b_stage = 0;  // a stage's bytes of A and of B
  // B N-major ([K, N]): TMA loads it in blocks of 128 bytes of N x bk rows of K. 16-bit wgmma
  // reads those blocks as they are (imm-trans-b); tf32 wgmma has no transpose, so TMA loads them
  // into a staging area and the consumers write B K-major into the stage, rounded (staged).
  bool b_n_major = false;
  bool staged = false;
  // A M-major ([K, M], transpose_a) likewise: TMA loads blocks of 128 bytes of M x bk rows of K;
  // 16-bit wgmma reads consumer c's block c as it is (imm-trans-a, 64 columns: one block), and
  // tf32's are staged and written K-major by the consumers (a_staged).
  bool a_m_major = false;
  bool a_staged = false;
  bool a_trans = false;
  // An MN-major operand's TMA blocks: n_block columns, block_bytes apart.
  int n_block = 0, block_bytes = 0;
  // conv: the staging areas hold 64 of K in fp32, two boxes of 32 (128 bytes) a row: A K-major
  // as two blocks of bm rows, B K-major as two blocks of bn rows, A M-major and B N-major as
  // bm / 32 and bn / 32 blocks of 64 k rows x 32 columns; 8 KiB a block at 128 rows.
  int at_stage = 0, bt_stage = 0;
};

// The consumers' rewrite of stage `s` (use `it`) after its full wait and before its wgmmas, as
// the kernel has one: bf16 conversion (conv), A's fragments to registers (a_regs), rounding,
// splitting and transposing (tf32), each consumer its share, then both published.
void emit_wgmma_stage_rewrite(Code& code, const WgmmaMatmul& w);

}  // namespace kiln::compiler::detail
