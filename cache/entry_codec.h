// One byte encoding of a stored entry, shared by the local store, bundles and the remote tier.
//
// Format (FORMAT.md, "Entry record"): a magic, a version, the key, fields, summary, times and
// payloads, then an XXH3-64 of every byte before it. Decoding checks every length against the
// bytes left, the declared sizes against the cache's limits and the trailing checksum before it
// returns anything; it never decompresses (verify_stored does, one payload at a time).
#pragma once

#include "cache/entry.h"
#include "support/expected.h"

#include <string>
#include <string_view>

namespace kiln::cache {

inline constexpr uint64_t k_entry_codec_version = 1;

// Payloads marked `apart` are written as descriptors only (no bytes): the local store keeps them
// in rows of their own. Bundles and the remote tier write every payload inline.
std::string encode_entry(const StoredEntry& entry);

// Whether `record` ends with the XXH3-64 of every byte before it (false when it is shorter than
// that checksum). decode_entry checks it before reading anything else.
bool record_checksum_holds(std::string_view record);

// The entry in `bytes`; payloads written apart come back with `apart` set and no data. Bookkeeping
// not in the record (last used, hits, stored bytes) is left for the caller. Fails with what was
// wrong: "entry record: <reason>".
Expected<StoredEntry> decode_entry(std::string_view bytes);

}  // namespace kiln::cache
