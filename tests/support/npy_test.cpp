// The strict .npy reader on well-formed and malformed files, and the writer's round trip.
#include "support/npy.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace kiln::npy {
namespace {

// A .npy file: magic, version, the header's length in the version's width, header, data.
std::string npy_file(const std::string& header, const std::string& data = {}, int major = 1,
                     int minor = 0) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += static_cast<char>(minor);
  size_t n = header.size();
  int width = major == 1 ? 2 : 4;
  for (int i = 0; i < width; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string header(const std::string& dict) { return dict + "  \n"; }

std::string f4_header(const std::string& shape) {
  return header("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }");
}

// The error parse() gives `bytes`; fails the test when they parse.
std::string parse_error(const std::string& bytes) {
  auto array = parse(bytes);
  if (array) {
    ADD_FAILURE() << "parsed, expected an error";
    return {};
  }
  return array.error().message;
}

#define EXPECT_REFUSED(bytes, says)                                                 \
  do {                                                                              \
    std::string message = parse_error(bytes);                                       \
    EXPECT_NE(message.find(says), std::string::npos) << "message: " << message;     \
  } while (0)

TEST(NpyRead, ReadsWhatNumpyWrites) {
  std::string data(24, '\0');
  float values[6] = {1, 2, 3, 4, 5, 6};
  std::memcpy(data.data(), values, 24);
  auto array = parse(npy_file(f4_header("(2, 3)"), data));
  ASSERT_TRUE(array) << array.error().message;
  EXPECT_EQ(array->descr, Descr::f4);
  EXPECT_EQ(array->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(array->data.size(), 24u);
  float back[6];
  std::memcpy(back, array->data.data(), 24);
  EXPECT_EQ(back[5], 6.0f);
}

TEST(NpyRead, AcceptsAnyKeyOrderEitherQuoteAndNoTrailingComma) {
  auto array = parse(npy_file(
      header("{\"shape\": (3,), 'fortran_order':False,'descr':\"<f2\"}"), std::string(6, '\0')));
  ASSERT_TRUE(array) << array.error().message;
  EXPECT_EQ(array->descr, Descr::f2);
  EXPECT_EQ(array->shape, (std::vector<int64_t>{3}));
}

TEST(NpyRead, ReadsVersions2And3WithTheirFourByteLength) {
  for (int major : {2, 3}) {
    auto array = parse(npy_file(f4_header("(1, 1)"), std::string(4, '\0'), major));
    ASSERT_TRUE(array) << major << ": " << array.error().message;
    EXPECT_EQ(array->shape, (std::vector<int64_t>{1, 1}));
  }
}

TEST(NpyRead, ReadsEveryDescrAndTheVoidSpelling) {
  struct Case {
    const char* descr;
    Descr read;
    size_t size;
  };
  const Case cases[] = {{"<f4", Descr::f4, 4}, {"<f2", Descr::f2, 2}, {"<f8", Descr::f8, 8},
                        {"<u2", Descr::u2, 2}, {"<V2", Descr::v2, 2}, {"|V2", Descr::v2, 2}};
  for (const Case& c : cases) {
    std::string h = header(std::string("{'descr': '") + c.descr +
                           "', 'fortran_order': False, 'shape': (2,), }");
    auto array = parse(npy_file(h, std::string(2 * c.size, '\0')));
    ASSERT_TRUE(array) << c.descr << ": " << array.error().message;
    EXPECT_EQ(array->descr, c.read) << c.descr;
  }
}

TEST(NpyRead, ReadsAnEmptyArray) {
  auto array = parse(npy_file(f4_header("(0, 5)")));
  ASSERT_TRUE(array) << array.error().message;
  EXPECT_EQ(array->elements(), 0);
  EXPECT_TRUE(array->data.empty());
}

TEST(NpyRead, RefusesABadMagic) {
  EXPECT_REFUSED("PK\x03\x04 not a numpy file at all", "not a .npy file");
  EXPECT_REFUSED("\x93NUMPZ\x01\x00", "not a .npy file");
}

TEST(NpyRead, RefusesATruncatedFile) {
  std::string whole = npy_file(f4_header("(2,)"), std::string(8, '\0'));
  EXPECT_REFUSED("", "truncated");
  EXPECT_REFUSED(whole.substr(0, 4), "truncated");
  EXPECT_REFUSED(whole.substr(0, 7), "before the format version");
  EXPECT_REFUSED(whole.substr(0, 9), "before the header length");
  EXPECT_REFUSED(whole.substr(0, 30), "runs past the end of the file");
  EXPECT_REFUSED(whole.substr(0, whole.size() - 1), "data too short");
}

TEST(NpyRead, RefusesAnUnknownVersion) {
  EXPECT_REFUSED(npy_file(f4_header("(1,)"), std::string(4, '\0'), 4),
                 "unsupported .npy format version 4.0");
  EXPECT_REFUSED(npy_file(f4_header("(1,)"), std::string(4, '\0'), 1, 1), "version 1.1");
  EXPECT_REFUSED(npy_file(f4_header("(1,)"), std::string(4, '\0'), 0), "version 0.0");
}

TEST(NpyRead, RefusesAHeaderLengthPastTheEnd) {
  std::string bytes = npy_file(f4_header("(1,)"), std::string(4, '\0'));
  bytes[8] = '\xff';
  bytes[9] = '\x7f';
  EXPECT_REFUSED(bytes, "header length 32767 runs past the end of the file");
  std::string v2 = npy_file(f4_header("(1,)"), std::string(4, '\0'), 2);
  v2[11] = '\x7f';
  EXPECT_REFUSED(v2, "runs past the end of the file");
}

TEST(NpyRead, RefusesAHeaderPastTheLimitEvenWhenTheFileHoldsIt) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
  std::string padded = dict + std::string(static_cast<size_t>(k_max_header_bytes), ' ') + "\n";
  EXPECT_REFUSED(npy_file(padded, std::string(4, '\0'), 2), "is past the limit of 10000 bytes");
}

TEST(NpyRead, RefusesAMissingKey) {
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4', 'shape': (1,), }"), std::string(4, '\0')),
                 "the key 'fortran_order' is missing");
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4', 'fortran_order': False}")),
                 "the key 'shape' is missing");
}

