// The emulator's sm_90a wgmma model against CUTLASS's CuTe: every descriptor make_gmma_desc builds
// for the k steps of a 128-byte-swizzled bf16 tile (A 64 x 64 K-major; B 128 or 256 x 64,
// K-major or MN-major) decodes, through the shim's gmma_offset, to the address CuTe's swizzled
// smem layout gives each element; kiln's descriptors (kiln_gmma_desc_128b with the bases and
// offsets its kernels use) are CuTe's; the accumulator layout the shim and the prelude assume is
// CuTe's C layout of m64n128k16 and m64n256k16; and a wgmma run in the emulator over a shared
// memory image laid out by CuTe, with CuTe's or kiln's descriptors, gives the exact product where
// CuTe's C layout reads it. For the RS form (A from registers, the attention kernel's P V): the
// register layout the shim assumes (rs_a_place) is CuTe's A layout of the eight RS atoms kiln
// issues (N 64, 128, 192 and 256; bf16 and f16), an RS wgmma whose registers hold A as CuTe's
// layout places it gives the exact product, and S's accumulator packed into registers as the
// attention kernel packs P is CuTe's A fragment. For tf32 (the attention kernel in `high`): CuTe's
// descriptors of K-major fp32 tiles decode to its layout's addresses and are kiln's, the register
// layout is CuTe's ALayout_64x8, and SS and RS tf32 wgmmas over CuTe's layouts give the exact
// product.
#include "cute_gmma.h"
#include "emu_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::emulation {
namespace {

using testing::CuteGmmaAccumulator;
using testing::CuteGmmaCase;
using testing::CuteGmmaOperand;
using testing::CuteGmmaRegisterA;
using testing::Place;

constexpr const char* k_no_cute =
    "built without the CUTLASS headers (scripts/fetch_cutlass.sh could not fetch nvidia-cutlass "
    "from PyPI)";

// The fields of a descriptor, in bytes where the format counts 16-byte units.
struct Fields {
  unsigned start = 0, lbo = 0, sbo = 0, base = 0, mode = 0;
};

Fields fields(uint64_t desc) {
  Fields f;
  f.start = static_cast<unsigned>(desc & 0x3fff) << 4;
  f.lbo = static_cast<unsigned>((desc >> 16) & 0x3fff) << 4;
  f.sbo = static_cast<unsigned>((desc >> 32) & 0x3fff) << 4;
  f.base = static_cast<unsigned>((desc >> 49) & 7);
  f.mode = static_cast<unsigned>(desc >> 62);
  return f;
}

std::string describe(uint64_t desc) {
  Fields f = fields(desc);
  return "start " + std::to_string(f.start) + ", LBO " + std::to_string(f.lbo) + ", SBO " +
         std::to_string(f.sbo) + ", base offset " + std::to_string(f.base) + ", swizzle mode " +
         std::to_string(f.mode);
}

// compiler/prelude.cuh's kiln_gmma_desc_128b, for a shared-memory address.
uint64_t kiln_desc(unsigned address, unsigned lbo, unsigned sbo) {
  return static_cast<uint64_t>((address & 0x3ffffu) >> 4) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3fffu) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

// Whether `o` is laid out as kiln's kernels lay out operands: K-major, or MN-major in 64-column
// blocks of all 64 k rows each (the k groups of a block first).
bool kiln_layout(const CuteGmmaOperand& o) { return !o.mn_major || o.k_first; }

// The descriptor kiln's kernels give k step `kb` of `o`: K-major start + 32 kb, LBO 16, SBO 1024;
// MN-major start + 2048 kb, LBO 8192 (the next 64-column block; 0 for A's single block), SBO 1024
// (the next 8 k rows).
uint64_t kiln_desc_for(const CuteGmmaOperand& o, int kb) {
  unsigned base = static_cast<unsigned>(o.base);
  return o.mn_major ? kiln_desc(base + 2048u * static_cast<unsigned>(kb), o.rows > 64 ? 8192 : 0, 1024)
                    : kiln_desc(base + 32u * static_cast<unsigned>(kb), 16, 1024);
}

// Elements (r, 16 kb + k) of `o` whose address the shim decodes from `o`'s descriptors otherwise
// than CuTe's layout places them (decoded as MN-major when `mn_major`); the first in `first`.
int decode_mismatches(const CuteGmmaOperand& o, bool mn_major, std::string* first) {
  int wrong = 0;
  for (int kb = 0; kb < static_cast<int>(o.desc.size()); ++kb) {
    uint64_t desc = o.desc[static_cast<size_t>(kb)];
    for (int r = 0; r < o.rows; ++r) {
      for (int k = 0; k < 16; ++k) {
        size_t got = ::kiln_emu::gmma_offset(desc, mn_major, r, k, "operand");
        int want = o.address[static_cast<size_t>(r * o.cols + 16 * kb + k)];
        if (got == static_cast<size_t>(want)) continue;
        if (wrong++ == 0)
          *first = "k step " + std::to_string(kb) + ", element (" + std::to_string(r) + ", " +
                   std::to_string(k) + "): the shim decodes " + std::to_string(got) +
                   ", CuTe's layout has " + std::to_string(want);
      }
    }
  }
  return wrong;
}

// gmma_offset fails a thread of a launch on a descriptor it does not model; outside a launch that
// would crash, so the descriptors are checked first.
void expect_modelled(const CuteGmmaOperand& o, const std::string& what) {
  for (uint64_t desc : o.desc) {
    ASSERT_EQ(fields(desc).mode, 1u) << what << ": " << describe(desc);
    ASSERT_EQ(fields(desc).base, 0u) << what << ": " << describe(desc);
  }
}

TEST(EmulatedGmmaAgainstCute, EveryDescriptorDecodesToCutesSwizzledAddresses) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases();
  if (cases.empty()) GTEST_SKIP() << k_no_cute;
  ASSERT_EQ(cases.size(), 7u);
  for (const CuteGmmaCase& c : cases) {
    for (const CuteGmmaOperand* o : {&c.a, &c.b}) {
      std::string what = c.name + (o == &c.a ? ", A" : ", B");
      ASSERT_EQ(o->desc.size(), 4u) << what;
      ASSERT_EQ(o->address.size(), static_cast<size_t>(o->rows * o->cols)) << what;
      EXPECT_EQ(o->rows, o == &c.a ? 64 : c.n) << what;
      expect_modelled(*o, what);
      std::string first;
      EXPECT_EQ(decode_mismatches(*o, o->mn_major, &first), 0) << what << ": " << first;
    }
  }
}

