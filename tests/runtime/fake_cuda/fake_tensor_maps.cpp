// cuTensorMapEncodeTiled as the CUDA 13.0 driver documents it (cuda.h): each documented rule on
// the arguments answers CUDA_ERROR_INVALID_VALUE; a map that passes is written as the fake's own
// 128 bytes, which cuLaunchKernel reads back (tensor_map_fault) to check what a kernel given it
// could reach.
#include "fake_state.h"

#include <cstring>

namespace kiln::fake_cuda::detail {

namespace {

constexpr uint64_t k_map_magic = 0x50414d544b4146ull;  // "FAKTMAP"

// The fake's CUtensorMap: 96 of its 128 bytes.
struct FakeMap {
  uint64_t magic;
  uint64_t address;
  uint32_t rank;
  uint32_t element;
  uint64_t dims[5];
  uint64_t strides[4];
};
static_assert(sizeof(FakeMap) <= 128);

// Bytes of each CUtensorMapDataType up to TFLOAT32_FTZ (12); the packed types are not modelled.
int element_size(int type) {
  static const int sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return type >= 0 && type < 13 ? sizes[type] : 0;
}

}  // namespace

int tensor_map_fault(State& s, const void* bytes, const Context* c, uint64_t* address) {
  FakeMap map;
  std::memcpy(&map, bytes, sizeof map);
  *address = 0;
  if (map.magic != k_map_magic || map.rank < 1 || map.rank > 5) return k_illegal_address;
  *address = map.address;
  // The byte past the last element the map describes, from its base.
  uint64_t reach = map.dims[0] * map.element;
  for (uint32_t i = 1; i < map.rank; ++i) {
    uint64_t step = (map.dims[i] - 1) * map.strides[i - 1];
    if (map.strides[i - 1] && step / map.strides[i - 1] != map.dims[i] - 1) return k_illegal_address;
    if (reach + step < reach) return k_illegal_address;
    reach += step;
  }
  const Allocation* a = find_allocation(s, map.address, reach);
  if (!a || a->context->device != c->device) return k_illegal_address;
  return k_success;
}

}  // namespace kiln::fake_cuda::detail

using namespace kiln::fake_cuda;
using namespace kiln::fake_cuda::detail;

extern "C" {

int cuTensorMapEncodeTiled(void* tensor_map, int type, unsigned rank, void* address,
                           const unsigned long long* dims, const unsigned long long* strides,
                           const unsigned* box, const unsigned* element_strides, int interleave,
                           int swizzle, int l2, int oob_fill) {
  FAKE_LOCK;
  (void)s;
  uintptr_t at = reinterpret_cast<uintptr_t>(address);
  int element = element_size(type);
  if (!tensor_map || reinterpret_cast<uintptr_t>(tensor_map) % 64 || !element) return k_invalid_value;
  if (rank < 1 || rank > 5 || interleave < 0 || interleave > 2 || (interleave && rank < 3))
    return k_invalid_value;
  if (at % 16 || (interleave == 2 && at % 32)) return k_invalid_value;
  if (!dims || !box || !element_strides || (rank > 1 && !strides)) return k_invalid_value;
  for (unsigned i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32)) return k_invalid_value;
    if (box[i] == 0 || box[i] > 256) return k_invalid_value;
    if (element_strides[i] == 0 || element_strides[i] > 8) return k_invalid_value;
  }
  for (unsigned i = 0; i + 1 < rank; ++i) {
    if (strides[i] % (interleave == 2 ? 32 : 16) || strides[i] >= (1ull << 40)) return k_invalid_value;
  }
  unsigned inner = box[0] * static_cast<unsigned>(element);
  if (interleave == 0 && inner % 16) return k_invalid_value;
  // CU_TENSOR_MAP_SWIZZLE_NONE, 32B, 64B, 128B and the three 128B-span atoms (4..6).
  if (swizzle < 0 || swizzle > 6) return k_invalid_value;
  static const unsigned spans[] = {0, 32, 64, 128, 128, 128, 128};
  if (interleave == 0 && swizzle && inner > spans[swizzle]) return k_invalid_value;
  if (interleave == 2 && swizzle != 1) return k_invalid_value;
  if (l2 < 0 || l2 > 3 || oob_fill < 0 || oob_fill > 1) return k_invalid_value;
  // NaN fill needs a floating-point type (f16, f32, f64, bf16 and the f32/tf32 variants).
  if (oob_fill == 1 && type < 6) return k_invalid_value;
  FakeMap map{};
  map.magic = k_map_magic;
  map.address = at;
  map.rank = rank;
  map.element = static_cast<uint32_t>(element);
  for (unsigned i = 0; i < rank; ++i) map.dims[i] = dims[i];
  for (unsigned i = 0; i + 1 < rank; ++i) map.strides[i] = strides[i];
  std::memset(tensor_map, 0, 128);
  std::memcpy(tensor_map, &map, sizeof map);
  return k_success;
}

}  // extern "C"