TEST(NpyRead, RefusesAnExtraOrRepeatedKey) {
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                                 "'order': 'C'}"),
                          std::string(4, '\0')),
                 "unexpected key 'order'");
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                                 "'shape': (1,)}"),
                          std::string(4, '\0')),
                 "key 'descr' appears twice");
}

TEST(NpyRead, RefusesAnUnknownDescr) {
  for (const char* descr : {"<i2", "<u4", "<f16", "f4", "=f4", "<c8", "|u1", "", "<V4", "|i8"}) {
    std::string h = header(std::string("{'descr': '") + descr +
                           "', 'fortran_order': False, 'shape': (1,), }");
    EXPECT_REFUSED(npy_file(h, std::string(4, '\0')), "is not supported (expected '<f4'");
  }
  // A structured dtype's descr is a list, not a string.
  EXPECT_REFUSED(npy_file(header("{'descr': [('a', '<f4')], 'fortran_order': False, "
                                 "'shape': (1,), }"),
                          std::string(4, '\0')),
                 "a dtype string");
}

TEST(NpyRead, RefusesBigEndianDataByName) {
  std::string h = header("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }");
  EXPECT_REFUSED(npy_file(h, std::string(4, '\0')),
                 "big-endian data ('>f4') is not supported; save it little-endian, e.g. with "
                 "arr.astype('<f4')");
}

TEST(NpyRead, RefusesFortranOrder) {
  std::string h = header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }");
  EXPECT_REFUSED(npy_file(h, std::string(16, '\0')), "'fortran_order': True");
  std::string other = header("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 2), }");
  EXPECT_REFUSED(npy_file(other, std::string(16, '\0')), "must be True or False");
}

TEST(NpyRead, RefusesNegativeAndHugeDims) {
  EXPECT_REFUSED(npy_file(f4_header("(-1, 2)")), "negative dim -1");
  EXPECT_REFUSED(npy_file(f4_header("(99999999999999999999999999,)")), "is too large");
  EXPECT_REFUSED(npy_file(f4_header("(3, 007)")), "leading zeros");
  EXPECT_REFUSED(npy_file(f4_header("(3, 2.0)")), "expected ',' or ')'");
  EXPECT_REFUSED(npy_file(f4_header("(3, x)")), "expected a dim");
}

