// CuTe's sm_90 GMMA traits, smem layouts and descriptors read into plain tables on the host.
#include "cute_gmma.h"

#ifdef KILN_HAVE_CUTE
#include <cstddef>
#include <type_traits>

// make_gmma_desc asks the device for a pointer's shared-memory address (cvta). On the host the
// buffer below stands for a block's shared memory, and an address is the offset into it; it is
// 1024-aligned, so CuTe's swizzle, which acts on the pointer's own bits, acts on the offset's.
#define CUTE_CVTA_GENERIC_TO_SHARED_ACTIVATED 1
namespace kiln::emulation::testing {
alignas(1024) const unsigned char g_cute_smem[1 << 16] = {};
}  // namespace kiln::emulation::testing
inline std::size_t __cvta_generic_to_shared(const void* p) {
  return static_cast<std::size_t>(static_cast<const unsigned char*>(p) -
                                  kiln::emulation::testing::g_cute_smem);
}

// CUTLASS's headers are not written for -Wextra on the host (every asm operand of an sm_90 atom is
// an unused parameter there).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-local-typedefs"
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#pragma GCC diagnostic pop
#endif

namespace kiln::emulation::testing {

#ifdef KILN_HAVE_CUTE
namespace {

using namespace cute;
namespace gmma = cute::SM90::GMMA;

constexpr int k_base_a = 8192;   // A: 64 x 64 x 2 bytes at [8 KiB, 16 KiB)
constexpr int k_base_b = 16384;  // B: up to 256 x 64 x 2 bytes at [16 KiB, 48 KiB)

// The mainloop's smem layout for one stage: (rows, 64, 1).
template <gmma::Major Major, bool KFirst, int Rows>
auto smem_layout() {
  auto shape = make_shape(Int<Rows>{}, Int<64>{}, Int<1>{});
  if constexpr (Major == gmma::Major::K)
    return tile_to_shape(gmma::Layout_K_SW128_Atom<bfloat16_t>{}, shape, Step<_1, _2, _3>{});
  else if constexpr (KFirst)
    return tile_to_shape(gmma::Layout_MN_SW128_Atom<bfloat16_t>{}, shape, Step<_2, _1, _3>{});
  else
    return tile_to_shape(gmma::Layout_MN_SW128_Atom<bfloat16_t>{}, shape, Step<_1, _2, _3>{});
}

// The addresses of a tile's elements and the descriptors of its k blocks, as the fragment
// (MMA, MMA_M|N, MMA_K, PIPE) that make_fragment_A/B builds over it holds them.
template <class Tensor, class Fragment>
CuteGmmaOperand operand(const Tensor& smem, const Fragment& frag, bool mn_major, bool k_first,
                        int base) {
  CuteGmmaOperand o;
  o.mn_major = mn_major;
  o.k_first = k_first;
  o.rows = static_cast<int>(size<0>(smem));
  o.cols = static_cast<int>(size<1>(smem));
  o.base = base;
  for (int r = 0; r < o.rows; ++r) {
    for (int c = 0; c < o.cols; ++c) {
      const auto* p = reinterpret_cast<const unsigned char*>(&smem(r, c, 0));
      o.address.push_back(static_cast<int>(p - g_cute_smem));
    }
  }
  static_assert(decltype(size<1>(frag))::value == 1, "one atom along M|N");
  for (int kb = 0; kb < static_cast<int>(size<2>(frag)); ++kb) {
    cute::GmmaDescriptor desc = frag(0, 0, kb, 0);
    o.desc.push_back(desc.desc_);
  }
  return o;
}

// SM90_64xNx16_F32BF16BF16_SS, N 128 or 256.
template <int N, gmma::Major MajorB, gmma::Major MajorA = gmma::Major::K>
using Atom = std::conditional_t<N == 128, SM90_64x128x16_F32BF16BF16_SS<MajorA, MajorB>,
                                SM90_64x256x16_F32BF16BF16_SS<MajorA, MajorB>>;

const char* name(int n) {
  return n == 128 ? "SM90_64x128x16_F32BF16BF16_SS" : "SM90_64x256x16_F32BF16BF16_SS";
}

template <int N, gmma::Major MajorB, bool KFirst, gmma::Major MajorA = gmma::Major::K>
CuteGmmaCase gmma_case(const char* b_layout) {
  using Op = Atom<N, MajorB, MajorA>;
  auto tiled_mma = make_tiled_mma(Op{});
  auto thread_mma = tiled_mma.get_slice(0);
  auto s_a = make_tensor(make_smem_ptr(reinterpret_cast<const bfloat16_t*>(g_cute_smem + k_base_a)),
                         smem_layout<MajorA, true, 64>());
  auto s_b = make_tensor(make_smem_ptr(reinterpret_cast<const bfloat16_t*>(g_cute_smem + k_base_b)),
                         smem_layout<MajorB, KFirst, N>());
  auto frag_a = thread_mma.make_fragment_A(thread_mma.partition_A(s_a));
  auto frag_b = thread_mma.make_fragment_B(thread_mma.partition_B(s_b));
  CuteGmmaCase c;
  c.name = std::string(name(N)) + (MajorA == gmma::Major::MN ? ", A MN-major" : "") + ", B " +
            b_layout;
  c.n = N;
  c.a = operand(s_a, frag_a, MajorA == gmma::Major::MN, true, k_base_a);
  c.b = operand(s_b, frag_b, MajorB == gmma::Major::MN, KFirst, k_base_b);
  return c;
}

// SM90_64xNx8_F32TF32TF32_SS_TN, N 64 or 128: A 64 x 32 at k_base_a, B N x 32 at k_base_b, both
// tile_to_shape of Layout_K_SW128_Atom<tfloat32_t> (one 128-byte row holds a row's 32 values).
template <int N>
CuteGmmaCase tf32_case() {
  using Op = std::conditional_t<N == 64, SM90_64x64x8_F32TF32TF32_SS_TN<>,
                                SM90_64x128x8_F32TF32TF32_SS_TN<>>;
  auto tiled_mma = make_tiled_mma(Op{});
  auto thread_mma = tiled_mma.get_slice(0);
  auto layout = [](auto rows) {
    return tile_to_shape(gmma::Layout_K_SW128_Atom<tfloat32_t>{},
                         make_shape(rows, Int<32>{}, Int<1>{}), Step<_1, _2, _3>{});
  };
  auto s_a = make_tensor(make_smem_ptr(reinterpret_cast<const tfloat32_t*>(g_cute_smem + k_base_a)),
                         layout(Int<64>{}));
  auto s_b = make_tensor(make_smem_ptr(reinterpret_cast<const tfloat32_t*>(g_cute_smem + k_base_b)),
                         layout(Int<N>{}));
  auto frag_a = thread_mma.make_fragment_A(thread_mma.partition_A(s_a));
  auto frag_b = thread_mma.make_fragment_B(thread_mma.partition_B(s_b));
  CuteGmmaCase c;
  c.name = N == 64 ? "SM90_64x64x8_F32TF32TF32_SS_TN" : "SM90_64x128x8_F32TF32TF32_SS_TN";
  c.n = N;
  c.a = operand(s_a, frag_a, false, true, k_base_a);
  c.b = operand(s_b, frag_b, false, true, k_base_b);
  return c;
}

// CLayout maps (thread, value) to m + 64 n.
template <int N>
CuteGmmaAccumulator accumulator() {
  typename MMA_Traits<Atom<N, gmma::Major::K>>::CLayout layout;
  CuteGmmaAccumulator a;
  a.name = name(N);
  a.n = N;
  for (int t = 0; t < 128; ++t) {
    for (int v = 0; v < N / 2; ++v) {
      int i = static_cast<int>(layout(t, v));
      a.c.push_back({i % 64, i / 64});
    }
  }
  return a;
}

// ALayout maps (thread, value) to m + 64 k; an RS atom's B is a descriptor, its A a fragment of
// `Values` values a thread (8 of 16 bits, 4 of tf32).
template <class Op, int Values = 8>
CuteGmmaRegisterA register_a(const char* name, int n, bool bf16) {
  using Traits = MMA_Traits<Op>;
  static_assert(std::is_same_v<typename Traits::FrgTypeB, gmma::smem_desc<gmma::Major::K>>,
                "B from shared memory");
  static_assert(decltype(size<1>(typename Traits::ALayout{}))::value == Values,
                "the A values a thread holds");
  typename Traits::ALayout layout;
  CuteGmmaRegisterA r;
  r.name = name;
  r.n = n;
  r.bf16 = bf16;
  for (int t = 0; t < 128; ++t) {
    for (int v = 0; v < Values; ++v) {
      int i = static_cast<int>(layout(t, v));
      r.a.push_back({i % 64, i / 64});
    }
  }
  typename Traits::CLayout c_layout;
  for (int t = 0; t < 128; ++t) {
    for (int v = 0; v < n / 2; ++v) {
      int i = static_cast<int>(c_layout(t, v));
      r.c.push_back({i % 64, i / 64});
    }
  }
  return r;
}

}  // namespace

std::vector<CuteGmmaCase> cute_gmma_cases() {
  using gmma::Major;
  return {gmma_case<128, Major::K, true>("K-major"),
          gmma_case<128, Major::MN, true>("MN-major, k groups first"),
          gmma_case<128, Major::MN, false>("MN-major, runs first"),
          gmma_case<256, Major::K, true>("K-major"),
          gmma_case<256, Major::MN, true>("MN-major, k groups first"),
          gmma_case<128, Major::K, true, Major::MN>("K-major"),
          gmma_case<128, Major::MN, true, Major::MN>("MN-major, k groups first")};
}

std::vector<CuteGmmaCase> cute_gmma_cases_tf32() { return {tf32_case<64>(), tf32_case<128>()}; }

std::vector<CuteGmmaAccumulator> cute_gmma_accumulators() {
  return {accumulator<128>(), accumulator<256>()};
}

std::vector<CuteGmmaRegisterA> cute_gmma_register_a() {
  using gmma::Major;
  return {register_a<SM90_64x64x16_F32BF16BF16_RS<Major::K, Major::K>>(
              "SM90_64x64x16_F32BF16BF16_RS", 64, true),
          register_a<SM90_64x128x16_F32BF16BF16_RS<Major::K, Major::K>>(
              "SM90_64x128x16_F32BF16BF16_RS", 128, true),
          register_a<SM90_64x64x16_F32F16F16_RS<Major::K, Major::K>>(
              "SM90_64x64x16_F32F16F16_RS", 64, false),
          register_a<SM90_64x128x16_F32F16F16_RS<Major::K, Major::K>>(
              "SM90_64x128x16_F32F16F16_RS", 128, false),
          register_a<SM90_64x192x16_F32BF16BF16_RS<Major::K, Major::K>>(
              "SM90_64x192x16_F32BF16BF16_RS", 192, true),
          register_a<SM90_64x256x16_F32BF16BF16_RS<Major::K, Major::K>>(
              "SM90_64x256x16_F32BF16BF16_RS", 256, true),
          register_a<SM90_64x192x16_F32F16F16_RS<Major::K, Major::K>>(
              "SM90_64x192x16_F32F16F16_RS", 192, false),
          register_a<SM90_64x256x16_F32F16F16_RS<Major::K, Major::K>>(
              "SM90_64x256x16_F32F16F16_RS", 256, false)};
}

std::vector<CuteGmmaRegisterA> cute_gmma_register_a_tf32() {
  return {register_a<SM90_64x64x8_F32TF32TF32_RS_TN<>, 4>("SM90_64x64x8_F32TF32TF32_RS_TN", 64,
                                                           false),
          register_a<SM90_64x128x8_F32TF32TF32_RS_TN<>, 4>("SM90_64x128x8_F32TF32TF32_RS_TN", 128,
                                                            false)};
}
#else
std::vector<CuteGmmaCase> cute_gmma_cases_tf32() { return {}; }
std::vector<CuteGmmaRegisterA> cute_gmma_register_a_tf32() { return {}; }
std::vector<CuteGmmaCase> cute_gmma_cases() { return {}; }
std::vector<CuteGmmaAccumulator> cute_gmma_accumulators() { return {}; }
std::vector<CuteGmmaRegisterA> cute_gmma_register_a() { return {}; }
#endif

}  // namespace kiln::emulation::testing
