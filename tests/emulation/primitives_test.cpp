// The shim's primitives against the fragment layouts of the PTX ISA, with integer-valued inputs
// and exact results; barriers, shuffles and cp.async across fibers; deadlock and misuse errors.
#include "emu_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace kiln::emulation {
namespace {

using testing::launch;

unsigned bits_of(float f) { return __float_as_uint(f); }

// ---- mma.sync ---------------------------------------------------------------------------------
// Layouts as the PTX ISA defines them (g = lane / 4, t = lane % 4), written out independently of
// the shim: tf32 m16n8k8 a = A(g,t) A(g+8,t) A(g,t+4) A(g+8,t+4), b = B(t,g) B(t+4,g);
// accumulators (g,2t) (g,2t+1) (g+8,2t) (g+8,2t+1).
__global__ void mma_tf32_kernel(float* D, const float* A, const float* B) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  unsigned a[4] = {bits_of(A[g * 8 + t]), bits_of(A[(g + 8) * 8 + t]), bits_of(A[g * 8 + t + 4]),
                   bits_of(A[(g + 8) * 8 + t + 4])};
  unsigned b[2] = {bits_of(B[t * 8 + g]), bits_of(B[(t + 4) * 8 + g])};
  float d[4] = {D[g * 8 + 2 * t], D[g * 8 + 2 * t + 1], D[(g + 8) * 8 + 2 * t],
                D[(g + 8) * 8 + 2 * t + 1]};
  kiln_mma_m16n8k8_tf32(d, a, b);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// 16-bit m16n8k16: a = pairs A(g,2t..) A(g+8,2t..) A(g,2t+8..) A(g+8,2t+8..), b = pairs
// B(2t..,g) B(2t+8..,g), the lower k in the low half. K16 selects m16n8k16 bf16 (1), f16 (2), or
// m16n8k8 f16 (3: a = the first two pairs, b = the first pair).
template <int Kind>
__global__ void mma_half_kernel(float* D, const float* A, const float* B) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int k = Kind == 3 ? 8 : 16;
  auto pack = [](float lo, float hi) {
    return Kind == 1 ? kiln_pack_bf16x2(lo, hi) : kiln_pack_f16x2(lo, hi);
  };
  unsigned a[4] = {pack(A[g * k + 2 * t], A[g * k + 2 * t + 1]),
                   pack(A[(g + 8) * k + 2 * t], A[(g + 8) * k + 2 * t + 1]), 0u, 0u};
  unsigned b[2] = {pack(B[2 * t * 8 + g], B[(2 * t + 1) * 8 + g]), 0u};
  if (k == 16) {
    a[2] = pack(A[g * k + 2 * t + 8], A[g * k + 2 * t + 9]);
    a[3] = pack(A[(g + 8) * k + 2 * t + 8], A[(g + 8) * k + 2 * t + 9]);
    b[1] = pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  }
  float d[4] = {D[g * 8 + 2 * t], D[g * 8 + 2 * t + 1], D[(g + 8) * 8 + 2 * t],
                D[(g + 8) * 8 + 2 * t + 1]};
  if (Kind == 1) kiln_mma_m16n8k16_bf16(d, a, b);
  if (Kind == 2) kiln_mma_m16n8k16_f16(d, a, b);
  if (Kind == 3) kiln_mma_m16n8k8_f16(d, a, b);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

struct MmaCase {
  std::vector<float> a, b, d;  // A 16 x k, B k x 8, D (= C on entry) 16 x 8
  std::vector<float> expected;
};

// Distinct small integers so that any misplaced element changes the result.
MmaCase integer_case(int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> value(-8, 8);
  MmaCase c;
  for (int i = 0; i < 16 * k; ++i) c.a.push_back(static_cast<float>(value(rng)));
  for (int i = 0; i < k * 8; ++i) c.b.push_back(static_cast<float>(value(rng)));
  for (int i = 0; i < 16 * 8; ++i) c.d.push_back(static_cast<float>(value(rng) * 10));
  c.expected = c.d;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j)
      for (int kk = 0; kk < k; ++kk) c.expected[i * 8 + j] += c.a[i * k + kk] * c.b[kk * 8 + j];
  return c;
}