TEST(NpyRead, RefusesAnOverflowingElementCount) {
  // Each dim alone is allowed; their product is not, and nothing is allocated for it.
  EXPECT_REFUSED(npy_file(f4_header("(1099511627776, 1099511627776)")),
                 "holds more than 72057594037927936 elements");
  EXPECT_REFUSED(npy_file(f4_header("(65536, 65536, 65536, 65536)")), "holds more than");
}

TEST(NpyRead, ChecksAHugeButCountableShapeAgainstTheFileBeforeAllocating) {
  EXPECT_REFUSED(npy_file(f4_header("(268435456, 268435456)"), std::string(4, '\0')),
                 "data too short: shape (268435456, 268435456) of '<f4' needs "
                 "288230376151711744 bytes of data, the file holds 4");
}

// numpy writes a 0-d array (np.save("s.npy", np.float32(2.5))) with shape (): a scalar, one
// element, rank 0.
TEST(NpyRead, ReadsAScalarAndWritesItBack) {
  std::string data(4, '\0');
  float value = 2.5f;
  std::memcpy(data.data(), &value, 4);
  auto array = parse(npy_file(f4_header("()"), data));
  ASSERT_TRUE(array) << array.error().message;
  EXPECT_TRUE(array->shape.empty());
  EXPECT_EQ(array->elements(), 1);
  EXPECT_EQ(shape_string(array->shape), "()");
  std::string bytes = serialize(*array);
  EXPECT_NE(bytes.find("'shape': ()"), std::string::npos) << bytes;
  auto back = parse(bytes);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->shape.empty());
  EXPECT_EQ(back->data, array->data);
  EXPECT_REFUSED(npy_file(f4_header("()")), "data too short");
}

TEST(NpyRead, RefusesRanksAboveSix) {
  EXPECT_REFUSED(npy_file(f4_header("(1, 1, 1, 1, 1, 1, 1)"), std::string(4, '\0')),
                 "more than 6 dims");
}

TEST(NpyRead, RefusesAOneTupleWithoutItsComma) {
  EXPECT_REFUSED(npy_file(f4_header("(3)"), std::string(12, '\0')),
                 "'shape' (3) is not a tuple; a 1-tuple is written (3,)");
  EXPECT_REFUSED(npy_file(f4_header("[3]"), std::string(12, '\0')), "must be a tuple");
}

TEST(NpyRead, RefusesDataTooShortOrTooLong) {
  EXPECT_REFUSED(npy_file(f4_header("(2, 3)"), std::string(23, '\0')),
                 "data too short: shape (2, 3) of '<f4' needs 24 bytes of data, the file "
                 "holds 23");
  EXPECT_REFUSED(npy_file(f4_header("(2, 3)"), std::string(25, '\0')), "1 trailing bytes");
}

TEST(NpyRead, RefusesNonAsciiAndControlCharacters) {
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                                 "'\xc3\xa9': 1}"),
                          std::string(4, '\0')),
                 "non-ASCII byte 0xc3");
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4',\t'fortran_order': False, 'shape': (1,)}"),
                          std::string(4, '\0')),
                 "control character");
}

TEST(NpyRead, RefusesAnUnterminatedDictOrString) {
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)"),
                          std::string(4, '\0')),
                 "the dict is not closed with '}'");
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "),
                          std::string(4, '\0')),
                 "the dict is not closed with '}'");
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4"), std::string(4, '\0')), "unterminated string");
  EXPECT_REFUSED(npy_file(header("'descr'"), std::string(4, '\0')), "is not a dict");
}

TEST(NpyRead, RefusesAHeaderWithoutItsNewlineOrWithTextAfterTheDict) {
  EXPECT_REFUSED(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }   ",
                          std::string(4, '\0')),
                 "does not end in '\\n'");
  EXPECT_REFUSED(npy_file(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x"),
                          std::string(4, '\0')),
                 "unexpected text after the header's dict");
  EXPECT_REFUSED(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\n\n",
                          std::string(4, '\0')),
                 "unexpected text after the header's dict");
  EXPECT_REFUSED(npy_file(header("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}"),
                          std::string(4, '\0')),
                 "escape sequences");
}

