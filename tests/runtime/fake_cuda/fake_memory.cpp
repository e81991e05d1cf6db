// The fake libcuda: allocations, stream-ordered pools and frees, synchronous copies.
#include "fake_state.h"

#include <cstdlib>
#include <cstring>
#include <utility>

using namespace kiln::fake_cuda;
using namespace kiln::fake_cuda::detail;

extern "C" {

int cuMemAlloc_v2(unsigned long long* pointer, size_t bytes) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!pointer || bytes == 0) return k_invalid_value;
  if (int r = check_capture_safe(s)) return r;
  *pointer = allocate(s, bytes, c, false);
  return k_success;
}

int cuMemFree_v2(unsigned long long pointer) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (int r = check_capture_safe(s)) return r;
  auto it = s.allocations.find(static_cast<uintptr_t>(pointer));
  if (it == s.allocations.end() || it->second.pending_free) return k_invalid_value;
  s.events.push_back(tag("free", c));
  release(s, it);
  return k_success;
}

int cuMemPoolCreate(void** pool, const void* properties) {
  FAKE_LOCK;
  if (!pool || !properties) return k_invalid_value;
  // CUmemPoolProps: allocType, handleTypes, location {type, id}, win32 attributes, maxSize,
  // usage, reserved[54]; 88 bytes.
  auto* bytes = static_cast<const unsigned char*>(properties);
  int alloc_type, handle_types, location_type, device;
  std::memcpy(&alloc_type, bytes, 4);
  std::memcpy(&handle_types, bytes + 4, 4);
  std::memcpy(&location_type, bytes + 8, 4);
  std::memcpy(&device, bytes + 12, 4);
  for (int i = 16; i < 88; ++i) {  // Windows attributes and reserved bytes must be zero
    if (bytes[i] && (i < 24 || i >= 34)) return k_invalid_value;
  }
  if (alloc_type != 1 || handle_types != 0 || location_type != 1) return k_invalid_value;
  if (!valid_device(s, device)) return k_invalid_value;
  if (!s.config.memory_pools) return k_not_supported;
  if (int r = check_capture_safe(s)) return r;
  auto created = std::make_unique<Pool>();
  created->device = device;
  *pool = created.get();
  s.pools.push_back(std::move(created));
  return k_success;
}

int cuMemPoolSetAttribute(void* pool, int attribute, void* value) {
  FAKE_LOCK;
  Pool* p = find_pool(s, pool);
  if (!p || !value) return k_invalid_value;
  if (attribute != 4) return k_invalid_value;  // only CU_MEMPOOL_ATTR_RELEASE_THRESHOLD modelled
  std::memcpy(&p->release_threshold, value, sizeof p->release_threshold);
  return k_success;
}

int cuMemAllocFromPoolAsync(unsigned long long* pointer, size_t bytes, void* pool, void* stream) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Pool* p = find_pool(s, pool);
  if (!pointer || bytes == 0 || !p) return k_invalid_value;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (p->device != c->device) return k_invalid_value;
  *pointer = allocate(s, bytes, c, true);
  bool captured = target && target->capture_mode >= 0;
  s.events.push_back(tag(captured ? "alloc_async captured" : "alloc_async", c));
  return k_success;
}

int cuMemFreeAsync(unsigned long long pointer, void* stream) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  auto it = s.allocations.find(static_cast<uintptr_t>(pointer));
  if (it == s.allocations.end() || it->second.pending_free) return k_invalid_value;
  s.events.push_back(tag("free_async", c));
  if (!target) {  // the legacy stream: the fake's work is done once the call returns
    release(s, it);
    return k_success;
  }
  it->second.pending_free = target;
  return k_success;
}

int cuMemcpyHtoD_v2(unsigned long long device, const void* host, size_t bytes) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (int r = check_capture_safe(s)) return r;
  if (!find_allocation(s, device, bytes)) return k_invalid_value;
  std::memcpy(reinterpret_cast<void*>(device), host, bytes);
  return k_success;
}

int cuMemcpyDtoH_v2(void* host, unsigned long long device, size_t bytes) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (int r = check_capture_safe(s)) return r;
  if (!find_allocation(s, device, bytes)) return k_invalid_value;
  std::memcpy(host, reinterpret_cast<const void*>(device), bytes);
  return k_success;
}

}  // extern "C"
