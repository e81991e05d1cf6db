// dlopen of libcuda and resolution of the driver entry points kiln uses.
#include "runtime/driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace kiln::runtime {

namespace {

template <typename Fn>
bool resolve(void* library, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(library, name));
  return out != nullptr;
}

Expected<const DriverApi*> load_once() {
  const char* override_path = std::getenv("KILN_CUDA_DRIVER_PATH");
  const char* path = override_path && *override_path ? override_path : "libcuda.so.1";
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = dlerror();
    return make_error("no CUDA driver found: cannot load ", path, ": ", why ? why : "unknown");
  }
  static DriverApi api;
  // The version first: an old driver lacks newer entry points, and deserves a better message.
  if (!resolve(library, "cuDriverGetVersion", api.driver_get_version) ||
      api.driver_get_version(&api.version) != 0) {
    return make_error("cuda driver: ", path, " cannot tell its version (cuDriverGetVersion)");
  }
  if (api.version < k_min_driver_version) {
    return make_error("cuda driver: version ", version_text(api.version), " (", path,
                      ") is older than ", version_text(k_min_driver_version),
                      ", the oldest kiln supports; update the driver");
  }
  struct Entry {
    const char* name;
    bool ok;
  };
  Entry entries[] = {
      {"cuInit", resolve(library, "cuInit", api.init)},
      {"cuDeviceGetCount", resolve(library, "cuDeviceGetCount", api.device_get_count)},
      {"cuDeviceGet", resolve(library, "cuDeviceGet", api.device_get)},
      {"cuDeviceGetAttribute", resolve(library, "cuDeviceGetAttribute", api.device_get_attribute)},
      {"cuDevicePrimaryCtxRetain",
       resolve(library, "cuDevicePrimaryCtxRetain", api.primary_ctx_retain)},
      {"cuCtxGetCurrent", resolve(library, "cuCtxGetCurrent", api.ctx_get_current)},
      {"cuCtxPushCurrent_v2", resolve(library, "cuCtxPushCurrent_v2", api.ctx_push_current)},
      {"cuCtxPopCurrent_v2", resolve(library, "cuCtxPopCurrent_v2", api.ctx_pop_current)},
      {"cuCtxGetId", resolve(library, "cuCtxGetId", api.ctx_get_id)},
      {"cuCtxGetDevice", resolve(library, "cuCtxGetDevice", api.ctx_get_device)},
      {"cuCtxSynchronize", resolve(library, "cuCtxSynchronize", api.ctx_synchronize)},
      {"cuModuleLoadData", resolve(library, "cuModuleLoadData", api.module_load_data)},
      {"cuModuleUnload", resolve(library, "cuModuleUnload", api.module_unload)},
      {"cuModuleGetFunction", resolve(library, "cuModuleGetFunction", api.module_get_function)},
      {"cuFuncSetAttribute", resolve(library, "cuFuncSetAttribute", api.func_set_attribute)},
      {"cuLaunchKernel", resolve(library, "cuLaunchKernel", api.launch_kernel)},
      {"cuMemAlloc_v2", resolve(library, "cuMemAlloc_v2", api.mem_alloc)},
      {"cuMemFree_v2", resolve(library, "cuMemFree_v2", api.mem_free)},
      {"cuMemPoolCreate", resolve(library, "cuMemPoolCreate", api.mem_pool_create)},
      {"cuMemPoolSetAttribute",
       resolve(library, "cuMemPoolSetAttribute", api.mem_pool_set_attribute)},
      {"cuMemAllocFromPoolAsync",
       resolve(library, "cuMemAllocFromPoolAsync", api.mem_alloc_from_pool_async)},
      {"cuMemFreeAsync", resolve(library, "cuMemFreeAsync", api.mem_free_async)},
      {"cuMemcpyHtoD_v2", resolve(library, "cuMemcpyHtoD_v2", api.memcpy_htod)},
      {"cuMemcpyDtoH_v2", resolve(library, "cuMemcpyDtoH_v2", api.memcpy_dtoh)},
      {"cuStreamSynchronize", resolve(library, "cuStreamSynchronize", api.stream_synchronize)},
      {"cuStreamGetCtx", resolve(library, "cuStreamGetCtx", api.stream_get_ctx)},
      {"cuStreamIsCapturing", resolve(library, "cuStreamIsCapturing", api.stream_is_capturing)},
      {"cuThreadExchangeStreamCaptureMode",
       resolve(library, "cuThreadExchangeStreamCaptureMode", api.thread_exchange_capture_mode)},
      {"cuGetErrorString", resolve(library, "cuGetErrorString", api.get_error_string)},
      {"cuDeviceGetName", resolve(library, "cuDeviceGetName", api.device_get_name)},
      {"cuEventCreate", resolve(library, "cuEventCreate", api.event_create)},
      {"cuEventRecord", resolve(library, "cuEventRecord", api.event_record)},
      {"cuEventSynchronize", resolve(library, "cuEventSynchronize", api.event_synchronize)},
      {"cuEventElapsedTime",
       resolve(library, "cuEventElapsedTime_v2", api.event_elapsed_time) ||
           resolve(library, "cuEventElapsedTime", api.event_elapsed_time)},
      {"cuEventDestroy_v2", resolve(library, "cuEventDestroy_v2", api.event_destroy)},
      {"cuTensorMapEncodeTiled",
       resolve(library, "cuTensorMapEncodeTiled", api.tensor_map_encode_tiled)},
  };
  for (const Entry& e : entries) {
    if (!e.ok) return make_error("cuda driver: ", path, " lacks ", e.name);
  }
  if (CuResult r = api.init(0); r != 0) {
    if (r == k_error_no_device) {
      return make_error("no CUDA device: the driver at ", path, " found none");
    }
    return driver_error(api, "cuInit", r);
  }
  return &api;
}

}  // namespace