template <typename Kernel>
void expect_mma_exact(Kernel kernel, int k) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    MmaCase c = integer_case(k, seed);
    std::string error = launch(kernel, {c.d.data(), c.a.data(), c.b.data()},
                               {c.d.size() * 4, c.a.size() * 4, c.b.size() * 4}, 1, 32);
    ASSERT_EQ(error, "");
    EXPECT_EQ(c.d, c.expected) << "seed " << seed;
  }
}

TEST(EmulatedMma, Tf32M16n8k8MatchesThePtxLayoutExactly) { expect_mma_exact(mma_tf32_kernel, 8); }

TEST(EmulatedMma, Bf16M16n8k16MatchesThePtxLayoutExactly) {
  expect_mma_exact(mma_half_kernel<1>, 16);
}

TEST(EmulatedMma, F16M16n8k16MatchesThePtxLayoutExactly) {
  expect_mma_exact(mma_half_kernel<2>, 16);
}

TEST(EmulatedMma, F16M16n8k8MatchesThePtxLayoutExactly) { expect_mma_exact(mma_half_kernel<3>, 8); }

TEST(EmulatedMma, Tf32TruncatesOperandsThatWereNotConverted) {
  MmaCase c;
  c.a.assign(16 * 8, 0.0f);
  c.b.assign(8 * 8, 0.0f);
  c.d.assign(16 * 8, 0.0f);
  // 1 + 2^-11 + 2^-12 lies above the tf32 midpoint: rna would give 1 + 2^-10, truncation 1.
  c.a[0] = 1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -12);
  c.b[0] = 1.0f;
  ASSERT_EQ(launch(mma_tf32_kernel, {c.d.data(), c.a.data(), c.b.data()},
                   {c.d.size() * 4, c.a.size() * 4, c.b.size() * 4}, 1, 32),
            "");
  EXPECT_EQ(c.d[0], 1.0f);
}

// ---- conversions ----------------------------------------------------------------------------
__global__ void convert_kernel(unsigned* out, const float* in) {
  const int i = threadIdx.x;
  out[4 * i] = kiln_cvt_rna_tf32(in[i]);
  out[4 * i + 1] = kiln_float_to_bf16(in[i]).bits;
  out[4 * i + 2] = kiln_float_to_f16(in[i]).bits;
  out[4 * i + 3] = kiln_pack_bf16x2(in[i], -in[i]);
}

TEST(EmulatedConversions, MatchTheReferenceRoundingBitForBit) {
  std::mt19937 rng(7);
  std::vector<float> in(256);
  for (float& f : in) {
    uint32_t u = rng();
    std::memcpy(&f, &u, 4);
  }
  in[0] = 1.0f + std::ldexp(1.0f, -11);  // a tf32 tie: rna rounds away from zero
  in[1] = 65520.0f;                       // rounds to f16 infinity
  in[2] = 1.0f + std::ldexp(1.0f, -8);    // a bf16 tie: to even
  std::vector<unsigned> out(4 * in.size());
  ASSERT_EQ(launch(convert_kernel, {out.data(), in.data()}, {out.size() * 4, in.size() * 4}, 1, 256),
            "");
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t b = reference::float_bits(in[i]);
    EXPECT_EQ(out[4 * i], reference::tf32_rna_bits(b)) << i;
    EXPECT_EQ(out[4 * i + 1], reference::bf16_from_float(in[i])) << i;
    EXPECT_EQ(out[4 * i + 2], reference::f16_from_float(in[i])) << i;
    EXPECT_EQ(out[4 * i + 3], reference::bf16_from_float(in[i]) |
                                  (unsigned{reference::bf16_from_float(-in[i])} << 16)) << i;
  }
  EXPECT_EQ(out[0], 0x3f802000u);
}

// ---- ldmatrix ---------------------------------------------------------------------------------
constexpr int k_row_stride = 24;  // 16-bit elements per shared row (48 bytes, 16-byte aligned)

// Four 8x8 matrices of 16-bit values v(m, r, c) = 64m + 8r + c, rows k_row_stride apart.
uint16_t ld_value(int m, int r, int c) { return static_cast<uint16_t>(64 * m + 8 * r + c); }

