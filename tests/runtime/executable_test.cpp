// Tests of Executable without a GPU: argument checks and the no-driver message.
#include "kiln/kiln.h"
#include "runtime/executable_impl.h"
#include "ir/parse.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace kiln {
namespace {

std::shared_ptr<Executable> compile_mlp() {
  RuntimeOptions options;
  options.arch = "sm_80";
  options.use_cache = false;
  auto runtime = Runtime::create(options);
  EXPECT_TRUE(runtime);
  auto exe = (*runtime)->compile_file(std::string(KILN_EXAMPLES_DIR) + "/mlp.kg");
  EXPECT_TRUE(exe) << exe.error().message;
  return exe ? *exe : nullptr;
}

std::vector<TensorRef> refs_for(const std::vector<TensorSpec>& specs) {
  alignas(16) static float dummy[4];
  std::vector<TensorRef> refs;
  for (const TensorSpec& s : specs) refs.push_back({&dummy, s.dtype, s.shape});
  return refs;
}

// An entry's artifact is checked against the graph it claims to run before any backend uses it:
// a damaged or foreign one fails naming what does not match, for the CUDA and the CPU target.
TEST(Executable, AnArtifactThatDoesNotFitItsGraphIsRefused) {
  auto fixed = ir::parse_graph("graph g { input a: f32[4]\n y = relu(a)\n output y }", "g.kg");
  ASSERT_TRUE(fixed) << fixed.error().message;
  compiler::Artifact a;
  a.arch = "sm_90";
  a.input_bytes = {16};
  a.output_bytes = {16};
  a.kernels.resize(1);
  EXPECT_TRUE(runtime::check_artifact_fits(a, *fixed));
  auto refused = [](const compiler::Artifact& artifact, const ir::Graph& graph,
                    const std::string& what) {
    Status s = runtime::check_artifact_fits(artifact, graph);
    EXPECT_FALSE(s) << what;
    if (!s) {
      EXPECT_NE(s.error().message.find(what), std::string::npos) << s.error().message;
    }
  };
  compiler::Artifact wrong = a;
  wrong.input_bytes = {20};
  refused(wrong, *fixed, "the input sizes");
  wrong = a;
  wrong.output_bytes = {16, 16};
  refused(wrong, *fixed, "the inputs and outputs");
  wrong = a;
  wrong.bucket = {{1, 8}};
  refused(wrong, *fixed, "the bucket's dims");

  auto symbolic = ir::parse_graph(
      "graph g { dim B: 1..64\n input a: f32[B, 4]\n y = relu(a)\n output y }", "g.kg");
  ASSERT_TRUE(symbolic) << symbolic.error().message;
  compiler::Artifact s;
  s.arch = "sm_90";
  s.bucket = {{33, 64}};
  s.input_bytes = s.output_bytes = {1024};
  compiler::SizeTerm by_b{16, {0}, 1};
  s.input_sizes = s.output_sizes = {by_b};
  s.kernels.resize(1);
  s.kernels[0].grid = {by_b, compiler::SizeTerm{}, compiler::SizeTerm{}};
  s.kernels[0].params = {compiler::dim_param(0)};
  EXPECT_TRUE(runtime::check_artifact_fits(s, *symbolic));
  wrong = s;
  wrong.kernels[0].grid[0].symbols = {3};
  refused(wrong, *symbolic, "a kernel's grid terms");
  wrong = s;
  wrong.kernels[0].params.clear();
  refused(wrong, *symbolic, "a kernel's grid or dims");
  wrong = s;
  wrong.kernels[0].params = {compiler::dim_param(1)};
  refused(wrong, *symbolic, "a kernel's dims");
  wrong = s;
  wrong.input_sizes[0].symbols = {1};
  refused(wrong, *symbolic, "the buffers' size terms");
  // A symbolic graph's input and output bytes are the graph's own terms (what a run's tensors
  // hold, which its tensor maps' reach is held to).
  wrong = s;
  wrong.bucket = {{33, 65}};  // past B's range
  refused(wrong, *symbolic, "the bucket's dims");
  wrong = s;
  wrong.input_sizes[0].coef = 32;
  refused(wrong, *symbolic, "the input sizes");
  wrong = s;
  wrong.output_sizes[0] = compiler::SizeTerm{1 << 20, {}, 1};
  refused(wrong, *symbolic, "the output sizes");

  compiler::Artifact cpu = s;
  cpu.arch = "cpu:znver4";
  cpu.target = compiler::Target::for_cpu("znver4", "");
  cpu.kernels[0] = compiler::KernelArtifact{};
  cpu.kernels[0].items = {by_b};
  EXPECT_TRUE(runtime::check_artifact_fits(cpu, *symbolic));
  cpu.kernels[0].items[0].symbols = {2};
  refused(cpu, *symbolic, "a kernel's work items");
}

TEST(Executable, DescribesInputsAndOutputsInDeclarationOrder) {
  auto exe = compile_mlp();
  ASSERT_TRUE(exe);
  ASSERT_EQ(exe->inputs().size(), 5u);
  EXPECT_EQ(exe->inputs()[0].name, "x");
  EXPECT_EQ(exe->inputs()[1].shape, (std::vector<int64_t>{768, 3072}));
  ASSERT_EQ(exe->outputs().size(), 1u);
  EXPECT_EQ(exe->outputs()[0].name, "y");
}

TEST(Executable, RunChecksCountDtypeShapeAndNullBeforeTouchingTheGpu) {
  auto exe = compile_mlp();
  ASSERT_TRUE(exe);
  auto inputs = refs_for(exe->inputs());
  auto outputs = refs_for(exe->outputs());

  auto missing = inputs;
  missing.pop_back();
  Status s = exe->run(missing, outputs);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "expected 5 inputs, got 4");

