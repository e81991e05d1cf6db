// Fiber contexts of kiln's emulator: a hand-written switch on x86-64 (saves the callee-saved
// registers and the stack pointer, no system call), ucontext elsewhere.
#ifndef KILN_EMU_FIBER_H
#define KILN_EMU_FIBER_H

#include <ucontext.h>

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && !defined(KILN_EMU_UCONTEXT)
extern "C" void kiln_emu_switch_x86_64(void** save_sp, void* load_sp);
asm(".text\n"
    ".weak kiln_emu_switch_x86_64\n"
    ".hidden kiln_emu_switch_x86_64\n"
    ".type kiln_emu_switch_x86_64, @function\n"
    "kiln_emu_switch_x86_64:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size kiln_emu_switch_x86_64, .-kiln_emu_switch_x86_64\n");

namespace kiln_emu {
struct Context {
  void* sp = nullptr;
};
inline void switch_context(Context& from, Context& to) { kiln_emu_switch_x86_64(&from.sp, to.sp); }
// A fresh context that starts in entry() (which must never return) on [stack, stack + bytes).
inline void make_context(Context& c, unsigned char* stack, size_t bytes, void (*entry)()) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top - 64);
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;      // r15 r14 r13 r12 rbx rbp
  sp[6] = reinterpret_cast<void*>(entry);            // returned into, rsp = top - 8 after
  sp[7] = nullptr;                                    // entry's (never used) return address
  c.sp = sp;
}
}  // namespace kiln_emu
#else
namespace kiln_emu {
struct Context {
  ucontext_t uc;
};
inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void make_context(Context& c, unsigned char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
}  // namespace kiln_emu
#endif

#endif  // KILN_EMU_FIBER_H
