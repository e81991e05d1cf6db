// Host execution model of CUDA for kiln's emulator: blocks of threads as fibers, barriers, warps.
//
// Compiled into every emulated program (and into tests directly). The threads of one block run
// as cooperative fibers (kiln_emu_fiber.h, kiln_emu_launch.h) on the calling OS thread; a thread
// runs until it reaches __syncthreads, a warp-collective primitive, or its end. A
// warp-collective call records each lane's operands and suspends the lane; the last lane of the
// warp to arrive computes every lane's result and wakes the others. Blocks run one after another.
// When no thread can run but some have not finished (a barrier or collective that not every
// thread reaches) the launch fails with a description instead of hanging. Errors found inside a
// kernel (bad shared-memory address, divergent collective, memory fault) stop the launch; the
// message names the block and thread.
#ifndef KILN_EMU_RUNTIME_H
#define KILN_EMU_RUNTIME_H

#include "kiln_emu_abi.h"
#include "kiln_emu_fiber.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#ifndef KILN_EMU_SM
#define KILN_EMU_SM 90
#endif

// KILN_EMU_ENTRY(type, name, (params)) { body } defines one of the shim's entry points that
// kernels call (barriers, warp collectives, mma, cp.async, mbarriers, TMA, wgmma, setmaxnreg):
// with what they call, they are most of the code a module compiles. A module built whole (one
// translation unit) has them inline. Against a cached shim (emulation/module.cpp) they are
// compiled once, out of line, into the entry's shim.o (KILN_EMU_SHIM_OBJECT), and the kernels
// see declarations (KILN_EMU_KERNELS_ONLY): the body becomes that of a function template never
// instantiated, so it is still parsed and checked but generates no code.
#if defined(KILN_EMU_KERNELS_ONLY)
#define KILN_EMU_ENTRY(type, name, params) \
  type name params;                        \
  template <int>                           \
  type kiln_emu_unused_##name params
#elif defined(KILN_EMU_SHIM_OBJECT)
#define KILN_EMU_ENTRY(type, name, params) type name params
#else
#define KILN_EMU_ENTRY(type, name, params) inline type name params
#endif

namespace kiln_emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

enum class Wait : uint8_t { none, barrier, named, warp, mbarrier, warpgroup, registers, wgmma, done };
enum class Collective : uint8_t { none, shfl, syncwarp, ballot, ldmatrix, mma };

inline const char* collective_name(Collective c) {
  switch (c) {
    case Collective::shfl: return "a warp shuffle";
    case Collective::syncwarp: return "__syncwarp";
    case Collective::ballot: return "a warp vote";
    case Collective::ldmatrix: return "ldmatrix";
    case Collective::mma: return "mma.sync";
    default: return "nothing";
  }
}

// One deferred cp.async copy: `size` bytes at dst, the first src_bytes from src, the rest zero.
struct CpCopy {
  unsigned char* dst;
  const unsigned char* src;
  int size;
  int src_bytes;
};

// What one lane handed to a warp collective, and what it gets back.
struct LaneSlot {
  Collective op = Collective::none;
  int variant = 0;      // shuffle kind, ldmatrix count/trans, mma shape
  uint32_t mask = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  uint64_t value = 0;
  int arg = 0;
  int width = 32;
  uint64_t result = 0;
  // .aligned instructions (ldmatrix, mma.sync): where in the kernel this lane executes it. Every
  // lane of the warp must execute the same instruction, not the same one written twice.
  const void* site = nullptr;
};

// An mbarrier object in shared memory, modelled by its state rather than its 8 bytes (PTX ISA,
// "Parallel synchronization and communication instructions: mbarrier"): the arrivals a phase
// expects and still awaits, the transaction bytes still to complete (which may go negative when a
// copy completes before its expect_tx), and the phase. A phase completes when no arrival and no
// byte is pending; the next then awaits the expected arrivals again.
struct MBarrier {
  size_t offset = 0;  // in the block's dynamic shared memory
  uint32_t expected = 0, pending = 0;
  int64_t tx = 0;
  uint32_t phase = 0;
};

