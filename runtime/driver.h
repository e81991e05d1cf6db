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
  CuResult (*mem_alloc_async)(CuDevicePtr*, size_t, CuStream);
  CuResult (*mem_free_async)(CuDevicePtr, CuStream);
  CuResult (*memcpy_htod)(CuDevicePtr, const void*, size_t);
  CuResult (*memcpy_dtoh)(void*, CuDevicePtr, size_t);
  CuResult (*stream_synchronize)(CuStream);
  CuResult (*stream_get_ctx)(CuStream, CuContext*);
  CuResult (*stream_is_capturing)(CuStream, int*);
  CuResult (*get_error_string)(CuResult, const char**);
  int version = 0;  // cuDriverGetVersion: 1000 * major + 10 * minor
};

// Driver attribute numbers used by kiln (values from the CUDA driver API).
inline constexpr int k_attr_cc_major = 75;
inline constexpr int k_attr_cc_minor = 76;
inline constexpr int k_attr_memory_pools = 115;  // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
inline constexpr int k_func_attr_max_dynamic_smem = 8;
inline constexpr CuResult k_error_no_device = 100;             // CUDA_ERROR_NO_DEVICE
inline constexpr CuResult k_error_invalid_handle = 400;        // CUDA_ERROR_INVALID_HANDLE
inline constexpr CuResult k_error_context_destroyed = 709;     // CUDA_ERROR_CONTEXT_IS_DESTROYED
inline constexpr CuResult k_error_capture_unsupported = 900;   // ..._STREAM_CAPTURE_UNSUPPORTED
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

// "12.2" for 12020.
std::string version_text(int version);

}  // namespace kiln::runtime
