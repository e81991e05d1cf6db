// Micro-benchmarks of the warm path's parts (hash, key, lookups, decompress, verify, decode), so
// that a regression shows where it happens. Uses a real compile of examples/graphs/mlp.kg, or of
// the graph given as --graph=PATH.
#include "cache/cache.h"
#include "cache/codec.h"
#include "compiler/artifact.h"
#include "ir/hash.h"
#include "ir/parse.h"
#include "runtime/compile_service.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace {

using namespace kiln;

struct Fixture {
  ir::Graph graph;
  compiler::CompileOptions options;
  runtime::CacheRequest request;
  std::string dir;
  std::unique_ptr<cache::Cache> cache;
  std::string cubin;
  cache::Encoded encoded_cubin;  // zstd level 3, as the first schema stored every payload
  cache::Encoded raw_cubin;      // raw, as the local store keeps cubins now
  std::string artifact_bytes;
};

std::string g_graph_path = KILN_EXAMPLES_DIR "/mlp.kg";

Fixture& fixture() {
  static Fixture* f = [] {
    auto graph = ir::parse_graph_file(g_graph_path);
    if (!graph) {
      std::fprintf(stderr, "warm_path_bench: %s\n", graph.error().message.c_str());
      std::exit(2);
    }
    auto* f = new Fixture{std::move(*graph), {}, {}, {}, {}, {}, {}, {}, {}};
    f->options.target.sm = 90;
    f->options.precision = ir::Precision::high;
    char name[] = "/tmp/kiln-warm-bench-XXXXXX";
    f->dir = mkdtemp(name);
    // The runtime's options, local only (a KILN_REMOTE_CACHE in the environment is not used).
    f->cache = cache::Cache::open(runtime::cache_options(f->dir, std::string()));
    f->request = runtime::prepare_compile(f->graph, f->options).value();
    auto result = runtime::compile_prepared(f->graph, f->request, f->cache.get());
    if (!result) {
      std::fprintf(stderr, "warm_path_bench: %s\n", result.error().message.c_str());
      std::exit(1);
    }
    f->cubin = result->artifact.kernels.at(0).cubin;
    f->encoded_cubin = cache::encode(f->cubin).value();
    f->raw_cubin = cache::encode(f->cubin, cache::Encoding::raw).value();
    // The artifact as the cache stores it: the plan without cubins, PTX, source or log.
    auto stored = f->cache->lookup(f->request.key, f->request.fields,
                                   cache::PayloadSelection::only({"artifact"}));
    if (!stored.hit() || !stored.entry.find_payload("artifact")) {
      std::fprintf(stderr, "warm_path_bench: the fixture's entry has no artifact payload\n");
      std::exit(1);
    }
    f->artifact_bytes = stored.entry.find_payload("artifact")->bytes;
    std::atexit([] { std::filesystem::remove_all(fixture().dir); });
    std::fprintf(stderr, "warm_path_bench: %s: first cubin %zu bytes, zstd-3 %zu bytes (ratio %.2f)\n",
                 g_graph_path.c_str(), f->cubin.size(), f->encoded_cubin.data.size(),
                 static_cast<double>(f->cubin.size()) / f->encoded_cubin.data.size());
    return f;
  }();
  return *f;
}

void graph_hash(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(ir::graph_hash(fixture().graph));
}
BENCHMARK(graph_hash);

void prepare_key(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(runtime::prepare_compile(fixture().graph, fixture().options));
  }
}
BENCHMARK(prepare_key);

void cache_lookup(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    auto found = f.cache->lookup(f.request.key, f.request.fields);
    if (!found.hit()) state.SkipWithError("lookup missed");
    benchmark::DoNotOptimize(found);
  }
}
BENCHMARK(cache_lookup);

