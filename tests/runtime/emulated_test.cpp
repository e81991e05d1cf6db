// The emulate target through the public Runtime: compiled through the cache, run on host memory
// against the fp64 reference, its kernel text stored as host code.
#include "kiln/kiln.h"

#include "cache/cache.h"
#include "cache/entry.h"
#include "compiler/compiler.h"
#include "ir/parse.h"
#include "reference/check.h"
#include "runtime/compile_service.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace kiln {
namespace {

class TempDir {
public:
  TempDir() {
    char name[] = "/tmp/kiln-emulated-test-XXXXXX";
    m_path = mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(m_path); }
  const std::string& path() const { return m_path; }

private:
  std::string m_path;
};

const char* k_graph = R"(graph g {
  dim B: 1..64
  input x: f32[B, 24]
  input w: f32[24, 40]
  y = relu(matmul(x, w))
  output y
})";

std::unique_ptr<Runtime> emulate(const std::string& cache, const std::string& target,
                                 const std::string& schedule = "") {
  RuntimeOptions options;
  options.target = target;
  options.cache_dir = cache;
  options.precision = Precision::highest;
  options.emulate_schedule = schedule;
  auto runtime = Runtime::create(options);
  EXPECT_TRUE(runtime) << runtime.error().message;
  return runtime ? std::move(*runtime) : nullptr;
}

std::vector<float> filled(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>(i * 37 % 11) - 5);
  return v;
}

// y = relu(x w) in double, for one size of B.
std::vector<double> expected(const std::vector<float>& x, const std::vector<float>& w, int64_t b) {
  std::vector<double> y(static_cast<size_t>(b) * 40);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < 40; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 24; ++k) s += double(x[size_t(i * 24 + k)]) * w[size_t(k * 40 + j)];
      y[size_t(i * 40 + j)] = std::max(s, 0.0);
    }
  return y;
}

TEST(EmulatedTarget, RunsThroughTheCacheAndMatchesTheReferenceAtEverySizeItRuns) {
  TempDir dir;
  auto runtime = emulate(dir.path(), "emulate:sm_80");
  ASSERT_TRUE(runtime);
  EXPECT_EQ(runtime->arch(), "emulate:sm_80");
  for (int64_t b : {37, 5, 37}) {
    SCOPED_TRACE("B = " + std::to_string(b));
    auto exe = runtime->compile_text(k_graph, "g.kg");
    ASSERT_TRUE(exe) << exe.error().message;
    EXPECT_TRUE((*exe)->on_cpu()) << "host pointers";
    std::vector<float> x = filled(size_t(b) * 24, 0.25f), w = filled(24 * 40, 0.5f);
    std::vector<std::vector<unsigned char>> in(2);
    in[0].resize(x.size() * 4);
    in[1].resize(w.size() * 4);
    std::memcpy(in[0].data(), x.data(), in[0].size());
    std::memcpy(in[1].data(), w.data(), in[1].size());
    auto out = (*exe)->run_host(in, {b});
    ASSERT_TRUE(out) << out.error().message;
    ASSERT_EQ(out->size(), 1u);
    ASSERT_EQ((*out)[0].size(), size_t(b) * 40 * 4);
    std::vector<float> y(size_t(b) * 40);
    std::memcpy(y.data(), (*out)[0].data(), (*out)[0].size());
    std::vector<double> want = expected(x, w, b);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  }
  // B = 37 twice, 5 once: two buckets, each compiled once and then a hit.
  RuntimeOptions o;
  o.target = "emulate:sm_80";
  o.cache_dir = dir.path();
  o.precision = Precision::highest;
  auto again = Runtime::create(o);
  ASSERT_TRUE(again);
  auto ir = ir::parse_graph(k_graph, "g.kg");
  ASSERT_TRUE(ir);
  compiler::CompileOptions options;
  options.target.kind = compiler::Target::Kind::emulate;
  options.target.sm = 80;
  options.precision = ir::Precision::highest;
  options.bucket = {compiler::bucket_of(37, ir->symbols()[0])};
  auto request = runtime::prepare_compile(*ir, options);
  ASSERT_TRUE(request) << request.error().message;
  auto cache = cache::Cache::open([&] {
    cache::Options c;
    c.dir = dir.path();
    c.remote = "";
    return c;
  }());
  ASSERT_TRUE(cache);
  auto result = runtime::compile_prepared(*ir, *request, cache.get());
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_TRUE(result->hit) << "the run above stored the entry";
  EXPECT_TRUE(result->artifact.is_emulated());
  EXPECT_EQ(result->artifact.arch, "emulate:sm_80");
  EXPECT_FALSE(result->artifact.source.empty()) << "its kernel text comes back with the hit";
}

