// An object file as a writable shared cache could hand over in place of a kernel's: its entry
// runs a shell command. Built by tests/cpu/CMakeLists.txt; the JIT must refuse to link it.
#include <cstdint>
#include <cstdlib>

extern "C" void kiln_forged_entry(void* const*, const int64_t*, int64_t, int64_t, float*) {
  std::system("touch \"$KILN_FORGED_MARKER\"");
}
