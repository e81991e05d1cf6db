// CuTe's MMA_Traits read into plain tables: (thread, value) -> index into the column-major M x K,
// N x K and M x N tiles, split into row and column.
#include "cute_layouts.h"

#ifdef KILN_HAVE_CUTE
#include <cute/atom/copy_traits_sm75.hpp>
#include <cute/atom/mma_traits_sm75.hpp>
#include <cute/atom/mma_traits_sm80.hpp>
#include <cute/swizzle.hpp>
#endif

namespace kiln::emulation::testing {

#ifdef KILN_HAVE_CUTE
namespace {

// Layout (thread, value) -> i over a column-major tile of `rows`; `transposed` swaps row and
// column (B is indexed N x K by CuTe, k x n here).
template <class Layout>
std::vector<Place> places(Layout layout, int rows, bool transposed) {
  std::vector<Place> out;
  int values = static_cast<int>(cute::size<1>(layout));
  for (int t = 0; t < 32; ++t) {
    for (int v = 0; v < values; ++v) {
      int i = static_cast<int>(layout(t, v));
      Place p{i % rows, i / rows};
      if (transposed) p = {p.col, p.row};
      out.push_back(p);
    }
  }
  return out;
}

template <class Op>
CuteAtom atom(const char* name) {
  using Traits = cute::MMA_Traits<Op>;
  using Shape = typename Traits::Shape_MNK;
  CuteAtom a;
  a.name = name;
  a.m = static_cast<int>(cute::size<0>(Shape{}));
  a.n = static_cast<int>(cute::size<1>(Shape{}));
  a.k = static_cast<int>(cute::size<2>(Shape{}));
  a.a = places(typename Traits::ALayout{}, a.m, false);
  a.b = places(typename Traits::BLayout{}, a.n, true);
  a.c = places(typename Traits::CLayout{}, a.m, false);
  return a;
}

// Copy_Traits map (thread, value) to a bit of the stacked matrices, 128 bits a row: the source
// value 0 of a thread is the first bit of the row it addresses; destination value
// 32 * register + 16 * half is the first bit of that 16-bit element.
template <class Op>
CuteCopy copy(const char* name, int matrices, bool trans) {
  using Traits = cute::Copy_Traits<Op>;
  typename Traits::SrcLayout src{};
  typename Traits::DstLayout dst{};
  CuteCopy c;
  c.name = name;
  c.matrices = matrices;
  c.trans = trans;
  for (int t = 0; t < 32; ++t) {
    c.src_row.push_back(static_cast<int>(src(t, 0)) / 128);
    for (int r = 0; r < matrices; ++r) {
      for (int h = 0; h < 2; ++h) {
        int bit = static_cast<int>(dst(t, 32 * r + 16 * h));
        c.dst.push_back({bit / 128, (bit % 128) / 16});
      }
    }
  }
  return c;
}

}  // namespace

std::vector<CuteCopy> cute_copies() {
  return {copy<cute::SM75_U32x1_LDSM_N>("SM75_U32x1_LDSM_N", 1, false),
          copy<cute::SM75_U32x2_LDSM_N>("SM75_U32x2_LDSM_N", 2, false),
          copy<cute::SM75_U32x4_LDSM_N>("SM75_U32x4_LDSM_N", 4, false),
          copy<cute::SM75_U16x2_LDSM_T>("SM75_U16x2_LDSM_T", 1, true),
          copy<cute::SM75_U16x4_LDSM_T>("SM75_U16x4_LDSM_T", 2, true),
          copy<cute::SM75_U16x8_LDSM_T>("SM75_U16x8_LDSM_T", 4, true)};
}

std::vector<CuteAtom> cute_atoms() {
  return {atom<cute::SM80_16x8x8_F32TF32TF32F32_TN>("SM80_16x8x8_F32TF32TF32F32_TN"),
          atom<cute::SM80_16x8x16_F32BF16BF16F32_TN>("SM80_16x8x16_F32BF16BF16F32_TN"),
          atom<cute::SM80_16x8x16_F32F16F16F32_TN>("SM80_16x8x16_F32F16F16F32_TN"),
          atom<cute::SM75_16x8x8_F32F16F16F32_TN>("SM75_16x8x8_F32F16F16F32_TN")};
}
#else
std::vector<CuteAtom> cute_atoms() { return {}; }
std::vector<CuteCopy> cute_copies() { return {}; }
#endif

#ifdef KILN_HAVE_CUTE
namespace {

template <int B, int M, int S>
std::vector<int> apply_swizzle(int count) {
  cute::Swizzle<B, M, S> swizzle;
  std::vector<int> out;
  for (int o = 0; o < count; ++o) out.push_back(static_cast<int>(swizzle(o)));
  return out;
}

template <int B, int M, int S>
std::vector<int> swizzle_for(int b, int m, int s, int count) {
  if (b == B && m == M && s == S) return apply_swizzle<B, M, S>(count);
  if constexpr (S < 7) return swizzle_for<B, M, S + 1>(b, m, s, count);
  else if constexpr (M < 4) return swizzle_for<B, M + 1, 3>(b, m, s, count);
  else if constexpr (B < 3) return swizzle_for<B + 1, 2, 3>(b, m, s, count);
  else return {};
}

}  // namespace

std::vector<int> cute_swizzle(int b, int m, int s, int count) {
  return swizzle_for<0, 2, 3>(b, m, s, count);
}
#else
std::vector<int> cute_swizzle(int, int, int, int) { return {}; }
#endif

}  // namespace kiln::emulation::testing
