// The matmul kernels' shared-memory swizzles (compiler/tile.h, SmemTile::swizzled) against a second
// source, CuTe's Swizzle<B, M, S> functor, for every tile of every candidate schedule; and the
// property they exist for: the 8 row addresses of one ldmatrix 8x8 matrix land in 8 different
// 16-byte bank groups, at every chunk of every tile.
#include "compiler/schedule.h"
#include "cute_layouts.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace kiln::emulation {
namespace {

using compiler::MatmulPath;
using compiler::MatmulShape;
using compiler::MatmulTile;
using compiler::SmemTile;

// Every swizzled operand tile a candidate schedule uses on `sm`, for every tensor-core path and
// both orientations of each operand.
std::vector<SmemTile> swizzled_tiles(int sm) {
  std::vector<SmemTile> out;
  for (MatmulPath path : {MatmulPath::tf32, MatmulPath::tf32x3, MatmulPath::bf16_of_f32,
                          MatmulPath::f16, MatmulPath::bf16}) {
    for (bool ka : {true, false}) {
      for (bool kb : {true, false}) {
        MatmulShape s;
        s.m = s.n = s.k = s.lda = s.ldb = 4096;
        s.path = path;
        s.elem_bytes = path == MatmulPath::f16 || path == MatmulPath::bf16 ? 2 : 4;
        s.a_k_contiguous = ka;
        s.b_k_contiguous = kb;
        for (const MatmulTile& t : compiler::candidate_tiles(s, sm)) {
          compiler::SmemLayout layout = compiler::smem_layout(t, s);
          for (const SmemTile& tile : {layout.a, layout.b})
            if (tile.swizzle_bits > 0) out.push_back(tile);
        }
      }
    }
  }
  return out;
}

std::string describe(const SmemTile& t) {
  return std::to_string(t.rows) + "x" + std::to_string(t.cols) + " of " +
         std::to_string(t.elem_bytes) + "-byte elements, Swizzle<" +
         std::to_string(t.swizzle_bits) + ", " + std::to_string(t.chunk_shift()) + ", " +
         std::to_string(t.swizzle_shift) + ">";
}

TEST(SharedMemorySwizzle, EveryCandidateTilesSwizzleIsCutesFunctor) {
  std::vector<SmemTile> tiles = swizzled_tiles(90);
  ASSERT_FALSE(tiles.empty());
  if (testing::cute_swizzle(3, 3, 3, 1).empty()) {
    GTEST_SKIP() << "built without the CUTLASS headers";
  }
  std::set<std::string> seen;
  for (const SmemTile& t : tiles) {
    if (!seen.insert(describe(t)).second) continue;
    int count = t.rows * t.cols;
    std::vector<int> cute =
        testing::cute_swizzle(t.swizzle_bits, t.chunk_shift(), t.swizzle_shift, count);
    ASSERT_EQ(cute.size(), static_cast<size_t>(count)) << describe(t);
    int wrong = 0;
    for (int o = 0; o < count; ++o) wrong += t.swizzled(o) != cute[static_cast<size_t>(o)];
    EXPECT_EQ(wrong, 0) << describe(t);
  }
  EXPECT_GE(seen.size(), 4u);
}

// The 16-byte bank group (of 8 in 128 bytes) that element offset `o` of `t` lands in.
int bank_group(const SmemTile& t, int o) {
  return static_cast<int>(t.swizzled(o) * t.elem_bytes / 16 % 8);
}

TEST(SharedMemorySwizzle, EveryLdmatrixMatrixReadsEightBankGroups) {
  for (int sm : {80, 90}) {
    for (const SmemTile& t : swizzled_tiles(sm)) {
      ASSERT_EQ(t.ld, t.cols) << describe(t);
      int chunk_elems = 16 / t.elem_bytes;
      for (int r0 = 0; r0 + 8 <= t.rows; r0 += 8) {
        for (int c = 0; c < t.cols; c += chunk_elems) {
          std::set<int> groups;
          for (int r = r0; r < r0 + 8; ++r) groups.insert(bank_group(t, r * t.ld + c));
          ASSERT_EQ(groups.size(), 8u) << describe(t) << " rows " << r0 << ".. chunk " << c;
        }
      }
      // A permutation of each row's chunks: nothing lost, nothing shared.
      std::set<int64_t> places;
      for (int o = 0; o < t.rows * t.cols; ++o) places.insert(t.swizzled(o));
      ASSERT_EQ(places.size(), static_cast<size_t>(t.rows * t.cols)) << describe(t);
      ASSERT_LT(*places.rbegin(), t.rows * t.cols) << describe(t);
    }
  }
}

TEST(SharedMemorySwizzle, WithoutTheSwizzleTheSameReadsConflict) {
  // The check has teeth: unswizzled rows of 64 or more bytes put two rows of a matrix in one
  // bank group.
  int conflicted = 0;
  for (SmemTile t : swizzled_tiles(90)) {
    t.swizzle_bits = 0;
    std::set<int> groups;
    for (int r = 0; r < 8; ++r) groups.insert(bank_group(t, r * t.ld));
    conflicted += groups.size() < 8;
  }
  EXPECT_GT(conflicted, 0);
}

}  // namespace
}  // namespace kiln::emulation
