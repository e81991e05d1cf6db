// The emulator's mma fragment layouts and ldmatrix distributions against a second source:
// CUTLASS's CuTe (MMA_Traits of the SM80 and SM75 atoms kiln uses, Copy_Traits of the SM75
// ldmatrix atoms), besides the PTX ISA tables the shim was written from. Each lane's registers are
// filled as CuTe's A and B layouts say, the shim's mma runs, and D read back through CuTe's C
// layout must be the exact product of the integer-valued operands; each ldmatrix form must put
// in every lane's registers the elements CuTe's destination layout names.
#include "cute_layouts.h"
#include "emu_test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

namespace kiln::emulation {
namespace {

using testing::CuteAtom;
using testing::Place;

// Lane registers at regs[lane * 6]: A in 0..3, B in 4..5; D to out[lane * 4 .. + 3].
template <int Kind>
__global__ void cute_mma_kernel(float* out, const unsigned* regs) {
  const int lane = threadIdx.x;
  const unsigned* r = regs + lane * 6;
  unsigned a[4] = {r[0], r[1], r[2], r[3]};
  unsigned b[2] = {r[4], r[5]};
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (Kind == 0) kiln_mma_m16n8k8_tf32(d, a, b);
  if (Kind == 1) kiln_mma_m16n8k16_bf16(d, a, b);
  if (Kind == 2) kiln_mma_m16n8k16_f16(d, a, b);
  if (Kind == 3) kiln_mma_m16n8k8_f16(d, a, b);
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = d[i];
}

// A value's bits in its register: tf32 as fp32, 16-bit ones as the half (v % 2) of register v / 2.
void put(unsigned* regs, int kind, int v, float x) {
  if (kind == 0) {
    std::memcpy(&regs[v], &x, 4);
    return;
  }
  unsigned bits = kind == 1 ? reference::bf16_from_float(x) : reference::f16_from_float(x);
  regs[v / 2] |= bits << (16 * (v % 2));
}

// Runs the shim's mma for `atom` (kind 0..3, in cute_atoms()'s order) with registers placed by
// the atom's layouts; returns how many elements of D differ from the exact product.
int mismatches(int kind, const CuteAtom& atom) {
  auto a_at = [](int m, int k) { return static_cast<float>((m * 3 + k * 5) % 7 - 3); };
  auto b_at = [](int k, int n) { return static_cast<float>((k * 2 + n * 7) % 5 - 2); };
  int av = static_cast<int>(atom.a.size()) / 32, bv = static_cast<int>(atom.b.size()) / 32;
  int cv = static_cast<int>(atom.c.size()) / 32;
  std::vector<unsigned> regs(32 * 6, 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int v = 0; v < av; ++v) {
      Place p = atom.a[static_cast<size_t>(lane * av + v)];
      put(&regs[static_cast<size_t>(lane * 6)], kind, v, a_at(p.row, p.col));
    }
    for (int v = 0; v < bv; ++v) {
      Place p = atom.b[static_cast<size_t>(lane * bv + v)];
      put(&regs[static_cast<size_t>(lane * 6 + 4)], kind, v, b_at(p.row, p.col));
    }
  }
  std::vector<float> out(32 * 4, -1.0f);
  std::string error;
  switch (kind) {
    case 0: error = testing::launch(cute_mma_kernel<0>, {out.data(), regs.data()}, {out.size() * 4, regs.size() * 4}, 1, 32); break;
    case 1: error = testing::launch(cute_mma_kernel<1>, {out.data(), regs.data()}, {out.size() * 4, regs.size() * 4}, 1, 32); break;
    case 2: error = testing::launch(cute_mma_kernel<2>, {out.data(), regs.data()}, {out.size() * 4, regs.size() * 4}, 1, 32); break;
    default: error = testing::launch(cute_mma_kernel<3>, {out.data(), regs.data()}, {out.size() * 4, regs.size() * 4}, 1, 32); break;
  }
  EXPECT_EQ(error, "") << atom.name;
  int wrong = 0;
  for (int lane = 0; lane < 32; ++lane) {
    for (int v = 0; v < cv; ++v) {
      Place p = atom.c[static_cast<size_t>(lane * cv + v)];
      float exact = 0.0f;
      for (int k = 0; k < atom.k; ++k) exact += a_at(p.row, k) * b_at(k, p.col);
      wrong += out[static_cast<size_t>(lane * 4 + v)] != exact;
    }
  }
  return wrong;
}

TEST(EmulatedMmaAgainstCute, EveryAtomsFragmentsGiveTheExactProduct) {
  std::vector<CuteAtom> atoms = testing::cute_atoms();
  if (atoms.empty())
    GTEST_SKIP() << "built without the CUTLASS headers (scripts/fetch_cutlass.sh could not fetch "
                    "nvidia-cutlass from PyPI)";
  ASSERT_EQ(atoms.size(), 4u);
  for (int kind = 0; kind < 4; ++kind) {
    const CuteAtom& atom = atoms[static_cast<size_t>(kind)];
    EXPECT_EQ(atom.m, 16) << atom.name;
    EXPECT_EQ(atom.n, 8) << atom.name;
    EXPECT_EQ(atom.k, kind == 0 || kind == 3 ? 8 : 16) << atom.name;
    EXPECT_EQ(mismatches(kind, atom), 0) << atom.name;
  }
}

TEST(EmulatedMmaAgainstCute, APermutedLayoutIsNoticed) {
  // The check has teeth: with two of A's values swapped in every lane, D is off.
  std::vector<CuteAtom> atoms = testing::cute_atoms();
  if (atoms.empty()) GTEST_SKIP() << "built without the CUTLASS headers";
  for (int kind = 0; kind < 4; ++kind) {
    CuteAtom atom = atoms[static_cast<size_t>(kind)];
    size_t av = atom.a.size() / 32;
    for (size_t lane = 0; lane < 32; ++lane) std::swap(atom.a[lane * av], atom.a[lane * av + 1]);
    EXPECT_GT(mismatches(kind, atom), 0) << atom.name;
  }
}

// ---- ldmatrix against CuTe's copy traits ----
// Elements of the stacked matrices: row r (matrix r / 8), column c, a distinct value each.
unsigned short element(int row, int col) { return static_cast<unsigned short>(1000 + row * 8 + col); }

// Rows 32 bytes apart in shared memory (not packed: a layout that assumed 16 would show). Lane t
// addresses row rows[t]; registers go to out[t * 4 ..].
template <int Kind>
__global__ void cute_ldmatrix_kernel(unsigned* out, const unsigned short* image, const int* rows) {
  unsigned short* s = reinterpret_cast<unsigned short*>(kiln_dynamic_smem());
  const int lane = threadIdx.x;
  for (int i = 0; i < 16; ++i) s[lane * 16 + i] = image[lane * 16 + i];
  __syncwarp();
  unsigned r[4] = {0, 0, 0, 0};
  const unsigned short* row = s + rows[lane] * 16;
  if (Kind == 0) kiln_ldmatrix_x1(r, row);
  if (Kind == 1) kiln_ldmatrix_x2(r, row);
  if (Kind == 2) kiln_ldmatrix_x4(r, row);
  if (Kind == 3) kiln_ldmatrix_x1_trans(r, row);
  if (Kind == 4) kiln_ldmatrix_x2_trans(r, row);
  if (Kind == 5) kiln_ldmatrix_x4_trans(r, row);
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

// Elements of `copy`'s destination registers that differ from where CuTe says they come from.
int copy_mismatches(int kind, const testing::CuteCopy& copy) {
  std::vector<unsigned short> image(32 * 16, 0);
  for (int row = 0; row < 32; ++row)
    for (int col = 0; col < 8; ++col) image[static_cast<size_t>(row * 16 + col)] = element(row, col);
  std::vector<int> rows = copy.src_row;
  std::vector<unsigned> out(32 * 4, 0);
  std::vector<void*> args = {out.data(), image.data(), rows.data()};
  std::vector<size_t> bytes = {out.size() * 4, image.size() * 2, rows.size() * 4};
  std::string error;
  switch (kind) {
    case 0: error = testing::launch(cute_ldmatrix_kernel<0>, args, bytes, 1, 32, 1024); break;
    case 1: error = testing::launch(cute_ldmatrix_kernel<1>, args, bytes, 1, 32, 1024); break;
    case 2: error = testing::launch(cute_ldmatrix_kernel<2>, args, bytes, 1, 32, 1024); break;
    case 3: error = testing::launch(cute_ldmatrix_kernel<3>, args, bytes, 1, 32, 1024); break;
    case 4: error = testing::launch(cute_ldmatrix_kernel<4>, args, bytes, 1, 32, 1024); break;
    default: error = testing::launch(cute_ldmatrix_kernel<5>, args, bytes, 1, 32, 1024); break;
  }
  EXPECT_EQ(error, "") << copy.name;
  int wrong = 0;
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < copy.matrices; ++r) {
      for (int h = 0; h < 2; ++h) {
        Place p = copy.dst[static_cast<size_t>((lane * copy.matrices + r) * 2 + h)];
        unsigned got = (out[static_cast<size_t>(lane * 4 + r)] >> (16 * h)) & 0xffffu;
        wrong += got != element(p.row, p.col);
      }
    }
  }
  return wrong;
}

