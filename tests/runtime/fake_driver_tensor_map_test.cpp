// Tensor-map parameters against the fake libcuda: cuTensorMapEncodeTiled's documented rules, and
// the launcher encoding a kernel's map of its bound buffer (a kernel that takes
// `const __grid_constant__ CUtensorMap`, compiled by NVRTC for sm_90a), or refusing a map that
// breaks the rules or reaches past its buffer before anything runs.
#include "fake_driver_support.h"

#include "compiler/nvrtc.h"
#include "compiler/sizes.h"
#include "compiler/tensor_map.h"
#include "ir/parse.h"
#include "runtime/compile_service.h"
#include "runtime/executable_impl.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>

namespace kiln::fake_driver_tensor_map_test {
namespace {

using testing_support::Buffers;
using testing_support::use_fake_driver;

struct alignas(64) MapBytes {
  unsigned char bytes[128];
};

// cuTensorMapEncodeTiled of `spec` at `address` (the fake's own entry point, called directly).
int encode(const compiler::TensorMapSpec& spec, uint64_t address, MapBytes& out) {
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  return cuTensorMapEncodeTiled(
      out.bytes, static_cast<int>(spec.type), spec.rank, reinterpret_cast<void*>(address),
      reinterpret_cast<const unsigned long long*>(spec.dims.data()),
      reinterpret_cast<const unsigned long long*>(spec.strides.data()), spec.box.data(),
      spec.element_strides.data(), 0, static_cast<int>(spec.swizzle), static_cast<int>(spec.l2), 0);
}

// The fake driver and kiln's own check agree on the documented rules: every edit that breaks one
// is refused by both (CUDA_ERROR_INVALID_VALUE), the unedited maps pass both.
TEST(FakeTensorMap, TheDriversRulesAndKilnsCheckAgree) {
  ASSERT_TRUE(use_fake_driver({}));
  auto base = compiler::parse_tensor_map(
      "tiled bf16 dims=64,4096 strides=8192 box=64,128 elem=1,1 swizzle=128B l2=256B");
  ASSERT_TRUE(base);
  std::vector<compiler::TensorMapSpec> specs = {*base};
  auto edited = [&](auto edit) {
    compiler::TensorMapSpec s = *base;
    edit(s);
    specs.push_back(s);
  };
  edited([](auto& s) { s.rank = 6; });
  edited([](auto& s) { s.dims[1] = 0; });
  edited([](auto& s) { s.dims[0] = (uint64_t{1} << 32) + 1; });
  edited([](auto& s) { s.strides[0] = 8200; });
  edited([](auto& s) { s.strides[0] = uint64_t{1} << 40; });
  edited([](auto& s) { s.box[1] = 257; });
  edited([](auto& s) { s.box[0] = 60; });
  edited([](auto& s) { s.box[0] = 72; });
  edited([](auto& s) { s.element_strides[1] = 9; });
  edited([](auto& s) { s.swizzle = compiler::TensorMapSwizzle::b32; });
  edited([](auto& s) { s.swizzle = compiler::TensorMapSwizzle::none, s.box[0] = 256; });
  edited([](auto& s) { s.type = compiler::TensorMapType::f32, s.box[0] = 32; });
  edited([](auto& s) { s.rank = 1, s.box[0] = 8; });
  size_t refused = 0;
  for (const compiler::TensorMapSpec& spec : specs) {
    MapBytes map{};
    bool kiln_ok = compiler::check_tensor_map(spec).ok();
    EXPECT_EQ(encode(spec, 0x10000, map) == 0, kiln_ok) << compiler::to_string(spec);
    refused += !kiln_ok;
  }
  EXPECT_EQ(refused, 10u);
  // What only the address decides: 16-byte alignment, and a 64-byte aligned map to write.
  MapBytes map{};
  EXPECT_EQ(encode(*base, 0x10008, map), 1);
  alignas(64) unsigned char storage[192];
  EXPECT_EQ(cuTensorMapEncodeTiled(storage + 8, 9, 1, reinterpret_cast<void*>(0x10000),
                                   reinterpret_cast<const unsigned long long*>(base->dims.data()),
                                   nullptr, base->box.data(), base->element_strides.data(), 0, 0,
                                   0, 0),
            1);
}

const char* k_graph = R"(graph probe {
  input x: f32[64, 64]
  y = relu(x)
  output y
}
)";

