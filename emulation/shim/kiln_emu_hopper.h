// sm_90's asynchronous proxy in kiln's emulator: TMA tile loads (cp.async.bulk.tensor), wgmma
// (warpgroup MMAs reading shared memory through matrix descriptors), fence.proxy.async and
// setmaxnreg, with the rules hardware leaves undefined turned into errors:
//
// - Shared memory has two views. Generic loads and stores use the block's memory; the async proxy
//   (wgmma's operand reads) sees `async_view`, which TMA writes together with the block's memory
//   and which takes the generic writes only at a fence.proxy.async. An operand written with plain
//   stores and read by wgmma without that fence is read stale (0xff bytes: NaN in every format).
// - A TMA copy reads its box at issue and lands when the schedule says: at issue (adversarial),
//   when no thread can run otherwise (kind: the latest legal moment, so a consumer that reads a
//   stage without waiting for its mbarrier reads the old contents; then only the copies of the
//   mbarriers threads wait for land), or in between (seeded: any copy in flight, in no order).
//   It completes its bytes on the mbarrier as it lands.
// - Hardware reads a wgmma's shared-memory operands at some moment between its issue and the
//   wait_group that retires it, so they must hold still in between. The emulator reads them at
//   issue and again as the wgmma retires, and a byte that changed (operands not ready at issue, or
//   a stage refilled or rewritten before its wgmmas retired) is an error. A wait_group retires
//   its groups late, when no thread of the block can run otherwise (before TMA copies that no
//   thread waits for land, which keeps those at the latest moment under the kind schedule), so a
//   stage released before that wait is refilled first wherever copies land early.
//   Its accumulators hold a poison value (a signaling NaN) from issue to that wait, and a thread
//   that writes them meanwhile is an error; wgmmas issued back to back on the same registers
//   chain as the hardware chains them.
// - wgmma.fence, commit_group, wait_group and mma_async are .sync.aligned over the warpgroup: all
//   128 threads must execute the same one, at the same place. A thread must execute wgmma.fence
//   before its first wgmma and after each wait_group (where its accumulators were last touched),
//   and between its writes to registers a wgmma uses (RS A, its accumulators) and that wgmma:
//   registers an earlier wgmma used are taken at each fence, and a wgmma that finds them changed
//   since is an error.
// - The RS form reads A from each thread's registers: captured at issue, and poisoned (NaN pairs)
//   until the wait_group that retires the wgmma, where a register the program wrote meanwhile
//   is an error.
// - Descriptors: the canonical layouts of the PTX ISA ("Matrix Descriptor Format", CuTe's
//   make_gmma_desc) with 128-byte swizzle, K-major or MN-major (imm-trans), base offset 0; the
//   swizzle XORs address bits 4-6 with bits 7-9 of the shared-memory offset, as TMA's 128-byte
//   swizzle writes them.
//
// Arithmetic: each output element adds its 16 products as the arch's mma model does
// (kiln_emu_warp.h): the H100's whole-slice sum (slice_sum_hopper) by default, else two blocks of
// 8 with block_sum.
#ifndef KILN_EMU_HOPPER_H
#define KILN_EMU_HOPPER_H

#include "kiln_emu_warp.h"

#include <algorithm>

#ifndef KILN_EMU_ARCH_SPECIFIC
#define KILN_EMU_ARCH_SPECIFIC 0
#endif

