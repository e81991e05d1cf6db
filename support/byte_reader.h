// Little-endian byte reader matching ByteWriter: every read is checked against the bytes left.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

class ByteReader {
public:
  explicit ByteReader(std::string_view bytes) : m_bytes(bytes) {}

  bool u64(uint64_t& v) {
    if (remaining() < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(m_bytes[m_pos + i])) << (8 * i);
    m_pos += 8;
    return true;
  }
  // A u64 length, then that many bytes (a view into the input).
  bool str(std::string_view& out) {
    uint64_t n = 0;
    if (!u64(n) || n > remaining()) return false;
    out = m_bytes.substr(m_pos, n);
    m_pos += n;
    return true;
  }
  bool str(std::string& out) {
    std::string_view view;
    if (!str(view)) return false;
    out.assign(view);
    return true;
  }
  // Exactly `n` bytes equal to `expected` (a magic number).
  bool expect(std::string_view expected) {
    if (m_bytes.substr(m_pos, expected.size()) != expected) return false;
    m_pos += expected.size();
    return true;
  }
  size_t remaining() const { return m_bytes.size() - m_pos; }
  size_t position() const { return m_pos; }

private:
  std::string_view m_bytes;
  size_t m_pos = 0;
};

}  // namespace kiln
