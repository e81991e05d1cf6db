// Tensors, storage rounding and the seeded random-input generator.
#include "reference/tensor.h"

#include "reference/rounding.h"

#include <cstring>

namespace kiln::reference {

Tensor zeros(const ir::TensorType& type) {
  Tensor tensor;
  tensor.dtype = type.dtype;
  tensor.shape = type.shape;
  tensor.values.assign(static_cast<size_t>(type.shape.elements()), 0.0);
  return tensor;
}

double store_value(ir::DType dtype, double value) {
  auto single = static_cast<float>(value);
  switch (dtype) {
    case ir::DType::f32:
      return single;
    case ir::DType::f16:
      return round_f16(single);
    case ir::DType::bf16:
      return round_bf16(single);
  }
  return single;
}

Rng::Rng(uint64_t seed) : m_engine(seed) {}

double Rng::next_unit() {
  // The top 53 bits as an integer count of 2^-53: exact, and independent of the library's
  // distributions (which the standard leaves unspecified).
  return static_cast<double>(m_engine() >> 11) * 0x1p-53;
}

double Rng::next_symmetric() { return 2.0 * next_unit() - 1.0; }

Tensor random_tensor(const ir::TensorType& type, Rng& rng) {
  Tensor tensor = zeros(type);
  for (double& value : tensor.values) value = store_value(type.dtype, rng.next_symmetric());
  return tensor;
}

std::vector<Tensor> random_inputs(const ir::Graph& graph, uint64_t seed) {
  Rng rng(seed);
  std::vector<Tensor> inputs;
  inputs.reserve(graph.inputs().size());
  for (ir::NodeId id : graph.inputs()) inputs.push_back(random_tensor(graph.node(id).type, rng));
  return inputs;
}

void store_device_bytes(const Tensor& t, unsigned char* out) {
  for (size_t i = 0; i < t.values.size(); ++i) {
    auto f = static_cast<float>(t.values[i]);
    if (t.dtype == ir::DType::f32) {
      std::memcpy(out + 4 * i, &f, 4);
      continue;
    }
    uint16_t h = t.dtype == ir::DType::bf16 ? bf16_from_float(f) : f16_from_float(f);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

Tensor load_device_bytes(const ir::TensorType& type, const unsigned char* in) {
  Tensor t = zeros(type);
  for (size_t i = 0; i < t.values.size(); ++i) {
    if (type.dtype == ir::DType::f32) {
      float f;
      std::memcpy(&f, in + 4 * i, 4);
      t.values[i] = f;
      continue;
    }
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    t.values[i] = type.dtype == ir::DType::bf16 ? float_from_bf16(h) : float_from_f16(h);
  }
  return t;
}

}  // namespace kiln::reference