namespace kiln_emu {

enum WgOp : int { wg_none = 0, wg_fence, wg_commit, wg_wait, wg_mma, wg_setmaxnreg };

inline const char* wg_op_name(int op) {
  switch (op) {
    case wg_fence: return "wgmma.fence";
    case wg_commit: return "wgmma.commit_group";
    case wg_wait: return "wgmma.wait_group";
    case wg_mma: return "wgmma.mma_async";
    case wg_setmaxnreg: return "setmaxnreg";
    default: return "nothing";
  }
}

inline void require_sm90a(const char* what) {
  if (KILN_EMU_SM != 90 || !KILN_EMU_ARCH_SPECIFIC) {
    char text[160];
    std::snprintf(text, sizeof text, "%s needs sm_90a, but the program targets sm_%d%s", what,
                  KILN_EMU_SM, KILN_EMU_ARCH_SPECIFIC ? "a" : "");
    fail(text);
  }
}

// The async proxy's view of shared memory, created on first use as the block's memory started.
inline unsigned char* async_view(Block& b) {
  if (b.async_view.size() != b.smem_bytes) b.async_view.assign(b.smem_bytes, 0xff);
  return b.async_view.data();
}

// fence.proxy.async (shared::cta): the generic proxy's writes so far become visible to the async
// proxy.
KILN_EMU_ENTRY(void, fence_proxy_async, ()) {
  require_sm(90, "fence.proxy.async");
  Block& b = *t_block;
  if (b.smem_bytes) std::memcpy(async_view(b), b.smem, b.smem_bytes);
}

// ---- TMA ------------------------------------------------------------------------------------

// 128-byte swizzle on a shared-memory offset: 16-byte chunk bits 4-6 XOR row bits 7-9.
inline size_t swizzle_128b(size_t offset) { return offset ^ (((offset >> 7) & 7) << 4); }

// Lands `copy`: its bytes into both views, then its transaction bytes on its mbarrier. Runs from
// the scheduler too, so it reports a vanished barrier in the block instead of failing a thread.
inline void land_tma(Block& b, TmaCopy& copy) {
  std::memcpy(b.smem + copy.dst, copy.bytes.data(), copy.bytes.size());
  std::memcpy(async_view(b) + copy.dst, copy.bytes.data(), copy.bytes.size());
  for (MBarrier& m : b.mbarriers) {
    if (m.offset != copy.bar) continue;
    m.tx -= static_cast<int64_t>(copy.bytes.size());
    mbarrier_settle(m);
    return;
  }
  if (!b.failed) {
    b.failed = true;
    char text[200];
    std::snprintf(text, sizeof text, "block (%u, %u, %u): a TMA copy landed on shared-memory "
                  "offset %zu, where no mbarrier is initialised any more", b.block_idx.x,
                  b.block_idx.y, b.block_idx.z, copy.bar);
    b.error = text;
  }
}

// When no thread can run: lands the copies in flight on the mbarriers threads wait for (the
// others stay in flight, so a read that skipped its own barrier's wait while another's released
// the thread reads stale data), or, unless `awaited_only`, every copy where none is waited for;
// whether one landed.
inline bool land_all_tma(Block& b, bool awaited_only = false) {
  if (b.tma.empty()) return false;
  auto awaited = [&](const TmaCopy& c) {
    for (const Thread& t : b.threads)
      if (t.wait == Wait::mbarrier && t.waits_on == c.bar) return true;
    return false;
  };
  std::vector<TmaCopy> copies, rest;
  for (TmaCopy& c : b.tma) (awaited(c) ? copies : rest).push_back(std::move(c));
  if (copies.empty() && !awaited_only) std::swap(copies, rest);
  b.tma = std::move(rest);
  if (copies.empty()) return false;
  for (TmaCopy& c : copies) land_tma(b, c);
  return true;
}

// Seeded schedules, between two threads' turns: lands one TMA copy in flight, any of them (copies
// complete in no order the PTX ISA promises), one time in four.
inline void land_some_tma(Block& b) {
  if (b.tma.empty() || next_random(b) % 4 != 0) return;
  auto at = b.tma.begin() + static_cast<std::ptrdiff_t>(next_random(b) % b.tma.size());
  TmaCopy copy = std::move(*at);
  b.tma.erase(at);
  land_tma(b, copy);
}

// cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes: the box of
// `map` at element coordinates `coords` (dim 0 innermost) into shared memory at `dst`, zeros
// where the box leaves the tensor; `bar` completes the box's bytes when it lands.
KILN_EMU_ENTRY(void, tma_load,
               (void* dst, const void* map_param, const int* coords, int rank, void* bar)) {
  require_sm(90, "cp.async.bulk.tensor");
  KilnEmuTensorMap map;
  std::memcpy(&map, map_param, sizeof map);
  if (map.magic != KILN_EMU_TENSOR_MAP_MAGIC) fail("cp.async.bulk.tensor: the tensor map was not encoded");
  if (static_cast<int>(map.rank) != rank) {
    fail("cp.async.bulk.tensor." + std::to_string(rank) + "d with a map of rank " +
         std::to_string(map.rank));
  }
  size_t e = map.elem_bytes;
  size_t row_bytes = map.box[0] * e;
  size_t bytes = row_bytes;
  for (int d = 1; d < rank; ++d) bytes *= map.box[d];
  size_t align = map.swizzle == 128 ? 1024 : 128;
  check_smem(dst, bytes, align, map.swizzle == 128
                                    ? "cp.async.bulk.tensor destination (128-byte swizzle: the "
                                      "descriptors' base offset 0 wants 1024-byte alignment)"
                                    : "cp.async.bulk.tensor destination");
  if (map.swizzle != 0 && map.swizzle != 128)
    fail("cp.async.bulk.tensor: the emulator models 128-byte swizzle or none");
  if (map.swizzle == 128 && row_bytes > 128)
    fail("cp.async.bulk.tensor: a 128-byte swizzle's inner box is at most 128 bytes");
  MBarrier& m = mbarrier_at(bar, "cp.async.bulk.tensor mbarrier");
  Block& b = *t_block;
  TmaCopy copy;
  copy.dst = static_cast<size_t>(static_cast<unsigned char*>(dst) - b.smem);
  copy.bar = m.offset;
  copy.bytes.assign(bytes, 0);
  size_t rows = bytes / row_bytes;
  for (size_t r = 0; r < rows; ++r) {
    // Row r of the box: its coordinates in dims 1.., then the elements along dim 0.
    int64_t offset = 0;
    bool inside = true;
    size_t rest = r;
    for (int d = 1; d < rank; ++d) {
      int64_t c = static_cast<int64_t>(coords[d]) + static_cast<int64_t>(rest % map.box[d]);
      rest /= map.box[d];
      if (c < 0 || c >= static_cast<int64_t>(map.dims[d])) inside = false;
      offset += c * static_cast<int64_t>(map.strides[d - 1]);
    }
    for (size_t i = 0; i < map.box[0] && inside; ++i) {
      int64_t c0 = static_cast<int64_t>(coords[0]) + static_cast<int64_t>(i);
      if (c0 < 0 || c0 >= static_cast<int64_t>(map.dims[0])) continue;
      const unsigned char* src = static_cast<const unsigned char*>(map.base) + offset +
                                 c0 * static_cast<int64_t>(e);
      check_global(src, e, e, "cp.async.bulk.tensor source");
      size_t at = copy.dst + r * row_bytes + i * e;
      if (map.swizzle == 128) at = swizzle_128b(at);
      std::memcpy(copy.bytes.data() + (at - copy.dst), src, e);
    }
  }
  if (b.schedule == KILN_EMU_ADVERSARIAL ||
      (b.schedule == KILN_EMU_SEEDED && next_random(b) % 4 == 0)) {
    land_tma(b, copy);
    return;
  }
  b.tma.push_back(std::move(copy));
}

// ---- wgmma ----------------------------------------------------------------------------------

// The shared-memory offset of element (r, k) of a wgmma operand, r along M (A) or N (B), from
// its descriptor: K-major ((8, m), (8, 2)) rows of 128 bytes, 8-row groups SBO apart; MN-major
// 64-element runs along r, LBO apart, k rows 128 bytes apart in groups of 8, SBO apart.
inline size_t gmma_offset(uint64_t desc, bool mn_major, int r, int k, const char* which,
                          size_t elem = 2) {
  size_t start = static_cast<size_t>(desc & 0x3fff) << 4;
  size_t lbo = static_cast<size_t>((desc >> 16) & 0x3fff) << 4;
  size_t sbo = static_cast<size_t>((desc >> 32) & 0x3fff) << 4;
  unsigned base = static_cast<unsigned>((desc >> 49) & 7);
  unsigned mode = static_cast<unsigned>(desc >> 62);
  if (mode != 1) fail(std::string("wgmma: descriptor of ") + which + ": the emulator models 128-byte swizzle only");
  if (base != 0) fail(std::string("wgmma: descriptor of ") + which + ": base offset must be 0");
  size_t off = mn_major ? start + static_cast<size_t>(r % 64) * 2 + static_cast<size_t>(r / 64) * lbo +
                              static_cast<size_t>(k % 8) * 128 + static_cast<size_t>(k / 8) * sbo
                        : start + static_cast<size_t>(r % 8) * 128 + static_cast<size_t>(r / 8) * sbo +
                              static_cast<size_t>(k) * elem;
  return swizzle_128b(off);
}

// The bits accumulators hold while a wgmma in flight writes them: a signaling NaN, so that
// arithmetic on them (which quiets it, as x86 does) leaves other bits, and a thread that writes
// them before the wait_group that retires the wgmma, even with a product of them, is seen.
inline constexpr uint32_t k_poisoned_acc = 0x7fa0acc0u;

// Poisons the `count` accumulators at `regs`: the bits copied, never passed as a float (an x87
// load would quiet them).
inline void poison(float* regs, size_t count) {
  for (size_t v = 0; v < count; ++v) std::memcpy(&regs[v], &k_poisoned_acc, sizeof k_poisoned_acc);
}

// Whether the `count` accumulators at `regs` still hold the poison of a wgmma in flight.
inline bool holds_poison(const float* regs, size_t count) {
  for (size_t v = 0; v < count; ++v) {
    uint32_t bits;
    std::memcpy(&bits, &regs[v], sizeof bits);
    if (bits != k_poisoned_acc) return false;
  }
  return true;
}

// An RS wgmma's A in registers (PTX ISA, "Register Fragment" of wgmma .f16/.bf16 A, CuTe's
// SM90 RS ALayout): warp w of the warpgroup holds rows 16 w .. 16 w + 15 as mma.m16n8k16's A
// fragment: register r, half h (h 0 the low 16 bits) of the thread with g = lane / 4, t = lane % 4
// is element (16 w + g + 8 (r & 1), 2 t + h + 8 (r >> 1)).
inline void rs_a_place(int thread, int reg, int half, int* m, int* k) {
  int warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
  *m = 16 * warp + g + 8 * (reg & 1);
  *k = 2 * t + half + 8 * (reg >> 1);
}

// The same for tf32 (m64nNk8; PTX ISA, "Register Fragment" of wgmma .tf32 A, CuTe's
// ALayout_64x8): warp w's rows as mma.m16n8k8 tf32's A fragment: register r of the thread is
// element (16 w + g + 8 (r & 1), t + 4 (r >> 1)), the fp32 bits of a tf32 value.
inline void rs_a_place_tf32(int thread, int reg, int* m, int* k) {
  int warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
  *m = 16 * warp + g + 8 * (reg & 1);
  *k = t + 4 * (reg >> 1);
}

// The bits an RS wgmma's A registers hold while it is in flight: a NaN pair in bf16 and f16, a
// NaN in tf32.
inline constexpr uint32_t k_poisoned_a = 0xffffffffu;

// The in-flight RS wgmma of `wg` (committed or not) that reads thread `thread`'s A registers at
// `regs`, other than `skip` and the first `retired` of the oldest group; null where none does.
// Several may read the same registers (tf32x3's P x small V and P x V): they all see the values
// the registers held when the first was issued.
inline const WgmmaOp* a_reader(const WarpGroup& wg, int thread, const uint32_t* regs,
                               const WgmmaOp* skip = nullptr, size_t retired = 0) {
  auto reads = [&](const WgmmaOp& o) {
    return &o != skip && o.a_regs && o.a_at[thread] == regs;
  };
  for (size_t g = 0; g < wg.groups.size(); ++g)
    for (size_t i = g == 0 ? retired : 0; i < wg.groups[g].size(); ++i)
      if (reads(wg.groups[g][i])) return &wg.groups[g][i];
  for (const WgmmaOp& o : wg.open)
    if (reads(o)) return &o;
  return nullptr;
}

// The shared-memory bytes `op` reads, in order (A's, unless it is in registers, then B's), as the
// async proxy sees them now; false where a descriptor addresses past the block's dynamic shared
// memory.
inline bool wgmma_operand_bytes(Block& b, const WgmmaOp& op, std::string& out) {
  const unsigned char* view = async_view(b);
  size_t elem = op.tf32 ? 4 : 2;
  int kdim = op.tf32 ? 8 : 16;
  out.clear();
  out.reserve(static_cast<size_t>((op.a_regs ? 0 : 64) + op.n) * static_cast<size_t>(kdim) * elem);
  auto add = [&](uint64_t desc, bool mn, int r, int k, const char* which) {
    size_t off = gmma_offset(desc, mn, r, k, which, elem);
    if (off + elem > b.smem_bytes) return false;
    out.append(reinterpret_cast<const char*>(view + off), elem);
    return true;
  };
  for (int m = 0; !op.a_regs && m < 64; ++m)
    for (int k = 0; k < kdim; ++k)
      if (!add(op.desc_a, op.trans_a, m, k, "A")) return false;
  for (int n = 0; n < op.n; ++n)
    for (int k = 0; k < kdim; ++k)
      if (!add(op.desc_b, op.trans_b, n, k, "B")) return false;
  return true;
}

// Reads `op`'s operands as the async proxy sees shared memory now (and A's registers as they
// were at issue): their bytes into op.seen, their values into op.a_vals and op.b_vals.
inline void gather_wgmma_operands(Block& b, WgmmaOp& op, const char** error) {
  if (!wgmma_operand_bytes(b, op, op.seen)) {
    *error = "wgmma: a descriptor addresses past the block's dynamic shared memory";
    return;
  }
  size_t elem = op.tf32 ? 4 : 2;
  int kdim = op.tf32 ? 8 : 16;
  size_t at = 0;
  // The next element of op.seen, in wgmma_operand_bytes' order.
  auto element = [&]() -> float {
    const char* bytes = op.seen.data() + at;
    at += elem;
    if (op.tf32) {  // the fp32 bits as the tensor core reads them: truncated to tf32
      uint32_t bits;
      std::memcpy(&bits, bytes, 4);
      return tf32_operand(bits);
    }
    uint16_t h;
    std::memcpy(&h, bytes, 2);
    return op.bf16 ? g_api->float_from_bf16(h) : g_api->float_from_f16(h);
  };
  std::vector<float>& a = op.a_vals;
  std::vector<float>& bm = op.b_vals;
  a.assign(64 * 16, 0.0f);
  bm.assign(static_cast<size_t>(op.n) * 16, 0.0f);
  if (op.a_regs && op.tf32) {
    for (int thread = 0; thread < 128; ++thread)
      for (int r = 0; r < 4; ++r) {
        int m = 0, k = 0;
        rs_a_place_tf32(thread, r, &m, &k);
        a[static_cast<size_t>(m * 16 + k)] = tf32_operand(op.a[thread][r]);
      }
  } else if (op.a_regs) {
    for (int thread = 0; thread < 128; ++thread)
      for (int r = 0; r < 4; ++r)
        for (int h = 0; h < 2; ++h) {
          int m = 0, k = 0;
          rs_a_place(thread, r, h, &m, &k);
          auto bits = static_cast<uint16_t>(op.a[thread][r] >> (16 * h));
          a[static_cast<size_t>(m * 16 + k)] = op.bf16 ? g_api->float_from_bf16(bits) : g_api->float_from_f16(bits);
        }
  } else {
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < kdim; ++k) a[static_cast<size_t>(m * 16 + k)] = element();
  }
  for (int n = 0; n < op.n; ++n)
    for (int k = 0; k < kdim; ++k) bm[static_cast<size_t>(n * 16 + k)] = element();
}

