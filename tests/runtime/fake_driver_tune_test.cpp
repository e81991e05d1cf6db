// Tuning against the fake libcuda: its event timing (each launch moves the device's clock by its
// kernel's configured time), the tuner's choice and record, the runtime's use of records
// (RuntimeOptions::autotune) and its refusals. ctest runs every test in its own process.
#include "fake_driver_support.h"

#include "cache/cache.h"
#include "cache/key.h"
#include "compiler/nvrtc.h"
#include "compiler/schedule.h"
#include "compiler/sizes.h"
#include "ir/parse.h"
#include "runtime/compile_service.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "runtime/tuning.h"
#include "tests/support/redis_server.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace kiln {
namespace {

using fake_cuda::Config;
using testing_support::Buffers;
using testing_support::use_fake_driver;

class TempDir {
public:
  TempDir() {
    char name[] = "/tmp/kiln-tune-XXXXXX";
    m_path = mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(m_path); }
  const std::string& path() const { return m_path; }

private:
  std::string m_path;
};

// One bf16 matmul, 200 x 384 by 384 x 520: 16-byte rows, every mma tile legal.
const char* k_gemm = R"(graph gemm {
  input a: bf16[200, 384]
  input b: bf16[384, 520]
  c = matmul(a, b)
  output c
}
)";

ir::Graph gemm_graph() {
  auto graph = ir::parse_graph(k_gemm, "gemm.kg");
  EXPECT_TRUE(graph) << graph.error().message;
  return *graph;
}

// The target a runtime with no arch compiles for on the fake device (compute capability 9.0):
// sm_90a, so records tuned here are the ones its compiles look up.
compiler::CompileOptions sm90() {
  compiler::CompileOptions options;
  options.target = compiler::device_target(90);
  return options;
}

std::unique_ptr<cache::Cache> open_cache(const std::string& dir) {
  cache::Options options;
  options.dir = dir;
  options.remote = "";
  return cache::Cache::open(options);
}

// tune_graph on sm_90 with 5 timed runs a candidate.
Expected<std::vector<runtime::TuningRecord>> tune_five(const ir::Graph& graph, cache::Cache* cache) {
  runtime::TuneOptions tune;
  tune.repeats = 5;
  return runtime::tune_graph(graph, sm90(), cache, tune);
}

// The kernel's 32x64 tiles take 0.25 ms, every other 1 ms.
Config timed_config() {
  Config config;
  config.device_name = "Fake H200";
  config.sm_count = 132;
  config.kernel_ms = {{"_32x64", 0.25}};
  config.default_kernel_ms = 1.0;
  return config;
}

TEST(FakeDriverTune, EventsTimeTheLaunchesRecordedBetweenThem) {
  Config config;
  config.kernel_ms = {{"matmul", 2.5}};
  config.default_kernel_ms = 0.125;
  ASSERT_TRUE(use_fake_driver(config));
  auto exe = testing_support::compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  ASSERT_TRUE(exe->prepare());
  auto api = runtime::load_driver();
  ASSERT_TRUE(api) << api.error().message;
  const runtime::DriverApi& d = **api;
  auto scope = runtime::ScopedContext::for_device(d, 0, nullptr);
  ASSERT_TRUE(scope) << scope.error().message;
  runtime::CuEvent start = nullptr, end = nullptr, never = nullptr;
  ASSERT_EQ(d.event_create(&start, 0), 0);
  ASSERT_EQ(d.event_create(&end, 0), 0);
  ASSERT_EQ(d.event_create(&never, 0), 0);
  size_t before = fake_cuda::launches().size();
  ASSERT_EQ(d.event_record(start, nullptr), 0);
  Status s = exe->run(buffers.inputs, buffers.outputs);
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_EQ(d.event_record(end, nullptr), 0);
  ASSERT_EQ(d.event_synchronize(end), 0);
  double expected = 0;
  auto launches = fake_cuda::launches();
  for (size_t i = before; i < launches.size(); ++i)
    expected += launches[i].function.find("matmul") != std::string::npos ? 2.5 : 0.125;
  ASSERT_GT(launches.size(), before);
  float ms = -1;
  ASSERT_EQ(d.event_elapsed_time(&ms, start, end), 0);
  EXPECT_FLOAT_EQ(ms, static_cast<float>(expected));
  // An event never recorded has no time: CUDA_ERROR_INVALID_HANDLE, as the driver says.
  EXPECT_EQ(d.event_elapsed_time(&ms, start, never), 400);
  EXPECT_EQ(d.event_destroy(never), 0);
  EXPECT_EQ(d.event_destroy(never), 400);
  EXPECT_EQ(d.event_destroy(start), 0);
  EXPECT_EQ(d.event_destroy(end), 0);
}

