// Reads registers, stack frame, spills and shared memory per kernel out of a ptxas -v log (kept
// for diagnostics and as the fallback of read_cubin_report, compiler/cubin_report.h).
#pragma once

#include "compiler/artifact.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::compiler {

// One report per "Compiling entry function 'NAME'" section, in log order. Lines kiln does not
// recognise are ignored; a kernel with no "Used N registers" line keeps registers = -1.
std::vector<std::pair<std::string, KernelReport>> parse_ptxas_log(std::string_view log);

}  // namespace kiln::compiler