// An sm_90a kernel that takes its input as a tensor map, in place of the graph's one kernel.
const char* k_probe = R"(struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void probe(float* y, const __grid_constant__ CUtensorMap x) {
  y[threadIdx.x] = (float)x.opaque[0];
})";

class TensorMapLaunch : public ::testing::Test {
protected:
  void SetUp() override {
    if (!test_nvrtc()) GTEST_SKIP() << "no NVRTC here";
    ASSERT_TRUE(use_fake_driver({}));
    auto graph = ir::parse_graph(k_graph, "probe.kg");
    ASSERT_TRUE(graph) << graph.error().message;
    m_graph = std::make_unique<ir::Graph>(*graph);
    compiler::CompileOptions options;
    options.target = compiler::Target::cuda(90, "a");
    auto result = runtime::compile_graph(*m_graph, options, nullptr);
    ASSERT_TRUE(result) << result.error().message;
    m_result = *result;
    auto nvrtc = compiler::load_nvrtc("");
    ASSERT_TRUE(nvrtc);
    auto probe = (*nvrtc)->compile(k_probe, "probe", "sm_90a");
    ASSERT_TRUE(probe) << probe.error().message;
    ASSERT_EQ(m_result.artifact.kernels.size(), 1u);
    compiler::KernelArtifact& k = m_result.artifact.kernels[0];
    ASSERT_EQ(k.params.size(), 2u);
    ASSERT_EQ(k.params[1].buffer.role, compiler::BufferRole::input);
    k.cubin = probe->cubin;
    k.entry = "probe";
    k.params[1].kind = compiler::ParamKind::tensor_map;
  }
  static bool test_nvrtc() { return compiler::load_nvrtc("").ok(); }

  // The probe kernel loaded by hand in device 0's primary context, made current; null on failure.
  void* probe_function() {
    void* context = nullptr;
    void* module = nullptr;
    void* function = nullptr;
    if (cuDevicePrimaryCtxRetain(&context, 0) || cuCtxPushCurrent_v2(context) ||
        cuModuleLoadData(&module, m_result.artifact.kernels[0].cubin.data()) ||
        cuModuleGetFunction(&function, module, "probe"))
      return nullptr;
    return function;
  }

  // Makes the executable with `map` as the input's description and runs it.
  Status run(const std::string& map) {
    runtime::CompileResult result = m_result;
    result.artifact.kernels[0].params[1].map = map;
    auto made = runtime::make_executable(*m_graph, std::move(result), 0);
    if (!made) return made.error();
    m_exe = *made;
    m_buffers = std::make_unique<Buffers>(*m_exe, 0);
    if (!m_buffers->ok()) return make_error(m_buffers->error);
    return m_exe->run(m_buffers->inputs, m_buffers->outputs);
  }

  std::unique_ptr<ir::Graph> m_graph;
  runtime::CompileResult m_result;
  std::shared_ptr<Executable> m_exe;
  std::unique_ptr<Buffers> m_buffers;
};

TEST_F(TensorMapLaunch, TheLauncherEncodesTheBoundBuffersMap) {
  // 64 x 64 f32 rows of 256 bytes, in 32 x 32 boxes swizzled over 128 bytes.
  Status s = run("tiled f32 dims=64,64 strides=256 box=32,32 elem=1,1 swizzle=128B l2=256B");
  ASSERT_TRUE(s) << s.error().message;
  auto launches = fake_cuda::launches();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].function, "probe");
  EXPECT_EQ(launches[0].cubin_params, 2u);
  EXPECT_EQ(launches[0].fault, 0) << "the map describes the input buffer, within it";
  EXPECT_EQ(launches[0].params[0], reinterpret_cast<uint64_t>(m_buffers->outputs[0].data));
  EXPECT_EQ(launches[0].params[1], reinterpret_cast<uint64_t>(m_buffers->inputs[0].data))
      << "the map is of the bound input";
}