TEST(FakeDriverTune, DeviceIdentityNamesTheDeviceAndItsMultiprocessors) {
  Config config;
  config.device_name = "Fake H200";
  config.sm_count = 78;
  ASSERT_TRUE(use_fake_driver(config));
  auto id = runtime::device_identity(0);
  ASSERT_TRUE(id) << id.error().message;
  EXPECT_EQ(id->name, "Fake H200");
  EXPECT_EQ(id->sm, 90);
  EXPECT_EQ(id->sm_count, 78);
  EXPECT_EQ(id->text(), "Fake H200 (78 SMs)");
  EXPECT_FALSE(runtime::device_identity(1));
}

TEST(FakeDriverTune, TheFastestTileWinsItsRecordIsStoredAndTheRuntimeCompilesWithIt) {
  ASSERT_TRUE(use_fake_driver(timed_config()));
  TempDir dir;
  auto cache = open_cache(dir.path());
  ASSERT_TRUE(cache->enabled());
  ir::Graph graph = gemm_graph();
  auto records = tune_five(graph, cache.get());
  ASSERT_TRUE(records) << records.error().message;
  ASSERT_EQ(records->size(), 1u);
  const runtime::TuningRecord& r = records->front();
  auto problems = runtime::tuning_problems(graph, sm90());
  ASSERT_TRUE(problems);
  ASSERT_EQ(problems->size(), 1u);
  const auto& shape = std::get<compiler::MatmulShape>(problems->front().shape);
  EXPECT_EQ(problems->front().signature, compiler::problem_signature(shape));
  EXPECT_EQ(r.signature, compiler::problem_signature(shape));
  EXPECT_EQ(r.device, "Fake H200 (132 SMs)");
  EXPECT_EQ(r.arch, "sm_90a");
  EXPECT_EQ(r.repeats, 5);
  // Every legal tile was timed, each as its launches' configured time: a split-K tile's two
  // kernels (partials and sum) both count.
  // On sm_90a the wgmma kernel computes this problem: its tiles are candidates too.
  ASSERT_TRUE(problems->front().wgmma);
  std::vector<compiler::MatmulTile> tiles = compiler::candidate_tiles(shape, 90);
  for (const compiler::MatmulTile& t : compiler::wgmma_candidates(shape)) tiles.push_back(t);
  ASSERT_EQ(r.candidates.size(), tiles.size());
  int wgmma = 0;
  int splits = 0;
  for (const runtime::CandidateTime& c : r.candidates) {
    const auto& tile = std::get<compiler::MatmulTile>(c.tile);
    EXPECT_EQ(c.status, "ok") << compiler::to_string(tile);
    double one = tile.bm == 32 && tile.bn == 64 ? 0.25 : 1.0;
    EXPECT_DOUBLE_EQ(c.median_ms, tile.split_k > 1 ? 2 * one : one) << compiler::to_string(tile);
    splits += tile.split_k > 1;
    wgmma += tile.wgmma;
  }
  EXPECT_GT(splits, 0) << "the problem's grid is under one wave: split-K tiles are candidates";
  EXPECT_EQ(wgmma, 4);
  const auto& winner = std::get<compiler::MatmulTile>(r.winner);
  EXPECT_EQ(winner.bm, 32);
  EXPECT_EQ(winner.bn, 64);
  // Its 10 work tiles of 128x128 leave most SMs idle: the model keeps mma.sync (wgmma_fills).
  EXPECT_FALSE(compiler::wgmma_fills(shape));
  EXPECT_TRUE(compiler::same_tile(r.model, compiler::choose_tile(shape, 90)));
  ASSERT_NE(std::get<compiler::MatmulTile>(r.model).bm, 32)
      << "the model's own tile must not be the one made fast here";

  // The record is an entry under its own key, and decodes to what the tuner returned.
  auto nvrtc = compiler::nvrtc_identity();
  ASSERT_TRUE(nvrtc);
  auto id = runtime::device_identity(0);
  ASSERT_TRUE(id);
  auto fields = runtime::tuning_fields(r.signature, *id, "sm_90a", *nvrtc);
  cache::Lookup found = cache->lookup(cache::make_key(fields), fields);
  ASSERT_TRUE(found.hit());
  const cache::Payload* payload = found.entry.find_payload(runtime::k_payload_tuning);
  ASSERT_NE(payload, nullptr);
  auto decoded = runtime::decode_record(payload->bytes);
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(runtime::encode_record(*decoded), runtime::encode_record(r));

  // A runtime on this device compiles with the record (autotune `cached`, the default); `off`
  // takes the model's tile, under another key.
  auto compile_key = [&](Autotune mode) -> std::string {
    RuntimeOptions options;
    options.cache_dir = dir.path();
    options.remote_cache = "";
    options.autotune = mode;
    auto runtime = Runtime::create(options);
    EXPECT_TRUE(runtime) << runtime.error().message;
    auto exe = (*runtime)->compile(graph);
    EXPECT_TRUE(exe) << exe.error().message;
    return exe ? (*exe)->key() : "";
  };
  std::string tuned_key = compile_key(Autotune::cached);
  std::string model_key = compile_key(Autotune::off);
  EXPECT_NE(tuned_key, model_key);
  // Each entry holds its tile; only the tuned one's key names a schedule.
  auto expect_entry = [&](const std::string& key, const compiler::KernelTile& tile, bool tuned) {
    cache::Lookup entry = cache->read(key);
    ASSERT_TRUE(entry.hit());
    EXPECT_NE(entry.entry.info.summary.find("\"tile\":\"" + compiler::to_string(tile) + "\""),
              std::string::npos)
        << entry.entry.info.summary;
    EXPECT_EQ(entry.entry.info.field("schedule").empty(), !tuned);
  };
  expect_entry(tuned_key, r.winner, true);
  expect_entry(model_key, r.model, false);
}

