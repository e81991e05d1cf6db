// kiln's own stream-ordered memory pool per device, for the temporaries of each run.
#pragma once

#include "runtime/driver.h"

namespace kiln::runtime {

// Device `device`'s pool for temporaries, created on first use and kept for the process. Freed
// temporaries stay reserved in it for the next run (release threshold: unlimited, like
// PyTorch's caching allocator), and the application's default pool is left as it was. Fails
// with the driver's message, e.g. on a device without memory pools.
Expected<CuMemPool> temporaries_pool(const DriverApi& api, int device);

}  // namespace kiln::runtime
