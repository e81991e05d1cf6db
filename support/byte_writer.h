// Little-endian byte writer shared by the canonical graph bytes and the artifact format.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

class ByteWriter {
public:
  void u8(uint8_t v) { m_out.push_back(static_cast<char>(v)); }
  // Little-endian whatever the host; one append per value (graph hashing writes thousands).
  void u32(uint32_t v) { little_endian<4>(v); }
  void u64(uint64_t v) { little_endian<8>(v); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  // A u64 length, then the bytes: strings cannot run into what follows.
  void str(std::string_view s) {
    u64(s.size());
    m_out.append(s);
  }
  // The bytes alone (magic numbers, fixed tags).
  void raw(std::string_view s) { m_out.append(s); }
  std::string take() { return std::move(m_out); }
  void reserve(size_t bytes) { m_out.reserve(bytes); }

private:
  template <int N>
  void little_endian(uint64_t v) {
    char bytes[N];
    for (int i = 0; i < N; ++i) bytes[i] = static_cast<char>(v >> (8 * i));
    m_out.append(bytes, N);
  }

  std::string m_out;
};

}  // namespace kiln
