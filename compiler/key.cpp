// Cache key fields of a compile.
#include "compiler/key.h"

#include "ir/hash.h"

namespace kiln::compiler {

KeyFields key_fields(const ir::Graph& graph, const CompileOptions& options,
                     const ResolvedInfo& resolved) {
  std::string bytes = ir::canonical_bytes(graph);
  std::string hash = ir::hash_bytes(bytes.data(), bytes.size()).hex();  // graph_hash(), once
  return {
      {"graph", std::move(bytes)},
      {"graph_hash", std::move(hash)},
      {"arch", arch_name(options.sm)},
      {"precision", resolved.precision},
      {"nvrtc_version", resolved.nvrtc_version},
      {"codegen_version", std::string(codegen_version())},
      {"options", options_key(options)},
  };
}

}  // namespace kiln::compiler
