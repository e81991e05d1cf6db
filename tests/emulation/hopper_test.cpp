// The shim's sm_90a model (kiln_emu_hopper.h): TMA boxes (out-of-bounds zeros, 128-byte swizzle,
// completion on an mbarrier), wgmma from shared-memory descriptors (K-major and N-major B) against
// an fp64 product, and the misuses the model turns into errors or wrong results: reading a stage
// before its mbarrier, accumulators read or written before wait_group, operands written by plain
// stores without fence.proxy.async, operands rewritten or refilled before the wait_group that
// retires their wgmmas, wgmma without wgmma.fence, a warpgroup that diverges, and RS wgmmas in
// flight sharing their A registers (allowed) while one writes them (not); named barriers (bar.sync,
// bar.arrive).
#include "emu_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::emulation {
namespace {

using testing::launch;
using testing::LaunchSchedule;

const LaunchSchedule k_schedules[] = {{KILN_EMU_KIND}, {KILN_EMU_ADVERSARIAL},
                                      {KILN_EMU_SEEDED, 1}, {KILN_EMU_SEEDED, 7}};

// A rank-2 bf16 map over `base` (dims {cols, rows}, row stride `ld` elements), box {64, box_rows},
// 128-byte swizzle.
CUtensorMap map_2d(const void* base, uint64_t cols, uint64_t rows, uint64_t ld, uint32_t box_rows) {
  KilnEmuTensorMap m{};
  m.magic = KILN_EMU_TENSOR_MAP_MAGIC;
  m.base = base;
  m.rank = 2;
  m.elem_bytes = 2;
  m.swizzle = 128;
  m.dims[0] = cols;
  m.dims[1] = rows;
  m.strides[0] = ld * 2;
  m.box[0] = 64;
  m.box[1] = box_rows;
  CUtensorMap out{};
  std::memcpy(&out, &m, sizeof m);
  return out;
}

template <typename T>
KilnEmuRange range(const std::vector<T>& v) {
  return {v.data(), v.data() + v.size()};
}

uint16_t bf16(float f) { return reference::bf16_from_float(f); }
float from_bf16(uint16_t h) { return reference::float_from_bf16(h); }

// ---- TMA ------------------------------------------------------------------------------------

// Loads the 64 x 8 box at (c0, c1) and writes it out unswizzled; `Waits` false reads it without
// waiting for the mbarrier.
template <bool Waits>
__global__ void tma_box_kernel(uint16_t* out, const __grid_constant__ CUtensorMap map, int* coords) {
  unsigned char* smem = kiln_dynamic_smem();
  auto* bar = reinterpret_cast<unsigned long long*>(smem + 1024);
  if (threadIdx.x == 0) {
    kiln_mbarrier_init(bar, 1);
    kiln_mbarrier_arrive_expect_tx(bar, 64 * 8 * 2);
    kiln_tma_load_2d(smem, &map, coords[0], coords[1], bar);
  }
  __syncthreads();
  if (Waits) kiln_mbarrier_wait(bar, 0);
  for (int i = threadIdx.x; i < 64 * 8; i += blockDim.x) {
    size_t offset = static_cast<size_t>(i) * 2;
    size_t at = offset ^ (((offset >> 7) & 7) << 4);
    std::memcpy(&out[i], smem + at, 2);
  }
}

TEST(EmulatedTma, ABoxLandsSwizzledWithZerosOutsideTheTensorUnderEverySchedule) {
  const int rows = 10, cols = 100, ld = 104;
  std::vector<uint16_t> g(static_cast<size_t>(rows * ld));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < ld; ++c) g[static_cast<size_t>(r * ld + c)] = static_cast<uint16_t>(1 + r * 1000 + c);
  CUtensorMap map = map_2d(g.data(), cols, rows, ld, 8);
  std::vector<int> coords = {64, 5};  // columns 64..127 (100.. outside), rows 5..12 (10.. outside)
  for (LaunchSchedule schedule : k_schedules) {
    std::vector<uint16_t> out(64 * 8, 0xbeef);
    std::string error = launch(tma_box_kernel<true>, {out.data(), &map, coords.data()},
                               {out.size() * 2, sizeof map, coords.size() * 4}, 1, 64, 2048, schedule,
                               {range(g)});
    ASSERT_EQ(error, "") << schedule.kind;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 64; ++c) {
        int gr = 5 + r, gc = 64 + c;
        uint16_t want = gr < rows && gc < cols ? g[static_cast<size_t>(gr * ld + gc)] : 0;
        ASSERT_EQ(out[static_cast<size_t>(r * 64 + c)], want) << "row " << r << " col " << c;
      }
  }
}

