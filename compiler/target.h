// Where kernels run, as one value: CUDA at an arch, or a CPU by its LLVM name.
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::compiler {

struct Target {
  enum class Kind : uint8_t { cuda, cpu };
  Kind kind = Kind::cuda;
  int sm = 0;       // cuda: compute capability x 10; 0: the GPU's
  std::string cpu;  // cpu: an LLVM CPU name; "native": this machine's
  bool is_cpu() const { return kind == Kind::cpu; }
  // "cuda", "cuda:sm_90", "cpu:native", "cpu:x86-64-v3".
  std::string name() const;
};

// Parses "cuda", "cuda:sm_90" (or "sm_90"), "cpu" (this machine's CPU) and "cpu:NAME". The error
// names the text and what is accepted; whether LLVM knows a CPU name is cpu_machine()'s to say.
Expected<Target> parse_target(std::string_view text);

}  // namespace kiln::compiler
