// Host shim of CUDA C++ for kiln's emulator: the language extensions, built-in variables, warp
// intrinsics, vector types and math that generated kernels use, plus the device prelude's named
// primitives (compiler/prelude.cuh) with the same names, signatures and semantics.
//
// The exact kernel text kiln generates (emitted without the prelude) compiles against this header
// with the host compiler. Threads run as fibers (kiln_emu_launch.h); __shared__ variables are
// statics, shared by the threads of the one block that runs at a time.
#ifndef KILN_CUDA_HOST_H
#define KILN_CUDA_HOST_H

#include "kiln_emu_launch.h"
#include "kiln_emu_runtime.h"
#include "kiln_emu_warp.h"

#include <math.h>

#include <cmath>
#include <cstdlib>

// ---- language extensions -------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
#define __CUDACC_EMULATED__ 1

// ---- built-in variables --------------------------------------------------------------------
#define threadIdx (::kiln_emu::t_thread->tid)
#define blockIdx (::kiln_emu::t_block->block_idx)
#define blockDim (::kiln_emu::t_block->block_dim)
#define gridDim (::kiln_emu::t_block->grid_dim)
#define warpSize 32

inline void __syncthreads() { ::kiln_emu::barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::kiln_emu::syncwarp(mask); }
inline void __threadfence() { asm volatile("" ::: "memory"); }
inline void __threadfence_block() { asm volatile("" ::: "memory"); }

// ---- warp intrinsics -----------------------------------------------------------------------
template <typename T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  return ::kiln_emu::shuffle(::kiln_emu::shfl_idx, mask, var, src_lane, width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::kiln_emu::shuffle(::kiln_emu::shfl_up, mask, var, static_cast<int>(delta), width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::kiln_emu::shuffle(::kiln_emu::shfl_down, mask, var, static_cast<int>(delta), width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  return ::kiln_emu::shuffle(::kiln_emu::shfl_xor, mask, var, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return ::kiln_emu::ballot(mask, predicate != 0);
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) == mask;
}
inline unsigned __activemask() { return 0xffffffffu; }

// ---- atomics (fibers never interleave inside one, so plain code is atomic) ------------------
template <typename T>
inline T atomicAdd(T* p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
inline T atomicMax(T* p, T v) {
  T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T>
inline T atomicMin(T* p, T v) {
  T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T>
inline T atomicExch(T* p, T v) {
  T old = *p;
  *p = v;
  return old;
}

// ---- vector types --------------------------------------------------------------------------
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(8))) float2 { float x, y; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline int2 make_int2(int x, int y) { return int2{x, y}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }

// ---- integer helpers -----------------------------------------------------------------------
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a < b ? b : a; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a < b ? b : a; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a < b ? b : a; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __mul24(int a, int b) { return a * b; }
template <typename T>
inline T __ldg(const T* p) { return *p; }

// ---- bit casts and float math --------------------------------------------------------------
inline float __uint_as_float(unsigned u) { return ::kiln_emu::to_float(u); }
inline unsigned __float_as_uint(float f) { return ::kiln_emu::to_bits(f); }
inline float __int_as_float(int i) { return ::kiln_emu::to_float(static_cast<uint32_t>(i)); }
inline int __float_as_int(float f) { return static_cast<int>(::kiln_emu::to_bits(f)); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float2int_rn(float x) { return static_cast<int>(lrintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }

#include "kiln_emu_prelude.h"

#endif  // KILN_CUDA_HOST_H