// One TMA copy (cp.async.bulk.tensor) in flight: the box's bytes, already read from global
// memory and laid out (swizzled) as they land at shared-memory offset `dst`, and the mbarrier
// whose transaction count they complete. It lands (kiln_emu_hopper.h) at issue (adversarial), when
// no thread can run otherwise (kind: the latest moment), or at a random point between (seeded).
struct TmaCopy {
  size_t dst = 0;
  std::vector<unsigned char> bytes;
  size_t bar = 0;
};

// One wgmma.mma_async of a warpgroup, issued and not yet performed: its operands are read from
// shared memory (as the async proxy sees it) when it is performed, at the wait_group that retires
// it. Until the last wgmma on them retires, each thread's accumulator registers hold a poison
// value, and their true contents live in the warpgroup's `acc` (kiln_emu_hopper.h).
struct WgmmaOp {
  uint64_t desc_a = 0, desc_b = 0;
  int n = 0;
  bool bf16 = false, trans_a = false, trans_b = false, scale_d = true;
  bool tf32 = false;  // m64nNk8 on fp32 operands (read as tf32), else m64nNk16 on 16-bit ones
  // A (64 x 16) and B (N x 16) as read at issue, and the shared-memory bytes they were read
  // from, which must be the same when the wgmma retires
  std::vector<float> a_vals, b_vals;
  std::string seen;
  float* d[128] = {};
  // A from registers (the RS form): each thread's four registers as they were at issue (at the
  // first issue of the wgmmas in flight that read them), and where they live (poisoned from that
  // issue until the wait_group that retires the last of those wgmmas)
  bool a_regs = false;
  uint32_t a[128][4] = {};
  uint32_t* a_at[128] = {};
};

// A warpgroup's wgmma state: collectives in progress (.sync.aligned over its 128 threads), the
// wgmmas issued since its last commit, and the committed groups not yet retired.
struct WarpGroup {
  int arrived = 0;
  int op = 0;  // kiln_emu_hopper.h's WgOp
  const void* site = nullptr;
  uint64_t desc_a = 0, desc_b = 0;
  int n = 0, variant = 0;
  float* d[128] = {};
  uint32_t* a[128] = {};  // RS form: each thread's A registers
  int scale_d[128] = {};
  std::vector<WgmmaOp> open;
  std::deque<std::vector<WgmmaOp>> groups;
  // Accumulator registers some wgmma in flight writes (by each thread's own address): their
  // contents as the wgmmas performed so far leave them; written back at the wait_group that
  // retires the last wgmma on them.
  std::map<float*, std::vector<float>> acc;
  bool fenced[128] = {};  // wgmma.fence since the last wait_group (or the start)
  // Registers a thread's wgmmas have used: RS A registers and accumulators, each as the next
  // wgmma would read it (kiln_emu_hopper.h's registers_as_read) at the thread's last
  // wgmma.fence. A wgmma that finds them otherwise uses registers the program wrote after that
  // fence, which the fence must come after.
  struct FencedRegisters {
    void* at = nullptr;
    bool a = false;  // RS A (4 registers), else accumulators
    size_t words = 0;
    std::vector<uint32_t> held;
    bool snapped = false;  // `held` was taken at a wgmma.fence
  };
  std::vector<FencedRegisters> fenced_registers[128];
  // A wait_group that retires groups: the groups it leaves in flight (-1: none is retiring), and
  // whether the block has let it retire them (when no thread could run otherwise)
  int retire_to = -1;
  bool retire_now = false;
  int registers = 0;      // per thread, as setmaxnreg last left it (0: as launched)
};

struct Thread {
  Context context;
  Dim3 tid;
  int linear = 0, lane = 0, warp = 0;
  Wait wait = Wait::none;
  size_t waits_on = 0;      // Wait::mbarrier: the barrier's offset; Wait::named: its id
  uint32_t wait_parity = 0;  // and the parity of the phase it waits to complete
  std::vector<CpCopy> open_group;
  std::deque<std::vector<CpCopy>> groups;
  unsigned char* stack = nullptr;
};

struct Warp {
  uint32_t present = 0;  // lanes that exist in this block
  uint32_t arrived = 0;
  Collective op = Collective::none;
  int variant = 0;
  uint32_t mask = 0;
  const void* site = nullptr;
  LaneSlot slots[32];
};

