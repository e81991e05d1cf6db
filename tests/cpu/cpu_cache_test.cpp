// The CPU target through the Runtime and its cache: a hit loads the stored object code and gives
// the same bits as the compile that stored it; a damaged record is dropped and compiled afresh.
#include "cache/cache.h"
#include "tests/cache/test_util.h"
#include "cache/local/sqlite.h"
#include "ir/parse.h"
#include "runtime/compile_service.h"
#include "kiln/kiln.h"
#include "reference/tensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <thread>
#include <utility>

namespace kiln {
namespace {

struct TempDir {
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-cpu-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

std::shared_ptr<Executable> compile(const std::string& dir, const ir::Graph& graph) {
  RuntimeOptions options;
  options.target = "cpu";
  options.cache_dir = dir;
  options.precision = Precision::tf32x3;
  options.remote_cache = "";
  auto runtime = Runtime::create(options);
  EXPECT_TRUE(runtime) << runtime.error().message;
  if (!runtime) return nullptr;
  EXPECT_EQ((*runtime)->arch().rfind("cpu:", 0), 0u) << (*runtime)->arch();
  auto exe = (*runtime)->compile(graph);
  EXPECT_TRUE(exe) << exe.error().message;
  return exe ? *exe : nullptr;
}

std::vector<std::vector<unsigned char>> outputs(Executable& exe, const ir::Graph& graph) {
  std::vector<std::vector<unsigned char>> inputs;
  for (const reference::Tensor& t : reference::random_inputs(graph, 3)) {
    inputs.emplace_back(t.type().bytes());
    reference::store_device_bytes(t, inputs.back().data());
  }
  auto out = exe.run_host(inputs);
  EXPECT_TRUE(out) << out.error().message;
  return out ? *out : std::vector<std::vector<unsigned char>>{};
}

class CpuCache : public ::testing::Test {
protected:
  void SetUp() override {
    auto parsed = ir::parse_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/graphs/mlp.kg");
    ASSERT_TRUE(parsed) << parsed.error().message;
    graph = *parsed;
    auto first = compile(dir.path, *graph);
    ASSERT_TRUE(first);
    EXPECT_FALSE(first->cache_hit());
    EXPECT_TRUE(first->on_cpu());
    compiled = outputs(*first, *graph);
    ASSERT_FALSE(compiled.empty());
  }
  TempDir dir;
  std::optional<ir::Graph> graph;
  std::vector<std::vector<unsigned char>> compiled;
};

TEST_F(CpuCache, AHitLoadsTheStoredObjectAndGivesTheSameBits) {
  auto second = compile(dir.path, *graph);
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->cache_hit());
  EXPECT_EQ(outputs(*second, *graph), compiled);
}

TEST_F(CpuCache, ADamagedObjectIsDroppedAndCompiledAfresh) {
  auto db = cache::sql::Db::open(dir.path + "/kiln.db");
  ASSERT_TRUE(db.ok());
  auto read = (*db)->prepare("SELECT key, record FROM entries");
  ASSERT_TRUE(read.ok());
  auto row = read->step();
  ASSERT_TRUE(row.ok() && *row);
  std::string key = read->column_text(0);
  std::string record = read->column_blob(1);
  // A byte in the middle of the record, which is mostly the object code.
  record[record.size() / 2] = static_cast<char>(~record[record.size() / 2]);
  auto write = (*db)->prepare("UPDATE entries SET record = ? WHERE key = ?");
  ASSERT_TRUE(write.ok());
  write->bind_blob(1, record).bind_text(2, key);
  ASSERT_TRUE(write->run().ok());
  auto again = compile(dir.path, *graph);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->cache_hit());
  EXPECT_EQ(outputs(*again, *graph), compiled);
}

// An entry whose checksums (and, from a fleet, signature) hold but whose object the loader
// refuses: what a keyholder's forged or damaged build would leave. It is compiled again, the fresh
// object replaces it, and the next compile hits; kept, it would fail every run that hit it.
TEST_F(CpuCache, AnObjectTheLoaderRefusesIsCompiledAgainAndReplacesTheEntry) {
  std::ifstream in(KILN_FORGED_OBJECT, std::ios::binary);
  ASSERT_TRUE(in) << KILN_FORGED_OBJECT;
  std::string forged_object((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string key;
  {
    cache::Options cache_options;
    cache_options.dir = dir.path;
    auto store = cache::Cache::open(cache_options);
    auto listed = store->list();
    ASSERT_TRUE(listed.ok() && listed->size() == 1u);
    key = listed->front().key;
    ASSERT_EQ(cache::testing::replace_payloads(
                  *store, key, [](const std::string& name) { return cache::is_native_payload(name); },
                  forged_object),
              1);
    // `kiln verify`'s check names it, where the checksums alone find nothing wrong.
    auto checksums = store->verify(cache::Fix::no);
    ASSERT_TRUE(checksums) << checksums.error().message;
    EXPECT_TRUE(checksums->bad.empty());
    auto verified = store->verify(cache::Fix::no, runtime::entry_problem);
    ASSERT_TRUE(verified) << verified.error().message;
    ASSERT_EQ(verified->bad.size(), 1u);
    EXPECT_EQ(verified->bad[0].key, key);
    EXPECT_EQ(verified->bad[0].reason.rfind("its object does not load: ", 0), 0u)
        << verified->bad[0].reason;
    EXPECT_NE(verified->bad[0].reason.find("'system'"), std::string::npos)
        << verified->bad[0].reason;
  }
  std::vector<std::string> warnings;
  RuntimeOptions options;
  options.target = "cpu";
  options.cache_dir = dir.path;
  options.precision = Precision::tf32x3;
  options.remote_cache = "";
  options.log = [&](LogLevel level, std::string_view message) {
    if (level == LogLevel::warning) warnings.emplace_back(message);
  };
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  auto again = (*runtime)->compile(*graph);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE((*again)->cache_hit());
  EXPECT_EQ(outputs(**again, *graph), compiled);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("replaced bad entry " + key + ": it does not load"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("refused: it imports 'system'"), std::string::npos) << warnings[0];
  warnings.clear();
  auto third = (*runtime)->compile(*graph);
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_TRUE((*third)->cache_hit()) << "the fresh object replaced the refused one";
  EXPECT_EQ(outputs(**third, *graph), compiled);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
}

TEST(CpuRuntime, UnknownTargetsAreErrors) {
  RuntimeOptions options;
  options.target = "tpu";
  auto runtime = Runtime::create(options);
  ASSERT_FALSE(runtime);
  EXPECT_NE(runtime.error().message.find("unknown target 'tpu'"), std::string::npos);
  options.target = "cpu:no-such-cpu";
  runtime = Runtime::create(options);
  ASSERT_FALSE(runtime);
  EXPECT_NE(runtime.error().message.find("no-such-cpu"), std::string::npos);
}

TEST(CpuRuntime, AutoPicksTheCpuWhereThereIsNoGpu) {
  if (gpu_status()) GTEST_SKIP() << "a GPU answers here";
  RuntimeOptions options;
  options.target = "auto";
  options.use_cache = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  EXPECT_EQ((*runtime)->arch().rfind("cpu:", 0), 0u);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// RuntimeOptions::check_indices: an embedding id outside its table stops a run whose inputs are
// in host memory (run_host, and run() on the CPU target), naming the input, the position, the id
// and V; without it the row is zeros. A symbolic graph is checked at its run's shape.
TEST(CpuCheckIndices, AnIdOutsideTheTableStopsTheRunWhenAsked) {
  TempDir dir;
  auto graph = ir::parse_graph(
      "graph g {\n  dim S: 1..8\n  input ids: i32[S]\n  input emb: f32[3, 2]\n"
      "  x = embedding(emb, ids)\n  output x\n}\n",
      "g.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  for (bool check : {false, true}) {
    RuntimeOptions options;
    options.target = "cpu";
    options.cache_dir = dir.path;
    options.remote_cache = "";
    options.check_indices = check;
    auto runtime = Runtime::create(options);
    ASSERT_TRUE(runtime) << runtime.error().message;
    auto exe = (*runtime)->compile(*graph);
    ASSERT_TRUE(exe) << exe.error().message;
    const int32_t ids[4] = {2, 0, 3, -1};
    const float emb[6] = {1, 2, 3, 4, 5, 6};
    std::vector<std::vector<unsigned char>> inputs(2);
    inputs[0].assign(reinterpret_cast<const unsigned char*>(ids),
                     reinterpret_cast<const unsigned char*>(ids) + sizeof ids);
    inputs[1].assign(reinterpret_cast<const unsigned char*>(emb),
                     reinterpret_cast<const unsigned char*>(emb) + sizeof emb);
    auto out = (*exe)->run_host(inputs, {4});
    if (check) {
      ASSERT_FALSE(out);
      EXPECT_EQ(out.error().message,
                "input 'ids' holds 3 at [2], outside the embedding table 'emb' of 3 rows ([0, 3)) "
                "(checked because check_indices is on)");
      // run() with host pointers is checked the same way.
      alignas(16) int32_t a_ids[4] = {2, 0, 1, 7};
      alignas(16) float a_emb[6] = {1, 2, 3, 4, 5, 6};
      alignas(16) float a_out[8] = {};
      Status s = (*exe)->run({{a_ids, DType::i32, {4}}, {a_emb, DType::f32, {3, 2}}},
                             {{a_out, DType::f32, {4, 2}}});
      ASSERT_FALSE(s);
      EXPECT_NE(s.error().message.find("holds 7 at [3]"), std::string::npos) << s.error().message;
    } else {
      ASSERT_TRUE(out) << out.error().message;
      std::vector<float> x(8);
      std::memcpy(x.data(), (*out)[0].data(), 32);
      EXPECT_EQ(x, (std::vector<float>{5, 6, 1, 2, 0, 0, 0, 0}));
    }
  }
}

// A runtime for `target` (the CPU by default) over `dir`'s cache, no remote tier.
std::unique_ptr<Runtime> cpu_runtime(const TempDir& dir, const char* target = "cpu") {
  RuntimeOptions options;
  options.target = target;
  options.cache_dir = dir.path;
  options.remote_cache = "";
  auto runtime = Runtime::create(options);
  EXPECT_TRUE(runtime) << runtime.error().message;
  return runtime ? std::move(*runtime) : nullptr;
}

// The graph `text` compiled by `runtime`; null, with the failure recorded, when it does not parse
// or compile.
std::shared_ptr<Executable> compile_text(Runtime& runtime, const std::string& text) {
  auto graph = ir::parse_graph(text, "g.kg");
  EXPECT_TRUE(graph) << graph.error().message;
  if (!graph) return nullptr;
  auto exe = runtime.compile(*graph);
  EXPECT_TRUE(exe) << exe.error().message;
  return exe ? *exe : nullptr;
}

// Executable::run_timed on the CPU target: the outputs run() gives, one time per kernel in the
// artifact's order (a symbolic graph's: its bucket's kernels), the arguments checked as run()
// checks them; on the emulator it says it times the CPU target only.
TEST(CpuRunTimed, TimesEachKernelAndComputesWhatRunDoes) {
  TempDir dir;
  const std::string text =
      "graph g {\n  dim S: 1..64\n  input x: f32[S, 8]\n  input w: f32[8, 4]\n"
      "  y = softmax(relu(matmul(x, w)))\n  output y\n}\n";
  auto runtime = cpu_runtime(dir);
  ASSERT_TRUE(runtime);
  auto exe = compile_text(*runtime, text);
  ASSERT_TRUE(exe);
  std::vector<float> x(5 * 8), w(8 * 4), a(5 * 4, -1.0f), b(5 * 4, -2.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i % 5);
  std::vector<TensorRef> in = {{x.data(), DType::f32, {5, 8}}, {w.data(), DType::f32, {8, 4}}};
  ASSERT_TRUE(exe->run(in, {{a.data(), DType::f32, {5, 4}}}));
  std::vector<KernelTime> kernels{{"stale", 1.0}};
  Status s = exe->run_timed(in, {{b.data(), DType::f32, {5, 4}}}, kernels);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(a, b);
  ASSERT_EQ(kernels.size(), 2u);  // the matmul with its relu, the softmax
  EXPECT_EQ(kernels[0].name.rfind("k0_matmul", 0), 0u) << kernels[0].name;
  EXPECT_EQ(kernels[1].name, "k1_softmax");
  for (const KernelTime& k : kernels) EXPECT_GE(k.us, 0.0);
  // Checked as run() is: a wrong shape is refused before anything runs.
  s = exe->run_timed(in, {{b.data(), DType::f32, {4, 4}}}, kernels);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("output"), std::string::npos) << s.error().message;
  EXPECT_TRUE(kernels.empty());

  auto other = cpu_runtime(dir, "emulate:sm_90");
  ASSERT_TRUE(other);
  auto exe2 = compile_text(*other, text);
  ASSERT_TRUE(exe2);
  s = exe2->run_timed(in, {{b.data(), DType::f32, {5, 4}}}, kernels);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("run_timed times the CPU target's kernels only"),
            std::string::npos)
      << s.error().message;
}

// One executable run at sizes that come and go: the specs of the last size and the program's
// kept temporaries and scratch are reused only where they fit. Each run computes what a fresh
// executable computes at that size, and a shape of the previous size is refused at the next.
// Runs from several threads at once (one holds the kept buffers, the others allocate their own)
// compute the same.
// dims_of reads the dims' values from input shapes as run() does, with run()'s errors.
TEST(CpuRuntime, DimsOfReadsTheSizesTheInputShapesGive) {
  TempDir dir;
  auto runtime = cpu_runtime(dir);
  ASSERT_TRUE(runtime);
  auto exe = compile_text(*runtime,
                          "graph g {\n  dim B: 1..8\n  dim S: 1..64\n  input x: f32[B, S, 4]\n"
                          "  input m: f32[B, S]\n  y = mul(x, 2.0)\n  z = add(m, 1.0)\n"
                          "  output y, z\n}\n");
  ASSERT_TRUE(exe);
  auto dims = exe->dims_of({{3, 37, 4}, {3, 37}});
  ASSERT_TRUE(dims) << dims.error().message;
  EXPECT_EQ(*dims, (std::vector<int64_t>{3, 37}));
  auto twice = exe->dims_of({{3, 37, 4}, {3, 36}});
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("S"), std::string::npos) << twice.error().message;
  auto outside = exe->dims_of({{0, 37, 4}, {0, 37}});
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.error().message.find("B = 0 is outside its range 1..8"), std::string::npos)
      << outside.error().message;
  auto fixed = compile_text(*runtime, "graph f {\n  input x: f32[4]\n  y = neg(x)\n  output y\n}\n");
  ASSERT_TRUE(fixed);
  auto none = fixed->dims_of({{4}});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST(CpuRuntime, RunsAtChangingSizesReuseNothingStale) {
  TempDir dir;
  const std::string text =
      "graph g {\n  dim S: 1..64\n  input x: f32[S, 8]\n  input w: f32[8, 4]\n"
      "  input w8: f32[8]\n  input b8: f32[8]\n  h = layer_norm(add(x, 1.0), w8, b8)\n"
      "  y = softmax(matmul(h, w))\n  output y\n}\n";
  auto runtime = cpu_runtime(dir);
  ASSERT_TRUE(runtime);
  auto exe = compile_text(*runtime, text);
  ASSERT_TRUE(exe);
  std::vector<float> w(8 * 4), w8(8, 1.0f), b8(8, 0.0f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i % 5) - 0.1f;
  auto run = [&](Executable& e, int64_t rows, std::vector<float>& out) {
    std::vector<float> x(static_cast<size_t>(rows) * 8);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>((i * 7 + rows) % 11) - 0.5f;
    out.assign(static_cast<size_t>(rows) * 4, -7.0f);
    return e.run({{x.data(), DType::f32, {rows, 8}}, {w.data(), DType::f32, {8, 4}},
                  {w8.data(), DType::f32, {8}}, {b8.data(), DType::f32, {8}}},
                 {{out.data(), DType::f32, {rows, 4}}});
  };
  std::map<int64_t, std::vector<float>> wanted;
  for (int64_t rows : {5, 40, 3, 40, 64, 5}) {
    std::vector<float> got, want;
    Status s = run(*exe, rows, got);
    ASSERT_TRUE(s) << rows << ": " << s.error().message;
    auto fresh = compile_text(*runtime, text);  // a hit: a new program, nothing kept yet
    ASSERT_TRUE(fresh);
    ASSERT_TRUE(run(*fresh, rows, want));
    EXPECT_EQ(got, want) << rows;
    for (float v : got) ASSERT_TRUE(v > 0.0f && v < 1.0f) << rows;  // softmax rows
    wanted[rows] = want;
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      const int64_t sizes[] = {5, 40, 3, 64};
      for (int i = 0; i < 25; ++i) {
        int64_t rows = sizes[(i + t) % 4];
        std::vector<float> got;
        if (!run(*exe, rows, got) || got != std::as_const(wanted).at(rows)) ++wrong;
      }
    });
  }
  for (std::thread& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
  // Inputs of 40 rows with an output of 5 (the size before): refused, the output untouched.
  std::vector<float> x(40 * 8, 0.5f), small(5 * 4, -7.0f);
  Status s = exe->run({{x.data(), DType::f32, {40, 8}}, {w.data(), DType::f32, {8, 4}},
                          {w8.data(), DType::f32, {8}}, {b8.data(), DType::f32, {8}}},
                         {{small.data(), DType::f32, {5, 4}}});
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("output"), std::string::npos) << s.error().message;
  for (float v : small) EXPECT_EQ(v, -7.0f);
}

}  // namespace
}  // namespace kiln