TEST(EmulatedLdmatrixAgainstCute, EveryCopyAtomDeliversWhatCuteSays) {
  std::vector<testing::CuteCopy> copies = testing::cute_copies();
  if (copies.empty()) GTEST_SKIP() << "built without the CUTLASS headers";
  ASSERT_EQ(copies.size(), 6u);
  for (int kind = 0; kind < 6; ++kind) {
    const testing::CuteCopy& copy = copies[static_cast<size_t>(kind)];
    EXPECT_EQ(copy.matrices, kind % 3 == 0 ? 1 : kind % 3 == 1 ? 2 : 4) << copy.name;
    EXPECT_EQ(copy.trans, kind >= 3) << copy.name;
    EXPECT_EQ(copy_mismatches(kind, copy), 0) << copy.name;
  }
}

TEST(EmulatedLdmatrixAgainstCute, ATransposedReadOfAPlainCopyIsNoticed) {
  // The check has teeth: the .trans instruction against the plain copy's layout differs.
  std::vector<testing::CuteCopy> copies = testing::cute_copies();
  if (copies.empty()) GTEST_SKIP() << "built without the CUTLASS headers";
  EXPECT_GT(copy_mismatches(5, copies[2]), 0);
}

}  // namespace
}  // namespace kiln::emulation