TEST_F(TensorMapLaunch, AMapThatBreaksARuleOrOverreachesIsRefusedBeforeAnyLaunch) {
  struct Case {
    const char* map;
    const char* says;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"tiled f32 dims=64,64 strides=256 box=32,300 elem=1,1 swizzle=none l2=none",
            "kernel 'k0_elementwise' parameter 1: tensor map 'tiled f32 dims=64,64 strides=256 "
            "box=32,300 elem=1,1 swizzle=none l2=none': box[1] must be 1 to 256"},
           {"tiled f32 dims=64,65 strides=256 box=32,32 elem=1,1 swizzle=none l2=none",
            "parameter 1: its tensor map reaches 16640 bytes into a buffer of 16384"},
           {"tiled f32 dims=64,64 strides=264 box=32,32 elem=1,1 swizzle=none l2=none",
            "strides[0] must be a multiple of 16"},
           {"", "expected 'tiled TYPE"},
       }) {
    size_t before = fake_cuda::launches().size();
    Status s = run(c.map);
    ASSERT_FALSE(s) << c.map;
    EXPECT_NE(s.error().message.find(c.says), std::string::npos) << s.error().message;
    EXPECT_EQ(fake_cuda::launches().size(), before) << c.map;
  }
  // The reach is held to the buffer as the artifact sizes it, whatever the parameter claims.
  compiler::KernelParam& param = m_result.artifact.kernels[0].params[1];
  param.bytes = 1 << 20;
  Status s = run("tiled f32 dims=64,65 strides=256 box=32,32 elem=1,1 swizzle=none l2=none");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("reaches 16640 bytes into a buffer of 16384"), std::string::npos)
      << s.error().message;
}

