// Reads registers, local memory, spills and static shared memory per kernel out of a cubin itself
// (its ELF sections), so the report never depends on NVRTC's log; and checks a cubin before the
// driver is handed it.
#pragma once

#include "compiler/artifact.h"
#include "support/expected.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::compiler {

// One report per `.text.NAME` section, in section order:
// - registers: the EIATTR_REGCOUNT attribute of the global `.nv.info` section naming the kernel's
//   symbol (what cuFuncGetAttribute(NUM_REGS) reports);
// - local_bytes: EIATTR_FRAME_SIZE, the kernel's stack frame per thread (CU_FUNC_ATTRIBUTE_
//   LOCAL_SIZE_BYTES): spills and local arrays live there;
// - spill_store_bytes / spill_load_bytes: the bytes the kernel's STL / LDL instructions move, each
//   counted once (SASS of sm_70 and newer: 16-byte instructions, opcode in the low 12 bits, width
//   in bits 73-75). ptxas counts exactly these as its "bytes spill stores/loads" when the frame
//   holds no local array (checked against ptxas's log for every arch in tests/compiler); a local
//   array's traffic is counted here too (cos and sin keep one for their slow path), so this bounds
//   ptxas's spills from above, and compile_lowered takes ptxas's figure where its log has one;
// - static_smem_bytes: the size of `.nv.shared.NAME`, less the 1 KiB window the driver reserves
//   per block that sm_90 and newer cubins put at its start (marked by `.nv.reservedSmem.*`
//   symbols): the kernel's own, as ptxas's "bytes smem".
// A cubin that is not a 64-bit CUDA ELF, whose sections, symbols or attributes run past its
// bytes, that has more than one symbol table, or whose code is not whole 16-byte instructions, is
// an error naming what is wrong; the reader never reads outside `cubin`.
Expected<std::vector<std::pair<std::string, KernelReport>>> read_cubin_report(
    std::string_view cubin);

// Whether the driver may be handed `cubin` to launch kernel `entry` with `params`, checked
// before any cubin of an artifact is loaded: cuModuleLoadData takes no size (the driver reads it
// from the ELF's own headers) and cuLaunchKernel reads each parameter's bytes as the cubin sizes
// it, so a forged or damaged cubin could otherwise make the driver read past kiln's buffers or
// its own. The cubin must be a 64-bit little-endian CUDA ELF whose headers, sections, segments
// and notes lie within its bytes, and whose section links, symbols and relocations lie within
// what they name; built for `target` (its SM, and `a` or not, where the ELF ABI is 7 or 8); with
// one function symbol `entry` within its code, described by one attribute section; whose
// parameters are exactly `params`, each of the size kiln passes, within the parameter bank and
// its constant section. Every kernel's attribute section is read whole, and its records that
// name symbols, list instructions or have one length checked (check_attributes). Attributes of
// unknown layout are not read (docs/cache.md, "Trust"). The error names what is wrong.
Status check_cubin(std::string_view cubin, const std::string& entry,
                   const std::vector<KernelParam>& params, const Target& target);
// check_cubin of every kernel of CUDA artifact `artifact`: the cubin it runs (its own, or that of
// the kernel its binary_of names) with its own parameters. The error names the kernel:
// "kernel 'NAME': cubin: ...".
Status check_cubins(const Artifact& artifact);

// Kernel `entry`'s report as compile_lowered keeps it: registers, frame and shared memory from
// `cubin` (NVRTC's log can come back empty: it did on a machine with a GPU visible, compiling on
// two or more threads), registers from the log where the cubin has no count; spills from
// ptxas's `log` where it reports the kernel, else the cubin's (an upper bound). A cubin that
// cannot be read leaves the log's report and says why in `note`.
KernelReport kernel_report(std::string_view cubin, const std::string& entry, std::string_view log,
                           std::string& note);

}  // namespace kiln::compiler
