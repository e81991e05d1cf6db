// The launch contract against the fake libcuda: every kernel of every example, for each arch,
// launched with its cubin's parameter count, the plan's pointers in order, its launch shape and a
// shared-memory attribute that covers it; and runs that stream capture accepts after prepare().
#include "fake_driver_support.h"

#include "ir/parse.h"
#include "runtime/executable_impl.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

namespace kiln {
namespace {

using fake_cuda::Config;
using testing_support::Buffers;
using testing_support::compile_example;
using testing_support::use_fake_driver;

struct ContractCase {
  const char* graph;
  int sm;
  const char* suffix = "";  // "a": sm_90a, whose cubins load on 9.0 only
};

class LaunchContract : public ::testing::TestWithParam<ContractCase> {};

TEST_P(LaunchContract, EveryLaunchMatchesThePlanAndTheCubin) {
  const ContractCase& c = GetParam();
  Config config;
  config.device_sms = {c.sm};
  ASSERT_TRUE(use_fake_driver(config));
  auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/" + c.graph);
  ASSERT_TRUE(graph) << graph.error().message;
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(c.sm, c.suffix);
  options.fallback = compiler::FallbackPolicy::allow;
  auto result = runtime::compile_graph(*graph, options, nullptr);
  ASSERT_TRUE(result) << result.error().message;
  compiler::Artifact artifact = result->artifact;
  EXPECT_EQ(artifact.arch, compiler::arch_name(c.sm) + c.suffix);
  auto made = runtime::make_executable(*graph, std::move(*result), 0);
  ASSERT_TRUE(made) << made.error().message;
  std::shared_ptr<Executable> exe = *made;
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok()) << buffers.error;
  Status s = exe->run(buffers.inputs, buffers.outputs);
  ASSERT_TRUE(s) << s.error().message;

  auto launches = fake_cuda::launches();
  ASSERT_EQ(launches.size(), artifact.kernels.size());
  uint64_t workspace_base = 0;
  for (size_t k = 0; k < launches.size(); ++k) {
    const compiler::KernelArtifact& kernel = artifact.kernels[k];
    const fake_cuda::Launch& launch = launches[k];
    SCOPED_TRACE(kernel.name);
    EXPECT_EQ(launch.function, kernel.entry);
    EXPECT_EQ(launch.fault, 0) << "the kernel would read or write outside its buffers";
    ASSERT_EQ(launch.cubin_params, kernel.params.size()) << "the plan and the cubin disagree";
    ASSERT_EQ(launch.params.size(), kernel.params.size());
    for (size_t p = 0; p < kernel.params.size(); ++p) {
      const compiler::BufferRef& b = kernel.params[p].buffer;
      uint64_t value = launch.params[p];
      switch (b.role) {
        case compiler::BufferRole::input:
          EXPECT_EQ(value, reinterpret_cast<uint64_t>(buffers.inputs[b.index].data)) << p;
          break;
        case compiler::BufferRole::output:
          EXPECT_EQ(value, reinterpret_cast<uint64_t>(buffers.outputs[b.index].data)) << p;
          break;
        case compiler::BufferRole::temporary: {
          uint64_t total = 0;
          uint64_t offset = runtime::temporary_offsets(artifact.temporary_bytes, &total)[b.index];
          if (!workspace_base) workspace_base = value - offset;
          EXPECT_EQ(value, workspace_base + offset) << "temporary " << b.index;
          break;
        }
      }
    }
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(launch.grid[d], kernel.launch.grid[d]);
      EXPECT_EQ(launch.block[d], kernel.launch.block[d]);
    }
    // (The fake refuses a launch whose shared bytes exceed the function's attribute.)
    EXPECT_EQ(launch.shared_bytes, kernel.launch.dynamic_smem_bytes);
  }
}