TEST(EmulatedGmmaAgainstCute, KilnsDescriptorsAreCutes) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases();
  if (cases.empty()) GTEST_SKIP() << k_no_cute;
  int compared = 0;
  for (const CuteGmmaCase& c : cases) {
    for (const CuteGmmaOperand* o : {&c.a, &c.b}) {
      if (!kiln_layout(*o)) continue;
      for (int kb = 0; kb < static_cast<int>(o->desc.size()); ++kb) {
        uint64_t cute = o->desc[static_cast<size_t>(kb)], kiln = kiln_desc_for(*o, kb);
        EXPECT_EQ(kiln, cute) << c.name << (o == &c.a ? ", A" : ", B") << ", k step " << kb
                              << ": kiln gives " << describe(kiln) << "; CuTe " << describe(cute);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 7 * 4 + 6 * 4);
}

TEST(EmulatedGmmaAgainstCute, TheCheckHasTeeth) {
  // An MN-major descriptor read as K-major (and the reverse) addresses other elements.
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases();
  if (cases.empty()) GTEST_SKIP() << k_no_cute;
  for (const CuteGmmaCase& c : cases) {
    std::string first;
    EXPECT_GT(decode_mismatches(c.a, !c.a.mn_major, &first), 0) << c.name;
    EXPECT_GT(decode_mismatches(c.b, !c.b.mn_major, &first), 0) << c.name;
  }
}

// Warp w of the warpgroup, lane 4 g + t: d[4 j + i] = D(16 w + g + 8 (i >> 1),
// 8 j + 2 t + (i & 1)), as kiln_emu_hopper.h's perform_wgmma and compiler/prelude.cuh assume.
Place kiln_accumulator(int thread, int v) {
  int warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4, j = v / 4, i = v % 4;
  return {16 * warp + g + 8 * (i >> 1), 8 * j + 2 * t + (i & 1)};
}

TEST(EmulatedGmmaAgainstCute, TheAccumulatorLayoutIsCutes) {
  std::vector<CuteGmmaAccumulator> accumulators = testing::cute_gmma_accumulators();
  if (accumulators.empty()) GTEST_SKIP() << k_no_cute;
  ASSERT_EQ(accumulators.size(), 2u);
  for (const CuteGmmaAccumulator& acc : accumulators) {
    int per = acc.n / 2;
    ASSERT_EQ(acc.c.size(), static_cast<size_t>(128 * per)) << acc.name;
    int wrong = 0;
    for (int thread = 0; thread < 128; ++thread) {
      for (int v = 0; v < per; ++v) {
        Place want = acc.c[static_cast<size_t>(thread * per + v)];
        Place got = kiln_accumulator(thread, v);
        if (got.row == want.row && got.col == want.col) continue;
        if (wrong++ == 0)
          ADD_FAILURE() << acc.name << ": thread " << thread << " value " << v << " is D("
                        << got.row << ", " << got.col << ") to kiln, D(" << want.row << ", "
                        << want.col << ") to CuTe";
      }
    }
    EXPECT_EQ(wrong, 0) << acc.name;
  }
}

// ---- a wgmma over CuTe's layouts, in the emulator ----

// Small integers, so that every product and sum of 64 is exact in bf16 and fp32.
float small(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<float>(static_cast<int>(x % 9) - 4);
}
float a_at(int m, int k) { return small(static_cast<uint32_t>(m * 64 + k)); }
float b_at(int k, int n) { return small(static_cast<uint32_t>(0x10000 + k * 256 + n)); }

// Values of `out` (value v of thread t at out[t * per + v]) that differ from the exact product of
// a_at and b_at over `k_len` where the C layout `c` places them.
int mismatches_of(const std::vector<float>& out, const std::vector<Place>& c, int per, int k_len) {
  int wrong = 0;
  for (int thread = 0; thread < 128; ++thread) {
    for (int v = 0; v < per; ++v) {
      Place p = c[static_cast<size_t>(thread * per + v)];
      float exact = 0.0f;
      for (int k = 0; k < k_len; ++k) exact += a_at(p.row, k) * b_at(k, p.col);
      wrong += out[static_cast<size_t>(thread * per + v)] != exact;
    }
  }
  return wrong;
}

// One warpgroup copies `image` into shared memory and runs 4 k steps of m64nNk16, with CuTe's
// descriptors (descs[kb] for A, descs[4 + kb] for B) or, `Kiln`, kiln_gmma_desc_128b's at the
// tiles' bases (bases[0], bases[1]); value v of thread t goes to out[t * N / 2 + v].
template <int N, int TransA, int TransB, bool Kiln>
__global__ void cute_wgmma_kernel(float* out, const uint16_t* image,
                                  const unsigned long long* descs, const int* bases,
                                  const int* image_elements) {
  unsigned char* smem = kiln_dynamic_smem();
  const int tid = threadIdx.x;
  for (int i = tid; i < *image_elements; i += 128) std::memcpy(smem + 2 * i, &image[i], 2);
  kiln_fence_proxy_async();
  __syncthreads();
  float d[N / 2];
  kiln_wgmma_fence();
  for (int k = 0; k < 4; ++k) {
    unsigned long long da = descs[k], db = descs[4 + k];
    if (Kiln) {
      da = TransA ? kiln_gmma_desc_128b(smem + bases[0] + 2048 * k, 0, 1024)
                  : kiln_gmma_desc_128b(smem + bases[0] + 32 * k, 16, 1024);
      db = TransB ? kiln_gmma_desc_128b(smem + bases[1] + 2048 * k, 8192, 1024)
                  : kiln_gmma_desc_128b(smem + bases[1] + 32 * k, 16, 1024);
    }
    if (N == 128) kiln_wgmma_m64n128k16_bf16<TransB, TransA>(d, da, db, k > 0);
    if (N == 256) kiln_wgmma_m64n256k16_bf16<TransB, TransA>(d, da, db, k > 0);
  }
  kiln_wgmma_commit();
  kiln_wgmma_wait<0>();
  for (int v = 0; v < N / 2; ++v) out[tid * (N / 2) + v] = d[v];
}

using Launch = std::string (*)(std::vector<float>&, std::vector<uint16_t>&,
                              std::vector<unsigned long long>&, std::vector<int>&, int&);

template <int N, int TransA, int TransB, bool Kiln>
std::string launch_wgmma(std::vector<float>& out, std::vector<uint16_t>& image,
                         std::vector<unsigned long long>& descs, std::vector<int>& bases,
                         int& elements) {
  return testing::launch(cute_wgmma_kernel<N, TransA, TransB, Kiln>,
                         {out.data(), image.data(), descs.data(), bases.data(), &elements},
                         {out.size() * 4, image.size() * 2, descs.size() * 8, bases.size() * 4,
                          sizeof elements},
                         1, 128, image.size() * 2);
}

// The kernel for N 128 or 256, B K-major or MN-major, CuTe's or kiln's descriptors; A MN-major
// at N 128.
Launch launch_for(int n, bool a_mn_major, bool mn_major, bool kiln) {
  static const Launch k_launches[2][2][2] = {
      {{launch_wgmma<128, 0, 0, false>, launch_wgmma<128, 0, 0, true>},
       {launch_wgmma<128, 0, 1, false>, launch_wgmma<128, 0, 1, true>}},
      {{launch_wgmma<256, 0, 0, false>, launch_wgmma<256, 0, 0, true>},
       {launch_wgmma<256, 0, 1, false>, launch_wgmma<256, 0, 1, true>}}};
  static const Launch k_a_mn_major[2][2] = {
      {launch_wgmma<128, 1, 0, false>, launch_wgmma<128, 1, 0, true>},
      {launch_wgmma<128, 1, 1, false>, launch_wgmma<128, 1, 1, true>}};
  return a_mn_major ? k_a_mn_major[mn_major][kiln] : k_launches[n == 256][mn_major][kiln];
}

// 16-bit bits of `x` in bf16 or f16 (exact for small).
uint16_t bits_of(float x, bool bf16) {
  return bf16 ? reference::bf16_from_float(x) : reference::f16_from_float(x);
}

// A shared-memory image holding A and B of `c` at CuTe's addresses.
std::vector<uint16_t> image_of(const CuteGmmaCase& c, bool bf16) {
  size_t bytes = 0;
  for (const CuteGmmaOperand* o : {&c.a, &c.b})
    bytes = std::max(bytes, static_cast<size_t>(o->base + o->rows * o->cols * 2));
  std::vector<uint16_t> image(bytes / 2, 0);
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 64; ++k)
      image[static_cast<size_t>(c.a.address[static_cast<size_t>(m * 64 + k)] / 2)] =
          bits_of(a_at(m, k), bf16);
  for (int n = 0; n < c.n; ++n)
    for (int k = 0; k < 64; ++k)
      image[static_cast<size_t>(c.b.address[static_cast<size_t>(n * 64 + k)] / 2)] =
          bits_of(b_at(k, n), bf16);
  return image;
}

