// A lowered kiln program built for the host: its kernels run in launch order on host buffers.
#pragma once

#include "compiler/compiler.h"
#include "emulation/module.h"
#include "ir/graph.h"
#include "reference/tensor.h"
#include "support/expected.h"

#include <memory>
#include <vector>

namespace kiln::emulation {

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
