// The device prelude's primitives (compiler/prelude.cuh) on the host: same names, signatures and
// semantics. Conversions call kiln's reference roundings (bit for bit what the reference does);
// warp-collective ones (ldmatrix, mma.sync) run through the fiber scheduler; cp.async copies land
// when a wait retires their group.
#ifndef KILN_EMU_PRELUDE_H
#define KILN_EMU_PRELUDE_H

#include "kiln_emu_hopper.h"

#include <type_traits>
#include <utility>

#define KILN_DEVICE static inline

struct kiln_bf16 { unsigned short bits; };
struct kiln_f16 { unsigned short bits; };

// ---- bit casts ---------------------------------------------------------------------------
KILN_DEVICE float kiln_as_float(unsigned bits) { return ::kiln_emu::to_float(bits); }
KILN_DEVICE unsigned kiln_as_uint(float value) { return ::kiln_emu::to_bits(value); }

// ---- conversions ---------------------------------------------------------------------------
KILN_DEVICE float kiln_bf16_to_float(kiln_bf16 h) { return ::kiln_emu::api().float_from_bf16(h.bits); }
KILN_DEVICE kiln_bf16 kiln_float_to_bf16(float f) {
  return kiln_bf16{::kiln_emu::api().bf16_from_float(f)};
}
KILN_DEVICE float kiln_f16_to_float(kiln_f16 h) { return ::kiln_emu::api().float_from_f16(h.bits); }
KILN_DEVICE kiln_f16 kiln_float_to_f16(float f) { return kiln_f16{::kiln_emu::api().f16_from_float(f)}; }
KILN_DEVICE float kiln_max(float a, float b) { return (a > b || a != a) ? a : b; }
KILN_DEVICE float kiln_min(float a, float b) { return (a < b || a != a) ? a : b; }
KILN_DEVICE float kiln_round_bf16(float f) { return kiln_bf16_to_float(kiln_float_to_bf16(f)); }
KILN_DEVICE float kiln_round_f16(float f) { return kiln_f16_to_float(kiln_float_to_f16(f)); }
KILN_DEVICE unsigned kiln_pack_bf16x2(float lo, float hi) {
  return static_cast<unsigned>(kiln_float_to_bf16(lo).bits) |
         (static_cast<unsigned>(kiln_float_to_bf16(hi).bits) << 16);
}
KILN_DEVICE unsigned kiln_pack_f16x2(float lo, float hi) {
  return static_cast<unsigned>(kiln_float_to_f16(lo).bits) |
         (static_cast<unsigned>(kiln_float_to_f16(hi).bits) << 16);
}
// cvt.rna.tf32.f32 exists from sm_80; before that the prelude passes the bits through.
KILN_DEVICE unsigned kiln_cvt_rna_tf32(float f) {
  if (KILN_EMU_SM < 80) return ::kiln_emu::to_bits(f);
  return ::kiln_emu::api().tf32_rna_bits(::kiln_emu::to_bits(f));
}
KILN_DEVICE unsigned kiln_tf32x3_big(float f) {  // ±1 for an infinity or NaN
  const unsigned bits = ::kiln_emu::to_bits(f);
  return (bits & 0x7fffffffu) < 0x7f800000u ? kiln_cvt_rna_tf32(f)
                                            : (bits & 0x80000000u) | 0x3f800000u;
}

// ---- shared memory -------------------------------------------------------------------------
KILN_DEVICE unsigned char* kiln_dynamic_smem() { return ::kiln_emu::t_block->smem; }
KILN_DEVICE unsigned kiln_smem_addr(const void* p) {
  return static_cast<unsigned>(static_cast<const unsigned char*>(p) - ::kiln_emu::t_block->smem);
}
KILN_DEVICE void kiln_copy_16(void* smem_dst, const void* gmem_src) {
  ::kiln_emu::check_smem(smem_dst, 16, 16, "kiln_copy_16 destination");
  ::kiln_emu::check_global(gmem_src, 16, 16, "kiln_copy_16 source");
  std::memcpy(smem_dst, gmem_src, 16);
}
KILN_DEVICE void kiln_zero_16(void* smem_dst) {
  ::kiln_emu::check_smem(smem_dst, 16, 16, "kiln_zero_16 destination");
  std::memset(smem_dst, 0, 16);
}

// ---- cp.async --------------------------------------------------------------------------------
KILN_DEVICE void kiln_cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes) {
  ::kiln_emu::cp_async(smem_dst, gmem_src, 16, src_bytes);
}
KILN_DEVICE void kiln_cp_async_4(void* smem_dst, const void* gmem_src, int src_bytes) {
  ::kiln_emu::cp_async(smem_dst, gmem_src, 4, src_bytes);
}
KILN_DEVICE void kiln_cp_async_commit() { ::kiln_emu::cp_async_commit(); }
template <int N>
KILN_DEVICE void kiln_cp_async_wait() {
  ::kiln_emu::cp_async_wait(N);
}

