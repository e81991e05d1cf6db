// Bundles: every entry of a cache in one file, to pre-warm other machines (format: FORMAT.md).
#pragma once

#include "cache/codec.h"
#include "cache/entry.h"
#include "support/expected.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cache {

inline constexpr unsigned k_bundle_format_version = 2;  // reads 1 too

// Writes `entries` to `path` (mode 0600, through a temporary file renamed into place). Fails when
// `path` exists (unless Replace::yes, which replaces only a regular file: never a device, pipe,
// link or folder) and on I/O errors, saying why.
enum class Replace { no, yes };
Status write_bundle(const std::string& path, const std::vector<StoredEntry>& entries,
                    Replace replace = Replace::no);

// Writes a bundle one entry at a time, as write_bundle does, holding one entry in memory: into
// a private temporary beside `path`, which finish() completes (the entry count and the file
// checksum) and renames into place. Dropped unfinished, it removes the temporary and leaves
// `path` as it was.
class BundleWriter {
public:
  // Fails as write_bundle does when `path` may not be replaced or the temporary cannot be made.
  static Expected<std::unique_ptr<BundleWriter>> create(const std::string& path, Replace replace);
  ~BundleWriter();
  BundleWriter(const BundleWriter&) = delete;
  BundleWriter& operator=(const BundleWriter&) = delete;

  // Fails on an I/O error, or for an entry whose payloads are not all present.
  Status add(const StoredEntry& entry);
  Status finish();
  uint64_t count() const { return m_count; }

private:
  BundleWriter() = default;
  Status write(std::string_view bytes);
  Status failed(const std::string& what);  // removes the temporary

  std::string m_path;
  std::string m_tmp;
  Replace m_replace = Replace::no;
  int m_fd = -1;
  uint64_t m_count = 0;
};

// Reads a bundle and verifies it completely: the file checksum, every entry's key against its
// fields, every payload's size and checksum. Fails with a message naming the first problem
// (and the entry, where there is one); nothing from a bad bundle is returned.
Expected<std::vector<StoredEntry>> read_bundle(const std::string& path);

// As read_bundle, for bundle bytes already in memory; `name` is used in messages.
Expected<std::vector<StoredEntry>> parse_bundle(const std::string& data, const std::string& name);

// Reads a bundle one entry at a time, holding one entry in memory rather than the file (a
// version-1 bundle, whose entries are not length-prefixed, is read whole). Each entry is
// checked as read_bundle checks it when next() returns it; the file checksum, which covers
// them all, only after the last (next() fails then if it does not hold). A caller that must
// take nothing from a bad bundle reads it through once before it uses any entry.
class BundleReader {
public:
  // Only a regular file: a directory, a device such as /dev/zero or a pipe is refused.
  static Expected<std::unique_ptr<BundleReader>> open(const std::string& path);
  // Over bundle bytes in memory (which must outlive the reader); `name` is used in messages.
  static Expected<std::unique_ptr<BundleReader>> over(std::string_view data, const std::string& name);
  ~BundleReader();
  BundleReader(const BundleReader&) = delete;
  BundleReader& operator=(const BundleReader&) = delete;

  // The next entry, checked; nullopt after the last, once the end and the file checksum held.
  // After a failure, every call fails.
  Expected<std::optional<StoredEntry>> next();
  // The entries the bundle says it holds.
  uint64_t count() const { return m_count; }
  // The fingerprint of the record of the entry next() returned last (codec.h: under this
  // process's seed, which a file rewritten between two reads does not know).
  Fingerprint record_fingerprint() const { return m_record_fingerprint; }
  // The records' fingerprints a first read gave (record_fingerprint() of each entry in turn):
  // from now on, next() fails for an entry whose record is another ("the file changed"), and at
  // the end if there are more or fewer.
  void expect(std::vector<Fingerprint> fingerprints) {
    m_expected = std::move(fingerprints);
    m_expecting = true;
  }
  // Device, inode, size, modification and change times of the file when it was opened ("" in
  // memory): two readers of one path that give the same read the same file, unchanged since
  // (expect() checks each entry besides).
  const std::string& identity() const { return m_identity; }

private:
  BundleReader() = default;
  Status start(uint64_t size);               // reads the header of a file of `size` bytes
  Error bad(const std::string& why);         // "bad bundle 'NAME': WHY"; every later call fails
  Error io_failure();                        // a read that failed or fell short
  bool read(uint64_t n, std::string& out);   // n bytes of the body (appended), into the checksum
  Error changed(const std::string& where);   // an entry or count unlike the expected ones
  bool read_tail(std::string& out);          // appends the file checksum's 8 bytes

  std::string m_name;
  std::FILE* m_file = nullptr;
  std::string_view m_memory;
  uint64_t m_at = 0;          // bytes of the file read
  uint64_t m_body_bytes = 0;  // the file but its checksum
  uint64_t m_count = 0;
  uint64_t m_next = 0;
  bool m_failed = false;
  bool m_done = false;
  std::string m_identity;
  StreamingChecksum m_checksum;
  bool m_whole_file = false;         // a version-1 bundle: its entries read at open
  std::vector<StoredEntry> m_whole;
  Fingerprint m_record_fingerprint;
  bool m_expecting = false;
  std::vector<Fingerprint> m_expected;
};

}  // namespace kiln::cache
