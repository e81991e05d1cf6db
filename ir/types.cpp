// Element types, shapes and precision modes: names, sizes and validating constructors.
#include "ir/types.h"

#include <array>

namespace kiln::ir {

namespace {

struct DTypeName {
  DType dtype;
  std::string_view name;
  int64_t bytes;
};
constexpr std::array<DTypeName, 6> k_dtypes = {{
    {DType::f32, "f32", 4},
    {DType::f16, "f16", 2},
    {DType::bf16, "bf16", 2},
    {DType::i32, "i32", 4},
    {DType::i64, "i64", 8},
    {DType::boolean, "bool", 1},
}};

struct PrecisionName {
  Precision precision;
  std::string_view name;
};
constexpr std::array<PrecisionName, 5> k_precisions = {{
    {Precision::highest, "highest"},
    {Precision::high, "high"},
    {Precision::tf32x3, "tf32x3"},
    {Precision::medium, "medium"},
    {Precision::automatic, "auto"},
}};

}  // namespace

std::string_view to_string(DType dtype) {
  return k_dtypes[static_cast<size_t>(dtype)].name;
}

std::optional<DType> parse_dtype(std::string_view text) {
  for (const auto& entry : k_dtypes) {
    if (entry.name == text) return entry.dtype;
  }
  return std::nullopt;
}

int64_t byte_size(DType dtype) {
  return k_dtypes[static_cast<size_t>(dtype)].bytes;
}

bool is_float(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

bool is_integer(DType dtype) { return dtype == DType::i32 || dtype == DType::i64; }

std::string dtype_names() { return "f32, f16, bf16, i32, i64 or bool"; }

std::string_view to_string(Precision precision) {
  return k_precisions[static_cast<size_t>(precision)].name;
}

std::optional<Precision> parse_precision(std::string_view text) {
  for (const auto& entry : k_precisions) {
    if (entry.name == text) return entry.precision;
  }
  return std::nullopt;
}

Expected<Shape> Shape::make(std::vector<int64_t> dims) {
  if (dims.size() > static_cast<size_t>(k_max_rank)) {
    return make_error("a shape must have rank 0 to ", std::to_string(k_max_rank), ", got rank ",
                      std::to_string(dims.size()));
  }
  Shape shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = dims[i];
    if (d <= 0) {
      return make_error("dimension ", std::to_string(i), " is ", std::to_string(d),
                        "; dimensions must be positive");
    }
    if (d > k_max_elements || shape.m_elements > k_max_elements / d) {
      return make_error("shape ", to_string_unchecked(dims), " has more than ",
                        std::to_string(k_max_elements), " elements (2^31 - 1), kiln's limit");
    }
    shape.m_elements *= d;
  }
  shape.m_dims = std::move(dims);
  return shape;
}

Expected<Shape> Shape::make(std::vector<int64_t> dims, std::vector<SymbolicDim> symbols) {
  if (!symbols.empty() && symbols.size() != dims.size())
    return make_error("a shape's symbols must match its dims");
  std::vector<int64_t> shown = dims;
  auto shape = make(std::move(dims));
  bool any = false;
  for (const SymbolicDim& s : symbols) any = any || s.index >= 0;
  if (!shape && any) {
    std::string names = "[", bounds;
    for (size_t i = 0; i < shown.size(); ++i) {
      names += (i ? ", " : "");
      if (symbols[i].index < 0) {
        names += std::to_string(shown[i]);
        continue;
      }
      names += symbols[i].name;
      bounds += (bounds.empty() ? "" : ", ") + symbols[i].name + " = " + std::to_string(shown[i]);
    }
    return make_error("shape ", names, "] can hold more than ", std::to_string(k_max_elements),
                      " elements (2^31 - 1), kiln's limit, at its dims' upper bounds (", bounds,
                      "); narrow their ranges");
  }
  if (!shape) return shape;
  if (any) shape->m_symbols = std::move(symbols);
  return shape;
}

bool Shape::operator==(const Shape& other) const {
  if (m_dims != other.m_dims) return false;
  for (int i = 0; i < rank(); ++i)
    if (symbol(i) != other.symbol(i)) return false;
  return true;
}

std::string to_string(const Shape& shape) {
  if (!shape.symbolic()) return to_string_unchecked(shape.dims());
  std::string out = "[";
  for (int i = 0; i < shape.rank(); ++i) {
    if (i) out += ", ";
    const SymbolicDim& s = shape.symbols()[static_cast<size_t>(i)];
    out += s.index >= 0 ? s.name : std::to_string(shape.dim(i));
  }
  return out + "]";
}

std::string to_string_unchecked(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims[i]);
  }
  out += "]";
  return out;
}

std::string to_string(const TensorType& type) {
  return std::string(to_string(type.dtype)) + to_string(type.shape);
}

}  // namespace kiln::ir
