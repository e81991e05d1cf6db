// The strict .npy reader and numpy-compatible writer (see npy.h for what is accepted).
#include "support/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace kiln::npy {
namespace {

constexpr std::string_view k_magic = "\x93NUMPY";
// numpy aligns the data to this many bytes (format.ARRAY_ALIGN).
constexpr int64_t k_align = 64;
// numpy leaves room in the header for the first dim to grow to this many digits.
constexpr size_t k_growth_digits = 21;

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// The header dict, in Python literal syntax: what numpy writes, either quote, spaces between
// tokens, a trailing comma. Each value is checked as it is read.
class HeaderParser {
public:
  explicit HeaderParser(std::string_view text) : m_text(text) {}

  Expected<Header> parse() {
    Header header;
    skip_spaces();
    if (!consume('{')) return fail("the header is not a dict (it does not start with '{')");
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    while (true) {
      skip_spaces();
      if (at_end()) return fail("the dict is not closed with '}'");
      if (consume('}')) break;
      auto key = string_literal("a key");
      if (!key) return key.error();
      skip_spaces();
      if (!consume(':')) return fail("expected ':' after key " + quoted(*key));
      skip_spaces();
      Status value;
      if (*key == "descr") {
        if (seen_descr) return fail("key 'descr' appears twice");
        seen_descr = true;
        value = descr(header.descr);
      } else if (*key == "fortran_order") {
        if (seen_fortran) return fail("key 'fortran_order' appears twice");
        seen_fortran = true;
        value = fortran_order();
      } else if (*key == "shape") {
        if (seen_shape) return fail("key 'shape' appears twice");
        seen_shape = true;
        value = shape(header.shape);
      } else {
        return fail("unexpected key " + quoted(*key) +
                    " (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      if (!value) return value.error();
      skip_spaces();
      if (at_end()) return fail("the dict is not closed with '}'");
      if (consume(',')) continue;
      if (consume('}')) break;
      return fail("expected ',' or '}' after the value of " + quoted(*key));
    }
    for (auto [seen, key] : {std::pair{seen_descr, "descr"},
                             std::pair{seen_fortran, "fortran_order"},
                             std::pair{seen_shape, "shape"}}) {
      if (!seen) return make_error("header: the key '", key, "' is missing");
    }
    skip_spaces();
    if (m_pos + 1 != m_text.size() || m_text[m_pos] != '\n')
      return fail("unexpected text after the header's dict (only spaces and a final newline "
                  "may follow it)");
    return header;
  }

private:
  Error fail(const std::string& what) const {
    return make_error("header: ", what, " (at byte ", std::to_string(m_pos), " of the header)");
  }
  void skip_spaces() {
    while (m_pos < m_text.size() && m_text[m_pos] == ' ') ++m_pos;
  }
  bool consume(char c) {
    if (m_pos >= m_text.size() || m_text[m_pos] != c) return false;
    ++m_pos;
    return true;
  }
  // At the final newline (or past it): nothing of the dict can follow.
  bool at_end() const { return m_pos + 1 >= m_text.size(); }
  bool at_digit() const {
    return m_pos < m_text.size() && m_text[m_pos] >= '0' && m_text[m_pos] <= '9';
  }

  // 'text' or "text", without escapes.
  Expected<std::string> string_literal(const char* what) {
    if (m_pos >= m_text.size() || (m_text[m_pos] != '\'' && m_text[m_pos] != '"'))
      return fail(std::string("expected ") + what + ", a quoted string");
    char quote = m_text[m_pos++];
    size_t start = m_pos;
    while (m_pos < m_text.size() && m_text[m_pos] != quote) {
      if (m_text[m_pos] == '\\') return fail("escape sequences in strings are not supported");
      if (m_text[m_pos] == '\n') break;
      ++m_pos;
    }
    if (m_pos >= m_text.size() || m_text[m_pos] != quote) return fail("unterminated string");
    return std::string(m_text.substr(start, m_pos++ - start));
  }

  Status descr(Descr& out) {
    auto text = string_literal("'descr' to be a dtype string like '<f4'");
    if (!text) return text.error();
    constexpr Descr k_all[] = {Descr::f4, Descr::f2, Descr::f8, Descr::u2,
                               Descr::v2, Descr::i4, Descr::i8, Descr::b1};
    for (Descr d : k_all) {
      if (*text == to_string(d)) {
        out = d;
        return Status::success();
      }
    }
    if (*text == "|V2") {  // numpy's spelling of np.dtype('V2'): byte order does not apply
      out = Descr::v2;
      return Status::success();
    }
    if (*text == "<b1") {  // one byte: byte order does not apply
      out = Descr::b1;
      return Status::success();
    }
    if (!text->empty() && text->front() == '>') {
      for (Descr d : k_all) {
        if (text->substr(1) == to_string(d).substr(1))
          return make_error("header: big-endian data (", quoted(*text),
                            ") is not supported; save it little-endian, e.g. with "
                            "arr.astype('<", text->substr(1), "')");
      }
    }
    return make_error("header: dtype ", quoted(*text),
                      " is not supported (expected '<f4', '<f2', '<u2', '<V2', '<f8', '<i4', "
                      "'<i8' or '|b1')");
  }

  Status fortran_order() {
    size_t start = m_pos;
    while (m_pos < m_text.size() && std::isalpha(static_cast<unsigned char>(m_text[m_pos])))
      ++m_pos;
    std::string_view word = m_text.substr(start, m_pos - start);
    if (word == "False") return Status::success();
    if (word == "True")
      return make_error("header: 'fortran_order': True (column-major data) is not supported; "
                        "save a C-order array, e.g. np.ascontiguousarray(arr)");
    m_pos = start;
    return fail("'fortran_order' must be True or False");
  }

  // A non-negative Python int: digits, no sign, no leading zeros (as Python 3 requires).
  Expected<int64_t> dim() {
    size_t start = m_pos;
    bool negative = consume('-');
    if (!at_digit()) return fail("expected a dim, a whole number");
    int64_t value = 0;
    bool too_large = false;
    size_t digits = m_pos;
    while (at_digit()) {
      int digit = m_text[m_pos++] - '0';
      if (value > (k_max_elements - digit) / 10) too_large = true;
      if (!too_large) value = value * 10 + digit;
    }
    std::string text(m_text.substr(start, m_pos - start));
    if (m_text[digits] == '0' && m_pos - digits > 1)
      return fail("dim " + text + " has leading zeros, which a Python int cannot");
    if (negative) return make_error("header: shape has a negative dim ", text);
    if (too_large)
      return make_error("header: dim ", text, " is too large (at most ",
                        std::to_string(k_max_elements), ")");
    return value;
  }

  // A Python tuple of dims: (), (n,), (n, m), (n, m,).
  Status shape(std::vector<int64_t>& out) {
    if (!consume('(')) return fail("'shape' must be a tuple like (2, 3)");
    bool comma = false;
    while (true) {
      skip_spaces();
      if (consume(')')) break;
      auto d = dim();
      if (!d) return d.error();
      if (out.size() == static_cast<size_t>(k_max_rank))
        return make_error("header: shape has more than ", std::to_string(k_max_rank),
                          " dims (ranks 0 to ", std::to_string(k_max_rank), " are supported)");
      out.push_back(*d);
      skip_spaces();
      if (consume(',')) {
        comma = true;
        continue;
      }
      if (consume(')')) break;
      return fail("expected ',' or ')' in 'shape'");
    }
    if (out.size() == 1 && !comma)
      return make_error("header: 'shape' (", std::to_string(out[0]),
                        ") is not a tuple; a 1-tuple is written (", std::to_string(out[0]),
                        ",)");
    return Status::success();  // () is a scalar: rank 0, one element
  }

  std::string_view m_text;
  size_t m_pos = 0;
};

uint32_t little_endian(std::string_view bytes) {
  uint32_t value = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    value |= uint32_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  return value;
}

}  // namespace

std::string_view to_string(Descr descr) {
  switch (descr) {
    case Descr::f4: return "<f4";
    case Descr::f2: return "<f2";
    case Descr::f8: return "<f8";
    case Descr::u2: return "<u2";
    case Descr::v2: return "<V2";
    case Descr::i4: return "<i4";
    case Descr::i8: return "<i8";
    case Descr::b1: return "|b1";
  }
  return "?";
}

int64_t item_size(Descr descr) {
  switch (descr) {
    case Descr::f4:
    case Descr::i4: return 4;
    case Descr::f8:
    case Descr::i8: return 8;
    case Descr::f2:
    case Descr::u2:
    case Descr::v2: return 2;
    case Descr::b1: return 1;
  }
  return 1;
}

int64_t Array::elements() const {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

namespace {

// The magic, the version and the header's length: where the data starts. `file_size` is the
// file's size, or k_unknown_size for a stream not yet read to its end (nothing is then past it).
constexpr int64_t k_unknown_size = -1;

Expected<int64_t> parse_preamble(std::string_view prefix, int64_t file_size) {
  int64_t known = file_size == k_unknown_size ? static_cast<int64_t>(prefix.size()) : file_size;
  std::string_view magic = prefix.substr(0, k_magic.size());
  if (magic != k_magic.substr(0, magic.size()))
    return make_error("not a .npy file (it does not start with the magic \\x93NUMPY)");
  if (prefix.size() < 8)
    return make_error("truncated: ", std::to_string(known), " bytes end before the format version");
  auto major = static_cast<unsigned char>(prefix[6]);
  auto minor = static_cast<unsigned char>(prefix[7]);
  if (minor != 0 || major < 1 || major > 3)
    return make_error("unsupported .npy format version ", std::to_string(major), ".",
                      std::to_string(minor), " (1.0, 2.0 and 3.0 are read)");
  size_t length_bytes = major == 1 ? 2 : 4;
  if (prefix.size() < 8 + length_bytes)
    return make_error("truncated: ", std::to_string(known), " bytes end before the header length");
  int64_t header_bytes = little_endian(prefix.substr(8, length_bytes));
  int64_t offset = static_cast<int64_t>(8 + length_bytes) + header_bytes;
  if (file_size != k_unknown_size && offset > file_size)
    return make_error("header length ", std::to_string(header_bytes),
                      " runs past the end of the file (", std::to_string(file_size), " bytes)");
  if (header_bytes > k_max_header_bytes)
    return make_error("header length ", std::to_string(header_bytes), " is past the limit of ",
                      std::to_string(k_max_header_bytes), " bytes");
  return offset;
}

// The header dict ending at `offset` (prefix holds it): descr, shape and the data's size.
Expected<Header> parse_dict(std::string_view prefix, int64_t offset) {
  size_t start = static_cast<unsigned char>(prefix[6]) == 1 ? 10 : 12;
  assert(offset <= static_cast<int64_t>(prefix.size()) && "the prefix must hold the header");
  std::string_view text = prefix.substr(start, static_cast<size_t>(offset) - start);
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      return make_error("header: non-ASCII byte ", hex, " at byte ", std::to_string(i),
                        " of the header");
    }
    if ((c < 0x20 && c != '\n') || c == 0x7f)
      return make_error("header: control character at byte ", std::to_string(i),
                        " of the header");
  }
  if (text.empty() || text.back() != '\n') return make_error("header: it does not end in '\\n'");
  auto header = HeaderParser(text).parse();
  if (!header) return header.error();
  header->data_offset = offset;

  int64_t elements = 1;
  for (int64_t d : header->shape) {
    if (d != 0 && elements > k_max_elements / d)
      return make_error("shape ", shape_string(header->shape), " holds more than ",
                        std::to_string(k_max_elements), " elements");
    elements *= d;
  }
  header->data_bytes = elements * item_size(header->descr);
  return header;
}

// "shape (2, 3) of '<f4' needs 24 bytes of data".
std::string data_needs(const Header& header) {
  return "shape " + shape_string(header.shape) + " of " + quoted(to_string(header.descr)) +
         " needs " + std::to_string(header.data_bytes) + " bytes of data";
}

Status check_limit(const Header& header, int64_t max_data_bytes, std::string_view why) {
  if (header.data_bytes <= max_data_bytes) return Status::success();
  return make_error(data_needs(header), ", past the limit of ", std::to_string(max_data_bytes),
                    " bytes", why.empty() ? "" : " (" + std::string(why) + ")");
}

}  // namespace

Expected<Header> parse_header(std::string_view prefix, int64_t file_size) {
  assert(static_cast<int64_t>(prefix.size()) <= file_size);
  auto offset = parse_preamble(prefix, file_size);
  if (!offset) return offset.error();
  auto header = parse_dict(prefix, *offset);
  if (!header) return header.error();
  int64_t held = file_size - *offset;
  std::string what = data_needs(*header);
  if (held < header->data_bytes)
    return make_error("data too short: ", what, ", the file holds ", std::to_string(held));
  if (held > header->data_bytes)
    return make_error(std::to_string(held - header->data_bytes), " trailing bytes: ", what,
                      ", the file holds ", std::to_string(held));
  return header;
}

Expected<Array> parse(std::string_view bytes) {
  auto header = parse_header(bytes, static_cast<int64_t>(bytes.size()));
  if (!header) return header.error();
  Array array;
  array.descr = header->descr;
  array.shape = std::move(header->shape);
  const char* data = bytes.data() + header->data_offset;
  array.data.assign(data, data + header->data_bytes);
  return array;
}

namespace {

// A pipe, FIFO, character device or socket: read as it comes, never past what its header
// declares (nor past `max_data_bytes` of data), so that an endless stream fails once it has run
// past the array it announced.
Expected<Array> read_stream(std::FILE* file, int64_t max_data_bytes, std::string_view why) {
  // Reads into `out` until it holds `want` bytes or the stream ends; false when a read fails.
  bool ended = false;
  auto fill = [&](auto& out, int64_t want) {
    constexpr int64_t k_chunk = 65536;
    while (!ended && static_cast<int64_t>(out.size()) < want) {
      size_t have = out.size();
      auto ask = static_cast<size_t>(std::min(k_chunk, want - static_cast<int64_t>(have)));
      out.resize(have + ask);  // grown as the data comes, never to what a header merely claims
      size_t got = std::fread(out.data() + have, 1, ask, file);
      out.resize(have + got);
      if (got < ask) {
        if (std::ferror(file)) return false;
        ended = true;
      }
    }
    return true;
  };
  auto read_failed = [] { return make_error("cannot read: ", std::strerror(errno)); };

  // The header. A stream that ends before its header does is a whole file of that size: parse()
  // says what it lacks.
  std::string head;
  if (!fill(head, 12)) return read_failed();
  if (ended) return parse(head);
  auto offset = parse_preamble(head, k_unknown_size);
  if (!offset) return offset.error();
  if (!fill(head, *offset)) return read_failed();
  if (ended) return parse(head);
  auto header = parse_dict(head, *offset);
  if (!header) return header.error();
  if (Status s = check_limit(*header, max_data_bytes, why); !s) return s.error();
  // The header may have been read with the data's first bytes: they start the data.
  Array array;
  array.descr = header->descr;
  array.shape = header->shape;
  array.data.assign(head.begin() + *offset, head.end());
  // One byte more than the data: does the stream end there?
  if (!fill(array.data, header->data_bytes + 1)) return read_failed();
  auto held = static_cast<int64_t>(array.data.size());
  if (held < header->data_bytes)
    return make_error("data too short: ", data_needs(*header), ", the stream holds ",
                      std::to_string(held));
  if (held > header->data_bytes)
    return make_error("the stream goes on past the ", std::to_string(header->data_bytes),
                      " bytes of data its header declares (", data_needs(*header),
                      "); is it an endless stream?");
  return array;
}

}  // namespace

Expected<Array> read_file(const std::string& path, int64_t max_data_bytes,
                          std::string_view limit_why) {
  auto failure = [&](const std::string& what) { return make_error(path, ": error: ", what); };
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return failure(std::string("cannot read: ") + std::strerror(errno));
  struct Closer {
    std::FILE* file;
    ~Closer() { std::fclose(file); }
  } closer{file};
  struct stat info {};
  if (fstat(fileno(file), &info) != 0)
    return failure(std::string("cannot read: ") + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) return failure("not a regular file");
  if (!S_ISREG(info.st_mode)) {
    auto array = read_stream(file, max_data_bytes, limit_why);
    if (!array) return failure(array.error().message);
    return array;
  }
  auto file_size = static_cast<int64_t>(info.st_size);

  // Enough for the longest header accepted; the data's size is then known and checked.
  std::string prefix(static_cast<size_t>(std::min<int64_t>(file_size, 12 + k_max_header_bytes)),
                     '\0');
  if (std::fread(prefix.data(), 1, prefix.size(), file) != prefix.size())
    return failure("cannot read: the file changed or a read failed");
  auto header = parse_header(prefix, file_size);
  if (!header) return failure(header.error().message);
  if (Status s = check_limit(*header, max_data_bytes, limit_why); !s)
    return failure(s.error().message);

  Array array;
  array.descr = header->descr;
  array.shape = std::move(header->shape);
  array.data.resize(static_cast<size_t>(header->data_bytes));
  if (std::fseek(file, static_cast<long>(header->data_offset), SEEK_SET) != 0 ||
      std::fread(array.data.data(), 1, array.data.size(), file) != array.data.size())
    return failure("cannot read: the file changed or a read failed");
  return array;
}

std::string serialize(const Array& array) {
  assert(static_cast<int64_t>(array.data.size()) == array.elements() * item_size(array.descr));
  // As numpy's _write_array_header: sorted keys, a trailing ", ", room for the first dim to grow,
  // then spaces up to the alignment and a newline.
  std::string dict = "{'descr': " + quoted(to_string(array.descr)) +
                     ", 'fortran_order': False, 'shape': " + shape_string(array.shape) + ", }";
  if (!array.shape.empty()) {
    size_t digits = std::to_string(array.shape[0]).size();
    if (digits < k_growth_digits) dict.append(k_growth_digits - digits, ' ');
  }
  auto unpadded = static_cast<int64_t>(k_magic.size() + 4 + dict.size() + 1);
  auto padding = static_cast<size_t>(k_align - unpadded % k_align);
  dict.append(padding, ' ');
  dict += '\n';
  assert(dict.size() <= 0xffff);
  std::string out(k_magic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  return out;
}

Status write_file(const std::string& path, const Array& array) {
  std::string bytes = serialize(array);
  auto cannot = [&](int error) {
    return make_error(path, ": error: cannot write: ", std::strerror(error));
  };
  auto not_regular = [&] {
    return make_error(path, ": error: cannot write: not a regular file (a FIFO, device or "
                            "socket is there; kiln writes .npy files only as regular files)");
  };
  // Something there that is neither a regular file nor a folder (which the open names).
  auto special = [&] {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
  };
  // Whatever is there and is not a regular file is refused unopened: opening a device can act
  // (a tape rewinds), a FIFO's reader would see an end. The open does not block either (a FIFO
  // put there meanwhile without a reader: ENXIO), and what it opened is checked again.
  if (special()) return not_regular();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);
  if (fd < 0) {
    int error = errno;
    return special() ? not_regular() : cannot(error);
  }
  // Once opened, a failure closes it first (an errno of 0: not a regular file).
  auto fail = [&](int error) {
    ::close(fd);
    return error ? cannot(error) : not_regular();
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(errno);
  if (!S_ISREG(st.st_mode)) return fail(0);
  if (::ftruncate(fd, 0) != 0) return fail(errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return cannot(errno);
  return Status::success();
}

}  // namespace kiln::npy
