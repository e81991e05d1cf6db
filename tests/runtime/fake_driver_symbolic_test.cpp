// A symbolic graph's Executable against the fake libcuda: each run picks the bucket holding the
// input shapes' sizes, compiles it once through the cache, launches with the dims' values after
// the buffers and grids sized for them; bad sizes are refused before anything launches.
#include "fake_driver_support.h"

#include "cache/cache.h"
#include "compiler/compiler.h"
#include "compiler/sizes.h"
#include "compiler/target.h"
#include "ir/hash.h"
#include "ir/parse.h"
#include "runtime/compile_service.h"
#include "runtime/executable_impl.h"
#include "runtime/symbolic_executable.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace kiln {
namespace {

using testing_support::spec_bytes;
using testing_support::use_fake_driver;

const char* k_graph = R"(graph sym {
  dim B: 1..64
  input x: f32[B, 96]
  input w: f32[96, 40]
  input b: f32[40]
  y = gelu(add(matmul(x, w), b))
  s = softmax(x)
  output y, s
}
)";

struct Fixture {
  std::filesystem::path dir;
  std::shared_ptr<Executable> exe;
};

Fixture symbolic_executable() {
  Fixture f;
  f.dir = std::filesystem::temp_directory_path() /
          ("kiln-symbolic-" + std::to_string(::getpid()));
  std::filesystem::remove_all(f.dir);
  RuntimeOptions options;
  options.cache_dir = f.dir.string();
  options.remote_cache = "";
  options.precision = Precision::high;
  auto runtime = Runtime::create(options);
  EXPECT_TRUE(runtime) << runtime.error().message;
  if (!runtime) return f;
  auto exe = (*runtime)->compile_text(k_graph, "sym.kg");
  EXPECT_TRUE(exe) << exe.error().message;
  if (exe) f.exe = *exe;
  return f;  // the runtime goes; the executable keeps its cache
}

uint64_t cache_entries(const std::filesystem::path& dir) {
  cache::Options options;
  options.dir = dir.string();
  options.remote = "";
  auto stats = cache::Cache::open(std::move(options))->stats();
  return stats ? stats->entries : 0;
}

// Device buffers for the executable's tensors at `values`.
struct SizedBuffers {
  SizedBuffers(const Executable& exe, const std::vector<int64_t>& values) {
    auto in = exe.inputs_at(values);
    auto out = exe.outputs_at(values);
    EXPECT_TRUE(in && out);
    if (!in || !out) return;
    auto add = [&](const TensorSpec& spec, std::vector<TensorRef>& refs) {
      auto buffer = DeviceBuffer::allocate(spec_bytes(spec), 0);
      ASSERT_TRUE(buffer) << buffer.error().message;
      refs.push_back({buffer->data(), spec.dtype, spec.shape});
      owned.push_back(std::move(*buffer));
    };
    for (const TensorSpec& spec : *in) add(spec, inputs);
    for (const TensorSpec& spec : *out) add(spec, outputs);
  }
  std::vector<DeviceBuffer> owned;
  std::vector<TensorRef> inputs, outputs;
};