struct Block {
  Context scheduler;
  uint32_t schedule = KILN_EMU_KIND;
  uint64_t rng = 0;  // KILN_EMU_SEEDED: the block's random state
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  Dim3 block_idx, block_dim, grid_dim;
  unsigned char* smem = nullptr;
  size_t smem_bytes = 0;
  int barrier_arrived = 0;
  // bar.sync / bar.arrive: each named barrier's arrivals in its current phase and the count the
  // first of them gave
  struct Named {
    int arrived = 0;
    int count = 0;
    // Where each warp's lanes reach the barrier this phase (bar.sync and bar.arrive are
    // .aligned: a warp's lanes execute one instruction); empty between phases.
    std::vector<const void*> sites;
  } named[16];
  std::vector<MBarrier> mbarriers;  // those initialised in this block, by offset
  // sm_90: shared memory as the async proxy (wgmma, TMA) sees it: TMA writes both views; generic
  // writes reach this one at a fence.proxy.async. Empty until the block first uses the async
  // proxy, when it is created as the block's shared memory started (every byte 0xff).
  std::vector<unsigned char> async_view;
  std::vector<TmaCopy> tma;             // in flight, oldest first
  std::vector<WarpGroup> warpgroups;
  bool failed = false;
  std::string error;
  char fault[200] = {};  // set by the fault handler, which must not allocate
  const KilnEmuLaunch* launch = nullptr;
};

inline thread_local Block* t_block = nullptr;
inline thread_local Thread* t_thread = nullptr;
inline const KilnEmuApi* g_api = nullptr;

inline constexpr size_t k_stack_bytes = size_t{128} << 10;
inline constexpr size_t k_guard_bytes = size_t{4} << 10;

// The next of the block's random numbers (splitmix64).
inline uint64_t next_random(Block& b) {
  uint64_t z = (b.rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline void yield() {
  Thread* self = t_thread;
  switch_context(self->context, t_block->scheduler);
  asm volatile("" ::: "memory");
}

// Stops the launch with `message`, naming the current block and thread; does not return.
[[noreturn]] inline void fail(const std::string& message) {
  Block* b = t_block;
  if (!b->failed) {
    b->failed = true;
    char where[160];
    std::snprintf(where, sizeof where, "block (%u, %u, %u) thread (%u, %u, %u): ", b->block_idx.x,
                  b->block_idx.y, b->block_idx.z, t_thread->tid.x, t_thread->tid.y,
                  t_thread->tid.z);
    b->error = where + message;
  }
  t_thread->wait = Wait::done;
  for (;;) switch_context(t_thread->context, b->scheduler);
}

inline const KilnEmuApi& api() {
  if (!g_api) fail("the emulator's rounding functions were not installed");
  return *g_api;
}

inline void require_sm(int sm, const char* what) {
  if (KILN_EMU_SM < sm) {
    char text[160];
    std::snprintf(text, sizeof text, "%s needs sm_%d or newer, but the program targets sm_%d", what,
                  sm, KILN_EMU_SM);
    fail(text);
  }
}

// Checks that [p, p + bytes) lies in the block's dynamic shared memory and is `align`-aligned.
inline void check_smem(const void* p, size_t bytes, size_t align, const char* what) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  Block* b = t_block;
  if (c < b->smem || c + bytes > b->smem + b->smem_bytes) {
    char text[200];
    std::snprintf(text, sizeof text, "%s: address %p (%zu bytes) is outside the %zu bytes of "
                  "dynamic shared memory", what, p, bytes, b->smem_bytes);
    fail(text);
  }
  if ((static_cast<size_t>(c - b->smem)) % align != 0) {
    char text[256];
    std::snprintf(text, sizeof text, "%s: shared-memory offset %zu is not %zu-byte aligned", what,
                  static_cast<size_t>(c - b->smem), align);
    fail(text);
  }
}

// Checks that [p, p + bytes) lies in one of the launch's global buffers and is aligned.
inline void check_global(const void* p, size_t bytes, size_t align, const char* what) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  const KilnEmuLaunch* l = t_block->launch;
  bool inside = false;
  for (size_t i = 0; i < l->range_count && !inside; ++i) {
    const unsigned char* begin = static_cast<const unsigned char*>(l->ranges[i].begin);
    const unsigned char* end = static_cast<const unsigned char*>(l->ranges[i].end);
    inside = c >= begin && c + bytes <= end;
  }
  if (!inside) {
    char text[160];
    std::snprintf(text, sizeof text, "%s: global address %p (%zu bytes) is outside every buffer",
                  what, p, bytes);
    fail(text);
  }
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    char text[160];
    std::snprintf(text, sizeof text, "%s: global address %p is not %zu-byte aligned", what, p,
                  align);
    fail(text);
  }
}

