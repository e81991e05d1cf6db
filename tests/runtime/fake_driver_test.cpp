// The runtime against the fake libcuda (tests/runtime/fake_cuda): contexts, devices, streams,
// module lifetimes, alignment, retains and driver versions, each as the real driver enforces them.
// ctest runs every test in its own process, so each configures the fake afresh.
#include "fake_driver_support.h"

#include "fake_cuda/cubin.h"

#include "compiler/compiler.h"
#include "ir/parse.h"
#include "runtime/executable_impl.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

namespace kiln {
namespace {

using fake_cuda::Config;
using testing_support::Buffers;
using testing_support::compile_example;
using testing_support::run_in_current_context;
using testing_support::run_on_fresh_buffers;
using testing_support::use_fake_driver;

TEST(FakeDriver, DeviceBufferWorksFromAThreadWithoutACurrentContext) {
  ASSERT_TRUE(use_fake_driver({}));
  auto buffer = DeviceBuffer::allocate(64);
  ASSERT_TRUE(buffer) << buffer.error().message;
  std::thread other([&] {
    std::vector<unsigned char> in(64, 7), out(64, 0);
    Status up = buffer->upload(in.data(), in.size());
    EXPECT_TRUE(up) << up.error().message;
    Status down = buffer->download(out.data(), out.size());
    EXPECT_TRUE(down) << down.error().message;
    EXPECT_EQ(out, in);
    DeviceBuffer gone = std::move(*buffer);
  });
  other.join();
  EXPECT_EQ(fake_cuda::live_allocations(), 0u) << "the destructor's cuMemFree failed";
}

TEST(FakeDriver, RunsOnTheRuntimesDeviceWhateverContextIsCurrent) {
  Config config;
  config.device_sms = {90, 90};
  ASSERT_TRUE(use_fake_driver(config));
  void* user_context = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&user_context, 0, 0), 0);  // the application's own, on device 0
  auto exe = compile_example("mlp.kg", 1);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 1);
  ASSERT_TRUE(buffers.ok());
  Status s = exe->run(buffers.inputs, buffers.outputs);
  ASSERT_TRUE(s) << s.error().message;
  auto host = exe->run_host(buffers.host_inputs());
  ASSERT_TRUE(host) << host.error().message;
  auto launches = fake_cuda::launches();
  ASSERT_EQ(launches.size(), 2 * exe->kernel_count());
  for (const auto& launch : launches) {
    EXPECT_EQ(launch.device, 1) << launch.function;
    EXPECT_EQ(launch.fault, 0) << launch.function << " read memory of another device";
  }
  void* now = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&now), 0);
  EXPECT_EQ(now, user_context) << "the caller's current context changed";
  EXPECT_EQ(fake_cuda::sticky_error(user_context), 0);
}

TEST(FakeDriver, KernelsForAnotherArchAreRefusedWithTheDeviceNamed) {
  Config config;
  config.device_sms = {90, 80};
  ASSERT_TRUE(use_fake_driver(config));
  RuntimeOptions options;
  options.arch = "sm_90";
  options.device = 1;
  options.use_cache = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime);
  auto exe = (*runtime)->compile_file(std::string(KILN_EXAMPLES_DIR) + "/mlp.kg");
  ASSERT_TRUE(exe) << exe.error().message;
  Buffers buffers(**exe, 1);
  ASSERT_TRUE(buffers.ok());
  Status s = (*exe)->run(buffers.inputs, buffers.outputs);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("compiled for sm_90"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("CUDA device 1 is sm_80"), std::string::npos)
      << s.error().message;
  EXPECT_TRUE(fake_cuda::launches().empty());
}

