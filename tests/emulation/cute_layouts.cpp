// CuTe's MMA_Traits read into plain tables: (thread, value) -> index into the column-major M x K,
// N x K and M x N tiles, split into row and column.
#include "cute_layouts.h"

#ifdef KILN_HAVE_CUTE
#include <cute/atom/mma_traits_sm75.hpp>
#include <cute/atom/mma_traits_sm80.hpp>
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

}  // namespace

std::vector<CuteAtom> cute_atoms() {
  return {atom<cute::SM80_16x8x8_F32TF32TF32F32_TN>("SM80_16x8x8_F32TF32TF32F32_TN"),
          atom<cute::SM80_16x8x16_F32BF16BF16F32_TN>("SM80_16x8x16_F32BF16BF16F32_TN"),
          atom<cute::SM80_16x8x16_F32F16F16F32_TN>("SM80_16x8x16_F32F16F16F32_TN"),
          atom<cute::SM75_16x8x8_F32F16F16F32_TN>("SM75_16x8x8_F32F16F16F32_TN")};
}
#else
std::vector<CuteAtom> cute_atoms() { return {}; }
#endif

}  // namespace kiln::emulation::testing
