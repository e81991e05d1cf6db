// An artifact as cache contents and back, and the checks of an entry's artifact that need no
// device: against its key and graph, and its kernels as the CUDA launcher checks them.
#include "runtime/entry_artifact.h"

#include "compiler/cubin_report.h"
#include "compiler/key.h"
#include "compiler/sizes.h"
#include "compiler/tensor_map.h"
#include "ir/hash.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::runtime {

namespace {

constexpr const char* k_payload_artifact = "artifact";
constexpr const char* k_payload_object = "object";  // the CPU target's object code
// The emulate target's kernel text: host code too (the emulator builds it and runs it as the
// user), so a native payload (cache::is_native_payload): checked locally on every read, taken
// from the remote tier only signed.
constexpr const char* k_payload_emulator = "object:emulator";

}  // namespace

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

std::string undecodable(const std::string& key, const Error& error) {
  std::string message = error.message;
  const std::string named = "cache entry " + key;
  if (message.compare(0, named.size(), named) == 0) message.erase(0, named.size());
  if (message.compare(0, 2, ": ") == 0) message.erase(0, 2);
  if (message.compare(0, 1, " ") == 0) message.erase(0, 1);
  if (message.compare(0, 7, "has no ") == 0) return "it " + message;  // no "artifact" payload
  return "its artifact does not decode: " + message;
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

uint64_t buffer_bytes(const compiler::Artifact& a, const compiler::BufferRef& ref) {
  const std::vector<uint64_t>& list =
      ref.role == compiler::BufferRole::input    ? a.input_bytes
      : ref.role == compiler::BufferRole::output ? a.output_bytes
                                                 : a.temporary_bytes;
  return ref.index < list.size() ? list[ref.index] : 0;
}

Status check_launchable(const compiler::KernelArtifact& kernel, const compiler::Artifact& artifact,
                        std::vector<compiler::TensorMapSpec>* maps) {
  maps->assign(kernel.params.size(), compiler::TensorMapSpec{});
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const compiler::KernelParam& p = kernel.params[i];
    if (p.kind != compiler::ParamKind::tensor_map) continue;
    std::string where = "kernel '" + kernel.name + "' parameter " + std::to_string(i) + ": ";
    if (!p.map_terms.empty() && artifact.bucket.empty())
      return make_error(where, "a static graph's tensor map has size terms");
    if (p.map_terms.empty() && !artifact.bucket.empty())
      return make_error(where, "a symbolic graph's tensor map has no size terms");
    compiler::KernelParam at_bounds = p;
    at_bounds.map_terms.clear();
    auto spec = compiler::tensor_map_at(at_bounds, {});
    if (!spec) return make_error(where, spec.error().message);
    if (!artifact.bucket.empty()) {
      std::vector<int64_t> hi;
      for (const auto& range : artifact.bucket) hi.push_back(range[1]);
      auto top = compiler::tensor_map_at(p, hi);
      if (!top) return make_error(where, top.error().message);
      if (*top != *spec)
        return make_error(where, "its size terms at the bucket's upper bounds give another map "
                          "than its description");
    }
    uint64_t holds = std::min(p.bytes, buffer_bytes(artifact, p.buffer));
    if (uint64_t reach = compiler::tensor_map_extent(*spec); reach > holds)
      return make_error(where, "its tensor map reaches ", std::to_string(reach),
                        " bytes into a buffer of ", std::to_string(holds));
    (*maps)[i] = *spec;
  }
  if (kernel.launch.clustered()) {
    const auto& c = kernel.launch.cluster;
    return make_error("kernel '", kernel.name, "' launches in clusters of ", std::to_string(c[0]),
                      "x", std::to_string(c[1]), "x", std::to_string(c[2]),
                      ", which this kiln's launcher does not do; compile the graph again with "
                      "this kiln");
  }
  return Status::success();
}