// sm_90a: what a runtime with no arch compiles for on compute capability 9.0, and code that the
// driver (and kiln before it, saying why) loads on 9.0 only.
TEST(FakeDriver, Sm90aIsTheDefaultOnNinePointZeroAndLoadsThereOnly) {
  Config config;
  config.device_sms = {90, 100, 91};  // 9.1 is no real part: the same major, another minor
  ASSERT_TRUE(use_fake_driver(config));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  EXPECT_EQ(exe->arch(), "sm_90a");
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  Status ran = exe->run(buffers.inputs, buffers.outputs);
  ASSERT_TRUE(ran) << ran.error().message;
  EXPECT_EQ(fake_cuda::launches().size(), exe->kernel_count());
  EXPECT_EQ(compile_example("mlp.kg", 1)->arch(), "sm_100");  // no "a" target kiln plans there

  // Compiled for sm_90a, run on 10.0 and on 9.1: refused before any module loads.
  for (int device : {1, 2}) {
    RuntimeOptions options;
    options.arch = "sm_90a";
    options.device = device;
    options.use_cache = false;
    auto runtime = Runtime::create(options);
    ASSERT_TRUE(runtime) << runtime.error().message;
    auto specific = (*runtime)->compile_file(std::string(KILN_EXAMPLES_DIR) + "/mlp.kg");
    ASSERT_TRUE(specific) << specific.error().message;
    Buffers there(**specific, device);
    ASSERT_TRUE(there.ok());
    size_t before = fake_cuda::launches().size();
    Status s = (*specific)->run(there.inputs, there.outputs);
    ASSERT_FALSE(s) << device;
    std::string expected = "kernels compiled for sm_90a cannot run here: sm_90a code runs only on "
                           "compute capability 9.0 and CUDA device " + std::to_string(device) +
                           " is " + (device == 1 ? "sm_100; compile for sm_100" : "sm_91");
    EXPECT_NE(s.error().message.find(expected), std::string::npos) << s.error().message;
    EXPECT_EQ(fake_cuda::launches().size(), before);
  }

  // The driver's own rule, which kiln's check stands before: an sm_90a cubin (NVRTC marks it in
  // .nv.compat) loads on 9.0 only, while sm_90's loads on 9.1 too.
  auto cubin_for = [](const std::string& arch) {
    auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/mlp.kg");
    compiler::CompileOptions options;
    auto target = compiler::parse_arch(arch);
    EXPECT_TRUE(target) << arch;
    if (!target) return std::string();
    options.target = *target;
    auto artifact = graph ? compiler::compile(*graph, options) : graph.error();
    EXPECT_TRUE(artifact) << artifact.error().message;
    return artifact ? artifact->kernels.front().cubin : std::string();
  };
  std::string specific = cubin_for("sm_90a"), plain = cubin_for("sm_90");
  ASSERT_FALSE(specific.empty());
  ASSERT_FALSE(plain.empty());
  auto read_specific = fake_cuda::read_cubin(specific.data());
  auto read_plain = fake_cuda::read_cubin(plain.data());
  ASSERT_TRUE(read_specific && read_plain);
  EXPECT_EQ(read_specific->sm, 90);
  EXPECT_TRUE(read_specific->arch_specific);
  EXPECT_EQ(read_plain->sm, 90);
  EXPECT_FALSE(read_plain->arch_specific);
  void* context = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&context, 2), 0);
  ASSERT_EQ(cuCtxPushCurrent_v2(context), 0);
  void* module = nullptr;
  EXPECT_EQ(cuModuleLoadData(&module, specific.data()), 209);  // CUDA_ERROR_NO_BINARY_FOR_GPU
  EXPECT_EQ(cuModuleLoadData(&module, plain.data()), 0);
  EXPECT_EQ(cuModuleUnload(module), 0);
  void* popped = nullptr;
  EXPECT_EQ(cuCtxPopCurrent_v2(&popped), 0);
}

// The temporaries (workspace pointers) a run passed to its kernels: parameters that are none of
// the caller's buffers.
std::set<uint64_t> temporaries(const std::vector<fake_cuda::Launch>& launches,
                               const Buffers& buffers, std::thread::id thread) {
  std::set<uint64_t> caller;
  for (const auto& refs : {buffers.inputs, buffers.outputs}) {
    for (const TensorRef& r : refs) caller.insert(reinterpret_cast<uint64_t>(r.data));
  }
  std::set<uint64_t> found;
  for (const auto& launch : launches) {
    if (launch.thread != thread) continue;
    for (uint64_t p : launch.params) {
      if (!caller.count(p)) found.insert(p);
    }
  }
  return found;
}

