// Runs a CPU target's artifact: its object code loaded through ORC, its kernels in order on host
// buffers, each kernel's work items split over a pool of KILN_CPU_THREADS threads.
#pragma once

#include "compiler/artifact.h"
#include "compiler/cpu/jit.h"
#include "support/expected.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::runtime {

// $KILN_CPU_THREADS when a whole number from 1 to 1024, else the core count.
int cpu_threads();
// What is wrong with $KILN_CPU_THREADS ("" when it is unset or good), for a warning.
std::string cpu_threads_env_problem();

class CpuProgram {
 public:
  ~CpuProgram();

  // Loads the artifact's object (fails when it does not link or lacks an entry).
  static Expected<std::unique_ptr<CpuProgram>> load(compiler::Artifact artifact);

  const compiler::Artifact& artifact() const { return m_artifact; }

  // Runs the program on `inputs` (graph input order, in device layout: f32, or 16-bit bits) at
  // the symbols' `dims` (none for a static graph) and returns the outputs. Fails when an input's
  // size does not match or a dim is outside the compiled bucket. The program keeps its
  // temporaries and its threads' scratch from one run to the next (at the largest size a run
  // needed); a run made while another is under way allocates its own. Runs may be concurrent.
  Expected<std::vector<std::vector<unsigned char>>> run(
      const std::vector<std::vector<unsigned char>>& inputs, const std::vector<int64_t>& dims,
      int threads = 0) const;

  // The same on caller-owned buffers (inputs, then outputs, in graph order). With `kernel_us`,
  // each kernel's wall time in microseconds, in artifact order (0 for one with no work items).
  Status run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
             const std::vector<int64_t>& dims, int threads = 0,
             std::vector<double>* kernel_us = nullptr) const;

  // Byte sizes of the inputs and outputs at `dims`.
  Expected<std::vector<uint64_t>> input_bytes(const std::vector<int64_t>& dims) const;
  Expected<std::vector<uint64_t>> output_bytes(const std::vector<int64_t>& dims) const;

 private:
  struct Arena;  // temporaries and scratch kept between runs
  compiler::Artifact m_artifact;
  std::unique_ptr<compiler::cpu::LoadedObject> m_object;
  mutable std::mutex m_arena_mutex;
  mutable std::unique_ptr<Arena> m_arena;
};

}  // namespace kiln::runtime