// A candidate whose outputs differ from the model tile's is left out, however fast: here the
// 32x64 kernels are the fastest, and they write 0x3f bytes over the output where the others
// write nothing.
TEST(FakeDriverTune, ACandidateWhoseOutputDiffersFromTheModelsIsLeftOut) {
  Config config = timed_config();
  config.kernel_fill = {{"_32x64", 0x3f}};
  ASSERT_TRUE(use_fake_driver(config));
  TempDir dir;
  auto cache = open_cache(dir.path());
  ir::Graph graph = gemm_graph();
  auto records = tune_five(graph, cache.get());
  ASSERT_TRUE(records) << records.error().message;
  ASSERT_EQ(records->size(), 1u);
  const runtime::TuningRecord& r = records->front();
  int refused = 0;
  for (const runtime::CandidateTime& c : r.candidates) {
    const auto& tile = std::get<compiler::MatmulTile>(c.tile);
    if (tile.bm == 32 && tile.bn == 64) {
      EXPECT_EQ(c.status.rfind("output 0 differs from the model tile's: rel_l2 ", 0), 0u)
          << compiler::to_string(tile) << ": " << c.status;
      ++refused;
    } else {
      EXPECT_EQ(c.status, "ok") << compiler::to_string(tile);
    }
  }
  EXPECT_GT(refused, 0);
  // Every other candidate took as long as the model's tile: the model's stands.
  EXPECT_TRUE(compiler::same_tile(r.winner, r.model)) << compiler::to_string(r.winner);
  EXPECT_NE(std::get<compiler::MatmulTile>(r.winner).bm, 32);
}

TEST(FakeDriverTune, ARecordThatDoesNotHoldIsLeftOutWithAWarning) {
  ASSERT_TRUE(use_fake_driver(timed_config()));
  TempDir dir;
  auto cache = open_cache(dir.path());
  ir::Graph graph = gemm_graph();
  auto problems = runtime::tuning_problems(graph, sm90());
  ASSERT_TRUE(problems);
  auto nvrtc = compiler::nvrtc_identity();
  auto id = runtime::device_identity(0);
  ASSERT_TRUE(nvrtc && id);
  std::string signature = problems->front().signature;
  // A record naming a tile the problem cannot run (bk 8 is no candidate), then one that is not
  // a record at all.
  runtime::TuningRecord bad;
  bad.signature = signature;
  bad.kernel = "k0_matmul_bf16";
  bad.arch = "sm_90a";
  bad.device = id->text();
  bad.date = "2026-11-26";
  bad.repeats = 5;
  bad.winner = compiler::MatmulTile{64, 64, 8, 2, 2, 3};
  bad.model = bad.winner;
  auto fields = runtime::tuning_fields(signature, *id, "sm_90a", *nvrtc);
  for (std::string payload : {runtime::encode_record(bad), std::string("{\"signature\": 3}")}) {
    cache::Contents contents;
    contents.summary = "{}";
    contents.payloads.push_back({runtime::k_payload_tuning, payload});
    ASSERT_TRUE(cache->store(cache::make_key(fields), fields, contents));
    std::vector<std::string> warnings;
    RuntimeOptions options;
    options.cache_dir = dir.path();
    options.remote_cache = "";
    options.log = [&](LogLevel level, std::string_view message) {
      if (level == LogLevel::warning) warnings.emplace_back(message);
    };
    auto runtime = Runtime::create(options);
    ASSERT_TRUE(runtime);
    auto exe = (*runtime)->compile(graph);
    ASSERT_TRUE(exe) << exe.error().message;
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("tuning record " + cache::make_key(fields)), std::string::npos)
        << warnings[0];
    EXPECT_NE(warnings[0].find("not used"), std::string::npos) << warnings[0];
    cache::Lookup entry = cache->read((*exe)->key());
    ASSERT_TRUE(entry.hit());
    EXPECT_EQ(entry.entry.info.field("schedule"), "") << "compiled with the model's tiles";
  }
}

