// Cache key fields of a compile.
#include "compiler/key.h"

#include "ir/hash.h"

namespace kiln::compiler {

KeyFields key_fields(const ir::Graph& graph, const CompileOptions& options,
                     const ResolvedInfo& resolved) {
  std::string bytes = ir::canonical_bytes(graph);
  std::string hash = ir::hash_bytes(bytes.data(), bytes.size()).hex();  // graph_hash(), once
  KeyFields fields = {
      {"graph", std::move(bytes)},
      {"graph_hash", std::move(hash)},
      {"arch", arch_name(options.sm)},
      {"precision", resolved.precision},
      {"nvrtc_version", resolved.nvrtc_version},
      {"codegen_version", std::string(codegen_version())},
      {"options", options_key(options)},
  };
  if (graph.symbolic()) fields.emplace_back("dims", dims_key(options.bucket));
  return fields;
}

std::string dims_key(const std::vector<DimRange>& bucket) {
  std::string text;
  for (size_t i = 0; i < bucket.size(); ++i) {
    text += (i ? ", dim" : "dim") + std::to_string(i) + " in [" + std::to_string(bucket[i].lo) +
            ", " + std::to_string(bucket[i].hi) + "]";
  }
  return text;
}

std::string describe_bucket(const ir::Graph& graph, const std::vector<DimRange>& bucket) {
  std::string text;
  for (size_t i = 0; i < bucket.size() && i < graph.symbols().size(); ++i) {
    text += (i ? ", " : "") + graph.symbols()[i].name + " in [" + std::to_string(bucket[i].lo) +
            ", " + std::to_string(bucket[i].hi) + "]";
  }
  return text;
}

}  // namespace kiln::compiler