// __syncthreads: every thread of the block must arrive (an exited thread never does).
KILN_EMU_ENTRY(void, barrier, ()) {
  asm volatile("" ::: "memory");
  Block* b = t_block;
  if (++b->barrier_arrived == static_cast<int>(b->threads.size())) {
    b->barrier_arrived = 0;
    for (Thread& t : b->threads)
      if (t.wait == Wait::barrier) t.wait = Wait::none;
    return;
  }
  t_thread->wait = Wait::barrier;
  yield();
}

// bar.sync (wait) or bar.arrive on named barrier `id` of `count` threads at `site` (where in
// the kernel): the phase completes at the count-th arrival, which releases the threads waiting
// at it. Ids 1 to 15 (0 is __syncthreads'), a count of whole warps no larger than the block, one
// count a phase, and a warp's lanes from one place (the instructions are .aligned).
inline void named_barrier(unsigned id, unsigned count, bool wait, const void* site) {
  asm volatile("" ::: "memory");
  Block* b = t_block;
  const char* what = wait ? "bar.sync" : "bar.arrive";
  if (id < 1 || id > 15)
    fail(std::string(what) + ": the emulator models named barriers 1 to 15 (0 is __syncthreads')");
  if (count == 0 || count % 32 != 0 || count > b->threads.size())
    fail(std::string(what) + ": the thread count must be a multiple of 32 up to the block's threads");
  Block::Named& n = b->named[id];
  if (n.arrived == 0) {
    n.count = static_cast<int>(count);
  } else if (n.count != static_cast<int>(count)) {
    fail(std::string(what) + ": threads arrive at one named barrier with different counts");
  }
  size_t warp = static_cast<size_t>(t_thread->warp);
  if (n.sites.size() <= warp) n.sites.resize(warp + 1, nullptr);
  if (!n.sites[warp]) {
    n.sites[warp] = site;
  } else if (n.sites[warp] != site) {
    fail(std::string(what) + ": lanes of one warp reach named barrier " + std::to_string(id) +
         " at different places in the kernel (bar.sync and bar.arrive are .aligned: every lane "
         "of a warp must execute the same instruction)");
  }
  if (++n.arrived == n.count) {
    n.arrived = 0;
    n.sites.clear();
    for (Thread& t : b->threads)
      if (t.wait == Wait::named && t.waits_on == id) t.wait = Wait::none;
    return;
  }
  if (!wait) return;
  t_thread->wait = Wait::named;
  t_thread->waits_on = id;
  yield();
  asm volatile("" ::: "memory");
}

inline void complete_collective(Warp& warp);

// Enters a warp collective with this lane's slot filled in; returns once every lane of `mask` has
// arrived and the results are in place.
KILN_EMU_ENTRY(LaneSlot&, collective, (const LaneSlot& mine)) {
  asm volatile("" ::: "memory");
  Thread* self = t_thread;
  Warp& warp = t_block->warps[static_cast<size_t>(self->warp)];
  uint32_t bit = 1u << self->lane;
  if (!(mine.mask & bit)) fail(std::string(collective_name(mine.op)) + " with a mask that excludes the calling lane");
  if ((mine.mask & warp.present) != mine.mask)
    fail(std::string(collective_name(mine.op)) + " names lanes that do not exist (the block's last warp is partial)");
  if (warp.arrived == 0) {
    warp.op = mine.op;
    warp.variant = mine.variant;
    warp.mask = mine.mask;
    warp.site = mine.site;
  } else if (warp.op != mine.op || warp.variant != mine.variant || warp.mask != mine.mask) {
    fail(std::string("divergent warp collective: this lane reached ") + collective_name(mine.op) +
         " while other lanes of its warp wait at " + collective_name(warp.op) +
         (warp.op == mine.op ? " of another kind or mask" : ""));
  } else if (warp.site != mine.site) {
    fail(std::string("divergent warp collective: this lane reached ") + collective_name(mine.op) +
         " at another place in the kernel than the other lanes of its warp (an .aligned "
         "instruction must be executed by every lane at the same place)");
  }
  warp.slots[self->lane] = mine;
  warp.arrived |= bit;
  if (warp.arrived == warp.mask) {
    complete_collective(warp);
    warp.arrived = 0;
    warp.op = Collective::none;
    for (int lane = 0; lane < 32; ++lane) {
      if (!(warp.mask & (1u << lane))) continue;
      Thread& t = t_block->threads[static_cast<size_t>(self->warp * 32 + lane)];
      if (t.wait == Wait::warp) t.wait = Wait::none;
    }
  } else {
    self->wait = Wait::warp;
    yield();
  }
  asm volatile("" ::: "memory");
  return warp.slots[self->lane];
}

