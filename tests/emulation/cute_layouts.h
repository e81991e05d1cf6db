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

}  // namespace kiln::emulation::testing
