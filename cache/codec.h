// Payload encoding: zstd compression plus an XXH3-64 checksum of the uncompressed bytes.
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <string>

namespace kiln::cache {

// Largest uncompressed payload the cache accepts or will decompress (guards against a corrupt
// size field asking for an unbounded allocation).
inline constexpr uint64_t k_max_payload_bytes = uint64_t{1} << 30;

// A payload as stored: compressed bytes, the uncompressed size, and the checksum of the
// uncompressed bytes.
struct Encoded {
  std::string compressed;
  uint64_t raw_size = 0;
  uint64_t checksum = 0;
};

uint64_t checksum(const std::string& bytes);

// Fails only when the payload is too large or zstd fails.
Expected<Encoded> encode(const std::string& raw);

// Decompresses and verifies size and checksum; fails with a message saying what did not match.
Expected<std::string> decode(const Encoded& encoded);

}  // namespace kiln::cache
