// The GPU suite: kiln's compiled kernels on a real device against the fp64 reference. Every
// test reports itself skipped where there is no CUDA driver or device.
#include "kiln/kiln.h"
#include "ir/parse.h"
#include "reference/audit.h"
#include "reference/execute.h"
#include "reference/metrics.h"
#include "reference/rounding.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln {
namespace {

// Device bytes of a reference tensor at its dtype.
std::vector<unsigned char> to_bytes(const reference::Tensor& t) {
  std::vector<unsigned char> bytes;
  for (double v : t.values) {
    auto f = static_cast<float>(v);
    if (t.dtype == DType::f32) {
      unsigned char b[4];
      std::memcpy(b, &f, 4);
      bytes.insert(bytes.end(), b, b + 4);
      continue;
    }
    uint16_t h = t.dtype == DType::bf16 ? reference::bf16_from_float(f)
                                        : reference::f16_from_float(f);
    bytes.push_back(static_cast<unsigned char>(h & 0xff));
    bytes.push_back(static_cast<unsigned char>(h >> 8));
  }
  return bytes;
}

std::vector<double> from_bytes(const std::vector<unsigned char>& bytes, DType dtype) {
  std::vector<double> values;
  size_t width = dtype == DType::f32 ? 4 : 2;
  for (size_t i = 0; i + width <= bytes.size(); i += width) {
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, &bytes[i], 4);
      values.push_back(f);
      continue;
    }
    uint16_t h = static_cast<uint16_t>(bytes[i] | (bytes[i + 1] << 8));
    values.push_back(dtype == DType::bf16 ? reference::float_from_bf16(h)
                                          : reference::float_from_f16(h));
  }
  return values;
}

struct GpuCase {
  const char* graph;
  Precision precision;
};

class GpuAgainstReference : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuAgainstReference, OutputsWithinTheModesTolerance) {
  if (Status gpu = gpu_status(); !gpu) GTEST_SKIP() << gpu.error().message;
  const GpuCase& c = GetParam();
  auto graph = ir::parse_graph_file(std::string(KILN_EXAMPLES_DIR) + "/" + c.graph);
  ASSERT_TRUE(graph) << graph.error().message;
  RuntimeOptions options;
  options.precision = c.precision;
  options.use_cache = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().message;
  auto exe = (*runtime)->compile(*graph);
  if (!exe && exe.error().message.find("cannot run") != std::string::npos) {
    GTEST_SKIP() << exe.error().message;  // e.g. bf16 on an sm_75 device
  }
  ASSERT_TRUE(exe) << exe.error().message;

  auto inputs = reference::random_inputs(*graph, 7);
  auto expected = reference::run(*graph, inputs, reference::RunMode::fp64());
  ASSERT_TRUE(expected) << expected.error().message;

  std::vector<DeviceBuffer> buffers;
  std::vector<TensorRef> in_refs, out_refs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto bytes = to_bytes(inputs[i]);
    auto buffer = DeviceBuffer::allocate(bytes.size());
    ASSERT_TRUE(buffer) << buffer.error().message;
    ASSERT_TRUE(buffer->upload(bytes.data(), bytes.size()));
    in_refs.push_back({buffer->data(), inputs[i].dtype, inputs[i].shape.dims()});
    buffers.push_back(std::move(*buffer));
  }
  for (const TensorSpec& spec : (*exe)->outputs()) {
    size_t elements = 1;
    for (int64_t d : spec.shape) elements *= static_cast<size_t>(d);
    auto buffer = DeviceBuffer::allocate(elements * (spec.dtype == DType::f32 ? 4 : 2));
    ASSERT_TRUE(buffer) << buffer.error().message;
    out_refs.push_back({buffer->data(), spec.dtype, spec.shape});
    buffers.push_back(std::move(*buffer));
  }
  Status ran = (*exe)->run(in_refs, out_refs);
  ASSERT_TRUE(ran) << ran.error().message;
  Precision resolved = *ir::parse_precision((*exe)->precision());
  for (size_t o = 0; o < out_refs.size(); ++o) {
    const DeviceBuffer& buffer = buffers[inputs.size() + o];
    std::vector<unsigned char> bytes(buffer.size());
    ASSERT_TRUE(buffer.download(bytes.data(), bytes.size()));
    auto actual = from_bytes(bytes, out_refs[o].dtype);
    double error = reference::relative_l2(actual, (*expected)[o].values);
    double tolerance = reference::output_tolerance(*graph, graph->outputs()[o], resolved);
    EXPECT_LE(error, tolerance) << c.graph << " output " << o << " in "
                                << (*exe)->precision();
  }
}

const GpuCase k_cases[] = {
    {"mlp.kg", Precision::highest},        {"mlp.kg", Precision::high},
    {"mlp.kg", Precision::tf32x3},         {"mlp.kg", Precision::medium},
    {"attention.kg", Precision::highest},  {"attention.kg", Precision::high},
    {"attention.kg", Precision::tf32x3},   {"mixed_head.kg", Precision::high},
    {"gated_mlp.kg", Precision::automatic}, {"half_epilogue.kg", Precision::automatic},
};

INSTANTIATE_TEST_SUITE_P(Gpu, GpuAgainstReference, ::testing::ValuesIn(k_cases),
                         [](const auto& info) {
                           std::string name = info.param.graph;
                           name = name.substr(0, name.find('.'));
                           std::string mode(ir::to_string(info.param.precision));
                           return name + "_" + mode;
                         });

}  // namespace
}  // namespace kiln
