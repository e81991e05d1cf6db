// NumPy .npz archives (numpy.savez and numpy.savez_compressed): a ZIP file of .npy members, read
// through libzip. Each member is one array; "NAME.npy" (or plain "NAME") names it NAME.
//
// What is read: stored and deflated members, ZIP64 included (libzip checks the archive's
// consistency on open). A member's uncompressed size, from the archive's directory, is checked
// against the caller's limit before anything of that size is allocated, and the bytes read must
// match it; the member is then parsed as a .npy file, strictly (support/npy.h).
#pragma once

#include "support/expected.h"
#include "support/npy.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::npz {

struct Member {
  std::string name;   // the array's name: the entry's, less a ".npy" suffix
  std::string entry;  // the entry's name in the archive
  uint64_t index = 0;
  uint64_t size = 0;  // uncompressed bytes, as the archive's directory says
};

class Archive {
 public:
  // Opens `path`; errors are "PATH: error: ..." (missing, unreadable, not a ZIP archive, an
  // inconsistent one, an entry that is a directory, two entries of one name).
  static Expected<Archive> open(const std::string& path);
  Archive(Archive&&) noexcept;
  Archive& operator=(Archive&&) noexcept;
  ~Archive();

  const std::string& path() const { return m_path; }
  const std::vector<Member>& members() const { return m_members; }
  // The member named `name`, or null.
  const Member* find(std::string_view name) const;
  // Reads and parses `member` holding at most `max_data_bytes` of data (see npy::read_file for
  // `limit_why`); errors are "PATH:ENTRY: error: ...".
  Expected<npy::Array> read(const Member& member, int64_t max_data_bytes,
                            std::string_view limit_why = {}) const;

 private:
  struct Handle;
  Archive() = default;
  std::string m_path;
  std::unique_ptr<Handle> m_zip;
  std::vector<Member> m_members;
};

}  // namespace kiln::npz
