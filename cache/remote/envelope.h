// How an entry record travels through the remote tier: a small envelope, signed when the fleet
// shares a secret (HMAC-SHA256 over the key and the record).
//
//   "KILNREM1" | u64 flags (bit 0: signed) | [32-byte HMAC-SHA256(secret, key || record)] | record
#pragma once

#include "support/expected.h"

#include <string>
#include <string_view>

namespace kiln::cache::remote {

// The first bytes of every signed value: magic and flags. A reader with a secret asks the
// backend for values that start with them, so an unsigned value is refused before its body is
// read; a writer without one never replaces a value that starts with them.
std::string signed_prefix();

// Wraps `record` for `key`; signed when `secret` is not empty.
std::string seal(const std::string& key, std::string_view record, const std::string& secret);

enum class Opened { good, damaged, unsigned_entry, bad_signature };

// The record inside `value` stored under `key`, or why it is refused. With a secret, only a
// value signed with that secret for that key is good; without one, signed and unsigned values
// are both taken (the tier is trusted for cubins; host code never: FORMAT.md, "Remote tier").
Opened open(const std::string& key, std::string_view value, const std::string& secret,
            std::string_view& record);

const char* describe(Opened opened);  // "damaged", "unsigned", "badly signed"

}  // namespace kiln::cache::remote