Array sample(Descr descr, std::vector<int64_t> shape) {
  Array array;
  array.descr = descr;
  array.shape = std::move(shape);
  array.data.resize(static_cast<size_t>(array.elements() * item_size(descr)));
  for (size_t i = 0; i < array.data.size(); ++i)
    array.data[i] = static_cast<unsigned char>(i * 37 + 11);
  return array;
}

TEST(NpyWrite, RoundTripsEveryDescr) {
  for (Descr descr : {Descr::f4, Descr::f2, Descr::f8, Descr::u2, Descr::v2}) {
    for (const auto& shape : {std::vector<int64_t>{7}, std::vector<int64_t>{2, 3, 4, 5},
                              std::vector<int64_t>{0, 3}}) {
      Array array = sample(descr, shape);
      auto back = parse(serialize(array));
      ASSERT_TRUE(back) << to_string(descr) << ": " << back.error().message;
      EXPECT_EQ(back->descr, descr);
      EXPECT_EQ(back->shape, array.shape);
      EXPECT_EQ(back->data, array.data) << to_string(descr);
    }
  }
}

TEST(NpyWrite, WritesAVersion1HeaderAlignedTo64BytesAsNumpyDoes) {
  std::string bytes = serialize(sample(Descr::f4, {2, 3}));
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t header_bytes = static_cast<unsigned char>(bytes[8]) |
                        static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
  EXPECT_EQ((10 + header_bytes) % 64, 0u);
  EXPECT_EQ(bytes.size(), 10 + header_bytes + 24);
  std::string text = bytes.substr(10, header_bytes);
  EXPECT_EQ(text.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u)
      << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(serialize(sample(Descr::f4, {5})).find("'shape': (5,), }"), 51u);
}

class NpyFile : public ::testing::Test {
protected:
  void SetUp() override {
    char name[] = "/tmp/kiln-npy-test-XXXXXX";
    m_dir = mkdtemp(name);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }
  std::string m_dir;
};

TEST_F(NpyFile, WritesAndReadsAFile) {
  Array array = sample(Descr::u2, {4, 2});
  std::string path = m_dir + "/a.npy";
  ASSERT_TRUE(write_file(path, array));
  auto back = read_file(path, k_max_elements);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->data, array.data);
  EXPECT_EQ(back->shape, array.shape);
}

TEST_F(NpyFile, NamesThePathInEveryError) {
  auto missing = read_file(m_dir + "/missing.npy", k_max_elements);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message,
            m_dir + "/missing.npy: error: cannot read: No such file or directory");
  auto directory = read_file(m_dir, k_max_elements);
  ASSERT_FALSE(directory);
  EXPECT_EQ(directory.error().message, m_dir + ": error: not a regular file");
  std::string path = m_dir + "/short.npy";
  std::string whole = serialize(sample(Descr::f4, {3}));
  std::ofstream(path, std::ios::binary) << whole.substr(0, whole.size() - 1);
  auto short_file = read_file(path, k_max_elements);
  ASSERT_FALSE(short_file);
  EXPECT_EQ(short_file.error().message.rfind(path + ": error: data too short", 0), 0u)
      << short_file.error().message;
  Status unwritable = write_file(m_dir + "/no/such/dir/a.npy", sample(Descr::f4, {1}));
  ASSERT_FALSE(unwritable);
  EXPECT_EQ(unwritable.error().message.rfind(m_dir + "/no/such/dir/a.npy: error: cannot write", 0),
            0u);
}