  auto wrong_dtype = inputs;
  wrong_dtype[2].dtype = DType::bf16;
  s = exe->run(wrong_dtype, outputs);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "input 'b1' has dtype bf16, expected f32");

  auto wrong_shape = outputs;
  wrong_shape[0].shape = {128, 767};
  s = exe->run(inputs, wrong_shape);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "output 'y' has shape [128, 767], expected [128, 768]");

  auto null = inputs;
  null[0].data = nullptr;
  s = exe->run(null, outputs);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "input 'x' is a null pointer");
}

TEST(Executable, RunWithoutADriverSaysSo) {
  setenv("KILN_CUDA_DRIVER_PATH", "/nonexistent/libcuda.so.1", 1);
  auto exe = compile_mlp();
  ASSERT_TRUE(exe);
  Status s = exe->run(refs_for(exe->inputs()), refs_for(exe->outputs()));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message.rfind("no CUDA driver found", 0), 0u) << s.error().message;
  Status gpu = gpu_status();
  ASSERT_FALSE(gpu);
  EXPECT_EQ(gpu.error().message.rfind("no CUDA driver found", 0), 0u);
  EXPECT_FALSE(DeviceBuffer::allocate(16));
}

TEST(Executable, WorkspaceOffsetsAreAlignedAndCoverEveryTemporary) {
  compiler::Artifact artifact;
  artifact.temporary_bytes = {10, 256, 1};
  uint64_t total = 0;
  auto offsets = runtime::temporary_offsets(artifact.temporary_bytes, &total);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 256, 512}));
  EXPECT_EQ(total, 768u);
}

TEST(Executable, WorkspaceMatchesWhatTheCompilerPlanned) {
  // attention.kg keeps its scores in a temporary between the matmul and the softmax kernels.
  for (const char* name : {"attention.kg", "mlp.kg", "gated_mlp.kg"}) {
    compiler::CompileOptions options;
    options.target.sm = 80;
    auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/" + name);
    ASSERT_TRUE(graph);
    auto result = runtime::compile_graph(*graph, options, nullptr);
    ASSERT_TRUE(result) << result.error().message;
    uint64_t total = 0;
    runtime::temporary_offsets(result->artifact.temporary_bytes, &total);
    EXPECT_EQ(total, result->artifact.workspace_bytes) << name;
  }
}

}  // namespace
}  // namespace kiln