// ---- cp.async ------------------------------------------------------------------------------

inline void perform(const CpCopy& c) {
  if (c.src_bytes > 0) std::memcpy(c.dst, c.src, static_cast<size_t>(c.src_bytes));
  if (c.size > c.src_bytes) std::memset(c.dst + c.src_bytes, 0, static_cast<size_t>(c.size - c.src_bytes));
}

// Issues a copy. A copy may land at any moment between its issue and the wait that retires its
// group; where, the schedule says: at the wait (kind: a missing wait shows up as stale shared
// memory), at issue (adversarial: a copy into a buffer other threads still read shows up as
// changed data), or at a random one of those moments (seeded; see land_some_copy).
KILN_EMU_ENTRY(void, cp_async, (void* dst, const void* src, int size, int src_bytes)) {
  require_sm(80, "cp.async");
  if (src_bytes < 0 || src_bytes > size) fail("cp.async: source size out of range");
  check_smem(dst, static_cast<size_t>(size), static_cast<size_t>(size), "cp.async destination");
  if (src_bytes > 0) check_global(src, static_cast<size_t>(src_bytes), static_cast<size_t>(size), "cp.async source");
  CpCopy copy{static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), size,
              src_bytes};
  Block& b = *t_block;
  if (b.schedule == KILN_EMU_ADVERSARIAL ||
      (b.schedule == KILN_EMU_SEEDED && next_random(b) % 4 == 0)) {
    perform(copy);
    return;
  }
  t_thread->open_group.push_back(copy);
}

// Seeded schedules, between two threads' turns: lands the oldest copy still in flight of one
// thread drawn at random, one time in four.
inline void land_some_copy(Block& b) {
  if (next_random(b) % 4 != 0) return;
  Thread& t = b.threads[next_random(b) % b.threads.size()];
  while (!t.groups.empty() && t.groups.front().empty()) t.groups.pop_front();
  std::vector<CpCopy>& oldest = t.groups.empty() ? t.open_group : t.groups.front();
  if (oldest.empty()) return;
  perform(oldest.front());
  oldest.erase(oldest.begin());
}

KILN_EMU_ENTRY(void, cp_async_commit, ()) {
  require_sm(80, "cp.async.commit_group");
  t_thread->groups.push_back(std::move(t_thread->open_group));
  t_thread->open_group.clear();
}

KILN_EMU_ENTRY(void, cp_async_wait, (int pending)) {
  require_sm(80, "cp.async.wait_group");
  Thread* self = t_thread;
  while (static_cast<int>(self->groups.size()) > pending) {
    for (const CpCopy& c : self->groups.front()) perform(c);
    self->groups.pop_front();
  }
}

// ---- mbarrier ---------------------------------------------------------------------------------

// The initialised mbarrier at `bar`; fails naming `what` when there is none.
inline MBarrier& mbarrier_at(const void* bar, const char* what) {
  check_smem(bar, 8, 8, what);
  Block& b = *t_block;
  size_t offset = static_cast<size_t>(static_cast<const unsigned char*>(bar) - b.smem);
  for (MBarrier& m : b.mbarriers)
    if (m.offset == offset) return m;
  char text[160];
  std::snprintf(text, sizeof text, "%s: no mbarrier was initialised at shared-memory offset %zu",
                what, offset);
  fail(text);
}

