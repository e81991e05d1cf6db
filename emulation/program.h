// A lowered kiln program built for the host: its kernels run in launch order on host buffers.
#pragma once

#include "compiler/compiler.h"
#include "emulation/module.h"
#include "ir/graph.h"
#include "reference/tensor.h"
#include "support/expected.h"

#include <memory>
#include <span>
#include <vector>

namespace kiln::emulation {

// A program's kernels in launch order and its buffers, as the emulator runs them: from a lowered
// program (build_program) or from an emulate-target artifact (the runtime's emulated
// executables, compiler::compile_emulated).
struct LaunchPlan {
  struct Kernel {
    std::string name, entry;
    std::vector<compiler::KernelParam> params;
    compiler::LaunchShape launch;
    std::vector<compiler::SizeTerm> grid;
  };
  std::vector<Kernel> kernels;
  std::vector<uint64_t> output_bytes, temporary_bytes;  // at the bucket's upper bounds
  std::vector<compiler::SizeTerm> output_sizes, temporary_sizes;  // symbolic graphs
  std::vector<std::string> entries() const;
};
LaunchPlan launch_plan(const compiler::LoweredProgram& program);
LaunchPlan launch_plan(const compiler::Artifact& artifact);

// Runs `plan`'s kernels from `module` in order on host copies of `inputs` (each input's bytes, in
// calling-convention order) at the symbols' `values` (empty for a static graph): buffers carry
// poisoned guard bytes and outputs start poisoned (NaN), so unwritten elements and stores past a
// buffer are caught. Returns each output's bytes (its size term at `values`, else its planned
// bytes). Errors name the kernel: one that fails under emulation (block and thread), a store
// outside its buffer, a parameter the plan does not hold.
Expected<std::vector<std::vector<unsigned char>>> run_launch_plan(
    const Module& module, const LaunchPlan& plan,
    const std::vector<std::span<const unsigned char>>& inputs, const std::vector<int64_t>& values,
    const Schedule& schedule = {});

class Program {
public:
  // Runs every kernel in order on `inputs` (calling-convention order, each of its input's exact
  // type; for a symbolic graph, at sizes inside the compiled bucket: buffers, grids and the
  // kernels' size parameters follow them) and returns the outputs in declaration order, each
  // value exactly the stored element. `schedule` orders each block's threads and lands its
  // cp.async copies (a correct kernel gives the same result under every schedule).
  // Buffers carry poisoned guard bytes and outputs start poisoned (NaN), so unwritten elements
  // and stores past a buffer are caught. Errors: wrong inputs, a kernel that fails under
  // emulation (the message names the kernel, block and thread), a store outside its buffer.
  Expected<std::vector<reference::Tensor>> run(const std::vector<reference::Tensor>& inputs,
                                               const Schedule& schedule = {}) const;

  const compiler::LoweredProgram& lowered() const { return m_lowered; }
  // The kernel text that was compiled (without the prelude).
  const std::string& source() const { return m_source; }

private:
  friend Expected<Program> build_program_from_source(const ir::Graph& graph,
                                                     compiler::LoweredProgram lowered,
                                                     std::string source, ShimOptions shim);
  Program(ir::Graph graph, compiler::LoweredProgram lowered)
      : m_graph(std::move(graph)), m_lowered(std::move(lowered)) {}
  ir::Graph m_graph;
  compiler::LoweredProgram m_lowered;
  LaunchPlan m_plan;
  std::string m_source;
  std::shared_ptr<Module> m_module;
};

// Compiles a lowered program's exact kernel text for the host against the shim built as `shim`
// says (see compile_module for errors).
Expected<Program> build_program(const ir::Graph& graph, compiler::LoweredProgram lowered,
                                ShimOptions shim = {});

// Like build_program(), but compiles `source` (kernel text for the lowered program's kernels,
// e.g. the generated text edited by hand while debugging) instead of the generated text.
Expected<Program> build_program_from_source(const ir::Graph& graph, compiler::LoweredProgram lowered,
                                            std::string source, ShimOptions shim = {});

// compiler::lower() then build_program(). Errors of lower() (a bad arch or precision for the
// graph) come back unchanged.
Expected<Program> build_program(const ir::Graph& graph, const compiler::CompileOptions& options,
                                ShimOptions shim = {});

}  // namespace kiln::emulation
