// Cache key fields of a compile.
#include "compiler/key.h"

#include "ir/hash.h"

namespace kiln::compiler {

KeyFields key_fields(const ir::Graph& graph, const CompileOptions& options,
                     const ResolvedInfo& resolved) {
  return {
      {"graph", ir::canonical_bytes(graph)},
      {"graph_hash", ir::graph_hash(graph).hex()},
      {"arch", arch_name(options.sm)},
      {"precision", resolved.precision},
      {"nvrtc_version", resolved.nvrtc_version},
      {"codegen_version", std::string(codegen_version())},
      {"options", options_key(options)},
  };
}

}  // namespace kiln::compiler