// A symbolic graph's tensor map without size terms (its dims fixed where its buffer's follow the
// dims) is refused before anything launches.
TEST_F(TensorMapLaunch, ASymbolicGraphsTensorMapWithoutSizeTermsIsRefused) {
  auto graph = ir::parse_graph("graph sym {\n  dim B: 1..64\n  input x: f32[B, 64]\n"
                               "  y = relu(x)\n  output y\n}\n", "sym.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(90, "a");
  options.bucket = {compiler::bucket_of(64, graph->symbols()[0])};
  auto result = runtime::compile_graph(*graph, options, nullptr);
  ASSERT_TRUE(result) << result.error().message;
  ASSERT_FALSE(result->artifact.bucket.empty());
  compiler::KernelParam& param = result->artifact.kernels[0].params[1];
  ASSERT_EQ(param.buffer.role, compiler::BufferRole::input);
  param.kind = compiler::ParamKind::tensor_map;
  param.map = "tiled f32 dims=64,64 strides=256 box=32,32 elem=1,1 swizzle=none l2=none";
  auto made = runtime::make_executable(*graph, std::move(*result), 0);
  ASSERT_TRUE(made) << made.error().message;
  Buffers buffers(**made, 0);
  ASSERT_TRUE(buffers.ok());
  Status s = (*made)->run(buffers.inputs, buffers.outputs);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("kernel '"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("a symbolic graph's tensor map has no size terms"),
            std::string::npos)
      << s.error().message;
  EXPECT_TRUE(fake_cuda::launches().empty());
}

// What a kernel given a map can reach is checked at the launch, as a fault: a map of more bytes
// than its allocation holds, and 128 bytes cuTensorMapEncodeTiled did not write.
TEST_F(TensorMapLaunch, AKernelGivenAMapBeyondItsAllocationOrNoMapFaults) {
  void* function = probe_function();
  ASSERT_NE(function, nullptr);
  unsigned long long out = 0, in = 0;
  ASSERT_EQ(cuMemAlloc_v2(&out, 256), 0);
  ASSERT_EQ(cuMemAlloc_v2(&in, 64 * 64 * 4), 0);
  auto launch = [&](const MapBytes& map) {
    void* params[] = {&out, const_cast<unsigned char*>(map.bytes)};
    EXPECT_EQ(cuLaunchKernel(function, 1, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr), 0);
    return fake_cuda::launches().back();
  };
  auto spec = compiler::parse_tensor_map(
      "tiled f32 dims=64,64 strides=256 box=32,32 elem=1,1 swizzle=none l2=none");
  ASSERT_TRUE(spec);
  MapBytes fits{};
  ASSERT_EQ(encode(*spec, in, fits), 0);
  fake_cuda::Launch ok = launch(fits);
  EXPECT_EQ(ok.fault, 0);
  EXPECT_EQ(ok.params[1], in);
  spec->dims[1] = 65;  // one row past the allocation
  MapBytes past{};
  ASSERT_EQ(encode(*spec, in, past), 0) << "the driver does not know the allocation's size";
  EXPECT_EQ(launch(past).fault, 700);  // CUDA_ERROR_ILLEGAL_ADDRESS
  void* popped = nullptr;
  cuCtxPopCurrent_v2(&popped);
}

TEST_F(TensorMapLaunch, BytesNoEncoderWroteFault) {
  void* function = probe_function();
  ASSERT_NE(function, nullptr);
  unsigned long long out = 0;
  ASSERT_EQ(cuMemAlloc_v2(&out, 256), 0);
  MapBytes garbage{};
  std::memcpy(garbage.bytes + 8, &out, sizeof out);  // an address, but no map
  void* params[] = {&out, garbage.bytes};
  ASSERT_EQ(cuLaunchKernel(function, 1, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr), 0);
  EXPECT_EQ(fake_cuda::launches().back().fault, 700);
  void* popped = nullptr;
  cuCtxPopCurrent_v2(&popped);
}

// `text`'s one kernel compiled for sm_90a in `precision`, on a fake device of `config`, and run
// once with bound inputs: its artifact, its launch, and the device addresses of its inputs.
struct Sm90aRun {
  compiler::KernelArtifact kernel;
  fake_cuda::Launch launch;
  std::vector<uint64_t> inputs;
};

void run_on_sm90a(const char* text, ir::Precision precision, const fake_cuda::Config& config,
                  Sm90aRun* out) {
  auto graph = ir::parse_graph(text, "g.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  ASSERT_TRUE(use_fake_driver(config));
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(90, "a");
  options.precision = precision;
  auto result = runtime::compile_graph(*graph, options, nullptr);
  ASSERT_TRUE(result) << result.error().message;
  ASSERT_EQ(result->artifact.kernels.size(), 1u);
  out->kernel = result->artifact.kernels[0];
  auto made = runtime::make_executable(*graph, std::move(*result), 0);
  ASSERT_TRUE(made) << made.error().message;
  Buffers buffers(**made, 0);
  ASSERT_TRUE(buffers.ok()) << buffers.error;
  size_t before = fake_cuda::launches().size();
  Status s = (*made)->run(buffers.inputs, buffers.outputs);
  ASSERT_TRUE(s) << s.error().message;
  auto launches = fake_cuda::launches();
  ASSERT_EQ(launches.size(), before + 1);
  out->launch = launches.back();
  for (const auto& input : buffers.inputs)
    out->inputs.push_back(reinterpret_cast<uint64_t>(input.data));
  // Every launch of a kernel with tensor maps: 384 threads, its shared memory, no fault, and each
  // map parameter encoded over the input it names.
  EXPECT_EQ(out->launch.block[0], 384u);
  EXPECT_EQ(out->launch.shared_bytes, static_cast<unsigned>(out->kernel.launch.dynamic_smem_bytes));
  EXPECT_EQ(out->launch.cubin_params, static_cast<unsigned>(out->kernel.params.size()));
  EXPECT_EQ(out->launch.fault, 0);
}

// sm_90a's wgmma matmul as the runtime launches it: A's and B's tensor maps encoded from the bound
// inputs after the kernel's own parameters, 384 threads, its shared memory, and a persistent grid
// of one block per multiprocessor at most (54 work tiles of 128x256 here).
// The fake device's multiprocessor count is set once a process, so each count is a test.
void launch_wgmma_matmul(int sm_count) {
  fake_cuda::Config config;
  config.sm_count = sm_count;
  Sm90aRun run;
  ASSERT_NO_FATAL_FAILURE(run_on_sm90a(R"(graph g {
  input x: bf16[2, 1040, 64]
  input w: bf16[64, 520]
  y = matmul(x, w)
  output y
}
)", ir::Precision::automatic, config, &run));
  const compiler::KernelArtifact& k = run.kernel;
  EXPECT_EQ(k.tile, "128x256x64, wgmma, 4 stages");
  ASSERT_TRUE(k.launch.persistent);
  EXPECT_EQ(k.launch.grid[0], 54u);
  ASSERT_EQ(k.params.size(), 5u);
  EXPECT_EQ(k.params[3].kind, compiler::ParamKind::tensor_map);
  EXPECT_EQ(k.params[3].map, "tiled bf16 dims=64,1040,2 strides=128,133120 box=64,128,1 elem=1,1,1 swizzle=128B l2=256B");
  EXPECT_EQ(k.params[4].map, "tiled bf16 dims=520,64 strides=1040 box=64,64 elem=1,1 swizzle=128B l2=256B");
  EXPECT_EQ(run.launch.grid[0], sm_count < 54 ? static_cast<unsigned>(sm_count) : 54u);
  EXPECT_EQ(run.launch.params[3], run.inputs[0]);
  EXPECT_EQ(run.launch.params[4], run.inputs[1]);
}

TEST(WgmmaLaunch, FewerMultiprocessorsThanTilesRunOneBlockEach) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  launch_wgmma_matmul(3);
}

TEST(WgmmaLaunch, MoreMultiprocessorsThanTilesRunOneBlockATile) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  launch_wgmma_matmul(132);
}

