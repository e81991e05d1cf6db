// Real data in and out of `kiln run` and `kiln audit`: --input NAME=PATH.npy, --inputs DIR,
// --save DIR and --save-reference DIR (NumPy .npy files, see support/npy.h).
#pragma once

#include "ir/graph.h"
#include "reference/audit.h"
#include "reference/tensor.h"
#include "support/expected.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::tools {

struct DataFlags {
  std::vector<std::string> inputs;  // --input NAME=PATH, repeatable
  std::string inputs_from;          // --inputs DIR: every input from DIR/NAME.npy ("" for none)
  std::string save;                 // --save DIR: outputs in their dtypes ("" for none)
  std::string save_reference;       // --save-reference DIR: fp64 outputs ("" for none)
};

// Adds --input, --save and --save-reference to `cmd`; `saved` says what --save writes.
void add_data_options(CLI::App* cmd, DataFlags& flags, const std::string& saved);

// What a run or audit works on.
struct RunData {
  std::vector<int64_t> dims;         // one value per symbol (empty for a static graph)
  ir::Graph bound;                   // the graph at `dims`
  reference::InputSource inputs;     // the seed, and the tensors the files give
  std::vector<std::string> paths;    // per input, the file it is read from ("" when drawn)
};

// Reads the --input files, checks each against its graph input (dtype, rank, sizes) and settles
// the dims of a symbolic graph: --dims when given (the files must agree with it), else the sizes
// the files give; creates the --save directories. On failure prints "<command>: ..." or
// "PATH: error: ..." and returns nullopt with `exit_code` set: k_exit_usage for bad usage or
// input (a malformed flag, an input unknown or given twice, an --inputs directory that lacks an
// input's file or is not a directory, a missing, unreadable, malformed or
// oversized file, a wrong dtype or shape, a dim no file gives, a --save path that names a file,
// --save and --save-reference naming one directory), k_exit_failure when a --save directory
// cannot be created (no permission, a read-only disk: the environment's failure, as for an
// output file that cannot be written).
std::optional<RunData> prepare_data(const ir::Graph& graph, const DataFlags& flags,
                                    const std::string& dims, uint64_t seed,
                                    const std::string& command, int& exit_code);

// --seed: the random inputs' seed, a whole number from 0 to 2^64 - 1 (-1 or 2^64 is a usage
// error, not wrapped or clamped).
void add_seed_option(CLI::App* cmd, uint64_t& seed);

// "inputs uniform in [-1, 1]", "inputs x from x.npy, the rest uniform in [-1, 1]", ...
std::string describe_inputs(const RunData& data);
// " at B = 37, S = 100" for a symbolic `graph` (as written) at data.dims; "" for a static one.
std::string describe_dims(const ir::Graph& graph, const RunData& data);
// Adds to a --json report "dims" ({"B": 37}, a symbolic graph only), "inputs" ({"x": PATH},
// when files were read) and "saved" (the files written, when any).
void add_data_json(nlohmann::json& out, const ir::Graph& graph, const RunData& data,
                   const std::vector<std::string>& saved);

// A --max-memory SIZE: "4G", "512M", "64K" or plain bytes; nullopt for anything else or past
// 2^62.
std::optional<int64_t> parse_size(const std::string& text);

// Writes each output of `graph` as DIR/NAME.npy: `outputs` to --save in their dtypes (f32 '<f4',
// f16 '<f2', bf16 '<u2' bits), `fp64` to --save-reference as '<f8' (its integer and bool outputs
// in their dtype, exact as the reference computes them). Returns the paths written;
// fails with "PATH: error: ..." when a file cannot be written.
Expected<std::vector<std::string>> save_outputs(const ir::Graph& graph, const DataFlags& flags,
                                                const std::vector<reference::Tensor>& outputs,
                                                const std::vector<reference::Tensor>& fp64);

}  // namespace kiln::tools
