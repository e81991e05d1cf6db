// Canonical bytes of a graph and their XXH3-128 hash: the graph's identity in the cache.
#pragma once

#include "ir/graph.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::ir {

// Bumped whenever the byte layout below changes, so old hashes never collide with new ones.
inline constexpr uint32_t k_canonical_format_version = 1;
// The version a graph with symbolic dims is written in: after the version, u32 symbol count and
// each symbol's i64 lo and hi (numbered by first use); a symbolic dim is written as -(index + 1).
// Names never enter, so renaming a dim keeps the hash; changing a range changes it.
inline constexpr uint32_t k_canonical_symbolic_version = 2;

// Bytes covering every op, operand, attribute, shape, dtype and precision annotation, in node
// order; value names, comments and layout of the source do not enter.
std::string canonical_bytes(const Graph& graph);

// The graph `bytes` (from canonical_bytes) describe, verified as the parser verifies a graph;
// values get names by kind (inputs x0, x1, ...), the graph `name`. Fails on bytes that are not
// a canonical graph of this format version, saying what is wrong.
Expected<Graph> graph_from_canonical(std::string_view bytes, std::string name);

struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const Hash128&) const = default;
  // 32 lower-case hex digits, high half first.
  std::string hex() const;
};

Hash128 hash_bytes(const void* data, size_t size);
Hash128 graph_hash(const Graph& graph);

}  // namespace kiln::ir
