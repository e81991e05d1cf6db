// libFuzzer entry: any bytes must parse or fail with a located error; a parsed graph must
// print, reparse and hash the same, and its canonical bytes read back to the same bytes.
#include "ir/hash.h"
#include "ir/parse.h"
#include "ir/print.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto graph = kiln::ir::parse_graph(text, "fuzz.kg");
  if (!graph) {
    if (graph.error().message.rfind("fuzz.kg:", 0) != 0) std::abort();  // unlocated error
    return 0;
  }
  std::string printed = kiln::ir::print_graph(*graph);
  auto again = kiln::ir::parse_graph(printed, "printed.kg");
  if (!again) {
    std::fprintf(stderr, "canonical form does not parse: %s\n", again.error().message.c_str());
    std::abort();
  }
  if (kiln::ir::print_graph(*again) != printed) std::abort();
  if (!(kiln::ir::graph_hash(*again) == kiln::ir::graph_hash(*graph))) std::abort();
  // The canonical bytes read back to a graph with the same bytes.
  std::string bytes = kiln::ir::canonical_bytes(*graph);
  auto decoded = kiln::ir::graph_from_canonical(bytes, "g");
  if (!decoded) {
    std::fprintf(stderr, "canonical bytes do not read back: %s\n", decoded.error().message.c_str());
    std::abort();
  }
  if (kiln::ir::canonical_bytes(*decoded) != bytes) std::abort();
  return 0;
}
