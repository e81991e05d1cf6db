// libFuzzer entry for the records a cache or a peer can hand over: the first byte picks a reader,
// the rest are its bytes. Any bytes must read or fail with a message, never crash, and what reads
// must write and read back the same.
//   0: a compiled artifact (compiler::deserialize);
//   1: an entry record (cache::decode_entry), its trailing XXH3-64 made to hold so the fuzzer
//      reaches the fields behind it;
//   2: a bundle (cache::parse_bundle), its file checksum made to hold;
//   3: a cubin, as the runtime checks it before the driver is handed one (compiler::check_cubin,
//      for kernel `mapped` taking a pointer, a tensor map and an int, on sm_90). A cubin that
//      passes must be one a reader that takes no size, as the driver's, reads within its bytes:
//      the fake driver's reader (tests/runtime/fake_cuda/cubin.h) reads a copy of exactly its size.
//   4: an entry from another machine, as the cache checks a remote value or a bundle's entry
//      (runtime::foreign_entry_problem): a key of a CUDA (sm_90a) or an emulated (sm_80) compile
//      whose graph, dims and payloads are the fuzzer's bytes (foreign_input says how they are
//      laid out), its key and checksums made to hold so the fuzzer reaches the artifact's checks.
//      The check must say the same from the stored entry, from the entry as a lookup verified it,
//      and with the graph read from the key handed in as a request's.
// With KILN_FUZZ_SEEDS=DIR it first writes one input of each kind to DIR (the corpus folder, so
// the fuzzer starts from well-formed records): an emulated compile of a symbolic matmul graph,
// that artifact as an entry with one zstd and one raw payload, a bundle of that entry, that
// compile as an entry from another machine, and, where NVRTC loads, a cubin of `mapped` and an
// sm_90a compile of a larger graph (a wgmma kernel, its operands read through tensor maps) as an
// entry from another machine (each foreign seed must pass the check).
#include "cache/bundle.h"
#include "cache/entry_codec.h"
#include "compiler/compiler.h"
#include "compiler/cubin_report.h"
#include "compiler/key.h"
#include "compiler/nvrtc.h"
#include "compiler/sizes.h"
#include "fake_cuda/cubin.h"
#include "ir/hash.h"
#include "ir/parse.h"
#include "runtime/entry_artifact.h"

#include <xxhash.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <string_view>

namespace {

using namespace kiln;

// Read bytes must write and read back the same: `read` then `write`, each time.
template <class Read, class Write>
void reads_back(const char* what, std::string_view bytes, Read read, Write write) {
  auto first = read(bytes);
  if (!first) {
    if (first.error().message.empty()) std::abort();  // a failure must say why
    return;
  }
  std::string again = write(*first);
  auto back = read(again);
  if (!back) {
    std::fprintf(stderr, "a read %s does not read back: %s\n", what, back.error().message.c_str());
    std::abort();
  }
  if (write(*back) != again) std::abort();
}

void artifact(std::string_view bytes) {
  reads_back("artifact", bytes, [](std::string_view b) { return compiler::deserialize(b); },
             [](const compiler::Artifact& a) { return compiler::serialize(a); });
}

void entry(std::string_view body) {
  std::string record(body);
  uint64_t sum = XXH3_64bits(record.data(), record.size());
  for (int i = 0; i < 8; ++i) record.push_back(static_cast<char>(sum >> (8 * i)));
  reads_back("entry", record, [](std::string_view b) { return cache::decode_entry(b); },
             [](const cache::StoredEntry& e) { return cache::encode_entry(e); });
  if (auto e = cache::decode_entry(record)) {
    auto verified = cache::verify_stored(*e);
    if (!verified && verified.error().message.empty()) std::abort();
  }
}

void bundle(std::string_view body) {
  std::string file(body);
  uint64_t sum = XXH3_64bits(file.data(), file.size());
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>(sum >> (8 * i)));
  auto entries = cache::parse_bundle(file, "fuzz.kbundle");
  if (!entries && entries.error().message.empty()) std::abort();
}

constexpr const char* k_cubin_source = R"(
struct alignas(64) Map { unsigned long long opaque[16]; };
extern "C" __global__ void mapped(float* out, const __grid_constant__ Map map, int n) {
  if (threadIdx.x < n) out[threadIdx.x] = static_cast<float>(map.opaque[threadIdx.x % 16]);
}
)";