// Values of the accumulators, read through `acc`, that differ from the exact product of A and B
// placed at CuTe's addresses; the emulator's error, if any, in `error`.
int product_mismatches(const CuteGmmaCase& c, const CuteGmmaAccumulator& acc, bool kiln,
                       std::string* error) {
  std::vector<uint16_t> image = image_of(c, true);
  std::vector<unsigned long long> descs;
  for (uint64_t d : c.a.desc) descs.push_back(d);
  for (uint64_t d : c.b.desc) descs.push_back(d);
  std::vector<int> bases = {c.a.base, c.b.base};
  int elements = static_cast<int>(image.size());
  int per = c.n / 2;
  std::vector<float> out(static_cast<size_t>(128 * per), -1.0f);
  *error = launch_for(c.n, c.a.mn_major, c.b.mn_major, kiln)(out, image, descs, bases, elements);
  return mismatches_of(out, acc.c, per, 64);
}

const CuteGmmaAccumulator& accumulator_for(const std::vector<CuteGmmaAccumulator>& accs, int n) {
  return accs[n == 128 ? 0 : 1];
}

TEST(EmulatedGmmaAgainstCute, AWgmmaOverCutesLayoutsGivesTheExactProductWhereCuteReadsIt) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases();
  std::vector<CuteGmmaAccumulator> accs = testing::cute_gmma_accumulators();
  if (cases.empty() || accs.size() != 2) GTEST_SKIP() << k_no_cute;
  for (const CuteGmmaCase& c : cases) {
    for (bool kiln : {false, true}) {
      if (kiln && !kiln_layout(c.b)) continue;
      std::string error;
      int wrong = product_mismatches(c, accumulator_for(accs, c.n), kiln, &error);
      EXPECT_EQ(error, "") << c.name << (kiln ? ", kiln's descriptors" : ", CuTe's descriptors");
      EXPECT_EQ(wrong, 0) << c.name << (kiln ? ", kiln's descriptors" : ", CuTe's descriptors");
    }
  }
}

