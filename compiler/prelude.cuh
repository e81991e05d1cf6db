// kiln device prelude: the only place generated code uses inline PTX; kernels call these names.
//
// Every generated kernel is plain CUDA C++ plus the primitives below, so a host emulation can
// compile the exact kernel text against its own definitions of the same names. The semantics of
// each primitive (fragment layouts follow the PTX ISA; g = lane / 4, t = lane % 4) are listed in
// compiler/KERNELS.md, "Device prelude". Keep names and signatures stable.
#ifndef KILN_PRELUDE_CUH
#define KILN_PRELUDE_CUH

// Inline, not static: NVRTC warns about every unreferenced static function, and a kernel uses few.
#define KILN_DEVICE __device__ __forceinline__

// 16-bit storage types; arithmetic always happens in float after conversion.
struct kiln_bf16 { unsigned short bits; };
struct kiln_f16 { unsigned short bits; };

// ---- bit casts --------------------------------------------------------------------------
KILN_DEVICE float kiln_as_float(unsigned bits) { return __uint_as_float(bits); }
KILN_DEVICE unsigned kiln_as_uint(float value) { return __float_as_uint(value); }

// ---- conversions (round to nearest even; NaN stays NaN) ----------------------------------
KILN_DEVICE float kiln_bf16_to_float(kiln_bf16 h) { return __uint_as_float(((unsigned)h.bits) << 16); }
KILN_DEVICE kiln_bf16 kiln_float_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  kiln_bf16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) { h.bits = (unsigned short)0x7fffu; return h; }
  u += 0x7fffu + ((u >> 16) & 1u);
  h.bits = (unsigned short)(u >> 16);
  return h;
}
KILN_DEVICE float kiln_f16_to_float(kiln_f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
KILN_DEVICE kiln_f16 kiln_float_to_f16(float f) {
  kiln_f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
// max and min as PyTorch's maximum and minimum: a NaN operand gives NaN (fmaxf would drop it).
KILN_DEVICE float kiln_max(float a, float b) { return (a > b || a != a) ? a : b; }
KILN_DEVICE float kiln_min(float a, float b) { return (a < b || a != a) ? a : b; }

// Rounds a float to the nearest bf16 / f16 value and back (a value of that dtype, held as float).
KILN_DEVICE float kiln_round_bf16(float f) { return kiln_bf16_to_float(kiln_float_to_bf16(f)); }
KILN_DEVICE float kiln_round_f16(float f) { return kiln_f16_to_float(kiln_float_to_f16(f)); }

// Two floats rounded to bf16 and packed: `lo` in bits 0..15, `hi` in bits 16..31.
KILN_DEVICE unsigned kiln_pack_bf16x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return (unsigned)kiln_float_to_bf16(lo).bits | ((unsigned)kiln_float_to_bf16(hi).bits << 16);
#endif
}
// Two floats rounded to f16 and packed: `lo` in bits 0..15, `hi` in bits 16..31.
KILN_DEVICE unsigned kiln_pack_f16x2(float lo, float hi) {
  return (unsigned)kiln_float_to_f16(lo).bits | ((unsigned)kiln_float_to_f16(hi).bits << 16);
}

// fp32 -> tf32 (round to nearest, ties away from zero); the result is a float bit pattern whose
// low 13 mantissa bits are zero.
KILN_DEVICE unsigned kiln_cvt_rna_tf32(float f) {
#if __CUDA_ARCH__ >= 800
  unsigned d;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(d) : "f"(f));
  return d;
#else
  return __float_as_uint(f);
#endif
}
// tf32x3's big part of `f` (its small part is cvt.rna(f - big)): tf32(f) for a finite f, ±1 for
// an infinity or NaN, whose small part is then the infinity or NaN. Each cross product big * small
// then holds a finite big part, so an infinity times a tf32-exact operand (small part 0) gives an
// infinity as in fp32, not inf * 0 = NaN; a NaN still reaches every product through its small
// part. The rounding is cvt.rna.tf32's own (half a tf32 ulp added to the magnitude, 13 bits
// dropped: what ptxas makes of the cvt), with its select for non-finite values choosing ±1: one
// instruction more than the cvt.
KILN_DEVICE unsigned kiln_tf32x3_big(float f) {
  const unsigned bits = __float_as_uint(f);
  return (fabsf(f) < __int_as_float(0x7f800000) ? bits + 0x1000u
                                                : (bits & 0x80000000u) | 0x3f800000u) &
         0xffffe000u;
}