// check_cubin of `bytes` as kernel `mapped` of sm_90.
Status check_mapped(std::string_view bytes) {
  std::vector<compiler::KernelParam> params(3);
  params[1].kind = compiler::ParamKind::tensor_map;
  params[2].kind = compiler::ParamKind::dim;
  return compiler::check_cubin(bytes, "mapped", params, compiler::Target::cuda(90));
}

void cubin(std::string_view bytes) {
  Status checked = check_mapped(bytes);
  if (!checked) {
    if (checked.error().message.empty()) std::abort();  // a failure must say why
    return;
  }
  // Its own allocation of exactly its size: a read past it is a sanitizer report.
  auto copy = std::make_unique<char[]>(bytes.size());
  std::memcpy(copy.get(), bytes.data(), bytes.size());
  auto read = fake_cuda::read_cubin(copy.get());
  if (!read) return;
  bool found = false;
  for (const fake_cuda::CubinKernel& k : read->kernels) found |= k.name == "mapped";
  if (!found) std::abort();  // check_cubin found its code
}

// The key fields of a compile of a seed graph (its `graph` and `dims` replaced by each input's):
// [0] a CUDA sm_90a compile's, [1] an emulated sm_80 compile's. The toolchain is "fuzz": a CUDA
// artifact passes when its NVRTC version ends in " (fuzz)".
std::vector<cache::KeyField> g_key_fields[2];

// Kind 4's bytes: a flags byte (bit 0: the emulated key; bit 1: the last binary added again as a
// second "artifact" payload, which the check must refuse), a u16 length and the key's canonical
// graph, a u8 length and its "dims" field, a u32 length and the "artifact" payload, then each
// binary in turn as a u32 length and its bytes: for the CUDA key a cubin per kernel that has its
// own binary (as to_contents writes them), for the emulated key the kernel text. Lengths are
// little-endian; what runs out is empty.
struct ForeignInput {
  bool emulated = false, repeat = false;
  std::string graph, dims, artifact;
  std::vector<std::string> binaries;
};

ForeignInput foreign_input(std::string_view bytes) {
  ForeignInput in;
  auto take = [&](size_t width) {
    uint64_t length = 0;
    for (size_t i = 0; i < width && !bytes.empty(); ++i) {
      length |= uint64_t{static_cast<uint8_t>(bytes[0])} << (8 * i);
      bytes.remove_prefix(1);
    }
    std::string part(bytes.substr(0, std::min<uint64_t>(length, bytes.size())));
    bytes.remove_prefix(part.size());
    return part;
  };
  if (!bytes.empty()) {
    in.emulated = (bytes[0] & 1) != 0;
    in.repeat = (bytes[0] & 2) != 0;
    bytes.remove_prefix(1);
  }
  in.graph = take(2);
  in.dims = take(1);
  in.artifact = take(4);
  while (!bytes.empty()) in.binaries.push_back(take(4));
  return in;
}

std::string foreign_bytes(const ForeignInput& in) {
  std::string out(1, static_cast<char>((in.emulated ? 1 : 0) | (in.repeat ? 2 : 0)));
  auto put = [&](const std::string& part, size_t width) {
    for (size_t i = 0; i < width; ++i) out.push_back(static_cast<char>(part.size() >> (8 * i)));
    out += part;
  };
  put(in.graph, 2);
  put(in.dims, 1);
  put(in.artifact, 4);
  for (const std::string& b : in.binaries) put(b, 4);
  return out;
}

// The entry `in` describes, its key made from its fields.
cache::StoredEntry foreign_entry(const ForeignInput& in) {
  cache::StoredEntry stored;
  for (const cache::KeyField& field : g_key_fields[in.emulated ? 1 : 0])
    if (field.name != "graph" && field.name != "dims") stored.info.fields.push_back(field);
  stored.info.fields.push_back({"graph", in.graph});
  if (!in.dims.empty()) stored.info.fields.push_back({"dims", in.dims});
  cache::sort_fields(stored.info.fields);
  stored.info.key = cache::make_key(stored.info.fields);
  auto add = [&](const std::string& name, const std::string& bytes) {
    auto encoded = cache::encode(bytes, cache::Encoding::raw);
    if (!encoded) std::abort();
    stored.payloads.push_back({name, *encoded});
  };
  add("artifact", in.artifact);
  if (in.emulated) {
    add("object:emulator", in.binaries.empty() ? std::string() : in.binaries[0]);
  } else if (auto artifact = compiler::deserialize(in.artifact)) {
    // A cubin per kernel that has its own binary, named as the artifact names it.
    std::set<std::string> named;
    size_t next = 0;
    for (const compiler::KernelArtifact& k : artifact->kernels)
      if (k.binary_of.empty() && named.insert(k.name).second)
        add(cache::k_payload_cubin_prefix + k.name,
            next < in.binaries.size() ? in.binaries[next++] : std::string());
  }
  if (in.repeat) add("artifact", in.binaries.empty() ? std::string() : in.binaries.back());
  return stored;
}