TEST(EmulatedGmmaAgainstCute, APermutedAccumulatorLayoutIsNoticed) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases();
  std::vector<CuteGmmaAccumulator> accs = testing::cute_gmma_accumulators();
  if (cases.empty() || accs.size() != 2) GTEST_SKIP() << k_no_cute;
  CuteGmmaAccumulator acc = accs[0];
  for (size_t thread = 0; thread < 128; ++thread)
    std::swap(acc.c[thread * 64 + 1], acc.c[thread * 64 + 2]);
  std::string error;
  EXPECT_GT(product_mismatches(cases[0], acc, false, &error), 0);
  EXPECT_EQ(error, "");
}

// ---- the RS form: A from registers ----

TEST(EmulatedGmmaAgainstCute, TheRegisterOperandLayoutIsCutes) {
  std::vector<CuteGmmaRegisterA> atoms = testing::cute_gmma_register_a();
  if (atoms.empty()) GTEST_SKIP() << k_no_cute;
  ASSERT_EQ(atoms.size(), 8u);
  for (const CuteGmmaRegisterA& atom : atoms) {
    ASSERT_EQ(atom.a.size(), 128u * 8u) << atom.name;
    int wrong = 0;
    for (int thread = 0; thread < 128; ++thread) {
      for (int v = 0; v < 8; ++v) {
        Place want = atom.a[static_cast<size_t>(thread * 8 + v)];
        int m = -1, k = -1;
        ::kiln_emu::rs_a_place(thread, v / 2, v % 2, &m, &k);
        if (m == want.row && k == want.col) continue;
        if (wrong++ == 0)
          ADD_FAILURE() << atom.name << ": thread " << thread << " register " << v / 2 << " half "
                        << v % 2 << " is A(" << m << ", " << k << ") to kiln, A(" << want.row
                        << ", " << want.col << ") to CuTe";
      }
    }
    EXPECT_EQ(wrong, 0) << atom.name;
  }
}

// tf32 in the RS form (the attention kernel's P V in `high`): register r of each thread is the
// element CuTe's ALayout_64x8 gives, for both atoms it issues.
TEST(EmulatedGmmaAgainstCute, TheTf32RegisterOperandLayoutIsCutes) {
  std::vector<CuteGmmaRegisterA> atoms = testing::cute_gmma_register_a_tf32();
  if (atoms.empty()) GTEST_SKIP() << k_no_cute;
  ASSERT_EQ(atoms.size(), 2u);
  for (const CuteGmmaRegisterA& atom : atoms) {
    ASSERT_EQ(atom.a.size(), 128u * 4u) << atom.name;
    ASSERT_EQ(atom.c.size(), static_cast<size_t>(128 * atom.n / 2)) << atom.name;
    int wrong = 0;
    for (int thread = 0; thread < 128; ++thread) {
      for (int r = 0; r < 4; ++r) {
        Place want = atom.a[static_cast<size_t>(thread * 4 + r)];
        int m = -1, k = -1;
        ::kiln_emu::rs_a_place_tf32(thread, r, &m, &k);
        if (m == want.row && k == want.col) continue;
        if (wrong++ == 0)
          ADD_FAILURE() << atom.name << ": thread " << thread << " register " << r << " is A("
                        << m << ", " << k << ") to kiln, A(" << want.row << ", " << want.col
                        << ") to CuTe";
      }
    }
    EXPECT_EQ(wrong, 0) << atom.name;
    // and its accumulators are the 16-bit atoms' (CLayout_64xN): what the softmax reads as S
    int moved = 0;
    for (int thread = 0; thread < 128; ++thread) {
      int warp = thread / 32, g = thread % 32 / 4, t = thread % 4;
      for (int v = 0; v < atom.n / 2; ++v) {
        Place p = atom.c[static_cast<size_t>(thread * atom.n / 2 + v)];
        int j = v / 4, i = v % 4;
        moved += p.row != 16 * warp + g + 8 * (i >> 1) || p.col != 8 * j + 2 * t + (i & 1);
      }
    }
    EXPECT_EQ(moved, 0) << atom.name;
  }
}

// ---- tf32: fp32 bits in shared memory, K-major, 8 values (32 bytes) a k step ----

std::vector<uint32_t> tf32_image_of(const CuteGmmaCase& c) {
  size_t bytes = 0;
  for (const CuteGmmaOperand* o : {&c.a, &c.b})
    bytes = std::max(bytes, static_cast<size_t>(o->base + o->rows * o->cols * 4));
  std::vector<uint32_t> image(bytes / 4, 0);
  auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 32; ++k)
      image[static_cast<size_t>(c.a.address[static_cast<size_t>(m * 32 + k)] / 4)] =
          bits(a_at(m, k));
  for (int n = 0; n < c.n; ++n)
    for (int k = 0; k < 32; ++k)
      image[static_cast<size_t>(c.b.address[static_cast<size_t>(n * 32 + k)] / 4)] =
          bits(b_at(k, n));
  return image;
}