// mbarrier.init: `count` arrivals a phase (1 to 2^20 - 1), no bytes pending, phase 0.
KILN_EMU_ENTRY(void, mbarrier_init, (void* bar, unsigned count)) {
  require_sm(80, "mbarrier.init");
  check_smem(bar, 8, 8, "mbarrier.init");
  if (count < 1 || count > (1u << 20) - 1) fail("mbarrier.init: the count must be 1 to 2^20 - 1");
  Block& b = *t_block;
  size_t offset = static_cast<size_t>(static_cast<unsigned char*>(bar) - b.smem);
  for (MBarrier& m : b.mbarriers)
    if (m.offset == offset) {
      for (const Thread& t : b.threads)
        if (t.wait == Wait::mbarrier && t.waits_on == offset)
          fail("mbarrier.init: the mbarrier is initialised again while threads wait on it");
      m = MBarrier{offset, count, count, 0, 0};
      return;
    }
  b.mbarriers.push_back(MBarrier{offset, count, count, 0, 0});
}

// Completes the phase when nothing is pending, waking the threads that wait for it.
inline void mbarrier_settle(MBarrier& m) {
  if (m.pending != 0 || m.tx != 0) return;
  for (Thread& t : t_block->threads)
    if (t.wait == Wait::mbarrier && t.waits_on == m.offset && t.wait_parity == (m.phase & 1u))
      t.wait = Wait::none;
  ++m.phase;
  m.pending = m.expected;
}

// mbarrier.arrive (with expect_tx: `bytes` more transaction bytes to wait for, before arriving).
KILN_EMU_ENTRY(void, mbarrier_arrive, (void* bar, unsigned bytes = 0)) {
  require_sm(bytes ? 90 : 80, bytes ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive");
  MBarrier& m = mbarrier_at(bar, "mbarrier.arrive");
  if (bytes > (1u << 20) - 1) fail("mbarrier.arrive.expect_tx: more than 2^20 - 1 bytes");
  m.tx += bytes;
  if (m.pending == 0) fail("mbarrier.arrive: the phase has had all the arrivals it expects");
  --m.pending;
  mbarrier_settle(m);
}

// mbarrier.expect_tx without arriving.
inline void mbarrier_expect_tx(void* bar, unsigned bytes) {
  require_sm(90, "mbarrier.expect_tx");
  MBarrier& m = mbarrier_at(bar, "mbarrier.expect_tx");
  if (bytes > (1u << 20) - 1) fail("mbarrier.expect_tx: more than 2^20 - 1 bytes");
  m.tx += bytes;
}

// What an asynchronous copy signals as it lands (cp.async.bulk's complete_tx): `bytes` done.
inline void mbarrier_complete_tx(void* bar, unsigned bytes) {
  MBarrier& m = mbarrier_at(bar, "complete_tx");
  m.tx -= bytes;
  if (m.tx < -((int64_t{1} << 20) - 1)) fail("complete_tx: the transaction count underflows");
  mbarrier_settle(m);
}

// mbarrier.try_wait.parity: whether the phase of parity `parity` has completed.
inline bool mbarrier_try_wait_parity(void* bar, unsigned parity) {
  require_sm(90, "mbarrier.try_wait.parity");
  if (parity > 1) fail("mbarrier.try_wait.parity: the parity must be 0 or 1");
  return (mbarrier_at(bar, "mbarrier.try_wait.parity").phase & 1u) != parity;
}

// Waits (the try_wait loop kernels write) until the phase of parity `parity` completes; a wait
// no arrival can end is reported as a deadlock.
KILN_EMU_ENTRY(void, mbarrier_wait_parity, (void* bar, unsigned parity)) {
  asm volatile("" ::: "memory");
  while (!mbarrier_try_wait_parity(bar, parity)) {
    t_thread->wait = Wait::mbarrier;
    t_thread->waits_on = static_cast<size_t>(static_cast<unsigned char*>(bar) - t_block->smem);
    t_thread->wait_parity = parity;
    yield();
  }
  asm volatile("" ::: "memory");
}

}  // namespace kiln_emu

#endif  // KILN_EMU_RUNTIME_H