// ---- shared memory ------------------------------------------------------------------------
// The block's dynamic shared memory (16-byte aligned; size given by the launch shape).
KILN_DEVICE unsigned char* kiln_dynamic_smem() {
  extern __shared__ __align__(16) unsigned char kiln_smem_[];
  return kiln_smem_;
}
KILN_DEVICE unsigned kiln_smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// Synchronous 16-byte copy global -> shared (used where cp.async does not exist, sm_75).
KILN_DEVICE void kiln_copy_16(void* smem_dst, const void* gmem_src) {
  *(uint4*)smem_dst = *(const uint4*)gmem_src;
}
// Writes 16 zero bytes to shared memory.
KILN_DEVICE void kiln_zero_16(void* smem_dst) {
  *(uint4*)smem_dst = make_uint4(0u, 0u, 0u, 0u);
}

// ---- cp.async (sm_80+) ----------------------------------------------------------------------
// Each clobbers "memory", so the compiler keeps plain shared-memory accesses on their side of the
// copies and waits (a thread reading what its own copies wrote right after its wait, with no
// barrier between: the sm_90a attention producer's staging ring).
// Copies src_bytes (0 or 16) from global to shared asynchronously, zero-filling the rest of the
// 16 bytes; with src_bytes == 0 nothing is read.
KILN_DEVICE void kiln_cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(kiln_smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes) : "memory");
#endif
}
// Copies src_bytes (0 or 4) asynchronously, zero-filling the rest of the 4 bytes.
KILN_DEVICE void kiln_cp_async_4(void* smem_dst, const void* gmem_src, int src_bytes) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
               :: "r"(kiln_smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes) : "memory");
#endif
}
// Closes the current group of cp.async copies issued by this thread.
KILN_DEVICE void kiln_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
KILN_DEVICE void kiln_cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

// ---- mbarrier (init and arrive: sm_80+; transaction bytes and parity waits: sm_90+) ------------
// An mbarrier is 8 bytes of shared memory, 8-byte aligned. A phase completes when it has had
// `count` arrivals and every transaction byte it expects has landed; waiters name the phase by
// its parity (0 for the first, then alternating).
KILN_DEVICE void kiln_mbarrier_init(unsigned long long* bar, unsigned count) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(kiln_smem_addr(bar)), "r"(count)
               : "memory");
#endif
}
KILN_DEVICE void kiln_mbarrier_arrive(unsigned long long* bar) {
#if __CUDA_ARCH__ >= 800
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n"
               :: "r"(kiln_smem_addr(bar)) : "memory");
#endif
}
// Arrives, first adding `bytes` to the transaction bytes the phase waits for. sm_90 and newer:
// not guarded, so a kernel that calls it for an older arch fails to assemble rather than skip it.
KILN_DEVICE void kiln_mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"(kiln_smem_addr(bar)), "r"(bytes) : "memory");
}
// Waits until the phase of parity `parity` has completed (sm_90 and newer, likewise).
KILN_DEVICE void kiln_mbarrier_wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(kiln_smem_addr(bar)), "r"(parity) : "memory");
  }
}

// ---- ldmatrix (sm_75+) ----------------------------------------------------------------------
// Each lane passes the shared-memory address of one 16-byte row: lanes 8i..8i+7 address the rows
// of matrix i. r[i] receives this lane's 32 bits of matrix i (row lane/4, bytes 4*(lane%4)..+3),
// or with _trans the transposed 16-bit pair (elements [2*(lane%4)][lane/4] and [2*(lane%4)+1][lane/4]).
// x1 and x2 read the addresses of lanes 0..7 and 0..15 only, but on sm_75 every lane's address
// must be a valid one (PTX ISA, ldmatrix): pass a row of the tile in every lane.
KILN_DEVICE void kiln_ldmatrix_x4(unsigned* r, const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(kiln_smem_addr(smem_row)));
}
KILN_DEVICE void kiln_ldmatrix_x2(unsigned* r, const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(kiln_smem_addr(smem_row)));
}
KILN_DEVICE void kiln_ldmatrix_x1(unsigned* r, const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(kiln_smem_addr(smem_row)));
}
KILN_DEVICE void kiln_ldmatrix_x4_trans(unsigned* r, const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(kiln_smem_addr(smem_row)));
}
KILN_DEVICE void kiln_ldmatrix_x2_trans(unsigned* r, const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(kiln_smem_addr(smem_row)));
}
KILN_DEVICE void kiln_ldmatrix_x1_trans(unsigned* r, const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(kiln_smem_addr(smem_row)));
}