// Each of CuTe's tf32 descriptors decodes, through the shim's gmma_offset with 4-byte elements, to
// the address CuTe's layout gives each element, and is the descriptor kiln's kernels build for that
// k step (kiln_gmma_desc_128b at the tile's base + 32 kb, LBO 16, SBO 1024: Q, K and V^T in the
// attention kernel's `high`, the matmul kernel's tf32 operands).
TEST(EmulatedGmmaAgainstCute, Tf32DescriptorsDecodeToCutesAddressesAndAreKilns) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases_tf32();
  if (cases.empty()) GTEST_SKIP() << k_no_cute;
  ASSERT_EQ(cases.size(), 2u);
  for (const CuteGmmaCase& c : cases) {
    for (const CuteGmmaOperand* o : {&c.a, &c.b}) {
      std::string what = c.name + (o == &c.a ? ", A" : ", B");
      ASSERT_EQ(o->desc.size(), 4u) << what;
      ASSERT_EQ(o->cols, 32) << what;
      ASSERT_EQ(o->rows, o == &c.a ? 64 : c.n) << what;
      ASSERT_EQ(o->address.size(), static_cast<size_t>(o->rows * 32)) << what;
      expect_modelled(*o, what);
      int wrong = 0, wrong_as_16_bit = 0;
      for (int kb = 0; kb < 4; ++kb) {
        uint64_t desc = o->desc[static_cast<size_t>(kb)];
        uint64_t kiln = kiln_desc(static_cast<unsigned>(o->base) + 32u * static_cast<unsigned>(kb),
                                  16, 1024);
        EXPECT_EQ(kiln, desc) << what << ", k step " << kb << ": kiln gives " << describe(kiln)
                              << "; CuTe " << describe(desc);
        for (int r = 0; r < o->rows; ++r) {
          for (int k = 0; k < 8; ++k) {
            size_t want = static_cast<size_t>(o->address[static_cast<size_t>(r * 32 + 8 * kb + k)]);
            size_t got = ::kiln_emu::gmma_offset(desc, false, r, k, "operand", 4);
            if (got != want && wrong++ == 0)
              ADD_FAILURE() << what << ", k step " << kb << ", element (" << r << ", " << k
                            << "): the shim decodes " << got << ", CuTe's layout has " << want;
            wrong_as_16_bit += ::kiln_emu::gmma_offset(desc, false, r, k, "operand", 2) != want;
          }
        }
      }
      EXPECT_EQ(wrong, 0) << what;
      EXPECT_GT(wrong_as_16_bit, 0) << what << ": the element size does not matter to the check";
    }
  }
}

// One warpgroup copies `image` (fp32 bits) into shared memory and runs 4 k steps of m64nNk8 tf32:
// SS with CuTe's descriptors (descs[kb] for A, descs[4 + kb] for B) or, `Kiln`, kiln's at the
// tiles' bases (bases[0], bases[1]); `Rs`, A from regs[(kb * 128 + thread) * 4 + r] instead. Value
// v of thread t goes to out[t * N / 2 + v].
template <int N, bool Rs, bool Kiln>
__global__ void cute_wgmma_tf32_kernel(float* out, const uint32_t* image, const unsigned* regs,
                                       const unsigned long long* descs, const int* bases,
                                       const int* image_words) {
  unsigned char* smem = kiln_dynamic_smem();
  const int tid = threadIdx.x;
  for (int i = tid; i < *image_words; i += 128) std::memcpy(smem + 4 * i, &image[i], 4);
  kiln_fence_proxy_async();
  __syncthreads();
  unsigned a[4][4];
  for (int k = 0; k < 4; ++k)
    for (int r = 0; r < 4; ++r) a[k][r] = Rs ? regs[(k * 128 + tid) * 4 + r] : 0u;
  float d[N / 2];
  kiln_wgmma_fence();
  for (int k = 0; k < 4; ++k) {
    unsigned long long da = descs[k], db = descs[4 + k];
    if (Kiln) {
      da = kiln_gmma_desc_128b(smem + bases[0] + 32 * k, 16, 1024);
      db = kiln_gmma_desc_128b(smem + bases[1] + 32 * k, 16, 1024);
    }
    if (N == 64 && Rs) kiln_wgmma_m64n64k8_tf32_rs(d, a[k], db, k > 0);
    if (N == 128 && Rs) kiln_wgmma_m64n128k8_tf32_rs(d, a[k], db, k > 0);
    if (N == 64 && !Rs) kiln_wgmma_m64n64k8_tf32(d, da, db, k > 0);
    if (N == 128 && !Rs) kiln_wgmma_m64n128k8_tf32(d, da, db, k > 0);
  }
  kiln_wgmma_commit();
  kiln_wgmma_wait<0>();
  for (int v = 0; v < N / 2; ++v) out[tid * (N / 2) + v] = d[v];
}

using LaunchTf32 = std::string (*)(std::vector<float>&, std::vector<uint32_t>&,
                                   std::vector<unsigned>&, std::vector<unsigned long long>&,
                                   std::vector<int>&, int&);

template <int N, bool Rs, bool Kiln>
std::string launch_wgmma_tf32(std::vector<float>& out, std::vector<uint32_t>& image,
                              std::vector<unsigned>& regs, std::vector<unsigned long long>& descs,
                              std::vector<int>& bases, int& words) {
  return testing::launch(cute_wgmma_tf32_kernel<N, Rs, Kiln>,
                         {out.data(), image.data(), regs.data(), descs.data(), bases.data(), &words},
                         {out.size() * 4, image.size() * 4, regs.size() * 4, descs.size() * 8,
                          bases.size() * 4, sizeof words},
                         1, 128, image.size() * 4);
}

LaunchTf32 launch_tf32_for(int n, bool rs, bool kiln) {
  static const LaunchTf32 k_launches[2][2][2] = {
      {{launch_wgmma_tf32<64, false, false>, launch_wgmma_tf32<64, false, true>},
       {launch_wgmma_tf32<64, true, false>, launch_wgmma_tf32<64, true, true>}},
      {{launch_wgmma_tf32<128, false, false>, launch_wgmma_tf32<128, false, true>},
       {launch_wgmma_tf32<128, true, false>, launch_wgmma_tf32<128, true, true>}}};
  return k_launches[n == 128][rs][kiln];
}

