// Warp-collective primitives of the emulator: shuffles, votes, ldmatrix and mma.sync, with the
// fragment layouts of the PTX ISA (g = lane / 4, t = lane % 4).
//
// MMA arithmetic: every product of two operands is exact (tf32 x tf32, bf16 x bf16 and f16 x f16
// products all fit in an fp32); each element of D starts from C and adds the products of its
// k-slice in fp32 in increasing k order, each addition rounded to nearest even. (The hardware adds
// a k-slice with wider internal alignment in an order it does not specify; the difference is a
// few fp32 ulps of the accumulator.) TF32 operands are read through tf32 truncation (the low 13
// bits dropped), as the hardware does with values that cvt.rna did not convert.
//
// KILN_EMU_BREAK_LAYOUT swaps two A-fragment registers in every mma (a deliberately wrong layout,
// used only to prove that the comparison against the reference catches layout errors).
#ifndef KILN_EMU_WARP_H
#define KILN_EMU_WARP_H

#include "kiln_emu_runtime.h"

#include <cmath>

namespace kiln_emu {

enum ShuffleKind : int { shfl_idx = 0, shfl_up = 1, shfl_down = 2, shfl_xor = 3 };
enum MmaKind : int { mma_tf32_k8 = 0, mma_bf16_k16 = 1, mma_f16_k16 = 2, mma_f16_k8 = 3 };

inline float to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

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

// One step of a tensor core's accumulation: c plus `n` exact products. The model (Fasi, Higham,
// Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021): every
// addend is aligned to the largest one's exponent E and truncated below 2^(E - 23) (no guard
// bits), the aligned addends are summed exactly (carry-out bits), and the sum is truncated to
// fp32 (round toward zero). KILN_EMU_MMA_NEAREST instead adds the products one at a time in fp32
// with round-to-nearest, as the emulator did before.
inline float block_sum(float c, const float* products, int n) {
#ifdef KILN_EMU_MMA_NEAREST
  for (int i = 0; i < n; ++i) c += products[i];
  return c;
#else
  double big = std::fabs(static_cast<double>(c));
  bool finite = std::isfinite(c);
  for (int i = 0; i < n; ++i) {
    big = std::fmax(big, std::fabs(static_cast<double>(products[i])));
    finite = finite && std::isfinite(products[i]);
  }
  if (!finite || big == 0.0) {  // infinities and NaN as fp32 adds them; zeros keep c's sign
    for (int i = 0; i < n; ++i) c += products[i];
    return c;
  }
  double quantum = std::ldexp(1.0, std::ilogb(big) - 23);
  double sum = std::trunc(static_cast<double>(c) / quantum) * quantum;
  for (int i = 0; i < n; ++i) sum += std::trunc(static_cast<double>(products[i]) / quantum) * quantum;
  float f = static_cast<float>(sum);  // to nearest, then toward zero where that rounded outward
  if (std::fabs(static_cast<double>(f)) > std::fabs(sum)) f = std::nextafter(f, 0.0f);
  return f;
#endif
}

// The H100's accumulation, measured on hardware (bench/RESULTS.md, 2026-11-25): a whole k-slice
// (8 tf32 products, 16 f16 or bf16 ones) and the accumulator in one step. Each product is aligned
// by the sum of its operands' exponents (the exact product may be up to twice that), E is the
// largest of these and the accumulator's exponent, every addend is truncated below 2^(E - 25)
// (two bits past fp32's 23), the truncated addends are summed exactly and the sum is truncated to
// fp32. Programs for sm_90 and sm_90a use it (KILN_EMU_MMA_HOPPER) unless a model is named.
inline float slice_sum_hopper(float c, const float* a, const float* b, int n) {
  bool finite = std::isfinite(c), any = c != 0.0f;
  int e = any ? std::ilogb(c) : 0;
  double products[16];
  for (int i = 0; i < n; ++i) {
    products[i] = static_cast<double>(a[i]) * static_cast<double>(b[i]);  // exact
    finite = finite && std::isfinite(products[i]);
    if (a[i] == 0.0f || b[i] == 0.0f) continue;
    int ei = std::ilogb(a[i]) + std::ilogb(b[i]);
    e = any ? std::max(e, ei) : ei;
    any = true;
  }
  if (!finite || !any) {  // infinities and NaN as fp32 adds them; zeros keep c's sign
    for (int i = 0; i < n; ++i) c += static_cast<float>(products[i]);
    return c;
  }
  double quantum = std::ldexp(1.0, e - 25);
  double total = std::trunc(static_cast<double>(c) / quantum) * quantum;
  for (int i = 0; i < n; ++i) total += std::trunc(products[i] / quantum) * quantum;
  float f = static_cast<float>(total);  // to nearest, then toward zero where that rounded outward
  if (std::fabs(static_cast<double>(f)) > std::fabs(total)) f = std::nextafter(f, 0.0f);
  return f;
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
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float sum = d[i][j];
#ifdef KILN_EMU_MMA_HOPPER
      float column[16];
      for (int kk = 0; kk < k; ++kk) column[kk] = bm[kk][j];
      d[i][j] = slice_sum_hopper(sum, a[i], column, k);
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

inline void syncwarp(unsigned mask) {
  LaneSlot s;
  s.op = Collective::syncwarp;
  s.mask = mask;
  collective(s);
}

// `site`: where the kernel executes it (see LaneSlot::site).
inline void ldmatrix(unsigned* r, const void* row, int count, bool trans, const void* site) {
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

inline void mma(MmaKind kind, float* d, const unsigned* a, const unsigned* b, const void* site) {
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
