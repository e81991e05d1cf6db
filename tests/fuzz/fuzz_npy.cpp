// libFuzzer entry: any bytes must read as a .npy file or fail with a message; an array read must
// write and read back the same.
#include "support/npy.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto array = kiln::npy::parse(bytes);
  if (!array) {
    if (array.error().message.empty()) std::abort();
    return 0;
  }
  auto again = kiln::npy::parse(kiln::npy::serialize(*array));
  if (!again) std::abort();
  if (again->descr != array->descr || again->shape != array->shape || again->data != array->data)
    std::abort();
  return 0;
}
