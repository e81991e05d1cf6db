// The shim's mbarrier model (PTX ISA, mbarrier): arrivals and transaction bytes complete a phase,
// waiters name it by parity, a wait nothing can end is a deadlock, and misuse is an error naming
// what. A producer warp and a consumer warp pass data through a two-stage ring as the sm_90a
// kernels will, under every schedule; without its waits, the consumer reads unwritten memory.
#include "emu_test_util.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::emulation {
namespace {

using testing::launch;
using testing::LaunchSchedule;


// Shared memory: full[2], empty[2] (8 bytes each), then two stages of 32 ints. Warp 0 produces
// round r into stage r % 2 once that stage is empty; warp 1 waits for it to be full, adds it to
// its sums and hands it back. With `Waits` false the consumer does not wait for "full".
template <bool Waits, int Rounds>
__global__ void ring_kernel(int* out) {
  unsigned char* smem = kiln_dynamic_smem();
  auto* full = reinterpret_cast<unsigned long long*>(smem);
  auto* empty = full + 2;
  int* stage = reinterpret_cast<int*>(smem + 32);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      kiln_mbarrier_init(&full[s], 32);   // every producer lane arrives
      kiln_mbarrier_init(&empty[s], 32);  // every consumer lane arrives
    }
  }
  __syncthreads();
  int sum = 0;
  for (int r = 0; r < Rounds; ++r) {
    int s = r % 2;
    unsigned parity = (r / 2) & 1;
    if (warp == 0) {
      if (r >= 2) kiln_mbarrier_wait(&empty[s], parity ^ 1u);
      stage[s * 32 + lane] = 100 * r + lane;
      kiln_mbarrier_arrive(&full[s]);
    } else {
      if (Waits) kiln_mbarrier_wait(&full[s], parity);
      sum += stage[s * 32 + lane];
      kiln_mbarrier_arrive(&empty[s]);
    }
  }
  if (warp == 1) out[lane] = sum;
}

int expected_sum(int lane, int rounds) {
  int sum = 0;
  for (int r = 0; r < rounds; ++r) sum += 100 * r + lane;
  return sum;
}

TEST(EmulatedMbarrier, AProducerAndAConsumerShareARingUnderEverySchedule) {
  for (LaunchSchedule schedule : {LaunchSchedule{KILN_EMU_KIND}, LaunchSchedule{KILN_EMU_ADVERSARIAL},
                                  LaunchSchedule{KILN_EMU_SEEDED, 1}, LaunchSchedule{KILN_EMU_SEEDED, 7}}) {
    std::vector<int> out(32, -1);
    // Three times round the two-stage ring.
    ASSERT_EQ(launch(ring_kernel<true, 6>, {out.data()}, {out.size() * 4}, 2, 64, 32 + 2 * 32 * 4,
                     schedule),
              "")
        << schedule.kind;
    for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(out[lane], expected_sum(lane, 6)) << lane;
  }
}

TEST(EmulatedMbarrier, AConsumerThatDoesNotWaitReadsUnwrittenMemory) {
  // The kind schedule runs the consumer first after the barrier: the last thread to reach it is
  // the block's last, and the next sweep runs the threads in reverse. Two rounds: once round the
  // ring, so the producer never waits on the hand-back the consumer gives too early.
  std::vector<int> out(32, -1);
  ASSERT_EQ(launch(ring_kernel<false, 2>, {out.data()}, {out.size() * 4}, 1, 64, 32 + 2 * 32 * 4,
                   {KILN_EMU_KIND}),
            "");
  int wrong = 0;
  for (int lane = 0; lane < 32; ++lane) wrong += out[lane] != expected_sum(lane, 2);
  EXPECT_EQ(wrong, 32);
  // With the waits, the same schedule gets every sum right.
  ASSERT_EQ(launch(ring_kernel<true, 2>, {out.data()}, {out.size() * 4}, 1, 64, 32 + 2 * 32 * 4,
                   {KILN_EMU_KIND}),
            "");
  for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(out[lane], expected_sum(lane, 2));
}

