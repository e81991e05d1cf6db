// DeviceBuffer and gpu_status: device memory through the run-time-loaded driver.
#include "kiln/kiln.h"

#include "runtime/driver.h"

#include <utility>

namespace kiln {

namespace {

// Makes the device's primary context current on this thread when no context is.
Status ensure_context(const runtime::DriverApi& cu, int device) {
  runtime::CuContext context = nullptr;
  if (auto r = cu.ctx_get_current(&context); r != 0) {
    return runtime::driver_error(cu, "cuCtxGetCurrent", r);
  }
  if (context) return Status::success();
  runtime::CuDevice handle = 0;
  if (auto r = cu.device_get(&handle, device); r != 0) {
    return runtime::driver_error(cu, "cuDeviceGet", r);
  }
  if (auto r = cu.primary_ctx_retain(&context, handle); r != 0) {
    return runtime::driver_error(cu, "cuDevicePrimaryCtxRetain", r);
  }
  if (auto r = cu.ctx_set_current(context); r != 0) {
    return runtime::driver_error(cu, "cuCtxSetCurrent", r);
  }
  return Status::success();
}

}  // namespace

Status gpu_status() {
  auto api = runtime::load_driver();
  if (!api) return api.error();
  int count = 0;
  if (auto r = (*api)->device_get_count(&count); r != 0) {
    return runtime::driver_error(**api, "cuDeviceGetCount", r);
  }
  if (count == 0) return make_error("no CUDA device: the driver sees none");
  return Status::success();
}

Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes, int device) {
  auto api = runtime::load_driver();
  if (!api) return api.error();
  if (Status s = ensure_context(**api, device); !s) return s.error();
  runtime::CuDevicePtr pointer = 0;
  if (auto r = (*api)->mem_alloc(&pointer, bytes); r != 0) {
    return runtime::driver_error(**api, ("cuMemAlloc of " + std::to_string(bytes) + " bytes").c_str(), r);
  }
  DeviceBuffer buffer;
  buffer.m_pointer = static_cast<uintptr_t>(pointer);
  buffer.m_bytes = bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : m_pointer(std::exchange(other.m_pointer, 0)), m_bytes(std::exchange(other.m_bytes, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    m_pointer = std::exchange(other.m_pointer, 0);
    m_bytes = std::exchange(other.m_bytes, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (!m_pointer) return;
  if (auto api = runtime::load_driver()) (*api)->mem_free(m_pointer);
}

Status DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > m_bytes) return make_error("upload of ", std::to_string(bytes), " bytes into a buffer of ", std::to_string(m_bytes));
  auto api = runtime::load_driver();
  if (!api) return api.error();
  if (auto r = (*api)->memcpy_htod(m_pointer, host, bytes); r != 0) {
    return runtime::driver_error(**api, "cuMemcpyHtoD", r);
  }
  return Status::success();
}

Status DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > m_bytes) return make_error("download of ", std::to_string(bytes), " bytes from a buffer of ", std::to_string(m_bytes));
  auto api = runtime::load_driver();
  if (!api) return api.error();
  if (auto r = (*api)->memcpy_dtoh(host, m_pointer, bytes); r != 0) {
    return runtime::driver_error(**api, "cuMemcpyDtoH", r);
  }
  return Status::success();
}

}  // namespace kiln
