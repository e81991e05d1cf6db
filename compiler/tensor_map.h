// A tensor-map parameter's description (KernelParam::map): what the launcher passes to the
// driver's cuTensorMapEncodeTiled for the buffer it binds, as text in the artifact, read back and
// checked against the driver's documented rules before anything is encoded.
#pragma once

#include "support/expected.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::compiler {

// The CUDA driver's enums (cuda.h), by value: the artifact and the driver agree on these numbers.
enum class TensorMapType : uint8_t {
  u8 = 0, u16, u32, i32, u64, i64, f16, f32, f64, bf16, f32_ftz, tf32, tf32_ftz,
};
enum class TensorMapSwizzle : uint8_t { none = 0, b32, b64, b128 };
enum class TensorMapL2 : uint8_t { none = 0, b64, b128, b256 };

inline constexpr uint32_t k_tensor_map_max_rank = 5;
// The most characters a description may have (parse_tensor_map refuses longer text unread).
inline constexpr size_t k_max_tensor_map_text = 512;

// One tiled tensor map, dims innermost first (the driver's order): `dims[0]` elements of
// `type` are contiguous, `strides[i]` is the byte step of dim i + 1. Interleave is always none
// (kiln's layouts are row-major) and out-of-bounds elements read as zero (oobFill none).
struct TensorMapSpec {
  TensorMapType type = TensorMapType::f32;
  uint32_t rank = 0;
  std::array<uint64_t, k_tensor_map_max_rank> dims{};
  std::array<uint64_t, k_tensor_map_max_rank - 1> strides{};  // bytes, rank - 1 of them
  std::array<uint32_t, k_tensor_map_max_rank> box{};           // elements a copy moves per dim
  std::array<uint32_t, k_tensor_map_max_rank> element_strides{1, 1, 1, 1, 1};
  TensorMapSwizzle swizzle = TensorMapSwizzle::none;
  TensorMapL2 l2 = TensorMapL2::none;
  bool operator==(const TensorMapSpec&) const = default;
};

// Bytes one element of `type` takes.
uint32_t element_bytes(TensorMapType type);

// "tiled bf16 dims=64,4096 strides=128 box=64,128 elem=1,1 swizzle=128B l2=256B": what the
// artifact stores; parse_tensor_map reads exactly that form back (every field, in that order;
// "strides=-" at rank 1, "swizzle=none", "l2=none"), failing with the part it cannot read.
std::string to_string(const TensorMapSpec& spec);
Expected<TensorMapSpec> parse_tensor_map(std::string_view text);

// The rules cuTensorMapEncodeTiled documents for everything but the address (cuda.h, CUDA 13.0):
// rank 1 to 5; dims 1 to 2^32; strides multiples of 16 below 2^40; box dims 1 to 256 with box[0] * element bytes a multiple of 16 and, under a swizzle, within
// the swizzle's span; element strides 1 to 8. The error names the rule.
Status check_tensor_map(const TensorMapSpec& spec);

// The bytes from the map's base address its elements reach: one past its last element's last
// byte (saturated). A bound buffer must hold at least this many.
uint64_t tensor_map_extent(const TensorMapSpec& spec);

}  // namespace kiln::compiler
