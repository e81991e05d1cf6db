// Tensor-map descriptions: text, parsing and the driver's documented rules.
#include "compiler/tensor_map.h"

#include <charconv>
#include <vector>

namespace kiln::compiler {

namespace {

constexpr std::array<std::string_view, 13> k_type_names = {
    "u8", "u16", "u32", "i32", "u64", "i64", "f16", "f32", "f64", "bf16", "f32_ftz", "tf32",
    "tf32_ftz"};
constexpr std::array<std::string_view, 4> k_swizzle_names = {"none", "32B", "64B", "128B"};
constexpr std::array<std::string_view, 4> k_l2_names = {"none", "64B", "128B", "256B"};

template <typename T>
std::string join(const T* values, uint32_t count) {
  if (count == 0) return "-";
  std::string text;
  for (uint32_t i = 0; i < count; ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return text;
}

// "a,b,c" (or "-" for none) into at most `max` numbers.
template <typename T>
bool read_list(std::string_view text, std::vector<T>& out, size_t max) {
  out.clear();
  if (text == "-") return true;
  while (true) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    T value{};
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || item[0] == '+' ||
        out.size() == max)
      return false;
    out.push_back(value);
    if (comma == std::string_view::npos) return true;
    text.remove_prefix(comma + 1);
  }
}

template <size_t N>
int index_of(const std::array<std::string_view, N>& names, std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == name) return static_cast<int>(i);
  return -1;
}

}  // namespace

uint32_t element_bytes(TensorMapType type) {
  switch (type) {
    case TensorMapType::u8: return 1;
    case TensorMapType::u16:
    case TensorMapType::f16:
    case TensorMapType::bf16: return 2;
    case TensorMapType::u32:
    case TensorMapType::i32:
    case TensorMapType::f32:
    case TensorMapType::f32_ftz:
    case TensorMapType::tf32:
    case TensorMapType::tf32_ftz: return 4;
    case TensorMapType::u64:
    case TensorMapType::i64:
    case TensorMapType::f64: return 8;
  }
  return 0;
}

std::string to_string(const TensorMapSpec& spec) {
  uint32_t rank = spec.rank <= k_tensor_map_max_rank ? spec.rank : 0;
  auto type = static_cast<size_t>(spec.type);
  auto swizzle = static_cast<size_t>(spec.swizzle);
  auto l2 = static_cast<size_t>(spec.l2);
  return "tiled " + std::string(type < k_type_names.size() ? k_type_names[type] : "?") +
         " dims=" + join(spec.dims.data(), rank) +
         " strides=" + join(spec.strides.data(), rank ? rank - 1 : 0) +
         " box=" + join(spec.box.data(), rank) + " elem=" + join(spec.element_strides.data(), rank) +
         " swizzle=" + std::string(swizzle < 4 ? k_swizzle_names[swizzle] : "?") +
         " l2=" + std::string(l2 < 4 ? k_l2_names[l2] : "?");
}

