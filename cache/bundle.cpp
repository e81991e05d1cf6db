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
  // Every entry is checked before anything is made.
  for (const StoredEntry& e : entries)
    for (const StoredPayload& p : e.payloads)
      if (p.apart) return make_error("bundle: entry ", e.info.key, " lacks payload '", p.name, "'");
  auto writer = BundleWriter::create(path, replace);
  if (!writer) return writer.error();
  for (const StoredEntry& e : entries)
    if (Status s = (*writer)->add(e); !s) return s;
  return (*writer)->finish();
}

Expected<std::unique_ptr<BundleWriter>> BundleWriter::create(const std::string& path,
                                                             Replace replace) {
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
  std::unique_ptr<BundleWriter> writer(new BundleWriter());
  writer->m_path = path;
  writer->m_replace = replace;
  // A private temporary (0600, a new name made here: O_EXCL, so never through a link), renamed
  // into place.
  writer->m_tmp = path + ".tmp-XXXXXX";
  writer->m_fd = ::mkostemp(writer->m_tmp.data(), O_CLOEXEC);
  if (writer->m_fd < 0) {
    std::string tmp = std::move(writer->m_tmp);
    writer->m_tmp.clear();
    return make_error("cannot write '", tmp, "': ", std::strerror(errno));
  }
  // The count is written as 0 here and set by finish().
  ByteWriter header;
  header.raw(k_bundle_magic);
  header.u64(k_bundle_format_version);
  header.u64(0);
  if (Status s = writer->write(header.take()); !s) return s.error();
  return writer;
}

BundleWriter::~BundleWriter() {
  if (m_fd >= 0) ::close(m_fd);
  if (!m_tmp.empty()) ::unlink(m_tmp.c_str());
}

Status BundleWriter::failed(const std::string& what) {
  std::string why = std::strerror(errno);
  if (m_fd >= 0) ::close(m_fd);
  m_fd = -1;
  std::string tmp = std::move(m_tmp);
  m_tmp.clear();
  if (!tmp.empty()) ::unlink(tmp.c_str());
  return make_error(what, " '", tmp, "' failed: ", why);
}

Status BundleWriter::write(std::string_view bytes) {
  if (m_fd < 0) return make_error("bundle: '", m_path, "' was already finished or failed");
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(m_fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;
    if (n <= 0) return failed("writing");
    done += static_cast<size_t>(n);
  }
  return Status::success();
}

Status BundleWriter::add(const StoredEntry& entry) {
  for (const StoredPayload& p : entry.payloads)
    if (p.apart) return make_error("bundle: entry ", entry.info.key, " lacks payload '", p.name, "'");
  ByteWriter w;
  w.str(encode_entry(entry));
  if (Status s = write(w.take()); !s) return s;
  ++m_count;
  return Status::success();
}

Status BundleWriter::finish() {
  if (m_fd < 0) return make_error("bundle: '", m_path, "' was already finished or failed");
  ByteWriter count;
  count.u64(m_count);
  std::string bytes = count.take();
  ssize_t wrote = ::pwrite(m_fd, bytes.data(), bytes.size(), 16);
  if (wrote != static_cast<ssize_t>(bytes.size())) {
    if (wrote >= 0) errno = EIO;  // short: no errno of its own
    return failed("writing");
  }
  // The file checksum covers the count: the file is read back through once for it.
  StreamingChecksum sum;
  std::string chunk(1 << 20, '\0');
  for (off_t at = 0;;) {
    ssize_t n = ::pread(m_fd, chunk.data(), chunk.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed("reading back");
    if (n == 0) break;
    sum.update(std::string_view(chunk.data(), static_cast<size_t>(n)));
    at += n;
  }
  ByteWriter tail;
  tail.u64(sum.digest());
  if (Status s = write(tail.take()); !s) return s;
  if (::close(m_fd) != 0) {
    m_fd = -1;
    return failed("writing");
  }
  m_fd = -1;
  const std::string tmp = m_tmp;
  auto give_up = [&](const std::string& message) {
    ::unlink(tmp.c_str());
    m_tmp.clear();
    return make_error(message);
  };
  // Without Replace::yes, a file that appeared meanwhile is not replaced either (where the
  // filesystem cannot rename without replacing, the check at create() is all there is).
  if (m_replace == Replace::no) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, m_path.c_str(), RENAME_NOREPLACE) == 0) {
      m_tmp.clear();
      return Status::success();
    }
    int saved = errno;
    if (saved != EINVAL && saved != ENOSYS) {
      if (saved == EEXIST) return give_up("'" + m_path + "' exists");
      return give_up("cannot rename '" + tmp + "' to '" + m_path + "': " + std::strerror(saved));
    }
  }
  if (std::rename(tmp.c_str(), m_path.c_str()) != 0)
    return give_up("cannot rename '" + tmp + "' to '" + m_path + "': " + std::strerror(errno));
  m_tmp.clear();
  return Status::success();
}

