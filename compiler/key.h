// The tagged fields a compile's cache key is made of, and the build-time codegen version.
#pragma once

#include "compiler/options.h"
#include "ir/graph.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::compiler {

// Each target's codegen version: SHA-256 (hex), computed when the build is configured, over the
// sources that generate its code (compiler/CMakeLists.txt): the passes both targets share, the op
// table and its formulas (ir/ops.def, ir/scalar.h), and the target's own generator (CUDA: the
// emitters, prelude and NVRTC wrapper; CPU: compiler/cpu). A change to one target's generator
// leaves the other's entries valid.
std::string_view codegen_version();      // CUDA
std::string_view cpu_codegen_version();  // the CPU target

// What a compile resolved that the key must cover.
struct ResolvedInfo {
  std::string precision;      // the graph mode after resolving auto, e.g. "high"
  std::string nvrtc_version;  // nvrtc_identity(), e.g. "libnvrtc.so.13 109338064"; the CPU
                              // target's LLVM version, e.g. "16.0.6"
};

using KeyFields = std::vector<std::pair<std::string, std::string>>;

// Tagged fields, in this order: graph (ir::canonical_bytes), graph_hash, arch, precision,
// nvrtc_version, codegen_version, options, and for a symbolic graph dims (the bucket, e.g.
// "dim0 in [33, 64], dim1 in [1, 1]", symbols numbered as in the graph; names never enter), and
// where options.schedule chooses tiles per problem, schedule (its key(): a digest of the tiles).
// The CPU target (options.target.is_cpu()) has target ("cpu:znver4"), cpu_features and
// llvm_version in place of arch and nvrtc_version, and the CPU codegen version.
KeyFields key_fields(const ir::Graph& graph, const CompileOptions& options,
                     const ResolvedInfo& resolved);

// The "dims" field's value for a bucket.
std::string dims_key(const std::vector<DimRange>& bucket);
// The bucket a "dims" field's value names; nullopt for "" or text dims_key() does not write.
std::optional<std::vector<DimRange>> parse_dims_key(const std::string& text);
// The same text with the graph's own names: "B in [33, 64], S in [1, 1]".
std::string describe_bucket(const ir::Graph& graph, const std::vector<DimRange>& bucket);

}  // namespace kiln::compiler
