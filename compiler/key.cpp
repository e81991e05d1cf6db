// Cache key fields of a compile.
#include "compiler/key.h"

#include "compiler/schedule.h"
#include "ir/hash.h"

#include <charconv>

namespace kiln::compiler {

KeyFields key_fields(const ir::Graph& graph, const CompileOptions& options,
                     const ResolvedInfo& resolved) {
  std::string bytes = ir::canonical_bytes(graph);
  std::string hash = ir::hash_bytes(bytes.data(), bytes.size()).hex();  // graph_hash(), once
  KeyFields fields = {{"graph", std::move(bytes)}, {"graph_hash", std::move(hash)}};
  // The one place the key's fields depend on the target's kind.
  const Target& target = options.target;
  switch (target.kind) {
    case Target::Kind::cuda:
      fields.emplace_back("arch", target.arch());  // "sm_90a" apart from "sm_90"
      fields.emplace_back("precision", resolved.precision);
      fields.emplace_back("nvrtc_version", resolved.nvrtc_version);
      fields.emplace_back("codegen_version", std::string(codegen_version()));
      break;
    case Target::Kind::emulate:
      // The CUDA text, built for the host when loaded: no toolchain of its own in the key.
      fields.emplace_back("target", target.name());
      fields.emplace_back("precision", resolved.precision);
      fields.emplace_back("codegen_version", std::string(codegen_version()));
      break;
    case Target::Kind::cpu:
      fields.emplace_back("target", "cpu:" + target.cpu);
      fields.emplace_back("cpu_features", target.cpu_features);
      fields.emplace_back("precision", resolved.precision);
      fields.emplace_back("llvm_version", resolved.nvrtc_version);
      fields.emplace_back("codegen_version", std::string(cpu_codegen_version()));
      break;
  }
  fields.emplace_back("options", options_key(options));
  if (graph.symbolic()) fields.emplace_back("dims", dims_key(options.bucket));
  // Tiles chosen per problem (CUDA kernels only: the CPU target blocks its own way).
  if (options.schedule && !target.is_cpu() && !options.schedule->key().empty())
    fields.emplace_back("schedule", options.schedule->key());
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

std::optional<std::vector<DimRange>> parse_dims_key(const std::string& text) {
  std::vector<DimRange> bucket;
  size_t at = 0;
  while (at < text.size()) {
    std::string prefix = (bucket.empty() ? "dim" : ", dim") + std::to_string(bucket.size()) + " in [";
    if (text.compare(at, prefix.size(), prefix) != 0) return std::nullopt;
    at += prefix.size();
    DimRange range;
    auto [lo_end, e1] = std::from_chars(text.data() + at, text.data() + text.size(), range.lo);
    if (e1 != std::errc() || text.compare(lo_end - text.data(), 2, ", ") != 0) return std::nullopt;
    at = static_cast<size_t>(lo_end - text.data()) + 2;
    auto [hi_end, e2] = std::from_chars(text.data() + at, text.data() + text.size(), range.hi);
    if (e2 != std::errc() || hi_end == text.data() + text.size() || *hi_end != ']')
      return std::nullopt;
    at = static_cast<size_t>(hi_end - text.data()) + 1;
    bucket.push_back(range);
  }
  if (bucket.empty()) return std::nullopt;
  return bucket;
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