TEST(FakeDriverTune, ASymbolicGraphIsTunedAtItsBucketAndCompiledWithTheRecordThere) {
  ASSERT_TRUE(use_fake_driver(timed_config()));
  TempDir dir;
  auto graph = ir::parse_graph(R"(graph g {
  dim B: 1..4096
  input a: bf16[B, 384]
  input b: bf16[384, 520]
  c = matmul(a, b)
  output c
}
)", "g.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  compiler::CompileOptions options = sm90();
  options.bucket = {compiler::bucket_of(100, graph->symbols()[0])};  // B in [65, 128]
  auto cache = open_cache(dir.path());
  runtime::TuneOptions tune;
  tune.repeats = 5;
  auto records = runtime::tune_graph(*graph, options, cache.get(), tune);
  ASSERT_TRUE(records) << records.error().message;
  ASSERT_EQ(records->size(), 1u);
  EXPECT_NE(records->front().signature.find(" m=128 "), std::string::npos)
      << "planned at the bucket's upper bound: " << records->front().signature;
  EXPECT_EQ(std::get<compiler::MatmulTile>(records->front().winner).bn, 64);
  // The wgmma kernel computes the bucket's problem too: its tiles were timed, each run with its
  // tensor maps encoded at the bucket's sizes.
  int wgmma = 0;
  for (const runtime::CandidateTime& c : records->front().candidates) {
    const auto& tile = std::get<compiler::MatmulTile>(c.tile);
    if (!tile.wgmma) continue;
    EXPECT_EQ(c.status, "ok") << compiler::to_string(tile);
    ++wgmma;
  }
  EXPECT_EQ(wgmma, 4);
  // A runtime running B = 100 compiles that bucket with the record; B = 20 (another bucket, no
  // record) with the model's tiles.
  RuntimeOptions ro;
  ro.cache_dir = dir.path();
  ro.remote_cache = "";
  auto runtime = Runtime::create(ro);
  ASSERT_TRUE(runtime);
  auto exe = (*runtime)->compile(*graph);
  ASSERT_TRUE(exe) << exe.error().message;
  ASSERT_TRUE((*exe)->prepare({100}));
  ASSERT_TRUE((*exe)->prepare({20}));
  int tuned = 0, model = 0;
  auto entries = cache->list();
  ASSERT_TRUE(entries);
  for (const cache::EntryInfo& e : *entries) {
    if (e.field("graph_hash").empty() || e.field("dims").empty()) continue;
    bool has_schedule = !e.field("schedule").empty();
    if (e.field("dims") == "dim0 in [65, 128]" && has_schedule) ++tuned;
    if (e.field("dims") == "dim0 in [17, 32]" && !has_schedule) ++model;
  }
  EXPECT_GE(tuned, 1);
  EXPECT_EQ(model, 1);
}

TEST(FakeDriverTune, ARecordOfAnotherDeviceOrWithoutATimedWinnerIsNotUsed) {
  ASSERT_TRUE(use_fake_driver(timed_config()));
  TempDir dir;
  auto cache = open_cache(dir.path());
  ir::Graph graph = gemm_graph();
  auto records = tune_five(graph, cache.get());
  ASSERT_TRUE(records) << records.error().message;
  auto id = runtime::device_identity(0);
  auto nvrtc = compiler::nvrtc_identity();
  ASSERT_TRUE(id && nvrtc);
  auto fields = runtime::tuning_fields(records->front().signature, *id, "sm_90a", *nvrtc);
  auto restore = [&](const runtime::TuningRecord& r) {
    cache::Contents contents;
    contents.summary = "{}";
    contents.payloads.push_back({runtime::k_payload_tuning, runtime::encode_record(r)});
    ASSERT_TRUE(cache->store(cache::make_key(fields), fields, contents));
  };
  auto why_unused = [&]() -> std::string {
    runtime::TunedTiles tiles = runtime::tuned_tiles(*cache, *id, "sm_90a", *nvrtc);
    std::string why;
    auto schedule = runtime::tuned_schedule(graph, sm90(), *cache, tiles,
                                            [&](const std::string& w) { why = w; });
    EXPECT_TRUE(schedule);
    EXPECT_EQ(schedule && *schedule != nullptr, why.empty()) << why;
    return why;
  };
  EXPECT_EQ(why_unused(), "") << "the tuner's own record is used";
  runtime::TuningRecord r = records->front();
  r.device = "Another GPU (8 SMs)";
  restore(r);
  EXPECT_NE(why_unused().find("it names another device or arch"), std::string::npos);
  r = records->front();
  r.date = "yesterday";
  restore(r);
  EXPECT_NE(why_unused().find("its date is not a date"), std::string::npos);
  r = records->front();
  for (runtime::CandidateTime& c : r.candidates)
    if (compiler::same_tile(c.tile, r.winner)) c.status = "output 0 differs";
  restore(r);
  EXPECT_NE(why_unused().find("its winner is not one of its candidates that timed ok"),
            std::string::npos);
  cache::Contents big;
  big.summary = "{}";
  big.payloads.push_back({runtime::k_payload_tuning,
                          std::string(runtime::k_max_tuning_record_bytes + 1, ' ')});
  ASSERT_TRUE(cache->store(cache::make_key(fields), fields, big));
  EXPECT_NE(why_unused().find("over the 1048576 a record may be"), std::string::npos);
}

