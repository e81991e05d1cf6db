// What a cache entry holds: key fields, named opaque payloads, a display summary, bookkeeping.
#pragma once

#include "cache/codec.h"
#include "cache/key.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cache {

// Payload names by convention (FORMAT.md): "source", "log", "ptx:<kernel>", "cubin:<kernel>";
// any other name is allowed and stored as it is.
inline constexpr const char* k_payload_source = "source";
inline constexpr const char* k_payload_log = "log";
inline constexpr const char* k_payload_ptx_prefix = "ptx:";
inline constexpr const char* k_payload_cubin_prefix = "cubin:";
// Host machine code (the CPU target's object): it runs as the user, unlike a cubin, which runs
// on a GPU. The remote tier takes it only signed (FORMAT.md, "Remote tier").
inline constexpr const char* k_payload_object = "object";

// Whether a payload of this name holds host machine code: "object" or "object:<anything>".
inline bool is_native_payload(const std::string& name) {
  return name.compare(0, 6, k_payload_object) == 0 && (name.size() == 6 || name[6] == ':');
}

// One named blob of opaque bytes.
struct Payload {
  std::string name;
  std::string bytes;
  bool operator==(const Payload&) const = default;
};

// What a producer (the compiler) hands to the cache for one key.
struct Contents {
  std::string summary;  // a small JSON object for display (`kiln ls`, `kiln show`)
  std::vector<Payload> payloads;
  int64_t compile_ms = 0;
};

// Everything about an entry except its payload bytes.
struct EntryInfo {
  std::string key;
  std::vector<KeyField> fields;  // sorted by name
  std::string summary;
  int64_t compile_ms = 0;
  uint64_t stored_bytes = 0;  // compressed payloads + summary + fields: what counts to the cap
  uint64_t raw_bytes = 0;     // uncompressed payloads
  int64_t created_ms = 0;     // unix time in milliseconds
  int64_t last_used_ms = 0;
  int64_t hits = 0;

  // The value of field `name`, or "" when absent.
  std::string field(const std::string& name) const;
};

// Which payloads a read returns (and so decompresses and checks): every one (the default), or
// those whose name equals one of `names` or starts with one of `prefixes`.
struct PayloadSelection {
  bool all = true;
  std::vector<std::string> names;
  std::vector<std::string> prefixes;

  static PayloadSelection only(std::vector<std::string> names,
                               std::vector<std::string> prefixes = {});
  bool wants(const std::string& name) const;
};

// A verified entry: its payloads (all, or those selected) are decompressed and their checksums
// matched.
struct Entry {
  EntryInfo info;
  std::vector<Payload> payloads;

  const Payload* find_payload(const std::string& name) const;
};

// A payload as stored (raw or compressed, with size and checksum).
struct StoredPayload {
  std::string name;
  Encoded encoded;
  // Not here: kept apart from the entry's record (the local store keeps PTX, source and log in
  // rows of their own, read on demand) and not read; `encoded.data` is empty.
  bool apart = false;
  // Set by decode_entry on an inline payload: its bytes lay inside a record whose checksum held,
  // so a consuming verify_stored checks a raw payload's size but does not hash it a second time.
  bool covered = false;
};

// True for the payloads the local store keeps apart: "source", "log" and "ptx:*" (FORMAT.md).
bool stored_apart(const std::string& payload_name);

// A payload name `payloads` hold twice, or "" when each is there once. An entry names each payload
// once: a reader that takes the first of a name and one that takes the last must never differ,
// so every reader and writer of entries refuses a repeat.
std::string repeated_payload(const std::vector<StoredPayload>& payloads);

struct StoredEntry {
  EntryInfo info;
  std::vector<StoredPayload> payloads;
};

// Whether any payload of `entry` holds host machine code (is_native_payload).
inline bool holds_native_code(const StoredEntry& entry) {
  for (const StoredPayload& p : entry.payloads)
    if (is_native_payload(p.name)) return true;
  return false;
}

// How verify_stored establishes that an entry's fields belong to its key: by hashing them, or
// not again because the caller found them equal to a request's whose key (make_key of those same
// fields) is the stored key; the record's checksum, checked on decoding, covers both.
enum class KeyCheck { rehash, matches_request };

// Decodes the payloads of `stored` that `want` selects (one at a time) and checks that its fields
// hash to its key; the error says which payload or field failed. The entry holds those payloads.
// Payloads still `apart` are not there to check.
Expected<Entry> verify_stored(const StoredEntry& stored, const PayloadSelection& want = {});
// Checks `stored` as verify_stored does (every payload present), keeping nothing: each payload is
// decoded, checked and freed before the next, so at most one payload's raw bytes are held. The
// declared sizes are bounded first (k_max_payload_bytes, k_max_entry_bytes).
Status check_stored(const StoredEntry& stored);
// The same, consuming `stored`: raw payloads move into the entry instead of being copied, and a
// `covered` raw payload is not hashed again (the record's checksum covered its bytes).
Expected<Entry> verify_stored(StoredEntry&& stored, const PayloadSelection& want = {},
                              KeyCheck key_check = KeyCheck::rehash);

}  // namespace kiln::cache