// Performs `op`: every thread's slice of D = A B (+ C), its operands as gathered at issue, which
// shared memory must still hold; C and D in the warpgroup's record of the accumulators.
inline void perform_wgmma(Block& b, WarpGroup& wg, WgmmaOp& op, const char** error) {
  std::string now;
  if (!wgmma_operand_bytes(b, op, now) || now != op.seen) {
    *error = "wgmma.mma_async: shared memory a wgmma reads changed between its issue and the "
             "wait_group that retires it (operands not ready when it was issued, or a stage "
             "refilled or rewritten under it)";
    return;
  }
  const std::vector<float>& a = op.a_vals;
  const std::vector<float>& bm = op.b_vals;
  int kdim = op.tf32 ? 8 : 16;
  int per = op.n / 2;
#ifdef KILN_EMU_MMA_HOPPER
  // A's rows and B's columns (bm holds them contiguous) prepared once for every output.
  std::vector<SliceOperands> rows(64), columns(static_cast<size_t>(op.n));
  for (int m = 0; m < 64; ++m) prepare_slice(rows[static_cast<size_t>(m)], &a[static_cast<size_t>(m * 16)], kdim);
  for (int n = 0; n < op.n; ++n)
    prepare_slice(columns[static_cast<size_t>(n)], &bm[static_cast<size_t>(n * 16)], kdim);
#endif
  for (int thread = 0; thread < 128; ++thread) {
    int warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
    std::vector<float>& d = wg.acc[op.d[thread]];
    for (int v = 0; v < per; ++v) {
      int j = v / 4, i = v % 4;
      int m = 16 * warp + g + 8 * (i >> 1), n = 8 * j + 2 * t + (i & 1);
      float sum = op.scale_d ? d[static_cast<size_t>(v)] : 0.0f;
#ifdef KILN_EMU_MMA_HOPPER
      d[static_cast<size_t>(v)] =
          slice_sum_hopper(sum, rows[static_cast<size_t>(m)], columns[static_cast<size_t>(n)], kdim);
      continue;
#endif
      // blocks of 8 products (tf32: 4), as mma.sync's model adds them
      int block = op.tf32 ? 4 : 8;
      for (int k0 = 0; k0 < kdim; k0 += block) {
        float products[8];
        for (int kk = 0; kk < block; ++kk)
          products[kk] = a[static_cast<size_t>(m * 16 + k0 + kk)] * bm[static_cast<size_t>(n * 16 + k0 + kk)];
        sum = block_sum(sum, products, block);
      }
      d[static_cast<size_t>(v)] = sum;
    }
  }
}