// Values of a tf32 wgmma's accumulators, read through `atom`'s C layout, that differ from the
// exact product of `c`'s A and B (B at CuTe's addresses; A there too, or, `rs`, in each thread's
// registers as `atom`'s A layout places it); the emulator's error, if any, in `error`.
int tf32_product_mismatches(const CuteGmmaCase& c, const CuteGmmaRegisterA& atom, bool rs,
                            bool kiln, std::string* error) {
  std::vector<uint32_t> image = tf32_image_of(c);
  std::vector<unsigned> regs(4 * 128 * 4, 0);
  for (int kb = 0; kb < 4 && rs; ++kb)
    for (int thread = 0; thread < 128; ++thread)
      for (int r = 0; r < 4; ++r) {
        Place p = atom.a[static_cast<size_t>(thread * 4 + r)];
        float x = a_at(p.row, 8 * kb + p.col);
        std::memcpy(&regs[static_cast<size_t>((kb * 128 + thread) * 4 + r)], &x, 4);
      }
  std::vector<unsigned long long> descs;
  for (uint64_t d : c.a.desc) descs.push_back(d);
  for (uint64_t d : c.b.desc) descs.push_back(d);
  std::vector<int> bases = {c.a.base, c.b.base};
  int words = static_cast<int>(image.size());
  int per = c.n / 2;
  std::vector<float> out(static_cast<size_t>(128 * per), -1.0f);
  *error = launch_tf32_for(c.n, rs, kiln)(out, image, regs, descs, bases, words);
  return mismatches_of(out, atom.c, per, 32);
}

// The attention kernel's S = Q K^T (SS) and O += P V (RS, V^T as B) in `high`: over CuTe's tf32
// layouts, with CuTe's descriptors and with kiln's, A from shared memory or from registers as
// CuTe's ALayout_64x8 places it, the exact product where CuTe's C layout reads it.
TEST(EmulatedGmmaAgainstCute, ATf32WgmmaOverCutesLayoutsGivesTheExactProduct) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases_tf32();
  std::vector<CuteGmmaRegisterA> atoms = testing::cute_gmma_register_a_tf32();
  if (cases.empty() || atoms.size() != 2) GTEST_SKIP() << k_no_cute;
  int runs = 0;
  for (const CuteGmmaCase& c : cases) {
    const CuteGmmaRegisterA& atom = atoms[c.n == 64 ? 0 : 1];
    ASSERT_EQ(atom.n, c.n) << atom.name;
    ASSERT_EQ(atom.c.size(), static_cast<size_t>(128 * c.n / 2)) << atom.name;
    for (bool rs : {false, true}) {
      for (bool kiln : {false, true}) {
        std::string what = (rs ? atom.name : c.name) +
                           (kiln ? ", kiln's descriptors" : ", CuTe's descriptors");
        std::string error;
        EXPECT_EQ(tf32_product_mismatches(c, atom, rs, kiln, &error), 0) << what;
        EXPECT_EQ(error, "") << what;
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 8);
}

TEST(EmulatedGmmaAgainstCute, APermutedTf32RegisterLayoutIsNoticed) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases_tf32();
  std::vector<CuteGmmaRegisterA> atoms = testing::cute_gmma_register_a_tf32();
  if (cases.empty() || atoms.size() != 2) GTEST_SKIP() << k_no_cute;
  // Registers 1 and 2 swapped (rows g + 8 and columns t + 4 exchanged), then 0 and 1.
  for (int swap : {0, 1}) {
    CuteGmmaRegisterA atom = atoms[1];
    for (size_t thread = 0; thread < 128; ++thread) {
      if (swap == 0) std::swap(atom.a[thread * 4 + 1], atom.a[thread * 4 + 2]);
      if (swap == 1) std::swap(atom.a[thread * 4], atom.a[thread * 4 + 1]);
    }
    std::string error;
    EXPECT_GT(tf32_product_mismatches(cases[1], atom, true, true, &error), 0) << "swap " << swap;
    EXPECT_EQ(error, "");
  }
}

// One warpgroup copies `image` into shared memory, takes its A registers of 4 k steps from
// regs[(kb * 128 + thread) * 4 + r] and runs 4 k steps of m64nNk16 in the RS form, B read through
// CuTe's descriptors descs[kb]; value v of thread t goes to out[t * N / 2 + v].
template <int N, int TransB, bool Bf16>
__global__ void cute_wgmma_rs_kernel(float* out, const uint16_t* image, const unsigned* regs,
                                     const unsigned long long* descs, const int* image_elements) {
  unsigned char* smem = kiln_dynamic_smem();
  const int tid = threadIdx.x;
  for (int i = tid; i < *image_elements; i += 128) std::memcpy(smem + 2 * i, &image[i], 2);
  kiln_fence_proxy_async();
  __syncthreads();
  unsigned a[4][4];  // one set a k step: the registers of an RS wgmma in flight stay as they were
  for (int k = 0; k < 4; ++k)
    for (int r = 0; r < 4; ++r) a[k][r] = regs[(k * 128 + tid) * 4 + r];
  float d[N / 2];
  kiln_wgmma_fence();
  for (int k = 0; k < 4; ++k) {
    if (N == 64 && Bf16) kiln_wgmma_m64n64k16_bf16_rs<TransB>(d, a[k], descs[k], k > 0);
    if (N == 64 && !Bf16) kiln_wgmma_m64n64k16_f16_rs<TransB>(d, a[k], descs[k], k > 0);
    if (N == 128 && Bf16) kiln_wgmma_m64n128k16_bf16_rs<TransB>(d, a[k], descs[k], k > 0);
    if (N == 128 && !Bf16) kiln_wgmma_m64n128k16_f16_rs<TransB>(d, a[k], descs[k], k > 0);
    if (N == 192 && Bf16) kiln_wgmma_m64n192k16_bf16_rs<TransB>(d, a[k], descs[k], k > 0);
    if (N == 192 && !Bf16) kiln_wgmma_m64n192k16_f16_rs<TransB>(d, a[k], descs[k], k > 0);
    if (N == 256 && Bf16) kiln_wgmma_m64n256k16_bf16_rs<TransB>(d, a[k], descs[k], k > 0);
    if (N == 256 && !Bf16) kiln_wgmma_m64n256k16_f16_rs<TransB>(d, a[k], descs[k], k > 0);
  }
  kiln_wgmma_commit();
  kiln_wgmma_wait<0>();
  for (int v = 0; v < N / 2; ++v) out[tid * (N / 2) + v] = d[v];
}

