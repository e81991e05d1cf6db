// Launching a kernel under kiln's emulator: fibers for the threads of a block, the scheduler
// that runs them, deadlock reports, memory faults turned into errors, blocks in grid order.
#ifndef KILN_EMU_LAUNCH_H
#define KILN_EMU_LAUNCH_H

#include "kiln_emu_hopper.h"

#include <signal.h>
#include <sys/mman.h>

namespace kiln_emu {

inline void fiber_entry() {
  Block* b = t_block;
  b->launch->thunk(b->launch->args);
  Thread* self = t_thread;
  // Copies still in flight land before the thread is gone (their shared memory dies with it).
  for (const auto& group : self->groups)
    for (const CpCopy& c : group) perform(c);
  for (const CpCopy& c : self->open_group) perform(c);
  self->groups.clear();
  self->open_group.clear();
  self->wait = Wait::done;
  switch_context(self->context, b->scheduler);
  for (;;) std::abort();
}

inline std::string describe_deadlock(const Block& b) {
  int at_barrier = 0, at_named = 0, at_warp = 0, at_mbarrier = 0, at_warpgroup = 0, at_registers = 0,
      done = 0;
  size_t named_id = 0;
  Collective op = Collective::none;
  const MBarrier* waited = nullptr;
  for (const Thread& t : b.threads) {
    if (t.wait == Wait::barrier) ++at_barrier;
    if (t.wait == Wait::done) ++done;
    if (t.wait == Wait::warpgroup) ++at_warpgroup;
    if (t.wait == Wait::registers) ++at_registers;
    if (t.wait == Wait::named && at_named++ == 0) named_id = t.waits_on;
    if (t.wait == Wait::mbarrier) {
      ++at_mbarrier;
      for (const MBarrier& m : b.mbarriers)
        if (m.offset == t.waits_on && !waited) waited = &m;
    }
    if (t.wait == Wait::warp) {
      ++at_warp;
      op = b.warps[static_cast<size_t>(t.warp)].op;
    }
  }
  char text[300];
  std::snprintf(text, sizeof text,
                "block (%u, %u, %u): deadlock: %d thread(s) wait at __syncthreads, %d at a warp "
                "collective%s%s%s, %d have exited (a barrier or collective that not every thread "
                "reaches)",
                b.block_idx.x, b.block_idx.y, b.block_idx.z, at_barrier, at_warp,
                at_warp ? " (" : "", at_warp ? collective_name(op) : "", at_warp ? ")" : "", done);
  std::string out = text;
  if (at_warpgroup) {
    std::snprintf(text, sizeof text, "; %d thread(s) wait at a warpgroup instruction (wgmma, "
                  "setmaxnreg) that not all 128 threads of their warpgroup reach", at_warpgroup);
    out += text;
  }
  if (at_named) {
    std::snprintf(text, sizeof text, "; %d thread(s) wait at named barriers (bar.sync), the first "
                  "at barrier %zu with %d of its %d arrivals", at_named, named_id,
                  b.named[named_id].arrived, b.named[named_id].count);
    out += text;
  }
  if (at_registers) {
    std::snprintf(text, sizeof text, "; %d thread(s) wait in setmaxnreg.inc for registers that no "
                  "warpgroup frees (the block holds %d a thread from launch)", at_registers,
                  launch_registers(b));
    out += text;
  }
  if (waited) {
    std::snprintf(text, sizeof text,
                  "; %d thread(s) wait on mbarriers, the first at shared-memory offset %zu in "
                  "phase %u with %u of %u arrivals and %lld transaction bytes pending",
                  at_mbarrier, waited->offset, waited->phase, waited->pending, waited->expected,
                  static_cast<long long>(waited->tx));
    out += text;
  }
  return out;
}

// A memory fault inside a kernel (a wild load or store, a fiber's stack overflowing into its
// guard page) ends the launch with an error instead of killing the process. Outside a kernel the
// signal takes its default action.
inline void on_fault(int sig, siginfo_t* info, void*) {
  Block* b = t_block;
  Thread* t = t_thread;
  if (!b || !t) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  std::snprintf(b->fault, sizeof b->fault,
                "memory fault (%s) at address %p: a load or store outside every buffer, or the "
                "thread's stack overflowed", sig == SIGBUS ? "SIGBUS" : "SIGSEGV", info->si_addr);
  b->failed = true;
  t->wait = Wait::done;
  switch_context(t->context, b->scheduler);  // never resumed
}

// Installs on_fault on an alternate stack for the duration of a launch.
class FaultGuard {
public:
  FaultGuard() : m_stack(k_alt_stack_bytes) {
    stack_t alt{};
    alt.ss_sp = m_stack.data();
    alt.ss_size = m_stack.size();
    sigaltstack(&alt, &m_old_stack);
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &m_old_segv);
    sigaction(SIGBUS, &action, &m_old_bus);
  }
  ~FaultGuard() {
    sigaction(SIGSEGV, &m_old_segv, nullptr);
    sigaction(SIGBUS, &m_old_bus, nullptr);
    sigaltstack(&m_old_stack, nullptr);
  }
  FaultGuard(const FaultGuard&) = delete;
  FaultGuard& operator=(const FaultGuard&) = delete;

private:
  static constexpr size_t k_alt_stack_bytes = 64 * 1024;
  std::vector<unsigned char> m_stack;
  stack_t m_old_stack{};
  struct sigaction m_old_segv {};
  struct sigaction m_old_bus {};
};