inline WarpGroup& my_warpgroup() {
  Block& b = *t_block;
  size_t index = static_cast<size_t>(t_thread->linear / 128);
  if (b.warpgroups.size() != (b.threads.size() + 127) / 128) b.warpgroups.resize((b.threads.size() + 127) / 128);
  if (b.threads.size() < (index + 1) * 128) fail("wgmma: the thread's warpgroup has fewer than 128 threads");
  return b.warpgroups[index];
}

// Every thread of the warpgroup must reach the same .sync.aligned instruction at the same place;
// the last to arrive runs `complete`, the others wait for it.
template <typename Complete>
inline void warpgroup_collective(int op, int variant, const void* site, Complete&& complete) {
  asm volatile("" ::: "memory");
  WarpGroup& wg = my_warpgroup();
  if (wg.arrived == 0) {
    wg.op = op;
    wg.variant = variant;
    wg.site = site;
  } else if (wg.op != op || wg.variant != variant) {
    fail(std::string("divergent warpgroup: this thread reached ") + wg_op_name(op) +
         " while other threads of its warpgroup wait at " + wg_op_name(wg.op) +
         (wg.op == op ? " of another kind" : ""));
  } else if (wg.site != site) {
    fail(std::string("divergent warpgroup: this thread reached ") + wg_op_name(op) +
         " at another place in the kernel than the other threads of its warpgroup (.aligned)");
  }
  int slot = t_thread->linear % 128;
  complete(wg, slot, false);
  if (++wg.arrived == 128) {
    complete(wg, slot, true);
    wg.arrived = 0;
    wg.op = wg_none;
    size_t first = static_cast<size_t>(t_thread->linear / 128) * 128;
    for (size_t i = first; i < first + 128; ++i)
      if (t_block->threads[i].wait == Wait::warpgroup) t_block->threads[i].wait = Wait::none;
  } else {
    t_thread->wait = Wait::warpgroup;
    yield();
  }
  asm volatile("" ::: "memory");
}