TEST(FakeDriverSymbolic, EachRunLaunchesItsBucketsKernelsWithTheDimsAndGridsForThem) {
  ASSERT_TRUE(use_fake_driver({}));
  Fixture f = symbolic_executable();
  ASSERT_TRUE(f.exe);
  ASSERT_EQ(f.exe->dims().size(), 1u);
  EXPECT_EQ(f.exe->dims()[0].name, "B");
  EXPECT_EQ(f.exe->inputs()[0].dims, (std::vector<std::string>{"B", ""}));
  EXPECT_EQ(cache_entries(f.dir), 0u) << "nothing compiles before a size is known";

  auto graph = ir::parse_graph(k_graph, "sym.kg");
  ASSERT_TRUE(graph);
  for (int64_t value : {37, 40, 64, 5, 1}) {
    SCOPED_TRACE("B = " + std::to_string(value));
    SizedBuffers buffers(*f.exe, {value});
    size_t before = fake_cuda::launches().size();
    Status s = f.exe->run(buffers.inputs, buffers.outputs);
    ASSERT_TRUE(s) << s.error().message;
    // The plan of the bucket, as the compiler makes it, for the expected launches.
    compiler::CompileOptions options;
    options.target.sm = 90;
    options.precision = Precision::high;
    options.bucket = {compiler::bucket_of(value, graph->symbols()[0])};
    auto lowered = compiler::lower(*graph, options);
    ASSERT_TRUE(lowered) << lowered.error().message;
    auto launches = fake_cuda::launches();
    const auto& kernels = lowered->plan.kernels;
    ASSERT_EQ(launches.size() - before, kernels.size());
    for (size_t k = 0; k < kernels.size(); ++k) {
      const fake_cuda::Launch& launch = launches[before + k];
      SCOPED_TRACE(kernels[k].name);
      EXPECT_EQ(launch.fault, 0);
      // The buffers and the one dim, a typed parameter of the plan's last.
      ASSERT_EQ(launch.cubin_params, kernels[k].params.size());
      EXPECT_EQ(kernels[k].params.back().kind, compiler::ParamKind::dim);
      EXPECT_EQ(launch.params.back(), static_cast<uint64_t>(value)) << "the dim's value";
      for (size_t d = 0; d < 3; ++d)
        EXPECT_EQ(launch.grid[d], *kernels[k].grid[d].at({value})) << "grid " << d;
    }
  }
  // 37 and 40 share [33, 64], 64 too; 5 is in [5, 8], 1 in [1, 1].
  EXPECT_EQ(cache_entries(f.dir), 3u);
  std::filesystem::remove_all(f.dir);
}

TEST(FakeDriverSymbolic, BadSizesAreRefusedBeforeAnythingLaunches) {
  ASSERT_TRUE(use_fake_driver({}));
  Fixture f = symbolic_executable();
  ASSERT_TRUE(f.exe);
  SizedBuffers buffers(*f.exe, {64});
  std::vector<TensorRef> inputs = buffers.inputs;
  inputs[0].shape = {65, 96};
  Status outside = f.exe->run(inputs, buffers.outputs);
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().message, "input 'x' dim 0: B = 65 is outside its range 1..64");
  std::vector<TensorRef> outputs = buffers.outputs;
  outputs[0].shape = {63, 40};
  Status wrong_output = f.exe->run(buffers.inputs, outputs);
  ASSERT_FALSE(wrong_output);
  EXPECT_NE(wrong_output.error().message.find("output 'y' has shape [63, 40], expected [64, 40]"),
            std::string::npos)
      << wrong_output.error().message;
  EXPECT_TRUE(fake_cuda::launches().empty());
  EXPECT_FALSE(f.exe->prepare(nullptr));
  EXPECT_FALSE(f.exe->prepare(std::vector<int64_t>{0}));  // below the range
  EXPECT_FALSE(f.exe->outputs_at({65}));
  std::filesystem::remove_all(f.dir);
}

TEST(FakeDriverSymbolic, PrepareCompilesABucketAheadAndOutputShapesFollowTheValues) {
  ASSERT_TRUE(use_fake_driver({}));
  Fixture f = symbolic_executable();
  ASSERT_TRUE(f.exe);
  Status s = f.exe->prepare({20});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(cache_entries(f.dir), 1u);
  auto outputs = f.exe->outputs_at({20});
  ASSERT_TRUE(outputs);
  EXPECT_EQ((*outputs)[0].shape, (std::vector<int64_t>{20, 40}));
  EXPECT_EQ((*outputs)[1].shape, (std::vector<int64_t>{20, 96}));
  auto host = f.exe->run_host(testing_support::Buffers::zeros_for(*f.exe->inputs_at({17})), {17});
  ASSERT_TRUE(host) << host.error().message;
  EXPECT_EQ((*host)[0].size(), 17u * 40 * 4);
  EXPECT_EQ(cache_entries(f.dir), 1u) << "17 is in the prepared bucket [17, 32]";
  std::filesystem::remove_all(f.dir);
}