namespace {

// The largest record an entry can have: its payloads' raw bytes at most k_max_entry_bytes (a
// zstd frame of incompressible bytes is a little larger), with its names, fields and summary.
constexpr uint64_t k_max_record_bytes = k_max_entry_bytes + (k_max_entry_bytes >> 6) + (16 << 20);

uint64_t little_endian(std::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < bytes.size(); ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return v;
}

// A version-1 bundle, whole in memory: its file checksum, then its entries.
Expected<std::vector<StoredEntry>> parse_v1(std::string_view data, const std::string& name) {
  auto bad = [&](const std::string& why) { return make_error("bad bundle '", name, "': ", why); };
  std::string_view body = data.substr(0, data.size() - 8);
  if (checksum(body) != little_endian(data.substr(body.size())))
    return bad("file checksum mismatch");
  ByteReader r(body);
  uint64_t version = 0, count = 0;
  (void)r.expect(k_bundle_magic);
  (void)r.u64(version);
  if (!r.u64(count) || count > r.remaining() / 48) return bad("entry count is wrong");
  std::vector<StoredEntry> entries;
  for (uint64_t i = 0; i < count; ++i) {
    std::string where = "entry " + std::to_string(i);
    StoredEntry e;
    if (!read_v1_entry(r, e)) return bad(where + " is truncated or malformed");
    if (Status ok = check_stored(e); !ok)
      return bad(where + " (" + e.info.key + "): " + ok.error().message);
    entries.push_back(std::move(e));
  }
  if (r.remaining() != 0) return bad("trailing bytes after the last entry");
  return entries;
}

template <typename Reader>
Expected<std::vector<StoredEntry>> read_all(Expected<std::unique_ptr<Reader>> reader) {
  if (!reader) return reader.error();
  std::vector<StoredEntry> entries;
  for (;;) {
    auto entry = (*reader)->next();
    if (!entry) return entry.error();
    if (!*entry) return entries;
    entries.push_back(std::move(**entry));
  }
}

}  // namespace

Expected<std::vector<StoredEntry>> read_bundle(const std::string& path) {
  return read_all(BundleReader::open(path));
}

Expected<std::vector<StoredEntry>> parse_bundle(const std::string& data, const std::string& name) {
  return read_all(BundleReader::over(data, name));
}

BundleReader::~BundleReader() {
  if (m_file != nullptr) std::fclose(m_file);
}

Error BundleReader::bad(const std::string& why) {
  m_failed = true;
  return make_error("bad bundle '", m_name, "': ", why);
}

bool BundleReader::read(uint64_t n, std::string& out) {
  if (n > m_body_bytes - m_at) return false;
  size_t from = out.size();
  if (m_file == nullptr) {
    out.append(m_memory.substr(m_at, n));
  } else {
    out.resize(from + n);
    if (std::fread(out.data() + from, 1, n, m_file) != n) return false;
  }
  m_checksum.update(std::string_view(out).substr(from));
  m_at += n;
  return true;
}

Error BundleReader::changed(const std::string& where) {
  m_failed = true;
  return make_error("bundle '", m_name, "' changed since it was checked: ", where);
}

Expected<std::unique_ptr<BundleReader>> BundleReader::open(const std::string& path) {
  std::unique_ptr<BundleReader> reader(new BundleReader());
  reader->m_name = path;
  auto cannot = [&](const std::string& why) {
    return make_error("cannot read bundle '", path, "': ", why);
  };
  // What is there is looked at before it is opened (opening a device can act on it), and what
  // was opened is looked at again (without blocking: a FIFO put there meanwhile is refused).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return cannot(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return cannot("not a regular file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return cannot(std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return cannot("not a regular file");
  }
  reader->m_file = ::fdopen(fd, "rb");
  if (reader->m_file == nullptr) {
    ::close(fd);
    return cannot(std::strerror(errno));
  }
  reader->m_identity = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                       std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                       std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_ctim.tv_sec) +
                       "." + std::to_string(st.st_ctim.tv_nsec);
  auto size = static_cast<uint64_t>(st.st_size);
  if (Status s = reader->start(size); !s) return s.error();
  return reader;
}

