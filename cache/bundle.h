// Bundles: every entry of a cache in one file, to pre-warm other machines (format: FORMAT.md).
#pragma once

#include "cache/entry.h"
#include "support/expected.h"

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

// Reads a bundle and verifies it completely: the file checksum, every entry's key against its
// fields, every payload's size and checksum. Fails with a message naming the first problem
// (and the entry, where there is one); nothing from a bad bundle is returned.
Expected<std::vector<StoredEntry>> read_bundle(const std::string& path);

// As read_bundle, for bundle bytes already in memory; `name` is used in messages.
Expected<std::vector<StoredEntry>> parse_bundle(const std::string& data, const std::string& name);

}  // namespace kiln::cache