// ---- mma.sync (d = a * b + d, fp32 accumulators, row.col) ---------------------------------
// m16n8k8 tf32 (sm_80+): a[4] = A(g,t) A(g+8,t) A(g,t+4) A(g+8,t+4); b[2] = B(t,g) B(t+4,g);
// d[4] = D(g,2t) D(g,2t+1) D(g+8,2t) D(g+8,2t+1).
KILN_DEVICE void kiln_mma_m16n8k8_tf32(float* d, const unsigned* a, const unsigned* b) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
// m16n8k16 bf16 (sm_80+): a[4] = pairs A(g,2t..2t+1) A(g+8,2t..) A(g,2t+8..) A(g+8,2t+8..);
// b[2] = pairs B(2t..2t+1,g) B(2t+8..2t+9,g); lower k in the low half; d as for tf32.
KILN_DEVICE void kiln_mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
// m16n8k16 f16 (sm_80+): fragments as for bf16.
KILN_DEVICE void kiln_mma_m16n8k16_f16(float* d, const unsigned* a, const unsigned* b) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
// m16n8k8 f16 (sm_75+): a[2] = pairs A(g,2t..2t+1) A(g+8,2t..); b[1] = pair B(2t..2t+1,g).
KILN_DEVICE void kiln_mma_m16n8k8_f16(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b[0]));
}

