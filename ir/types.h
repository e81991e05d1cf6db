// Element types, shapes, tensor types and matmul precision modes of the kiln IR.
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir {

enum class DType : uint8_t { f32, f16, bf16 };

// "f32", "f16", "bf16".
std::string_view to_string(DType dtype);
// Parses a dtype name; nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view text);
// Bytes per element: 4 or 2.
int64_t byte_size(DType dtype);

// How a matmul's arithmetic is done (see DESIGN.md "Precision modes"). `automatic` is a
// graph-wide choice only, resolved per arch by the compiler; ops carry concrete modes.
enum class Precision : uint8_t { highest, high, tf32x3, medium, automatic };

// "highest", "high", "tf32x3", "medium", "auto".
std::string_view to_string(Precision precision);
// Parses a precision name (including "auto"); nullopt for anything else.
std::optional<Precision> parse_precision(std::string_view text);

inline constexpr int k_max_rank = 4;
// Every tensor's element count stays below 2^31 so kernels index with 32-bit integers.
inline constexpr int64_t k_max_elements = (int64_t{1} << 31) - 1;

// A static shape of rank 1 to 4, every dim positive, element count below k_max_elements.
class Shape {
public:
  // Validates rank, dims and element count; the error says which dim is wrong and why.
  static Expected<Shape> make(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(m_dims.size()); }
  const std::vector<int64_t>& dims() const { return m_dims; }
  int64_t dim(int i) const { return m_dims[static_cast<size_t>(i)]; }
  int64_t elements() const { return m_elements; }
  bool operator==(const Shape&) const = default;

private:
  std::vector<int64_t> m_dims;
  int64_t m_elements = 1;
};

// "[128, 768]".
std::string to_string(const Shape& shape);
// "[128, 768]" for dims that need not form a valid Shape (used in messages).
std::string to_string_unchecked(const std::vector<int64_t>& dims);

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  int64_t bytes() const { return shape.elements() * byte_size(dtype); }
  bool operator==(const TensorType&) const = default;
};

// "f32[128, 768]".
std::string to_string(const TensorType& type);

}  // namespace kiln::ir
