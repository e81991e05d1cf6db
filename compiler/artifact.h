// The compiled program as plain data (kernels, launch shapes, typed parameters, reports) and its
// bytes.
//
// Serialized layout (format 5, all integers little-endian): "KILNART\0", u32 format version, then
// tagged fields: u32 tag, u64 payload length, payload. A tag's low 31 bits number the field; bit 31
// set means a reader that does not know the field must refuse the artifact (a field that changes
// what runs), clear means it may skip it (display only). An empty field of tag 0 ends the
// artifact (a cut at a field boundary is refused). A field left out reads as its default
// (empty, zero), so each kernel record holds only its own target's fields: CUDA kernels their entry,
// binaries, launch shape, grid terms and report; CPU kernels their work items and scratch. Later
// fields extend the format without another version. Strings are u64 length + bytes, vectors u64
// count + elements, a size term i64 coef, i64 divisor, u64 count + u32 symbols. deserialize()
// checks every length against the bytes left and never trusts a count. Formats 2 to 4 (fields in
// declaration order) still read, and migrate: their dims become typed parameters.
#pragma once

#include "compiler/target.h"
#include "compiler/tensor_map.h"
#include "support/expected.h"

#include <array>
#include <optional>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::compiler {

// 2: adds the bucket and the size terms of symbolic graphs (empty for static ones).
// 3: adds the CPU target's object code and each kernel's work items and scratch (empty and zero
//    for CUDA); version 2 records still read.
// 4: adds each kernel's binary_of (empty in versions 2 and 3, which still read).
// 5: tagged fields (above); typed parameters (the symbols' ints among them); cluster dims.
inline constexpr uint32_t k_artifact_format_version = 5;

enum class BufferRole : uint8_t { input, output, temporary };

// A device buffer of the program: graph input #i, graph output #i, or temporary #i.
struct BufferRef {
  BufferRole role = BufferRole::input;
  uint32_t index = 0;
  bool operator==(const BufferRef&) const = default;
};

// What a kernel parameter passes: a pointer to a buffer; the value of one of the graph's symbols
// (an int); or a 128-byte CUDA tensor map of a buffer, by value (TMA on sm_90a), which the
// launcher encodes with cuTensorMapEncodeTiled from `map` (compiler/tensor_map.h) at each run.
enum class ParamKind : uint8_t { pointer, dim, tensor_map };

// A size that follows a symbolic graph's dims: ceil(coef * product of values[symbols] / divisor).
struct SizeTerm {
  int64_t coef = 1;
  std::vector<uint32_t> symbols;  // indices into the graph's symbols, with repetition
  int64_t divisor = 1;
  // The value at the symbols' `values`; nullopt when a symbol index is out of range or the
  // value would pass 2^62 (only a corrupt term gets there).
  std::optional<uint64_t> at(const std::vector<int64_t>& values) const;
  bool operator==(const SizeTerm&) const = default;
};

// One kernel parameter. Buffers come first (stores, then reads), then the dims.
struct KernelParam {
  BufferRef buffer;      // pointer, tensor_map: the buffer
  uint64_t bytes = 0;    // pointer, tensor_map: the bytes the buffer holds
  bool written = false;  // the kernel stores to it
  ParamKind kind = ParamKind::pointer;
  uint32_t symbol = 0;   // dim: the index of the graph symbol whose value it passes
  std::string map{};     // tensor_map: how to encode it, TensorMapSpec's text
  // tensor_map of a symbolic graph: its dims, then its strides (rank + rank - 1 terms), as size
  // terms of the symbols; `map` holds them at the bucket's upper bounds. Empty: `map` as it is.
  std::vector<SizeTerm> map_terms{};
  bool operator==(const KernelParam&) const = default;
};