// ---- sm_90: TMA, the async proxy, wgmma, setmaxnreg -------------------------------------
// These are not guarded: a kernel that calls them for an arch without them fails to assemble
// (TMA and fence.proxy.async: sm_90; wgmma and setmaxnreg: sm_90a) rather than compile to nothing.
// A tensor map parameter: 128 opaque bytes the host encodes with cuTensorMapEncodeTiled.
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
// The generic proxy's shared-memory writes so far become visible to the async proxy (wgmma
// operand reads, TMA).
KILN_DEVICE void kiln_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The box of `map` at element coordinates (c0 innermost) to shared memory at `dst`, zero-filled
// where it leaves the tensor; the box's bytes complete on mbarrier `bar` as they land.
KILN_DEVICE void kiln_tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1,
                                  unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(kiln_smem_addr(dst)), "l"((unsigned long long)map), "r"(c0), "r"(c1),
                  "r"(kiln_smem_addr(bar)) : "memory");
}
KILN_DEVICE void kiln_tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                  unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];\n"
               :: "r"(kiln_smem_addr(dst)), "l"((unsigned long long)map), "r"(c0), "r"(c1),
                  "r"(c2), "r"(kiln_smem_addr(bar)) : "memory");
}
KILN_DEVICE void kiln_tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                  int c3, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               :: "r"(kiln_smem_addr(dst)), "l"((unsigned long long)map), "r"(c0), "r"(c1),
                  "r"(c2), "r"(c3), "r"(kiln_smem_addr(bar)) : "memory");
}
KILN_DEVICE void kiln_tma_load_5d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                  int c3, int c4, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n"
               :: "r"(kiln_smem_addr(dst)), "l"((unsigned long long)map), "r"(c0), "r"(c1),
                  "r"(c2), "r"(c3), "r"(c4), "r"(kiln_smem_addr(bar)) : "memory");
}
// A wgmma shared-memory matrix descriptor with 128-byte swizzle (PTX ISA, "Matrix Descriptor
// Format"): start address, leading and stride byte offsets (16-byte units), base offset 0.
KILN_DEVICE unsigned long long kiln_gmma_desc_128b(const void* smem, unsigned lbo_bytes,
                                                   unsigned sbo_bytes) {
  return (unsigned long long)((kiln_smem_addr(smem) & 0x3ffffu) >> 4) |
         ((unsigned long long)((lbo_bytes >> 4) & 0x3fffu) << 16) |
         ((unsigned long long)((sbo_bytes >> 4) & 0x3fffu) << 32) | (1ull << 62);
}
KILN_DEVICE void kiln_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
KILN_DEVICE void kiln_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
KILN_DEVICE void kiln_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// Named barrier `id` (1 to 15; 0 is __syncthreads') of `count` threads, a multiple of 32:
// kiln_bar_sync waits until `count` threads have arrived at it, itself included; kiln_bar_arrive
// counts the thread and goes on (bar.sync / bar.arrive: whole warps arrive together).
KILN_DEVICE void kiln_bar_sync(unsigned id, unsigned count) {
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
KILN_DEVICE void kiln_bar_arrive(unsigned id, unsigned count) {
  asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
template <int N>
KILN_DEVICE void kiln_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N));
}
template <int N>
KILN_DEVICE void kiln_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N));
}
// wgmma.mma_async m64nNk16 with fp32 accumulators, A and B from descriptors: A K-major (TransA 0)
// or M-major (1), B K-major (TransB 0) or N-major (1). d[4 j + i] (j = 0 .. N/8 - 1) holds D(16 w + g + 8 (i >> 1),
// 8 j + 2 t + (i & 1)) in warp w of the warpgroup: four m16n8 accumulators stacked per warp.
// scale_d 0: D = A B, else D += A B.
// The accumulator operands: %0..%63 (and %64..%127) are d[0..63] (and d[64..127]).
// (m64n64: %0..%31 are d[0..31]; m64n192: %0..%95 are d[0..95].)
#define KILN_WGMMA_REGS32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KILN_WGMMA_D32 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KILN_WGMMA_REGS64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KILN_WGMMA_REGS96 KILN_WGMMA_REGS64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define KILN_WGMMA_REGS128 KILN_WGMMA_REGS64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define KILN_WGMMA_D64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KILN_WGMMA_D96 KILN_WGMMA_D64, \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define KILN_WGMMA_D128 KILN_WGMMA_D64, \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
// One wgmma m64nNk16: SHAPE "m64n128k16", TYPE "bf16" or "f16", REGS and D the accumulators,
// A the operand number of desc_a (desc_b, scale_d, TransA and TransB follow it).
#define KILN_WGMMA(SHAPE, TYPE, REGS, D, A, B, S, TA, TB)                                         \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" S ", 0;\n wgmma.mma_async.sync.aligned."   \
               SHAPE ".f32." TYPE "." TYPE " {" REGS "}, %" A ", %" B ", p, 1, 1, %" TA ", %" TB \
               ";\n}\n"                                                                         \
               : D : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransA), "n"(TransB))