TEST(EmulatedTma, AStageReadWithoutItsMbarrierIsReadBeforeTheCopyLands) {
  std::vector<uint16_t> g(64 * 8, 7);
  CUtensorMap map = map_2d(g.data(), 64, 8, 64, 8);
  std::vector<int> coords = {0, 0};
  std::vector<uint16_t> out(64 * 8, 0);
  std::string error = launch(tma_box_kernel<false>, {out.data(), &map, coords.data()},
                             {out.size() * 2, sizeof map, coords.size() * 4}, 1, 64, 2048,
                             LaunchSchedule{KILN_EMU_KIND}, {range(g)});
  ASSERT_EQ(error, "");
  EXPECT_EQ(out[0], 0xffff) << "the kind schedule lands a TMA copy at the latest moment";
}

TEST(EmulatedTma, MisusesAreErrors) {
  std::vector<uint16_t> g(64 * 8, 7);
  std::vector<int> coords = {0, 0};
  std::vector<uint16_t> out(64 * 8, 0);
  CUtensorMap unencoded{};
  std::string error = launch(tma_box_kernel<true>, {out.data(), &unencoded, coords.data()},
                             {out.size() * 2, sizeof unencoded, coords.size() * 4}, 1, 32, 2048);
  EXPECT_NE(error.find("the tensor map was not encoded"), std::string::npos) << error;
  KilnEmuTensorMap m{};
  CUtensorMap wide = map_2d(g.data(), 64, 8, 64, 8);
  std::memcpy(&m, &wide, sizeof m);
  m.box[0] = 128;  // 256 bytes: past a 128-byte swizzle span
  std::memcpy(&wide, &m, sizeof m);
  error = launch(tma_box_kernel<true>, {out.data(), &wide, coords.data()},
                 {out.size() * 2, sizeof wide, coords.size() * 4}, 1, 32, 4096, {}, {range(g)});
  EXPECT_NE(error.find("inner box is at most 128 bytes"), std::string::npos) << error;
}

// ---- wgmma ----------------------------------------------------------------------------------

// One warpgroup: D (64 x 128, fp32) = A (64 x 64, K-major) B (64 x 128), B K-major ([128][64])
// or N-major ([64][128], two 64-column boxes). Thread 0 loads both with TMA; the warpgroup waits,
// runs 4 k steps of m64n128k16 and writes D. The variants leave out one rule.
enum class Flaw { none, read_before_wait, write_before_wait, no_fence, diverge };

// Issues the wgmma from a place of its own (Flaw::diverge).
template <int TransB>
__attribute__((noinline)) void wgmma_elsewhere(float* d, unsigned long long da, unsigned long long db,
                                               int scale_d) {
  kiln_wgmma_m64n128k16_bf16<TransB>(d, da, db, scale_d);
}

