// Parsing and printing of sizes (500M, 2G, 0) and durations (30d, 12h, 15m, 45s).
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <string>

namespace kiln::cache {

// Bytes in "SIZE": digits with an optional binary unit K, M, G or T (KiB, MiB, ... also accepted,
// as are KB/MB/... with the same binary meaning), e.g. "500M", "2G", "0", "4096".
// Fails with a message naming the text on anything else or on overflow.
Expected<uint64_t> parse_size(const std::string& text);

// Seconds in "DURATION": digits followed by s, m, h or d ("30d", "12h"); a bare "0" is zero.
Expected<uint64_t> parse_duration(const std::string& text);

// "1.5 MiB", "312 B": for display only.
std::string format_size(uint64_t bytes);

}  // namespace kiln::cache