void foreign(std::string_view bytes) {
  ForeignInput in = foreign_input(bytes);
  cache::StoredEntry stored = foreign_entry(in);
  std::string stored_says = runtime::foreign_entry_problem(stored);
  if (in.repeat) {  // refused by the check and by verify_stored alike
    auto refused = cache::verify_stored(stored);
    if (stored_says.find("twice") == std::string::npos || refused) {
      std::fprintf(stderr, "an entry holding payload 'artifact' twice passed: '%s'\n",
                   stored_says.c_str());
      std::abort();
    }
    return;
  }
  auto verified = cache::verify_stored(stored);
  if (!verified) {
    std::fprintf(stderr, "a foreign entry made to hold does not verify: %s\n",
                 verified.error().message.c_str());
    std::abort();
  }
  auto differ = [&](const char* how, const std::string& says) {
    std::fprintf(stderr, "the check of a foreign entry says '%s' from the stored entry, '%s' %s\n",
                 stored_says.c_str(), says.c_str(), how);
    std::abort();
  };
  if (std::string says = runtime::foreign_entry_problem(stored, &*verified); says != stored_says)
    differ("from the verified one", says);
  // The key's graph handed in as a request's (named as the check names the graph it reads).
  auto graph = ir::graph_from_canonical(in.graph, "cache entry " + stored.info.key);
  if (!graph) return;
  std::optional<compiler::Artifact> decoded;
  std::string says = runtime::foreign_entry_problem(stored, &*verified, &*graph, &decoded);
  if (says != stored_says) differ("given the graph", says);
  // What passes is handed over decoded, and fits the graph it was checked against.
  if (says.empty() && decoded && !runtime::check_artifact_fits(*decoded, *graph)) {
    std::fprintf(stderr, "an artifact that passed the check does not fit its graph\n");
    std::abort();
  }
}

// The record's bytes less its trailing checksum, which the readers above append.
std::string without_checksum(std::string bytes) {
  if (bytes.size() < 8) std::abort();
  bytes.resize(bytes.size() - 8);
  return bytes;
}

void write_seed(const std::string& dir, const std::string& name, char kind,
                const std::string& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out << kind << bytes;
  if (!out) {
    std::fprintf(stderr, "KILN_FUZZ_SEEDS: cannot write %s/%s\n", dir.c_str(), name.c_str());
    std::exit(2);
  }
}

// The seeds' graphs, and a compile's options for them: emulated sm_80, a symbolic matmul at the
// bucket of S = 17; CUDA sm_90a, a symbolic bf16 matmul large enough for the wgmma kernel (tensor
// maps with size terms) at the bucket of S = 5000 (an input of about 80 KiB). A graph or options
// that do not check are the fuzzer's own fault: abort.
ir::Graph seed_graph(bool emulated) {
  auto graph = ir::parse_graph(emulated ? R"(graph seed {
    dim S: 1..64
    input a: f32[S, 32]
    input b: f32[32, 16]
    x = relu(matmul(a, b))
    output x
  })"
                                        : R"(graph seed {
    dim S: 1..8192
    input a: bf16[S, 512]
    input b: bf16[512, 512]
    x = relu(matmul(a, b))
    output x
  })",
                               "seed.kg");
  if (!graph) std::abort();
  return std::move(*graph);
}

compiler::CompileOptions seed_options(const ir::Graph& graph, bool emulated) {
  compiler::CompileOptions options;
  options.target = emulated ? compiler::Target::cuda(80) : compiler::Target::cuda(90, "a");
  if (emulated) options.target.kind = compiler::Target::Kind::emulate;
  options.bucket = {compiler::bucket_of(emulated ? 17 : 5000, graph.symbols()[0])};
  return options;
}

void set_key_fields() {
  for (bool emulated : {false, true}) {
    ir::Graph graph = seed_graph(emulated);
    auto request = compiler::check_request(graph, seed_options(graph, emulated));
    if (!request) std::abort();
    compiler::ResolvedInfo resolved{std::string(ir::to_string(request->precision.graph_mode)),
                                    emulated ? "" : "fuzz"};
    for (auto& [name, value] : compiler::key_fields(graph, request->options, resolved))
      g_key_fields[emulated ? 1 : 0].push_back({name, value});
  }
}

