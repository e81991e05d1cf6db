// What the fake driver reads from a cubin, as the real driver does: target SM, CUDA API version,
// and per kernel its parameters, maximum block and static shared memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::fake_cuda {

struct CubinKernel {
  std::string name;
  std::vector<uint32_t> param_sizes;  // by ordinal
  uint32_t max_threads = 0;           // x*y*z of .maxntid; 0: none declared
  uint64_t static_shared = 0;         // .nv.shared.<name>
};

struct Cubin {
  int sm = 0;           // e.g. 90
  int api_version = 0;  // EIATTR_CUDA_API_VERSION, e.g. 130 for CUDA 13.0; 0: none
  // An arch-specific cubin (built for sm_90a): the driver loads it on that compute capability
  // only. Read from .nv.compat, attribute 9 (NVRTC 13.0's sm_90 and sm_90a cubins of one source
  // differ there and in the command line's text alone), or e_flags (cubin.cpp).
  bool arch_specific = false;
  std::vector<CubinKernel> kernels;
};

// Parses an ELF cubin whose size is read from its own header (the driver API passes no size);
// nullopt when it is not a well-formed CUDA ELF.
std::optional<Cubin> read_cubin(const void* image);

}  // namespace kiln::fake_cuda