// Gives thread `t` the processor until it blocks or ends; false when the launch has failed.
inline bool run_thread(Block& b, Thread& t) {
  t_thread = &t;
  switch_context(b.scheduler, t.context);
  t_thread = nullptr;
  if (b.fault[0]) {
    char where[120];
    std::snprintf(where, sizeof where, "block (%u, %u, %u) thread (%u, %u, %u): ", b.block_idx.x,
                  b.block_idx.y, b.block_idx.z, t.tid.x, t.tid.y, t.tid.z);
    b.error = std::string(where) + b.fault;
  }
  if (b.schedule == KILN_EMU_SEEDED) {
    land_some_copy(b);
    land_some_tma(b);
  }
  return !b.failed;
}

// `n` indices in order, reversed, or shuffled with the block's random numbers.
inline void fill_order(Block& b, std::vector<size_t>& order, size_t n, int how) {
  order.resize(n);
  for (size_t i = 0; i < n; ++i) order[i] = how == 1 ? n - 1 - i : i;
  if (how != 2) return;
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[next_random(b) % i]);
}

// One sweep over the block's threads, in the schedule's order; `ran` is set when some thread
// ran. Kind: every thread in order, or in reverse on odd sweeps. Seeded: each sweep either all
// threads shuffled, or warp by warp in a shuffled order, each warp's lanes shuffled and the warp
// running ahead (its lanes again and again) until none of them can run. Adversarial: warp by
// warp from the last, lanes from the last, each warp running ahead.
inline bool sweep(Block& b, size_t index, bool& ran) {
  size_t n = b.threads.size();
  auto run_if_ready = [&](Thread& t) {
    if (t.wait != Wait::none) return true;
    ran = true;
    return run_thread(b, t);
  };
  std::vector<size_t> order;
  bool seeded = b.schedule == KILN_EMU_SEEDED;
  if (b.schedule == KILN_EMU_KIND || (seeded && next_random(b) % 2 == 0)) {
    fill_order(b, order, n, seeded ? 2 : static_cast<int>(index % 2));
    for (size_t k : order)
      if (!run_if_ready(b.threads[k])) return false;
    return true;
  }
  std::vector<size_t> warps, lanes;
  fill_order(b, warps, b.warps.size(), seeded ? 2 : 1);
  for (size_t w : warps) {
    size_t first = w * 32, count = n - first < 32 ? n - first : 32;
    for (bool again = true; again;) {
      again = false;
      fill_order(b, lanes, count, seeded ? 2 : 1);
      for (size_t lane : lanes) {
        Thread& t = b.threads[first + lane];
        if (t.wait != Wait::none) continue;
        again = true;
        if (!run_if_ready(t)) return false;
      }
    }
  }
  return true;
}