// What a compile hit reads: the artifact and the cubins, not the PTX, source and log.
void cache_lookup_run_payloads(benchmark::State& state) {
  Fixture& f = fixture();
  cache::PayloadSelection want = runtime::run_payloads();
  for (auto _ : state) {
    auto found = f.cache->lookup(f.request.key, f.request.fields, want);
    if (!found.hit()) state.SkipWithError("lookup missed");
    benchmark::DoNotOptimize(found);
  }
}
BENCHMARK(cache_lookup_run_payloads);

void decompress_and_verify_cubin(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(cache::decode(fixture().encoded_cubin));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * fixture().cubin.size()));
}
BENCHMARK(decompress_and_verify_cubin);

void verify_raw_cubin(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(cache::decode(fixture().raw_cubin));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * fixture().cubin.size()));
}
BENCHMARK(verify_raw_cubin);

void checksum_cubin(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(cache::checksum(fixture().cubin));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * fixture().cubin.size()));
}
BENCHMARK(checksum_cubin);

void decode_artifact(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(compiler::deserialize(fixture().artifact_bytes));
}
BENCHMARK(decode_artifact);

// kiln's part of encoding one tensor map at a run (the wgmma kernels' A of [S, 64] bf16 by a
// batch of 2, S = 1500), before cuTensorMapEncodeTiled (not timed here), once a map a run.
// tensor_map_at: from the map's text (read back, its dims and strides from the run's dims for a
// symbolic graph, checked against the driver's rules), as every run did until the launcher kept
// each description from load. tensor_map_at_described: a symbolic graph's map from that
// description (terms and check only), what a run does now; a static graph's map is used as
// loaded, with no work at all.
compiler::KernelParam wgmma_map_param(bool symbolic) {
  compiler::KernelParam p;
  p.kind = compiler::ParamKind::tensor_map;
  p.map = "tiled bf16 dims=64,2048,2 strides=128,262144 box=64,128,1 elem=1,1,1 swizzle=128B l2=256B";
  if (symbolic) {  // dims 64, S, 2; strides 128 bytes a row, 128 S a batch
    auto term = [](int64_t coef, bool of_s) {
      compiler::SizeTerm t;
      t.coef = coef;
      if (of_s) t.symbols = {0};
      return t;
    };
    p.map_terms = {term(64, false), term(1, true), term(2, false), term(128, false),
                   term(128, true)};
  }
  return p;
}

void tensor_map_at(benchmark::State& state) {
  compiler::KernelParam p = wgmma_map_param(state.range(0) != 0);
  std::vector<int64_t> values;
  if (state.range(0) != 0) values = {1500};
  for (auto _ : state) {
    auto spec = compiler::tensor_map_at(p, values);
    if (!spec) state.SkipWithError(spec.error().message.c_str());
    benchmark::DoNotOptimize(spec);
  }
}
BENCHMARK(tensor_map_at)->Arg(0)->Arg(1)->ArgName("symbolic");

void tensor_map_at_described(benchmark::State& state) {
  compiler::KernelParam p = wgmma_map_param(true);
  compiler::KernelParam at_bounds = p;
  at_bounds.map_terms.clear();
  compiler::TensorMapSpec description = compiler::tensor_map_at(at_bounds, {}).value();
  std::vector<int64_t> values = {1500};
  for (auto _ : state) {
    auto spec = compiler::tensor_map_at(description, p.map_terms, values);
    if (!spec) state.SkipWithError(spec.error().message.c_str());
    benchmark::DoNotOptimize(spec);
  }
}
BENCHMARK(tensor_map_at_described);

void whole_warm_path(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    auto result = runtime::compile_graph(f.graph, f.options, f.cache.get());
    if (!result || !result->hit) state.SkipWithError("warm path missed");
    benchmark::DoNotOptimize(result);
  }
}
BENCHMARK(whole_warm_path);

}  // namespace

// The fixture (a cold compile into a scratch cache) is built before any benchmark runs, so that
// no benchmark's timing includes it.
int main(int argc, char** argv) {
  // --graph=PATH is ours; the rest belong to Google Benchmark.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.rfind("--graph=", 0) == 0) g_graph_path = std::string(arg.substr(8));
    else argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  (void)fixture();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