Expected<const DriverApi*> load_driver() {
  static std::once_flag once;
  static Expected<const DriverApi*> result = Error{"not loaded"};
  std::call_once(once, [] { result = load_once(); });
  return result;
}

Error driver_error(const DriverApi& api, const char* what, CuResult code) {
  const char* text = nullptr;
  if (api.get_error_string) api.get_error_string(code, &text);
  return make_error("cuda driver: ", what, " failed: ", text ? text : "unknown error", " (",
                    std::to_string(code), ")");
}

// The compute capability of `device` as sm_XX, through the driver.
Expected<int> device_sm(int device) {
  auto api = load_driver();
  if (!api) return api.error();
  int count = 0;
  if (auto r = (*api)->device_get_count(&count); r != 0) {
    return driver_error(**api, "cuDeviceGetCount", r);
  }
  if (device < 0 || device >= count) {
    return make_error("no CUDA device ", std::to_string(device), ": the driver sees ",
                      std::to_string(count));
  }
  CuDevice handle = 0;
  if (auto r = (*api)->device_get(&handle, device); r != 0) {
    return driver_error(**api, "cuDeviceGet", r);
  }
  int major = 0, minor = 0;
  if (auto r = (*api)->device_get_attribute(&major, k_attr_cc_major, handle); r != 0) {
    return driver_error(**api, "cuDeviceGetAttribute", r);
  }
  if (auto r = (*api)->device_get_attribute(&minor, k_attr_cc_minor, handle); r != 0) {
    return driver_error(**api, "cuDeviceGetAttribute", r);
  }
  return major * 10 + minor;
}

Expected<DeviceIdentity> device_identity(int device) {
  auto sm = device_sm(device);
  if (!sm) return sm.error();
  const DriverApi& api = **load_driver();
  CuDevice handle = 0;
  if (auto r = api.device_get(&handle, device); r != 0) return driver_error(api, "cuDeviceGet", r);
  DeviceIdentity id;
  id.sm = *sm;
  char name[256] = {};
  if (auto r = api.device_get_name(name, sizeof name - 1, handle); r != 0)
    return driver_error(api, "cuDeviceGetName", r);
  id.name = name;
  if (auto r = api.device_get_attribute(&id.sm_count, k_attr_sm_count, handle); r != 0)
    return driver_error(api, "cuDeviceGetAttribute", r);
  return id;
}

std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace kiln::runtime