// Runs one block to completion; false (with b.error set) on failure.
inline bool run_block(Block& b) {
  size_t n = b.threads.size();
  b.barrier_arrived = 0;
  for (Block::Named& n : b.named) n = Block::Named{};
  b.mbarriers.clear();
  b.async_view.clear();
  b.tma.clear();
  b.warpgroups.clear();
  for (Warp& w : b.warps) {
    w.arrived = 0;
    w.op = Collective::none;
  }
  if (b.smem_bytes) std::memset(b.smem, 0xff, b.smem_bytes);  // NaN: unwritten reads show up
  for (size_t i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.wait = Wait::none;
    t.groups.clear();
    t.open_group.clear();
    make_context(t.context, t.stack, k_stack_bytes, fiber_entry);
  }
  uint64_t block = 1 + b.block_idx.x + 65536ull * (b.block_idx.y + 65536ull * b.block_idx.z);
  b.rng = b.launch->schedule_seed ^ (0x9e3779b97f4a7c15ull * block);  // each block its own order
  for (size_t index = 0;; ++index) {
    bool ran = false;
    if (!sweep(b, index, ran)) return false;
    bool all_done = true;
    for (const Thread& t : b.threads) all_done = all_done && t.wait == Wait::done;
    if (all_done) return true;
    // Nothing can run: the TMA copies in flight that threads wait for land now (the latest
    // moment), and the threads their mbarriers release run on; else wgmma.wait_groups retire
    // their groups; else the copies no thread waits for land (so a stage refilled before its
    // wgmmas retire is refilled under them only where copies land early: adversarial, seeded).
    if (!ran && land_all_tma(b, true)) {
      if (b.failed) return false;
      continue;
    }
    if (!ran && let_wgmmas_retire(b)) continue;
    if (!ran && land_all_tma(b)) {
      if (b.failed) return false;
      continue;
    }
    if (!ran) {
      b.error = describe_deadlock(b);
      b.failed = true;
      return false;
    }
  }
}

// Runs every block of the launch in order. Returns an empty string or the error.
inline std::string launch(const KilnEmuLaunch& l) {
  if (!g_api) return "the emulator's rounding functions were not installed";
  size_t threads = size_t{l.block[0]} * l.block[1] * l.block[2];
  if (threads == 0 || threads > 1024) return "a block must have 1 to 1024 threads";
  if (l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0) return "the grid is empty";
  // CUDA's limits on launch dimensions (compute capability 7.5 and later).
  if (l.grid[0] > 0x7fffffffu || l.grid[1] > 65535 || l.grid[2] > 65535)
    return "the grid exceeds CUDA's limits (2^31 - 1 x 65535 x 65535 blocks)";
  if (l.block[0] > 1024 || l.block[1] > 1024 || l.block[2] > 64)
    return "the block exceeds CUDA's limits (1024 x 1024 x 64 threads, 1024 in all)";
  if (l.schedule > KILN_EMU_ADVERSARIAL) return "unknown schedule";
  Block b;
  b.launch = &l;
  b.schedule = l.schedule;
  b.block_dim = Dim3{l.block[0], l.block[1], l.block[2]};
  b.grid_dim = Dim3{l.grid[0], l.grid[1], l.grid[2]};
  b.threads.resize(threads);
  b.warps.resize((threads + 31) / 32);
  for (size_t w = 0; w < b.warps.size(); ++w) {
    size_t lanes = threads - w * 32 < 32 ? threads - w * 32 : 32;
    b.warps[w].present = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
  }
  size_t per_stack = k_stack_bytes + k_guard_bytes;
  void* stacks = mmap(nullptr, per_stack * threads, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stacks == MAP_FAILED) return "cannot map fiber stacks";
  for (size_t i = 0; i < threads; ++i) {
    unsigned char* base = static_cast<unsigned char*>(stacks) + i * per_stack;
    mprotect(base, k_guard_bytes, PROT_NONE);  // overflow faults instead of corrupting a neighbour
    Thread& t = b.threads[i];
    t.stack = base + k_guard_bytes;
    t.linear = static_cast<int>(i);
    t.lane = static_cast<int>(i % 32);
    t.warp = static_cast<int>(i / 32);
    t.tid = Dim3{static_cast<unsigned>(i % l.block[0]),
                 static_cast<unsigned>((i / l.block[0]) % l.block[1]),
                 static_cast<unsigned>(i / (size_t{l.block[0]} * l.block[1]))};
  }
  std::vector<unsigned char> smem(l.dynamic_smem_bytes + 1024);
  uintptr_t raw = reinterpret_cast<uintptr_t>(smem.data());
  b.smem = reinterpret_cast<unsigned char*>((raw + 1023) & ~uintptr_t{1023});
  b.smem_bytes = l.dynamic_smem_bytes;
  Block* saved_block = t_block;
  Thread* saved_thread = t_thread;
  t_block = &b;
  FaultGuard guard;
  std::string error;
  for (unsigned z = 0; z < l.grid[2] && error.empty(); ++z)
    for (unsigned y = 0; y < l.grid[1] && error.empty(); ++y)
      for (unsigned x = 0; x < l.grid[0] && error.empty(); ++x) {
        b.block_idx = Dim3{x, y, z};
        if (!run_block(b)) error = b.error;
      }
  t_block = saved_block;
  t_thread = saved_thread;
  munmap(stacks, per_stack * threads);
  return error;
}

}  // namespace kiln_emu

#endif  // KILN_EMU_LAUNCH_H
