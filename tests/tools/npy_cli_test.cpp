// `--input NAME=PATH.npy`, `--save DIR` and `--save-reference DIR` of `kiln run` and
// `kiln audit`: outputs written in their dtypes, given inputs used exactly, dims taken from the
// files, and every bad input a usage error that names the file and the input.
#include "run_cli.h"
#include "support/npy.h"

#include <nlohmann/json.hpp>
#include <zip.h>

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>
#include <utility>

namespace kiln::testing::npy_cli_test {
namespace {

using nlohmann::json;

// One input and one output of each dtype.
const std::string k_graph = R"(graph mixed {
  input x: f32[4, 8]
  input w: f32[8, 6]
  input r: f16[4, 6]
  input g: bf16[4, 6]
  y = relu(matmul(x, w))
  h = add(cast(y, to=f16), r)
  b = add(cast(y, to=bf16), g)
  output y
  output h
  output b
}
)";

const std::string k_symbolic = R"(graph small {
  dim B: 1..20
  input x: f32[B, 32]
  input w: f32[32, 16]
  y = relu(matmul(x, w))
  output y
}
)";

npy::Array filled(npy::Descr descr, std::vector<int64_t> shape, float value) {
  npy::Array array;
  array.descr = descr;
  array.shape = std::move(shape);
  array.data.resize(static_cast<size_t>(array.elements() * npy::item_size(descr)));
  for (int64_t i = 0; i < array.elements(); ++i) {
    if (descr == npy::Descr::f4) {
      std::memcpy(array.data.data() + 4 * i, &value, 4);
      continue;
    }
    // 16-bit formats: value must be exact in bf16 (the top half of its f32 bits) and in f16.
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    auto half = static_cast<uint16_t>(bits >> 16);
    if (descr == npy::Descr::f2) half = value == 0.25f ? 0x3400 : 0x0000;
    std::memcpy(array.data.data() + 2 * i, &half, 2);
  }
  return array;
}

class NpyCli : public ::testing::Test {
protected:
  void SetUp() override {
    char name[] = "/tmp/kiln-npy-cli-XXXXXX";
    m_dir = mkdtemp(name);
    m_graph = write_text("mixed.kg", k_graph);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }

