// Cache keys: XXH3-128 over a format version and the caller's tagged key fields.
#pragma once

#include <string>
#include <vector>

namespace kiln::cache {

// Bumped whenever the key layout (or anything that makes old entries unreadable) changes, so that
// old entries stop matching by themselves.
inline constexpr unsigned k_key_format_version = 1;

// One tagged input of a key: e.g. {"arch", "sm_90"} or {"graph", <canonical bytes>}. Values are
// opaque bytes; names should be unique within one key.
struct KeyField {
  std::string name;
  std::string value;
  bool operator==(const KeyField&) const = default;
};

// The key of `fields`: 32 lower-case hex digits. The order of `fields` does not matter (they are
// sorted by name); every name and value is length-prefixed, so no field can run into the next.
std::string make_key(const std::vector<KeyField>& fields);

// Sorts fields by name (then value): the canonical order the cache stores and compares them in.
void sort_fields(std::vector<KeyField>& fields);
// True when `fields` are in that order already.
bool fields_sorted(const std::vector<KeyField>& fields);

// True when `requested` (in any order) equals `stored` (sorted by name); copies only an unsorted
// request.
bool same_fields(const std::vector<KeyField>& requested, const std::vector<KeyField>& stored);

// True when `text` is 1..32 lower-case hex digits (a key or a key prefix).
bool is_key_prefix(const std::string& text);

// One difference between a request's fields and a stored entry's fields.
struct FieldDiff {
  std::string name;
  std::string requested;  // empty when `requested_present` is false
  std::string stored;     // empty when `stored_present` is false
  bool requested_present = true;
  bool stored_present = true;
};

// The fields whose values differ between `requested` and `stored`, by name, sorted by name;
// a field present on one side only is a difference too.
std::vector<FieldDiff> diff_fields(const std::vector<KeyField>& requested,
                                   const std::vector<KeyField>& stored);

}  // namespace kiln::cache