// Kind 4's seed of `artifact` compiled from a seed graph: it must pass the check.
void write_foreign_seed(const std::string& dir, const std::string& name,
                        const compiler::Artifact& artifact) {
  ForeignInput in;
  in.emulated = artifact.is_emulated();
  for (const cache::KeyField& field : g_key_fields[in.emulated ? 1 : 0]) {
    if (field.name == "graph") in.graph = field.value;
    if (field.name == "dims") in.dims = field.value;
  }
  for (const cache::Payload& p : runtime::to_contents(artifact, "", 0).payloads) {
    if (p.name == "artifact") in.artifact = p.bytes;
    if (p.name == "object:emulator" ||
        p.name.compare(0, std::strlen(cache::k_payload_cubin_prefix),
                       cache::k_payload_cubin_prefix) == 0)
      in.binaries.push_back(p.bytes);
  }
  std::string says = runtime::foreign_entry_problem(foreign_entry(in));
  if (!says.empty()) {
    std::fprintf(stderr, "KILN_FUZZ_SEEDS: the %s seed fails the check: %s\n", name.c_str(),
                 says.c_str());
    std::abort();
  }
  write_seed(dir, name, 4, foreign_bytes(in));
}

// The seeds described at the top; any failure here is the fuzzer's own fault: abort.
void write_seeds(const std::string& dir) {
  ir::Graph seed = seed_graph(true);
  const ir::Graph* graph = &seed;
  compiler::CompileOptions options = seed_options(seed, true);
  auto request = compiler::check_request(*graph, options);
  if (!request) std::abort();
  auto compiled = compiler::compile_emulated(*graph, *request);
  if (!compiled) std::abort();
  std::string artifact = compiler::serialize(*compiled);
  if (!compiler::deserialize(artifact)) std::abort();
  write_seed(dir, "seed-artifact", 0, artifact);

  cache::StoredEntry stored;
  stored.info.fields = {{"arch", "emulate:sm_80"}, {"graph", "seed"}, {"precision", "high"}};
  stored.info.key = cache::make_key(stored.info.fields);
  stored.info.summary = R"({"kernels":1})";
  auto zstd = cache::encode(artifact, cache::Encoding::zstd);
  auto raw = cache::encode(compiled->source, cache::Encoding::raw);
  if (!zstd || !raw) std::abort();
  stored.payloads.push_back({"artifact", *zstd});
  stored.payloads.push_back({cache::k_payload_source, *raw});
  if (!cache::verify_stored(stored)) std::abort();
  write_seed(dir, "seed-entry", 1, without_checksum(cache::encode_entry(stored)));

  std::string path = dir + "/.seed-bundle-" + std::to_string(getpid());
  if (!cache::write_bundle(path, {stored}, cache::Replace::yes)) std::abort();
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  write_seed(dir, "seed-bundle", 2, without_checksum(file));
  write_foreign_seed(dir, "seed-foreign-emulated", *compiled);

  auto nvrtc = compiler::load_nvrtc("");
  auto built = nvrtc ? (*nvrtc)->compile(k_cubin_source, "mapped", "sm_90") : nvrtc.error();
  if (!built) {
    std::fprintf(stderr, "KILN_FUZZ_SEEDS: no cubin seed: %s\n", built.error().message.c_str());
    return;
  }
  if (!check_mapped(built->cubin)) std::abort();
  write_seed(dir, "seed-cubin", 3, built->cubin);

  ir::Graph large = seed_graph(false);
  auto cuda = compiler::compile(large, seed_options(large, false));
  if (!cuda) {  // an NVRTC without sm_90a, say: the seed is left out, as the cubin's above
    std::fprintf(stderr, "KILN_FUZZ_SEEDS: no sm_90a seed: %s\n", cuda.error().message.c_str());
    return;
  }
  cuda->nvrtc_version = "13.0 (fuzz)";  // as the key's toolchain says
  write_foreign_seed(dir, "seed-foreign-cuda", *cuda);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_key_fields();
  if (const char* dir = std::getenv("KILN_FUZZ_SEEDS")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: artifact(bytes); break;
    case 1: entry(bytes); break;
    case 2: bundle(bytes); break;
    case 3: cubin(bytes); break;
    default: foreign(bytes); break;
  }
  return 0;
}