template <int TransB, Flaw F>
__global__ void wgmma_kernel(float* out, const __grid_constant__ CUtensorMap ma,
                             const __grid_constant__ CUtensorMap mb) {
  unsigned char* smem = kiln_dynamic_smem();
  unsigned char* sa = smem;                  // 64 rows x 128 bytes
  unsigned char* sb = smem + 8192;           // 16 KiB
  auto* bar = reinterpret_cast<unsigned long long*>(smem + 8192 + 16384);
  const int tid = threadIdx.x;
  if (tid == 0) {
    kiln_mbarrier_init(bar, 1);
    kiln_mbarrier_arrive_expect_tx(bar, 8192 + 16384);
    kiln_tma_load_2d(sa, &ma, 0, 0, bar);
    if (TransB) {
      kiln_tma_load_2d(sb, &mb, 0, 0, bar);
      kiln_tma_load_2d(sb + 8192, &mb, 64, 0, bar);
    } else {
      kiln_tma_load_2d(sb, &mb, 0, 0, bar);
    }
  }
  __syncthreads();
  kiln_mbarrier_wait(bar, 0);
  float d[64];
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;
  if (F != Flaw::no_fence) kiln_wgmma_fence();
  for (int k = 0; k < 4; ++k) {
    unsigned long long da = kiln_gmma_desc_128b(sa + 32 * k, 16, 1024);
    unsigned long long db = TransB ? kiln_gmma_desc_128b(sb + 2048 * k, 8192, 1024)
                                   : kiln_gmma_desc_128b(sb + 32 * k, 16, 1024);
    if (F == Flaw::diverge && tid == 5) {
      wgmma_elsewhere<TransB>(d, da, db, k > 0);
    } else {
      kiln_wgmma_m64n128k16_bf16<TransB>(d, da, db, k > 0);
    }
  }
  kiln_wgmma_commit();
  if (F == Flaw::read_before_wait) out[tid] = d[0];
  if (F == Flaw::write_before_wait) d[0] *= 2.0f;  // a product of the poison
  kiln_wgmma_wait<0>();
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int v = 0; v < 64; ++v) {
    int j = v / 4, i = v % 4;
    int m = 16 * warp + g + 8 * (i >> 1), n = 8 * j + 2 * t + (i & 1);
    if (F == Flaw::read_before_wait && m == 0 && n == 0) continue;
    out[m * 128 + n] = d[v];
  }
}

struct WgmmaCase {
  std::vector<uint16_t> a, b;  // a [64][64]; b [128][64] (K-major) or [64][128] (N-major)
  std::vector<double> want;    // [64][128]
};

WgmmaCase make_case(bool n_major) {
  WgmmaCase c;
  c.a.resize(64 * 64);
  c.b.resize(64 * 128);
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 64; ++k) c.a[static_cast<size_t>(m * 64 + k)] = bf16(static_cast<float>((m * 7 + k * 3) % 17 - 8) / 8.0f);
  auto bval = [](int k, int n) { return static_cast<float>((k * 5 + n * 11) % 13 - 6) / 4.0f; };
  for (int k = 0; k < 64; ++k)
    for (int n = 0; n < 128; ++n)
      c.b[n_major ? static_cast<size_t>(k * 128 + n) : static_cast<size_t>(n * 64 + k)] = bf16(bval(k, n));
  c.want.assign(64 * 128, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 128; ++n) {
      double sum = 0;
      for (int k = 0; k < 64; ++k)
        sum += static_cast<double>(from_bf16(c.a[static_cast<size_t>(m * 64 + k)])) * bval(k, n);
      c.want[static_cast<size_t>(m * 128 + n)] = sum;
    }
  return c;
}

template <int TransB, Flaw F>
std::string run_wgmma(const WgmmaCase& c, std::vector<float>& out, LaunchSchedule schedule = {}) {
  CUtensorMap ma = map_2d(c.a.data(), 64, 64, 64, 64);
  CUtensorMap mb = TransB ? map_2d(c.b.data(), 128, 64, 128, 64) : map_2d(c.b.data(), 64, 128, 64, 128);
  out.assign(64 * 128, -1.0f);
  return launch(wgmma_kernel<TransB, F>, {out.data(), &ma, &mb},
                {out.size() * 4, sizeof ma, sizeof mb}, 1, 128, 8192 + 16384 + 64, schedule,
                {range(c.a), range(c.b)});
}

bool matches(const WgmmaCase& c, const std::vector<float>& out) {
  for (size_t i = 0; i < out.size(); ++i)
    if (!(std::fabs(out[i] - c.want[i]) <= 1e-5 * (1 + std::fabs(c.want[i])))) return false;
  return true;
}

