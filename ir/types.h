// Element types, shapes, tensor types and matmul precision modes of the kiln IR.
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir {

// The element types. The numbering is hashed (append only): the three float types first, then
// the integer and boolean ones a whole model's token ids, positions and masks need.
enum class DType : uint8_t { f32, f16, bf16, i32, i64, boolean };

// "f32", "f16", "bf16", "i32", "i64", "bool".
std::string_view to_string(DType dtype);
// Parses a dtype name; nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view text);
// Bytes per element: 4, 2, 2, 4, 8 and 1 (a bool is one byte, 0 or 1).
int64_t byte_size(DType dtype);
// f32, f16 and bf16: kernels compute them in fp32 and round at each value.
bool is_float(DType dtype);
// i32 and i64: two's complement, arithmetic wraps.
bool is_integer(DType dtype);
// "f32, f16, bf16, i32, i64 or bool": every dtype name, for messages.
std::string dtype_names();

// How a matmul's arithmetic is done (see DESIGN.md "Precision modes"). `automatic` is a
// graph-wide choice only, resolved per arch by the compiler; ops carry concrete modes.
enum class Precision : uint8_t { highest, high, tf32x3, medium, automatic };

// "highest", "high", "tf32x3", "medium", "auto".
std::string_view to_string(Precision precision);
// Parses a precision name (including "auto"); nullopt for anything else.
std::optional<Precision> parse_precision(std::string_view text);

// The highest rank of a tensor (a tensor has rank 0 to 6).
inline constexpr int k_max_rank = 6;
// Every tensor's element count stays below 2^31 so kernels index with 32-bit integers.
inline constexpr int64_t k_max_elements = (int64_t{1} << 31) - 1;

// A symbolic dimension of a shape: symbol #index of its graph (Graph::symbols()), shown as
// `name`. The index is what counts; the name is for messages and printing.
struct SymbolicDim {
  int32_t index = -1;
  std::string name;
  bool operator==(const SymbolicDim&) const = default;
};

// A shape of rank 0 (a scalar: one element, written `[]`) to 6, every dim positive, element count below k_max_elements. A dim may be
// symbolic (a graph's `dim B: 1..4096`): dim(i) is then the symbol's upper bound, so that
// elements() and bytes() are the most the shape can hold, and symbol(i) says which symbol it is.
class Shape {
public:
  // Validates rank, dims and element count; the error says which dim is wrong and why.
  static Expected<Shape> make(std::vector<int64_t> dims);
  // As make(dims), with symbols[i].index >= 0 marking dim i symbolic (dims[i] its upper bound).
  // `symbols` is empty or of the same length as dims.
  static Expected<Shape> make(std::vector<int64_t> dims, std::vector<SymbolicDim> symbols);

  int rank() const { return static_cast<int>(m_dims.size()); }
  const std::vector<int64_t>& dims() const { return m_dims; }
  int64_t dim(int i) const { return m_dims[static_cast<size_t>(i)]; }
  int64_t elements() const { return m_elements; }
  // True when some dim is symbolic.
  bool symbolic() const { return !m_symbols.empty(); }
  // The symbol index of dim i, or -1 for a constant dim.
  int32_t symbol(int i) const {
    return m_symbols.empty() ? -1 : m_symbols[static_cast<size_t>(i)].index;
  }
  // Per dim (empty for a static shape): the symbol and its name, index -1 for a constant dim.
  const std::vector<SymbolicDim>& symbols() const { return m_symbols; }
  // Equal dims and equal symbols (names aside).
  bool operator==(const Shape& other) const;

private:
  std::vector<int64_t> m_dims;
  std::vector<SymbolicDim> m_symbols;
  int64_t m_elements = 1;
};

// "[128, 768]"; a symbolic dim shows its name: "[B, S, 768]".
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