using LaunchRs = std::string (*)(std::vector<float>&, std::vector<uint16_t>&,
                                 std::vector<unsigned>&, std::vector<unsigned long long>&, int&);

template <int N, int TransB, bool Bf16>
std::string launch_wgmma_rs(std::vector<float>& out, std::vector<uint16_t>& image,
                            std::vector<unsigned>& regs, std::vector<unsigned long long>& descs,
                            int& elements) {
  return testing::launch(cute_wgmma_rs_kernel<N, TransB, Bf16>,
                         {out.data(), image.data(), regs.data(), descs.data(), &elements},
                         {out.size() * 4, image.size() * 2, regs.size() * 4, descs.size() * 8,
                          sizeof elements},
                         1, 128, image.size() * 2);
}

LaunchRs launch_rs_for(int n, bool mn_major, bool bf16) {
  static const LaunchRs k_launches[4][2][2] = {
      {{launch_wgmma_rs<64, 0, false>, launch_wgmma_rs<64, 0, true>},
       {launch_wgmma_rs<64, 1, false>, launch_wgmma_rs<64, 1, true>}},
      {{launch_wgmma_rs<128, 0, false>, launch_wgmma_rs<128, 0, true>},
       {launch_wgmma_rs<128, 1, false>, launch_wgmma_rs<128, 1, true>}},
      {{launch_wgmma_rs<192, 0, false>, launch_wgmma_rs<192, 0, true>},
       {launch_wgmma_rs<192, 1, false>, launch_wgmma_rs<192, 1, true>}},
      {{launch_wgmma_rs<256, 0, false>, launch_wgmma_rs<256, 0, true>},
       {launch_wgmma_rs<256, 1, false>, launch_wgmma_rs<256, 1, true>}}};
  return k_launches[n / 64 - 1][mn_major][bf16];
}

// Values of an RS wgmma's accumulators, read through the atom's C layout, that differ from the
// exact product when each thread's A registers hold A as `atom`'s A layout places it and B is
// `c`'s (a case at least atom.n wide: its first atom.n rows of B are the first atom.n columns of
// the product, at the same descriptors); the emulator's error, if any, in `error`.
int rs_product_mismatches(const CuteGmmaCase& c, const CuteGmmaRegisterA& atom,
                          std::string* error) {
  std::vector<uint16_t> image = image_of(c, atom.bf16);
  std::vector<unsigned> regs(4 * 128 * 4, 0);
  for (int kb = 0; kb < 4; ++kb)
    for (int thread = 0; thread < 128; ++thread)
      for (int v = 0; v < 8; ++v) {
        Place p = atom.a[static_cast<size_t>(thread * 8 + v)];
        unsigned bits = bits_of(a_at(p.row, 16 * kb + p.col), atom.bf16);
        regs[static_cast<size_t>((kb * 128 + thread) * 4 + v / 2)] |= bits << (16 * (v % 2));
      }
  std::vector<unsigned long long> descs(c.b.desc.begin(), c.b.desc.end());
  int elements = static_cast<int>(image.size());
  int per = atom.n / 2;
  std::vector<float> out(static_cast<size_t>(128 * per), -1.0f);
  *error = launch_rs_for(atom.n, c.b.mn_major, atom.bf16)(out, image, regs, descs, elements);
  return mismatches_of(out, atom.c, per, 64);
}

TEST(EmulatedGmmaAgainstCute, AnRsWgmmaWithCutesRegisterFragmentGivesTheExactProduct) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases();
  std::vector<CuteGmmaRegisterA> atoms = testing::cute_gmma_register_a();
  if (cases.empty() || atoms.size() != 8) GTEST_SKIP() << k_no_cute;
  int runs = 0;
  for (const CuteGmmaCase& c : cases) {
    // B K-major (Q K^T's shape) and MN-major with its k groups first (V in P V): N 128 for the
    // atoms of N 64 and 128, N 256 for those of 192 and 256.
    if (c.a.mn_major || !kiln_layout(c.b)) continue;
    for (const CuteGmmaRegisterA& atom : atoms) {
      if (c.n != (atom.n > 128 ? 256 : 128)) continue;
      ASSERT_EQ(atom.c.size(), static_cast<size_t>(128 * atom.n / 2)) << atom.name;
      std::string error;
      int wrong = rs_product_mismatches(c, atom, &error);
      EXPECT_EQ(error, "") << atom.name << ", " << c.name;
      EXPECT_EQ(wrong, 0) << atom.name << ", " << c.name;
      ++runs;
    }
  }
  EXPECT_EQ(runs, 16);
}

TEST(EmulatedGmmaAgainstCute, APermutedRegisterLayoutIsNoticed) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases();
  std::vector<CuteGmmaRegisterA> atoms = testing::cute_gmma_register_a();
  if (cases.empty() || atoms.size() != 8) GTEST_SKIP() << k_no_cute;
  // The halves of a register swapped, then two registers swapped.
  for (int swap : {0, 1}) {
    CuteGmmaRegisterA atom = atoms[1];
    for (size_t thread = 0; thread < 128; ++thread) {
      if (swap == 0) std::swap(atom.a[thread * 8], atom.a[thread * 8 + 1]);
      if (swap == 1) std::swap(atom.a[thread * 8 + 2], atom.a[thread * 8 + 4]);
    }
    std::string error;
    EXPECT_GT(rs_product_mismatches(cases[0], atom, &error), 0) << "swap " << swap;
    EXPECT_EQ(error, "");
  }
}