// The one matmul kernel of `run`: its tile, A's and B's maps (its parameters 3 and 4) and the
// inputs they were encoded over.
void expect_matmul_maps(const Sm90aRun& run, const std::string& tile, const std::string& a_map,
                        const std::string& b_map) {
  const compiler::KernelArtifact& k = run.kernel;
  EXPECT_EQ(k.tile, tile);
  ASSERT_EQ(k.params.size(), 5u);
  EXPECT_EQ(k.params[3].map, a_map);
  EXPECT_EQ(k.params[4].map, b_map);
  EXPECT_EQ(run.launch.params[3], run.inputs[0]);
  EXPECT_EQ(run.launch.params[4], run.inputs[1]);
}

// `high`'s fp32 matmul with B [K, N] on the wgmma kernel: A's map as the 16-bit kernel's with
// fp32 boxes of 32 x 128, B's {N, K} in boxes of 32 columns x 32 k rows (the staging area's
// blocks), and shared memory for 4 stages of A, B and B's staging area and their barriers.
TEST(WgmmaLaunch, Tf32WithBKNEncodesBoxesOfTheStagingArea) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  Sm90aRun run;
  ASSERT_NO_FATAL_FAILURE(run_on_sm90a(R"(graph g {
  input x: f32[2, 1040, 64]
  input w: f32[64, 520]
  y = matmul(x, w)
  output y
}
)", ir::Precision::high, fake_cuda::Config{}, &run));
  const compiler::KernelArtifact& k = run.kernel;
  ASSERT_TRUE(k.launch.persistent);
  EXPECT_EQ(k.launch.grid[0], 90u);
  EXPECT_EQ(k.launch.dynamic_smem_bytes, 1024u + 4u * (128u + 2u * 128u) * 128u + 3u * 8u * 4u);
  expect_matmul_maps(run, "128x128x32, wgmma, 4 stages",
                     "tiled f32 dims=64,1040,2 strides=256,266240 box=32,128,1 elem=1,1,1 swizzle=128B l2=256B",
                     "tiled f32 dims=520,64 strides=2080 box=32,32 elem=1,1 swizzle=128B l2=256B");
}

// A read as [K, M] (transpose_a) on the wgmma kernel: A's map is {M, K} (and the batch) in boxes
// of 128 bytes of M x the K step's rows, as B [K, N]'s; 16-bit A lands as wgmma reads it
// (imm-trans-a), fp32 A (`high`) in its staging area, whose room the shared memory holds.
TEST(WgmmaLaunch, ATransposedAEncodesMMajorBoxes) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  Sm90aRun run;
  ASSERT_NO_FATAL_FAILURE(run_on_sm90a(R"(graph g {
  input x: bf16[2, 64, 1040]
  input w: bf16[64, 520]
  y = matmul(x, w, transpose_a=true)
  output y
}
)", ir::Precision::automatic, fake_cuda::Config{}, &run));
  expect_matmul_maps(run, "128x256x64, wgmma, 4 stages",
                     "tiled bf16 dims=1040,64,2 strides=2080,133120 box=64,64,1 elem=1,1,1 swizzle=128B l2=256B",
                     "tiled bf16 dims=520,64 strides=1040 box=64,64 elem=1,1 swizzle=128B l2=256B");
}

TEST(WgmmaLaunch, Tf32WithATransposedEncodesBoxesOfItsStagingArea) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  Sm90aRun run;
  ASSERT_NO_FATAL_FAILURE(run_on_sm90a(R"(graph g {
  input x: f32[2, 64, 1040]
  input w: f32[520, 64]
  y = matmul(x, w, transpose_a=true, transpose_b=true)
  output y
}
)", ir::Precision::high, fake_cuda::Config{}, &run));
  EXPECT_EQ(run.kernel.launch.grid[0], 90u);
  EXPECT_EQ(run.kernel.launch.dynamic_smem_bytes,
            1024u + 4u * (2u * 128u + 128u) * 128u + 3u * 8u * 4u);
  expect_matmul_maps(run, "128x128x32, wgmma, 4 stages",
                     "tiled f32 dims=1040,64,2 strides=4160,266240 box=32,32,1 elem=1,1,1 swizzle=128B l2=256B",
                     "tiled f32 dims=64,520 strides=256 box=32,128 elem=1,1 swizzle=128B l2=256B");
}

