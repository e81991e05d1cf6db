// NumPy .npz archives through libzip.
#include "support/npz.h"

#include <zip.h>

#include <string>
#include <unordered_set>

namespace kiln::npz {

struct Archive::Handle {
  zip_t* zip = nullptr;
  ~Handle() {
    if (zip != nullptr) zip_discard(zip);  // read-only: nothing to write back
  }
};

Archive::Archive(Archive&&) noexcept = default;
Archive& Archive::operator=(Archive&&) noexcept = default;
Archive::~Archive() = default;

namespace {

std::string zip_message(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

}  // namespace

Expected<Archive> Archive::open(const std::string& path) {
  int code = 0;
  zip_t* zip = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (zip == nullptr) return make_error(path, ": error: not a readable .npz (ZIP) archive: ", zip_message(code));
  Archive archive;
  archive.m_path = path;
  archive.m_zip = std::make_unique<Handle>();
  archive.m_zip->zip = zip;
  zip_int64_t count = zip_get_num_entries(zip, 0);
  std::unordered_set<std::string> names;
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t stat;
    zip_stat_init(&stat);
    if (zip_stat_index(zip, static_cast<zip_uint64_t>(i), 0, &stat) != 0 ||
        !(stat.valid & ZIP_STAT_NAME) || !(stat.valid & ZIP_STAT_SIZE))
      return make_error(path, ": error: entry ", std::to_string(i), " cannot be read: ",
                        zip_strerror(zip));
    std::string entry = stat.name;
    if (!entry.empty() && entry.back() == '/')
      return make_error(path, ": error: entry '", entry, "' is a directory, not an array");
    std::string name = entry;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    if (!names.insert(name).second)
      return make_error(path, ": error: two entries name the array '", name, "'");
    archive.m_members.push_back(Member{name, entry, static_cast<uint64_t>(i), stat.size});
  }
  return archive;
}

const Member* Archive::find(std::string_view name) const {
  for (const Member& m : m_members)
    if (m.name == name) return &m;
  return nullptr;
}

Expected<npy::Array> Archive::read(const Member& member, int64_t max_data_bytes,
                                   std::string_view limit_why) const {
  std::string where = m_path + ":" + member.entry;
  // The header takes at most its magic, version, length and k_max_header_bytes.
  uint64_t most = static_cast<uint64_t>(max_data_bytes) + 16 + npy::k_max_header_bytes;
  if (member.size > most) {
    return make_error(where, ": error: ", std::to_string(member.size), " bytes, past the ",
                      std::to_string(max_data_bytes), " bytes of data the array may hold",
                      limit_why.empty() ? "" : " (", limit_why, limit_why.empty() ? "" : ")");
  }
  zip_file_t* file = zip_fopen_index(m_zip->zip, member.index, 0);
  if (file == nullptr) return make_error(where, ": error: cannot open: ", zip_strerror(m_zip->zip));
  std::string bytes(static_cast<size_t>(member.size), '\0');
  zip_int64_t got = zip_fread(file, bytes.data(), member.size);
  char extra = 0;
  zip_int64_t more = got == static_cast<zip_int64_t>(member.size) ? zip_fread(file, &extra, 1) : 0;
  // libzip checks the member's CRC at its end: a mismatch fails the read past the last byte.
  std::string problem = got < 0 || more < 0 ? zip_file_strerror(file) : "";
  zip_fclose(file);
  if (got < 0 || more < 0) return make_error(where, ": error: cannot read: ", problem);
  if (got != static_cast<zip_int64_t>(member.size) || more != 0)
    return make_error(where, ": error: its data does not match the archive's size of ",
                      std::to_string(member.size), " bytes");
  auto array = npy::parse(bytes);
  if (!array) return make_error(where, ": error: ", array.error().message);
  if (static_cast<int64_t>(array->data.size()) > max_data_bytes) {
    return make_error(where, ": error: shape ", npy::shape_string(array->shape), " of '",
                      npy::to_string(array->descr), "' holds more data than the ",
                      std::to_string(max_data_bytes), " bytes allowed",
                      limit_why.empty() ? "" : " (", limit_why, limit_why.empty() ? "" : ")");
  }
  return array;
}

}  // namespace kiln::npz