TEST(FakeDriver, RunsOnPerThreadDefaultStreamsGetTheirOwnTemporaries) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("mlp.kg", 0);  // keeps its hidden layer in a temporary
  ASSERT_TRUE(exe);
  Buffers a(*exe, 0), b(*exe, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  std::thread::id ids[2];
  // Two threads, each on its own per-thread default stream, neither synchronised: both runs are
  // in flight at once and must not share scratch memory.
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      Buffers& mine = t == 0 ? a : b;
      Status s = exe->run(mine.inputs, mine.outputs, fake_cuda::k_stream_per_thread);
      EXPECT_TRUE(s) << s.error().message;
    });
    ids[t] = workers.back().get_id();  // both alive together: distinct ids
  }
  for (auto& w : workers) w.join();
  auto launches = fake_cuda::launches();
  auto first = temporaries(launches, a, ids[0]), second = temporaries(launches, b, ids[1]);
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());
  for (uint64_t p : first) EXPECT_EQ(second.count(p), 0u) << "a temporary shared by two runs";
}

TEST(FakeDriver, ShortLivedStreamsLeaveNoWorkspaceBehind) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("attention.kg", 0);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  size_t before = fake_cuda::live_allocations();
  void* context = nullptr;  // streams are created in the current context
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&context, 0), 0);
  ASSERT_EQ(cuCtxPushCurrent_v2(context), 0);
  for (int i = 0; i < 5; ++i) {
    void* stream = nullptr;
    ASSERT_EQ(cuStreamCreate(&stream, 0), 0);
    Status s = exe->run(buffers.inputs, buffers.outputs, stream);
    ASSERT_TRUE(s) << s.error().message;
    ASSERT_EQ(cuStreamDestroy_v2(stream), 0);
  }
  EXPECT_EQ(fake_cuda::live_allocations(), before);
}

TEST(FakeDriver, ANewContextAtADeadOnesAddressGetsItsOwnModules) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  void* first = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&first, 0, 0), 0);
  Status before = run_in_current_context(*exe);
  ASSERT_TRUE(before) << before.error().message;
  ASSERT_EQ(cuCtxDestroy_v2(first), 0);
  void* second = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&second, 0, 0), 0);
  ASSERT_EQ(second, first) << "the fake reuses the address, as a real driver may";
  Status s = run_in_current_context(*exe);
  ASSERT_TRUE(s) << s.error().message;
  auto launches = fake_cuda::launches();
  ASSERT_EQ(launches.size(), 2 * exe->kernel_count());
  EXPECT_NE(launches.front().context_id, launches.back().context_id);
}

void reset_and_run_again(bool reset_keeps_id) {
  Config config;
  config.reset_keeps_id = reset_keeps_id;
  ASSERT_TRUE(use_fake_driver(config));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  ASSERT_TRUE(run_on_fresh_buffers(*exe, 0));
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(0), 0);  // every module and allocation is gone
  Status s = run_on_fresh_buffers(*exe, 0);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(fake_cuda::launches().size(), 2 * exe->kernel_count());
}

TEST(FakeDriver, ModulesAreLoadedAgainAfterAPrimaryContextReset) { reset_and_run_again(false); }

TEST(FakeDriver, ModulesAreLoadedAgainAfterAResetThatKeepsTheContextId) {
  reset_and_run_again(true);
}

