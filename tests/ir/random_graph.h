// Seeded random graph generator for round-trip and hash property tests.
#pragma once

#include "ir/graph.h"

#include <cstdint>

namespace kiln::ir::testing {

// A valid graph drawn from `seed`: 1-4 inputs, up to 24 ops of every kind, some values named and
// some nested, every computed value used. Same seed, same graph.
Graph random_graph(uint64_t seed);

}  // namespace kiln::ir::testing