template <int Count, bool Trans>
__global__ void ldmatrix_kernel(unsigned* out, const unsigned short* src) {
  const int lane = threadIdx.x;
  unsigned short* s = reinterpret_cast<unsigned short*>(kiln_dynamic_smem());
  for (int i = lane; i < 32 * k_row_stride; i += 32) s[i] = src[i];
  __syncthreads();
  // Lane 8i + r addresses row r of matrix i; lanes past 8 * Count give addresses never used.
  const void* row = lane < 8 * Count ? static_cast<const void*>(s + lane * k_row_stride) : nullptr;
  unsigned r[4] = {0, 0, 0, 0};
  if (Count == 1 && !Trans) kiln_ldmatrix_x1(r, row);
  if (Count == 2 && !Trans) kiln_ldmatrix_x2(r, row);
  if (Count == 4 && !Trans) kiln_ldmatrix_x4(r, row);
  if (Count == 1 && Trans) kiln_ldmatrix_x1_trans(r, row);
  if (Count == 2 && Trans) kiln_ldmatrix_x2_trans(r, row);
  if (Count == 4 && Trans) kiln_ldmatrix_x4_trans(r, row);
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

template <int Count, bool Trans>
void expect_ldmatrix() {
  std::vector<unsigned short> src(32 * k_row_stride, 0xdead);
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) src[(m * 8 + r) * k_row_stride + c] = ld_value(m, r, c);
  std::vector<unsigned> out(32 * 4);
  ASSERT_EQ(launch(ldmatrix_kernel<Count, Trans>, {out.data(), src.data()},
                   {out.size() * 4, src.size() * 2}, 1, 32, src.size() * 2),
            "");
  for (int lane = 0; lane < 32; ++lane) {
    for (int m = 0; m < Count; ++m) {
      // PTX ISA: lane L holds row L/4, elements 2(L%4) and 2(L%4)+1; .trans holds the transpose.
      int r = lane / 4, c = 2 * (lane % 4);
      unsigned lo = Trans ? ld_value(m, c, r) : ld_value(m, r, c);
      unsigned hi = Trans ? ld_value(m, c + 1, r) : ld_value(m, r, c + 1);
      EXPECT_EQ(out[lane * 4 + m], lo | (hi << 16)) << "lane " << lane << " matrix " << m;
    }
    for (int m = Count; m < 4; ++m) EXPECT_EQ(out[lane * 4 + m], 0u);
  }
}

TEST(EmulatedLdmatrix, X1FollowsThePtxLayout) { expect_ldmatrix<1, false>(); }
TEST(EmulatedLdmatrix, X2FollowsThePtxLayout) { expect_ldmatrix<2, false>(); }
TEST(EmulatedLdmatrix, X4FollowsThePtxLayout) { expect_ldmatrix<4, false>(); }
TEST(EmulatedLdmatrix, X1TransFollowsThePtxLayout) { expect_ldmatrix<1, true>(); }
TEST(EmulatedLdmatrix, X2TransFollowsThePtxLayout) { expect_ldmatrix<2, true>(); }
TEST(EmulatedLdmatrix, X4TransFollowsThePtxLayout) { expect_ldmatrix<4, true>(); }

__global__ void ldmatrix_misaligned_kernel(unsigned* out) {
  unsigned char* s = kiln_dynamic_smem();
  unsigned r[4];
  kiln_ldmatrix_x4(r, s + 16 * threadIdx.x + 4);
  out[threadIdx.x] = r[0];
}

TEST(EmulatedLdmatrix, MisalignedRowAddressIsAnError) {
  std::vector<unsigned> out(32);
  std::string error = launch(ldmatrix_misaligned_kernel, {out.data()}, {out.size() * 4}, 1, 32, 1024);
  EXPECT_NE(error.find("not 16-byte aligned"), std::string::npos) << error;
}

