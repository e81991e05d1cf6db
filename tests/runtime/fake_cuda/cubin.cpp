// Reading a cubin's ELF header, section names and the .nv.info attributes the driver uses.
#include "cubin.h"

#include <cstring>
#include <string_view>

namespace kiln::fake_cuda {

namespace {

constexpr uint16_t k_em_cuda = 190;
constexpr uint32_t k_sht_nobits = 8;
constexpr uint8_t k_format_sized = 4;  // EIFMT_SVAL: a 16-bit size, then that many bytes
constexpr uint8_t k_attr_max_threads = 0x05;
constexpr uint8_t k_attr_kparam_info = 0x17;
constexpr uint8_t k_attr_cuda_api_version = 0x37;
constexpr uint8_t k_compat_arch_specific = 0x09;  // in .nv.compat: 1 for an sm_XXa cubin

template <typename T>
T load(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

struct Section {
  std::string_view name;
  uint32_t type = 0;
  uint64_t offset = 0, size = 0;
};

// Reads the .nv.compat records (the .nv.info layout: 4 bytes, or a sized value) into `cubin`.
bool read_compat(const unsigned char* data, uint64_t size, Cubin& cubin) {
  uint64_t at = 0;
  while (at + 4 <= size) {
    uint8_t format = data[at], attribute = data[at + 1];
    if (format < 1 || format > k_format_sized) return false;
    if (format != k_format_sized) {
      if (attribute == k_compat_arch_specific && data[at + 2] != 0) cubin.arch_specific = true;
      at += 4;
      continue;
    }
    at += 4 + load<uint16_t>(data + at + 2);
  }
  return at <= size;
}

// Reads one kernel's .nv.info records into `kernel` (and the API version into `cubin`).
bool read_info(const unsigned char* data, uint64_t size, CubinKernel& kernel, Cubin& cubin) {
  uint64_t at = 0;
  while (at + 4 <= size) {
    uint8_t format = data[at], attribute = data[at + 1];
    if (format < 1 || format > k_format_sized) return false;
    if (format != k_format_sized) {
      at += 4;
      continue;
    }
    uint16_t length = load<uint16_t>(data + at + 2);
    const unsigned char* value = data + at + 4;
    if (at + 4 + length > size) return false;
    if (attribute == k_attr_kparam_info && length >= 12) {
      uint16_t ordinal = load<uint16_t>(value + 4);
      uint32_t flags = load<uint32_t>(value + 8);
      if (ordinal >= 4096) return false;
      if (kernel.param_sizes.size() <= ordinal) kernel.param_sizes.resize(ordinal + 1u, 0);
      kernel.param_sizes[ordinal] = flags >> 18;
    } else if (attribute == k_attr_max_threads && length >= 12) {
      kernel.max_threads =
          load<uint32_t>(value) * load<uint32_t>(value + 4) * load<uint32_t>(value + 8);
    } else if (attribute == k_attr_cuda_api_version && length >= 4) {
      cubin.api_version = static_cast<int>(load<uint32_t>(value));
    }
    at += 4 + length;
  }
  return true;
}

}  // namespace

std::optional<Cubin> read_cubin(const void* image) {
  auto* bytes = static_cast<const unsigned char*>(image);
  if (!bytes || std::memcmp(bytes, "\x7f" "ELF", 4) != 0 || bytes[4] != 2) return std::nullopt;
  if (load<uint16_t>(bytes + 18) != k_em_cuda) return std::nullopt;
  uint32_t flags = load<uint32_t>(bytes + 48);
  uint64_t shoff = load<uint64_t>(bytes + 40);
  uint16_t shentsize = load<uint16_t>(bytes + 58), shnum = load<uint16_t>(bytes + 60),
           shstrndx = load<uint16_t>(bytes + 62);
  if (shentsize < 64 || shnum == 0 || shstrndx >= shnum || shoff > (1ull << 32)) {
    return std::nullopt;
  }
  auto header = [&](uint16_t index) { return bytes + shoff + uint64_t{index} * shentsize; };
  const unsigned char* names = bytes + load<uint64_t>(header(shstrndx) + 24);
  uint64_t names_size = load<uint64_t>(header(shstrndx) + 32);
  std::vector<Section> sections;
  for (uint16_t i = 0; i < shnum; ++i) {
    const unsigned char* h = header(i);
    uint32_t name = load<uint32_t>(h);
    if (name >= names_size) return std::nullopt;
    Section s;
    s.name = std::string_view(reinterpret_cast<const char*>(names) + name,
                              strnlen(reinterpret_cast<const char*>(names) + name,
                                      names_size - name));
    s.type = load<uint32_t>(h + 4);
    s.offset = load<uint64_t>(h + 24);
    s.size = load<uint64_t>(h + 32);
    if (s.type != k_sht_nobits && (s.offset > (1ull << 32) || s.size > (1ull << 32))) {
      return std::nullopt;
    }
    sections.push_back(s);
  }
  Cubin cubin;
  // ELF ABI 7 (NVRTC 12 below sm_100): the SM in e_flags' low byte, 0x800 for sm_XXa; 8: the SM
  // in bits 8..15, 0x8 or .nv.compat's attribute 9 for sm_XXa.
  bool abi7 = bytes[8] == 7;
  cubin.sm = static_cast<int>(abi7 ? flags & 0xff : (flags >> 8) & 0xff);
  cubin.arch_specific = (flags & (abi7 ? 0x800u : 0x8u)) != 0;
  for (const Section& s : sections)
    if (s.name == ".nv.compat" && !read_compat(bytes + s.offset, s.size, cubin)) return std::nullopt;
  for (const Section& text : sections) {
    if (text.name.substr(0, 6) != ".text.") continue;
    CubinKernel kernel;
    kernel.name = std::string(text.name.substr(6));
    for (const Section& s : sections) {
      if (s.name.substr(0, 9) == ".nv.info." && s.name.substr(9) == kernel.name) {
        if (!read_info(bytes + s.offset, s.size, kernel, cubin)) return std::nullopt;
      } else if (s.name.substr(0, 11) == ".nv.shared." && s.name.substr(11) == kernel.name) {
        kernel.static_shared = s.size;
      }
    }
    cubin.kernels.push_back(std::move(kernel));
  }
  return cubin;
}

}  // namespace kiln::fake_cuda
