// CuTe's fragment layouts of the mma atoms kiln uses, as plain tables (cute_layouts.cpp is the
// one file compiled against the CUTLASS headers, apart from the emulator's shim).
#pragma once

#include <string>
#include <vector>

namespace kiln::emulation::testing {

// Where value v of lane t lives in an operand: row and column (A: m, k; B: k, n; C: m, n).
struct Place {
  int row = 0, col = 0;
};

struct CuteAtom {
  std::string name;  // CuTe's, e.g. "SM80_16x8x8_F32TF32TF32F32_TN"
  int m = 0, n = 0, k = 0;
  // Indexed [lane * values + v], values = size / 32.
  std::vector<Place> a, b, c;
};

// The four atoms (tf32 m16n8k8, bf16 and f16 m16n8k16 on sm_80, f16 m16n8k8 on sm_75), or none
// where kiln was built without the CUTLASS headers (scripts/fetch_cutlass.sh).
std::vector<CuteAtom> cute_atoms();

// An ldmatrix copy atom: which row of the stacked 8 x 8 matrices of 16-bit elements each lane
// addresses, and where each 16-bit half of each destination register comes from.
struct CuteCopy {
  std::string name;  // e.g. "SM75_U32x4_LDSM_N"
  int matrices = 0;  // 1, 2 or 4
  bool trans = false;
  std::vector<int> src_row;  // [lane]: row 0 .. 8 * matrices - 1
  std::vector<Place> dst;    // [(lane * matrices + register) * 2 + half]: row, column (0..7)
};

// x1, x2, x4 and their .trans forms, in that order, or none without the CUTLASS headers.
std::vector<CuteCopy> cute_copies();

// CuTe's Swizzle<b, m, s> applied to the offsets 0 .. count - 1, or none without the CUTLASS
// headers or for a (b, m, s) outside b 0..3, m 2..4, s 3..7.
std::vector<int> cute_swizzle(int b, int m, int s, int count);

}  // namespace kiln::emulation::testing