TEST(EmulatedWgmma, KMajorAndNMajorOperandsGiveTheProductUnderEverySchedule) {
  WgmmaCase k_major = make_case(false), n_major = make_case(true);
  for (LaunchSchedule schedule : k_schedules) {
    std::vector<float> out;
    ASSERT_EQ((run_wgmma<0, Flaw::none>(k_major, out, schedule)), "");
    EXPECT_TRUE(matches(k_major, out)) << "K-major B, schedule " << schedule.kind;
    ASSERT_EQ((run_wgmma<1, Flaw::none>(n_major, out, schedule)), "");
    EXPECT_TRUE(matches(n_major, out)) << "N-major B, schedule " << schedule.kind;
  }
  // And the layouts are not interchangeable: N-major data read as K-major is another product.
  std::vector<float> out;
  ASSERT_EQ((run_wgmma<0, Flaw::none>(n_major, out)), "");
  EXPECT_FALSE(matches(n_major, out));
}

TEST(EmulatedWgmma, AccumulatorsReadBeforeWaitGroupHoldPoison) {
  WgmmaCase c = make_case(false);
  std::vector<float> out;
  ASSERT_EQ((run_wgmma<0, Flaw::read_before_wait>(c, out)), "");
  EXPECT_TRUE(std::isnan(out[0]));
}

TEST(EmulatedWgmma, AccumulatorsWrittenBeforeWaitGroupAreAnError) {
  // Even where the write is a product of the poison: a signaling NaN, which arithmetic quiets.
  WgmmaCase c = make_case(false);
  std::vector<float> out;
  std::string result = run_wgmma<0, Flaw::write_before_wait>(c, out);
  EXPECT_NE(result.find("wrote the accumulators while a wgmma in flight writes them"),
            std::string::npos)
      << result;
}

// A (64 x 64) and B (K-major, 128 x 64) stored by the warpgroup's plain stores, 128-byte swizzled,
// A at offset 0 and B at 8192.
void store_plainly(unsigned char* smem, const uint16_t* a, const uint16_t* b, int tid) {
  for (int i = tid; i < 64 * 64; i += 128) {
    size_t offset = static_cast<size_t>(i) * 2;
    std::memcpy(smem + (offset ^ (((offset >> 7) & 7) << 4)), &a[i], 2);
  }
  for (int i = tid; i < 128 * 64; i += 128) {
    size_t offset = 8192 + static_cast<size_t>(i) * 2;
    std::memcpy(smem + (offset ^ (((offset >> 7) & 7) << 4)), &b[i], 2);
  }
}

// A written only by plain stores: with the fence the product, without it the async proxy's
// view (0xff bytes, NaN). `Rewrite`: a byte of A changed (and fenced) after the wgmmas are issued.
template <bool Fence, bool Rewrite = false>
__global__ void plain_operand_kernel(float* out, uint16_t* a, uint16_t* b) {
  unsigned char* smem = kiln_dynamic_smem();
  const int tid = threadIdx.x;
  store_plainly(smem, a, b, tid);
  if (Fence) kiln_fence_proxy_async();
  __syncthreads();
  float d[64];
  kiln_wgmma_fence();
  for (int k = 0; k < 4; ++k)
    kiln_wgmma_m64n128k16_bf16<0>(d, kiln_gmma_desc_128b(smem + 32 * k, 16, 1024),
                                  kiln_gmma_desc_128b(smem + 8192 + 32 * k, 16, 1024), k > 0);
  kiln_wgmma_commit();
  if (Rewrite) {
    if (tid == 0) smem[2] ^= 0x40;
    kiln_fence_proxy_async();
  }
  kiln_wgmma_wait<0>();
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int v = 0; v < 64; ++v)
    out[(16 * warp + g + 8 * ((v % 4) >> 1)) * 128 + 8 * (v / 4) + 2 * t + (v & 1)] = d[v];
}

TEST(EmulatedWgmma, OperandsStoredWithoutFenceProxyAsyncAreReadStale) {
  WgmmaCase c = make_case(false);
  for (bool fence : {true, false}) {
    std::vector<float> out(64 * 128, -1.0f);
    std::vector<uint16_t> a = c.a, b = c.b;
    std::string error = launch(fence ? plain_operand_kernel<true> : plain_operand_kernel<false>,
                               {out.data(), a.data(), b.data()},
                               {out.size() * 4, a.size() * 2, b.size() * 2}, 1, 128, 8192 + 16384);
    ASSERT_EQ(error, "");
    if (fence) {
      EXPECT_TRUE(matches(c, out));
    } else {
      EXPECT_TRUE(std::isnan(out[0]));
    }
  }
}

