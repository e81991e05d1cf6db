// Entry records: writing, and reading with every length, limit and the checksum checked first.
#include "cache/entry_codec.h"

#include "support/byte_reader.h"
#include "support/byte_writer.h"

#include <string>

namespace kiln::cache {
namespace {

constexpr std::string_view k_entry_magic = "KILNENTR";
constexpr uint64_t k_placement_inline = 0;
constexpr uint64_t k_placement_apart = 1;

// Smallest encodings, so that a count larger than the bytes left can hold is refused at once.
constexpr size_t k_min_field_bytes = 16;
constexpr size_t k_min_payload_bytes = 40;

Error bad(const std::string& why) { return make_error("entry record: ", why); }

}  // namespace

std::string encode_entry(const StoredEntry& entry) {
  ByteWriter w;
  w.raw(k_entry_magic);
  w.u64(k_entry_codec_version);
  w.str(entry.info.key);
  w.u64(entry.info.fields.size());
  for (const KeyField& f : entry.info.fields) {
    w.str(f.name);
    w.str(f.value);
  }
  w.str(entry.info.summary);
  w.i64(entry.info.compile_ms);
  w.i64(entry.info.created_ms);
  w.u64(entry.payloads.size());
  for (const StoredPayload& p : entry.payloads) {
    w.str(p.name);
    w.u64(static_cast<uint64_t>(p.encoded.encoding));
    w.u64(p.encoded.raw_size);
    w.u64(p.encoded.checksum);
    w.u64(p.apart ? k_placement_apart : k_placement_inline);
    if (!p.apart) w.str(p.encoded.data);
  }
  std::string out = w.take();
  ByteWriter tail;
  tail.u64(checksum(out));
  out += tail.take();
  return out;
}

bool record_checksum_holds(std::string_view record) {
  if (record.size() < 8) return false;
  std::string_view body = record.substr(0, record.size() - 8);
  uint64_t stored_sum = 0;
  ByteReader(record.substr(body.size())).u64(stored_sum);
  return checksum(body) == stored_sum;
}

Expected<StoredEntry> decode_entry(std::string_view bytes) {
  if (bytes.size() < k_entry_magic.size() + 16) return bad("too short");
  std::string_view body = bytes.substr(0, bytes.size() - 8);
  ByteReader r(body);
  if (!r.expect(k_entry_magic)) return bad("not a kiln entry");
  uint64_t version = 0;
  (void)r.u64(version);
  if (version != k_entry_codec_version)
    return bad("version " + std::to_string(version) + " is not supported");
  if (!record_checksum_holds(bytes)) return bad("checksum mismatch");

  StoredEntry e;
  EntryInfo& info = e.info;
  uint64_t field_count = 0;
  if (!r.str(info.key) || !r.u64(field_count)) return bad("truncated header");
  if (field_count > r.remaining() / k_min_field_bytes) return bad("field count is wrong");
  for (uint64_t i = 0; i < field_count; ++i) {
    KeyField f;
    if (!r.str(f.name) || !r.str(f.value)) return bad("truncated field");
    // Fields are written sorted by name, each name once.
    if (!info.fields.empty() && !(info.fields.back().name < f.name))
      return bad("fields are not sorted or repeat a name");
    info.stored_bytes += f.name.size() + f.value.size();
    info.fields.push_back(std::move(f));
  }
  uint64_t compile_ms = 0, created_ms = 0, payload_count = 0;
  if (!r.str(info.summary) || !r.u64(compile_ms) || !r.u64(created_ms) || !r.u64(payload_count))
    return bad("truncated header");
  info.compile_ms = static_cast<int64_t>(compile_ms);
  info.created_ms = info.last_used_ms = static_cast<int64_t>(created_ms);
  info.stored_bytes += info.summary.size();
  if (payload_count > r.remaining() / k_min_payload_bytes) return bad("payload count is wrong");
  for (uint64_t i = 0; i < payload_count; ++i) {
    StoredPayload p;
    uint64_t encoding = 0, placement = 0;
    if (!r.str(p.name) || !r.u64(encoding) || !r.u64(p.encoded.raw_size) ||
        !r.u64(p.encoded.checksum) || !r.u64(placement))
      return bad("truncated payload '" + p.name + "'");
    if (encoding > static_cast<uint64_t>(Encoding::zstd))
      return bad("payload '" + p.name + "' has an unknown encoding");
    p.encoded.encoding = static_cast<Encoding>(encoding);
    // Declared sizes are bounded before anything is decoded: no decompression bombs.
    if (p.encoded.raw_size > k_max_payload_bytes)
      return bad("payload '" + p.name + "' declares " + std::to_string(p.encoded.raw_size) +
                 " bytes, over the limit");
    info.raw_bytes += p.encoded.raw_size;
    if (info.raw_bytes > k_max_entry_bytes) return bad("payloads declare more than the limit");
    if (placement == k_placement_apart) {
      p.apart = true;
    } else if (placement != k_placement_inline || !r.str(p.encoded.data)) {
      return bad("truncated payload '" + p.name + "'");
    } else {
      p.covered = true;  // the record's checksum, checked above, covers these bytes
    }
    info.stored_bytes += p.name.size() + p.encoded.data.size();
    e.payloads.push_back(std::move(p));
  }
  if (r.remaining() != 0) return bad("trailing bytes");
  // Each payload once (repeated_payload says why).
  if (std::string twice = repeated_payload(e.payloads); !twice.empty())
    return bad("payload '" + twice + "' appears twice");
  return e;
}

}  // namespace kiln::cache