// ---- shuffles -----------------------------------------------------------------------------------
__global__ void shuffle_kernel(float* out) {
  const int tid = threadIdx.x, lane = tid & 31;
  out[tid * 4 + 0] = __shfl_xor_sync(0xffffffffu, static_cast<float>(tid * 10), 5);
  out[tid * 4 + 1] = static_cast<float>(__shfl_sync(0xffffffffu, tid, lane + 3));
  out[tid * 4 + 2] = static_cast<float>(__shfl_down_sync(0xffffffffu, lane, 4, 16));
  out[tid * 4 + 3] = __shfl_up_sync(0xffffffffu, static_cast<float>(lane), 1);
}

TEST(EmulatedShuffles, XorIdxDownAndUpFollowCudaSemantics) {
  std::vector<float> out(64 * 4);
  ASSERT_EQ(launch(shuffle_kernel, {out.data()}, {out.size() * 4}, 1, 64), "");
  for (int tid = 0; tid < 64; ++tid) {
    int lane = tid & 31, warp = tid / 32;
    EXPECT_EQ(out[tid * 4 + 0], static_cast<float>((warp * 32 + (lane ^ 5)) * 10)) << tid;
    EXPECT_EQ(out[tid * 4 + 1], static_cast<float>(warp * 32 + (lane + 3) % 32)) << tid;
    int down = (lane % 16) + 4 < 16 ? lane + 4 : lane;
    EXPECT_EQ(out[tid * 4 + 2], static_cast<float>(down)) << tid;
    EXPECT_EQ(out[tid * 4 + 3], static_cast<float>(lane == 0 ? 0 : lane - 1)) << tid;
  }
}

// __shfl_xor_sync with width 16 and lane mask 16: the partner of a lane of the second half is in
// the earlier segment and is read; that of a lane of the first half lies in a later segment, so
// the lane gets its own value (CUDA C++ Programming Guide, warp shuffle functions).
__global__ void segmented_xor_kernel(float* out) {
  const int lane = threadIdx.x;
  out[lane] = __shfl_xor_sync(0xffffffffu, static_cast<float>(lane), 16, 16);
}

TEST(EmulatedShuffles, XorWithWidthReadsEarlierSegmentsAndKeepsItsOwnValueForLaterOnes) {
  std::vector<float> out(32);
  ASSERT_EQ(launch(segmented_xor_kernel, {out.data()}, {out.size() * 4}, 1, 32), "");
  for (int lane = 0; lane < 32; ++lane)
    EXPECT_EQ(out[lane], static_cast<float>(lane < 16 ? lane : lane - 16)) << lane;
}

// Lanes store to shared memory, then read their lower neighbour's value, with or without the
// __syncwarp between. Where lane 0 always runs first (the kind schedule) the missing __syncwarp
// goes unseen; lanes from the last (adversarial) or in random orders read unwritten memory.
template <bool Sync>
__global__ void lane_neighbour_kernel(int* out) {
  int* s = reinterpret_cast<int*>(kiln_dynamic_smem());
  const int lane = threadIdx.x;
  s[lane] = lane * 7;
  if (Sync) __syncwarp();
  out[lane] = lane == 0 ? 0 : s[lane - 1];
}

TEST(EmulatedWarp, AMissingSyncwarpIsCaughtWhereLaneZeroDoesNotRunFirst) {
  using testing::LaunchSchedule;
  auto wrong = [](LaunchSchedule s, bool sync) {
    std::vector<int> out(32);
    auto kernel = sync ? lane_neighbour_kernel<true> : lane_neighbour_kernel<false>;
    EXPECT_EQ(launch(kernel, {out.data()}, {out.size() * 4}, 1, 32, 32 * 4, s), "");
    int n = 0;
    for (int lane = 1; lane < 32; ++lane) n += out[lane] != (lane - 1) * 7;
    return n;
  };
  EXPECT_EQ(wrong({KILN_EMU_KIND, 0}, false), 0) << "the kind schedule runs lane 0 first";
  EXPECT_GT(wrong({KILN_EMU_ADVERSARIAL, 0}, false), 0);
  EXPECT_GT(wrong({KILN_EMU_SEEDED, 3}, false), 0);
  for (LaunchSchedule s : {LaunchSchedule{KILN_EMU_KIND, 0}, LaunchSchedule{KILN_EMU_ADVERSARIAL, 0},
                           LaunchSchedule{KILN_EMU_SEEDED, 3}})
    EXPECT_EQ(wrong(s, true), 0) << "with __syncwarp, schedule " << s.kind;
}

