// Tests of dtypes, precision names and validated shapes.
#include "ir/types.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

TEST(Types, DTypeNamesRoundTrip) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(parse_dtype(to_string(d)), d);
  }
  EXPECT_FALSE(parse_dtype("f64"));
  EXPECT_EQ(byte_size(DType::f32), 4);
  EXPECT_EQ(byte_size(DType::bf16), 2);
}

TEST(Types, PrecisionNamesRoundTrip) {
  for (auto p : {Precision::highest, Precision::high, Precision::tf32x3, Precision::medium,
                 Precision::automatic}) {
    EXPECT_EQ(parse_precision(to_string(p)), p);
  }
  EXPECT_EQ(to_string(Precision::automatic), "auto");
  EXPECT_FALSE(parse_precision("low"));
}

TEST(Types, ShapeCountsElements) {
  auto shape = Shape::make({2, 3, 4});
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->elements(), 24);
  EXPECT_EQ(shape->rank(), 3);
  EXPECT_EQ(to_string(*shape), "[2, 3, 4]");
  EXPECT_EQ((TensorType{DType::bf16, *shape}.bytes()), 48);
}

TEST(Types, ShapeTakesRankZeroToSixOnly) {
  auto scalar = Shape::make({});
  ASSERT_TRUE(scalar);
  EXPECT_EQ(scalar->rank(), 0);
  EXPECT_EQ(scalar->elements(), 1);
  EXPECT_EQ(to_string(*scalar), "[]");
  EXPECT_EQ((TensorType{DType::i64, *scalar}.bytes()), 8);
  EXPECT_EQ(to_string(TensorType{DType::f32, *scalar}), "f32[]");
  EXPECT_TRUE(Shape::make({1, 1, 1, 1, 1, 2}));
  auto seven = Shape::make({1, 1, 1, 1, 1, 1, 1});
  ASSERT_FALSE(seven);
  EXPECT_NE(seven.error().message.find("rank 0 to 6"), std::string::npos);
}

TEST(Types, ShapeRejectsNonPositiveDims) {
  auto zero = Shape::make({4, 0});
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.error().message.find("dimension 1 is 0"), std::string::npos);
  EXPECT_FALSE(Shape::make({-3}));
}

TEST(Types, ShapeElementCountDoesNotWrap) {
  // 2^32 * 2^32 wraps to 0 in 64-bit arithmetic; it must be refused instead.
  auto huge = Shape::make({int64_t{1} << 32, int64_t{1} << 32});
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("2^31 - 1"), std::string::npos);
  EXPECT_FALSE(Shape::make({int64_t{1} << 62}));
  EXPECT_TRUE(Shape::make({k_max_elements}));
  EXPECT_FALSE(Shape::make({k_max_elements, 2}));
}

}  // namespace
}  // namespace kiln::ir
