// CuTe's sm_90 GMMA model as plain tables: the shared-memory descriptors make_gmma_desc builds for
// each k step of a 128-byte-swizzled bf16 tile, the byte address its layout gives each element,
// the accumulator layout of m64nNk16, and the register layout of an RS atom's A (cute_gmma.cpp is
// the one file compiled against CUTLASS).
#pragma once

#include "cute_layouts.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::emulation::testing {

// One operand tile in shared memory, laid out as CUTLASS's sm_90 TMA mainloop lays it out
// (tile_to_shape of GMMA::Layout_{K,MN}_SW128_Atom<bf16>, K-major tiled along M|N first, MN-major
// along K first unless `k_first` is false) and partitioned as that mainloop partitions it
// (partition_A/B, make_fragment_A/B, one descriptor per k block of 16).
struct CuteGmmaOperand {
  bool mn_major = false;
  bool k_first = true;         // MN-major: a 64-element run's 8-row k groups follow each other
  int rows = 0, cols = 0;      // rows along M (A) or N (B), columns along K
  int base = 0;                // shared-memory address of the tile, a multiple of 1024
  std::vector<uint64_t> desc;  // [k block]: the descriptor of columns 16 kb .. 16 kb + 15
  std::vector<int> address;    // [row * cols + col]: the element's byte address, swizzled
};

// A and B of one SM90_64xNx16_F32BF16BF16_SS atom, A 64 x 64 (K-major, or MN-major with its k
// groups first), B N x 64.
struct CuteGmmaCase {
  std::string name;  // e.g. "SM90_64x128x16_F32BF16BF16_SS, B MN-major"
  int n = 0;
  CuteGmmaOperand a, b;
};

// A K-major with B K-major, MN-major k groups first, MN-major 64-element runs first (N 128),
// then B K-major and MN-major k groups first at N 256; then A MN-major (k groups first) with B
// K-major and MN-major (N 128); none where kiln was built without the CUTLASS headers.
std::vector<CuteGmmaCase> cute_gmma_cases();

// tf32 (fp32 bits in shared memory, 4 bytes an element): A and B of SM90_64xNx8_F32TF32TF32_SS_TN,
// N 64 and 128, A 64 x 32 and B N x 32, both K-major (Layout_K_SW128_Atom<tfloat32_t>, tf32 takes
// no transpose), a descriptor for each of the four k blocks of 8; addresses in bytes. Kiln's
// attention kernel in `high` reads Q and K this way, and V^T (the B of its RS P V) as this B.
// None without the CUTLASS headers.
std::vector<CuteGmmaCase> cute_gmma_cases_tf32();

// The C layout of SM90_64xNx16_F32BF16BF16_SS: where value v of thread t of the warpgroup lives.
struct CuteGmmaAccumulator {
  std::string name;
  int n = 0;
  std::vector<Place> c;  // [thread * n / 2 + v]: row m, column n
};

// N 128 and 256, or none without the CUTLASS headers.
std::vector<CuteGmmaAccumulator> cute_gmma_accumulators();

// The A layout of an RS atom (A from registers, SM90_64xNx16_F32{BF16BF16,F16F16}_RS): where value
// v of thread t of the warpgroup lives, v counting the 16-bit halves of the thread's four 32-bit A
// registers (register v / 2, its low half first).
struct CuteGmmaRegisterA {
  std::string name;  // e.g. "SM90_64x128x16_F32BF16BF16_RS"
  int n = 0;
  bool bf16 = true;
  std::vector<Place> a;  // [thread * 8 + v] (tf32: [thread * 4 + v]): row m, column k
  std::vector<Place> c;  // the atom's C layout, [thread * n / 2 + v]: row m, column n
};

// The eight 16-bit RS atoms kiln's attention kernel issues (N 64, 128, 192 and 256, bf16 and
// f16), or none without the CUTLASS headers.
std::vector<CuteGmmaRegisterA> cute_gmma_register_a();
// The two tf32 RS atoms it issues in `high` (SM90_64x{64,128}x8_F32TF32TF32_RS_TN: four values
// a thread), or none without the CUTLASS headers.
std::vector<CuteGmmaRegisterA> cute_gmma_register_a_tf32();

}  // namespace kiln::emulation::testing
