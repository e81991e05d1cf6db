// Host tensors of the reference executor and the seeded random inputs every check runs on.
#pragma once

#include "ir/graph.h"

#include <cstdint>
#include <random>
#include <vector>

namespace kiln::reference {

// A dense row-major tensor. Values are held as doubles whatever the dtype; in the emulated modes
// every value is exactly representable in `dtype` (see store_value).
struct Tensor {
  ir::DType dtype = ir::DType::f32;
  ir::Shape shape;
  std::vector<double> values;
  // An i64 tensor keeps its exact values here too, since a double holds integers exactly only
  // to 2^53: zeros() makes room, load_device_bytes (an input file, a kernel's output) fills it,
  // and the integer kernels, layout ops and casts read and write it through integer() and
  // set_integer(). exact[i] counts only while values[i] is still its double: a value changed
  // through `values` alone (a tensor built by hand) reads as it is there.
  std::vector<int64_t> exact;

  ir::TensorType type() const { return ir::TensorType{dtype, shape}; }
  // Element i of an integer or bool tensor, exactly where `exact` holds it.
  int64_t integer(size_t i) const;
  // Sets element i of an integer or bool tensor to `v` (already within its dtype).
  void set_integer(size_t i, int64_t v);
};

// The host bytes a Tensor holds per element of `dtype`: a double, and an i64's exact value too.
inline int64_t host_bytes_per_element(ir::DType dtype) {
  return dtype == ir::DType::i64 ? 16 : 8;
}

// A zero-filled tensor of `type`.
Tensor zeros(const ir::TensorType& type);

// `value` rounded to `dtype` the way a kernel stores it: to fp32 (round to nearest even), then for
// f16/bf16 to the 16-bit format (round to nearest even); an integer value (toward zero) wrapped
// to i32, or as it is for i64; 1 or 0 for bool.
double store_value(ir::DType dtype, double value);

// A whole double as an int64_t, saturated past its range (the double 2^63, which i64's 2^63 - 1
// rounds to, does not fit: the plain cast is undefined, and gave -2^63); NaN is 0.
int64_t saturated_int64(double v);

// Deterministic uniform numbers from a seed, identical on every platform and standard library:
// std::mt19937_64 (fully specified by the standard) with kiln's own mapping to doubles.
class Rng {
public:
  explicit Rng(uint64_t seed);
  // Uniform in [0, 1) with 53 random bits.
  double next_unit();
  // Uniform in [-1, 1).
  double next_symmetric();

private:
  std::mt19937_64 m_engine;
};

// Seeded integer inputs are uniform in [0, k_random_integer_limit).
inline constexpr double k_random_integer_limit = 16.0;

// A tensor of `type` with values uniform in [-1, 1], each rounded to the dtype; integer tensors
// uniform in [0, k_random_integer_limit), bool ones true or false with even odds.
Tensor random_tensor(const ir::TensorType& type, Rng& rng,
                     double integer_limit = k_random_integer_limit);

// One random tensor per graph input, in calling-convention order, all from one stream seeded by
// `seed`: the same seed always gives the same inputs. Ids an embedding reads straight from an
// input are drawn in [0, V) of its (smallest) table.
std::vector<Tensor> random_inputs(const ir::Graph& graph, uint64_t seed);

// A tensor in device layout: dense row-major elements of its dtype (f32, f16/bf16 bits, i32, i64,
// or one byte 0/1 per bool, little-endian), t.type().bytes() of them; values round to the dtype
// as a kernel stores them.
void store_device_bytes(const Tensor& t, unsigned char* out);
// The inverse: reads type.bytes() bytes of device layout.
Tensor load_device_bytes(const ir::TensorType& type, const unsigned char* in);

}  // namespace kiln::reference
