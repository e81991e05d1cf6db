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
// Copies src_bytes (0 or 16) from global to shared asynchronously, zero-filling the rest of the
// 16 bytes; with src_bytes == 0 nothing is read.
KILN_DEVICE void kiln_cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(kiln_smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes));
#endif
}
// Copies src_bytes (0 or 4) asynchronously, zero-filling the rest of the 4 bytes.
KILN_DEVICE void kiln_cp_async_4(void* smem_dst, const void* gmem_src, int src_bytes) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
               :: "r"(kiln_smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes));
#endif
}
// Closes the current group of cp.async copies issued by this thread.
KILN_DEVICE void kiln_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
KILN_DEVICE void kiln_cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
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

#endif  // KILN_PRELUDE_CUH