std::vector<ContractCase> contract_cases() {
  std::vector<ContractCase> cases;
  for (const char* graph :
       {"mlp.kg", "attention.kg", "gated_mlp.kg", "mixed_head.kg", "half_epilogue.kg"}) {
    for (int sm : {75, 80, 86, 89, 90, 120}) cases.push_back({graph, sm});
    cases.push_back({graph, 90, "a"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(FakeDriver, LaunchContract, ::testing::ValuesIn(contract_cases()),
                         [](const auto& info) {
                           std::string name = info.param.graph;
                           return name.substr(0, name.find('.')) + "_sm" +
                                  std::to_string(info.param.sm) + info.param.suffix;
                         });

constexpr int k_capture_global = 0;  // CU_STREAM_CAPTURE_MODE_GLOBAL

// A created stream in the device's primary context, made current as an application would.
void* make_stream() {
  void* context = nullptr;
  void* stream = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&context, 0), 0);
  EXPECT_EQ(cuCtxPushCurrent_v2(context), 0);
  EXPECT_EQ(cuStreamCreate(&stream, 0), 0);
  return stream;
}

// An artifact whose cubin the driver would read past kiln's bytes is refused before the driver
// sees it: cuModuleLoadData takes a cubin's size from its own headers, and cuLaunchKernel reads
// as many parameters, of the sizes, as the cubin declares. Forged copies of a compiled mlp: a
// cubin cut short; a kernel that passes one parameter fewer than its cubin takes; another arch's
// cubin. (A parameter of the wrong size is refused too: tests/compiler/test_cubin_report.cpp.)
TEST(FakeDriver, AForgedCubinIsRefusedBeforeTheDriverReadsIt) {
  ASSERT_TRUE(use_fake_driver(Config{}));
  auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/mlp.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  auto compiled = [&](const compiler::Target& target) {
    compiler::CompileOptions options;
    options.target = target;
    auto result = runtime::compile_graph(*graph, options, nullptr);
    EXPECT_TRUE(result) << result.error().message;
    return result ? *result : runtime::CompileResult{};
  };
  runtime::CompileResult sm90 = compiled(compiler::Target::cuda(90));
  runtime::CompileResult sm80 = compiled(compiler::Target::cuda(80));
  ASSERT_FALSE(sm90.artifact.kernels.empty());
  ASSERT_FALSE(sm80.artifact.kernels.empty());
  // Runs `result` and expects it refused with `expected`, no kernel launched.
  auto refused = [&](runtime::CompileResult result, const std::string& expected) {
    auto made = runtime::make_executable(*graph, std::move(result), 0);
    ASSERT_TRUE(made) << made.error().message;
    Buffers buffers(**made, 0);
    ASSERT_TRUE(buffers.ok()) << buffers.error;
    size_t before = fake_cuda::launches().size();
    Status s = (*made)->run(buffers.inputs, buffers.outputs);
    ASSERT_FALSE(s) << expected;
    EXPECT_NE(s.error().message.find(expected), std::string::npos) << s.error().message;
    EXPECT_EQ(fake_cuda::launches().size(), before);
  };
  const compiler::KernelArtifact& first = sm90.artifact.kernels.front();
  runtime::CompileResult forged = sm90;
  forged.artifact.kernels.front().cubin.pop_back();
  refused(forged, "kernel '" + first.name + "': cubin: ");  // a header or section past the end
  forged = sm90;
  forged.artifact.kernels.front().params.pop_back();
  refused(forged, "cubin: kernel '" + first.entry + "': it takes " +
                      std::to_string(first.params.size()) + " parameters, where kiln passes " +
                      std::to_string(first.params.size() - 1));
  forged = sm90;
  forged.artifact.kernels.front().cubin = sm80.artifact.kernels.front().cubin;
  forged.artifact.kernels.front().entry = sm80.artifact.kernels.front().entry;
  refused(forged, "cubin: built for sm_80, not for sm_90");
  // The compiled artifact itself runs.
  auto made = runtime::make_executable(*graph, std::move(sm90), 0);
  ASSERT_TRUE(made) << made.error().message;
  Status s = testing_support::run_on_fresh_buffers(**made, 0);
  EXPECT_TRUE(s) << s.error().message;
}

TEST(FakeDriver, AfterPrepareARunCanBeCapturedIntoAGraph) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("mlp.kg", 0);  // with a temporary
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  void* stream = make_stream();
  Status prepared = exe->prepare(stream);
  ASSERT_TRUE(prepared) << prepared.error().message;
  ASSERT_EQ(cuStreamBeginCapture_v2(stream, k_capture_global), 0);
  Status s = exe->run(buffers.inputs, buffers.outputs, stream);
  ASSERT_TRUE(s) << s.error().message;
  void* graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream, &graph), 0) << "run() made a call capture forbids";
  auto launches = fake_cuda::launches();
  ASSERT_EQ(launches.size(), exe->kernel_count());
  for (const auto& launch : launches) EXPECT_TRUE(launch.captured);
  auto events = fake_cuda::events();
  EXPECT_EQ(std::count_if(events.begin(), events.end(),
                          [](const std::string& e) { return e.rfind("alloc_async captured", 0) == 0; }),
            1)
      << "the temporaries were not allocated on the captured stream";
}

TEST(FakeDriver, PrepareDoesNotBreakAnotherThreadsCapture) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("attention.kg", 0);
  ASSERT_TRUE(exe);
  void* stream = make_stream();  // this thread captures in global mode
  ASSERT_EQ(cuStreamBeginCapture_v2(stream, k_capture_global), 0);
  std::thread([&] {
    Status s = exe->prepare();  // loads modules and creates the pool: unsafe calls
    EXPECT_TRUE(s) << s.error().message;
    auto buffer = DeviceBuffer::allocate(256);
    EXPECT_TRUE(buffer) << buffer.error().message;
  }).join();
  void* graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream, &graph), 0) << "another thread's prepare() broke it";
}