// What thread `thread`'s registers `r` hold as the next wgmma would read them: the copy of an RS
// wgmma in flight that reads them as A, or the chain's result so far where wgmmas in flight
// accumulate into them (their registers hold poison meanwhile), else the registers themselves.
inline void registers_as_read(const WarpGroup& wg, int thread,
                              const WarpGroup::FencedRegisters& r, uint32_t* out) {
  const void* from = r.at;
  if (r.a) {
    if (const WgmmaOp* reader = a_reader(wg, thread, static_cast<const uint32_t*>(r.at)))
      from = reader->a[thread];
  } else {
    auto it = wg.acc.find(static_cast<float*>(r.at));
    if (it != wg.acc.end() && it->second.size() == r.words) from = it->second.data();
  }
  std::memcpy(out, from, r.words * sizeof(uint32_t));
}

// A wgmma of thread `thread` uses `words` registers at `at` (A, or its accumulators, whatever its
// scale-d): an error where they are known from an earlier wgmma and differ from what they held at
// the thread's last wgmma.fence; registers seen for the first time are taken at the next fence.
inline void check_fenced_registers(WarpGroup& wg, int thread, void* at, size_t words, bool a) {
  auto& known = wg.fenced_registers[thread];
  auto it = std::find_if(known.begin(), known.end(), [&](const WarpGroup::FencedRegisters& r) {
    return r.at == at && r.a == a;
  });
  if (it == known.end()) {
    known.push_back({at, a, words, {}, false});
    return;
  }
  if (it->words != words) {
    it->words = words;
    it->snapped = false;
    return;
  }
  if (!it->snapped) return;
  uint32_t now[128];  // at most m64n256's 128 accumulators a thread
  if (words > 128) fail("wgmma.mma_async: more than 128 registers a thread");
  registers_as_read(wg, thread, *it, now);
  if (std::memcmp(now, it->held.data(), words * sizeof(uint32_t)) != 0)
    fail(a ? "wgmma.mma_async: a thread wrote A's registers after its last wgmma.fence (the fence "
             "must come between the writes and the wgmma that reads them)"
           : "wgmma.mma_async: a thread wrote the accumulators after its last wgmma.fence (the "
             "fence must come between the writes and the wgmma that uses them)");
}

