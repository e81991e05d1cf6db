// What runs an Executable's kernels. Three backends implement it: the CUDA driver path
// (executable.cpp: a static graph, or one bucket of a symbolic one), the bucket dispatch of a
// symbolic graph (symbolic_executable.cpp) and the CPU target (cpu_executable.cpp).
#pragma once

#include "kiln/kiln.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

class Backend {
public:
  virtual ~Backend() = default;
  // As Executable's prepare() and run(), whose contracts they keep. run() gets its arguments
  // checked once, by Executable::run, for every backend: the count, dtype and shape of each
  // tensor against the specs at the symbols' `values` (read from the input shapes, inside their
  // ranges; empty for a static graph). A backend checks only what is its own (the CUDA path:
  // alignment, the entry's bucket).
  virtual Status prepare(void* stream) = 0;
  virtual Status prepare(const std::vector<int64_t>& values, void* stream) = 0;
  virtual Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
                     const std::vector<int64_t>& values, void* stream) = 0;
  // Executable::run_timed: the CPU target's backend runs and times its kernels; the others
  // say they do not.
  virtual Status run_timed(const std::vector<TensorRef>& inputs,
                           const std::vector<TensorRef>& outputs,
                           const std::vector<int64_t>& values, std::vector<KernelTime>& kernels) {
    (void)inputs, (void)outputs, (void)values, (void)kernels;
    return make_error("run_timed times the CPU target's kernels only; this executable's are for ",
                      exe().arch());
  }

protected:
  // `exe` owns the backend and outlives it: its description (specs, dims, device) is read here.
  explicit Backend(const Executable& exe) : m_exe(exe) {}
  const Executable& exe() const { return m_exe; }
  // The executable's symbolic graph (nullopt for a static one) and its name.
  const std::optional<ir::Graph>& graph() const;
  const std::string& graph_name() const;

private:
  const Executable& m_exe;
};

}  // namespace kiln::runtime
