// Compile through the cache: key fields, lookup, single-flight compile, artifact <-> payloads.
#include "runtime/compile_service.h"

#include "compiler/schedule.h"

#include "compiler/compiler.h"
#include "compiler/cubin_report.h"
#include "compiler/cpu/compile.h"
#include "compiler/nvrtc.h"
#include "compiler/pool.h"
#include "compiler/sizes.h"
#include "compiler/key.h"
#include "ir/hash.h"
#include "runtime/cpu_program.h"
#include "runtime/executable_impl.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string_view>

namespace kiln::runtime {

namespace {

constexpr const char* k_payload_artifact = "artifact";
constexpr const char* k_payload_object = "object";  // the CPU target's object code
// The emulate target's kernel text: host code too (the emulator builds it and runs it as the
// user), so a native payload (cache::is_native_payload): checked locally on every read, taken
// from the remote tier only signed.
constexpr const char* k_payload_emulator = "object:emulator";

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

cache::Contents to_contents(const compiler::Artifact& artifact, const std::string& graph_hash,
                            double compile_ms) {
  cache::Contents contents;
  contents.compile_ms = static_cast<int64_t>(compile_ms + 0.5);
  compiler::Artifact rest = artifact;
  rest.source.clear();
  rest.log.clear();
  if (artifact.is_cpu()) {
    contents.payloads.push_back({k_payload_object, std::move(rest.object)});
    rest.object.clear();
  }
  if (artifact.is_emulated()) contents.payloads.push_back({k_payload_emulator, artifact.source});
  nlohmann::json kernels = nlohmann::json::array();
  for (compiler::KernelArtifact& k : rest.kernels) {
    // A kernel that runs another's binary stores none of its own: from_entry copies it back.
    if (!artifact.is_cpu() && !artifact.is_emulated() && k.binary_of.empty()) {
      contents.payloads.push_back({cache::k_payload_cubin_prefix + k.name, std::move(k.cubin)});
      contents.payloads.push_back({cache::k_payload_ptx_prefix + k.name, std::move(k.ptx)});
    }
    k.cubin.clear();
    k.ptx.clear();
    kernels.push_back({{"name", k.name},
                       {"registers", k.report.registers},
                       {"spill_bytes", k.report.spill_bytes()},
                       {"local_bytes", k.report.local_bytes},
                       {"smem_bytes", k.smem_bytes()}});
    if (!k.binary_of.empty()) kernels.back()["binary_of"] = k.binary_of;
    if (!k.schedule.empty()) kernels.back()["schedule"] = k.schedule;
    if (!k.tile.empty()) kernels.back()["tile"] = k.tile;
  }
  contents.payloads.push_back({cache::k_payload_source, artifact.source});
  contents.payloads.push_back({cache::k_payload_log, artifact.log});
  contents.payloads.push_back({k_payload_artifact, compiler::serialize(rest)});
  nlohmann::json summary = {{"graph", graph_hash},
                            {"arch", artifact.arch},
                            {"precision", artifact.precision},
                            {"decision", artifact.decision},
                            {"nvrtc", artifact.nvrtc_version},
                            {"kernels", kernels},
                            {"fallbacks", artifact.fallbacks}};
  contents.summary = summary.dump();
  return contents;
}

cache::PayloadSelection run_payloads() {
  return cache::PayloadSelection::only({k_payload_artifact, k_payload_object, k_payload_emulator},
                                      {cache::k_payload_cubin_prefix});
}

Expected<compiler::Artifact> from_entry(cache::Entry entry) {
  std::string* packed = nullptr;
  for (cache::Payload& p : entry.payloads)
    if (p.name == k_payload_artifact) packed = &p.bytes;
  if (!packed) return make_error("cache entry ", entry.info.key, " has no artifact payload");
  auto artifact = compiler::deserialize(*packed);
  if (!artifact) {
    return make_error("cache entry ", entry.info.key, ": ", artifact.error().message);
  }
  // One pass over the payloads, each moved to where it belongs: a hit of a layer carries a
  // binary for each of a dozen kernels.
  std::vector<compiler::KernelArtifact>& kernels = artifact->kernels;
  auto kernel_named = [&](std::string_view name) -> size_t {
    for (size_t i = 0; i < kernels.size(); ++i)
      if (kernels[i].name == name) return i;
    return kernels.size();
  };
  auto after = [](const std::string& name, std::string_view prefix) {
    std::optional<std::string_view> rest;
    if (name.compare(0, prefix.size(), prefix) == 0)
      rest = std::string_view(name).substr(prefix.size());
    return rest;
  };
  std::vector<bool> has_cubin(kernels.size(), false);
  bool has_object = false;
  if (artifact->is_emulated()) {
    // Its kernel text is what it runs; nothing else is read.
    for (cache::Payload& p : entry.payloads) {
      if (p.name != k_payload_emulator) continue;
      artifact->source = std::move(p.bytes);
      return artifact;
    }
    return make_error("cache entry ", entry.info.key, " lacks its kernel text");
  }
  for (cache::Payload& p : entry.payloads) {
    if (p.name == cache::k_payload_source) {
      artifact->source = std::move(p.bytes);
    } else if (p.name == cache::k_payload_log) {
      artifact->log = std::move(p.bytes);
    } else if (artifact->is_cpu()) {
      if (p.name == k_payload_object) {
        artifact->object = std::move(p.bytes);
        has_object = true;
      }
    } else if (auto name = after(p.name, cache::k_payload_cubin_prefix)) {
      if (size_t i = kernel_named(*name); i < kernels.size()) {
        kernels[i].cubin = std::move(p.bytes);
        has_cubin[i] = true;
      }
    } else if (auto name = after(p.name, cache::k_payload_ptx_prefix)) {
      if (size_t i = kernel_named(*name); i < kernels.size()) kernels[i].ptx = std::move(p.bytes);
    }
  }
  if (artifact->is_cpu() && !has_object)
    return make_error("cache entry ", entry.info.key, " lacks its object code");
  // A kernel that runs an earlier kernel's binary gets a copy of it (deserialize checked that it
  // names one that has its own).
  std::vector<size_t> owners = compiler::binary_owners(kernels);
  for (size_t i = 0; i < kernels.size() && !artifact->is_cpu(); ++i) {
    if (size_t of = owners[i]; of != i) {
      has_cubin[i] = has_cubin[of];
      kernels[i].cubin = kernels[of].cubin;
      kernels[i].ptx = kernels[of].ptx;
    }
    if (!has_cubin[i]) {
      return make_error("cache entry ", entry.info.key, " lacks the binary of kernel ",
                        kernels[i].name);
    }
  }
  return artifact;
}

namespace {

// What would fail every run of `artifact`, short of a device: an artifact for another target
// (arch and NVRTC, CPU or emulation) or bucket than its key `info` says, one that does not fit
// the key's graph, and for CUDA a cubin the launcher would not load or a kernel it would not
// launch. "" when none. `graph`, when given, is the key's graph (a request's whose key fields
// the entry's equal), which is then not read back from the key.
std::string artifact_problem(const cache::EntryInfo& info, const compiler::Artifact& artifact,
                             const ir::Graph* graph = nullptr) {
  const compiler::Target& target = artifact.target;
  const bool cuda = target.kind == compiler::Target::Kind::cuda;
  const std::string is = target.is_cpu()        ? "cpu:" + target.cpu
                         : target.is_emulated() ? target.name()
                                                : artifact.arch;
  const std::string said = info.field(info.field("arch").empty() ? "target" : "arch");
  if (cuda == info.field("arch").empty() || is != said)
    return "its artifact is for " + is + " where its key says " + said;
  if (cuda) {
    const std::string nvrtc = " (" + info.field("nvrtc_version") + ")";
    const std::string& built = artifact.nvrtc_version;
    if (built.size() <= nvrtc.size() || built.compare(built.size() - nvrtc.size(), nvrtc.size(),
                                                      nvrtc) != 0)
      return "its artifact was built by NVRTC '" + built + "' where its key says '" +
             info.field("nvrtc_version") + "'";
  }
  std::vector<std::array<int64_t, 2>> bucket;
  if (std::string dims = info.field("dims"); !dims.empty()) {
    auto ranges = compiler::parse_dims_key(dims);
    if (!ranges) return "its key's dims do not read: " + dims;
    for (const compiler::DimRange& r : *ranges) bucket.push_back({r.lo, r.hi});
  }
  if (artifact.bucket != bucket) return "its artifact's bucket is not its key's";
  // What every backend's maker checks against the graph, which the key holds.
  std::optional<ir::Graph> read;
  if (!graph) {
    auto from_key = ir::graph_from_canonical(info.field("graph"), "cache entry " + info.key);
    if (!from_key) return "its key's graph does not read: " + from_key.error().message;
    graph = &read.emplace(std::move(*from_key));
  }
  if (Status s = check_artifact_fits(artifact, *graph); !s)
    return "its artifact does not fit its graph: " + s.error().message;
  if (!cuda) return "";
  // What the CUDA launcher checks before loading anything, but the device.
  if (Status s = compiler::check_cubins(artifact); !s)
    return "its cubins would not load: " + s.error().message;
  std::vector<compiler::TensorMapSpec> maps;
  for (const compiler::KernelArtifact& kernel : artifact.kernels)
    if (Status s = check_launchable(kernel, artifact, &maps); !s)
      return "its kernels would not launch: " + s.error().message;
  return "";
}

}  // namespace

std::string entry_problem(cache::Entry entry) {
  // A tuning record (`kiln tune`) holds no artifact: its checksums are all there is to check.
  if (!entry.info.field("tuning").empty()) return "";
  const std::string key = entry.info.key;
  auto without_key = [&](std::string message) {
    const std::string named = "cache entry " + key;
    if (message.compare(0, named.size(), named) == 0) message.erase(0, named.size());
    if (message.compare(0, 2, ": ") == 0) message.erase(0, 2);
    if (message.compare(0, 1, " ") == 0) message.erase(0, 1);
    return message;
  };
  const cache::EntryInfo info = entry.info;
  auto artifact = from_entry(std::move(entry));
  if (!artifact) return "its artifact does not decode: " + without_key(artifact.error().message);
  // Its artifact against its key and graph, its cubins and kernels as the launcher checks them.
  if (std::string problem = artifact_problem(info, *artifact); !problem.empty()) return problem;
  // Another CPU's code, or no LLVM plugin here: decoding is all this machine can check.
  if (!artifact->is_cpu() || !compiler::cpu::runs_here(artifact->target.cpu)) return "";
  auto program = CpuProgram::load(std::move(*artifact));
  if (!program) return "its object does not load: " + program.error().message;
  return "";
}

namespace {

// foreign_entry_problem, given the request's graph when the caller holds it, and keeping in
// `decoded` the artifact it decoded when that passed.
std::string foreign_problem(const cache::StoredEntry& stored, const cache::Entry* verified,
                            const ir::Graph* graph, std::optional<compiler::Artifact>* decoded) {
  const cache::EntryInfo& info = stored.info;
  if (!info.field("tuning").empty()) return "";
  // Another kiln's entry (another codegen version) is never looked up by this one.
  const std::string target = info.field("target");
  std::string_view ours = target.compare(0, 4, "cpu:") == 0 ? compiler::cpu_codegen_version()
                                                            : compiler::codegen_version();
  if (info.field("codegen_version") != ours) return "";
  // The payloads a run reads, from `verified` when it holds every one of them.
  const cache::PayloadSelection run = run_payloads();
  std::optional<cache::Entry> entry;
  if (verified) {
    entry.emplace();
    entry->info = verified->info;
    for (const cache::StoredPayload& p : stored.payloads) {
      if (!run.wants(p.name)) continue;
      const cache::Payload* found = verified->find_payload(p.name);
      if (!found) {
        entry.reset();
        break;
      }
      entry->payloads.push_back(*found);
    }
  }
  if (!entry) {
    auto checked = cache::verify_stored(stored, run);
    if (!checked) return checked.error().message;
    entry.emplace(std::move(*checked));
  }
  // An artifact that does not decode is never run: a hit compiles it again and replaces it.
  auto artifact = from_entry(std::move(*entry));
  if (!artifact) return "";
  std::string problem = artifact_problem(info, *artifact, graph);
  if (problem.empty() && decoded) decoded->emplace(std::move(*artifact));
  return problem;
}

}  // namespace

std::string foreign_entry_problem(const cache::StoredEntry& stored,
                                  const cache::Entry* verified) {
  return foreign_problem(stored, verified, nullptr, nullptr);
}

cache::Options cache_options(std::string dir, std::optional<std::string> remote) {
  cache::Options options;
  options.dir = std::move(dir);
  options.remote = std::move(remote);
  options.check_foreign = foreign_entry_problem;
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
    return foreign_problem(stored, verified, &graph, &checked);
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