KILN_EMU_ENTRY(void, wgmma_fence, (const void* site)) {
  require_sm90a("wgmma.fence");
  warpgroup_collective(wg_fence, 0, site, [](WarpGroup& wg, int slot, bool last) {
    if (last) return;
    wg.fenced[slot] = true;
    for (WarpGroup::FencedRegisters& r : wg.fenced_registers[slot]) {
      r.held.resize(r.words);
      registers_as_read(wg, slot, r, r.held.data());
      r.snapped = true;
    }
  });
}

KILN_EMU_ENTRY(void, wgmma_commit, (const void* site)) {
  require_sm90a("wgmma.commit_group");
  warpgroup_collective(wg_commit, 0, site, [](WarpGroup& wg, int, bool last) {
    if (!last) return;
    wg.groups.push_back(std::move(wg.open));
    wg.open.clear();
  });
}

inline constexpr const char* k_wrote_acc_in_flight =
    "wgmma.mma_async: a thread wrote the accumulators while a wgmma in flight writes them (before "
    "the wait_group that retires it)";

// wgmma.wait_group: the warpgroup's committed groups but the newest `pending` retire. Where some
// do, the warpgroup waits until no thread of the block can run otherwise (let_wgmmas_retire),
// and the first of its threads to run on retires them: each wgmma's operands must still be what
// it read at issue.
KILN_EMU_ENTRY(void, wgmma_wait, (int pending, const void* site)) {
  require_sm90a("wgmma.wait_group");
  warpgroup_collective(wg_wait, pending, site, [&](WarpGroup& wg, int slot, bool last) {
    wg.fenced[slot] = false;
    if (last && static_cast<int>(wg.groups.size()) > pending) wg.retire_to = pending;
  });
  WarpGroup& wg = my_warpgroup();
  while (wg.retire_to >= 0 && !wg.retire_now) {
    t_thread->wait = Wait::wgmma;
    yield();
  }
  if (wg.retire_to < 0) return;  // another thread of the warpgroup has retired them
  wg.retire_now = false;
  wg.retire_to = -1;
  const char* error = nullptr;
  while (static_cast<int>(wg.groups.size()) > pending && !error) {
    for (size_t i = 0; i < wg.groups.front().size(); ++i) {
      WgmmaOp& op = wg.groups.front()[i];
      perform_wgmma(*t_block, wg, op, &error);
      // An RS wgmma's A registers get their contents back once no wgmma in flight reads them,
      // unless the program wrote them while one could still read them.
      for (int thread = 0; op.a_regs && thread < 128 && !error; ++thread) {
        for (int r = 0; r < 4; ++r) {
          if (op.a_at[thread][r] != k_poisoned_a) {
            error = "wgmma.mma_async: a thread wrote A's registers before the wait_group that "
                    "retires the wgmma reading them";
            break;
          }
        }
        if (!error && !a_reader(wg, thread, op.a_at[thread], &op, i + 1))
          std::memcpy(op.a_at[thread], op.a[thread], sizeof op.a[thread]);
      }
    }
    wg.groups.pop_front();
  }
  // Registers no wgmma in flight writes any more get their contents back.
  std::vector<float*> busy;
  for (const auto& grp : wg.groups)
    for (const WgmmaOp& o : grp) busy.insert(busy.end(), o.d, o.d + 128);
  for (const WgmmaOp& o : wg.open) busy.insert(busy.end(), o.d, o.d + 128);
  std::sort(busy.begin(), busy.end());
  for (auto it = wg.acc.begin(); it != wg.acc.end();) {
    if (std::binary_search(busy.begin(), busy.end(), it->first)) {
      ++it;
      continue;
    }
    if (!error && !holds_poison(it->first, it->second.size())) error = k_wrote_acc_in_flight;
    std::memcpy(it->first, it->second.data(), sizeof(float) * it->second.size());
    it = wg.acc.erase(it);
  }
  if (error) fail(error);
}

