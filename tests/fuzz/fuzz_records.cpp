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
// With KILN_FUZZ_SEEDS=DIR it first writes one input of each kind to DIR (the corpus folder, so
// the fuzzer starts from well-formed records): an emulated compile of a symbolic matmul graph,
// that artifact as an entry with one zstd and one raw payload, a bundle of that entry, and, where
// NVRTC loads, a cubin of `mapped`.
#include "cache/bundle.h"
#include "cache/entry_codec.h"
#include "compiler/compiler.h"
#include "compiler/cubin_report.h"
#include "compiler/nvrtc.h"
#include "compiler/sizes.h"
#include "fake_cuda/cubin.h"
#include "ir/parse.h"

#include <xxhash.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
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

// The seeds described at the top; any failure here is the fuzzer's own fault: abort.
void write_seeds(const std::string& dir) {
  auto graph = ir::parse_graph(R"(graph seed {
    dim S: 1..64
    input a: f32[S, 32]
    input b: f32[32, 16]
    x = relu(matmul(a, b))
    output x
  })", "seed.kg");
  if (!graph) std::abort();
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(80);
  options.target.kind = compiler::Target::Kind::emulate;
  options.bucket = {compiler::bucket_of(17, graph->symbols()[0])};
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

  auto nvrtc = compiler::load_nvrtc("");
  auto built = nvrtc ? (*nvrtc)->compile(k_cubin_source, "mapped", "sm_90") : nvrtc.error();
  if (!built) {
    std::fprintf(stderr, "KILN_FUZZ_SEEDS: no cubin seed: %s\n", built.error().message.c_str());
    return;
  }
  if (!check_mapped(built->cubin)) std::abort();
  write_seed(dir, "seed-cubin", 3, built->cubin);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KILN_FUZZ_SEEDS")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: artifact(bytes); break;
    case 1: entry(bytes); break;
    case 2: bundle(bytes); break;
    default: cubin(bytes); break;
  }
  return 0;
}