// ---- barriers ---------------------------------------------------------------------------------
template <bool Barrier>
__global__ void neighbour_kernel(int* out) {
  int* s = reinterpret_cast<int*>(kiln_dynamic_smem());
  const int tid = threadIdx.x;
  s[tid] = tid * 3;
  if (Barrier) __syncthreads();
  out[tid] = s[(tid + 37) % 96];
}

TEST(EmulatedBarrier, SyncthreadsMakesEveryThreadsStoreVisible) {
  std::vector<int> out(96);
  ASSERT_EQ(launch(neighbour_kernel<true>, {out.data()}, {out.size() * 4}, 2, 96, 96 * 4), "");
  for (int tid = 0; tid < 96; ++tid) EXPECT_EQ(out[tid], ((tid + 37) % 96) * 3);
}

TEST(EmulatedBarrier, AMissingBarrierReadsUnwrittenSharedMemory) {
  std::vector<int> out(96);
  ASSERT_EQ(launch(neighbour_kernel<false>, {out.data()}, {out.size() * 4}, 1, 96, 96 * 4), "");
  int wrong = 0;
  for (int tid = 0; tid < 96; ++tid) wrong += out[tid] != ((tid + 37) % 96) * 3;
  EXPECT_GT(wrong, 0);
}

// A block-wide sum through a static __shared__ array: shared by the threads of one block, and
// each block starts its own sum.
__global__ void shared_sum_kernel(int* out) {
  __shared__ int partial[64];
  const int tid = threadIdx.x;
  partial[tid] = tid + 1000 * static_cast<int>(blockIdx.x);
  __syncthreads();
  for (int stride = 32; stride > 0; stride >>= 1) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = partial[0];
}

TEST(EmulatedBarrier, StaticSharedArraysAreSharedPerBlock) {
  std::vector<int> out(3);
  ASSERT_EQ(launch(shared_sum_kernel, {out.data()}, {out.size() * 4}, 3, 64), "");
  for (int b = 0; b < 3; ++b) EXPECT_EQ(out[b], 64 * 63 / 2 + 64 * 1000 * b);
}

__global__ void early_exit_kernel(int* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(EmulatedBarrier, ABarrierNotEveryThreadReachesIsReportedAsDeadlock) {
  std::vector<int> out(64);
  std::string error = launch(early_exit_kernel, {out.data()}, {out.size() * 4}, 1, 64);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("63 thread(s) wait at __syncthreads"), std::string::npos) << error;
}

TEST(EmulatedBarrier, AMissingBarrierIsCaughtUnderEverySchedule) {
  using testing::LaunchSchedule;
  for (LaunchSchedule s : {LaunchSchedule{KILN_EMU_ADVERSARIAL, 0}, LaunchSchedule{KILN_EMU_SEEDED, 1},
                           LaunchSchedule{KILN_EMU_SEEDED, 2}}) {
    std::vector<int> out(96);
    ASSERT_EQ(launch(neighbour_kernel<false>, {out.data()}, {out.size() * 4}, 1, 96, 96 * 4, s), "");
    int wrong = 0;
    for (int tid = 0; tid < 96; ++tid) wrong += out[tid] != ((tid + 37) % 96) * 3;
    EXPECT_GT(wrong, 0) << "schedule " << s.kind << " seed " << s.seed;
    std::vector<int> good(96);
    ASSERT_EQ(launch(neighbour_kernel<true>, {good.data()}, {good.size() * 4}, 2, 96, 96 * 4, s), "");
    for (int tid = 0; tid < 96; ++tid) EXPECT_EQ(good[tid], ((tid + 37) % 96) * 3);
  }
}

// ---- schedules --------------------------------------------------------------------------------
// Each thread writes its index into the next free slot of a log twice, before and after a
// barrier: the order in which the schedule ran the threads (fibers are never preempted).
__global__ void order_kernel(int* log) {
  log[1 + log[0]++] = static_cast<int>(threadIdx.x);
  __syncthreads();
  log[1 + log[0]++] = static_cast<int>(threadIdx.x);
}