Status check_artifact_fits(const compiler::Artifact& a, const ir::Graph& graph) {
  auto bad = [&](const char* what) {
    return make_error("entry ", a.arch, " of graph '", graph.name(), "': ", what,
                      " do not match the graph");
  };
  size_t symbols = graph.symbols().size();
  if (a.bucket.size() != symbols) return bad("the bucket's dims");
  for (size_t i = 0; i < symbols; ++i) {
    const ir::Symbol& symbol = graph.symbols()[i];
    if (a.bucket[i][0] < symbol.lo || a.bucket[i][0] > a.bucket[i][1] ||
        a.bucket[i][1] > symbol.hi)
      return bad("the bucket's dims");
  }
  if (a.input_bytes.size() != graph.inputs().size() ||
      a.output_bytes.size() != graph.outputs().size())
    return bad("the inputs and outputs");
  if (symbols == 0) {
    for (size_t i = 0; i < a.input_bytes.size(); ++i)
      if (a.input_bytes[i] != static_cast<uint64_t>(graph.node(graph.inputs()[i]).type.bytes()))
        return bad("the input sizes");
    for (size_t i = 0; i < a.output_bytes.size(); ++i)
      if (a.output_bytes[i] != static_cast<uint64_t>(graph.node(graph.outputs()[i]).type.bytes()))
        return bad("the output sizes");
  } else if (a.input_sizes.size() != a.input_bytes.size() ||
             a.output_sizes.size() != a.output_bytes.size() ||
             a.temporary_sizes.size() != a.temporary_bytes.size()) {
    return bad("the buffers' size terms");
  }
  auto in_range = [&](const std::vector<compiler::SizeTerm>& terms) {
    for (const compiler::SizeTerm& t : terms)
      for (uint32_t s : t.symbols)
        if (s >= symbols) return false;
    return true;
  };
  for (const auto* terms : {&a.input_sizes, &a.output_sizes, &a.temporary_sizes})
    if (!in_range(*terms)) return bad("the buffers' size terms");
  if (symbols != 0) {
    // The inputs' and outputs' bytes as the graph sizes them in this bucket: the caller's tensors
    // are, and a tensor map's reach is held to these terms at each run.
    std::vector<compiler::DimRange> bucket;
    for (const auto& range : a.bucket) bucket.push_back({range[0], range[1]});
    compiler::Sizes sizes(graph, std::move(bucket));
    auto bytes_term = [&](ir::NodeId id) {
      int64_t element = ir::byte_size(graph.node(id).type.dtype);
      return (sizes.elements(id) * compiler::Extent::constant(element)).term();
    };
    for (size_t i = 0; i < a.input_sizes.size(); ++i)
      if (a.input_sizes[i] != bytes_term(graph.inputs()[i])) return bad("the input sizes");
    for (size_t i = 0; i < a.output_sizes.size(); ++i)
      if (a.output_sizes[i] != bytes_term(graph.outputs()[i])) return bad("the output sizes");
  }
  for (const compiler::KernelArtifact& k : a.kernels) {
    // Dims pass the symbols' values (each symbol's, in order, in what kiln writes).
    size_t dims = 0;
    for (const compiler::KernelParam& p : k.params) {
      if (!in_range(p.map_terms)) return bad("a tensor map's size terms");
      if (p.kind != compiler::ParamKind::dim) continue;
      if (p.symbol >= symbols) return bad("a kernel's dims");
      ++dims;
    }
    if (a.is_cpu()) {
      if (!in_range(k.items)) return bad("a kernel's work items");
      continue;
    }
    if (symbols == 0) continue;
    if (k.grid.size() != 3 || dims != symbols) return bad("a kernel's grid or dims");
    if (!in_range(k.grid)) return bad("a kernel's grid terms");
  }
  return Status::success();
}

std::string artifact_problem(const cache::EntryInfo& info, const compiler::Artifact& artifact,
                             const ir::Graph* graph) {
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

std::string foreign_entry_problem(const cache::StoredEntry& stored, const cache::Entry* verified,
                                  const ir::Graph* graph,
                                  std::optional<compiler::Artifact>* decoded) {
  const cache::EntryInfo& info = stored.info;
  // Each payload once (cache::repeated_payload): a run takes the last of a name, and
  // `verified`'s lookup by name the first.
  if (std::string twice = cache::repeated_payload(stored.payloads); !twice.empty())
    return "it holds payload '" + twice + "' twice";
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
  // Same codegen version, so the same artifact format: one that does not decode was damaged or
  // forged (a local hit would compile it again and replace it; from elsewhere it is refused).
  auto artifact = from_entry(std::move(*entry));
  if (!artifact) return undecodable(info.key, artifact.error());
  std::string problem = artifact_problem(info, *artifact, graph);
  if (problem.empty() && decoded) decoded->emplace(std::move(*artifact));
  return problem;
}

}  // namespace kiln::runtime
