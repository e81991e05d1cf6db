// Payload encoding: stored raw or as a zstd frame, with an XXH3-64 checksum of the raw bytes.
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::cache {

// Largest raw payload the cache accepts or will decode, and the largest raw total of one entry:
// kiln's own entries are a few MiB at most (FORMAT.md), so a declared size past these is damage
// or an attack, refused before anything is allocated.
inline constexpr uint64_t k_max_payload_bytes = uint64_t{256} << 20;
inline constexpr uint64_t k_max_entry_bytes = uint64_t{512} << 20;

// How a payload's bytes are stored. Cubins and the artifact are read on every hit and stored raw
// (decoding zstd would cost ~10x the rest of a hit); PTX, source and log are compressed.
enum class Encoding : uint64_t { raw = 0, zstd = 1 };

// A payload as stored: its bytes (raw or a zstd frame), the raw size, and the raw bytes' checksum.
struct Encoded {
  Encoding encoding = Encoding::zstd;
  std::string data;
  uint64_t raw_size = 0;
  uint64_t checksum = 0;
};

// XXH3-64, with the widest vector unit the CPU has (chosen at run time; the value never changes).
uint64_t checksum(std::string_view bytes);

// The same checksum of bytes given in parts: update() with each, in order, then digest().
class StreamingChecksum {
public:
  StreamingChecksum();
  ~StreamingChecksum();
  StreamingChecksum(const StreamingChecksum&) = delete;
  StreamingChecksum& operator=(const StreamingChecksum&) = delete;
  void update(std::string_view bytes);
  uint64_t digest() const;

private:
  void* m_state;  // XXH3_state_t
};

// An identity of bytes compared within one process (a record read twice, before and after
// another process or writer may have replaced it): XXH3-128 under a seed drawn once per process
// from the kernel's random source and never written anywhere. Not a MAC: it makes other bytes
// that match hard to write without the seed, not impossible, so what it guards is checked again
// too. Never stored: a fingerprint means nothing to another process.
struct Fingerprint {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const Fingerprint&) const = default;
};
Fingerprint fingerprint(std::string_view bytes);

// Fails only when the payload is too large or zstd fails.
Expected<Encoded> encode(const std::string& raw, Encoding encoding = Encoding::zstd);

// Decodes and verifies size and checksum; fails with a message saying what did not match.
Expected<std::string> decode(const Encoded& encoded);
// What decoding checks of a raw payload: its size and checksum, or only its size (its bytes were
// covered by a checksum already checked, the entry record's).
enum class RawCheck { size_and_checksum, size };
// The same, taking the stored bytes: a raw payload is moved, not copied.
Expected<std::string> decode(Encoded&& encoded, RawCheck check = RawCheck::size_and_checksum);

}  // namespace kiln::cache
