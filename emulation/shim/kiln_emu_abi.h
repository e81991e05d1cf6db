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

// One kernel launch: the thunk calls the kernel with args as its parameters.
struct KilnEmuLaunch {
  void (*thunk)(void**);
  void** args;
  unsigned grid[3];
  unsigned block[3];
  size_t dynamic_smem_bytes;
  const KilnEmuRange* ranges;
  size_t range_count;
};

// Exported by every compiled program.
typedef void (*KilnEmuSetApiFn)(const KilnEmuApi*);
// Returns 0, or 1 with a message (NUL-terminated, truncated to error_size) in `error`.
typedef int (*KilnEmuLaunchFn)(const KilnEmuLaunch*, char* error, size_t error_size);

}  // extern "C"

#endif  // KILN_EMU_ABI_H
