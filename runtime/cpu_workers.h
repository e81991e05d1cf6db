// The CPU target's worker threads: started once per process, grown on demand, shared by every
// program and every calling thread, so that a kernel's run costs no thread creation.
#pragma once

#include <cstddef>
#include <functional>

namespace kiln::runtime {

// Runs part(0 .. parts-1) on up to `threads` threads, the calling thread among them, and
// returns when every part is done. The pool grows to `threads - 1` workers the first time that
// many are asked for; when the system will not start a thread, the parts run on the threads
// there are (the caller at least), never not at all. Any number of callers may run at once. A
// part that throws on the calling thread ends the run (parts not yet started do not start) and
// the exception reaches the caller once no worker holds the run; one that throws on a worker
// ends the process, as an exception leaving any thread does.
void run_parts(size_t parts, int threads, const std::function<void(size_t)>& part);

// Worker threads started so far.
int cpu_workers();

}  // namespace kiln::runtime