// Streams (a pipe as process substitution gives one, /dev/fd/N; a FIFO; a device) are read as
// far as their header says, so that they work as files do and an endless one fails.
class NpyStream : public NpyFile {
protected:
  // Writes `bytes` to a fresh pipe from a thread, then `endless` (when true) junk until the
  // reader closes it; read_file reads the pipe as /dev/fd/N.
  Expected<Array> read_pipe(const std::string& bytes, bool endless, int64_t limit) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    std::signal(SIGPIPE, SIG_IGN);  // the writer learns of a closed pipe from write()
    std::thread writer([&] {
      auto put = [&](const char* data, size_t size) {
        while (size > 0) {
          ssize_t n = ::write(fds[1], data, size);
          if (n <= 0) return false;
          data += n;
          size -= static_cast<size_t>(n);
        }
        return true;
      };
      bool open = put(bytes.data(), bytes.size());
      std::string junk(4096, 'j');
      while (open && endless) open = put(junk.data(), junk.size());
      ::close(fds[1]);
    });
    auto array = read_file("/dev/fd/" + std::to_string(fds[0]), limit);
    ::close(fds[0]);  // an endless writer stops here
    writer.join();
    return array;
  }
};

TEST_F(NpyStream, APipeReadsAsTheFileWould) {
  Array array = sample(Descr::f2, {3, 5});
  auto back = read_pipe(serialize(array), false, k_max_elements);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->descr, Descr::f2);
  EXPECT_EQ(back->shape, array.shape);
  EXPECT_EQ(back->data, array.data);
}

TEST_F(NpyStream, AFifoReadsAsTheFileWould) {
  std::string fifo = m_dir + "/x.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Array array = sample(Descr::f4, {2, 4});
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << serialize(array); });
  auto back = read_file(fifo, k_max_elements);
  writer.join();
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->data, array.data);
}

TEST_F(NpyStream, AnEndlessStreamFailsOnceItRunsPastItsData) {
  auto endless = read_pipe(serialize(sample(Descr::f4, {2, 3})), true, k_max_elements);
  ASSERT_FALSE(endless);
  EXPECT_NE(endless.error().message.find(
                ": error: the stream goes on past the 24 bytes of data its header declares "
                "(shape (2, 3) of '<f4' needs 24 bytes of data); is it an endless stream?"),
            std::string::npos)
      << endless.error().message;
  // Garbage fails at its first bytes.
  auto zeros = read_file("/dev/zero", k_max_elements);
  ASSERT_FALSE(zeros);
  EXPECT_EQ(zeros.error().message,
            "/dev/zero: error: not a .npy file (it does not start with the magic \\x93NUMPY)");
}

TEST_F(NpyStream, AShortStreamSaysWhatItLacks) {
  std::string whole = serialize(sample(Descr::f4, {4}));
  auto short_data = read_pipe(whole.substr(0, whole.size() - 3), false, k_max_elements);
  ASSERT_FALSE(short_data);
  EXPECT_NE(short_data.error().message.find(
                "error: data too short: shape (4,) of '<f4' needs 16 bytes of data, the stream "
                "holds 13"),
            std::string::npos)
      << short_data.error().message;
  auto short_header = read_pipe(whole.substr(0, 20), false, k_max_elements);
  ASSERT_FALSE(short_header);
  EXPECT_NE(short_header.error().message.find("runs past the end of the file (20 bytes)"),
            std::string::npos)
      << short_header.error().message;
  auto empty = read_pipe("", false, k_max_elements);
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message.find("truncated: 0 bytes"), std::string::npos)
      << empty.error().message;
}

// The limit holds for files and streams alike, before the data is read.
TEST_F(NpyStream, DataPastTheLimitIsRefusedBeforeItIsRead) {
  std::string path = m_dir + "/big.npy";
  ASSERT_TRUE(write_file(path, sample(Descr::f4, {8, 4})));
  auto file = read_file(path, 127, "input x holds 31 elements");
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().message,
            path + ": error: shape (8, 4) of '<f4' needs 128 bytes of data, past the limit of "
                   "127 bytes (input x holds 31 elements)");
  EXPECT_TRUE(read_file(path, 128)) << "the limit itself is allowed";
  // A stream's header alone decides: the endless data behind it is never read.
  auto stream = read_pipe(serialize(sample(Descr::f4, {8, 4})), true, 127);
  ASSERT_FALSE(stream);
  EXPECT_NE(stream.error().message.find("needs 128 bytes of data, past the limit of 127 bytes"),
            std::string::npos)
      << stream.error().message;
}

}  // namespace
}  // namespace kiln::npy
