// libFuzzer entry: any bytes must open as a .npz archive or fail with a message, and every member
// of one that opens must read (at most 1 MiB of data) or fail with a message naming it; never a
// crash, a sanitizer report or an allocation past the limit. The bytes go through a memory file,
// as Archive::open takes a path.
#include "support/npz.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("fuzz.npz", 0);
  if (fd < 0) std::abort();
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  {
    auto archive = kiln::npz::Archive::open(path);
    if (!archive) {
      if (archive.error().message.rfind(path + ": error: ", 0) != 0) std::abort();
    } else {
      for (const kiln::npz::Member& member : archive->members()) {
        auto array = archive->read(member, int64_t{1} << 20);
        if (!array) {
          if (array.error().message.rfind(path + ":" + member.entry + ": error: ", 0) != 0)
            std::abort();
        } else if (array->data.size() > (size_t{1} << 20)) {
          std::abort();
        }
      }
    }
  }
  close(fd);
  return 0;
}