// llama_layer's 14 kernels run 10 binaries (its Q, K and V projections share one, as do its two
// norms and two of its permutes): 10 modules load, and all 14 kernels launch, each with its own
// parameters, the shared ones through the function of the kernel whose binary they run.
TEST(FakeDriver, KernelsSharingABinaryLoadItsModuleOnce) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("llama_layer.kg", 0);
  ASSERT_TRUE(exe);
  size_t before = fake_cuda::launches().size();
  void* context = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&context, 0, 0), 0);  // created and pushed
  Status s = run_in_current_context(*exe);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(fake_cuda::live_modules(), 10u);
  auto all = fake_cuda::launches();
  std::vector<std::string> functions;
  for (size_t i = before; i < all.size(); ++i) {
    EXPECT_EQ(all[i].fault, 0) << all[i].function;
    functions.push_back(all[i].function);
  }
  ASSERT_EQ(functions.size(), 14u);
  EXPECT_EQ(functions[2], "kiln_k1_matmul_tf32_64x64");
  EXPECT_EQ(functions[3], "kiln_k1_matmul_tf32_64x64");
  EXPECT_EQ(functions[10], "kiln_k0_rms_norm");
  EXPECT_EQ(functions[11], "kiln_k11_matmul_tf32_64x64");
  exe.reset();
  EXPECT_EQ(fake_cuda::live_modules(), 0u);
  ASSERT_EQ(cuCtxDestroy_v2(context), 0);
}

TEST(FakeDriver, DestructionWaitsForKernelsAndUnloadsFromEveryContext) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  std::vector<unsigned long long> ids;
  for (int i = 0; i < 2; ++i) {
    void* context = nullptr;
    ASSERT_EQ(cuCtxCreate_v2(&context, 0, 0), 0);  // created and pushed
    unsigned long long id = 0;
    ASSERT_EQ(cuCtxGetId(context, &id), 0);
    ids.push_back(id);
    Status s = run_in_current_context(*exe);
    ASSERT_TRUE(s) << s.error().message;
    ASSERT_EQ(cuCtxPopCurrent_v2(nullptr), 0);
  }
  ASSERT_EQ(fake_cuda::live_modules(), 2 * exe->kernel_count());
  size_t earlier = fake_cuda::events().size();
  std::thread([&] { exe.reset(); }).join();  // a thread with no current context
  EXPECT_EQ(fake_cuda::live_modules(), 0u);
  auto all = fake_cuda::events();
  std::vector<std::string> events(all.begin() + earlier, all.end());  // the destructor's
  for (unsigned long long id : ids) {
    std::string ctx = " ctx=" + std::to_string(id);
    auto sync = std::find(events.begin(), events.end(), "sync" + ctx);
    auto unload = std::find(events.begin(), events.end(), "unload" + ctx);
    ASSERT_NE(sync, events.end()) << "no synchronisation of" << ctx;
    ASSERT_NE(unload, events.end()) << "no unload in" << ctx;
    EXPECT_LT(sync - events.begin(), unload - events.begin());
  }
}

TEST(FakeDriver, MisalignedPointersAreRefusedBeforeAnyLaunch) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 0, /*slack=*/16);
  ASSERT_TRUE(buffers.ok());
  buffers.inputs[0].data = static_cast<char*>(buffers.inputs[0].data) + 4;  // an offset view
  Status s = exe->run(buffers.inputs, buffers.outputs);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("input 'x'"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("16-byte aligned"), std::string::npos) << s.error().message;
  EXPECT_TRUE(fake_cuda::launches().empty());
  void* primary = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), 0);
  EXPECT_EQ(fake_cuda::sticky_error(primary), 0) << "the context took a fault";
}

TEST(FakeDriver, ThePrimaryContextIsRetainedOncePerDevice) {
  Config config;
  config.device_sms = {90, 90};
  ASSERT_TRUE(use_fake_driver(config));
  auto exe = compile_example("mlp.kg", 0);
  ASSERT_TRUE(exe);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      auto out = exe->run_host(Buffers::zeros(*exe));
      EXPECT_TRUE(out) << out.error().message;
      auto buffer = DeviceBuffer::allocate(256, 1);
      EXPECT_TRUE(buffer) << buffer.error().message;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fake_cuda::primary_retains(0), 1);
  EXPECT_EQ(fake_cuda::primary_retains(1), 1);
}

