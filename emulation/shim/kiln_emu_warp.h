// Warp-collective primitives of the emulator: shuffles, votes, ldmatrix and mma.sync, with the
// fragment layouts of the PTX ISA (g = lane / 4, t = lane % 4).
//
// MMA arithmetic: every product of two operands is exact (tf32 x tf32, bf16 x bf16 and f16 x f16
// products all fit in an fp32); each element of D starts from C and adds the products of its
// k-slice as a tensor core does (kiln_emu_sum.h: block_sum, or slice_sum_hopper for sm_90). TF32
// operands are read through tf32 truncation (the low 13 bits dropped), as the hardware does with
// values that cvt.rna did not convert.
//
// KILN_EMU_BREAK_LAYOUT swaps two A-fragment registers in every mma (a deliberately wrong layout,
// used only to prove that the comparison against the reference catches layout errors).
#ifndef KILN_EMU_WARP_H
#define KILN_EMU_WARP_H

#include "kiln_emu_runtime.h"
#include "kiln_emu_sum.h"

#include <cmath>

namespace kiln_emu {

enum ShuffleKind : int { shfl_idx = 0, shfl_up = 1, shfl_down = 2, shfl_xor = 3 };
enum MmaKind : int { mma_tf32_k8 = 0, mma_bf16_k16 = 1, mma_f16_k16 = 2, mma_f16_k8 = 3 };

inline float tf32_operand(uint32_t bits) { return to_float(g_api->tf32_truncate_bits(bits)); }
inline float half_operand(uint32_t word, int half, bool bf16) {
  uint16_t h = static_cast<uint16_t>(half ? word >> 16 : word & 0xffffu);
  return bf16 ? g_api->float_from_bf16(h) : g_api->float_from_f16(h);
}

inline void complete_shuffle(Warp& w) {
  for (int lane = 0; lane < 32; ++lane) {
    if (!(w.mask & (1u << lane))) continue;
    LaneSlot& s = w.slots[lane];
    int width = s.width;
    int base = lane & ~(width - 1);
    int src = lane;
    switch (s.variant) {
      case shfl_idx: src = base + (s.arg & (width - 1)); break;
      case shfl_up: src = lane - s.arg >= base ? lane - s.arg : lane; break;
      case shfl_down: src = lane + s.arg < base + width ? lane + s.arg : lane; break;
      // A partner in a later segment of `width` lanes gives the caller's own value; one in an
      // earlier segment is read (CUDA's __shfl_xor_sync; PTX shfl.bfly reads j <= maxLane).
      case shfl_xor: src = (lane ^ s.arg) < base + width ? lane ^ s.arg : lane; break;
    }
    if (!(w.mask & (1u << src))) {
      fail("warp shuffle: lane " + std::to_string(lane) + " reads lane " + std::to_string(src) +
           ", which is not in the mask");
    }
    s.result = w.slots[src].value;
  }
}

inline void complete_ballot(Warp& w) {
  uint64_t votes = 0;
  for (int lane = 0; lane < 32; ++lane)
    if ((w.mask & (1u << lane)) && w.slots[lane].value) votes |= uint64_t{1} << lane;
  for (int lane = 0; lane < 32; ++lane) w.slots[lane].result = votes;
}

// ldmatrix .m8n8 .x1/.x2/.x4 (.trans): lane 8i+r gives the address of row r of matrix i; lane L
// receives, of matrix i, row L/4 bytes 4(L%4)..+3, or with .trans the elements
// [2(L%4)][L/4] and [2(L%4)+1][L/4].
// x1 and x2 read the first 8 and 16 lanes' addresses; on sm_75 every lane's must be valid
// (PTX ISA: "for .target sm_75 and below, all threads must contain valid addresses").
inline void complete_ldmatrix(Warp& w) {
  int count = w.variant & 7;
  bool trans = (w.variant & 8) != 0;
  int checked = KILN_EMU_SM <= 75 ? 32 : 8 * count;
  for (int lane = 0; lane < checked; ++lane)
    check_smem(w.slots[lane].a, 16, 16,
               lane < 8 * count ? "ldmatrix row address"
                                : "ldmatrix address of a lane past the matrices (sm_75 needs every lane's valid)");
  for (int lane = 0; lane < 32; ++lane) {
    uint32_t* out = static_cast<uint32_t*>(w.slots[lane].d);
    for (int m = 0; m < count; ++m) {
      if (!trans) {
        const unsigned char* row = static_cast<const unsigned char*>(w.slots[m * 8 + lane / 4].a);
        std::memcpy(&out[m], row + 4 * (lane % 4), 4);
        continue;
      }
      uint16_t lo, hi;
      const unsigned char* row0 = static_cast<const unsigned char*>(w.slots[m * 8 + 2 * (lane % 4)].a);
      const unsigned char* row1 = static_cast<const unsigned char*>(w.slots[m * 8 + 2 * (lane % 4) + 1].a);
      std::memcpy(&lo, row0 + 2 * (lane / 4), 2);
      std::memcpy(&hi, row1 + 2 * (lane / 4), 2);
      out[m] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
  }
}

// Gathers A (16 x K) and B (K x 8) from the lanes' fragments, then D = A B + C per lane.
inline void complete_mma(Warp& w) {
  float a[16][16] = {}, bm[16][8] = {};
  int k = w.variant == mma_tf32_k8 || w.variant == mma_f16_k8 ? 8 : 16;
  for (int lane = 0; lane < 32; ++lane) {
    int g = lane / 4, t = lane % 4;
    const uint32_t* fa = static_cast<const uint32_t*>(w.slots[lane].a);
    const uint32_t* fb = static_cast<const uint32_t*>(w.slots[lane].b);
    uint32_t ra[4] = {fa[0], fa[1], 0, 0};
    if (w.variant != mma_f16_k8) ra[2] = fa[2], ra[3] = fa[3];
#ifdef KILN_EMU_BREAK_LAYOUT
    uint32_t swap = ra[0];
    ra[0] = ra[1];
    ra[1] = swap;
#endif
    if (w.variant == mma_tf32_k8) {
      a[g][t] = tf32_operand(ra[0]);
      a[g + 8][t] = tf32_operand(ra[1]);
      a[g][t + 4] = tf32_operand(ra[2]);
      a[g + 8][t + 4] = tf32_operand(ra[3]);
      bm[t][g] = tf32_operand(fb[0]);
      bm[t + 4][g] = tf32_operand(fb[1]);
      continue;
    }
    bool bf16 = w.variant == mma_bf16_k16;
    for (int h = 0; h < 2; ++h) {
      a[g][2 * t + h] = half_operand(ra[0], h, bf16);
      a[g + 8][2 * t + h] = half_operand(ra[1], h, bf16);
      bm[2 * t + h][g] = half_operand(fb[0], h, bf16);
      if (k == 16) {
        a[g][2 * t + 8 + h] = half_operand(ra[2], h, bf16);
        a[g + 8][2 * t + 8 + h] = half_operand(ra[3], h, bf16);
        bm[2 * t + 8 + h][g] = half_operand(fb[1], h, bf16);
      }
    }
  }
  float d[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    int g = lane / 4, t = lane % 4;
    const float* c = static_cast<const float*>(w.slots[lane].d);
    d[g][2 * t] = c[0];
    d[g][2 * t + 1] = c[1];
    d[g + 8][2 * t] = c[2];
    d[g + 8][2 * t + 1] = c[3];
  }
  // Products in blocks (4 for tf32 and sm_75's f16 m16n8k8, 8 for 16-bit m16n8k16), each block
  // added to the accumulator in one step.
  int block = w.variant == mma_tf32_k8 || w.variant == mma_f16_k8 ? 4 : 8;
#ifdef KILN_EMU_MMA_HOPPER
  SliceOperands rows[16], columns[8];
  for (int i = 0; i < 16; ++i) prepare_slice(rows[i], a[i], k);
  for (int j = 0; j < 8; ++j) {
    float column[16];
    for (int kk = 0; kk < k; ++kk) column[kk] = bm[kk][j];
    prepare_slice(columns[j], column, k);
  }
#endif
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float sum = d[i][j];
#ifdef KILN_EMU_MMA_HOPPER
      d[i][j] = slice_sum_hopper(sum, rows[i], columns[j], k);
      continue;
#endif
      for (int k0 = 0; k0 < k; k0 += block) {
        float products[8];
        for (int kk = 0; kk < block; ++kk) products[kk] = a[i][k0 + kk] * bm[k0 + kk][j];  // exact
        sum = block_sum(sum, products, block);
      }
      d[i][j] = sum;
    }
  for (int lane = 0; lane < 32; ++lane) {
    int g = lane / 4, t = lane % 4;
    float* out = static_cast<float*>(w.slots[lane].d);
    out[0] = d[g][2 * t];
    out[1] = d[g][2 * t + 1];
    out[2] = d[g + 8][2 * t];
    out[3] = d[g + 8][2 * t + 1];
  }
}

inline void complete_collective(Warp& w) {
  switch (w.op) {
    case Collective::shfl: complete_shuffle(w); return;
    case Collective::ballot: complete_ballot(w); return;
    case Collective::ldmatrix: complete_ldmatrix(w); return;
    case Collective::mma: complete_mma(w); return;
    default: return;
  }
}

template <typename T>
inline T shuffle(ShuffleKind kind, unsigned mask, T value, int arg, int width) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) fail("warp shuffle: width must be a power of two up to 32");
  LaneSlot s;
  s.op = Collective::shfl;
  s.variant = kind;
  s.mask = mask;
  std::memcpy(&s.value, &value, sizeof(T));
  s.arg = arg;
  s.width = width;
  LaneSlot& done = collective(s);
  T out;
  std::memcpy(&out, &done.result, sizeof(T));
  return out;
}

