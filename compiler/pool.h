// A fixed pool of threads for compiling a program's kernels at once.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace kiln::compiler {

// `requested` if > 0, else $KILN_COMPILE_THREADS if a whole number from 1 to 1024, else the core
// count.
int compile_threads(int requested);

// What is wrong with $KILN_COMPILE_THREADS ("" when it is unset or good), for a warning.
std::string compile_threads_env_problem();

// Runs body(0..count-1) on min(threads, count) threads and returns when all are done.
void parallel_for(size_t count, int threads, const std::function<void(size_t)>& body);

}  // namespace kiln::compiler
