// Tensor-map descriptions (KernelParam::map): the text reads back exactly, bad text is refused
// saying what, the driver's documented rules are each enforced, and the reach is exact.
#include "compiler/tensor_map.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

const char* k_text = "tiled bf16 dims=64,4096 strides=8192 box=64,128 elem=1,1 swizzle=128B l2=256B";

TEST(TensorMap, TextReadsBackExactly) {
  auto spec = parse_tensor_map(k_text);
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->type, TensorMapType::bf16);
  EXPECT_EQ(spec->rank, 2u);
  EXPECT_EQ(spec->dims[0], 64u);
  EXPECT_EQ(spec->dims[1], 4096u);
  EXPECT_EQ(spec->strides[0], 8192u);
  EXPECT_EQ(spec->box[1], 128u);
  EXPECT_EQ(spec->swizzle, TensorMapSwizzle::b128);
  EXPECT_EQ(spec->l2, TensorMapL2::b256);
  EXPECT_EQ(to_string(*spec), k_text);
  EXPECT_TRUE(check_tensor_map(*spec));
  // Rank 1 has no strides; rank 5 has four.
  for (const char* text :
       {"tiled f32 dims=100 strides=- box=4 elem=1 swizzle=none l2=none",
        "tiled tf32 dims=8,2,3,4,5 strides=32,64,192,768 box=8,1,1,1,1 elem=1,1,1,1,2 "
        "swizzle=32B l2=64B"}) {
    auto read = parse_tensor_map(text);
    ASSERT_TRUE(read) << read.error().message;
    EXPECT_EQ(to_string(*read), text);
    EXPECT_EQ(*parse_tensor_map(to_string(*read)), *read);
  }
}

TEST(TensorMap, TextItCannotReadIsRefusedSayingWhat) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"", "expected 'tiled TYPE"},
           {"tiled bf16 dims=64", "expected 'tiled TYPE"},
           {"tiled b16 dims=64 strides=- box=8 elem=1 swizzle=none l2=none", "unknown element type"},
           {"tiled bf16 box=64 strides=- dims=8 elem=1 swizzle=none l2=none", "expected dims="},
           {"tiled bf16 dims=1,2,3,4,5,6 strides=- box=8 elem=1 swizzle=none l2=none", "dims"},
           {"tiled bf16 dims=64,-1 strides=16 box=8,1 elem=1,1 swizzle=none l2=none", "dims"},
           {"tiled bf16 dims=64,+1 strides=16 box=8,1 elem=1,1 swizzle=none l2=none", "dims"},
           {"tiled bf16 dims=64,2 strides=- box=8,1 elem=1,1 swizzle=none l2=none", "strides"},
           {"tiled bf16 dims=64 strides=- box=8,1 elem=1 swizzle=none l2=none", "box"},
           {"tiled bf16 dims=64 strides=- box=8 elem= swizzle=none l2=none", "elem"},
           {"tiled bf16 dims=64 strides=- box=8 elem=1 swizzle=256B l2=none", "swizzle"},
           {"tiled bf16 dims=64 strides=- box=8 elem=1 swizzle=none l2=512B", "l2"},
           {"tiled bf16 dims=99999999999999999999 strides=- box=8 elem=1 swizzle=none l2=none",
            "dims"},
           {"tiled bf16 dims=64 strides=- box=8 elem=1 swizzle=none l2=none extra", "expected"},
       }) {
    auto spec = parse_tensor_map(c.text);
    ASSERT_FALSE(spec) << c.text;
    EXPECT_NE(spec.error().message.find(c.says), std::string::npos)
        << c.text << ": " << spec.error().message;
  }
}

TEST(TensorMap, TextPastTheLongestDescriptionIsRefusedUnread) {
  std::string huge = "tiled bf16 " + std::string(1 << 20, ' ');
  auto spec = parse_tensor_map(huge);
  ASSERT_FALSE(spec);
  EXPECT_NE(spec.error().message.find("longer than 512 characters"), std::string::npos);
  EXPECT_LT(spec.error().message.size(), 400u) << "the error quotes a bounded prefix";
}

