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
    options.sm = 80;
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