std::vector<int> run_order(testing::LaunchSchedule schedule) {
  std::vector<int> log(1 + 2 * 80, 0);
  EXPECT_EQ(launch(order_kernel, {log.data()}, {log.size() * 4}, 1, 80, 0, schedule), "");
  return log;
}

TEST(EmulatedSchedule, KindRunsThreadsInOrderThenInReverse) {
  std::vector<int> log = run_order({KILN_EMU_KIND, 0});
  for (int i = 0; i < 80; ++i) {
    EXPECT_EQ(log[1 + i], i);
    EXPECT_EQ(log[81 + i], 79 - i) << "the second sweep runs in reverse";
  }
}

TEST(EmulatedSchedule, AdversarialRunsTheLastWarpFirstAndItsLanesFromTheLast) {
  std::vector<int> log = run_order({KILN_EMU_ADVERSARIAL, 0});
  // Warps 2 (lanes 64..79), 1, 0, each from its last lane.
  std::vector<int> want;
  for (int w = 2; w >= 0; --w)
    for (int lane = (w == 2 ? 15 : 31); lane >= 0; --lane) want.push_back(32 * w + lane);
  for (int i = 0; i < 80; ++i) EXPECT_EQ(log[1 + i], want[static_cast<size_t>(i)]) << i;
}

TEST(EmulatedSchedule, ASeedGivesOneOrderAndOtherSeedsOthers) {
  std::vector<int> a = run_order({KILN_EMU_SEEDED, 7}), again = run_order({KILN_EMU_SEEDED, 7});
  EXPECT_EQ(a, again) << "a seed replays its schedule";
  std::vector<int> sorted(a.begin() + 1, a.begin() + 81);
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 80; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i) << "every thread once";
  int differ = 0;
  for (uint64_t seed = 8; seed < 12; ++seed) differ += run_order({KILN_EMU_SEEDED, seed}) != a;
  EXPECT_EQ(differ, 4);
  std::vector<int> in_order(80);
  for (int i = 0; i < 80; ++i) in_order[static_cast<size_t>(i)] = i;
  EXPECT_NE(std::vector<int>(a.begin() + 1, a.begin() + 81), in_order);
}

__global__ void divergent_kernel(float* out) {
  const int lane = threadIdx.x;
  if (lane < 16) {
    out[lane] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  } else {
    __syncwarp();
  }
}

TEST(EmulatedWarp, DivergentCollectivesAreAnError) {
  std::vector<float> out(32);
  std::string error = launch(divergent_kernel, {out.data()}, {out.size() * 4}, 1, 32);
  EXPECT_NE(error.find("divergent warp collective"), std::string::npos) << error;
}

// ---- cp.async ---------------------------------------------------------------------------------
// Two groups per thread: the first copies 16 bytes, the second zero-fills (src_bytes 0). What the
// thread sees before any wait, after wait<1> and after wait<0> goes to out.
__global__ void cp_async_kernel(unsigned* out, const unsigned* src) {
  const int tid = threadIdx.x;
  unsigned* s = reinterpret_cast<unsigned*>(kiln_dynamic_smem());
  kiln_cp_async_16(s + 4 * tid, src + 4 * tid, 16);
  kiln_cp_async_commit();
  kiln_cp_async_16(s + 128 + 4 * tid, src, 0);
  kiln_cp_async_commit();
  out[5 * tid + 0] = s[4 * tid];
  kiln_cp_async_wait<1>();
  out[5 * tid + 1] = s[4 * tid + 3];
  out[5 * tid + 2] = s[128 + 4 * tid];
  kiln_cp_async_wait<0>();
  out[5 * tid + 3] = s[128 + 4 * tid];
  __syncthreads();
  out[5 * tid + 4] = s[4 * ((tid + 1) % 32)];
}

