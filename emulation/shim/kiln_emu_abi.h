// The C interface between kiln's emulator library and a compiled emulated program.
#ifndef KILN_EMU_ABI_H
#define KILN_EMU_ABI_H

#include <cstddef>
#include <cstdint>

extern "C" {

// Bit-exact roundings supplied by the host (kiln::reference), so the emulator and the reference
// round identically.
struct KilnEmuApi {
  uint32_t (*tf32_rna_bits)(uint32_t);
  uint32_t (*tf32_truncate_bits)(uint32_t);
  uint16_t (*bf16_from_float)(float);
  float (*float_from_bf16)(uint16_t);
  uint16_t (*f16_from_float)(float);
  float (*float_from_f16)(uint16_t);
};

// A global-memory buffer the kernel may read or write: [begin, end).
struct KilnEmuRange {
  const void* begin;
  const void* end;
};

// How a launch orders its threads and lands its cp.async copies (kiln_emu_launch.h):
// KILN_EMU_KIND: threads in order, then in reverse, sweep after sweep, copies landing at the
// wait (the latest legal moment); KILN_EMU_SEEDED: orders and landing points drawn from
// `schedule_seed`; KILN_EMU_ADVERSARIAL: copies land at issue (the earliest), each warp runs
// ahead until it blocks, the last warp first and its lanes from the last.
enum { KILN_EMU_KIND = 0, KILN_EMU_SEEDED = 1, KILN_EMU_ADVERSARIAL = 2 };

// One kernel launch: the thunk calls the kernel with args as its parameters.
struct KilnEmuLaunch {
  void (*thunk)(void**);
  void** args;
  unsigned grid[3];
  unsigned block[3];
  size_t dynamic_smem_bytes;
  const KilnEmuRange* ranges;
  size_t range_count;
  uint32_t schedule;       // KILN_EMU_KIND, KILN_EMU_SEEDED or KILN_EMU_ADVERSARIAL
  uint64_t schedule_seed;  // KILN_EMU_SEEDED
};

// A tensor map as the emulator encodes it (the 128 bytes of a CUtensorMap parameter; the driver's
// own encoding is opaque): a tiled map of `rank` dims, dim 0 innermost, over `base`.
// strides[i] is dim i+1's stride in bytes; `swizzle` the span in bytes (0, 32, 64 or 128).
struct KilnEmuTensorMap {
  uint64_t magic;  // k_emu_tensor_map_magic
  const void* base;
  uint32_t rank, elem_bytes, swizzle, reserved;
  uint64_t dims[5];
  uint64_t strides[4];
  uint32_t box[5];
};
#define KILN_EMU_TENSOR_MAP_MAGIC 0x6b696c6e746d6170ull  /* "kilntmap" */

// Exported by every compiled program.
typedef void (*KilnEmuSetApiFn)(const KilnEmuApi*);
// Returns 0, or 1 with a message (NUL-terminated, truncated to error_size) in `error`.
typedef int (*KilnEmuLaunchFn)(const KilnEmuLaunch*, char* error, size_t error_size);

}  // extern "C"

#endif  // KILN_EMU_ABI_H