TEST(EmulatedWgmma, WgmmaWithoutWgmmaFenceIsAnError) {
  WgmmaCase c = make_case(false);
  std::vector<float> out;
  std::string error = run_wgmma<0, Flaw::no_fence>(c, out);
  EXPECT_NE(error.find("without a wgmma.fence"), std::string::npos) << error;
}

// Hardware reads a wgmma's shared-memory operands at any moment from its issue to the wait_group
// that retires it: they must hold still in between. A byte of A rewritten (and fenced to the
// async proxy) after the wgmmas are issued is an error under every schedule.
TEST(EmulatedWgmma, OperandsRewrittenBeforeWaitGroupAreAnErrorUnderEverySchedule) {
  WgmmaCase c = make_case(false);
  for (LaunchSchedule schedule : k_schedules) {
    std::vector<float> out(64 * 128, -1.0f);
    std::vector<uint16_t> a = c.a, b = c.b;
    std::string error = launch(plain_operand_kernel<true, true>, {out.data(), a.data(), b.data()},
                               {out.size() * 4, a.size() * 2, b.size() * 2}, 1, 128, 8192 + 16384,
                               schedule);
    EXPECT_NE(error.find("changed between its issue and the wait_group"), std::string::npos)
        << "schedule " << schedule.kind << ": " << error;
  }
}

// A producer thread (warpgroup 1) refills B's stage with other data once the consumer warpgroup
// (0) releases it on `empty`. The consumer releases it after wait_group (right) or before (the
// flaw): the wait_group retires its wgmmas only once the block can do nothing else, so the
// producer has issued the refill by then, and where copies land at issue (adversarial) it has
// landed under the wgmmas: an error. (The kind schedule lands copies no thread waits for after
// the wgmmas retire, the latest moment, so there the flaw goes unseen.)
template <bool ReleaseEarly>
__global__ void refill_kernel(float* out, const __grid_constant__ CUtensorMap ma,
                              const __grid_constant__ CUtensorMap mb,
                              const __grid_constant__ CUtensorMap mb2) {
  unsigned char* smem = kiln_dynamic_smem();
  unsigned char* sa = smem;
  unsigned char* sb = smem + 8192;
  auto* full = reinterpret_cast<unsigned long long*>(smem + 8192 + 16384);
  auto* empty = full + 1;
  const int tid = threadIdx.x;
  if (tid == 0) {
    kiln_mbarrier_init(full, 1);
    kiln_mbarrier_init(empty, 1);
  }
  __syncthreads();
  if (tid == 128) {
    kiln_mbarrier_arrive_expect_tx(full, 8192 + 16384);
    kiln_tma_load_2d(sa, &ma, 0, 0, full);
    kiln_tma_load_2d(sb, &mb, 0, 0, full);
    kiln_mbarrier_wait(empty, 0);
    kiln_mbarrier_arrive_expect_tx(full, 16384);
    kiln_tma_load_2d(sb, &mb2, 0, 0, full);
  }
  if (tid >= 128) return;
  kiln_mbarrier_wait(full, 0);
  float d[64];
  kiln_wgmma_fence();
  for (int k = 0; k < 4; ++k)
    kiln_wgmma_m64n128k16_bf16<0>(d, kiln_gmma_desc_128b(sa + 32 * k, 16, 1024),
                                  kiln_gmma_desc_128b(sb + 32 * k, 16, 1024), k > 0);
  kiln_wgmma_commit();
  if (ReleaseEarly && tid == 0) kiln_mbarrier_arrive(empty);
  kiln_wgmma_wait<0>();
  if (!ReleaseEarly && tid == 0) kiln_mbarrier_arrive(empty);
  kiln_mbarrier_wait(full, 1);
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int v = 0; v < 64; ++v)
    out[(16 * warp + g + 8 * ((v % 4) >> 1)) * 128 + 8 * (v / 4) + 2 * t + (v & 1)] = d[v];
}