// When no thread can run: lets every warpgroup whose wait_group has groups to retire retire them
// (its threads run on); whether there was one.
inline bool let_wgmmas_retire(Block& b) {
  bool any = false;
  for (size_t g = 0; g < b.warpgroups.size(); ++g) {
    WarpGroup& wg = b.warpgroups[g];
    if (wg.retire_to < 0 || wg.retire_now) continue;
    wg.retire_now = true;
    any = true;
    for (size_t i = g * 128; i < (g + 1) * 128 && i < b.threads.size(); ++i)
      if (b.threads[i].wait == Wait::wgmma) b.threads[i].wait = Wait::none;
  }
  return any;
}

// The operand types of wgmma_any: f16, bf16, or tf32 (m64nNk8 on fp32 operands).
enum WgmmaType : int { wgmma_f16 = 0, wgmma_bf16 = 1, wgmma_tf32 = 2 };

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16} (or m64nNk8.f32.tf32): A from a
// descriptor, K-major or (trans_a, 16-bit only) M-major, or (a_regs not null, the RS form) from
// the thread's four registers at a_regs; B from a descriptor, K-major or (trans_b,
// 16-bit only) N-major. tf32 takes both operands K-major.
KILN_EMU_ENTRY(void, wgmma,
               (float* d, uint64_t desc_a, uint32_t* a_regs, uint64_t desc_b, int n, int type,
                bool trans_a, bool trans_b, int scale_d, const void* site)) {
  require_sm90a("wgmma.mma_async");
  bool bf16 = type == wgmma_bf16, tf32 = type == wgmma_tf32;
  if (tf32 && (trans_a || trans_b)) fail("wgmma.mma_async .tf32: both operands K-major");
  if (trans_a && a_regs) fail("wgmma.mma_async: A from registers takes no imm-trans-a");
  int variant = n * 32 + (trans_a ? 16 : 0) + (tf32 ? 8 : 0) + (a_regs ? 4 : 0) + (bf16 ? 2 : 0) +
                (trans_b ? 1 : 0);
  warpgroup_collective(wg_mma, variant, site, [&](WarpGroup& wg, int s, bool last) {
    if (!wg.fenced[s]) fail("wgmma.mma_async without a wgmma.fence since the accumulators were last accessed");
    if (!last) {
      check_fenced_registers(wg, s, d, static_cast<size_t>(n / 2), false);
      if (a_regs) check_fenced_registers(wg, s, a_regs, 4, true);
      if (wg.arrived == 0) wg.desc_a = desc_a, wg.desc_b = desc_b;
      else if (wg.desc_a != desc_a || wg.desc_b != desc_b)
        fail("wgmma.mma_async: the threads of a warpgroup give different descriptors");
      wg.d[s] = d;
      wg.a[s] = a_regs;
      wg.scale_d[s] = scale_d != 0;
      return;
    }
    for (int thread = 1; thread < 128; ++thread)
      if (wg.scale_d[thread] != wg.scale_d[0])
        fail("wgmma.mma_async: the threads of a warpgroup give different scale-d");
    WgmmaOp op;
    op.desc_a = wg.desc_a;
    op.desc_b = wg.desc_b;
    op.n = n;
    op.bf16 = bf16;
    op.tf32 = tf32;
    op.trans_a = trans_a;
    op.trans_b = trans_b;
    op.scale_d = wg.scale_d[s] != 0;
    op.a_regs = a_regs != nullptr;
    for (int thread = 0; op.a_regs && thread < 128; ++thread) {
      op.a_at[thread] = wg.a[thread];
      // registers another wgmma in flight reads hold poison now, unless the program wrote them
      // meanwhile: its copy is what they held
      const WgmmaOp* reader = a_reader(wg, thread, wg.a[thread]);
      for (int r = 0; reader && r < 4; ++r)
        if (wg.a[thread][r] != k_poisoned_a)
          fail("wgmma.mma_async: a thread wrote A's registers before the wait_group that retires "
               "the wgmma reading them");
      std::memcpy(op.a[thread], reader ? reader->a[thread] : wg.a[thread], sizeof op.a[thread]);
      for (int r = 0; r < 4; ++r) wg.a[thread][r] = k_poisoned_a;
    }
    size_t per = static_cast<size_t>(n / 2);
    for (int thread = 0; thread < 128; ++thread) {
      float* regs = wg.d[thread];
      op.d[thread] = regs;
      // Registers no wgmma in flight writes: their contents now are C. Otherwise the chain's
      // result so far is (the hardware orders wgmmas on the same accumulators).
      auto [entry, fresh] = wg.acc.try_emplace(regs);
      if (fresh) entry->second.assign(regs, regs + per);
      else if (entry->second.size() != per) fail("wgmma.mma_async: accumulators in flight with another shape");
      else if (!holds_poison(regs, per)) fail(k_wrote_acc_in_flight);
      poison(regs, per);
    }
    // Hardware reads the operands at some moment between issue and wait_group: read them now,
    // and check at the wait_group that they still hold.
    const char* error = nullptr;
    gather_wgmma_operands(*t_block, op, &error);
    if (error) fail(error);
    wg.open.push_back(std::move(op));
  });
}