template <int TransB, int TransA = 0>
KILN_DEVICE void kiln_wgmma_m64n64k16_bf16(float* d, unsigned long long desc_a,
                                           unsigned long long desc_b, int scale_d) {
  KILN_WGMMA("m64n64k16", "bf16", KILN_WGMMA_REGS32, KILN_WGMMA_D32, "32", "33", "34", "35", "36");
}
template <int TransB, int TransA = 0>
KILN_DEVICE void kiln_wgmma_m64n64k16_f16(float* d, unsigned long long desc_a,
                                          unsigned long long desc_b, int scale_d) {
  KILN_WGMMA("m64n64k16", "f16", KILN_WGMMA_REGS32, KILN_WGMMA_D32, "32", "33", "34", "35", "36");
}
template <int TransB, int TransA = 0>
KILN_DEVICE void kiln_wgmma_m64n128k16_bf16(float* d, unsigned long long desc_a,
                                            unsigned long long desc_b, int scale_d) {
  KILN_WGMMA("m64n128k16", "bf16", KILN_WGMMA_REGS64, KILN_WGMMA_D64, "64", "65", "66", "67", "68");
}
template <int TransB, int TransA = 0>
KILN_DEVICE void kiln_wgmma_m64n128k16_f16(float* d, unsigned long long desc_a,
                                           unsigned long long desc_b, int scale_d) {
  KILN_WGMMA("m64n128k16", "f16", KILN_WGMMA_REGS64, KILN_WGMMA_D64, "64", "65", "66", "67", "68");
}
template <int TransB, int TransA = 0>
KILN_DEVICE void kiln_wgmma_m64n256k16_bf16(float* d, unsigned long long desc_a,
                                            unsigned long long desc_b, int scale_d) {
  KILN_WGMMA("m64n256k16", "bf16", KILN_WGMMA_REGS128, KILN_WGMMA_D128, "128", "129", "130", "131", "132");
}
template <int TransB, int TransA = 0>
KILN_DEVICE void kiln_wgmma_m64n256k16_f16(float* d, unsigned long long desc_a,
                                           unsigned long long desc_b, int scale_d) {
  KILN_WGMMA("m64n256k16", "f16", KILN_WGMMA_REGS128, KILN_WGMMA_D128, "128", "129", "130", "131", "132");
}
// tf32 (fp32 operands whose low 13 mantissa bits the kernel has rounded away): m64nNk8, both
// operands K-major (tf32 wgmma takes no transpose).
#define KILN_WGMMA_TF32(SHAPE, REGS, D, A, B, S)                                                  \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" S ", 0;\n wgmma.mma_async.sync.aligned."   \
               SHAPE ".f32.tf32.tf32 {" REGS "}, %" A ", %" B ", p, 1, 1;\n}\n"                 \
               : D : "l"(desc_a), "l"(desc_b), "r"(scale_d))
KILN_DEVICE void kiln_wgmma_m64n64k8_tf32(float* d, unsigned long long desc_a,
                                          unsigned long long desc_b, int scale_d) {
  KILN_WGMMA_TF32("m64n64k8", KILN_WGMMA_REGS32, KILN_WGMMA_D32, "32", "33", "34");
}
KILN_DEVICE void kiln_wgmma_m64n128k8_tf32(float* d, unsigned long long desc_a,
                                           unsigned long long desc_b, int scale_d) {
  KILN_WGMMA_TF32("m64n128k8", KILN_WGMMA_REGS64, KILN_WGMMA_D64, "64", "65", "66");
}
KILN_DEVICE void kiln_wgmma_m64n256k8_tf32(float* d, unsigned long long desc_a,
                                           unsigned long long desc_b, int scale_d) {
  KILN_WGMMA_TF32("m64n256k8", KILN_WGMMA_REGS128, KILN_WGMMA_D128, "128", "129", "130");
}
// The RS form: A from registers, a[0..3] of each thread holding warp w's rows 16 w .. 16 w + 15
// as mma.m16n8k16's A fragment (register r: row g + 8 (r & 1), columns 2 t + 8 (r >> 1) and
// the next); B from a descriptor. The registers must not be written before the wait_group that
// retires the wgmma.
// One RS wgmma: A0 the operand number of a[0] (a[1..3], desc_b, scale_d and TransB follow it).
#define KILN_WGMMA_RS(SHAPE, TYPE, REGS, D, A0, A1, A2, A3, B, S, T)                              \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" S ", 0;\n wgmma.mma_async.sync.aligned."   \
               SHAPE ".f32." TYPE "." TYPE " {" REGS "}, {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" B \
               ", p, 1, 1, %" T ";\n}\n"                                                          \
               : D : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d),       \
                 "n"(TransB))