TEST(FakeDriverTune, AutotuneOnTunesAProblemWithoutARecordOnItsFirstCompile) {
  ASSERT_TRUE(use_fake_driver(timed_config()));
  TempDir dir;
  ir::Graph graph = gemm_graph();
  RuntimeOptions options;
  options.cache_dir = dir.path();
  options.remote_cache = "";
  options.autotune = Autotune::on;
  std::vector<std::string> info;
  options.log = [&](LogLevel, std::string_view message) { info.emplace_back(message); };
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime);
  auto exe = (*runtime)->compile(graph);
  ASSERT_TRUE(exe) << exe.error().message;
  ASSERT_FALSE(info.empty());
  EXPECT_NE(info[0].find(
                "autotune: timing the tiles of 1 matmul or attention problem(s) on Fake H200"),
            std::string::npos)
      << info[0];
  auto cache = open_cache(dir.path());
  auto id = runtime::device_identity(0);
  auto nvrtc = compiler::nvrtc_identity();
  ASSERT_TRUE(id && nvrtc);
  runtime::TunedTiles tiles = runtime::tuned_tiles(*cache, *id, "sm_90a", *nvrtc);
  EXPECT_EQ(tiles.keys.size(), 1u);
  cache::Lookup entry = cache->read((*exe)->key());
  ASSERT_TRUE(entry.hit());
  EXPECT_NE(entry.entry.info.summary.find("32x64x"), std::string::npos)
      << entry.entry.info.summary;
  // A second compile finds the record and tunes nothing.
  info.clear();
  auto again = (*runtime)->compile(graph);
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)->key(), (*exe)->key());
  EXPECT_TRUE(info.empty()) << info[0];
}

TEST(FakeDriverTune, TuningRefusesAnArchOtherThanTheDevicesAndTooFewRuns) {
  ASSERT_TRUE(use_fake_driver(timed_config()));
  ir::Graph graph = gemm_graph();
  compiler::CompileOptions options = sm90();
  options.target = compiler::Target::cuda(80);
  auto records = runtime::tune_graph(graph, options, nullptr, {});
  ASSERT_FALSE(records);
  EXPECT_NE(records.error().message.find("is sm_90: tuning for sm_80 needs a device of that arch"),
            std::string::npos)
      << records.error().message;
  runtime::TuneOptions few;
  few.repeats = 4;
  auto refused = runtime::tune_graph(graph, sm90(), nullptr, few);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("at least 5 timed runs"), std::string::npos);
}

TEST(FakeDriverTune, RecordsRoundTripAndABadOneIsRefusedSayingWhy) {
  runtime::TuningRecord r;
  r.signature = "matmul batch=1";
  r.kernel = "k0";
  r.arch = "sm_90";
  r.device = "X (1 SMs)";
  r.date = "2026-11-26";
  r.repeats = 7;
  r.winner = compiler::MatmulTile{128, 128, 32, 2, 2, 3};
  r.model = compiler::MatmulTile{128, 256, 64, 2, 4, 4};
  r.candidates = {{r.winner, 0.5, "ok"},
                  {r.model, 0.75, "ok"},
                  {compiler::MatmulTile{64, 64, 32, 2, 2, 2}, -1, "compile: no"}};
  auto back = runtime::decode_record(runtime::encode_record(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(runtime::encode_record(*back), runtime::encode_record(r));
  EXPECT_EQ(back->source(), "tuned on X (1 SMs) 2026-11-26");
  EXPECT_EQ(back->candidates[2].median_ms, -1);
  for (const char* bad : {"[]", "{}", "not json",
                          R"({"signature":"s","kernel":"k","arch":"a","device":"d","date":"x",
                              "repeats":5,"winner":"128x128","model":"x","candidates":[]})"}) {
    auto decoded = runtime::decode_record(bad);
    ASSERT_FALSE(decoded) << bad;
    EXPECT_NE(decoded.error().message.find("tuning record: "), std::string::npos);
  }
}

// A projection then a causal attention: one matmul and one attention problem.
const char* k_projected_attention = R"(graph projected {
  input x: bf16[4, 256, 64]
  input w: bf16[64, 64]
  q = matmul(x, w)
  o = attention(q, x, x, causal=true)
  output o
}
)";