Expected<std::unique_ptr<BundleReader>> BundleReader::over(std::string_view data,
                                                           const std::string& name) {
  std::unique_ptr<BundleReader> reader(new BundleReader());
  reader->m_name = name;
  reader->m_memory = data;
  if (Status s = reader->start(data.size()); !s) return s.error();
  return reader;
}

Status BundleReader::start(uint64_t size) {
  if (size < k_bundle_magic.size() + 24) return bad("not a kiln cache bundle");
  m_body_bytes = size - 8;
  std::string header;
  if (!read(k_bundle_magic.size() + 16, header)) return io_failure();
  if (header.compare(0, k_bundle_magic.size(), k_bundle_magic) != 0)
    return bad("not a kiln cache bundle");
  uint64_t version = little_endian(std::string_view(header).substr(8));
  m_count = little_endian(std::string_view(header).substr(16));
  if (version == 1) {
    // Its entries are not length-prefixed: the file is read whole, as it always was.
    if (!read(m_body_bytes - m_at, header) || !read_tail(header)) return io_failure();
    auto entries = parse_v1(header, m_name);
    if (!entries) {
      m_failed = true;
      return entries.error();
    }
    m_whole = std::move(*entries);
    m_whole_file = true;
    return Status::success();
  }
  if (version != k_bundle_format_version)
    return bad("format version " + std::to_string(version) + " is not supported");
  if (m_count > (m_body_bytes - m_at) / 48) return bad("entry count is wrong");
  return Status::success();
}

bool BundleReader::read_tail(std::string& out) {
  std::string tail;
  if (m_file == nullptr) {
    tail.assign(m_memory.substr(m_at, 8));
  } else {
    tail.resize(8);
    if (std::fread(tail.data(), 1, 8, m_file) != 8) return false;
  }
  if (tail.size() != 8) return false;
  out += tail;
  return true;
}

Error BundleReader::io_failure() {
  m_failed = true;
  return make_error("reading bundle '", m_name, "' failed: ",
                    m_file != nullptr && std::ferror(m_file) ? std::strerror(errno)
                                                              : "the file changed while it was read");
}

Expected<std::optional<StoredEntry>> BundleReader::next() {
  if (m_failed) return make_error("bad bundle '", m_name, "': read after a failure");
  if (m_done) return std::optional<StoredEntry>();
  if (m_whole_file) {
    if (m_next == m_whole.size()) {
      if (m_expecting && m_expected.size() != m_next) return changed("another number of entries");
      m_done = true;
      m_whole.clear();
      return std::optional<StoredEntry>();
    }
    m_record_fingerprint = fingerprint(encode_entry(m_whole[m_next]));
    if (m_expecting && (m_next >= m_expected.size() || m_expected[m_next] != m_record_fingerprint))
      return changed("entry " + std::to_string(m_next) + " is another");
    return std::optional<StoredEntry>(std::move(m_whole[m_next++]));
  }
  if (m_next == m_count) {
    if (m_expecting && m_expected.size() != m_next) return changed("another number of entries");
    if (m_at != m_body_bytes) return bad("trailing bytes after the last entry");
    std::string tail;
    if (!read_tail(tail)) return io_failure();
    if (m_checksum.digest() != little_endian(tail)) return bad("file checksum mismatch");
    m_done = true;
    return std::optional<StoredEntry>();
  }
  std::string where = "entry " + std::to_string(m_next);
  std::string length, record;
  if (!read(8, length)) return bad(where + " is truncated");
  uint64_t n = little_endian(length);
  if (n > m_body_bytes - m_at) return bad(where + " is truncated");
  if (n > k_max_record_bytes) return bad(where + " is larger than an entry can be");
  if (!read(n, record)) return io_failure();
  m_record_fingerprint = fingerprint(record);
  if (m_expecting && (m_next >= m_expected.size() || m_expected[m_next] != m_record_fingerprint))
    return changed(where + " is another");
  auto decoded = decode_entry(record);
  if (!decoded) return bad(where + ": " + decoded.error().message);
  for (const StoredPayload& p : decoded->payloads)
    if (p.apart) return bad(where + " lacks the bytes of payload '" + p.name + "'");
  if (Status ok = check_stored(*decoded); !ok)
    return bad(where + " (" + decoded->info.key + "): " + ok.error().message);
  ++m_next;
  return std::optional<StoredEntry>(std::move(*decoded));
}

}  // namespace kiln::cache
