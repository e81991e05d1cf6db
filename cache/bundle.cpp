// Bundle writing and fully verified reading; every length read is checked against the file.
#include "cache/bundle.h"

#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kiln::cache {
namespace {

constexpr char k_magic[8] = {'K', 'I', 'L', 'N', 'B', 'N', 'D', 'L'};

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_bytes(std::string& out, const std::string& bytes) {
  put_u64(out, bytes.size());
  out.append(bytes);
}

// Reads little-endian integers and length-prefixed strings; any read past the end fails.
class Reader {
public:
  explicit Reader(const std::string& data, size_t end) : m_data(data), m_end(end) {}
  bool u64(uint64_t& v) {
    if (m_end - m_pos < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(m_data[m_pos + i])) << (8 * i);
    m_pos += 8;
    return true;
  }
  bool bytes(std::string& out) {
    uint64_t n = 0;
    if (!u64(n) || n > m_end - m_pos) return false;
    out.assign(m_data, m_pos, n);
    m_pos += n;
    return true;
  }
  size_t remaining() const { return m_end - m_pos; }
  void skip(size_t n) { m_pos += n; }

private:
  const std::string& m_data;
  size_t m_end;
  size_t m_pos = 0;
};

bool read_entry(Reader& r, StoredEntry& e) {
  uint64_t compile_ms = 0, created_ms = 0, field_count = 0, payload_count = 0;
  if (!r.bytes(e.info.key) || !r.bytes(e.info.summary) || !r.u64(compile_ms) ||
      !r.u64(created_ms) || !r.u64(field_count))
    return false;
  e.info.compile_ms = static_cast<int64_t>(compile_ms);
  e.info.created_ms = e.info.last_used_ms = static_cast<int64_t>(created_ms);
  // Each field takes at least 16 bytes, so a count larger than that is a lie; no huge reserve.
  if (field_count > r.remaining() / 16) return false;
  for (uint64_t i = 0; i < field_count; ++i) {
    KeyField f;
    if (!r.bytes(f.name) || !r.bytes(f.value)) return false;
    // Fields are written sorted by name, each name once.
    if (!e.info.fields.empty() && !(e.info.fields.back().name < f.name)) return false;
    e.info.stored_bytes += f.name.size() + f.value.size();
    e.info.fields.push_back(std::move(f));
  }
  if (!r.u64(payload_count) || payload_count > r.remaining() / 32) return false;
  for (uint64_t i = 0; i < payload_count; ++i) {
    StoredPayload p;
    if (!r.bytes(p.name) || !r.u64(p.encoded.raw_size) || !r.u64(p.encoded.checksum) ||
        !r.bytes(p.encoded.compressed))
      return false;
    e.info.stored_bytes += p.name.size() + p.encoded.compressed.size();
    e.info.raw_bytes += p.encoded.raw_size;
    e.payloads.push_back(std::move(p));
  }
  e.info.stored_bytes += e.info.summary.size();
  return true;
}

}  // namespace

Status write_bundle(const std::string& path, const std::vector<StoredEntry>& entries) {
  std::string out(k_magic, sizeof k_magic);
  put_u64(out, k_bundle_format_version);
  put_u64(out, entries.size());
  for (const StoredEntry& e : entries) {
    put_bytes(out, e.info.key);
    put_bytes(out, e.info.summary);
    put_u64(out, static_cast<uint64_t>(e.info.compile_ms));
    put_u64(out, static_cast<uint64_t>(e.info.created_ms));
    put_u64(out, e.info.fields.size());
    for (const KeyField& f : e.info.fields) {
      put_bytes(out, f.name);
      put_bytes(out, f.value);
    }
    put_u64(out, e.payloads.size());
    for (const StoredPayload& p : e.payloads) {
      put_bytes(out, p.name);
      put_u64(out, p.encoded.raw_size);
      put_u64(out, p.encoded.checksum);
      put_bytes(out, p.encoded.compressed);
    }
  }
  put_u64(out, XXH3_64bits(out.data(), out.size()));
  std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file) return make_error("cannot write '", tmp, "'");
    file.write(out.data(), static_cast<std::streamsize>(out.size()));
    file.flush();
    if (!file) {
      std::remove(tmp.c_str());
      return make_error("writing '", tmp, "' failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error("cannot rename '", tmp, "' to '", path, "'");
  }
  return Status::success();
}

Expected<std::vector<StoredEntry>> read_bundle(const std::string& path) {
  // Only a regular file, read to its stated size: a directory, a device such as /dev/zero or a
  // pipe never drives an unbounded read.
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec) return make_error("cannot read bundle '", path, "': ", ec.message());
  if (!std::filesystem::is_regular_file(status)) {
    return make_error("cannot read bundle '", path, "': not a regular file");
  }
  uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return make_error("cannot read bundle '", path, "': ", ec.message());
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return make_error("cannot read bundle '", path, "': ", std::strerror(errno));
  std::string data(static_cast<size_t>(size), '\0');
  size_t got = std::fread(data.data(), 1, data.size(), file);
  bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed || got != data.size()) {
    return make_error("reading bundle '", path, "' failed: read ", std::to_string(got), " of ",
                      std::to_string(size), " bytes");
  }
  return parse_bundle(data, path);
}

Expected<std::vector<StoredEntry>> parse_bundle(const std::string& data, const std::string& name) {
  auto bad = [&](const std::string& why) { return make_error("bad bundle '", name, "': ", why); };
  if (data.size() < sizeof k_magic + 24 ||
      data.compare(0, sizeof k_magic, k_magic, sizeof k_magic) != 0)
    return bad("not a kiln cache bundle");
  size_t body = data.size() - 8;
  Reader tail(data, data.size());
  tail.skip(body);
  uint64_t stored_sum = 0;
  (void)tail.u64(stored_sum);
  if (XXH3_64bits(data.data(), body) != stored_sum) return bad("file checksum mismatch");
  Reader r(data, body);
  r.skip(sizeof k_magic);
  uint64_t version = 0, count = 0;
  (void)r.u64(version);
  if (version != k_bundle_format_version)
    return bad("format version " + std::to_string(version) + " is not supported");
  if (!r.u64(count) || count > r.remaining() / 48) return bad("entry count is wrong");
  std::vector<StoredEntry> entries;
  for (uint64_t i = 0; i < count; ++i) {
    StoredEntry e;
    if (!read_entry(r, e)) return bad("entry " + std::to_string(i) + " is truncated or malformed");
    if (auto ok = verify_stored(e); !ok)
      return bad("entry " + std::to_string(i) + " (" + e.info.key + "): " + ok.error().message);
    entries.push_back(std::move(e));
  }
  if (r.remaining() != 0) return bad("trailing bytes after the last entry");
  return entries;
}

}  // namespace kiln::cache
