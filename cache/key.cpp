// Key composition: length-prefixed tagged fields under a format version, hashed with XXH3-128.
#include "cache/key.h"

#include "support/byte_writer.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <map>

namespace kiln::cache {
namespace {

std::string hex64(uint64_t v) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = k_digits[v & 0xf];
  return out;
}

bool field_less(const KeyField& a, const KeyField& b) {
  return a.name != b.name ? a.name < b.name : a.value < b.value;
}

std::string hash_sorted(const std::vector<KeyField>& fields) {
  size_t size = 32;
  for (const KeyField& field : fields) size += 16 + field.name.size() + field.value.size();
  ByteWriter w;
  w.reserve(size);
  w.raw("kiln-cache-key");
  w.u64(k_key_format_version);
  w.u64(fields.size());
  for (const KeyField& field : fields) {
    w.str(field.name);
    w.str(field.value);
  }
  std::string bytes = w.take();
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return hex64(h.high64) + hex64(h.low64);
}

}  // namespace

void sort_fields(std::vector<KeyField>& fields) {
  std::sort(fields.begin(), fields.end(), field_less);
}

bool fields_sorted(const std::vector<KeyField>& fields) {
  return std::is_sorted(fields.begin(), fields.end(), field_less);
}

std::string make_key(const std::vector<KeyField>& fields) {
  // Stored and prepared fields come sorted: hash them in place.
  if (fields_sorted(fields)) return hash_sorted(fields);
  std::vector<KeyField> sorted = fields;
  sort_fields(sorted);
  return hash_sorted(sorted);
}

bool same_fields(const std::vector<KeyField>& requested, const std::vector<KeyField>& stored) {
  if (requested.size() != stored.size()) return false;
  if (fields_sorted(requested)) return requested == stored;
  std::vector<KeyField> sorted = requested;
  sort_fields(sorted);
  return sorted == stored;
}

bool is_key_prefix(const std::string& text) {
  if (text.empty() || text.size() > 32) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::vector<FieldDiff> diff_fields(const std::vector<KeyField>& requested,
                                   const std::vector<KeyField>& stored) {
  std::map<std::string, std::pair<const std::string*, const std::string*>> by_name;
  for (const KeyField& f : requested) by_name[f.name].first = &f.value;
  for (const KeyField& f : stored) by_name[f.name].second = &f.value;
  std::vector<FieldDiff> diffs;
  for (const auto& [name, values] : by_name) {
    const auto [req, sto] = values;
    if (req && sto && *req == *sto) continue;
    FieldDiff d;
    d.name = name;
    d.requested_present = req != nullptr;
    d.stored_present = sto != nullptr;
    if (req) d.requested = *req;
    if (sto) d.stored = *sto;
    diffs.push_back(std::move(d));
  }
  return diffs;
}

}  // namespace kiln::cache
