// NumPy .npy files, read strictly and written the way numpy.save writes them.
//
// The format (numpy/lib/format.py): the magic "\x93NUMPY", a major and a minor version byte, the
// header length (little-endian uint16 in version 1.0, uint32 in 2.0 and 3.0), then the header: a
// Python dict literal with exactly the keys 'descr', 'fortran_order' and 'shape' (any order,
// trailing comma allowed), padded with spaces and ending in '\n'; then the elements in C order.
//
// What is read, and nothing else:
// - versions 1.0, 2.0 and 3.0, with an ASCII header of at most k_max_header_bytes;
// - descr '<f4', '<f2', '<f8', '<u2', '<V2' (and '|V2', numpy's own spelling of a 2-byte void,
//   read as '<V2': ml_dtypes' bfloat16 saves as '<V2'), '<i4', '<i8' and '|b1' (bool, one byte);
//   big-endian data is refused by name;
// - 'fortran_order': False only;
// - shape a tuple of 0 (a scalar) to k_max_rank non-negative ints (a 1-tuple needs its comma, as in Python);
// - exactly elements * item size bytes of data after the header.
// The element count is checked for overflow, and against the file's size before any buffer of
// that size is allocated (a stream's buffer grows only as its data arrives).
#pragma once

#include "support/expected.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::npy {

enum class Descr : uint8_t {
  f4,  // '<f4': float32
  f2,  // '<f2': float16
  f8,  // '<f8': float64
  u2,  // '<u2': uint16 (kiln's bf16 bits)
  v2,  // '<V2': 2 raw bytes (bf16 as ml_dtypes saves it)
  i4,  // '<i4': int32
  i8,  // '<i8': int64
  b1,  // '|b1': bool, one byte
};

// "<f4", "<f2", "<f8", "<u2", "<V2", "<i4", "<i8", "|b1".
std::string_view to_string(Descr descr);
// Bytes per element: 4, 2, 8, 2, 2, 4, 8, 1.
int64_t item_size(Descr descr);

inline constexpr int k_max_rank = 6;
// numpy's own reader refuses longer headers by default (max_header_size=10000).
inline constexpr int64_t k_max_header_bytes = 10000;
// No shape may hold more elements than this: item size times it stays far below 2^63.
inline constexpr int64_t k_max_elements = int64_t{1} << 56;
// The largest item size read ('<f8').
inline constexpr int64_t k_max_item_size = 8;

struct Array {
  Descr descr = Descr::f4;
  std::vector<int64_t> shape;       // C order
  std::vector<unsigned char> data;  // elements, little-endian, elements() * item_size(descr)

  int64_t elements() const;
};

// "(2, 3)", "(5,)": the shape as numpy prints it.
std::string shape_string(const std::vector<int64_t>& shape);

// The header of a .npy file: what its data is and where the data starts.
struct Header {
  Descr descr = Descr::f4;
  std::vector<int64_t> shape;
  int64_t data_offset = 0;  // bytes of magic, version, length and header
  int64_t data_bytes = 0;   // elements * item size
};

// Parses the header at the start of `prefix`, a file of `file_size` bytes in all (prefix may be
// shorter: a prefix that ends inside the header reads as a truncated file). Checks the data's
// size against the file's: too short, or trailing bytes, is an error. Errors say what is wrong
// ("header length 300 runs past the end of the file (64 bytes)"), without a file name.
Expected<Header> parse_header(std::string_view prefix, int64_t file_size);

// A whole .npy file held in memory; errors as parse_header's.
Expected<Array> parse(std::string_view bytes);

// Reads a .npy file holding at most `max_data_bytes` bytes of data. A regular file's header is
// checked against its size before the data is read. Anything else but a directory (a pipe, a
// FIFO, process substitution's /dev/fd/N, a character device) is read as a stream, as far as its
// header says and one byte more: garbage fails at its first bytes, and a stream that goes on past
// the data its header declares fails there instead of being read to its end. Errors are
// "PATH: error: ..." (missing or unreadable file, anything parse_header refuses, data past
// `max_data_bytes`: "shape (4096, 32) of '<f4' needs 524288 bytes of data, past the limit of
// 1024 bytes (LIMIT_WHY)"). Opening a FIFO waits for a writer, as reading one always does. The
// default limit is the format's own; a caller that reads streams it does not trust (a header
// may claim any size) gives the most it can use.
Expected<Array> read_file(const std::string& path,
                          int64_t max_data_bytes = k_max_elements * k_max_item_size,
                          std::string_view limit_why = {});

// The bytes numpy.save writes for `array` (version 1.0, header padded with spaces to a multiple
// of 64 bytes). `array.data` must hold elements() * item size bytes (asserted).
std::string serialize(const Array& array);

// Writes serialize(array) to `path`, a regular file, replacing it; errors are "PATH: error: ..."
// (the directory is missing or not writable, the disk is full, a FIFO, device or socket is there:
// refused without waiting for a reader and before a byte is written).
Status write_file(const std::string& path, const Array& array);

}  // namespace kiln::npy
