// Tests of Runtime without a GPU: arch selection, compile through the cache, clear errors.
#include "kiln/kiln.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

namespace kiln {
namespace {

class TempCache {
public:
  TempCache() {
    char name[] = "/tmp/kiln-runtime-test-XXXXXX";
    m_path = mkdtemp(name);
  }
  ~TempCache() { std::filesystem::remove_all(m_path); }
  const std::string& path() const { return m_path; }

private:
  std::string m_path;
};

const std::string k_mlp = std::string(KILN_EXAMPLES_DIR) + "/mlp.kg";

std::unique_ptr<Runtime> make_runtime(const std::string& cache_dir, std::string arch = "sm_80",
                                      std::vector<std::string>* log = nullptr) {
  RuntimeOptions options;
  options.arch = std::move(arch);
  options.cache_dir = cache_dir;
  if (log) {
    options.log = [log](LogLevel, std::string_view m) { log->emplace_back(m); };
  }
  auto runtime = Runtime::create(options);
  EXPECT_TRUE(runtime) << runtime.error().message;
  return runtime ? std::move(*runtime) : nullptr;
}

TEST(Runtime, SecondCompileIsACacheHitWithTheSameKey) {
  TempCache dir;
  auto runtime = make_runtime(dir.path());
  ASSERT_TRUE(runtime);
  auto first = runtime->compile_file(k_mlp);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE((*first)->cache_hit());
  EXPECT_EQ((*first)->cache_tier(), "");
  EXPECT_GT((*first)->kernel_count(), 0u);
  auto second = runtime->compile_file(k_mlp);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_TRUE((*second)->cache_hit());
  EXPECT_EQ((*second)->cache_tier(), "local");
  EXPECT_EQ((*second)->key(), (*first)->key());
  EXPECT_EQ((*second)->kernel_count(), (*first)->kernel_count());
  EXPECT_EQ((*second)->arch(), "sm_80");
}

TEST(Runtime, AnotherProcessStartHitsTheSameEntry) {
  TempCache dir;
  std::string key;
  {
    auto runtime = make_runtime(dir.path());
    auto exe = runtime->compile_file(k_mlp);
    ASSERT_TRUE(exe) << exe.error().message;
    key = (*exe)->key();
  }
  auto runtime = make_runtime(dir.path());
  auto exe = runtime->compile_file(k_mlp);
  ASSERT_TRUE(exe) << exe.error().message;
  EXPECT_TRUE((*exe)->cache_hit());
  EXPECT_EQ((*exe)->key(), key);
}

TEST(Runtime, AutoPrecisionIsHighFromSm80AndLoggedOnce) {
  TempCache dir;
  std::vector<std::string> log;
  auto runtime = make_runtime(dir.path(), "sm_86", &log);
  auto a = runtime->compile_file(k_mlp);
  ASSERT_TRUE(a) << a.error().message;
  auto b = runtime->compile_file(k_mlp);
  ASSERT_TRUE(b);
  EXPECT_EQ((*a)->precision(), "high");
  int said = 0;
  for (const std::string& line : log) said += line.find("tensor cores: TF32 on") == 0;
  EXPECT_EQ(said, 1);
}

TEST(Runtime, AutoPrecisionIsHighestBelowSm80) {
  TempCache dir;
  std::vector<std::string> log;
  auto runtime = make_runtime(dir.path(), "sm_75", &log);
  auto exe = runtime->compile_file(k_mlp);
  ASSERT_TRUE(exe) << exe.error().message;
  EXPECT_EQ((*exe)->precision(), "highest");
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.front().rfind("tensor cores: TF32 off", 0), 0u) << log.front();
}

TEST(Runtime, PrecisionChangesTheKey) {
  TempCache dir;
  RuntimeOptions options;
  options.arch = "sm_90";
  options.cache_dir = dir.path();
  options.precision = Precision::highest;
  auto highest = Runtime::create(options).value()->compile_file(k_mlp);
  options.precision = Precision::tf32x3;
  auto tf32x3 = Runtime::create(options).value()->compile_file(k_mlp);
  ASSERT_TRUE(highest && tf32x3);
  EXPECT_NE((*highest)->key(), (*tf32x3)->key());
  EXPECT_EQ((*tf32x3)->precision(), "tf32x3");
}

TEST(Runtime, RefusedCombinationIsAnErrorUnlessFallbacksAreAllowed) {
  TempCache dir;
  const std::string bf16 = std::string(KILN_EXAMPLES_DIR) + "/gated_mlp.kg";
  RuntimeOptions options;
  options.arch = "sm_75";
  options.cache_dir = dir.path();
  auto refused = Runtime::create(options).value()->compile_file(bf16);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("sm_75"), std::string::npos) << refused.error().message;
  options.allow_fallback = true;
  auto allowed = Runtime::create(options).value()->compile_file(bf16);
  ASSERT_TRUE(allowed) << allowed.error().message;
  EXPECT_FALSE((*allowed)->fallbacks().empty());
}

