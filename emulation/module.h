// A kernel program compiled for the host: generated CUDA text built with g++ against the host
// shim into a shared object in a private temporary directory, loaded, and launched by entry name.
// With KILN_EMU_CACHE_DIR set, the shim is compiled once per compiler, flags and shim text and
// kept there (emulation/module.cpp, "the shim cache"); each module then compiles only its kernels.
#pragma once

#include "compiler/artifact.h"
#include "emulation/schedule.h"
#include "support/expected.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::emulation {

// Whether to build the shim with a deliberately wrong mma fragment layout (KILN_EMU_BREAK_LAYOUT),
// which only a test of the checks themselves wants.
enum class Layout : uint8_t { correct, broken };

// How the emulator's tensor cores add a k-slice (kiln_emu_sum.h): `arch`, the model of the
// program's arch (the H100's measured one on sm_90 and sm_90a, `truncate` elsewhere); `hopper`,
// that measured model anywhere; `truncate`, blocks of 4 (tf32) or 8 (16-bit) products aligned to
// the largest and truncated without guard bits; `nearest`, fp32 adds rounded to nearest.
enum class MmaSum : uint8_t { arch, hopper, truncate, nearest };

// A deliberate change to one shim file's text: `from` (which must occur) becomes `to`. Only the
// mutation check wants it: a shim with a known bug must make some emulated check fail.
struct ShimEdit {
  std::string file;  // e.g. "kiln_emu_warp.h"
  std::string from, to;
};

// How the shim is built for a program.
struct ShimOptions {
  Layout layout = Layout::correct;
  MmaSum mma_sum = MmaSum::arch;
  std::vector<ShimEdit> edits;
};

struct ModuleOptions {
  int sm = 90;                 // the arch the kernels target (primitives it lacks are errors)
  bool arch_specific = false;  // sm_90a: wgmma and setmaxnreg exist (Target::arch_specific)
  ShimOptions shim;
  std::string compiler;        // empty: $KILN_EMU_CXX, else "g++"
  std::vector<std::string> entries;  // kernel entry points to export for launching
};

// One global buffer a kernel may touch: [data, data + bytes).
struct GlobalRange {
  const void* data = nullptr;
  size_t bytes = 0;
};

class Module {
public:
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs `entry` over the launch's grid, block by block, with args[i] as its i-th (pointer)
  // parameter. The kernel may touch global memory only inside `ranges` through the prelude's
  // copies (checked); errors name the block and thread (a deadlock, a divergent collective, a
  // bad address, a memory fault, a primitive the arch lacks), or say that the launch asks for
  // more shared memory than the arch has. `schedule` orders the threads and lands the copies.
  Status launch(const std::string& entry, const compiler::LaunchShape& shape,
                const std::vector<void*>& args, const std::vector<GlobalRange>& ranges,
                const Schedule& schedule = {}) const;

private:
  friend Expected<std::unique_ptr<Module>> compile_module(const std::string& kernels,
                                                          const ModuleOptions& options);
  Module() = default;
  void* m_handle = nullptr;
  int m_sm = 90;
  void* m_launch = nullptr;
  struct Kernel {
    std::string entry;
    void* thunk = nullptr;  // void(void** args)
    int arity = 0;          // the kernel's parameter count
  };
  std::vector<Kernel> m_kernels;
};

// Compiles kernel text (CUDA C++ without the prelude) against the host shim (built as
// options.shim says). The temporary directory is removed before returning. Errors: no
// host compiler ("g++ not found"), a failed compile (the message carries the compiler's output),
// a failed load, a shim edit whose text does not occur.
Expected<std::unique_ptr<Module>> compile_module(const std::string& kernels,
                                                 const ModuleOptions& options);

// The shim's files, by name, as compiled into kiln (emulation/shim/).
struct ShimFile {
  const char* name;
  const char* text;
};
const std::vector<ShimFile>& shim_files();

}  // namespace kiln::emulation