// The attention kernel packs P from S's accumulator (an m64n128 C fragment) into the A registers
// of P V's k step kk as pf[kk][r] = pack(acc[8 kk + 2 r], acc[8 kk + 2 r + 1]), the first value the
// low half (compiler/emit_attention_wgmma.cpp, emit_wgmma_kernel). Where CuTe's C layout puts those
// accumulator values must be where CuTe's A layout wants register r's halves: row m of S is row m
// of P, column 16 kk + k of S is k of k step kk.
TEST(EmulatedGmmaAgainstCute, TheAttentionKernelsPackingOfPIsCutesRegisterFragment) {
  std::vector<CuteGmmaAccumulator> accs = testing::cute_gmma_accumulators();
  std::vector<CuteGmmaRegisterA> atoms = testing::cute_gmma_register_a();
  if (accs.size() != 2 || atoms.size() != 8) GTEST_SKIP() << k_no_cute;
  const CuteGmmaAccumulator& s = accs[0];
  ASSERT_EQ(s.n, 128);
  auto mismatches = [&](const CuteGmmaRegisterA& atom, int (*source)(int kk, int r, int h)) {
    int wrong = 0;
    for (int thread = 0; thread < 128; ++thread)
      for (int kk = 0; kk < 8; ++kk)
        for (int v = 0; v < 8; ++v) {
          Place from = s.c[static_cast<size_t>(thread * 64 + source(kk, v / 2, v % 2))];
          Place want = atom.a[static_cast<size_t>(thread * 8 + v)];
          wrong += from.row != want.row || from.col != 16 * kk + want.col;
        }
    return wrong;
  };
  auto kiln = [](int kk, int r, int h) { return 8 * kk + 2 * r + h; };
  for (const CuteGmmaRegisterA& atom : atoms) EXPECT_EQ(mismatches(atom, kiln), 0) << atom.name;
  // A packing in column order (the registers of the two 8-column halves interleaved) is not.
  auto by_column = [](int kk, int r, int h) { return 8 * kk + 4 * (r & 1) + 2 * (r >> 1) + h; };
  EXPECT_GT(mismatches(atoms[1], by_column), 0);
}

// The same in `high` (tf32, compiler/emit_attention_producer.cpp): the producer writes element (r,
// 4 j + e) of Q or K at (j >> 3) * rows * 128 + r * 128 + (((j & 7) ^ (r & 7)) << 4) + 4 e, and
// element (key r, column n) of V, transposed, at row n, k position p(r) = (r & ~7) | ((r & 1) << 2)
// | ((r & 7) >> 1) of V^T: n * 128 + ((((p & 31) >> 2) ^ (n & 7)) << 4) + 4 (p & 3) in a 32-key
// block.
// The consumers pack pf[kk][r] = acc[4 kk + {0, 2, 1, 3}[r]]. Within one 32-column block those
// addresses are CuTe's tf32 K-major layout, and the key each P register holds, moved to its k
// position by p, is where CuTe's A layout wants it.
TEST(EmulatedGmmaAgainstCute, TheAttentionKernelsTf32StoresAndPackingOfPAreCutes) {
  std::vector<CuteGmmaCase> cases = testing::cute_gmma_cases_tf32();
  std::vector<CuteGmmaRegisterA> atoms = testing::cute_gmma_register_a_tf32();
  if (cases.empty() || atoms.size() != 2) GTEST_SKIP() << k_no_cute;
  auto key_position = [](int r) { return (r & ~7) | ((r & 1) << 2) | ((r & 7) >> 1); };
  for (const CuteGmmaCase& c : cases) {
    // Q (A) and K (B) as the producer writes them
    for (const CuteGmmaOperand* o : {&c.a, &c.b}) {
      int wrong = 0;
      for (int r = 0; r < o->rows; ++r)
        for (int col = 0; col < 32; ++col) {
          int j = col / 4, e = col % 4;
          int kiln = o->base + r * 128 + (((j & 7) ^ (r & 7)) << 4) + 4 * e;
          wrong += kiln != o->address[static_cast<size_t>(r * 32 + col)];
        }
      EXPECT_EQ(wrong, 0) << c.name << (o == &c.a ? ", A as Q" : ", B as K");
    }
    // V^T (B of P V): key r at k position p(r)
    int wrong = 0;
    for (int n = 0; n < c.n; ++n)
      for (int r = 0; r < 32; ++r) {
        int p = key_position(r);
        int kiln = c.b.base + n * 128 + ((((p & 31) >> 2) ^ (n & 7)) << 4) + 4 * (p & 3);
        wrong += kiln != c.b.address[static_cast<size_t>(n * 32 + p)];
      }
    EXPECT_EQ(wrong, 0) << c.name << ", B as V^T";
  }
  // P: S's accumulator (the m64n128 tf32 atom's C layout) into the RS atom's A registers
  const CuteGmmaRegisterA& s = atoms[1];
  ASSERT_EQ(s.n, 128);
  auto mismatches = [&](const CuteGmmaRegisterA& atom, const int (&source)[4],
                        int (*position)(int)) {
    int wrong = 0;
    for (int thread = 0; thread < 128; ++thread)
      for (int kk = 0; kk < 16; ++kk)
        for (int r = 0; r < 4; ++r) {
          Place from = s.c[static_cast<size_t>(thread * 64 + 4 * kk + source[r])];
          Place want = atom.a[static_cast<size_t>(thread * 4 + r)];
          wrong += from.row != want.row || position(from.col) != 8 * kk + want.col;
        }
    return wrong;
  };
  const int kiln[4] = {0, 2, 1, 3};
  for (const CuteGmmaRegisterA& atom : atoms)
    EXPECT_EQ(mismatches(atom, kiln, key_position), 0) << atom.name;
  // The accumulator's order with V^T in key order, and kiln's order without the permutation, are
  // each wrong.
  const int in_order[4] = {0, 1, 2, 3};
  auto identity = [](int r) { return r; };
  EXPECT_GT(mismatches(atoms[1], in_order, identity), 0);
  EXPECT_GT(mismatches(atoms[1], kiln, identity), 0);
}

}  // namespace
}  // namespace kiln::emulation