  std::string write_text(const std::string& name, const std::string& text) {
    std::string path = m_dir + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string write_npy(const std::string& name, const npy::Array& array) {
    std::string path = m_dir + "/" + name;
    EXPECT_TRUE(npy::write_file(path, array));
    return path;
  }
  npy::Array read_npy(const std::string& path) {
    auto array = npy::read_file(path, npy::k_max_elements);
    EXPECT_TRUE(array) << array.error().message;
    return array ? std::move(*array) : npy::Array{};
  }
  // Every input of the mixed graph from a file.
  std::vector<std::string> all_inputs() {
    return {"--input", "x=" + write_npy("x.npy", filled(npy::Descr::f4, {4, 8}, 1.0f)),
            "--input", "w=" + write_npy("w.npy", filled(npy::Descr::f4, {8, 6}, 0.5f)),
            "--input", "r=" + write_npy("r.npy", filled(npy::Descr::f2, {4, 6}, 0.25f)),
            "--input", "g=" + write_npy("g.npy", filled(npy::Descr::u2, {4, 6}, 0.5f))};
  }
  CliResult run(std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", m_graph, "--emulate"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kiln(args);
  }

  std::string m_dir, m_graph;
};

float f32_at(const npy::Array& array, size_t i) {
  float value;
  std::memcpy(&value, array.data.data() + 4 * i, 4);
  return value;
}

uint16_t u16_at(const npy::Array& array, size_t i) {
  uint16_t value;
  std::memcpy(&value, array.data.data() + 2 * i, 2);
  return value;
}

double f64_at(const npy::Array& array, size_t i) {
  double value;
  std::memcpy(&value, array.data.data() + 8 * i, 8);
  return value;
}

TEST_F(NpyCli, RunSavesEachOutputInItsDtypeAndTheReferenceAsF8) {
  std::vector<std::string> args = all_inputs();
  args.insert(args.end(), {"--save", m_dir + "/out", "--save-reference", m_dir + "/ref", "--json"});
  CliResult r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json report = json::parse(r.out);
  EXPECT_EQ(report["inputs"]["x"], m_dir + "/x.npy");
  EXPECT_EQ(report["saved"].size(), 6u);

  // x = 1, w = 0.5: y = relu(8 * 0.5) = 4 exactly; h = 4 + 0.25 in f16; b = 4 + 0.5 in bf16.
  npy::Array y = read_npy(m_dir + "/out/y.npy");
  EXPECT_EQ(y.descr, npy::Descr::f4);
  EXPECT_EQ(y.shape, (std::vector<int64_t>{4, 6}));
  for (size_t i = 0; i < 24; ++i) ASSERT_EQ(f32_at(y, i), 4.0f) << i;
  npy::Array h = read_npy(m_dir + "/out/h.npy");
  EXPECT_EQ(h.descr, npy::Descr::f2);
  EXPECT_EQ(h.shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(u16_at(h, 0), 0x4440);  // 4.25 in f16
  npy::Array b = read_npy(m_dir + "/out/b.npy");
  EXPECT_EQ(b.descr, npy::Descr::u2);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(u16_at(b, 23), 0x4090);  // 4.5 in bf16
  for (const char* name : {"y", "h", "b"}) {
    npy::Array ref = read_npy(m_dir + "/ref/" + std::string(name) + ".npy");
    EXPECT_EQ(ref.descr, npy::Descr::f8) << name;
    EXPECT_EQ(ref.shape, (std::vector<int64_t>{4, 6})) << name;
  }
  EXPECT_EQ(f64_at(read_npy(m_dir + "/ref/h.npy"), 5), 4.25);
}

// state_dict names (dot-joined) as input and output names: --input NAME=PATH, --save NAME.npy.
TEST_F(NpyCli, DottedNamesAreInputsAndOutputsAsWritten) {
  std::string graph = write_text("dotted.kg", R"(graph tiny.model {
  input model.layers.0.weight: f32[8, 6]
  input x: f32[4, 8]
  model.out = relu(matmul(x, model.layers.0.weight))
  output model.out
}
)");
  std::string w = write_npy("w.npy", filled(npy::Descr::f4, {8, 6}, 0.5f));
  std::string x = write_npy("x.npy", filled(npy::Descr::f4, {4, 8}, 1.0f));
  CliResult r = run_kiln({"run", graph, "--emulate", "--input", "model.layers.0.weight=" + w,
                          "--input", "x=" + x, "--save", m_dir + "/out", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json report = json::parse(r.out);
  EXPECT_EQ(report["inputs"]["model.layers.0.weight"], w);
  EXPECT_EQ(report["outputs"][0]["name"], "model.out");
  npy::Array y = read_npy(m_dir + "/out/model.out.npy");
  ASSERT_EQ(y.shape, (std::vector<int64_t>{4, 6}));
  for (size_t i = 0; i < 24; ++i) ASSERT_EQ(f32_at(y, i), 4.0f) << i;
}

// --inputs DIR: every input from DIR/NAME.npy, as --input one by one would give them.
TEST_F(NpyCli, InputsFromADirectoryReadEveryInputByName) {
  std::string dir = m_dir + "/weights";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(npy::write_file(dir + "/x.npy", filled(npy::Descr::f4, {4, 8}, 1.0f)));
  ASSERT_TRUE(npy::write_file(dir + "/w.npy", filled(npy::Descr::f4, {8, 6}, 0.5f)));
  ASSERT_TRUE(npy::write_file(dir + "/r.npy", filled(npy::Descr::f2, {4, 6}, 0.25f)));
  ASSERT_TRUE(npy::write_file(dir + "/g.npy", filled(npy::Descr::u2, {4, 6}, 0.5f)));
  CliResult r = run({"--inputs", dir, "--save", m_dir + "/out", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  json report = json::parse(r.out);
  EXPECT_EQ(report["inputs"]["w"], dir + "/w.npy");
  npy::Array y = read_npy(m_dir + "/out/y.npy");
  for (size_t i = 0; i < 24; ++i) ASSERT_EQ(f32_at(y, i), 4.0f) << i;
  std::vector<std::string> one_by_one = all_inputs();
  one_by_one.insert(one_by_one.end(), {"--save", m_dir + "/each"});
  ASSERT_EQ(run(one_by_one).exit_code, 0);
  for (const char* name : {"y", "h", "b"})
    EXPECT_EQ(read_npy(m_dir + "/out/" + std::string(name) + ".npy").data,
              read_npy(m_dir + "/each/" + std::string(name) + ".npy").data)
        << name;

  // A file that names no input is read by nobody and said so.
  ASSERT_TRUE(
      npy::write_file(dir + "/lm_head.weight.npy", filled(npy::Descr::f4, {2, 2}, 1.0f)));
  CliResult extra = run({"--inputs", dir});
  EXPECT_EQ(extra.exit_code, 0) << extra.err;
  EXPECT_NE(extra.err.find("1 file(s) name no input of graph 'mixed' and are not read: "
                           "lm_head.weight.npy"),
            std::string::npos)
      << extra.err;
  // An input given twice, a missing file, and a path that is not a directory: usage errors.
  CliResult twice = run({"--inputs", dir, "--input", "x=" + dir + "/x.npy"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("--input and --inputs " + dir + " both give x"), std::string::npos)
      << twice.err;
  std::filesystem::remove(dir + "/r.npy");
  std::filesystem::remove(dir + "/g.npy");
  CliResult missing = run({"--inputs", dir});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("has no file for input(s) r, g"), std::string::npos) << missing.err;
  CliResult file = run({"--inputs", dir + "/x.npy"});
  EXPECT_EQ(file.exit_code, 2);
  EXPECT_NE(file.err.find("not a readable .npz (ZIP) archive"), std::string::npos) << file.err;
  CliResult none = run({"--inputs", m_dir + "/weights.npz"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("not a directory"), std::string::npos) << none.err;
}

// Writes a ZIP archive of `members` (entry name, bytes) as numpy.savez (stored) or
// numpy.savez_compressed (deflated) would.
void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members,
               bool deflate) {
  int code = 0;
  zip_t* zip = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  ASSERT_NE(zip, nullptr) << code;
  for (const auto& [name, bytes] : members) {
    zip_source_t* source = zip_source_buffer(zip, bytes.data(), bytes.size(), 0);
    ASSERT_NE(source, nullptr);
    zip_int64_t index = zip_file_add(zip, name.c_str(), source, ZIP_FL_OVERWRITE);
    ASSERT_GE(index, 0) << zip_strerror(zip);
    zip_set_file_compression(zip, static_cast<zip_uint64_t>(index),
                             deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0);
  }
  ASSERT_EQ(zip_close(zip), 0);
}

// --inputs FILE.npz: every input from the archive's member NAME.npy, stored or deflated, as the
// same files one by one give them; a missing member, an extra one, an oversized one and a file
// that is no archive.
TEST_F(NpyCli, InputsFromAnNpzArchiveReadEveryInputByName) {
  std::vector<std::pair<std::string, std::string>> members = {
      {"x.npy", npy::serialize(filled(npy::Descr::f4, {4, 8}, 1.0f))},
      {"w.npy", npy::serialize(filled(npy::Descr::f4, {8, 6}, 0.5f))},
      {"r.npy", npy::serialize(filled(npy::Descr::f2, {4, 6}, 0.25f))},
      {"g", npy::serialize(filled(npy::Descr::u2, {4, 6}, 0.5f))}};
  std::vector<std::string> one_by_one = all_inputs();
  one_by_one.insert(one_by_one.end(), {"--save", m_dir + "/each"});
  ASSERT_EQ(run(one_by_one).exit_code, 0);
  for (bool deflate : {false, true}) {
    std::string archive = m_dir + (deflate ? "/deflated.npz" : "/stored.npz");
    write_zip(archive, members, deflate);
    std::string out = m_dir + (deflate ? "/deflated" : "/stored");
    CliResult r = run({"--inputs", archive, "--save", out, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    json report = json::parse(r.out);
    EXPECT_EQ(report["inputs"]["w"], archive + ":w.npy");
    EXPECT_EQ(report["inputs"]["g"], archive + ":g");
    for (const char* name : {"y", "h", "b"})
      EXPECT_EQ(read_npy(out + "/" + std::string(name) + ".npy").data,
                read_npy(m_dir + "/each/" + std::string(name) + ".npy").data)
          << name << (deflate ? " deflated" : " stored");
  }
  std::vector<std::pair<std::string, std::string>> more = members;
  more.push_back({"lm_head.weight.npy", npy::serialize(filled(npy::Descr::f4, {2, 2}, 1.0f))});
  write_zip(m_dir + "/more.npz", more, false);
  CliResult extra = run({"--inputs", m_dir + "/more.npz"});
  EXPECT_EQ(extra.exit_code, 0) << extra.err;
  EXPECT_NE(extra.err.find("1 member(s) name no input of graph 'mixed' and are not read: "
                           "lm_head.weight.npy"),
            std::string::npos)
      << extra.err;
  std::vector<std::pair<std::string, std::string>> fewer(members.begin(), members.begin() + 2);
  write_zip(m_dir + "/fewer.npz", fewer, false);
  CliResult missing = run({"--inputs", m_dir + "/fewer.npz"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("has no member for input(s) r, g"), std::string::npos) << missing.err;
  // A member far larger than its input can be is refused before it is read.
  std::vector<std::pair<std::string, std::string>> big = members;
  big[0].second = npy::serialize(filled(npy::Descr::f4, {4096, 8}, 1.0f));
  write_zip(m_dir + "/big.npz", big, true);
  CliResult oversized = run({"--inputs", m_dir + "/big.npz"});
  EXPECT_EQ(oversized.exit_code, 2);
  EXPECT_NE(oversized.err.find(m_dir + "/big.npz:x.npy: error: 131200 bytes, past the 256 bytes "
                               "of data the array may hold (--input x, f32[4, 8], holds 32 "
                               "elements)"),
            std::string::npos)
      << oversized.err;
  // A member whose bytes do not match its CRC is named as such (it read as a size mismatch).
  {
    std::ifstream in(m_dir + "/stored.npz", std::ios::binary);
    std::string zip((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t at = zip.find(members[1].second);
    ASSERT_NE(at, std::string::npos);
    zip[at + members[1].second.size() - 1] ^= 0x01;  // w's last value, past its header
    std::ofstream(m_dir + "/crc.npz", std::ios::binary) << zip;
  }
  CliResult crc = run({"--inputs", m_dir + "/crc.npz"});
  EXPECT_EQ(crc.exit_code, 2);
  EXPECT_NE(crc.err.find(m_dir + "/crc.npz:w.npy: error: cannot read: CRC error"),
            std::string::npos)
      << crc.err;
  CliResult both = run({"--inputs", m_dir + "/stored.npz", "--input", "x=" + m_dir + "/x.npy"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--input and --inputs " + m_dir + "/stored.npz both give x"),
            std::string::npos)
      << both.err;
}

// Integer and bool inputs and outputs through .npy files ('<i8', '<i4', '|b1'), on the CPU target:
// token ids into an embedding, a padding mask into where; an id outside the table refused by
// name, position, id and V; --repeat's run count and median time in the report.
TEST_F(NpyCli, IntegerAndBoolTensorsGoInAndOutAsNpy) {
  std::string fixed = write_text("ids.kg", R"(graph ids {
  input ids: i64[2, 3]
  input keep: bool[2, 3]
  input emb: f32[5, 4]
  x = embedding(emb, ids)
  m = where(keep, 0.0, -inf)
  n = cast(add(ids, 1), to=i32)
  k = logical_not(keep)
  output x, m, n, k
}
)");
  std::string dir = m_dir + "/in";
  std::filesystem::create_directories(dir);
  npy::Array ids{npy::Descr::i8, {2, 3}, std::vector<unsigned char>(48)};
  const int64_t id_values[] = {0, 4, 2, 1, 3, 4};
  std::memcpy(ids.data.data(), id_values, sizeof id_values);
  npy::Array keep{npy::Descr::b1, {2, 3}, {1, 1, 0, 1, 0, 0}};
  ASSERT_TRUE(npy::write_file(dir + "/ids.npy", ids));
  ASSERT_TRUE(npy::write_file(dir + "/keep.npy", keep));
  ASSERT_TRUE(npy::write_file(dir + "/emb.npy", filled(npy::Descr::f4, {5, 4}, 0.5f)));
  CliResult r = run_kiln({"run", fixed, "--target", "cpu", "--inputs", dir, "--save",
                          m_dir + "/out", "--repeat", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  json report = json::parse(r.out);
  EXPECT_EQ(report["runs"], 3);
  EXPECT_GT(report["run_us"].get<double>(), 0.0);
  // The CPU target times each kernel: every kernel named, the time outside them a share of the
  // run in [0, 1].
  ASSERT_TRUE(report["kernels"].is_array());
  ASSERT_FALSE(report["kernels"].empty());
  double kernels_us = 0;
  for (const json& k : report["kernels"]) {
    EXPECT_EQ(k["name"].get<std::string>().rfind("k", 0), 0u) << k.dump();
    EXPECT_GE(k["run_us"].get<double>(), 0.0);
    kernels_us += k["run_us"].get<double>();
  }
  EXPECT_EQ(report["kernels"][0]["name"], "k0_embedding");
  EXPECT_GE(report["outside_share"].get<double>(), 0.0);
  EXPECT_LE(report["outside_share"].get<double>(), 1.0);
  EXPECT_GE(report["outside_us"].get<double>(), 0.0);
  EXPECT_LE(kernels_us, 3 * report["run_us"].get<double>());
  npy::Array n = read_npy(m_dir + "/out/n.npy");
  EXPECT_EQ(n.descr, npy::Descr::i4);
  int32_t n_values[6];
  std::memcpy(n_values, n.data.data(), sizeof n_values);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(n_values[i], id_values[i] + 1) << i;
  npy::Array k = read_npy(m_dir + "/out/k.npy");
  EXPECT_EQ(k.descr, npy::Descr::b1);
  EXPECT_EQ(k.data, (std::vector<unsigned char>{0, 0, 1, 0, 1, 1}));
  npy::Array m = read_npy(m_dir + "/out/m.npy");
  EXPECT_EQ(f32_at(m, 0), 0.0f);
  EXPECT_EQ(f32_at(m, 2), -std::numeric_limits<float>::infinity());

  // Id 5 is past the 5 rows of emb.
  const int64_t bad[] = {0, 4, 2, 1, 5, 4};
  std::memcpy(ids.data.data(), bad, sizeof bad);
  ASSERT_TRUE(npy::write_file(dir + "/ids.npy", ids));
  CliResult refused = run_kiln({"run", fixed, "--target", "cpu", "--inputs", dir});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find(dir + "/ids.npy: error: --input ids: input 'ids' holds 5 at [1, 1], "
                             "outside the embedding table 'emb' of 5 rows ([0, 5))"),
            std::string::npos)
      << refused.err;
  // A float file for an integer input names both dtypes.
  ASSERT_TRUE(npy::write_file(dir + "/ids.npy", filled(npy::Descr::f4, {2, 3}, 1.0f)));
  CliResult wrong = run_kiln({"run", fixed, "--target", "cpu", "--inputs", dir});
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("expected i64[2, 3] (descr '<i8'), got descr '<f4'"), std::string::npos)
      << wrong.err;
  EXPECT_EQ(run_kiln({"run", fixed, "--target", "cpu", "--repeat", "0"}).exit_code, 2);
  // A count past int64 is quoted as written, not as the value it would clamp to.
  for (const char* count : {"99999999999999999999", "2.5", "-99999999999999999999"}) {
    CliResult bad = run_kiln({"run", fixed, "--target", "cpu", "--repeat", count});
    EXPECT_EQ(bad.exit_code, 2) << count;
    EXPECT_NE(bad.err.find("--repeat: expected a whole number from 1 to 1000000, got '" +
                           std::string(count) + "'"),
              std::string::npos)
        << bad.err;
  }
}

// i64 values past 2^53 go into the kernels, the fp64 reference and out of --save and
// --save-reference exactly, wrapping as int64 does (a double held them on the way: 2^63 - 1 came
// back as -2^63), and the check passes (the reference held them as doubles, and failed what they
// reached). The reference's integer and bool outputs are saved in their dtype, not as '<f8'.
TEST_F(NpyCli, I64ValuesPast2To53GoInAndOutExactly) {
  std::string graph = write_text("wide.kg", R"(graph wide {
  input a: i64[5]
  y = add(a, 1)
  p = gt(a, 0)
  output y, p
}
)");
  const int64_t big = int64_t{1} << 53;
  const int64_t in[] = {big + 1, (int64_t{1} << 62) + 1, INT64_MAX, INT64_MIN + 1,
                        12345678901234567};
  npy::Array a{npy::Descr::i8, {5}, std::vector<unsigned char>(sizeof in)};
  std::memcpy(a.data.data(), in, sizeof in);
  ASSERT_TRUE(npy::write_file(m_dir + "/a.npy", a));
  for (std::vector<std::string> where : {std::vector<std::string>{"--target", "cpu"},
                                         std::vector<std::string>{"--emulate", "--arch", "sm_80"}}) {
    SCOPED_TRACE(where[0]);
    std::vector<std::string> args = {"run",         graph,          "--input",
                                     "a=" + m_dir + "/a.npy", "--save", m_dir + "/out",
                                     "--save-reference", m_dir + "/ref"};
    args.insert(args.end(), where.begin(), where.end());
    CliResult r = run_kiln(args);
    EXPECT_EQ(r.signal, 0);
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    npy::Array y = read_npy(m_dir + "/out/y.npy");
    ASSERT_EQ(y.descr, npy::Descr::i8);
    ASSERT_EQ(y.data.size(), sizeof in);
    int64_t got[5];
    std::memcpy(got, y.data.data(), sizeof got);
    EXPECT_EQ(got[0], big + 2);
    EXPECT_EQ(got[1], (int64_t{1} << 62) + 2);
    EXPECT_EQ(got[2], INT64_MIN) << "2^63 - 1 + 1 wraps";
    EXPECT_EQ(got[3], INT64_MIN + 2);
    EXPECT_EQ(got[4], 12345678901234568);
    npy::Array p = read_npy(m_dir + "/out/p.npy");
    EXPECT_EQ(p.data, (std::vector<unsigned char>{1, 1, 1, 0, 1}));
    // The reference's files: the same bytes (as '<f8', 2^53 + 2 would have read 2^53 + 2 but
    // 2^62 + 2 as 2^62).
    npy::Array ref_y = read_npy(m_dir + "/ref/y.npy");
    EXPECT_EQ(ref_y.descr, npy::Descr::i8);
    EXPECT_EQ(ref_y.data, y.data);
    npy::Array ref_p = read_npy(m_dir + "/ref/p.npy");
    EXPECT_EQ(ref_p.descr, npy::Descr::b1);
    EXPECT_EQ(ref_p.data, p.data);
  }
}

// maximum, minimum, relu, a clamp and the max reduction give NaN where an operand is NaN, as
// PyTorch does (fmaxf would drop it), on the CPU target and the CUDA kernels alike; the check
// against fp64 takes a NaN the reference also has as a match. Rows of 37: the CPU target's
// vector loop and its scalar tail each meet a NaN. relu(-0.0) is -0.0 and relu of a negative
// +0.0, as in PyTorch, in the vector loop and the tail.
TEST_F(NpyCli, ANanOperandGivesNanThroughMaxMinReluAndTheMaxReduction) {
  std::string graph = write_text("nan.kg", R"(graph nanprop {
  input x: f32[4, 37]
  input y: f32[4, 37]
  r = relu(x)
  mx = maximum(x, y)
  mn = minimum(x, y)
  c = minimum(maximum(x, 0.0), 1.0)
  a = max(x, axis=-1)
  output r
  output mx
  output mn
  output c
  output a
}
)");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  npy::Array x = filled(npy::Descr::f4, {4, 37}, 0.5f);
  npy::Array y = filled(npy::Descr::f4, {4, 37}, -2.0f);
  std::memcpy(x.data.data() + 4 * (0 * 37 + 3), &nan, 4);   // row 0: x NaN
  std::memcpy(y.data.data() + 4 * (1 * 37 + 5), &nan, 4);   // row 1: y NaN
  std::memcpy(x.data.data() + 4 * (2 * 37 + 35), &nan, 4);  // row 2: x NaN in the tail
  // row 3: -0.0 in the vector loop (7) and the tail (36), a negative at 8
  for (auto [column, value] : {std::pair{7, -0.0f}, std::pair{8, -1.5f}, std::pair{36, -0.0f}})
    std::memcpy(x.data.data() + 4 * (3 * 37 + column), &value, 4);
  std::vector<std::string> inputs = {"--input", "x=" + write_npy("x.npy", x),
                                     "--input", "y=" + write_npy("y.npy", y)};
  for (std::vector<std::string> where : {std::vector<std::string>{"--target", "cpu"},
                                         {"--emulate", "--arch", "sm_80"},
                                         {"--emulate", "--arch", "sm_90a"}}) {
    std::string out = m_dir + "/out-" + where.back();
    std::vector<std::string> args = {"run", graph, "--save", out};
    args.insert(args.end(), where.begin(), where.end());
    args.insert(args.end(), inputs.begin(), inputs.end());
    CliResult r = run_kiln(args);
    ASSERT_EQ(r.exit_code, 0) << where.back() << ": " << r.out << r.err;
    auto at = [&](const char* name, size_t i) {
      return f32_at(read_npy(out + "/" + name + ".npy"), i);
    };
    EXPECT_TRUE(std::isnan(at("r", 3))) << where.back();
    EXPECT_EQ(at("r", 4), 0.5f);
    EXPECT_TRUE(std::isnan(at("mx", 3))) << where.back();
    EXPECT_TRUE(std::isnan(at("mx", 37 + 5))) << where.back();
    EXPECT_EQ(at("mx", 37 + 6), 0.5f);
    EXPECT_TRUE(std::isnan(at("mx", 2 * 37 + 35))) << where.back();
    EXPECT_TRUE(std::isnan(at("r", 2 * 37 + 35))) << where.back();
    EXPECT_TRUE(std::isnan(at("mn", 3))) << where.back();
    EXPECT_TRUE(std::isnan(at("mn", 37 + 5))) << where.back();
    EXPECT_EQ(at("mn", 37 + 6), -2.0f);
    EXPECT_TRUE(std::isnan(at("c", 3))) << where.back();
    EXPECT_TRUE(std::isnan(at("a", 0))) << where.back();
    EXPECT_EQ(at("a", 1), 0.5f);
    EXPECT_TRUE(std::isnan(at("a", 2))) << where.back();
    for (size_t column : {7, 36}) {
      EXPECT_EQ(at("r", 3 * 37 + column), 0.0f) << where.back();
      EXPECT_TRUE(std::signbit(at("r", 3 * 37 + column))) << where.back() << ": relu(-0.0)";
    }
    EXPECT_FALSE(std::signbit(at("r", 3 * 37 + 8))) << where.back() << ": relu(-1.5)";
  }
}

TEST_F(NpyCli, TheSameInputsGiveTheSameOutputsWhateverTheSeed) {
  std::vector<std::string> args = all_inputs();
  std::vector<std::string> first = args, second = args;
  first.insert(first.end(), {"--seed", "1", "--save", m_dir + "/a"});
  second.insert(second.end(), {"--seed", "2", "--save", m_dir + "/b"});
  ASSERT_EQ(run(first).exit_code, 0);
  ASSERT_EQ(run(second).exit_code, 0);
  for (const char* name : {"y", "h", "b"}) {
    EXPECT_EQ(read_npy(m_dir + "/a/" + std::string(name) + ".npy").data,
              read_npy(m_dir + "/b/" + std::string(name) + ".npy").data)
        << name;
  }
}

TEST_F(NpyCli, InputsNotGivenStaySeeded) {
  // Only x given: with the same seed, the other inputs and so the outputs are the same; with
  // another seed they differ.
  std::string x = "x=" + write_npy("x.npy", filled(npy::Descr::f4, {4, 8}, 1.0f));
  ASSERT_EQ(run({"--input", x, "--seed", "3", "--save", m_dir + "/a"}).exit_code, 0);
  ASSERT_EQ(run({"--input", x, "--seed", "3", "--save", m_dir + "/b"}).exit_code, 0);
  ASSERT_EQ(run({"--input", x, "--seed", "4", "--save", m_dir + "/c"}).exit_code, 0);
  EXPECT_EQ(read_npy(m_dir + "/a/h.npy").data, read_npy(m_dir + "/b/h.npy").data);
  EXPECT_NE(read_npy(m_dir + "/a/h.npy").data, read_npy(m_dir + "/c/h.npy").data);
  CliResult text = run({"--input", x});
  EXPECT_NE(text.out.find("inputs x from " + m_dir + "/x.npy, the rest uniform in [-1, 1]"),
            std::string::npos)
      << text.out;
  // A seed is 0 to 2^64 - 1: -1 was wrapped to 2^64 - 1, and 2^64 clamped to it, silently.
  for (const char* seed : {"-1", "18446744073709551616", "1.5", ""}) {
    for (const char* command : {"run", "audit"}) {
      CliResult bad = run_kiln({command, m_graph, "--seed", seed});
      EXPECT_EQ(bad.exit_code, 2) << command << " --seed '" << seed << "'";
      EXPECT_NE(bad.err.find("--seed: expected a whole number from 0 to 2^64 - 1, got '" +
                             std::string(seed) + "'"),
                std::string::npos)
          << bad.err;
    }
  }
  EXPECT_EQ(run({"--seed", "18446744073709551615"}).exit_code, 0);
}

TEST_F(NpyCli, Bf16ReadsTheSameAsU2OrV2) {
  std::vector<std::string> args = all_inputs();
  npy::Array g = filled(npy::Descr::u2, {4, 6}, 0.5f);
  g.descr = npy::Descr::v2;
  args.insert(args.end(), {"--save", m_dir + "/u2"});
  ASSERT_EQ(run(args).exit_code, 0);
  args.back() = m_dir + "/v2";
  args[7] = "g=" + write_npy("g_v2.npy", g);
  ASSERT_EQ(run(args).exit_code, 0);
  EXPECT_EQ(read_npy(m_dir + "/u2/b.npy").data, read_npy(m_dir + "/v2/b.npy").data);
}

TEST_F(NpyCli, AWrongShapeOrDtypeIsAUsageErrorNamingTheFileAndTheInput) {
  std::string wide = write_npy("wide.npy", filled(npy::Descr::f4, {4, 9}, 1.0f));
  CliResult shape = run({"--input", "x=" + wide});
  EXPECT_EQ(shape.exit_code, 2) << shape.err;
  EXPECT_NE(shape.err.find(wide + ": error: --input x: expected f32[4, 8] (descr '<f4'), got "
                                  "descr '<f4', shape (4, 9)"),
            std::string::npos)
      << shape.err;
  std::string half = write_npy("half.npy", filled(npy::Descr::f2, {4, 8}, 0.25f));
  CliResult dtype = run({"--input", "x=" + half});
  EXPECT_EQ(dtype.exit_code, 2) << dtype.err;
  EXPECT_NE(dtype.err.find("got descr '<f2', shape (4, 8); convert it, e.g. arr.astype('<f4')"),
            std::string::npos)
      << dtype.err;
  std::string f32_for_bf16 = write_npy("g32.npy", filled(npy::Descr::f4, {4, 6}, 0.5f));
  CliResult bf16 = run({"--input", "g=" + f32_for_bf16});
  EXPECT_EQ(bf16.exit_code, 2) << bf16.err;
  EXPECT_NE(bf16.err.find("expected bf16[4, 6] (descr '<u2' or '<V2' (bf16 bits)), got descr "
                          "'<f4'"),
            std::string::npos)
      << bf16.err;
}

TEST_F(NpyCli, BadInputFlagsAndFilesAreUsageErrors) {
  std::string x = write_npy("x.npy", filled(npy::Descr::f4, {4, 8}, 1.0f));
  std::string garbage = write_text("garbage.npy", "not numpy at all");
  std::string be_header = "{'descr': '>f4', 'fortran_order': False, 'shape': (4, 8), }\n";
  std::string big_endian = write_text(
      "be.npy", std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(be_header.size()) +
                    '\0' + be_header + std::string(128, '\0'));
  struct Bad {
    std::vector<std::string> args;
    std::string says;
  };
  const Bad bad[] = {
      {{"--input", "q=" + x},
       "run: --input q: graph 'mixed' has no input 'q'; its inputs: x, w, r, g"},
      {{"--input", "x=" + x, "--input", "x=" + x}, "run: --input x is given twice"},
      {{"--input", x}, "is not NAME=PATH.npy"},
      {{"--input", "x="}, "is not NAME=PATH.npy"},
      {{"--input", "x=" + m_dir + "/none.npy"},
       m_dir + "/none.npy: error: cannot read: No such file or directory"},
      {{"--input", "x=" + garbage}, garbage + ": error: not a .npy file"},
      {{"--input", "x=" + big_endian}, big_endian + ": error: header: big-endian data"},
      {{"--save", m_dir + "/same", "--save-reference", m_dir + "/same/"},
       "name the same directory"},
      {{"--save", garbage}, "--save " + garbage + ": "},
  };
  for (const Bad& b : bad) {
    CliResult r = run(b.args);
    EXPECT_EQ(r.exit_code, 2) << b.says << "\n" << r.err;
    EXPECT_EQ(r.signal, 0);
    EXPECT_NE(r.err.find(b.says), std::string::npos) << r.err;
  }
}

TEST_F(NpyCli, ASymbolicGraphTakesItsDimsFromTheFiles) {
  std::string graph = write_text("small.kg", k_symbolic);
  std::string x13 = "x=" + write_npy("x13.npy", filled(npy::Descr::f4, {13, 32}, 0.5f));
  CliResult from_file = run_kiln({"run", graph, "--emulate", "--input", x13, "--json"});
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_EQ(json::parse(from_file.out)["dims"], json({{"B", 13}}));
  CliResult agreeing =
      run_kiln({"run", graph, "--emulate", "--input", x13, "--dims", "B=13", "--json"});
  ASSERT_EQ(agreeing.exit_code, 0) << agreeing.err;

  struct Bad {
    std::vector<std::string> args;
    std::string says;
  };
  std::string x30 = "x=" + write_npy("x30.npy", filled(npy::Descr::f4, {30, 32}, 0.5f));
  std::string w = "w=" + write_npy("w.npy", filled(npy::Descr::f4, {32, 16}, 0.5f));
  const Bad bad[] = {
      {{"--input", x13, "--dims", "B=7"},
       "x13.npy: error: --input x: expected f32[7, 32] (descr '<f4'; f32[B, 32] at --dims B=7), "
       "got descr '<f4', shape (13, 32)"},
      {{"--input", x30}, "x30.npy: error: --input x: dim 0 gives B = 30, outside its range 1..20"},
      {{"--input", w}, "run: no --input gives dim B in 1..20; give the sizes with --dims"},
  };
  for (const Bad& b : bad) {
    std::vector<std::string> args = {"run", graph, "--emulate"};
    args.insert(args.end(), b.args.begin(), b.args.end());
    CliResult r = run_kiln(args);
    EXPECT_EQ(r.exit_code, 2) << b.says << "\n" << r.err;
    EXPECT_NE(r.err.find(b.says), std::string::npos) << r.err;
  }
}

TEST_F(NpyCli, AuditReadsInputsAndSavesBothSides) {
  std::vector<std::string> args = {"audit", m_graph, "--precision", "high"};
  std::vector<std::string> inputs = all_inputs();
  args.insert(args.end(), inputs.begin(), inputs.end());
  args.insert(args.end(), {"--save", m_dir + "/out", "--save-reference", m_dir + "/ref", "--json"});
  CliResult audit = run_kiln(args);
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  EXPECT_EQ(json::parse(audit.out)["inputs"].size(), 4u);
  npy::Array y = read_npy(m_dir + "/out/y.npy");
  EXPECT_EQ(y.descr, npy::Descr::f4);
  EXPECT_EQ(f32_at(y, 0), 4.0f);
  EXPECT_EQ(read_npy(m_dir + "/out/b.npy").descr, npy::Descr::u2);
  // The fp64 reference is the same whichever command runs it on the same inputs.
  std::vector<std::string> run_args = all_inputs();
  run_args.insert(run_args.end(), {"--save-reference", m_dir + "/run-ref"});
  ASSERT_EQ(run(run_args).exit_code, 0);
  for (const char* name : {"y", "h", "b"}) {
    EXPECT_EQ(read_npy(m_dir + "/ref/" + std::string(name) + ".npy").data,
              read_npy(m_dir + "/run-ref/" + std::string(name) + ".npy").data)
        << name;
  }
  CliResult unknown = run_kiln({"audit", m_graph, "--precision", "high", "--input", "q=x.npy"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("audit: --input q: graph 'mixed' has no input 'q'"), std::string::npos)
      << unknown.err;
}

// numpy writes an input, kiln reads it and writes the outputs, numpy reads them back. Skipped
// where /usr/bin/python3 cannot import numpy.
TEST_F(NpyCli, NumpyReadsWhatKilnWritesAndKilnReadsWhatNumpyWrites) {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "numpy is not importable by /usr/bin/python3";
  std::string script = write_text("roundtrip.py", R"(import sys
import numpy as np
d = sys.argv[1]
np.save(d + '/x.npy', np.arange(32, dtype=np.float32).reshape(4, 8) / 32)
np.save(d + '/w.npy', np.full((8, 6), 0.5, dtype=np.float32))
np.save(d + '/r.npy', np.full((4, 6), 0.25, dtype=np.float16))
g = np.full((4, 6), 0.5, dtype=np.float32).view(np.uint32) >> 16
np.save(d + '/g.npy', g.astype('<u2'))
)");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + m_dir).c_str()), 0);
  CliResult r = run({"--input", "x=" + m_dir + "/x.npy", "--input", "w=" + m_dir + "/w.npy",
                     "--input", "r=" + m_dir + "/r.npy", "--input", "g=" + m_dir + "/g.npy",
                     "--save", m_dir + "/out", "--save-reference", m_dir + "/ref"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string check = write_text("check.py", R"(import sys
import numpy as np
d = sys.argv[1]
x = np.load(d + '/x.npy').astype(np.float64)
y = np.maximum(x @ np.full((8, 6), 0.5), 0)
out = np.load(d + '/out/y.npy')
assert out.dtype == np.float32 and out.shape == (4, 6), (out.dtype, out.shape)
assert np.array_equal(out, y.astype(np.float32)), (out, y)
h = np.load(d + '/out/h.npy')
assert h.dtype == np.float16 and np.array_equal(h, (y.astype(np.float16) + np.float16(0.25))), h
b = np.load(d + '/out/b.npy')
assert b.dtype == np.uint16 and b.shape == (4, 6), b.dtype
ref = np.load(d + '/ref/y.npy')
assert ref.dtype == np.float64 and np.array_equal(ref, y), ref
again = d + '/again.npy'
np.save(again, out)
assert open(again, 'rb').read() == open(d + '/out/y.npy', 'rb').read(), 'bytes differ from np.save'
)");
  EXPECT_EQ(std::system(("/usr/bin/python3 " + check + " " + m_dir).c_str()), 0);
}

// An input from a pipe or a FIFO (process substitution, `--input x=<(cat x.npy)`, gives
// /dev/fd/N, a pipe) reads as a file does; an endless one fails, exit 2, once it runs past the
// data its header declares, and one past what the input can hold before its data is read.
TEST_F(NpyCli, InputsFromPipesAndFifosReadAsFilesDo) {
  std::string graph = write_text("small.kg", k_symbolic);
  std::string x = npy::serialize(filled(npy::Descr::f4, {13, 32}, 0.5f));
  CliResult piped = run_kiln({"run", graph, "--emulate", "--input", "x=/dev/stdin", "--json"}, x);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  json report = json::parse(piped.out);
  EXPECT_EQ(report["dims"], json({{"B", 13}}));
  EXPECT_EQ(report["inputs"], json({{"x", "/dev/stdin"}}));

  std::string fifo = m_dir + "/x.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << x; });
  CliResult from_fifo = run_kiln({"audit", graph, "--precision", "high", "--input", "x=" + fifo});
  writer.join();
  EXPECT_EQ(from_fifo.exit_code, 0) << from_fifo.err;

  std::signal(SIGPIPE, SIG_IGN);  // kiln stops reading stdin: the feed sees EPIPE
  CliResult endless = run_kiln({"run", graph, "--emulate", "--input", "x=/dev/stdin"},
                               x + std::string(1 << 20, 'y'));
  EXPECT_EQ(endless.exit_code, 2);
  EXPECT_EQ(endless.err,
            "/dev/stdin: error: the stream goes on past the 1664 bytes of data its header "
            "declares (shape (13, 32) of '<f4' needs 1664 bytes of data); is it an endless "
            "stream?\n");
  // 200 rows: more data than even B's largest, 20 rows, would need as '<f8' (20 * 32 * 8 bytes).
  CliResult too_big = run_kiln({"run", graph, "--emulate", "--input", "x=/dev/stdin"},
                               npy::serialize(filled(npy::Descr::f4, {200, 32}, 0.5f)));
  EXPECT_EQ(too_big.exit_code, 2);
  EXPECT_EQ(too_big.err,
            "/dev/stdin: error: shape (200, 32) of '<f4' needs 25600 bytes of data, past the "
            "limit of 5120 bytes (--input x, f32[B, 32], holds at most 640 elements)\n");
}

// A --save directory that cannot be made is the environment's failure (exit 1, as an output
// file that cannot be written); a --save path naming a file is bad usage (exit 2).
TEST_F(NpyCli, ASaveDirectoryThatCannotBeMadeExits1) {
  // Not even root may make a directory in /sys.
  if (!std::filesystem::is_directory("/sys")) GTEST_SKIP() << "no /sys here";
  CliResult r = run({"--save", "/sys/kiln-cli-test-save"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("kiln run: --save /sys/kiln-cli-test-save: cannot create: ", 0), 0u)
      << r.err;
  CliResult audit = run_kiln({"audit", m_graph, "--precision", "high", "--save-reference",
                              "/sys/kiln-cli-test-save"});
  EXPECT_EQ(audit.exit_code, 1) << audit.err;
  std::string file = write_text("file.txt", "a file");
  CliResult named_file = run({"--save", file});
  EXPECT_EQ(named_file.exit_code, 2) << named_file.err;
  EXPECT_EQ(named_file.err, "kiln run: --save " + file + ": not a directory\n");
}

// An output file that is a FIFO (with no reader: the open used to wait for one forever) or a
// device is refused, exit 1, with nothing written to it; a regular file there is replaced.
TEST_F(NpyCli, ASaveIntoAFifoOrADeviceIsRefusedWithoutWaiting) {
  const std::string fifo_dir = m_dir + "/fifo", device_dir = m_dir + "/device";
  std::filesystem::create_directories(fifo_dir);
  std::filesystem::create_directories(device_dir);
  ASSERT_EQ(::mkfifo((fifo_dir + "/y.npy").c_str(), 0600), 0);
  std::filesystem::create_symlink("/dev/null", device_dir + "/y.npy");
  for (const std::string& dir : {fifo_dir, device_dir}) {
    CliResult r = run({"--save", dir});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(dir + "/y.npy: error: cannot write: not a regular file"),
              std::string::npos)
        << r.err;
  }
  std::filesystem::create_directories(m_dir + "/regular");
  write_text("regular/y.npy", std::string(4096, 'x'));  // longer than what replaces it
  CliResult replaced = run({"--save", m_dir + "/regular"});
  EXPECT_EQ(replaced.exit_code, 0) << replaced.err;
  EXPECT_EQ(read_npy(m_dir + "/regular/y.npy").descr, npy::Descr::f4);
}

// --strict exits 1 when an output's error exceeds its tolerance, 0 otherwise, as its help says.
TEST_F(NpyCli, AuditStrictExits1WhenAnOutputExceedsItsTolerance) {
  // 10001 - 10000: TF32 (`high`) rounds 10001 to 10000, so the product is 0, not 1.
  std::string graph = write_text("cancel.kg",
                                 "graph cancel {\n  input x: f32[1, 2]\n  input w: f32[2, 1]\n"
                                 "  y = matmul(x, w)\n  output y\n}\n");
  npy::Array x = filled(npy::Descr::f4, {1, 2}, 10001.0f);
  float minus = -10000.0f;
  std::memcpy(x.data.data() + 4, &minus, 4);
  std::vector<std::string> args = {"audit", graph, "--input", "x=" + write_npy("x.npy", x),
                                   "--input",
                                   "w=" + write_npy("w.npy", filled(npy::Descr::f4, {2, 1}, 1.0f))};
  auto audit = [&](const char* precision, bool strict) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--precision", precision});
    if (strict) a.push_back("--strict");
    return run_kiln(a);
  };
  CliResult lax = audit("high", false);
  EXPECT_EQ(lax.exit_code, 0) << lax.err;
  EXPECT_NE(lax.err.find("kiln audit: warning: output 'y': relative l2 error"), std::string::npos)
      << lax.err;
  EXPECT_EQ(audit("high", true).exit_code, 1);
  EXPECT_EQ(audit("highest", true).exit_code, 0) << "fp32 is exact here: no warning";
  CliResult help = run_kiln({"audit", "--help"});
  EXPECT_NE(help.out.find("exit 1 when an output's error exceeds its tolerance"),
            std::string::npos)
      << help.out;
}

}  // namespace
}  // namespace kiln::testing::npy_cli_test