// A parameter's size and alignment in CUDA's parameter space: 8 and 8 for a pointer, 4 and 4 for
// a dim, 128 and 64 for a tensor map.
uint32_t param_size(ParamKind kind);
uint32_t param_align(ParamKind kind);
// The bytes `params` take in CUDA's parameter space, each aligned as param_align says.
uint64_t param_space_bytes(const std::vector<KernelParam>& params);
// A constructor for the plan's dims.
KernelParam dim_param(uint32_t symbol);

struct LaunchShape {
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t dynamic_smem_bytes = 0;  // above 48 KiB the launcher must raise the function's limit
  // Thread-block cluster dims (sm_90 and newer); {1, 1, 1}: no cluster. The grid is a multiple of
  // it in each dim. Nothing plans clusters yet; the launcher refuses a kernel with one by name.
  std::array<uint32_t, 3> cluster{1, 1, 1};
  // A persistent kernel (sm_90a's wgmma matmul): its blocks loop over grid[0] work tiles, so the
  // launcher runs min(grid[0], the device's multiprocessors) blocks; any count from 1 is correct.
  bool persistent = false;
  bool clustered() const { return cluster != std::array<uint32_t, 3>{1, 1, 1}; }
  bool operator==(const LaunchShape&) const = default;
};

// `launch` with its grid from `grid` (x, y, z size terms of a symbolic graph; none: unchanged)
// at `values`; nullopt when a term is out of range, zero, or above launch.grid (which holds the
// grid at the bucket's upper bounds).
std::optional<LaunchShape> launch_at(const LaunchShape& launch, const std::vector<SizeTerm>& grid,
                                     const std::vector<int64_t>& values);

// Every term of `terms` at `values`; nullopt when one is out of range (SizeTerm::at).
std::optional<std::vector<uint64_t>> sizes_at(const std::vector<SizeTerm>& terms,
                                              const std::vector<int64_t>& values);

// Tensor-map parameter `p`'s description at the symbols' `values`: `map` read back, with its
// dims and strides replaced by `map_terms` at `values` where it has them (a symbolic graph's), then
// checked against the driver's rules (check_tensor_map). The error names what is wrong.
Expected<TensorMapSpec> tensor_map_at(const KernelParam& p, const std::vector<int64_t>& values);
// The same from a description already read back (TensorMapSpec, not its text) and its terms, so
// that a launcher reads each map's text once, at load, rather than at every run.
Expected<TensorMapSpec> tensor_map_at(TensorMapSpec description, const std::vector<SizeTerm>& terms,
                                      const std::vector<int64_t>& values);

// What ptxas reported for one kernel (-1: not reported).
struct KernelReport {
  int32_t registers = -1;
  int32_t spill_store_bytes = 0;
  int32_t spill_load_bytes = 0;
  int32_t static_smem_bytes = 0;
  int32_t local_bytes = 0;  // the stack frame per thread (spills, local arrays)
  int32_t spill_bytes() const { return spill_store_bytes + spill_load_bytes; }
  bool operator==(const KernelReport&) const = default;
};

struct KernelArtifact {
  // Both targets.
  std::string name;                 // kiln's name, e.g. "k0_matmul_tf32"
  std::vector<KernelParam> params;  // in the kernel's parameter order
  // CUDA target only (empty or default on the CPU).
  std::string entry;  // the extern "C" entry point in the cubin
  std::string cubin;
  std::string ptx;
  LaunchShape launch;
  KernelReport report;
  // Empty, or the kernel whose binary (cubin, PTX, entry and ptxas report) this one runs: its
  // source was the same but for the name, so it was compiled once. A cache entry stores that
  // binary once; cubin and ptx here hold copies.
  std::string binary_of;
  // CUDA kernels: where the launch configuration came from ("model": the analytic model; a
  // matmul's or attention's tile from its schedule provider) and a matmul's tile ("128x256x64,
  // 2x4 warps, 4 stages") or an attention's ("64x64, 4 warps, 2 stages"); empty on the CPU.
  std::string tile, schedule;
  // Symbolic graphs only: the grid in x, y, z as size terms (launch.grid holds it at the
  // bucket's upper bounds); the symbols' values are the `dim` parameters.
  std::vector<SizeTerm> grid;
  // CPU target only: the work items (the product of these terms at the dims) and the scratch
  // floats each thread needs (compiler/cpu/codegen.h).
  std::vector<SizeTerm> items;
  uint64_t scratch_floats = 0;
  // Shared memory per block: static (ptxas) plus dynamic (launch shape).
  int64_t smem_bytes() const { return report.static_smem_bytes + launch.dynamic_smem_bytes; }
  bool operator==(const KernelArtifact&) const = default;
};