// A 4-D matmul on the wgmma kernel: A's map holds both batch dims after its matrix (rank 4,
// heads innermost), B's, broadcast over the heads, only the outer one (rank 3).
TEST(WgmmaLaunch, AFourDMatmulEncodesEachOperandsOwnBatchDims) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  Sm90aRun run;
  ASSERT_NO_FATAL_FAILURE(run_on_sm90a(R"(graph g {
  input x: bf16[2, 3, 1040, 64]
  input w: bf16[2, 1, 64, 520]
  y = matmul(x, w)
  output y
}
)", ir::Precision::automatic, fake_cuda::Config{}, &run));
  expect_matmul_maps(run, "128x256x64, wgmma, 4 stages",
                     "tiled bf16 dims=64,1040,3,2 strides=128,133120,399360 box=64,128,1,1 elem=1,1,1,1 swizzle=128B l2=256B",
                     "tiled bf16 dims=520,64,2 strides=1040,66560 box=64,64,1 elem=1,1,1 swizzle=128B l2=256B");
}

// A 5-D matmul (fp32, `high`): A's three batch dims in a rank-5 map (TMA's most), B shared (rank 2).
TEST(WgmmaLaunch, AFiveDMatmulEncodesARankFiveMap) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  Sm90aRun run;
  ASSERT_NO_FATAL_FAILURE(run_on_sm90a(R"(graph g {
  input x: f32[2, 2, 3, 520, 64]
  input w: f32[64, 520]
  y = matmul(x, w)
  output y
}
)", ir::Precision::high, fake_cuda::Config{}, &run));
  expect_matmul_maps(run, "128x128x32, wgmma, 4 stages",
                     "tiled f32 dims=64,520,3,2,2 strides=256,133120,399360,798720 box=32,128,1,1,1 elem=1,1,1,1,1 swizzle=128B l2=256B",
                     "tiled f32 dims=520,64 strides=2080 box=32,32 elem=1,1 swizzle=128B l2=256B");
}

// A symbolic graph's wgmma matmul: its maps hold the bucket's upper bounds and size terms, and
// each run encodes them at its own sizes over buffers sized for them (a map left at the upper
// bounds would reach past the smaller buffers: the fake faults such a launch); the persistent
// grid is the tiles at the upper bounds, one block per multiprocessor at most. Terms that give
// another map at the upper bounds than the description, and input sizes other than the graph's,
// are refused before anything launches.
// A run of symbolic `exe` at S = `size` over device buffers sized for it.
Status run_at(Executable& exe, int64_t size) {
  auto in = exe.inputs_at({size});
  auto out = exe.outputs_at({size});
  if (!in) return in.error();
  if (!out) return out.error();
  std::vector<DeviceBuffer> owned;
  std::vector<TensorRef> inputs, outputs;
  for (auto [specs, refs] : {std::pair{&*in, &inputs}, std::pair{&*out, &outputs}}) {
    for (const TensorSpec& spec : *specs) {
      auto buffer = DeviceBuffer::allocate(testing_support::spec_bytes(spec), 0);
      if (!buffer) return buffer.error();
      refs->push_back({buffer->data(), spec.dtype, spec.shape});
      owned.push_back(std::move(*buffer));
    }
  }
  return exe.run(inputs, outputs);
}

// The one launch a run of symbolic `exe` at S = `size` makes, which must not fault.
void run_once_at(Executable& exe, int64_t size, fake_cuda::Launch* out) {
  size_t before = fake_cuda::launches().size();
  Status s = run_at(exe, size);
  ASSERT_TRUE(s) << s.error().message;
  auto launches = fake_cuda::launches();
  ASSERT_EQ(launches.size(), before + 1);
  EXPECT_EQ(launches.back().fault, 0);
  *out = launches.back();
}

