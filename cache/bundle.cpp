// Bundle writing and fully verified reading; every length read is checked against the file.
#include "cache/bundle.h"

#include "cache/entry_codec.h"
#include "support/byte_reader.h"
#include "support/byte_writer.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace kiln::cache {
namespace {

constexpr std::string_view k_bundle_magic = "KILNBNDL";

// Version 1 wrote each entry's fields inline, every payload a zstd frame (FORMAT.md); such
// bundles are still read.
bool read_v1_entry(ByteReader& r, StoredEntry& e) {
  uint64_t compile_ms = 0, created_ms = 0, field_count = 0, payload_count = 0;
  if (!r.str(e.info.key) || !r.str(e.info.summary) || !r.u64(compile_ms) || !r.u64(created_ms) ||
      !r.u64(field_count))
    return false;
  e.info.compile_ms = static_cast<int64_t>(compile_ms);
  e.info.created_ms = e.info.last_used_ms = static_cast<int64_t>(created_ms);
  if (field_count > r.remaining() / 16) return false;
  for (uint64_t i = 0; i < field_count; ++i) {
    KeyField f;
    if (!r.str(f.name) || !r.str(f.value)) return false;
    if (!e.info.fields.empty() && !(e.info.fields.back().name < f.name)) return false;
    e.info.stored_bytes += f.name.size() + f.value.size();
    e.info.fields.push_back(std::move(f));
  }
  if (!r.u64(payload_count) || payload_count > r.remaining() / 32) return false;
  for (uint64_t i = 0; i < payload_count; ++i) {
    StoredPayload p;
    p.encoded.encoding = Encoding::zstd;
    if (!r.str(p.name) || !r.u64(p.encoded.raw_size) || !r.u64(p.encoded.checksum) ||
        !r.str(p.encoded.data))
      return false;
    if (p.encoded.raw_size > k_max_payload_bytes) return false;
    e.info.stored_bytes += p.name.size() + p.encoded.data.size();
    e.info.raw_bytes += p.encoded.raw_size;
    if (e.info.raw_bytes > k_max_entry_bytes) return false;
    e.payloads.push_back(std::move(p));
  }
  e.info.stored_bytes += e.info.summary.size();
  return true;
}

}  // namespace

Status write_bundle(const std::string& path, const std::vector<StoredEntry>& entries,
                    Replace replace) {
  ByteWriter w;
  w.raw(k_bundle_magic);
  w.u64(k_bundle_format_version);
  w.u64(entries.size());
  for (const StoredEntry& e : entries) {
    for (const StoredPayload& p : e.payloads)
      if (p.apart) return make_error("bundle: entry ", e.info.key, " lacks payload '", p.name, "'");
    w.str(encode_entry(e));
  }
  std::string out = w.take();
  ByteWriter tail;
  tail.u64(checksum(out));
  out += tail.take();
  {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (replace == Replace::no) return make_error("'", path, "' exists");
      // Replacing renames over the path: a device, pipe, socket, link or folder would be lost
      // (as root, /dev/full turned into a file), so only a regular file is replaced.
      if (!S_ISREG(st.st_mode)) {
        return make_error("'", path, "' is not a regular file; only a regular file is replaced");
      }
    }
  }
  // A private temporary (0600, a new name made here: O_EXCL, so never through a link), renamed
  // into place.
  std::string tmp = path + ".tmp-XXXXXX";
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return make_error("cannot write '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? std::strerror(errno) : "nothing written";
      ::close(fd);
      ::unlink(tmp.c_str());
      return make_error("writing '", tmp, "' failed: ", why);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return make_error("writing '", tmp, "' failed: ", why);
  }
  // Without Replace::yes, a file that appeared meanwhile is not replaced either (where the
  // filesystem cannot rename without replacing, the check above is all there is).
  if (replace == Replace::no) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0)
      return Status::success();
    int saved = errno;
    if (saved != EINVAL && saved != ENOSYS) {
      ::unlink(tmp.c_str());
      if (saved == EEXIST) return make_error("'", path, "' exists");
      return make_error("cannot rename '", tmp, "' to '", path, "': ", std::strerror(saved));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return make_error("cannot rename '", tmp, "' to '", path, "': ", why);
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
  if (data.size() < k_bundle_magic.size() + 24 ||
      data.compare(0, k_bundle_magic.size(), k_bundle_magic) != 0)
    return bad("not a kiln cache bundle");
  std::string_view body(data.data(), data.size() - 8);
  ByteReader tail(std::string_view(data).substr(body.size()));
  uint64_t stored_sum = 0;
  (void)tail.u64(stored_sum);
  if (checksum(body) != stored_sum) return bad("file checksum mismatch");
  ByteReader r(body);
  (void)r.expect(k_bundle_magic);
  uint64_t version = 0, count = 0;
  (void)r.u64(version);
  if (version != 1 && version != k_bundle_format_version)
    return bad("format version " + std::to_string(version) + " is not supported");
  if (!r.u64(count) || count > r.remaining() / 48) return bad("entry count is wrong");
  std::vector<StoredEntry> entries;
  for (uint64_t i = 0; i < count; ++i) {
    std::string where = "entry " + std::to_string(i);
    StoredEntry e;
    if (version == 1) {
      if (!read_v1_entry(r, e)) return bad(where + " is truncated or malformed");
    } else {
      std::string_view record;
      if (!r.str(record)) return bad(where + " is truncated");
      auto decoded = decode_entry(record);
      if (!decoded) return bad(where + ": " + decoded.error().message);
      e = std::move(*decoded);
      for (const StoredPayload& p : e.payloads)
        if (p.apart) return bad(where + " lacks the bytes of payload '" + p.name + "'");
    }
    if (Status ok = check_stored(e); !ok)
      return bad(where + " (" + e.info.key + "): " + ok.error().message);
    entries.push_back(std::move(e));
  }
  if (r.remaining() != 0) return bad("trailing bytes after the last entry");
  return entries;
}

}  // namespace kiln::cache
