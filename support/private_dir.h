// A folder of the user's alone, for caches that hold code run as the user (the emulator's shims,
// NVRTC's cubins): created if missing (mode 0700, whatever the umask), owned by the user and
// writable by no one else.
#pragma once

#include "support/expected.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln {

// The real path of `dir` (a link to it followed once, here), created if missing; else an error
// whose message completes "the folder 'DIR' ...": "is not a folder kiln can create", "belongs to
// another user", "is writable by other users (fix it with `chmod go-w 'DIR'`)".
inline Expected<std::string> private_folder(const std::string& dir) {
  std::error_code ec;
  // The parent of "a/b/" is "a", not "a/b" (which mkdir below makes with mode 0700).
  std::string folder = dir;
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  if (std::filesystem::path parent = std::filesystem::path(folder).parent_path(); !parent.empty())
    std::filesystem::create_directories(parent, ec);
  ::mkdir(folder.c_str(), 0700);
  char* real = ::realpath(dir.c_str(), nullptr);
  std::string path = real ? real : "";
  std::free(real);
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Error{"is not a folder kiln can create"};
  if (st.st_uid != ::geteuid()) return Error{"belongs to another user"};
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return Error{"is writable by other users (fix it with `chmod go-w '" + dir + "'`)"};
  return path;
}

}  // namespace kiln