// `text` (one symbolic dim S) compiled for sm_90a on the fake driver, for the bucket holding S =
// `size`, whose upper bound must be `hi`: its graph and compile, one kernel.
struct SymbolicCompile {
  std::optional<ir::Graph> graph;
  runtime::CompileResult result;
};

void compile_symbolic(const char* text, int64_t size, int64_t hi, SymbolicCompile* out) {
  auto graph = ir::parse_graph(text, "g.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  ASSERT_TRUE(use_fake_driver({}));
  compiler::CompileOptions options;
  options.target = compiler::Target::cuda(90, "a");
  options.bucket = {compiler::bucket_of(size, graph->symbols()[0])};
  ASSERT_EQ(options.bucket[0].hi, hi);
  auto result = runtime::compile_graph(*graph, options, nullptr);
  ASSERT_TRUE(result) << result.error().message;
  ASSERT_EQ(result->artifact.kernels.size(), 1u);
  out->graph.emplace(std::move(*graph));
  out->result = std::move(*result);
}

TEST(WgmmaLaunch, ASymbolicGraphsMapsFollowEachRunsSizes) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  SymbolicCompile c;
  ASSERT_NO_FATAL_FAILURE(compile_symbolic(R"(graph g {
  dim S: 1..4096
  input x: bf16[S, 1024]
  input w: bf16[1024, 1024]
  y = matmul(x, w)
  output y
}
)", 2048, 2048, &c));
  const compiler::KernelArtifact k = c.result.artifact.kernels[0];
  EXPECT_EQ(k.tile, "128x256x64, wgmma, 4 stages");
  ASSERT_TRUE(k.launch.persistent);
  EXPECT_EQ(k.launch.grid[0], 64u);  // 16 x 4 tiles at S = 2048
  ASSERT_EQ(k.params.size(), 6u);    // y, x, w, S, A's map, B's map
  EXPECT_EQ(k.params[3].kind, compiler::ParamKind::dim);
  EXPECT_EQ(k.params[4].map, "tiled bf16 dims=1024,2048 strides=2048 box=64,128 elem=1,1 swizzle=128B l2=256B");
  EXPECT_EQ(k.params[4].map_terms.size(), 3u);
  EXPECT_EQ(k.params[5].map, "tiled bf16 dims=1024,1024 strides=2048 box=64,64 elem=1,1 swizzle=128B l2=256B");
  EXPECT_EQ(k.params[5].map_terms.size(), 3u);
  // A's rows follow S: its map at S = 1100.
  auto at = compiler::tensor_map_at(k.params[4], {1100});
  ASSERT_TRUE(at) << at.error().message;
  EXPECT_EQ(compiler::to_string(*at), "tiled bf16 dims=1024,1100 strides=2048 box=64,128 elem=1,1 swizzle=128B l2=256B");

  auto broken = c.result;
  broken.artifact.kernels[0].params[4].map_terms[1].coef = 2;  // 2 S rows
  // An input's bytes other than the graph's (the sizes a map's reach is held to at each run) are
  // refused when the executable is made.
  auto oversized = c.result;
  oversized.artifact.input_sizes[0] = compiler::SizeTerm{int64_t{1} << 40, {}, 1};
  auto forged = runtime::make_executable(*c.graph, std::move(oversized), 0);
  ASSERT_FALSE(forged);
  EXPECT_NE(forged.error().message.find("the input sizes do not match the graph"),
            std::string::npos)
      << forged.error().message;
  auto made = runtime::make_executable(*c.graph, std::move(c.result), 0);
  ASSERT_TRUE(made) << made.error().message;
  for (int64_t size : {1100, 2048, 1025}) {
    SCOPED_TRACE("S = " + std::to_string(size));
    fake_cuda::Launch launch;
    ASSERT_NO_FATAL_FAILURE(run_once_at(**made, size, &launch));
    EXPECT_EQ(launch.grid[0], static_cast<unsigned>(std::min(64, fake_cuda::Config{}.sm_count)));
    EXPECT_EQ(launch.params[3], static_cast<uint64_t>(size));
  }
  auto refused = runtime::make_executable(*c.graph, std::move(broken), 0);
  ASSERT_TRUE(refused) << refused.error().message;
  size_t before = fake_cuda::launches().size();
  Status s = run_at(**refused, 2048);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("size terms at the bucket's upper bounds give another map"),
            std::string::npos)
      << s.error().message;
  EXPECT_EQ(fake_cuda::launches().size(), before);
}