TEST(EmulatedWgmma, AStageReleasedBeforeWaitGroupIsRefilledUnderItsWgmmas) {
  WgmmaCase c = make_case(false);
  std::vector<uint16_t> b2(c.b.size());
  for (size_t i = 0; i < b2.size(); ++i) b2[i] = bf16(static_cast<float>(i % 7) - 3.0f);
  CUtensorMap ma = map_2d(c.a.data(), 64, 64, 64, 64);
  CUtensorMap mb = map_2d(c.b.data(), 64, 128, 64, 128);
  CUtensorMap mb2 = map_2d(b2.data(), 64, 128, 64, 128);
  for (LaunchSchedule schedule : k_schedules) {
    for (bool early : {false, true}) {
      std::vector<float> out(64 * 128, -1.0f);
      std::string error = launch(early ? refill_kernel<true> : refill_kernel<false>,
                                 {out.data(), &ma, &mb, &mb2},
                                 {out.size() * 4, sizeof ma, sizeof mb, sizeof mb2}, 1, 256,
                                 8192 + 16384 + 64, schedule, {range(c.a), range(c.b), range(b2)});
      if (early) {
        if (schedule.kind != KILN_EMU_ADVERSARIAL) continue;
        EXPECT_NE(error.find("changed between its issue and the wait_group"), std::string::npos)
            << error;
      } else {
        ASSERT_EQ(error, "") << "schedule " << schedule.kind;
        EXPECT_TRUE(matches(c, out)) << "schedule " << schedule.kind;
      }
    }
  }
}

// Two RS wgmmas (A from registers) reading the same registers, as tf32x3's P x small V and
// P x V do: in one commit group (`one_group`) or two, the second retired by a later wait_group
// (`two_groups`); `write_between`: as two, the registers written after the first group's
// wait_group, while the second still reads them; `write_before_second`: written between the two
// issues, while the first reads them. d1 goes to out[0..), d2 to out[64 * 128..), and
// out[2 * 64 * 128 + tid] is 1 where the thread's registers hold their values again after the
// last wait_group.
enum class SharedA { one_group, two_groups, write_between, write_before_second };

template <SharedA S>
__global__ void shared_a_kernel(float* out, uint16_t* a, uint16_t* b) {
  unsigned char* smem = kiln_dynamic_smem();
  const int tid = threadIdx.x;
  store_plainly(smem, a, b, tid);
  kiln_fence_proxy_async();
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  unsigned regs[4][4];  // k step k's A registers: register r, half h at A(m, 16 k + kk)
  for (int k = 0; k < 4; ++k)
    for (int r = 0; r < 4; ++r) {
      unsigned bits = 0;
      for (int h = 0; h < 2; ++h) {
        int m = 16 * warp + g + 8 * (r & 1), kk = 2 * t + h + 8 * (r >> 1);
        bits |= static_cast<unsigned>(a[m * 64 + 16 * k + kk]) << (16 * h);
      }
      regs[k][r] = bits;
    }
  float d1[64], d2[64];
  kiln_wgmma_fence();
  unsigned want[4][4];
  std::memcpy(want, regs, sizeof want);
  for (int k = 0; k < 4; ++k)
    kiln_wgmma_m64n128k16_bf16_rs<0>(d1, regs[k], kiln_gmma_desc_128b(smem + 8192 + 32 * k, 16, 1024),
                                     k > 0);
  if (S == SharedA::write_before_second) regs[2][1] = 0u;
  if (S != SharedA::one_group) kiln_wgmma_commit();
  for (int k = 0; k < 4; ++k)
    kiln_wgmma_m64n128k16_bf16_rs<0>(d2, regs[k], kiln_gmma_desc_128b(smem + 8192 + 32 * k, 16, 1024),
                                     k > 0);
  kiln_wgmma_commit();
  if (S != SharedA::one_group) {
    kiln_wgmma_wait<1>();
    if (S == SharedA::write_between) regs[2][1] = 0u;
  }
  kiln_wgmma_wait<0>();
  for (int v = 0; v < 64; ++v) {
    int row = 16 * warp + g + 8 * ((v % 4) >> 1), col = 8 * (v / 4) + 2 * t + (v & 1);
    out[row * 128 + col] = d1[v];
    out[64 * 128 + row * 128 + col] = d2[v];
  }
  out[2 * 64 * 128 + tid] = std::memcmp(want, regs, sizeof want) == 0 ? 1.0f : 0.0f;
}

