// Parses kiln's graph text format (.kg) into a verified Graph.
#pragma once

#include "ir/graph.h"

#include <string>
#include <string_view>

namespace kiln::ir {

// Graph files larger than this are refused rather than read into memory.
inline constexpr size_t k_max_source_bytes = size_t{64} << 20;

// Parses `text`; `file` names it in messages. On failure the error message is
// "file:line:col: error: what was expected or what is wrong" (one line, no trailing newline).
Expected<Graph> parse_graph(std::string_view text, std::string_view file);

// Reads and parses a file ("-" reads standard input). A file that cannot be read gives
// "file: error: cannot read: <reason>" (a directory reads as "Is a directory").
Expected<Graph> parse_graph_file(const std::string& path);

}  // namespace kiln::ir