// ---- mbarrier --------------------------------------------------------------------------------
KILN_DEVICE void kiln_mbarrier_init(unsigned long long* bar, unsigned count) {
  ::kiln_emu::mbarrier_init(bar, count);
}
KILN_DEVICE void kiln_mbarrier_arrive(unsigned long long* bar) { ::kiln_emu::mbarrier_arrive(bar); }
KILN_DEVICE void kiln_mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  if (bytes == 0) ::kiln_emu::require_sm(90, "mbarrier.arrive.expect_tx");
  ::kiln_emu::mbarrier_arrive(bar, bytes);
}
KILN_DEVICE void kiln_mbarrier_wait(unsigned long long* bar, unsigned parity) {
  ::kiln_emu::mbarrier_wait_parity(bar, parity);
}

// ---- ldmatrix --------------------------------------------------------------------------------
// ldmatrix and mma.sync are .aligned: every lane must execute the same instruction. Kept out of
// line, each call's return address names the place in the kernel that executed it.
#define KILN_EMU_OUT_OF_LINE __attribute__((noinline))
#define KILN_EMU_SITE __builtin_return_address(0)
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_ldmatrix_x4(unsigned* r, const void* smem_row) {
  ::kiln_emu::ldmatrix(r, smem_row, 4, false, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_ldmatrix_x2(unsigned* r, const void* smem_row) {
  ::kiln_emu::ldmatrix(r, smem_row, 2, false, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_ldmatrix_x1(unsigned* r, const void* smem_row) {
  ::kiln_emu::ldmatrix(r, smem_row, 1, false, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_ldmatrix_x4_trans(unsigned* r, const void* smem_row) {
  ::kiln_emu::ldmatrix(r, smem_row, 4, true, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_ldmatrix_x2_trans(unsigned* r, const void* smem_row) {
  ::kiln_emu::ldmatrix(r, smem_row, 2, true, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_ldmatrix_x1_trans(unsigned* r, const void* smem_row) {
  ::kiln_emu::ldmatrix(r, smem_row, 1, true, KILN_EMU_SITE);
}

// ---- mma.sync --------------------------------------------------------------------------------
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_mma_m16n8k8_tf32(float* d, const unsigned* a, const unsigned* b) {
  ::kiln_emu::mma(::kiln_emu::mma_tf32_k8, d, a, b, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b) {
  ::kiln_emu::mma(::kiln_emu::mma_bf16_k16, d, a, b, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_mma_m16n8k16_f16(float* d, const unsigned* a, const unsigned* b) {
  ::kiln_emu::mma(::kiln_emu::mma_f16_k16, d, a, b, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_mma_m16n8k8_f16(float* d, const unsigned* a, const unsigned* b) {
  ::kiln_emu::mma(::kiln_emu::mma_f16_k8, d, a, b, KILN_EMU_SITE);
}

// ---- sm_90: TMA, the async proxy, wgmma, setmaxnreg (kiln_emu_hopper.h) ----------------------
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
KILN_DEVICE void kiln_fence_proxy_async() { ::kiln_emu::fence_proxy_async(); }
KILN_DEVICE void kiln_tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1,
                                  unsigned long long* bar) {
  int coords[2] = {c0, c1};
  ::kiln_emu::tma_load(dst, map, coords, 2, bar);
}
KILN_DEVICE void kiln_tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                  unsigned long long* bar) {
  int coords[3] = {c0, c1, c2};
  ::kiln_emu::tma_load(dst, map, coords, 3, bar);
}
KILN_DEVICE void kiln_tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                  int c3, unsigned long long* bar) {
  int coords[4] = {c0, c1, c2, c3};
  ::kiln_emu::tma_load(dst, map, coords, 4, bar);
}
KILN_DEVICE void kiln_tma_load_5d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                  int c3, int c4, unsigned long long* bar) {
  int coords[5] = {c0, c1, c2, c3, c4};
  ::kiln_emu::tma_load(dst, map, coords, 5, bar);
}
KILN_DEVICE unsigned long long kiln_gmma_desc_128b(const void* smem, unsigned lbo_bytes,
                                                   unsigned sbo_bytes) {
  return static_cast<unsigned long long>((kiln_smem_addr(smem) & 0x3ffffu) >> 4) |
         (static_cast<unsigned long long>((lbo_bytes >> 4) & 0x3fffu) << 16) |
         (static_cast<unsigned long long>((sbo_bytes >> 4) & 0x3fffu) << 32) | (1ull << 62);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_fence() { ::kiln_emu::wgmma_fence(KILN_EMU_SITE); }
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_commit() { ::kiln_emu::wgmma_commit(KILN_EMU_SITE); }
template <int N>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_wait() {
  ::kiln_emu::wgmma_wait(N, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_bar_sync(unsigned id, unsigned count) {
  ::kiln_emu::named_barrier(id, count, true, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_bar_arrive(unsigned id, unsigned count) {
  ::kiln_emu::named_barrier(id, count, false, KILN_EMU_SITE);
}
template <int N>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_setmaxnreg_inc() {
  ::kiln_emu::setmaxnreg(N, true, KILN_EMU_SITE);
}
template <int N>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_setmaxnreg_dec() {
  ::kiln_emu::setmaxnreg(N, false, KILN_EMU_SITE);
}
// wgmma m64nNk16, A K-major (TransA 0) or M-major (1), B K-major (TransB 0) or N-major (1)
// (kiln_emu_hopper.h): written out, one per shape and type, so that each is
// a primitive by name (tests/emulation/shim_test.cpp matches the prelude's names).
template <int TransB, int TransA = 0>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n64k16_bf16(float* d, unsigned long long a,
                                                                unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 64, true, TransA != 0, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB, int TransA = 0>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n64k16_f16(float* d, unsigned long long a,
                                                               unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 64, false, TransA != 0, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB, int TransA = 0>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n128k16_bf16(float* d, unsigned long long a,
                                                                 unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 128, true, TransA != 0, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB, int TransA = 0>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n128k16_f16(float* d, unsigned long long a,
                                                                unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 128, false, TransA != 0, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB, int TransA = 0>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n256k16_bf16(float* d, unsigned long long a,
                                                                 unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 256, true, TransA != 0, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB, int TransA = 0>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n256k16_f16(float* d, unsigned long long a,
                                                                unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 256, false, TransA != 0, TransB != 0, scale_d, KILN_EMU_SITE);
}
// tf32: m64nNk8 on fp32 operands, both K-major.
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n64k8_tf32(float* d, unsigned long long a,
                                                               unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 64, ::kiln_emu::wgmma_tf32, false, false, scale_d, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n128k8_tf32(float* d, unsigned long long a,
                                                                unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 128, ::kiln_emu::wgmma_tf32, false, false, scale_d, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n256k8_tf32(float* d, unsigned long long a,
                                                                unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, a, nullptr, b, 256, ::kiln_emu::wgmma_tf32, false, false, scale_d, KILN_EMU_SITE);
}
// tf32 in the RS form: A from the thread's four registers a[0..3], B K-major.
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n64k8_tf32_rs(float* d, unsigned* a,
                                                                  unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 64, ::kiln_emu::wgmma_tf32, false, false, scale_d, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n128k8_tf32_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 128, ::kiln_emu::wgmma_tf32, false, false, scale_d, KILN_EMU_SITE);
}
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n256k8_tf32_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 256, ::kiln_emu::wgmma_tf32, false, false, scale_d, KILN_EMU_SITE);
}
// The RS form: A from the thread's four registers a[0..3].
template <int TransB>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n64k16_bf16_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 64, true, false, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n64k16_f16_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 64, false, false, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n128k16_bf16_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 128, true, false, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n128k16_f16_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 128, false, false, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n192k16_bf16_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 192, true, false, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n192k16_f16_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 192, false, false, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n256k16_bf16_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 256, true, false, TransB != 0, scale_d, KILN_EMU_SITE);
}
template <int TransB>
KILN_DEVICE KILN_EMU_OUT_OF_LINE void kiln_wgmma_m64n256k16_f16_rs(float* d, unsigned* a,
                                                                   unsigned long long b, int scale_d) {
  ::kiln_emu::wgmma(d, 0, a, b, 256, false, false, TransB != 0, scale_d, KILN_EMU_SITE);
}

// Calls a kernel with args[i] as parameter i: a pointer parameter is args[i] itself, an int
// parameter (a symbolic graph's sizes) the int args[i] points to.
namespace kiln_emu {
template <typename P>
inline P kernel_arg(void* arg) {
  if constexpr (std::is_pointer_v<P>) {
    return static_cast<P>(arg);
  } else {
    return *static_cast<const P*>(arg);
  }
}
template <typename... P, size_t... I>
inline void call_kernel(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(kernel_arg<P>(args[I])...);
}
template <typename... P>
inline void call_kernel(void (*kernel)(P...), void** args) {
  call_kernel(kernel, args, std::index_sequence_for<P...>{});
}
// How many parameters a kernel takes.
template <typename... P>
inline int arity(void (*)(P...)) {
  return static_cast<int>(sizeof...(P));
}
}  // namespace kiln_emu

#endif  // KILN_EMU_PRELUDE_H
