// The CUDA driver API, loaded at run time (libcuda.so.1): no link-time dependency on CUDA.
#pragma once

#include "support/expected.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::runtime {

using CuResult = int;
using CuDevice = int;
using CuDevicePtr = unsigned long long;
struct CuContextSt;
struct CuModuleSt;
struct CuFunctionSt;
struct CuStreamSt;
using CuContext = CuContextSt*;
using CuModule = CuModuleSt*;
using CuFunction = CuFunctionSt*;
using CuStream = CuStreamSt*;
struct CuMemPoolSt;
using CuMemPool = CuMemPoolSt*;
struct CuEventSt;
using CuEvent = CuEventSt*;

// CUmemPoolProps (cuda.h, unchanged in size since CUDA 11.2): a pinned device pool, no export.
struct CuMemPoolProps {
  int alloc_type = 1;     // CU_MEM_ALLOCATION_TYPE_PINNED
  int handle_types = 0;   // CU_MEM_HANDLE_TYPE_NONE
  int location_type = 1;  // CU_MEM_LOCATION_TYPE_DEVICE
  int location_id = 0;    // the device ordinal
  void* win32_security_attributes = nullptr;
  size_t max_size = 0;    // 0: the system's default
  unsigned short usage = 0;
  unsigned char reserved[54] = {};
};
static_assert(sizeof(CuMemPoolProps) == 88, "CUmemPoolProps is 88 bytes");

// Entry points resolved from libcuda; the names match the driver API (the _v2 variants where
// the driver exports them).
struct DriverApi {
  CuResult (*init)(unsigned);
  CuResult (*driver_get_version)(int*);
  CuResult (*device_get_count)(int*);
  CuResult (*device_get)(CuDevice*, int);
  CuResult (*device_get_attribute)(int*, int, CuDevice);
  CuResult (*primary_ctx_retain)(CuContext*, CuDevice);
  CuResult (*ctx_get_current)(CuContext*);
  CuResult (*ctx_push_current)(CuContext);
  CuResult (*ctx_pop_current)(CuContext*);
  CuResult (*ctx_get_id)(CuContext, unsigned long long*);
  CuResult (*ctx_get_device)(CuDevice*);
  CuResult (*ctx_synchronize)();
  CuResult (*module_load_data)(CuModule*, const void*);
  CuResult (*module_unload)(CuModule);
  CuResult (*module_get_function)(CuFunction*, CuModule, const char*);
  CuResult (*func_set_attribute)(CuFunction, int, int);
  CuResult (*launch_kernel)(CuFunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CuStream, void**, void**);
  CuResult (*mem_alloc)(CuDevicePtr*, size_t);
  CuResult (*mem_free)(CuDevicePtr);
  CuResult (*mem_pool_create)(CuMemPool*, const CuMemPoolProps*);
  CuResult (*mem_pool_set_attribute)(CuMemPool, int, void*);
  CuResult (*mem_alloc_from_pool_async)(CuDevicePtr*, size_t, CuMemPool, CuStream);
  CuResult (*mem_free_async)(CuDevicePtr, CuStream);
  CuResult (*memcpy_htod)(CuDevicePtr, const void*, size_t);
  CuResult (*memcpy_dtoh)(void*, CuDevicePtr, size_t);
  CuResult (*stream_synchronize)(CuStream);
  CuResult (*stream_get_ctx)(CuStream, CuContext*);
  CuResult (*stream_is_capturing)(CuStream, int*);
  CuResult (*thread_exchange_capture_mode)(int*);
  CuResult (*get_error_string)(CuResult, const char**);
  // Device identity and timing (the tuner's).
  CuResult (*device_get_name)(char*, int, CuDevice);
  CuResult (*event_create)(CuEvent*, unsigned);
  CuResult (*event_record)(CuEvent, CuStream);
  CuResult (*event_synchronize)(CuEvent);
  CuResult (*event_elapsed_time)(float*, CuEvent, CuEvent);  // _v2 where exported
  CuResult (*event_destroy)(CuEvent);
  // TMA (sm_90a): a 128-byte CUtensorMap from a compiler::TensorMapSpec and an address; the enums
  // are cuda.h's, passed as ints.
  CuResult (*tensor_map_encode_tiled)(void*, int, uint32_t, void*, const uint64_t*,
                                      const uint64_t*, const uint32_t*, const uint32_t*, int, int,
                                      int, int);
  int version = 0;  // cuDriverGetVersion: 1000 * major + 10 * minor
};

// Driver attribute numbers used by kiln (values from the CUDA driver API).
inline constexpr int k_attr_cc_major = 75;
inline constexpr int k_attr_cc_minor = 76;
inline constexpr int k_attr_sm_count = 16;        // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
inline constexpr int k_attr_memory_pools = 115;  // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
inline constexpr int k_func_attr_max_dynamic_smem = 8;
inline constexpr int k_pool_attr_release_threshold = 4;  // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
inline constexpr int k_capture_mode_relaxed = 2;         // CU_STREAM_CAPTURE_MODE_RELAXED
inline constexpr CuResult k_error_no_device = 100;             // CUDA_ERROR_NO_DEVICE
inline constexpr CuResult k_error_invalid_handle = 400;        // CUDA_ERROR_INVALID_HANDLE
inline constexpr CuResult k_error_context_destroyed = 709;     // CUDA_ERROR_CONTEXT_IS_DESTROYED
inline constexpr CuResult k_error_capture_unsupported = 900;   // ..._STREAM_CAPTURE_UNSUPPORTED
inline constexpr CuResult k_error_capture_implicit = 906;      // ..._STREAM_CAPTURE_IMPLICIT
// The oldest driver kiln loads (12.0: cuCtxGetId, stream-ordered allocation).
inline constexpr int k_min_driver_version = 12000;

// Loads libcuda once per process (KILN_CUDA_DRIVER_PATH overrides the library path) and calls
// cuInit. Fails with "no CUDA driver found: ..." when the library is absent, "no CUDA device: ..."
// when it sees no GPU, "cuda driver: version 11.8 is older than 12.0, ..." or
// "cuda driver: cuInit failed: ..."; the outcome is remembered.
Expected<const DriverApi*> load_driver();

// "cuda driver: <what> failed: <driver's message> (<code>)".
Error driver_error(const DriverApi& api, const char* what, CuResult code);

// The compute capability of `device` as sm_XX (e.g. 90), through the driver; fails without a
// driver or device, saying which.
Expected<int> device_sm(int device);

// A device as tuning records name it: its name, compute capability and multiprocessor count.
struct DeviceIdentity {
  std::string name;  // "NVIDIA H200"
  int sm = 0;        // 90
  int sm_count = 0;  // 132
  // "NVIDIA H200 (132 SMs)"
  std::string text() const { return name + " (" + std::to_string(sm_count) + " SMs)"; }
};
// Fails without a driver or device, saying which.
Expected<DeviceIdentity> device_identity(int device);

// "12.2" for 12020.
std::string version_text(int version);

}  // namespace kiln::runtime