Expected<TensorMapSpec> parse_tensor_map(std::string_view text) {
  auto bad = [&](const std::string& what) -> Error {
    return make_error("tensor map '", std::string(text.substr(0, 200)), "': ", what);
  };
  // The longest description (rank 5, every number at its largest) is under 300 characters.
  if (text.size() > k_max_tensor_map_text)
    return bad("longer than " + std::to_string(k_max_tensor_map_text) + " characters");
  std::vector<std::string_view> words;
  for (size_t at = 0; at <= text.size() && words.size() <= 8;) {
    size_t space = text.find(' ', at);
    if (space == std::string_view::npos) space = text.size();
    words.push_back(text.substr(at, space - at));
    at = space + 1;
  }
  const char* keys[] = {"dims=", "strides=", "box=", "elem=", "swizzle=", "l2="};
  if (words.size() != 8 || words[0] != "tiled")
    return bad("expected 'tiled TYPE dims= strides= box= elem= swizzle= l2='");
  for (size_t i = 0; i < 6; ++i)
    if (words[i + 2].substr(0, std::string_view(keys[i]).size()) != keys[i])
      return bad(std::string("expected ") + keys[i] + " as word " + std::to_string(i + 3));
  auto value = [&](size_t i) { return words[i + 2].substr(std::string_view(keys[i]).size()); };
  TensorMapSpec spec;
  int type = index_of(k_type_names, words[1]);
  if (type < 0) return bad("unknown element type '" + std::string(words[1].substr(0, 16)) + "'");
  spec.type = static_cast<TensorMapType>(type);
  std::vector<uint64_t> dims, strides;
  std::vector<uint32_t> box, element_strides;
  if (!read_list(value(0), dims, k_tensor_map_max_rank) || dims.empty())
    return bad("dims are not 1 to 5 numbers");
  spec.rank = static_cast<uint32_t>(dims.size());
  if (!read_list(value(1), strides, k_tensor_map_max_rank - 1) || strides.size() != spec.rank - 1)
    return bad("strides are not rank - 1 numbers ('-' at rank 1)");
  if (!read_list(value(2), box, k_tensor_map_max_rank) || box.size() != spec.rank)
    return bad("box is not rank numbers");
  if (!read_list(value(3), element_strides, k_tensor_map_max_rank) ||
      element_strides.size() != spec.rank)
    return bad("elem is not rank numbers");
  int swizzle = index_of(k_swizzle_names, value(4));
  if (swizzle < 0) return bad("swizzle is not none, 32B, 64B or 128B");
  int l2 = index_of(k_l2_names, value(5));
  if (l2 < 0) return bad("l2 is not none, 64B, 128B or 256B");
  for (uint32_t i = 0; i < spec.rank; ++i) {
    spec.dims[i] = dims[i];
    spec.box[i] = box[i];
    spec.element_strides[i] = element_strides[i];
    if (i + 1 < spec.rank) spec.strides[i] = strides[i];
  }
  spec.swizzle = static_cast<TensorMapSwizzle>(swizzle);
  spec.l2 = static_cast<TensorMapL2>(l2);
  return spec;
}

Status check_tensor_map(const TensorMapSpec& spec) {
  auto broken = [&](const std::string& rule) -> Error {
    return make_error("tensor map '", to_string(spec), "': ", rule);
  };
  if (spec.rank < 1 || spec.rank > k_tensor_map_max_rank) return broken("rank must be 1 to 5");
  if (static_cast<size_t>(spec.swizzle) >= k_swizzle_names.size() ||
      static_cast<size_t>(spec.l2) >= k_l2_names.size())
    return broken("unknown swizzle or L2 promotion");
  uint64_t elem = element_bytes(spec.type);
  if (elem == 0) return broken("unknown element type");
  for (uint32_t i = 0; i < spec.rank; ++i) {
    std::string dim = std::to_string(i);
    if (spec.dims[i] < 1 || spec.dims[i] > (uint64_t{1} << 32))
      return broken("dims[" + dim + "] must be 1 to 2^32");
    if (spec.box[i] < 1 || spec.box[i] > 256) return broken("box[" + dim + "] must be 1 to 256");
    if (spec.element_strides[i] < 1 || spec.element_strides[i] > 8)
      return broken("elem[" + dim + "] must be 1 to 8");
    if (i + 1 < spec.rank && (spec.strides[i] % 16 != 0 || spec.strides[i] >= (uint64_t{1} << 40)))
      return broken("strides[" + dim + "] must be a multiple of 16 below 2^40");
  }
  uint64_t inner = spec.box[0] * elem;
  if (inner % 16 != 0) return broken("box[0] * element bytes must be a multiple of 16");
  if (spec.swizzle != TensorMapSwizzle::none) {
    uint64_t span = uint64_t{16} << static_cast<unsigned>(spec.swizzle);
    if (inner > span)
      return broken("box[0] * element bytes (" + std::to_string(inner) + ") must be within the " +
                    std::to_string(span) + "-byte swizzle span");
  }
  return Status::success();
}

uint64_t tensor_map_extent(const TensorMapSpec& spec) {
  // One past the last element's byte: (dims[0] - 1) elements and (dims[i] - 1) strides on, in
  // 128 bits (dims to 2^32 times strides to 2^40), saturated.
  uint32_t rank = spec.rank < k_tensor_map_max_rank ? spec.rank : k_tensor_map_max_rank;
  if (rank == 0) return 0;
  unsigned __int128 elem = element_bytes(spec.type);
  unsigned __int128 end = (spec.dims[0] ? spec.dims[0] - 1 : 0) * elem + elem;
  for (uint32_t i = 1; i < rank; ++i)
    end += static_cast<unsigned __int128>(spec.dims[i] ? spec.dims[i] - 1 : 0) * spec.strides[i - 1];
  return end > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(end);
}

}  // namespace kiln::compiler
