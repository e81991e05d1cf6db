// Tensors, storage rounding and the seeded random-input generator.
#include "reference/tensor.h"

#include "reference/rounding.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::reference {

Tensor zeros(const ir::TensorType& type) {
  Tensor tensor;
  tensor.dtype = type.dtype;
  tensor.shape = type.shape;
  tensor.values.assign(static_cast<size_t>(type.shape.elements()), 0.0);
  if (type.dtype == ir::DType::i64) tensor.exact.assign(tensor.values.size(), 0);
  return tensor;
}

int64_t Tensor::integer(size_t i) const {
  if (i < exact.size() && static_cast<double>(exact[i]) == values[i]) return exact[i];
  return saturated_int64(values[i]);
}

void Tensor::set_integer(size_t i, int64_t v) {
  values[i] = static_cast<double>(v);
  if (dtype != ir::DType::i64) return;
  if (exact.size() != values.size()) exact.assign(values.size(), 0);
  exact[i] = v;
}

int64_t saturated_int64(double v) {
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
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
    case ir::DType::i32:
      return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(
          static_cast<uint64_t>(saturated_int64(value)))));
    case ir::DType::i64:
      return std::trunc(value);
    case ir::DType::boolean:
      return value != 0.0 ? 1.0 : 0.0;
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

Tensor random_tensor(const ir::TensorType& type, Rng& rng, double integer_limit) {
  Tensor tensor = zeros(type);
  for (double& value : tensor.values) {
    if (ir::is_float(type.dtype)) {
      value = store_value(type.dtype, rng.next_symmetric());
    } else {
      // Integers in [0, k_random_integer_limit), bools true or false with even odds.
      double limit = type.dtype == ir::DType::boolean ? 2.0 : integer_limit;
      value = std::floor(rng.next_unit() * limit);
    }
  }
  return tensor;
}

std::vector<Tensor> random_inputs(const ir::Graph& graph, uint64_t seed) {
  Rng rng(seed);
  std::vector<Tensor> inputs;
  inputs.reserve(graph.inputs().size());
  // An embedding's ids read straight from an input are drawn in [0, V) of its smallest table.
  std::vector<double> limits(graph.inputs().size(), k_random_integer_limit);
  for (const ir::EmbeddingIds& e : ir::embedding_ids(graph))
    limits[e.input] = std::min(limits[e.input], static_cast<double>(e.rows));
  for (size_t i = 0; i < graph.inputs().size(); ++i)
    inputs.push_back(random_tensor(graph.node(graph.inputs()[i]).type, rng, limits[i]));
  return inputs;
}

void store_device_bytes(const Tensor& t, unsigned char* out) {
  if (!ir::is_float(t.dtype)) {
    for (size_t i = 0; i < t.values.size(); ++i) {
      int64_t v = t.dtype == ir::DType::i64 ? t.integer(i)
                                             : saturated_int64(store_value(t.dtype, t.values[i]));
      if (t.dtype == ir::DType::i64) {
        std::memcpy(out + 8 * i, &v, 8);
      } else if (t.dtype == ir::DType::i32) {
        auto w = static_cast<int32_t>(v);
        std::memcpy(out + 4 * i, &w, 4);
      } else {
        out[i] = v != 0 ? 1 : 0;
      }
    }
    return;
  }
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
  if (!ir::is_float(type.dtype)) {
    for (size_t i = 0; i < t.values.size(); ++i) {
      if (type.dtype == ir::DType::i64) {
        int64_t v;
        std::memcpy(&v, in + 8 * i, 8);
        t.set_integer(i, v);
      } else if (type.dtype == ir::DType::i32) {
        int32_t v;
        std::memcpy(&v, in + 4 * i, 4);
        t.values[i] = v;
      } else {
        t.values[i] = in[i] != 0 ? 1.0 : 0.0;  // any nonzero byte reads as true
      }
    }
    return t;
  }
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
