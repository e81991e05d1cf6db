// Compile through the cache: key fields, lookup, single-flight compile (the artifact <-> payloads
// codec and the entry checks are runtime/entry_artifact.h's).
#include "runtime/compile_service.h"

#include "compiler/compiler.h"
#include "compiler/cpu/compile.h"
#include "compiler/key.h"
#include "compiler/nvrtc.h"
#include "compiler/pool.h"
#include "compiler/schedule.h"
#include "runtime/cpu_program.h"
#include "runtime/executable_impl.h"

#include <chrono>
#include <optional>
#include <string_view>

namespace kiln::runtime {

namespace {

double micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Expected<CacheRequest> prepare_compile(const ir::Graph& graph,
                                       const compiler::CompileOptions& options) {
  auto start = std::chrono::steady_clock::now();
  auto checked = compiler::check_request(graph, options);
  if (!checked) return checked.error();
  auto request = prepare_compile(graph, std::move(*checked));
  if (request) request->prepare_us = micros_since(start);
  return request;
}

Expected<CacheRequest> prepare_compile(const ir::Graph& graph, compiler::CompileRequest checked) {
  auto start = std::chrono::steady_clock::now();
  const compiler::CompileOptions& options = checked.options;
  // The compiler's identity: NVRTC's, or for the CPU target the LLVM plugin's version.
  Expected<std::string> toolchain = Error{""};
  switch (options.target.kind) {
    case compiler::Target::Kind::cuda:
      toolchain = compiler::nvrtc_identity(options.nvrtc_path);
      break;
    case compiler::Target::Kind::cpu:
      toolchain = compiler::cpu::llvm_version();
      break;
    case compiler::Target::Kind::emulate:
      toolchain = std::string();  // text only: the key has no toolchain field
      break;
  }
  if (!toolchain) return toolchain.error();
  compiler::ResolvedInfo resolved{std::string(ir::to_string(checked.precision.graph_mode)),
                                  *toolchain};
  // Allowing fallbacks changes the kernels only where something falls back: otherwise the
  // request is keyed as without the flag, and both share one entry.
  compiler::CompileOptions keyed = options;
  if (checked.precision.fallbacks.empty()) keyed.fallback = compiler::FallbackPolicy::refuse;
  CacheRequest request;
  for (auto& [name, value] : compiler::key_fields(graph, keyed, resolved)) {
    if (name == "graph_hash") request.graph_hash = value;
    request.fields.push_back({std::move(name), std::move(value)});
  }
  // Sorted once here, so that the cache compares and hashes them in place on every hit.
  cache::sort_fields(request.fields);
  request.key = cache::make_key(request.fields);
  request.checked = std::move(checked);
  request.prepare_us = micros_since(start);
  return request;
}

std::string entry_problem(cache::Entry entry) {
  // A tuning record (`kiln tune`) holds no artifact: its checksums are all there is to check.
  if (!entry.info.field("tuning").empty()) return "";
  const cache::EntryInfo info = entry.info;
  auto artifact = from_entry(std::move(entry));
  if (!artifact) return undecodable(info.key, artifact.error());
  // Its artifact against its key and graph, its cubins and kernels as the launcher checks them.
  if (std::string problem = artifact_problem(info, *artifact); !problem.empty()) return problem;
  // Another CPU's code, or no LLVM plugin here: decoding is all this machine can check.
  if (!artifact->is_cpu() || !compiler::cpu::runs_here(artifact->target.cpu)) return "";
  auto program = CpuProgram::load(std::move(*artifact));
  if (!program) return "its object does not load: " + program.error().message;
  return "";
}

cache::Options cache_options(std::string dir, std::optional<std::string> remote) {
  cache::Options options;
  options.dir = std::move(dir);
  options.remote = std::move(remote);
  options.check_foreign = [](const cache::StoredEntry& stored, const cache::Entry* verified) {
    return foreign_entry_problem(stored, verified);
  };
  return options;
}

namespace {

// A schedule that chose tiles per problem names where each came from: binaries are shared by the
// tiles' digest, so an entry compiled for another device's record (or a tuner's candidate) says so
// in its artifact; the report says what this compile chose.
void report_chosen_sources(const compiler::CompileOptions& options, compiler::Artifact& artifact) {
  auto* chosen = dynamic_cast<const compiler::ChosenSchedule*>(options.schedule.get());
  if (!chosen) return;
  for (compiler::KernelArtifact& k : artifact.kernels) {
    auto it = chosen->kernel_sources.find(k.name);
    if (it != chosen->kernel_sources.end()) k.schedule = it->second;
  }
}

// compile_prepared, the artifact's reports as the entry holds them.
Expected<CompileResult> compile_prepared_as_stored(const ir::Graph& graph,
                                                   const CacheRequest& request,
                                                   cache::Cache* cache);

}  // namespace

Expected<CompileResult> compile_prepared(const ir::Graph& graph, const CacheRequest& request,
                                         cache::Cache* cache) {
  auto result = compile_prepared_as_stored(graph, request, cache);
  if (result) report_chosen_sources(request.checked.options, result->artifact);
  return result;
}

namespace {

Expected<CompileResult> compile_prepared_as_stored(const ir::Graph& graph,
                                                   const CacheRequest& request,
                                                   cache::Cache* cache) {
  const compiler::CompileOptions& options = request.checked.options;
  auto start = std::chrono::steady_clock::now();
  CompileResult result;
  result.graph_hash = request.graph_hash;
  result.key = request.key;
  auto lookup_us = [&] { return request.prepare_us + micros_since(start); };

  auto compile_now = [&]() -> Expected<compiler::Artifact> {
    auto began = std::chrono::steady_clock::now();
    uint64_t cpu_began = compiler::thread_cpu_ns() + compiler::helper_cpu_ns();
    auto artifact = Expected<compiler::Artifact>(Error{""});
    switch (options.target.kind) {
      case compiler::Target::Kind::cuda:
        artifact = compiler::compile(graph, request.checked);
        break;
      case compiler::Target::Kind::emulate:
        artifact = compiler::compile_emulated(graph, request.checked);
        break;
      case compiler::Target::Kind::cpu: {
        auto machine = compiler::cpu::cpu_machine(options.target.cpu, options.target.cpu_features);
        artifact = machine ? compiler::cpu::compile_cpu(graph, request.checked, *machine)
                           : Expected<compiler::Artifact>(machine.error());
        break;
      }
    }
    result.compile_ms = micros_since(began) / 1000.0;
    result.cpu_ms =
        static_cast<double>(compiler::thread_cpu_ns() + compiler::helper_cpu_ns() - cpu_began) /
        1e6;
    return artifact;
  };

  if (!cache || (!cache->enabled() && !cache->has_remote())) {
    result.lookup_us = lookup_us();
    auto artifact = compile_now();
    if (!artifact) return artifact.error();
    result.artifact = std::move(*artifact);
    return result;
  }

  compiler::Artifact produced;
  bool have_produced = false;
  // A remote value is checked against the graph this request holds (its key fields are the
  // request's), and the artifact the check decoded is the one returned: neither is read twice.
  std::optional<compiler::Artifact> checked;
  cache::ForeignCheck check = [&](const cache::StoredEntry& stored,
                                  const cache::Entry* verified) {
    checked.reset();
    return foreign_entry_problem(stored, verified, &graph, &checked);
  };
  auto fetched =
      cache->get_or_create(result.key, request.fields, [&]() -> Expected<cache::Contents> {
        result.lookup_us = lookup_us();
        auto artifact = compile_now();
        if (!artifact) return artifact.error();
        produced = std::move(*artifact);
        have_produced = true;
        return to_contents(produced, result.graph_hash, result.cpu_ms);
      },
      run_payloads(), check);
  if (!fetched) return fetched.error();
  if (fetched->source != cache::FetchSource::hit && have_produced) {
    result.artifact = std::move(produced);
    return result;
  }
  int64_t compile_ms = fetched->entry.info.compile_ms;
  bool from_remote = fetched->source == cache::FetchSource::remote_hit;
  auto artifact = from_remote && checked ? Expected<compiler::Artifact>(std::move(*checked))
                                         : from_entry(std::move(fetched->entry));
  result.lookup_us = lookup_us();
  if (!artifact) {
    // Checksums held but the artifact does not decode: never run it; compile this one afresh and
    // store it in the bad one's place, locally and remotely (a damaged build, or a remote entry
    // a keyholder signed, gets here; kept, it would be a hit that compiles every time).
    auto fresh = compile_now();
    if (!fresh) return fresh.error();
    (void)cache->replace_bad(result.key, request.fields,
                             to_contents(*fresh, result.graph_hash, result.cpu_ms),
                             std::string(fetched->source == cache::FetchSource::remote_hit
                                             ? "the remote tier's copy"
                                             : "the copy here") +
                                 " does not decode (" + artifact.error().message +
                                 "); compiled again");
    result.artifact = std::move(*fresh);
    return result;
  }
  result.artifact = std::move(*artifact);
  result.hit = true;
  result.remote_hit = from_remote;
  result.compile_ms = result.cpu_ms = static_cast<double>(compile_ms);
  return result;
}

}  // namespace

Expected<CompileResult> compile_graph(const ir::Graph& graph,
                                      const compiler::CompileOptions& options,
                                      cache::Cache* cache) {
  auto request = prepare_compile(graph, options);
  if (!request) return request.error();
  return compile_prepared(graph, *request, cache);
}

}  // namespace kiln::runtime