TEST(EmulatedWgmma, RsWgmmasInFlightMayReadTheSameRegistersButNoneMayWriteThem) {
  WgmmaCase c = make_case(false);
  WgmmaCase twice = c;
  twice.want.insert(twice.want.end(), c.want.begin(), c.want.end());
  twice.want.insert(twice.want.end(), 128, 1.0);  // every thread's registers given back
  for (SharedA mode : {SharedA::one_group, SharedA::two_groups, SharedA::write_between,
                       SharedA::write_before_second}) {
    for (LaunchSchedule schedule : k_schedules) {
      std::vector<float> out(2 * 64 * 128 + 128, -1.0f);
      std::vector<uint16_t> a = c.a, b = c.b;
      auto kernel = mode == SharedA::one_group       ? shared_a_kernel<SharedA::one_group>
                    : mode == SharedA::two_groups    ? shared_a_kernel<SharedA::two_groups>
                    : mode == SharedA::write_between ? shared_a_kernel<SharedA::write_between>
                                                     : shared_a_kernel<SharedA::write_before_second>;
      std::string error = launch(kernel, {out.data(), a.data(), b.data()},
                                 {out.size() * 4, a.size() * 2, b.size() * 2}, 1, 128,
                                 8192 + 16384, schedule);
      std::string what = "mode " + std::to_string(static_cast<int>(mode)) + ", schedule " +
                         std::to_string(schedule.kind);
      if (mode == SharedA::write_between || mode == SharedA::write_before_second) {
        EXPECT_NE(error.find("wrote A's registers"), std::string::npos) << what << ": " << error;
        continue;
      }
      ASSERT_EQ(error, "") << what;
      EXPECT_TRUE(matches(twice, out)) << what;
    }
  }
}

TEST(EmulatedWgmma, AWarpgroupReachingWgmmaFromTwoPlacesIsAnError) {
  WgmmaCase c = make_case(false);
  std::vector<float> out;
  std::string error = run_wgmma<0, Flaw::diverge>(c, out);
  EXPECT_NE(error.find("divergent warpgroup"), std::string::npos) << error;
}

__global__ void partial_warpgroup_kernel(float* out) {
  float d[64] = {};
  if (threadIdx.x < 96) kiln_wgmma_fence();
  out[threadIdx.x] = d[0];
}

TEST(EmulatedWgmma, AFenceThatPartOfAWarpgroupSkipsIsADeadlock) {
  std::vector<float> out(128);
  std::string error = launch(partial_warpgroup_kernel, {out.data()}, {out.size() * 4}, 1, 128);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("warpgroup instruction"), std::string::npos) << error;
}

// ---- named barriers -------------------------------------------------------------------------

// Arrives at named barrier `id` from a place of its own (the flaw 5 of named_barrier_kernel).
__attribute__((noinline)) void arrive_elsewhere(unsigned id, unsigned count) {
  kiln_bar_arrive(id, count);
  asm volatile("" ::: "memory");  // not a tail call: the arrival's return address is here
}

// Warp 1 writes a value to shared memory and arrives at named barrier 1 (64 threads); warp 0
// waits there and reads it. `Flaw` 1: only warp 0 reaches the barrier; 2: id 0; 3: a count not a
// multiple of 32; 4: the warps give different counts; 5: half of warp 1 arrives from another
// place in the kernel.
template <int Flaw>
__global__ void named_barrier_kernel(int* out) {
  int* shared = reinterpret_cast<int*>(kiln_dynamic_smem());
  const int tid = threadIdx.x;
  const unsigned id = Flaw == 2 ? 0u : 1u;
  const unsigned count = Flaw == 3 ? 48u : (Flaw == 4 && tid >= 32 ? 32u : 64u);
  if (tid >= 32) {
    shared[tid - 32] = tid * 3;
    if (Flaw == 5 && tid >= 48) {
      arrive_elsewhere(id, count);
    } else if (Flaw != 1) {
      kiln_bar_arrive(id, count);
    }
    asm volatile("" ::: "memory");  // nor these: each call's return address is in this kernel
    return;
  }
  kiln_bar_sync(id, count);
  out[tid] = shared[tid];
}