// compile_emulated() makes the emulate target's artifact only: for a CUDA request it would name
// "cuda:sm_80" as its arch, which no artifact of that target reads back as.
TEST(EmulatedTarget, CompileEmulatedRefusesARequestForAnotherTarget) {
  auto ir = ir::parse_graph(k_graph, "g.kg");
  ASSERT_TRUE(ir);
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(80);
  options.bucket = {compiler::bucket_of(8, ir->symbols()[0])};
  auto request = compiler::check_request(*ir, options);
  ASSERT_TRUE(request) << request.error().message;
  auto artifact = compiler::compile_emulated(*ir, *request);
  ASSERT_FALSE(artifact);
  EXPECT_EQ(artifact.error().message,
            "compile_emulated: the request is for cuda:sm_80, not an emulate target");
  options.target.kind = compiler::Target::Kind::emulate;
  request = compiler::check_request(*ir, options);
  ASSERT_TRUE(request) << request.error().message;
  artifact = compiler::compile_emulated(*ir, *request);
  ASSERT_TRUE(artifact) << artifact.error().message;
  auto back = compiler::deserialize(compiler::serialize(*artifact));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, *artifact);
}

// The kernel text is built into host code and run: a native payload, which the remote tier
// takes only signed, as the CPU target's objects.
TEST(EmulatedTarget, ItsKernelTextIsStoredAsHostCode) {
  auto ir = ir::parse_graph(k_graph, "g.kg");
  ASSERT_TRUE(ir);
  compiler::CompileOptions options;
  options.target.kind = compiler::Target::Kind::emulate;
  options.target.sm = 90;
  options.bucket = {compiler::bucket_of(8, ir->symbols()[0])};
  auto request = compiler::check_request(*ir, options);
  ASSERT_TRUE(request) << request.error().message;
  auto artifact = compiler::compile_emulated(*ir, *request);
  ASSERT_TRUE(artifact) << artifact.error().message;
  EXPECT_TRUE(artifact->kernels.size() >= 1u);
  for (const auto& k : artifact->kernels) {
    EXPECT_TRUE(k.cubin.empty());
    EXPECT_EQ(k.entry, "kiln_" + k.name);
  }
  cache::Contents contents = runtime::to_contents(*artifact, "hash", 1.0);
  bool text = false;
  for (const cache::Payload& p : contents.payloads) {
    EXPECT_NE(p.name.rfind("cubin:", 0), 0u) << p.name;
    if (p.name == "object:emulator") {
      text = true;
      EXPECT_EQ(p.bytes, artifact->source);
      EXPECT_TRUE(cache::is_native_payload(p.name));
    }
  }
  EXPECT_TRUE(text);
}

TEST(EmulatedTarget, BadTargetsAndSchedulesAreClearErrors) {
  TempDir dir;
  RuntimeOptions options;
  options.cache_dir = dir.path();
  options.target = "emulate:sm_61";
  auto arch = Runtime::create(options);
  ASSERT_FALSE(arch);
  EXPECT_NE(arch.error().message.find("emulate:sm_61"), std::string::npos) << arch.error().message;
  options.target = "emulate:compute_90";
  auto bad = Runtime::create(options);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("emulate:compute_90"), std::string::npos) << bad.error().message;
  options.target = "emulate";
  options.emulate_schedule = "sometimes";
  auto schedule = Runtime::create(options);
  ASSERT_FALSE(schedule);
  EXPECT_NE(schedule.error().message.find("emulate_schedule"), std::string::npos)
      << schedule.error().message;
  options.emulate_schedule = "adversarial";
  for (int sms : {-1, 1025}) {
    options.emulate_sm_count = sms;
    auto count = Runtime::create(options);
    ASSERT_FALSE(count) << sms;
    EXPECT_NE(count.error().message.find("emulate_sm_count: " + std::to_string(sms) +
                                         " is not a multiprocessor count from 1 to 1024"),
              std::string::npos)
        << count.error().message;
  }
  options.emulate_sm_count = 7;
  auto good = Runtime::create(options);
  ASSERT_TRUE(good) << good.error().message;
  EXPECT_EQ((*good)->arch(), "emulate:sm_90");
}

}  // namespace
}  // namespace kiln
