// Prints a Graph in canonical text form: print(parse(print(g))) == print(g).
#pragma once

#include "ir/graph.h"

#include <string>

namespace kiln::ir {

// Two-space indentation, one statement per named value, values written nested stay nested,
// default attributes omitted, literals in shortest round-trip form. Ends with a newline.
std::string print_graph(const Graph& graph);

// One expression for node `id` (its nested operands inline), e.g. "gelu(add(h, b1))".
std::string print_expr(const Graph& graph, NodeId id);

}  // namespace kiln::ir
