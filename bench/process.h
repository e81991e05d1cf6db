// Starts `kiln` processes for the benchmarks and collects their output and wall time.
#pragma once

#include <string>
#include <vector>

namespace kiln::bench {

struct ProcessResult {
  int exit_code = -1;
  std::string out;  // standard output
  double wall_ms = 0;
};

// Starts every command at once (argv[0] is the program path), waits for all of them, and returns
// their results in order. Standard error goes to the benchmark's own stderr.
std::vector<ProcessResult> run_together(const std::vector<std::vector<std::string>>& commands);

}  // namespace kiln::bench