// A bucket past 65535 batches (CUDA's limit of the grid's z) plans and runs: on sm_90's mma.sync
// kernel the row tiles and batches fold over the grid's y and z together, every launch within
// CUDA's grid (the fake driver refuses one past it); on sm_90a, the arch the 9.0 device compiles
// for by default, the persistent wgmma kernel walks its work tiles along x. A small bucket's grid
// is not folded.
TEST(FakeDriverSymbolic, ABucketPast65535BatchesFoldsItsGridAndRuns) {
  ASSERT_TRUE(use_fake_driver({}));
  for (std::string arch : {"", "sm_90"}) {
    SCOPED_TRACE(arch.empty() ? "sm_90a" : arch);
    RuntimeOptions options;
    options.use_cache = false;
    options.precision = Precision::high;
    options.arch = arch;
    auto runtime = Runtime::create(options);
    ASSERT_TRUE(runtime) << runtime.error().message;
    const char* text =
        "graph batched {\n  dim B: 1..100000\n  input a: f32[B, 16, 16]\n"
        "  y = matmul(a, a)\n  output y\n}\n";
    auto exe = (*runtime)->compile_text(text, "batched.kg");
    ASSERT_TRUE(exe) << exe.error().message;
    for (int64_t batch : {int64_t{70000}, int64_t{3}}) {
      SCOPED_TRACE("B = " + std::to_string(batch));
      SizedBuffers buffers(**exe, {batch});
      size_t before = fake_cuda::launches().size();
      Status run = (*exe)->run(buffers.inputs, buffers.outputs);
      ASSERT_TRUE(run) << run.error().message;
      auto launches = fake_cuda::launches();
      ASSERT_EQ(launches.size(), before + 1);
      const fake_cuda::Launch& launch = launches.back();
      EXPECT_EQ(launch.fault, 0);
      EXPECT_LE(launch.grid[1], 65535u);
      EXPECT_LE(launch.grid[2], 65535u);
      uint64_t blocks = uint64_t{launch.grid[0]} * launch.grid[1] * launch.grid[2];
      if (!arch.empty()) {
        // one row tile and one column tile a batch: y x z blocks cover the batch
        EXPECT_EQ(launch.grid[0], 1u);
        if (batch > 65535) {
          // planned at the bucket's upper bound: the fewest y whose z holds it within 65535
          auto graph = ir::parse_graph(text, "batched.kg");
          ASSERT_TRUE(graph) << graph.error().message;
          int64_t hi = compiler::bucket_of(batch, graph->symbols()[0]).hi;
          EXPECT_GT(hi, 65535);
          EXPECT_LE(hi, 2 * 65535);
          EXPECT_EQ(launch.grid[1], 2u);
          EXPECT_EQ(launch.grid[2], static_cast<uint32_t>((hi + 1) / 2));
          EXPECT_GE(blocks, static_cast<uint64_t>(batch));
        } else {
          EXPECT_EQ(launch.grid[1], 1u);
          EXPECT_EQ(launch.grid[2], static_cast<uint32_t>(batch)) << "unfolded";
        }
      }
    }
  }
}