TEST(TensorMap, EachDocumentedRuleIsEnforced) {
  TensorMapSpec good = *parse_tensor_map(k_text);
  ASSERT_TRUE(check_tensor_map(good));
  struct Case {
    void (*edit)(TensorMapSpec&);
    const char* rule;
  };
  for (const Case& c : std::initializer_list<Case>{
           {[](TensorMapSpec& s) { s.rank = 0; }, "rank must be 1 to 5"},
           {[](TensorMapSpec& s) { s.rank = 6; }, "rank must be 1 to 5"},
           {[](TensorMapSpec& s) { s.dims[1] = 0; }, "dims[1] must be 1 to 2^32"},
           {[](TensorMapSpec& s) { s.dims[0] = (uint64_t{1} << 32) + 1; }, "dims[0] must be 1 to 2^32"},
           {[](TensorMapSpec& s) { s.strides[0] = 8200; }, "strides[0] must be a multiple of 16"},
           {[](TensorMapSpec& s) { s.strides[0] = uint64_t{1} << 40; }, "below 2^40"},
           {[](TensorMapSpec& s) { s.box[1] = 257; }, "box[1] must be 1 to 256"},
           {[](TensorMapSpec& s) { s.box[1] = 0; }, "box[1] must be 1 to 256"},
           {[](TensorMapSpec& s) { s.box[0] = 60; }, "box[0] * element bytes must be a multiple of 16"},
           {[](TensorMapSpec& s) { s.element_strides[1] = 9; }, "elem[1] must be 1 to 8"},
           {[](TensorMapSpec& s) { s.element_strides[0] = 0; }, "elem[0] must be 1 to 8"},
           {[](TensorMapSpec& s) { s.box[0] = 72; }, "(144) must be within the 128-byte swizzle span"},
           {[](TensorMapSpec& s) { s.swizzle = TensorMapSwizzle::b64; }, "within the 64-byte swizzle span"},
           {[](TensorMapSpec& s) { s.swizzle = static_cast<TensorMapSwizzle>(9); }, "unknown swizzle"},
       }) {
    TensorMapSpec spec = good;
    c.edit(spec);
    Status s = check_tensor_map(spec);
    ASSERT_FALSE(s) << c.rule;
    EXPECT_NE(s.error().message.find(c.rule), std::string::npos) << s.error().message;
  }
  // Without a swizzle the inner box may pass 128 bytes; at 256 elements it is the largest box.
  TensorMapSpec wide = good;
  wide.swizzle = TensorMapSwizzle::none;
  wide.box[0] = 256;
  EXPECT_TRUE(check_tensor_map(wide));
}

TEST(TensorMap, ReachIsOnePastTheLastByte) {
  TensorMapSpec spec = *parse_tensor_map(k_text);
  EXPECT_EQ(tensor_map_extent(spec), 4095u * 8192 + 64 * 2);
  // A padded row stride: the last row ends at its last element, not at its padding.
  spec.strides[0] = 256;
  EXPECT_EQ(tensor_map_extent(spec), 4095u * 256 + 128);
  auto flat = parse_tensor_map("tiled f32 dims=100 strides=- box=4 elem=1 swizzle=none l2=none");
  EXPECT_EQ(tensor_map_extent(*flat), 400u);
  // The largest legal dims and strides saturate rather than wrap.
  TensorMapSpec huge = spec;
  huge.rank = 5;
  for (int i = 0; i < 5; ++i) huge.dims[i] = uint64_t{1} << 32;
  for (int i = 0; i < 4; ++i) huge.strides[i] = (uint64_t{1} << 40) - 16;
  EXPECT_EQ(tensor_map_extent(huge), UINT64_MAX);
}

}  // namespace
}  // namespace kiln::compiler
