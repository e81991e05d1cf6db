// A fixed pool of threads for compiling a program's kernels at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace kiln::compiler {

// `requested` if > 0, else $KILN_COMPILE_THREADS if a whole number from 1 to 1024, else the core
// count.
int compile_threads(int requested);

// What is wrong with $KILN_COMPILE_THREADS ("" when it is unset or good), for a warning.
std::string compile_threads_env_problem();

// Runs body(0..count-1) on min(threads, count) threads and returns when all are done. The CPU
// time of the threads it starts is added to the calling thread's helper_cpu_ns().
void parallel_for(size_t count, int threads, const std::function<void(size_t)>& body);

// CPU time, in nanoseconds, that threads started by parallel_for calls made on this thread have
// used so far. With the calling thread's own CPU time, what a compile cost, however busy the
// machine was.
uint64_t helper_cpu_ns();
// CPU time this thread has used, in nanoseconds.
uint64_t thread_cpu_ns();

}  // namespace kiln::compiler