// Attention kernels are tuned beside matmuls: each problem gets its record, the fastest tile
// wins (8 warps here: 256 threads a block), a record that names a matmul's tile for the
// attention is refused, and a runtime compiles both kernels with their records' tiles and says
// so in its report.
TEST(FakeDriverTune, AttentionTilesAreTunedBesideMatmulsAndTheRuntimeCompilesWithThem) {
  Config config = timed_config();
  config.kernel_ms = {{"attention@256", 0.25}, {"_32x64", 0.25}};
  ASSERT_TRUE(use_fake_driver(config));
  TempDir dir;
  auto cache = open_cache(dir.path());
  auto graph = ir::parse_graph(k_projected_attention, "projected.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  auto problems = runtime::tuning_problems(*graph, sm90());
  ASSERT_TRUE(problems) << problems.error().message;
  ASSERT_EQ(problems->size(), 2u);
  ASSERT_TRUE(std::holds_alternative<compiler::AttentionShape>(problems->back().shape));
  const auto& shape = std::get<compiler::AttentionShape>(problems->back().shape);
  EXPECT_EQ(problems->back().signature,
            "attention batch=4 sq=256 sk=256 d=64 dv=64 elem=2 path=bf16 causal=1 mask=0 k_group=1 "
            "v_group=1");

  runtime::TuneOptions tune;
  tune.repeats = 5;
  std::vector<std::string> lines;
  tune.progress = [&](const std::string& line) { lines.push_back(line); };
  auto records = runtime::tune_graph(*graph, sm90(), cache.get(), tune);
  ASSERT_TRUE(records) << records.error().message;
  ASSERT_EQ(records->size(), 2u);
  const runtime::TuningRecord& r = records->back();
  EXPECT_EQ(r.signature, problems->back().signature);
  EXPECT_EQ(r.kernel, "k1_attention_bf16_causal");
  // sm_90a: the wgmma attention kernel's tile after the mma.sync kernel's.
  std::vector<compiler::AttentionTile> tiles = compiler::attention_candidates(shape, 90);
  tiles.push_back(compiler::choose_wgmma_attention_tile(shape));
  ASSERT_EQ(r.candidates.size(), tiles.size());
  // Each candidate times the whole graph: the projection at the model's tile (not 32x64: 1 ms)
  // and the attention at the candidate's.
  for (size_t i = 0; i < tiles.size(); ++i) {
    const runtime::CandidateTime& c = r.candidates[i];
    const auto& tile = std::get<compiler::AttentionTile>(c.tile);
    EXPECT_TRUE(compiler::same_tile(tile, tiles[i]));
    EXPECT_EQ(c.status, "ok") << compiler::to_string(tile);
    EXPECT_DOUBLE_EQ(c.median_ms, 1.0 + (tile.warps == 8 ? 0.25 : 1.0))
        << compiler::to_string(tile);
  }
  const auto& winner = std::get<compiler::AttentionTile>(r.winner);
  const auto& model = std::get<compiler::AttentionTile>(r.model);
  EXPECT_EQ(winner.warps, 8);
  // The model's tile on sm_90a is the wgmma kernel's (12 warps: 384 threads, timed at 1 ms).
  EXPECT_TRUE(model.wgmma);
  EXPECT_TRUE(compiler::same_tile(model, compiler::choose_wgmma_attention_tile(shape)));
  EXPECT_EQ(std::get<compiler::MatmulTile>(records->front().winner).bn, 64);
  bool announced = false;
  for (const std::string& line : lines)
    announced = announced ||
                line.rfind("tuning k1_attention_bf16_causal (attention batch=4", 0) == 0;
  EXPECT_TRUE(announced);

  // The record decodes to what the tuner returned; a compile with this device's records runs
  // both kernels at their records' tiles and says where each came from.
  auto decoded = runtime::decode_record(runtime::encode_record(r));
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_TRUE(compiler::same_tile(decoded->winner, r.winner));
  auto id = runtime::device_identity(0);
  auto nvrtc = compiler::nvrtc_identity();
  ASSERT_TRUE(id && nvrtc);
  runtime::TunedTiles both = runtime::tuned_tiles(*cache, *id, "sm_90a", *nvrtc);
  ASSERT_EQ(both.keys.size(), 2u);
  auto chosen = runtime::tuned_schedule(*graph, sm90(), *cache, both, nullptr);
  ASSERT_TRUE(chosen && *chosen);
  compiler::CompileOptions with_records = sm90();
  with_records.schedule = *chosen;
  auto compiled = runtime::compile_graph(*graph, with_records, cache.get());
  ASSERT_TRUE(compiled) << compiled.error().message;
  const auto& kernels = compiled->artifact.kernels;
  ASSERT_EQ(kernels.size(), 2u);
  for (const compiler::KernelArtifact& k : kernels)
    EXPECT_EQ(k.schedule, "tuned on Fake H200 (132 SMs) " + r.date) << k.name;
  EXPECT_EQ(kernels[1].name, "k1_attention_bf16_causal");
  EXPECT_EQ(kernels[1].tile, compiler::to_string(r.winner));
  EXPECT_EQ(kernels[1].launch.block[0], 256u);
  // A runtime on this device (autotune `cached`) compiles under the same key.
  RuntimeOptions options;
  options.cache_dir = dir.path();
  options.remote_cache = "";
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  auto exe = (*runtime)->compile(*graph);
  ASSERT_TRUE(exe) << exe.error().message;
  EXPECT_EQ((*exe)->key(), compiled->key);

  // A record whose winner is a matmul's tile is left out for the attention problem.
  runtime::TuningRecord wrong = r;
  wrong.winner = compiler::MatmulTile{64, 64, 32, 2, 2, 3};
  wrong.candidates.push_back({wrong.winner, 0.1, "ok"});
  auto fields = runtime::tuning_fields(r.signature, *id, "sm_90a", *nvrtc);
  cache::Contents contents;
  contents.summary = "{}";
  contents.payloads.push_back({runtime::k_payload_tuning, runtime::encode_record(wrong)});
  ASSERT_TRUE(cache->store(cache::make_key(fields), fields, contents));
  runtime::TunedTiles tuned = runtime::tuned_tiles(*cache, *id, "sm_90a", *nvrtc);
  std::vector<std::string> warnings;
  auto schedule = runtime::tuned_schedule(*graph, sm90(), *cache, tuned,
                                          [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(schedule) << schedule.error().message;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("not used: its tile 64x64x32, 2x2 warps, 3 stages is not an "
                             "attention's"),
            std::string::npos)
      << warnings[0];

  // A record whose winner is the wgmma kernel's tile runs it, and the kernel (named by its
  // block tile) says where its tile came from; one of a key tile that kernel does not run at
  // this head dim (64 keys are for head dims over 128) is left out, saying why.
  for (const char* tile : {"128x128, wgmma, 2 stages", "128x64, wgmma, 2 stages"}) {
    SCOPED_TRACE(tile);
    runtime::TuningRecord wg = r;
    auto parsed = compiler::parse_kernel_tile(tile);
    ASSERT_TRUE(parsed);
    wg.winner = *parsed;
    wg.candidates.push_back({wg.winner, 0.1, "ok"});
    cache::Contents replaced;
    replaced.summary = "{}";
    replaced.payloads.push_back({runtime::k_payload_tuning, runtime::encode_record(wg)});
    ASSERT_TRUE(cache->store(cache::make_key(fields), fields, replaced));
    warnings.clear();
    runtime::TunedTiles stored = runtime::tuned_tiles(*cache, *id, "sm_90a", *nvrtc);
    auto with_wg = runtime::tuned_schedule(*graph, sm90(), *cache, stored,
                                           [&](const std::string& w) { warnings.push_back(w); });
    ASSERT_TRUE(with_wg && *with_wg);
    if (std::string(tile) == "128x64, wgmma, 2 stages") {
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_NE(warnings[0].find("not used: tile 128x64, wgmma, 2 stages is not one the sm_90a "
                                 "attention kernel runs"),
                std::string::npos)
          << warnings[0];
      continue;
    }
    EXPECT_TRUE(warnings.empty());
    compiler::CompileOptions on_wg = sm90();
    on_wg.schedule = *with_wg;
    auto wg_compiled = runtime::compile_graph(*graph, on_wg, cache.get());
    ASSERT_TRUE(wg_compiled) << wg_compiled.error().message;
    const compiler::KernelArtifact& a = wg_compiled->artifact.kernels.at(1);
    EXPECT_EQ(a.name, "k1_attention_bf16_causal_wg128x128");
    EXPECT_EQ(a.tile, tile);
    EXPECT_EQ(a.schedule, "tuned on Fake H200 (132 SMs) " + r.date);
    // An entry shared by the tiles' digest (compiled for another device's record) is reported
    // by the kernel's name: the schedule must know it by the name the kernel has.
    const auto* by_name = dynamic_cast<const compiler::ChosenSchedule*>(with_wg->get());
    ASSERT_TRUE(by_name);
    auto source = by_name->kernel_sources.find(a.name);
    ASSERT_NE(source, by_name->kernel_sources.end()) << a.name;
    EXPECT_EQ(source->second, a.schedule);
  }
}

// One GPU tunes for the fleet: its record goes to the remote tier signed, a new machine pulls it
// and compiles with it; a record put unsigned while the fleet signs is refused.
TEST(FakeDriverTune, ARecordTravelsThroughTheRemoteTierSignedAndAnUnsignedOneIsRefused) {
  kiln::testing::RedisServer server;
  if (!server.installed()) GTEST_SKIP() << "redis-server is not installed";
  ASSERT_TRUE(server.started()) << server.error();
  ASSERT_TRUE(use_fake_driver(timed_config()));
  TempDir dir;
  std::vector<std::string> warnings;
  auto machine = [&](const std::string& name, std::optional<std::string> secret) {
    cache::Options options;
    options.dir = dir.path() + "/" + name;
    options.remote = server.url();
    options.remote_key = std::move(secret);
    options.warn = [&](const std::string& w) { warnings.push_back(w); };
    return cache::Cache::open(options);
  };
  const std::string secret = "fleet secret 0123";
  ir::Graph graph = gemm_graph();
  runtime::TuneOptions tune;
  tune.repeats = 5;
  auto tuner = machine("gpu", secret);
  auto records = runtime::tune_graph(graph, sm90(), tuner.get(), tune);
  ASSERT_TRUE(records) << records.error().message;
  ASSERT_EQ(records->size(), 1u);
  ASSERT_TRUE(tuner->flush());

  auto id = runtime::device_identity(0);
  auto nvrtc = compiler::nvrtc_identity();
  ASSERT_TRUE(id && nvrtc);
  auto fresh = machine("new", secret);
  EXPECT_TRUE(runtime::tuned_tiles(*fresh, *id, "sm_90a", *nvrtc).empty());
  auto pulled = fresh->pull(std::nullopt);
  ASSERT_TRUE(pulled) << pulled.error().message;
  EXPECT_EQ(pulled->rejected, 0u);
  runtime::TunedTiles tiles = runtime::tuned_tiles(*fresh, *id, "sm_90a", *nvrtc);
  ASSERT_EQ(tiles.keys.size(), 1u);
  auto schedule = runtime::tuned_schedule(graph, sm90(), *fresh, tiles, nullptr);
  ASSERT_TRUE(schedule && *schedule);
  auto* chosen = dynamic_cast<const compiler::ChosenSchedule*>(schedule->get());
  ASSERT_NE(chosen, nullptr);
  ASSERT_EQ(chosen->chosen().size(), 1u);
  EXPECT_TRUE(compiler::same_tile(chosen->chosen().begin()->second.tile, records->front().winner));
  EXPECT_EQ(chosen->chosen().begin()->second.source, "tuned on Fake H200 (132 SMs) " +
                                                         records->front().date);

  // A rogue machine without the secret cannot replace the signed record (a signed value is kept),
  // and its unsigned record of another problem is refused by every machine that checks.
  runtime::TuningRecord forged = records->front();
  forged.winner = forged.model;
  auto put_unsigned = [&](const runtime::TuningRecord& record) {
    auto fields = runtime::tuning_fields(record.signature, *id, "sm_90a", *nvrtc);
    cache::Contents contents;
    contents.summary = "{}";
    contents.payloads.push_back({runtime::k_payload_tuning, runtime::encode_record(record)});
    auto rogue = machine("rogue", std::nullopt);
    ASSERT_TRUE(rogue->store(cache::make_key(fields), fields, contents));
    ASSERT_TRUE(rogue->flush());
  };
  put_unsigned(forged);
  runtime::TuningRecord other = forged;
  other.signature = "matmul batch=1 m=7 n=8 k=9";
  put_unsigned(other);
  auto victim = machine("victim", secret);
  auto refused = victim->pull(std::nullopt);
  ASSERT_TRUE(refused) << refused.error().message;
  EXPECT_EQ(refused->rejected, 1u) << "the unsigned record of the other problem";
  runtime::TunedTiles kept = runtime::tuned_tiles(*victim, *id, "sm_90a", *nvrtc);
  ASSERT_EQ(kept.keys.size(), 1u);
  EXPECT_EQ(kept.keys.begin()->first, records->front().signature);
  auto genuine = runtime::tuned_schedule(graph, sm90(), *victim, kept, nullptr);
  ASSERT_TRUE(genuine && *genuine);
  auto* genuine_choice = dynamic_cast<const compiler::ChosenSchedule*>(genuine->get());
  ASSERT_NE(genuine_choice, nullptr);
  EXPECT_TRUE(compiler::same_tile(genuine_choice->chosen().begin()->second.tile,
                                  records->front().winner))
      << "the tuner's record, not the rogue's";
}

}  // namespace
}  // namespace kiln
