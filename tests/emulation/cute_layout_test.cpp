// The emulator's mma fragment layouts against a second source: CUTLASS's CuTe (MMA_Traits of the
// SM80 and SM75 atoms kiln uses), besides the PTX ISA tables the shim was written from. Each
// lane's registers are filled as CuTe's A and B layouts say, the shim's mma runs, and D read back
// through CuTe's C layout must be the exact product of the integer-valued operands.
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

}  // namespace
}  // namespace kiln::emulation