// A phase with transaction bytes completes only when they have landed as well as every arrival.
__global__ void tx_kernel(int* out) {
  auto* bar = reinterpret_cast<unsigned long long*>(kiln_dynamic_smem());
  if (threadIdx.x == 0) kiln_mbarrier_init(bar, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    kiln_mbarrier_arrive_expect_tx(bar, 256);
    out[0] = ::kiln_emu::mbarrier_try_wait_parity(bar, 0);  // 256 bytes still pending
    ::kiln_emu::mbarrier_complete_tx(bar, 128);
    out[1] = ::kiln_emu::mbarrier_try_wait_parity(bar, 0);
    ::kiln_emu::mbarrier_complete_tx(bar, 128);
    out[2] = ::kiln_emu::mbarrier_try_wait_parity(bar, 0);  // phase 0 complete
    out[3] = ::kiln_emu::mbarrier_try_wait_parity(bar, 1);  // phase 1 is not
    // Bytes that land before they are expected: the count goes negative, the phase waits for
    // the arrival that expects them.
    ::kiln_emu::mbarrier_complete_tx(bar, 64);
    out[4] = ::kiln_emu::mbarrier_try_wait_parity(bar, 1);
    kiln_mbarrier_arrive_expect_tx(bar, 64);
    out[5] = ::kiln_emu::mbarrier_try_wait_parity(bar, 1);
  }
}

TEST(EmulatedMbarrier, TransactionBytesAndArrivalsBothCompleteAPhase) {
  std::vector<int> out(6, -1);
  ASSERT_EQ(launch(tx_kernel, {out.data()}, {out.size() * 4}, 1, 32, 64), "");
  EXPECT_EQ(out, (std::vector<int>{0, 0, 1, 0, 0, 1}));
}

// Waits on the second phase of a barrier whose first never completes: only 31 of 32 arrive.
__global__ void starved_kernel(int* out) {
  auto* bar = reinterpret_cast<unsigned long long*>(kiln_dynamic_smem());
  if (threadIdx.x == 0) kiln_mbarrier_init(bar, 32);
  __syncthreads();
  if (threadIdx.x != 7) kiln_mbarrier_arrive(bar);
  kiln_mbarrier_wait(bar, 0);
  out[threadIdx.x] = 1;
}

TEST(EmulatedMbarrier, AWaitNoArrivalCanEndIsADeadlockNotAHang) {
  std::vector<int> out(32);
  std::string error = launch(starved_kernel, {out.data()}, {out.size() * 4}, 1, 32, 64);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("32 thread(s) wait on mbarriers, the first at shared-memory offset 0 in "
                       "phase 0 with 1 of 32 arrivals and 0 transaction bytes pending"),
            std::string::npos)
      << error;
}

template <int Misuse>
__global__ void misuse_kernel(int*) {
  auto* bar = reinterpret_cast<unsigned long long*>(kiln_dynamic_smem());
  if (Misuse == 0) kiln_mbarrier_arrive(bar + 1);  // never initialised
  if (Misuse == 1) {
    kiln_mbarrier_init(bar, 1);
    ::kiln_emu::mbarrier_expect_tx(bar, 16);
    kiln_mbarrier_arrive(bar);
    kiln_mbarrier_arrive(bar);  // the phase still waits for its bytes: one arrival too many
  }
  if (Misuse == 2) kiln_mbarrier_init(reinterpret_cast<unsigned long long*>(
                       kiln_dynamic_smem() + 4), 1);  // misaligned
  if (Misuse == 3) kiln_mbarrier_init(bar, 0);
  if (Misuse == 4) kiln_mbarrier_init(bar + 64, 1);  // past the shared memory
}

TEST(EmulatedMbarrier, MisuseIsAnErrorNamingWhat) {
  std::vector<int> out(1);
  auto run = [&](auto kernel) { return launch(kernel, {out.data()}, {4}, 1, 1, 64); };
  struct Case {
    std::string error;
    const char* says;
  };
  for (const Case& c : {Case{run(misuse_kernel<0>), "mbarrier.arrive: no mbarrier was initialised "
                                                    "at shared-memory offset 8"},
                        Case{run(misuse_kernel<1>), "the phase has had all the arrivals it expects"},
                        Case{run(misuse_kernel<2>), "not 8-byte aligned"},
                        Case{run(misuse_kernel<3>), "the count must be 1 to 2^20 - 1"},
                        Case{run(misuse_kernel<4>), "outside the 64 bytes of dynamic shared memory"}}) {
    EXPECT_NE(c.error.find(c.says), std::string::npos) << c.error;
    EXPECT_NE(c.error.find("block (0, 0, 0) thread (0, 0, 0)"), std::string::npos) << c.error;
  }
}

}  // namespace
}  // namespace kiln::emulation