template <int TransB>
KILN_DEVICE void kiln_wgmma_m64n64k16_bf16_rs(float* d, unsigned* a, unsigned long long desc_b,
                                            int scale_d) {
  KILN_WGMMA_RS("m64n64k16", "bf16", KILN_WGMMA_REGS32, KILN_WGMMA_D32, "32", "33", "34", "35", "36", "37", "38");
}
template <int TransB>
KILN_DEVICE void kiln_wgmma_m64n64k16_f16_rs(float* d, unsigned* a, unsigned long long desc_b,
                                            int scale_d) {
  KILN_WGMMA_RS("m64n64k16", "f16", KILN_WGMMA_REGS32, KILN_WGMMA_D32, "32", "33", "34", "35", "36", "37", "38");
}
template <int TransB>
KILN_DEVICE void kiln_wgmma_m64n128k16_bf16_rs(float* d, unsigned* a, unsigned long long desc_b,
                                            int scale_d) {
  KILN_WGMMA_RS("m64n128k16", "bf16", KILN_WGMMA_REGS64, KILN_WGMMA_D64, "64", "65", "66", "67", "68", "69", "70");
}
template <int TransB>
KILN_DEVICE void kiln_wgmma_m64n128k16_f16_rs(float* d, unsigned* a, unsigned long long desc_b,
                                            int scale_d) {
  KILN_WGMMA_RS("m64n128k16", "f16", KILN_WGMMA_REGS64, KILN_WGMMA_D64, "64", "65", "66", "67", "68", "69", "70");
}
template <int TransB>
KILN_DEVICE void kiln_wgmma_m64n192k16_bf16_rs(float* d, unsigned* a, unsigned long long desc_b,
                                            int scale_d) {
  KILN_WGMMA_RS("m64n192k16", "bf16", KILN_WGMMA_REGS96, KILN_WGMMA_D96, "96", "97", "98", "99", "100", "101", "102");
}
template <int TransB>
KILN_DEVICE void kiln_wgmma_m64n192k16_f16_rs(float* d, unsigned* a, unsigned long long desc_b,
                                            int scale_d) {
  KILN_WGMMA_RS("m64n192k16", "f16", KILN_WGMMA_REGS96, KILN_WGMMA_D96, "96", "97", "98", "99", "100", "101", "102");
}
template <int TransB>
KILN_DEVICE void kiln_wgmma_m64n256k16_bf16_rs(float* d, unsigned* a, unsigned long long desc_b,
                                            int scale_d) {
  KILN_WGMMA_RS("m64n256k16", "bf16", KILN_WGMMA_REGS128, KILN_WGMMA_D128, "128", "129", "130", "131", "132", "133", "134");
}
template <int TransB>
KILN_DEVICE void kiln_wgmma_m64n256k16_f16_rs(float* d, unsigned* a, unsigned long long desc_b,
                                            int scale_d) {
  KILN_WGMMA_RS("m64n256k16", "f16", KILN_WGMMA_REGS128, KILN_WGMMA_D128, "128", "129", "130", "131", "132", "133", "134");
}
// tf32 in the RS form: a[0..3] of each thread hold warp w's rows 16 w .. 16 w + 15 as
// mma.m16n8k8 tf32's A fragment (register r: row g + 8 (r & 1), column t + 4 (r >> 1), the fp32
// bits of a tf32 value); B K-major from a descriptor (tf32 takes no transpose).
#define KILN_WGMMA_TF32_RS(SHAPE, REGS, D, A0, A1, A2, A3, B, S)                                  \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" S ", 0;\n wgmma.mma_async.sync.aligned."   \
               SHAPE ".f32.tf32.tf32 {" REGS "}, {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" B       \
               ", p, 1, 1;\n}\n"                                                                 \
               : D : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
KILN_DEVICE void kiln_wgmma_m64n64k8_tf32_rs(float* d, unsigned* a, unsigned long long desc_b,
                                             int scale_d) {
  KILN_WGMMA_TF32_RS("m64n64k8", KILN_WGMMA_REGS32, KILN_WGMMA_D32, "32", "33", "34", "35", "36", "37");
}
KILN_DEVICE void kiln_wgmma_m64n128k8_tf32_rs(float* d, unsigned* a, unsigned long long desc_b,
                                              int scale_d) {
  KILN_WGMMA_TF32_RS("m64n128k8", KILN_WGMMA_REGS64, KILN_WGMMA_D64, "64", "65", "66", "67", "68", "69");
}
KILN_DEVICE void kiln_wgmma_m64n256k8_tf32_rs(float* d, unsigned* a, unsigned long long desc_b,
                                              int scale_d) {
  KILN_WGMMA_TF32_RS("m64n256k8", KILN_WGMMA_REGS128, KILN_WGMMA_D128, "128", "129", "130", "131", "132", "133");
}
#endif  // KILN_PRELUDE_CUH
