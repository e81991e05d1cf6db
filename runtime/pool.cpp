// One memory pool per device for temporaries, with an unlimited release threshold.
#include "runtime/pool.h"

#include <cstdint>
#include <map>
#include <mutex>

namespace kiln::runtime {

Expected<CuMemPool> temporaries_pool(const DriverApi& api, int device) {
  static auto* mutex = new std::mutex;  // never destroyed, as the pools themselves
  static auto* pools = new std::map<int, CuMemPool>;
  std::lock_guard lock(*mutex);
  if (auto it = pools->find(device); it != pools->end()) return it->second;
  CuMemPoolProps properties;
  properties.location_id = device;
  CuMemPool pool = nullptr;
  if (CuResult r = api.mem_pool_create(&pool, &properties); r != 0) {
    return driver_error(api, "cuMemPoolCreate (temporaries)", r);
  }
  uint64_t keep = UINT64_MAX;
  if (CuResult r = api.mem_pool_set_attribute(pool, k_pool_attr_release_threshold, &keep);
      r != 0) {
    return driver_error(api, "cuMemPoolSetAttribute (release threshold)", r);
  }
  pools->emplace(device, pool);
  return pool;
}

}  // namespace kiln::runtime
