// Primary contexts retained once per device; scoped push and pop of the context a call needs.
#include "runtime/context.h"

#include <map>
#include <mutex>
#include <utility>

namespace kiln::runtime {

namespace {

// The stream handles that name the current context's default streams: nullptr, CU_STREAM_LEGACY
// and CU_STREAM_PER_THREAD.
bool is_default_stream(CuStream stream) { return reinterpret_cast<uintptr_t>(stream) <= 2; }

}  // namespace

Expected<CuDevice> device_handle(const DriverApi& api, int device) {
  CuDevice handle = 0;
  if (CuResult r = api.device_get(&handle, device); r != 0) {
    return driver_error(api, ("cuDeviceGet (device " + std::to_string(device) + ")").c_str(), r);
  }
  return handle;
}

Expected<CuContext> primary_context(const DriverApi& api, int device) {
  // Never destroyed: a DeviceBuffer with static storage may be freed after other statics.
  static auto* mutex = new std::mutex;
  static auto* retained = new std::map<int, CuContext>;
  std::lock_guard lock(*mutex);
  if (auto it = retained->find(device); it != retained->end()) return it->second;
  auto handle = device_handle(api, device);
  if (!handle) return handle.error();
  CuContext context = nullptr;
  if (CuResult r = api.primary_ctx_retain(&context, *handle); r != 0) {
    return driver_error(api, "cuDevicePrimaryCtxRetain", r);
  }
  retained->emplace(device, context);
  return context;
}

Expected<ScopedContext> ScopedContext::enter(const DriverApi& api, CuContext context) {
  CuContext current = nullptr;
  if (CuResult r = api.ctx_get_current(&current); r != 0) {
    return driver_error(api, "cuCtxGetCurrent", r);
  }
  return enter(api, context, current);
}

Expected<ScopedContext> ScopedContext::enter(const DriverApi& api, CuContext context,
                                             CuContext current) {
  ScopedContext scope(api, context);
  if (current != context) {
    if (CuResult r = api.ctx_push_current(context); r != 0) {
      return driver_error(api, "cuCtxPushCurrent", r);
    }
    scope.m_pushed = true;
  }
  if (CuResult r = api.ctx_get_id(context, &scope.m_id); r != 0) {
    return driver_error(api, "cuCtxGetId", r);
  }
  return scope;
}

Expected<ScopedContext> ScopedContext::for_device(const DriverApi& api, int device,
                                                  CuStream stream) {
  auto handle = device_handle(api, device);
  if (!handle) return handle.error();
  auto on_device = [&]() -> Expected<bool> {  // is the current context on `device`?
    CuDevice owner = 0;
    if (CuResult r = api.ctx_get_device(&owner); r != 0) {
      return driver_error(api, "cuCtxGetDevice", r);
    }
    return owner == *handle;
  };
  if (!is_default_stream(stream)) {
    CuContext context = nullptr;
    if (CuResult r = api.stream_get_ctx(stream, &context); r != 0) {
      return driver_error(api, "cuStreamGetCtx", r);
    }
    auto scope = enter(api, context);
    if (!scope) return scope.error();
    auto same = on_device();
    if (!same) return same.error();
    if (!*same) {
      return make_error("the stream belongs to another CUDA device than device ",
                        std::to_string(device), ", the one this executable runs on ",
                        "(RuntimeOptions::device)");
    }
    return scope;
  }
  CuContext current = nullptr;
  if (CuResult r = api.ctx_get_current(&current); r != 0) {
    return driver_error(api, "cuCtxGetCurrent", r);
  }
  if (current) {
    auto scope = enter(api, current, current);
    if (!scope) return scope.error();
    auto same = on_device();
    if (!same) return same.error();
    if (*same) return scope;
  }
  auto primary = primary_context(api, device);
  if (!primary) return primary.error();
  return enter(api, *primary, current);
}

ScopedContext::ScopedContext(ScopedContext&& other) noexcept
    : m_api(other.m_api),
      m_context(other.m_context),
      m_id(other.m_id),
      m_pushed(std::exchange(other.m_pushed, false)) {}

ScopedContext::~ScopedContext() {
  if (m_pushed) m_api->ctx_pop_current(nullptr);
}

}  // namespace kiln::runtime