TEST(EmulatedNamedBarrier, ASyncWaitsForTheArrivalsUnderEverySchedule) {
  for (LaunchSchedule schedule : k_schedules) {
    std::vector<int> out(32, -1);
    ASSERT_EQ(launch(named_barrier_kernel<0>, {out.data()}, {out.size() * 4}, 1, 64, 256, schedule), "");
    for (int i = 0; i < 32; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], (i + 32) * 3) << i;
  }
}

TEST(EmulatedNamedBarrier, MisusesAreErrorsAndAMissingArrivalIsADeadlock) {
  std::vector<int> out(32, -1);
  std::string error = launch(named_barrier_kernel<1>, {out.data()}, {out.size() * 4}, 1, 64, 256);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("wait at named barriers (bar.sync), the first at barrier 1 with 32 of its 64"),
            std::string::npos) << error;
  error = launch(named_barrier_kernel<2>, {out.data()}, {out.size() * 4}, 1, 64, 256);
  EXPECT_NE(error.find("named barriers 1 to 15"), std::string::npos) << error;
  error = launch(named_barrier_kernel<3>, {out.data()}, {out.size() * 4}, 1, 64, 256);
  EXPECT_NE(error.find("multiple of 32"), std::string::npos) << error;
  error = launch(named_barrier_kernel<4>, {out.data()}, {out.size() * 4}, 1, 64, 256);
  EXPECT_NE(error.find("different counts"), std::string::npos) << error;
  for (LaunchSchedule schedule : k_schedules) {
    error = launch(named_barrier_kernel<5>, {out.data()}, {out.size() * 4}, 1, 64, 256, schedule);
    EXPECT_NE(error.find("lanes of one warp reach named barrier 1 at different places"),
              std::string::npos)
        << error;
  }
}

// ---- setmaxnreg -----------------------------------------------------------------------------

// 384 threads hold 168 registers each from launch (64512): the producer warpgroup gives back to
// Dec, the two consumers ask for 240.
template <int Dec>
__global__ void registers_kernel(int* out) {
  if (threadIdx.x < 128) {
    kiln_setmaxnreg_dec<Dec>();
  } else {
    kiln_setmaxnreg_inc<240>();
  }
  out[threadIdx.x] = 1;
}

TEST(EmulatedSetmaxnreg, ConsumersGetTheirRegistersOnlyFromWhatTheProducerGivesBack) {
  for (LaunchSchedule schedule : k_schedules) {
    std::vector<int> out(384, 0);
    // 128 x 24 + 256 x 240 = 64512: the consumers fit once the producer has given back.
    EXPECT_EQ(launch(registers_kernel<24>, {out.data()}, {out.size() * 4}, 1, 384, 0, schedule), "");
    EXPECT_EQ(out[383], 1);
    // 128 x 32 + 256 x 240 = 65536, over the block's 64512: a hang on hardware.
    std::string error = launch(registers_kernel<32>, {out.data()}, {out.size() * 4}, 1, 384, 0, schedule);
    EXPECT_NE(error.find("wait in setmaxnreg.inc for registers"), std::string::npos) << error;
  }
}

__global__ void inc_below_kernel(int* out) {
  kiln_setmaxnreg_inc<128>();
  out[threadIdx.x] = 1;
}

TEST(EmulatedSetmaxnreg, AnIncBelowTheWarpgroupsCountIsAnError) {
  std::vector<int> out(384, 0);
  std::string error = launch(inc_below_kernel, {out.data()}, {out.size() * 4}, 1, 384);
  EXPECT_NE(error.find("setmaxnreg.inc 128: the warpgroup holds 168"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln::emulation
