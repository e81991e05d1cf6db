// Entry accessors and verification of a stored entry against its key and checksums.
#include "cache/entry.h"

#include <algorithm>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kiln::cache {

std::string EntryInfo::field(const std::string& name) const {
  for (const KeyField& f : fields)
    if (f.name == name) return f.value;
  return {};
}

PayloadSelection PayloadSelection::only(std::vector<std::string> names,
                                        std::vector<std::string> prefixes) {
  PayloadSelection out;
  out.all = false;
  out.names = std::move(names);
  out.prefixes = std::move(prefixes);
  return out;
}

bool PayloadSelection::wants(const std::string& name) const {
  if (all) return true;
  for (const std::string& n : names)
    if (name == n) return true;
  for (const std::string& p : prefixes)
    if (name.compare(0, p.size(), p) == 0) return true;
  return false;
}

bool stored_apart(const std::string& name) {
  return name == k_payload_source || name == k_payload_log ||
         name.compare(0, std::char_traits<char>::length(k_payload_ptx_prefix),
                      k_payload_ptx_prefix) == 0;
}

std::string repeated_payload(const std::vector<StoredPayload>& payloads) {
  // On every hit: the names sorted by their checksums (a model's names share long prefixes, which
  // a sort of the strings would compare again and again), the strings compared only where two
  // checksums are equal.
  std::vector<std::pair<uint64_t, std::string_view>> names;
  names.reserve(payloads.size());
  for (const StoredPayload& p : payloads) names.push_back({checksum(p.name), p.name});
  std::sort(names.begin(), names.end());
  auto twice = std::adjacent_find(names.begin(), names.end());
  return twice == names.end() ? std::string() : std::string(twice->second);
}

const Payload* Entry::find_payload(const std::string& name) const {
  for (const Payload& p : payloads)
    if (p.name == name) return &p;
  return nullptr;
}

namespace {

template <typename Stored>
Expected<Entry> verify(Stored&& stored, const PayloadSelection& want, KeyCheck key_check) {
  if (std::string twice = repeated_payload(stored.payloads); !twice.empty())
    return make_error("payload '", twice, "' appears twice");
  if (key_check == KeyCheck::rehash && make_key(stored.info.fields) != stored.info.key)
    return make_error("stored key fields do not hash to the key");
  Entry entry;
  entry.info = std::forward<Stored>(stored).info;
  entry.payloads.reserve(stored.payloads.size());
  for (auto& p : stored.payloads) {
    if (p.apart || !want.wants(p.name)) continue;  // not read, or not asked for
    // Moves the bytes of a raw payload when `stored` is an rvalue; copies them otherwise.
    auto raw = [&]() -> Expected<std::string> {
      if constexpr (std::is_const_v<std::remove_reference_t<Stored>>) {
        return decode(p.encoded);
      } else {
        return decode(std::move(p.encoded),
                      p.covered ? RawCheck::size : RawCheck::size_and_checksum);
      }
    }();
    if (!raw) return make_error("payload '", p.name, "': ", raw.error().message);
    entry.payloads.push_back({std::move(p.name), std::move(*raw)});
  }
  return entry;
}

}  // namespace

Status check_stored(const StoredEntry& stored) {
  if (std::string twice = repeated_payload(stored.payloads); !twice.empty())
    return make_error("payload '", twice, "' appears twice");
  uint64_t total = 0;
  for (const StoredPayload& p : stored.payloads) {
    if (p.encoded.raw_size > k_max_payload_bytes)
      return make_error("payload '", p.name, "' declares ", std::to_string(p.encoded.raw_size),
                        " bytes, over the limit");
    total += p.encoded.raw_size;
    if (total > k_max_entry_bytes) return make_error("payloads declare more than the limit");
  }
  if (make_key(stored.info.fields) != stored.info.key)
    return make_error("stored key fields do not hash to the key");
  for (const StoredPayload& p : stored.payloads) {
    if (p.apart) return make_error("payload '", p.name, "' is missing");
    if (auto raw = decode(p.encoded); !raw)
      return make_error("payload '", p.name, "': ", raw.error().message);
  }
  return Status::success();
}

Expected<Entry> verify_stored(const StoredEntry& stored, const PayloadSelection& want) {
  return verify(stored, want, KeyCheck::rehash);
}

Expected<Entry> verify_stored(StoredEntry&& stored, const PayloadSelection& want,
                              KeyCheck key_check) {
  return verify(std::move(stored), want, key_check);
}

}  // namespace kiln::cache
