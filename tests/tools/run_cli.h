// Runs the kiln binary as a child process and captures its exit status, stdout and stderr.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kiln::testing {

struct CliResult {
  int exit_code = -1;    // -1 when the process did not exit normally
  int signal = 0;        // the signal that ended it, if any
  std::string out;
  std::string err;
};

// An `env` value that sets the variable to the empty string (an empty value unsets it).
inline const std::string k_set_empty = std::string(1, '\0');

// Runs KILN_BIN with `args`, feeding `input` on stdin; `env` entries are added to the
// environment (an empty value unsets the variable; k_set_empty sets it empty).
CliResult run_kiln(const std::vector<std::string>& args, const std::string& input = {},
                   const std::map<std::string, std::string>& env = {});

}  // namespace kiln::testing
