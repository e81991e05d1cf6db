// The device prelude's text (compiler/prelude.cuh, embedded at build time).
#pragma once

#include <string_view>

namespace kiln::compiler {

// The CUDA text of compiler/prelude.cuh: storage types and the named primitives (mma,
// ldmatrix, cp.async, cvt) that generated kernels call.
std::string_view prelude_source();

}  // namespace kiln::compiler
