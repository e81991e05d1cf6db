// Graph -> artifact through the cache: the one path `kiln compile`, the runtime and the
// benchmarks share (key, lookup, single-flight compile, store).
#pragma once

#include "cache/cache.h"
#include "compiler/artifact.h"
#include "compiler/options.h"
#include "compiler/request.h"
#include "ir/graph.h"
#include "runtime/entry_artifact.h"
#include "support/expected.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

struct CompileResult {
  // On a hit the cache reads only what running needs: the artifact with its cubins. The PTX,
  // source and log stay empty then (`kiln show --ptx/--source/--log` reads them from the cache);
  // a compile here (a miss, or no cache) fills them.
  compiler::Artifact artifact;
  std::string graph_hash;  // 32 hex digits
  std::string key;         // 32 hex digits
  bool hit = false;        // served from the cache (possibly after another process compiled it)
  bool remote_hit = false; // served by the remote tier (and now stored locally)
  double compile_ms = 0;   // NVRTC + codegen wall time of this compile; on a hit, cpu_ms
  // CPU time of this compile, over all its threads: what it costs alone, and what a hit of its
  // entry saves (recorded in the entry). On a hit, the one recorded.
  double cpu_ms = 0;
  double lookup_us = 0;    // key + lookup + checksums + decompression + decode
};

// A compile request ready for the cache: the checked request (compiler/request.h) and its key
// fields (computed without loading NVRTC, so a warm start stays in microseconds: NVRTC is
// identified by its library file) and their key.
struct CacheRequest {
  compiler::CompileRequest checked;
  std::vector<cache::KeyField> fields;  // sorted by name (cache::sort_fields)
  std::string key;
  std::string graph_hash;
  double prepare_us = 0;
};

// compiler::check_request(), then the key: fails also when NVRTC cannot be found (an environment
// failure, not bad input; callers that report the two differently check the request first and
// pass it in).
Expected<CacheRequest> prepare_compile(const ir::Graph& graph,
                                       const compiler::CompileOptions& options);
Expected<CacheRequest> prepare_compile(const ir::Graph& graph, compiler::CompileRequest checked);

// Looks the request up in `cache` (nullptr or a disabled cache: compile without caching) and
// compiles on a miss, once across processes. Errors are failures of the work: NVRTC missing or
// a kernel that does not compile (the error carries NVRTC's log).
// Kernel reports say where each kernel's tile came from for this compile: with a schedule that
// chose tiles per problem, what it chose (an entry shared by the tiles' digest may have been
// compiled for another device's record).
Expected<CompileResult> compile_prepared(const ir::Graph& graph, const CacheRequest& request,
                                         cache::Cache* cache);

// prepare_compile() then compile_prepared().
Expected<CompileResult> compile_graph(const ir::Graph& graph,
                                      const compiler::CompileOptions& options,
                                      cache::Cache* cache);

// What a run that hits `entry` does past its checksums, as `kiln verify` checks it: decode the
// artifact; check it against its key and graph, and a CUDA target's cubins and kernels as the
// runtime does before loading and launching them, as foreign_entry_problem does; for a CPU
// target's that this machine can run, load its object (the loader's allow-list, the link). ""
// when it holds, else why not: such an entry fails every run that hits it. Another CPU's object,
// or one with no LLVM plugin here, is only decoded; a tuning record (no artifact) is not checked.
std::string entry_problem(cache::Entry entry);

// Cache options for the runtime, its CLI and its bindings: `dir` and `remote` as given (see
// cache::Options), and check_foreign set to foreign_entry_problem.
cache::Options cache_options(std::string dir, std::optional<std::string> remote);

}  // namespace kiln::runtime