inline uint32_t ballot(unsigned mask, bool vote) {
  LaneSlot s;
  s.op = Collective::ballot;
  s.mask = mask;
  s.value = vote ? 1 : 0;
  return static_cast<uint32_t>(collective(s).result) & mask;
}

KILN_EMU_ENTRY(void, syncwarp, (unsigned mask)) {
  LaneSlot s;
  s.op = Collective::syncwarp;
  s.mask = mask;
  collective(s);
}

// `site`: where the kernel executes it (see LaneSlot::site).
KILN_EMU_ENTRY(void, ldmatrix,
               (unsigned* r, const void* row, int count, bool trans, const void* site)) {
  require_sm(75, "ldmatrix");
  LaneSlot s;
  s.op = Collective::ldmatrix;
  s.variant = count | (trans ? 8 : 0);
  s.mask = 0xffffffffu;
  s.a = row;
  s.d = r;
  s.site = site;
  collective(s);
}

KILN_EMU_ENTRY(void, mma,
               (MmaKind kind, float* d, const unsigned* a, const unsigned* b, const void* site)) {
  require_sm(kind == mma_f16_k8 ? 75 : 80, kind == mma_tf32_k8    ? "mma.sync m16n8k8 tf32"
                                            : kind == mma_bf16_k16 ? "mma.sync m16n8k16 bf16"
                                            : kind == mma_f16_k16  ? "mma.sync m16n8k16 f16"
                                                                   : "mma.sync m16n8k8 f16");
  LaneSlot s;
  s.op = Collective::mma;
  s.variant = kind;
  s.mask = 0xffffffffu;
  s.a = a;
  s.b = b;
  s.d = d;
  s.site = site;
  collective(s);
}

}  // namespace kiln_emu

#endif  // KILN_EMU_WARP_H