TEST(FakeDriver, AnOldDriverIsRefusedWithTheVersionTheCubinsNeed) {
  // Compiled first (an explicit arch needs no driver), so the fake's driver can be made one major
  // version older than whatever NVRTC built the cubins.
  auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/mlp.kg");
  ASSERT_TRUE(graph);
  compiler::CompileOptions options;
  options.target.sm = 90;
  auto result = runtime::compile_graph(*graph, options, nullptr);
  ASSERT_TRUE(result) << result.error().message;
  int major = 0, minor = 0;
  ASSERT_EQ(std::sscanf(result->artifact.nvrtc_version.c_str(), "%d.%d", &major, &minor), 2)
      << result->artifact.nvrtc_version;
  Config config;
  config.driver_version = (major - 1) * 1000 + 20;
  ASSERT_TRUE(use_fake_driver(config));
  auto made = runtime::make_executable(*graph, std::move(*result), 0);
  ASSERT_TRUE(made) << made.error().message;
  std::shared_ptr<Executable> exe = *made;
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  Status s = exe->run(buffers.inputs, buffers.outputs);
  ASSERT_FALSE(s);
  std::string expected = "CUDA driver " + std::to_string(major - 1) + ".2 cannot load cubins " +
                         "from NVRTC " + std::to_string(major) + "." + std::to_string(minor);
  EXPECT_NE(s.error().message.find(expected), std::string::npos) << s.error().message;
  EXPECT_TRUE(fake_cuda::launches().empty());
}

TEST(FakeDriver, ADriverOlderThanTwelveIsRefusedWhenLoaded) {
  Config config;
  config.driver_version = 11080;
  ASSERT_TRUE(use_fake_driver(config));
  Status gpu = gpu_status();
  ASSERT_FALSE(gpu);
  EXPECT_NE(gpu.error().message.find("version 11.8"), std::string::npos) << gpu.error().message;
  EXPECT_NE(gpu.error().message.find("older than 12.0"), std::string::npos);
}

TEST(FakeDriver, AStreamOfAnotherDeviceIsRefused) {
  Config config;
  config.device_sms = {90, 90};
  ASSERT_TRUE(use_fake_driver(config));
  auto exe = compile_example("mlp.kg", 1);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 1);
  ASSERT_TRUE(buffers.ok());
  void* context = nullptr;
  void* stream = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&context, 0, 0), 0);  // device 0
  ASSERT_EQ(cuStreamCreate(&stream, 0), 0);
  Status s = exe->run(buffers.inputs, buffers.outputs, stream);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("the stream belongs to another CUDA device than device 1"),
            std::string::npos)
      << s.error().message;
  EXPECT_TRUE(fake_cuda::launches().empty());
  void* now = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&now), 0);
  EXPECT_EQ(now, context) << "the refusal left another context current";
}

TEST(FakeDriver, ACreatedStreamWorksFromAThreadWithoutACurrentContext) {
  ASSERT_TRUE(use_fake_driver({}));
  auto exe = compile_example("attention.kg", 0);
  ASSERT_TRUE(exe);
  Buffers buffers(*exe, 0);
  ASSERT_TRUE(buffers.ok());
  void* primary = nullptr;
  void* stream = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), 0);
  ASSERT_EQ(cuCtxPushCurrent_v2(primary), 0);
  ASSERT_EQ(cuStreamCreate(&stream, 0), 0);
  ASSERT_EQ(cuCtxPopCurrent_v2(nullptr), 0);
  std::thread([&] {
    Status s = exe->run(buffers.inputs, buffers.outputs, stream);
    EXPECT_TRUE(s) << s.error().message;
    Status legacy = exe->run(buffers.inputs, buffers.outputs, reinterpret_cast<void*>(0x1));
    EXPECT_TRUE(legacy) << "CU_STREAM_LEGACY: " << legacy.error().message;
  }).join();
  auto launches = fake_cuda::launches();
  ASSERT_EQ(launches.size(), 2 * exe->kernel_count());
  for (const auto& launch : launches) EXPECT_EQ(launch.fault, 0) << launch.function;
  EXPECT_EQ(launches.front().stream, stream);
}

}  // namespace
}  // namespace kiln