TEST(FakeDriver, TheLegacyStreamDuringACaptureIsRefusedWithAnswer) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  void* stream = make_stream();  // blocking: the legacy stream would depend on it
  ASSERT_EQ(cuStreamBeginCapture_v2(stream, k_capture_global), 0);
  Status s = exe->run(buffers.inputs, buffers.outputs, nullptr);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("legacy default stream while a blocking stream"),
            std::string::npos)
      << s.error().message;
  void* graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream, &graph), 0);
}

TEST(FakeDriver, RunOnACapturingStreamWithoutPrepareSaysWhatToDoAndKeepsTheCapture) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  void* stream = make_stream();
  ASSERT_EQ(cuStreamBeginCapture_v2(stream, k_capture_global), 0);
  Status s = exe->run(buffers.inputs, buffers.outputs, stream);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("Executable::prepare()"), std::string::npos)
      << s.error().message;
  void* graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream, &graph), 0) << "the refusal broke the capture";
  EXPECT_TRUE(fake_cuda::launches().empty());
}

TEST(FakeDriver, WithoutMemoryPoolsRunsStillWorkAndCaptureIsRefusedClearly) {
  Config config;
  config.memory_pools = false;
  ASSERT_TRUE(use_fake_driver(config));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  size_t before = fake_cuda::live_allocations();
  Status s = exe->run(buffers.inputs, buffers.outputs);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(fake_cuda::live_allocations(), before) << "temporaries left behind";
  void* stream = make_stream();
  ASSERT_TRUE(exe->prepare(stream));
  ASSERT_EQ(cuStreamBeginCapture_v2(stream, k_capture_global), 0);
  s = exe->run(buffers.inputs, buffers.outputs, stream);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("no stream-ordered memory pools"), std::string::npos)
      << s.error().message;
  void* graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream, &graph), 0);
}

// RuntimeOptions::check_indices on the GPU: the id inputs are copied to the host after the
// stream is synchronised and checked before anything is launched; off, the run goes ahead (the
// kernel reads a row of zeros). A captured stream cannot wait, so a checked run there is refused.
TEST(FakeDriver, CheckIndicesReadsDeviceIdsBeforeLaunching) {
  ASSERT_TRUE(use_fake_driver({}));
  auto graph = ir::parse_graph("graph g {\n  input ids: i64[2, 3]\n  input emb: f32[5, 4]\n"
                               "  x = relu(embedding(emb, ids))\n  output x\n}\n",
                               "g.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  for (bool check : {false, true}) {
    RuntimeOptions options;
    options.use_cache = false;
    options.check_indices = check;
    auto runtime = Runtime::create(options);
    ASSERT_TRUE(runtime) << runtime.error().message;
    auto exe = (*runtime)->compile(*graph);
    ASSERT_TRUE(exe) << exe.error().message;
    Buffers buffers(**exe, 0);
    ASSERT_TRUE(buffers.ok()) << buffers.error;
    const int64_t ids[6] = {0, 4, 1, 2, 5, 3};  // 5 is outside [0, 5)
    ASSERT_TRUE(buffers.owned[0].upload(ids, sizeof ids));
    size_t before = fake_cuda::launches().size();
    Status s = (*exe)->run(buffers.inputs, buffers.outputs);
    if (!check) {
      EXPECT_TRUE(s) << s.error().message;
      EXPECT_EQ(fake_cuda::launches().size(), before + (*exe)->kernel_count());
      continue;
    }
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().message,
              "input 'ids' holds 5 at [1, 1], outside the embedding table 'emb' of 5 rows "
              "([0, 5)) (checked because check_indices is on)");
    EXPECT_EQ(fake_cuda::launches().size(), before) << "a refused run launched a kernel";
    const int64_t good[6] = {0, 4, 1, 2, 0, 3};
    ASSERT_TRUE(buffers.owned[0].upload(good, sizeof good));
    s = (*exe)->run(buffers.inputs, buffers.outputs);
    EXPECT_TRUE(s) << s.error().message;
    EXPECT_EQ(fake_cuda::launches().size(), before + (*exe)->kernel_count());
    void* stream = make_stream();
    ASSERT_TRUE((*exe)->prepare(stream));
    ASSERT_EQ(cuStreamBeginCapture_v2(stream, k_capture_global), 0);
    s = (*exe)->run(buffers.inputs, buffers.outputs, stream);
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().message.find("a stream being captured cannot do"), std::string::npos)
        << s.error().message;
    void* captured = nullptr;
    EXPECT_EQ(cuStreamEndCapture(stream, &captured), 0) << "the check made a call capture forbids";
  }
}

}  // namespace
}  // namespace kiln