// A symbolic graph's wgmma attention (a symbolic sequence length, grouped heads, causal): its
// three maps' terms give the description at the bucket's upper bounds (checked at load), and
// each run encodes them at its S over buffers sized for it, on a grid of that S's query tiles.
TEST(WgmmaLaunch, ASymbolicGraphsAttentionMapsFollowEachRunsSizes) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  SymbolicCompile c;
  ASSERT_NO_FATAL_FAILURE(compile_symbolic(R"(graph g {
  dim S: 1..4096
  input q: bf16[2, 8, S, 128]
  input k: bf16[2, 2, S, 128]
  o = attention(q, k, k, causal=true)
  output o
}
)", 1000, 1024, &c));
  const compiler::KernelArtifact k = c.result.artifact.kernels[0];
  EXPECT_EQ(k.tile, "128x128, wgmma, 2 stages");
  ASSERT_EQ(k.params.size(), 7u);  // o, q, k, S, and the maps of q, k and v (k again)
  EXPECT_EQ(k.params[4].map, "tiled bf16 dims=128,1024,8,2 strides=256,262144,2097152 box=64,128,1,1 elem=1,1,1,1 swizzle=128B l2=256B");
  auto at = compiler::tensor_map_at(k.params[5], {1000});
  ASSERT_TRUE(at) << at.error().message;
  EXPECT_EQ(compiler::to_string(*at), "tiled bf16 dims=128,1000,2,2 strides=256,256000,512000 box=64,128,1,1 elem=1,1,1,1 swizzle=128B l2=256B");
  auto made = runtime::make_executable(*c.graph, std::move(c.result), 0);
  ASSERT_TRUE(made) << made.error().message;
  for (int64_t size : {1000, 1024, 513}) {
    SCOPED_TRACE("S = " + std::to_string(size));
    fake_cuda::Launch launch;
    ASSERT_NO_FATAL_FAILURE(run_once_at(**made, size, &launch));
    EXPECT_EQ(launch.grid[0], static_cast<unsigned>((size + 127) / 128));
    EXPECT_EQ(launch.grid[2], 16u);
  }
}

// sm_90a's attention kernel as the runtime launches it: Q's, K's and V's rank-4 tensor maps (k
// and v with 2 heads against q's 4, v broadcast over the outer batch: a dim of 1) encoded from the
// bound inputs after the kernel's own parameters, 384 threads, its shared memory, a grid of
// query tiles x batches.
TEST(WgmmaLaunch, AttentionEncodesRank4MapsOfItsOperands) {
  if (!compiler::load_nvrtc("").ok()) GTEST_SKIP() << "no NVRTC here";
  Sm90aRun run;
  ASSERT_NO_FATAL_FAILURE(run_on_sm90a(R"(graph g {
  input q: bf16[2, 4, 200, 64]
  input k: bf16[2, 2, 300, 64]
  input v: bf16[1, 2, 300, 128]
  o = attention(q, k, v, causal=true)
  output o
}
)", ir::Precision::automatic, fake_cuda::Config{}, &run));
  const compiler::KernelArtifact& k = run.kernel;
  EXPECT_EQ(k.tile, "128x128, wgmma, 2 stages");
  EXPECT_FALSE(k.launch.persistent);
  ASSERT_EQ(k.params.size(), 7u);
  for (size_t i = 4; i < 7; ++i) EXPECT_EQ(k.params[i].kind, compiler::ParamKind::tensor_map) << i;
  EXPECT_EQ(k.params[4].map, "tiled bf16 dims=64,200,4,2 strides=128,25600,102400 box=64,128,1,1 elem=1,1,1,1 swizzle=128B l2=256B");
  EXPECT_EQ(k.params[5].map, "tiled bf16 dims=64,300,2,2 strides=128,38400,76800 box=64,128,1,1 elem=1,1,1,1 swizzle=128B l2=256B");
  EXPECT_EQ(k.params[6].map, "tiled bf16 dims=128,300,2,1 strides=256,76800,76800 box=64,128,1,1 elem=1,1,1,1 swizzle=128B l2=256B");
  EXPECT_EQ(run.launch.grid[0], 2u);
  EXPECT_EQ(run.launch.grid[2], 8u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(run.launch.params[4 + i], run.inputs[i]) << i;
}

}  // namespace
}  // namespace kiln::fake_driver_tensor_map_test