struct Artifact {
  // Where its kernels run: the Target it was compiled for (the CPU's name and features resolved).
  // Formats 2 to 4, and format 5 before the field, derive it from `arch`.
  Target target;
  std::string arch;           // its display name: "sm_90", "cpu:x86-64-v3", "emulate:sm_90"
  std::string precision;      // the graph mode after resolving auto
  std::string decision;       // how it was resolved, e.g. "auto -> high on sm_90 (...)"
  std::string nvrtc_version;  // for display: "13.0 (libnvrtc.so.13 109338064)", or "LLVM 16.0.6"
  std::string source;         // the generated CUDA source of every kernel, prelude included
  std::string log;            // NVRTC's logs, kernel by kernel
  std::vector<std::string> fallbacks;
  std::vector<uint64_t> input_bytes;      // per graph input, in declaration order
  std::vector<uint64_t> output_bytes;     // per graph output
  std::vector<uint64_t> temporary_bytes;  // per temporary
  uint64_t workspace_bytes = 0;           // all temporaries, each 256-byte aligned
  std::vector<KernelArtifact> kernels;    // launched in this order
  // Symbolic graphs only (empty for static ones): the bucket, one [lo, hi] per symbol, and the
  // bytes of every buffer as size terms (the *_bytes above hold them at the upper bounds).
  std::vector<std::array<int64_t, 2>> bucket;
  std::vector<SizeTerm> input_sizes, output_sizes, temporary_sizes;
  // CPU target only: every kernel's object code, one ELF object.
  std::string object;
  bool is_cpu() const { return target.is_cpu(); }
  // The emulate target's: CUDA kernels without binaries, `source` their text.
  bool is_emulated() const { return target.is_emulated(); }
  bool operator==(const Artifact&) const = default;
};

// Each parameter's pointer, from the graph inputs, outputs and temporaries its buffer names
// (nullptr for a dim); one binding for every backend (the CUDA executable, the CPU target). Fails
// naming the kernel and parameter whose buffer index is out of range: only a damaged or foreign
// artifact has one.
Expected<std::vector<void*>> bind_buffers(const KernelArtifact& kernel,
                                          const std::vector<void*>& inputs,
                                          const std::vector<void*>& outputs,
                                          const std::vector<void*>& temporaries);

// For each kernel, the index of the kernel whose binary it runs: the earlier kernel with a binary
// of its own that its binary_of names, else itself (binary_of empty, or naming no such kernel:
// deserialize refuses the latter). One lookup for every reader of binary_of.
std::vector<size_t> binary_owners(const std::vector<KernelArtifact>& kernels);

std::string serialize(const Artifact& artifact);
// The Target an artifact's `arch` names, for bytes that carry no target field: "cpu:NAME" (its
// features unknown), "emulate:sm_XX", else a CUDA arch ("sm_90"; CUDA of no arch if unparsable).
Target target_of_arch(std::string_view arch);

// Rejects a wrong magic or version, truncated or trailing bytes, absurd counts, an unknown field
// marked required or an unknown parameter kind (both naming the format a newer kiln wrote), a
// kernel without a name, and a binary_of that names no earlier kernel with a binary of its own.
Expected<Artifact> deserialize(std::string_view bytes);

}  // namespace kiln::compiler