TEST(Runtime, AnUnfusedAttentionFollowsTheFallbackPolicy) {
  TempCache dir;
  // Head dim 320: the attention runs unfused.
  const std::string wide = R"(graph wide {
    input q: f32[2, 33, 320]
    input k: f32[2, 40, 320]
    input v: f32[2, 40, 32]
    o = matmul(softmax(matmul(q, k, transpose_b=true), axis=-1), v)
    output o
  })";
  const std::string reason = "runs unfused: head dim 320 > 256";
  auto warnings = [&](const std::vector<std::string>& log) {
    int n = 0;
    for (const std::string& line : log) n += line.find(reason) != std::string::npos;
    return n;
  };
  for (FallbackPolicy policy : {FallbackPolicy::warn, FallbackPolicy::allow}) {
    for (std::string text : {wide, std::string(R"(graph wide_s {
      dim S: 1..64
      input q: f32[2, S, 320]
      input k: f32[2, S, 320]
      input v: f32[2, S, 32]
      o = matmul(softmax(matmul(q, k, transpose_b=true), axis=-1), v)
      output o
    })")}) {
      std::vector<std::string> log;
      RuntimeOptions options;
      options.arch = "sm_90";
      options.cache_dir = dir.path();
      options.fallbacks = policy;
      options.log = [&log](LogLevel, std::string_view m) { log.emplace_back(m); };
      auto exe = Runtime::create(options).value()->compile_text(text, "wide.kg");
      ASSERT_TRUE(exe) << exe.error().message;
      ASSERT_EQ((*exe)->fallbacks().size(), 1u);
      EXPECT_NE((*exe)->fallbacks()[0].find(reason), std::string::npos);
      EXPECT_EQ(warnings(log), policy == FallbackPolicy::warn ? 1 : 0) << text;
    }
  }
  RuntimeOptions options;
  options.arch = "sm_90";
  options.cache_dir = dir.path();
  options.fallbacks = FallbackPolicy::refuse;
  auto refused = Runtime::create(options).value()->compile_text(wide, "wide.kg");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find(reason), std::string::npos) << refused.error().message;
  // refuse also refuses the precision fallbacks allow_fallback would take.
  options.arch = "sm_75";
  options.allow_fallback = true;
  auto bf16 = Runtime::create(options).value()->compile_file(std::string(KILN_EXAMPLES_DIR) +
                                                             "/gated_mlp.kg");
  EXPECT_FALSE(bf16);
}

TEST(Runtime, BadArchIsAClearError) {
  RuntimeOptions options;
  options.arch = "sm_12";
  auto runtime = Runtime::create(options);
  ASSERT_FALSE(runtime);
  EXPECT_NE(runtime.error().message.find("sm_12"), std::string::npos) << runtime.error().message;
}

TEST(Runtime, NoArchAndNoDriverSaysHowToCompileAheadOfTime) {
  setenv("KILN_CUDA_DRIVER_PATH", "/nonexistent/libcuda.so.1", 1);
  auto runtime = Runtime::create({});
  ASSERT_FALSE(runtime);
  EXPECT_EQ(runtime.error().message.rfind("no CUDA driver found", 0), 0u)
      << runtime.error().message;
  EXPECT_NE(runtime.error().message.find("RuntimeOptions::arch"), std::string::npos);
}

TEST(Runtime, BadGraphTextIsALocatedError) {
  TempCache dir;
  auto runtime = make_runtime(dir.path());
  auto exe = runtime->compile_text("graph g {\n  output y\n}\n", "bad.kg");
  ASSERT_FALSE(exe);
  EXPECT_EQ(exe.error().message, "bad.kg:2:10: error: undefined value 'y'");
}

TEST(Runtime, ManyThreadsCompileThroughOneRuntimeAtOnce) {
  TempCache dir;
  auto runtime = make_runtime(dir.path());
  ASSERT_TRUE(runtime);
  const char* graphs[] = {"mlp.kg", "attention.kg", "mixed_head.kg", "half_epilogue.kg"};
  constexpr int k_threads = 8;
  std::vector<std::string> keys(k_threads);
  std::vector<std::string> errors(k_threads);
  std::vector<std::thread> threads;
  for (int i = 0; i < k_threads; ++i) {
    threads.emplace_back([&, i] {
      auto exe = runtime->compile_file(std::string(KILN_EXAMPLES_DIR) + "/" + graphs[i % 4]);
      if (!exe) {
        errors[i] = exe.error().message;
        return;
      }
      keys[i] = (*exe)->key();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < k_threads; ++i) {
    EXPECT_EQ(errors[i], "") << graphs[i % 4];
    EXPECT_EQ(keys[i], keys[i % 4]) << "threads compiling one graph agree on its key";
  }
  // Every graph is now cached once: a further compile of each is a hit.
  for (const char* graph : graphs) {
    auto exe = runtime->compile_file(std::string(KILN_EXAMPLES_DIR) + "/" + graph);
    ASSERT_TRUE(exe) << exe.error().message;
    EXPECT_TRUE((*exe)->cache_hit()) << graph;
  }
}

TEST(Runtime, WorksWithTheCacheOff) {
  RuntimeOptions options;
  options.arch = "sm_80";
  options.use_cache = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime);
  auto a = (*runtime)->compile_file(k_mlp);
  auto b = (*runtime)->compile_file(k_mlp);
  ASSERT_TRUE(a && b) << (a ? b.error().message : a.error().message);
  EXPECT_FALSE((*a)->cache_hit());
  EXPECT_FALSE((*b)->cache_hit());
}

}  // namespace
}  // namespace kiln
