// A fixed pool of threads for compiling a program's kernels at once.
#pragma once

#include <cstddef>
#include <functional>

namespace kiln::compiler {

// `requested` if > 0, else $KILN_COMPILE_THREADS if a positive number, else the core count.
int compile_threads(int requested);

// Runs body(0..count-1) on min(threads, count) threads and returns when all are done.
void parallel_for(size_t count, int threads, const std::function<void(size_t)>& body);

}  // namespace kiln::compiler
