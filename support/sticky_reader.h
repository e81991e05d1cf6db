// Little-endian reader matching ByteWriter whose failures stick: once a read runs past the end,
// every later read returns zero or empty and ok() stays false, so a decoder checks once, at the
// end of a record, instead of after every field.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kiln {

class StickyReader {
public:
  explicit StickyReader(std::string_view in) : m_in(in) {}
  bool ok() const { return m_ok; }
  bool done() const { return m_pos == m_in.size(); }
  size_t left() const { return m_in.size() - m_pos; }

  // An unsigned integer of `n` bytes (n <= 8).
  uint64_t bytes(size_t n) {
    if (!m_ok || left() < n) {
      m_ok = false;
      return 0;
    }
    uint64_t v = 0;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&v, m_in.data() + m_pos, n);  // one load where the host is little-endian
    } else {
      for (size_t i = 0; i < n; ++i)
        v |= static_cast<uint64_t>(static_cast<uint8_t>(m_in[m_pos + i])) << (8 * i);
    }
    m_pos += n;
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(bytes(1)); }
  uint32_t u32() { return static_cast<uint32_t>(bytes(4)); }
  uint64_t u64() { return bytes(8); }
  int32_t i32() { return static_cast<int32_t>(u32()); }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  // A u64 length, then that many bytes.
  std::string str() {
    uint64_t n = u64();
    if (!m_ok || n > left()) {
      m_ok = false;
      return {};
    }
    std::string s(m_in.substr(m_pos, n));
    m_pos += n;
    return s;
  }
  std::string_view raw(size_t n) {
    if (!m_ok || left() < n) {
      m_ok = false;
      return {};
    }
    std::string_view s = m_in.substr(m_pos, n);
    m_pos += n;
    return s;
  }
  // A count of elements that each take at least `min_bytes`: more than could fit is an error.
  size_t count(size_t min_bytes) {
    uint64_t n = u64();
    if (!m_ok || n > left() / min_bytes) {
      m_ok = false;
      return 0;
    }
    return static_cast<size_t>(n);
  }

private:
  std::string_view m_in;
  size_t m_pos = 0;
  bool m_ok = true;
};

}  // namespace kiln