// A bucket whose compile fails fails on its own, every time, with its first error and no second
// compile, while the executable's other buckets compile and run. (A valid graph's bucket always
// plans, now that matmul grids fold past CUDA's limits: the failure is the compile function's.)
TEST(FakeDriverSymbolic, ABucketThatFailsToCompileFailsAloneAndKeepsItsError) {
  ASSERT_TRUE(use_fake_driver({}));
  RuntimeOptions options;
  options.use_cache = false;
  options.precision = Precision::high;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  // what the small bucket runs: the graph at B = 3
  auto small = (*runtime)->compile_text(
      "graph batched {\n  input a: f32[3, 16, 16]\n  y = matmul(a, a)\n  output y\n}\n",
      "small.kg");
  ASSERT_TRUE(small) << small.error().message;
  auto graph = ir::parse_graph(
      "graph batched {\n  dim B: 1..100000\n  input a: f32[B, 16, 16]\n  y = matmul(a, a)\n"
      "  output y\n}\n",
      "batched.kg");
  ASSERT_TRUE(graph) << graph.error().message;
  compiler::CompileOptions o;
  o.target = compiler::device_target(90);
  o.precision = ir::Precision::high;
  o.bucket = {compiler::bucket_of(3, graph->symbols()[0])};  // the graph's request, at a bucket
  auto request = compiler::check_request(*graph, o);
  ASSERT_TRUE(request) << request.error().message;
  int failed = 0, compiled = 0;
  runtime::CompileBucket compile =
      [&](const std::vector<compiler::DimRange>& bucket) -> Expected<std::shared_ptr<Executable>> {
    if (bucket.at(0).hi > 4) {
      ++failed;
      return Error{"bucket " + std::to_string(bucket[0].lo) + ".." + std::to_string(bucket[0].hi) +
                   " failed " + std::to_string(failed) + " time(s)"};
    }
    ++compiled;
    return *small;
  };
  auto exe = runtime::make_symbolic_executable(*graph, compile, 0, "sm_90a", false, *request,
                                               ir::graph_hash(*graph).hex());
  std::string first;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Status big = exe->prepare(std::vector<int64_t>{70000});
    ASSERT_FALSE(big);
    if (first.empty()) first = big.error().message;
    EXPECT_EQ(big.error().message, first) << "the first error, kept";
    EXPECT_NE(first.find("failed 1 time(s)"), std::string::npos) << first;
    if (attempt == 1) {
      SizedBuffers buffers(*exe, {3});
      Status run = exe->run(buffers.inputs, buffers.outputs);
      EXPECT_TRUE(run) << run.error().message;
    }
  }
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(compiled, 1);
}

// An entry whose symbolic fields do not fit the graph (only a damaged or foreign one can) is
// refused before anything runs.
TEST(FakeDriverSymbolic, AnEntryThatDoesNotFitTheGraphIsRefused) {
  ASSERT_TRUE(use_fake_driver({}));
  auto graph = ir::parse_graph(k_graph, "sym.kg");
  ASSERT_TRUE(graph);
  compiler::CompileOptions options;
  options.target.sm = 90;
  options.bucket = {compiler::bucket_of(40, graph->symbols()[0])};
  auto result = runtime::compile_graph(*graph, options, nullptr);
  ASSERT_TRUE(result) << result.error().message;
  runtime::CompileResult damaged = *result;
  std::erase_if(damaged.artifact.kernels[0].params,
                [](const compiler::KernelParam& p) { return p.kind == compiler::ParamKind::dim; });
  EXPECT_FALSE(runtime::make_executable(*graph, damaged, 0));
  damaged = *result;
  for (compiler::KernelParam& p : damaged.artifact.kernels[0].params)
    if (p.kind == compiler::ParamKind::dim) p.symbol = 5;
  EXPECT_FALSE(runtime::make_executable(*graph, damaged, 0));
  damaged = *result;
  damaged.artifact.temporary_sizes.clear();
  damaged.artifact.temporary_bytes.push_back(64);
  EXPECT_FALSE(runtime::make_executable(*graph, damaged, 0));
  damaged = *result;
  damaged.artifact.kernels[0].grid[0].symbols = {7};
  EXPECT_FALSE(runtime::make_executable(*graph, damaged, 0));
  EXPECT_TRUE(runtime::make_executable(*graph, *result, 0));
}

}  // namespace
}  // namespace kiln