TEST(EmulatedCpAsync, CopiesLandWhenAWaitRetiresTheirGroup) {
  std::vector<unsigned> src(128), out(5 * 32);
  for (unsigned i = 0; i < 128; ++i) src[i] = 1000 + i;
  ASSERT_EQ(launch(cp_async_kernel, {out.data(), src.data()}, {out.size() * 4, src.size() * 4}, 1,
                   32, 256 * 4),
            "");
  for (int tid = 0; tid < 32; ++tid) {
    EXPECT_EQ(out[5 * tid + 0], 0xffffffffu) << "visible before the wait";
    EXPECT_EQ(out[5 * tid + 1], 1000u + 4 * tid + 3);
    EXPECT_EQ(out[5 * tid + 2], 0xffffffffu) << "the newest group must still be in flight";
    EXPECT_EQ(out[5 * tid + 3], 0u) << "zero fill";
    EXPECT_EQ(out[5 * tid + 4], 1000u + 4 * ((tid + 1) % 32));
  }
}

TEST(EmulatedCpAsync, UnderTheAdversarialScheduleCopiesLandAtIssue) {
  std::vector<unsigned> src(128), out(5 * 32);
  for (unsigned i = 0; i < 128; ++i) src[i] = 1000 + i;
  ASSERT_EQ(launch(cp_async_kernel, {out.data(), src.data()}, {out.size() * 4, src.size() * 4}, 1,
                   32, 256 * 4, {KILN_EMU_ADVERSARIAL}),
            "");
  for (int tid = 0; tid < 32; ++tid) {
    EXPECT_EQ(out[5 * tid + 0], 1000u + 4 * tid) << "landed when issued";
    EXPECT_EQ(out[5 * tid + 2], 0u) << "the zero fill too";
    EXPECT_EQ(out[5 * tid + 4], 1000u + 4 * ((tid + 1) % 32));
  }
}

TEST(EmulatedCpAsync, UnderSeededSchedulesCopiesLandBetweenIssueAndWait) {
  // Each copy lands somewhere from its issue to its wait: what a thread reads before the wait is
  // either still poison or already the data, both seen over a few seeds; after it, always data.
  std::vector<unsigned> src(128);
  for (unsigned i = 0; i < 128; ++i) src[i] = 1000 + i;
  int early = 0, late = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::vector<unsigned> out(5 * 32);
    ASSERT_EQ(launch(cp_async_kernel, {out.data(), src.data()}, {out.size() * 4, src.size() * 4},
                     1, 32, 256 * 4, {KILN_EMU_SEEDED, seed}),
              "");
    for (int tid = 0; tid < 32; ++tid) {
      ASSERT_TRUE(out[5 * tid] == 0xffffffffu || out[5 * tid] == 1000u + 4 * tid);
      early += out[5 * tid] != 0xffffffffu;
      late += out[5 * tid] == 0xffffffffu;
      EXPECT_EQ(out[5 * tid + 1], 1000u + 4 * tid + 3);
      EXPECT_EQ(out[5 * tid + 3], 0u);
    }
  }
  EXPECT_GT(early, 0);
  EXPECT_GT(late, 0);
}

__global__ void cp_async_out_of_bounds_kernel(unsigned* out) {
  unsigned* s = reinterpret_cast<unsigned*>(kiln_dynamic_smem());
  kiln_cp_async_16(s, out + 32, 16);
}

TEST(EmulatedCpAsync, ASourceOutsideEveryBufferIsAnError) {
  std::vector<unsigned> out(36);
  std::string error = launch(cp_async_out_of_bounds_kernel, {out.data()}, {32 * 4}, 1, 32, 64);
  EXPECT_NE(error.find("outside every buffer"), std::string::npos) << error;
}

// ---- memory faults ----------------------------------------------------------------------------
__global__ void wild_load_kernel(float* out, const float* wild) { out[threadIdx.x] = wild[threadIdx.x]; }

TEST(EmulatedFaults, AWildLoadIsAnErrorNotACrash) {
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  std::vector<float> out(32);
  std::string error = launch(wild_load_kernel, {out.data(), page}, {out.size() * 4, 4096}, 1, 32);
  munmap(page, 4096);
  EXPECT_NE(error.find("memory fault (SIGSEGV)"), std::string::npos) << error;
  EXPECT_NE(error.find("thread (0, 0, 0)"), std::string::npos) << error;
  // The process and the emulator stay usable afterwards.
  std::vector<int> next(96);
  EXPECT_EQ(launch(neighbour_kernel<true>, {next.data()}, {next.size() * 4}, 1, 96, 96 * 4), "");
}

}  // namespace
}  // namespace kiln::emulation