// The registers a thread of this block holds from launch: as ptxas gives a kernel of
// __launch_bounds__(threads, 1) that uses setmaxnreg, 65536 / threads in multiples of 8, at most
// 255 (168 for 384 threads; tests/compiler checks the cubins say so).
inline int launch_registers(const Block& b) {
  int per = static_cast<int>(65536 / b.threads.size()) / 8 * 8;
  return per > 255 ? 255 : per;
}

// setmaxnreg.{inc,dec}.sync.aligned.u32: 24 to 256 registers, a multiple of 8, for the
// warpgroup. The block's registers are a pool of launch_registers x threads: dec returns a
// warpgroup's surplus to it; inc takes from it and waits until it holds enough, so an inc that
// no dec can satisfy is a deadlock (on hardware, a hang). An inc below the warpgroup's count or
// a dec above it is an error.
KILN_EMU_ENTRY(void, setmaxnreg, (int count, bool inc, const void* site)) {
  require_sm90a(inc ? "setmaxnreg.inc" : "setmaxnreg.dec");
  if (count < 24 || count > 256 || count % 8 != 0)
    fail("setmaxnreg: the register count must be 24 to 256, a multiple of 8");
  warpgroup_collective(wg_setmaxnreg, count * 2 + (inc ? 1 : 0), site, [](WarpGroup&, int, bool) {});
  Block& b = *t_block;
  WarpGroup& wg = my_warpgroup();
  int launched = launch_registers(b);
  int now = wg.registers ? wg.registers : launched;
  if (now == count) return;  // another thread of the warpgroup has done it
  if (inc ? count < now : count > now) {
    char text[160];
    std::snprintf(text, sizeof text, "setmaxnreg.%s %d: the warpgroup holds %d registers a thread",
                  inc ? "inc" : "dec", count, now);
    fail(text);
  }
  auto held = [&] {
    int64_t sum = 0;
    for (const WarpGroup& other : b.warpgroups)
      sum += 128 * int64_t{other.registers ? other.registers : launched};
    return sum;
  };
  int64_t pool = int64_t{launched} * static_cast<int64_t>(b.threads.size());
  if (inc) {
    while (held() - 128 * int64_t{now} + 128 * int64_t{count} > pool) {
      t_thread->wait = Wait::registers;
      yield();
      if (wg.registers == count) return;
    }
  }
  wg.registers = count;
  if (!inc)
    for (Thread& t : b.threads)
      if (t.wait == Wait::registers) t.wait = Wait::none;
}

}  // namespace kiln_emu

#endif  // KILN_EMU_HOPPER_H
