// The reference's integer and bool semantics, value by value: wrapping arithmetic, comparisons
// with NaN, logical ops, where with literals and broadcasting, casts between every kind of
// dtype, device bytes and seeded integer inputs.
#include "reference/audit.h"
#include "reference/metrics.h"
#include "test_util.h"
#include "tests/emulation/typed_edges.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace kiln::reference::typed_test {
namespace {

using testing::make_tensor;
using testing::parse_or_die;
using testing::run_values;

constexpr double k_inf = std::numeric_limits<double>::infinity();

// `expr` over x (of `type`) in both modes: fp64 and emulated highest must agree.
std::vector<double> on(const std::string& type, std::vector<double> x, const std::string& expr) {
  ir::Graph g = parse_or_die("graph g {\n  input x: " + type + "\n  o = " + expr +
                             "\n  output o\n}\n");
  Tensor in = make_tensor(g.node(g.inputs()[0]).type.dtype, g.node(g.inputs()[0]).type.shape.dims(),
                          std::move(x));
  std::vector<double> fp64 = run_values(g, {in});
  std::vector<double> emulated = run_values(g, {in}, RunMode::emulate(ir::Precision::highest));
  EXPECT_EQ(fp64, emulated) << expr;
  return fp64;
}

TEST(ExactValues, IntegerArithmeticWrapsAsTwosComplement) {
  const double max32 = 2147483647.0, min32 = -2147483648.0;
  EXPECT_EQ(on("i32[3]", {max32, min32, 5}, "add(x, 1)"),
            (std::vector<double>{min32, min32 + 1, 6}));
  EXPECT_EQ(on("i32[3]", {min32, 3, -7}, "sub(x, 1)"), (std::vector<double>{max32, 2, -8}));
  // 65536 * 65536 = 2^32 wraps to 0; 1000000007^2 wraps to -371520463 (NumPy's int32 product).
  EXPECT_EQ(on("i32[3]", {65536, 1000000007, -4}, "mul(x, x)"),
            (std::vector<double>{0, -371520463, 16}));
  EXPECT_EQ(on("i32[2]", {min32, -5}, "neg(x)"), (std::vector<double>{min32, 5}));
  EXPECT_EQ(on("i32[2]", {min32, -5}, "abs(x)"), (std::vector<double>{min32, 5}));
  EXPECT_EQ(on("i64[3]", {4294967296.0, -3, 9}, "mul(x, 3)"),
            (std::vector<double>{12884901888.0, -9, 27}));
  EXPECT_EQ(on("i64[3]", {1, -3, 9}, "maximum(minimum(x, 5), 0)"), (std::vector<double>{1, 0, 5}));
}

TEST(ExactValues, ComparisonsGiveBoolAndNaNComparesUnequal) {
  const double nan = std::nan("");
  EXPECT_EQ(on("f32[3]", {1, nan, -2}, "eq(x, 1.0)"), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(on("f32[3]", {1, nan, -2}, "ne(x, 1.0)"), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(on("f32[3]", {1, nan, -2}, "lt(x, 0.0)"), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(on("f32[3]", {1, nan, -2}, "ge(x, -2.0)"), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(on("i64[3]", {1, 5, -2}, "le(3, x)"), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(on("bool[2]", {1, 0}, "gt(x, false)"), (std::vector<double>{1, 0}));
  EXPECT_EQ(on("bool[3]", {1, 0, 1}, "logical_or(logical_not(x), eq(x, false))"),
            (std::vector<double>{0, 1, 0}));
}

TEST(ExactValues, CastsTruncateSaturateWrapAndTestNonzero) {
  const double nan = std::nan("");
  EXPECT_EQ(on("f32[6]", {2.7, -2.7, 3e9, -3e9, nan, -0.5}, "cast(x, to=i32)"),
            (std::vector<double>{2, -2, 2147483647.0, -2147483648.0, 0, 0}));
  EXPECT_EQ(on("f32[3]", {1e19, -1e19, 1e10}, "cast(x, to=i64)"),
            (std::vector<double>{9223372036854775807.0, -9223372036854775808.0, 1e10}));
  EXPECT_EQ(on("f32[4]", {0.0, -0.0, nan, 1e-30}, "cast(x, to=bool)"),
            (std::vector<double>{0, 0, 1, 1}));
  EXPECT_EQ(on("i64[3]", {4294967297.0, -1, 2147483648.0}, "cast(x, to=i32)"),
            (std::vector<double>{1, -1, -2147483648.0}));
  EXPECT_EQ(on("bool[2]", {1, 0}, "cast(x, to=i64)"), (std::vector<double>{1, 0}));
  EXPECT_EQ(on("bool[2]", {1, 0}, "cast(x, to=bf16)"), (std::vector<double>{1, 0}));
  // i64 -> f32 rounds to nearest (2^24 + 1 is not a float), -> bf16 as a kernel stores it.
  EXPECT_EQ(on("i64[2]", {16777217, 3}, "cast(x, to=f32)"), (std::vector<double>{16777216, 3}));
  EXPECT_EQ(on("i32[1]", {257}, "cast(x, to=bf16)"), (std::vector<double>{256}));
}

TEST(ExactValues, WhereSelectsAndBroadcastsWithLiterals) {
  ir::Graph g = parse_or_die(
      "graph g {\n  input keep: bool[2, 1]\n  input x: f32[3]\n  o = where(keep, x, -inf)\n"
      "  output o\n}\n");
  auto o = run_values(g, {make_tensor(ir::DType::boolean, {2, 1}, {1, 0}),
                          make_tensor(ir::DType::f32, {3}, {1, 2, 3})});
  EXPECT_EQ(o, (std::vector<double>{1, 2, 3, -k_inf, -k_inf, -k_inf}));
  ir::Graph both = parse_or_die(
      "graph g {\n  input m: i64[4]\n  o = where(eq(m, 0), -inf, 0.0)\n  output o\n}\n");
  EXPECT_EQ(run_values(both, {make_tensor(ir::DType::i64, {4}, {1, 0, 1, 0})}),
            (std::vector<double>{0, -k_inf, 0, -k_inf}));
  // A literal takes the dtype it meets, in fp64 too: where's 0.1 is the float 0.1 rounds to, and
  // eq(x, 2.7) holds where x holds that float.
  ir::Graph lit = parse_or_die(
      "graph g {\n  input c: bool[1]\n  o = where(c, 0.1, 0.0)\n  output o\n}\n");
  Tensor c = make_tensor(ir::DType::boolean, {1}, {1});
  EXPECT_EQ(run_values(lit, {c})[0], static_cast<double>(0.1f));
  EXPECT_EQ(on("f32[2]", {static_cast<double>(2.7f), 2.7}, "eq(x, 2.7)"),
            (std::vector<double>{1, 0}));
}

// embedding picks rows by id, zeros for an id outside [0, V); make_inputs refuses such an id in a
// given input, naming it, its position and V; seeded ids stay inside the table.
TEST(ExactValues, EmbeddingRowsAndIdsOutsideTheTable) {
  ir::Graph g = parse_or_die(
      "graph g {\n  input t: f32[3, 2]\n  input ids: i64[2, 2]\n  o = embedding(t, ids)\n"
      "  output o\n}\n");
  Tensor table = make_tensor(ir::DType::f32, {3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor ids = make_tensor(ir::DType::i64, {2, 2}, {2, 0, 3, -1});
  EXPECT_EQ(run_values(g, {table, ids}), (std::vector<double>{5, 6, 1, 2, 0, 0, 0, 0}));
  auto refused = make_inputs(g, InputSource{1, {std::nullopt, ids}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "input 'ids' holds 3 at [1, 0], outside the embedding table 't' of 3 rows ([0, 3))");
  std::vector<Tensor> seeded = random_inputs(g, 5);
  for (double id : seeded[1].values) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 3);
  }
}

TEST(ExactValues, DeviceBytesAndSeededIntegers) {
  ir::TensorType t{ir::DType::i64, ir::Shape::make({3}).value()};
  Tensor x = make_tensor(ir::DType::i64, {3}, {-1, 4294967296.0, 7});
  std::vector<unsigned char> bytes(24);
  store_device_bytes(x, bytes.data());
  EXPECT_EQ(bytes[0], 0xff);
  EXPECT_EQ(bytes[7], 0xff);
  EXPECT_EQ(bytes[12], 1);  // 2^32: byte 4 of the second element
  EXPECT_EQ(load_device_bytes(t, bytes.data()).values, x.values);
  ir::TensorType b{ir::DType::boolean, ir::Shape::make({3}).value()};
  const unsigned char raw[3] = {0, 1, 7};
  EXPECT_EQ(load_device_bytes(b, raw).values, (std::vector<double>{0, 1, 1}));
  Rng rng(3);
  Tensor ids = random_tensor(ir::TensorType{ir::DType::i32, ir::Shape::make({400}).value()}, rng);
  double lo = 100, hi = -100;
  for (double v : ids.values) {
    EXPECT_EQ(v, std::floor(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, k_random_integer_limit - 1);
}

// Python's // and % of whole numbers (the divisor neither 0 nor -1).
int64_t python_quotient(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a % b < 0) != (b < 0))) ? q - 1 : q;
}
int64_t python_remainder(int64_t a, int64_t b) { return a - python_quotient(a, b) * b; }

// A float cast to an integer is a whole number: -0.5 is 0, never -0 (which a double could hold,
// and 1 / x would tell apart), as the kernels store it.
TEST(ExactValues, AFloatCastToAnIntegerHasNoNegativeZero) {
  for (const char* to : {"i32", "i64"}) {
    std::vector<double> z = on("f32[2]", {-0.5, -0.0}, std::string("cast(x, to=") + to + ")");
    ASSERT_EQ(z.size(), 2u);
    EXPECT_FALSE(std::signbit(z[0])) << to;
    EXPECT_FALSE(std::signbit(z[1])) << to;
  }
  std::vector<double> back = on("f32[1]", {-0.5}, "div(1.0, cast(cast(x, to=i32), to=f32))");
  EXPECT_EQ(back, (std::vector<double>{k_inf}));
}

// Integers past 2^53 stay exact through every integer op, against values worked out here in
// int64_t (products mod 2^64 as unsigned ones), where doubles gave wrong sums, quotients and
// remainders of rounded products, a false a + 1 == b, and a cast to f32 rounded twice.
TEST(ExactValues, I64ValuesPast2To53StayExactThroughEveryIntegerOp) {
  ir::Graph g = parse_or_die(kiln::testing::k_wide_integers);
  std::vector<Tensor> out = testing::run_ok(g, kiln::testing::wide_integer_inputs(g),
                                            RunMode::fp64());
  ASSERT_EQ(out.size(), 15u);
  std::vector<int64_t> a = kiln::testing::wide_a(), b = kiln::testing::wide_b();
  auto integers = [](const Tensor& t) {
    std::vector<int64_t> v;
    for (size_t i = 0; i < t.values.size(); ++i) v.push_back(t.integer(i));
    return v;
  };
  std::vector<int64_t> p, d, q, r, s, w, e, g32, n;
  uint64_t sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    p.push_back(static_cast<int64_t>(static_cast<uint64_t>(a[i]) * static_cast<uint64_t>(b[i])));
    d.push_back(p.back() - 1);
    q.push_back(python_quotient(d.back(), b[i]));
    r.push_back(python_remainder(d.back(), 1000003));
    sum += static_cast<uint64_t>(a[i]);
    s.push_back(static_cast<int64_t>(sum));
    w.push_back(std::max(a[i], b[i]));
    e.push_back(a[i] + 1 == b[i]);
    g32.push_back(static_cast<int32_t>(static_cast<uint32_t>(a[i])));
  }
  n = {-a[0], -a[2], -a[1], -a[3]};
  EXPECT_EQ(integers(out[0]), p);
  EXPECT_EQ(integers(out[1]), d);
  EXPECT_EQ(integers(out[2]), q);
  EXPECT_EQ(integers(out[3]), r);
  EXPECT_EQ(integers(out[4]), s);
  EXPECT_EQ(integers(out[5]), w);
  EXPECT_EQ(integers(out[6]), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(integers(out[6]), e);
  EXPECT_EQ(integers(out[7]), (std::vector<int64_t>{a[2], a[3], b[0], b[1]}));
  EXPECT_EQ(out[8].values[3], 0x1p62 + 0x1p39);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[8].values[i], static_cast<float>(a[i])) << i;
  EXPECT_EQ(integers(out[9]), g32);
  EXPECT_EQ(integers(out[10]), n);
  EXPECT_EQ(integers(out[11]), (std::vector<int64_t>{a[3], a[0], a[1], a[2]}));
  EXPECT_EQ(integers(out[12]), (std::vector<int64_t>{b[0], b[0], b[1], b[1], b[2], b[2], b[3],
                                                     b[3]}));
  EXPECT_EQ(integers(out[13]), (std::vector<int64_t>{a[0], 7, a[2], a[3]}));
  EXPECT_EQ(integers(out[14]), (std::vector<int64_t>{1, 1, 1, 1}));
  // Device bytes carry them unrounded, and two outputs one ulp of a double apart differ.
  std::vector<unsigned char> bytes(32);
  store_device_bytes(out[1], bytes.data());
  Tensor back = load_device_bytes(out[1].type(), bytes.data());
  EXPECT_EQ(integers(back), d);
  back.set_integer(0, back.integer(0) + 1);
  EXPECT_EQ(back.values[0], out[1].values[0]) << "a double holds both";
  EXPECT_EQ(max_abs_error(back, out[1]), 1.0);
  EXPECT_GT(relative_l2(back, out[1]), 0.0);
  EXPECT_EQ(relative_l2(out[1], out[1]), 0.0);
}

}  // namespace
}  // namespace kiln::reference::typed_test
