// The fake libcuda: initialisation, devices, primary and created contexts, the per-thread stack.
#include "fake_state.h"

#include <cstdlib>
#include <cstring>
#include <utility>

using namespace kiln::fake_cuda;
using namespace kiln::fake_cuda::detail;

extern "C" {

int cuInit(unsigned flags) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (flags != 0) return k_invalid_value;
  if (!s.initialised) {
    s.initialised = true;
    // A process that configured nothing (a tool run under the fake) takes its kernels' times
    // from the environment; malformed text is ignored (the default times stay).
    if (const char* times = std::getenv("KILN_FAKE_CUDA_KERNEL_MS"); times && !s.configured) {
      Config parsed = s.config;
      if (parse_kernel_ms(times, parsed)) s.config = parsed;
    }
    for (size_t d = 0; d < s.config.device_sms.size(); ++d) {
      auto c = std::make_unique<Context>();
      c->device = static_cast<int>(d);
      c->primary = true;
      s.contexts.push_back(std::move(c));
    }
  }
  return s.config.device_sms.empty() ? k_no_device : k_success;
}

int cuDriverGetVersion(int* version) {
  if (!version) return k_invalid_value;
  *version = state().config.driver_version;
  return k_success;
}

int cuDeviceGetCount(int* count) {
  FAKE_LOCK;
  if (!count) return k_invalid_value;
  *count = static_cast<int>(s.config.device_sms.size());
  return k_success;
}

int cuDeviceGet(int* device, int ordinal) {
  FAKE_LOCK;
  if (!device) return k_invalid_value;
  if (!valid_device(s, ordinal)) return k_invalid_device;
  *device = ordinal;
  return k_success;
}

int cuDeviceGetAttribute(int* value, int attribute, int device) {
  FAKE_LOCK;
  if (!value) return k_invalid_value;
  if (!valid_device(s, device)) return k_invalid_device;
  int sm = s.config.device_sms[device];
  switch (attribute) {
    case 1: *value = 1024; return k_success;                          // max threads per block
    case 16: *value = s.config.sm_count; return k_success;            // multiprocessors
    case 75: *value = sm / 10; return k_success;                      // compute capability major
    case 76: *value = sm % 10; return k_success;                      // minor
    case 97: *value = shared_limit(sm); return k_success;             // shared memory opt-in
    case 115: *value = s.config.memory_pools ? 1 : 0; return k_success;  // memory pools
    default: return k_invalid_value;
  }
}

int cuDeviceGetName(char* name, int length, int device) {
  FAKE_LOCK;
  if (!name || length <= 0) return k_invalid_value;
  if (!valid_device(s, device)) return k_invalid_device;
  std::string text = s.config.device_name.substr(0, static_cast<size_t>(length) - 1);
  std::memcpy(name, text.c_str(), text.size() + 1);
  return k_success;
}

int cuDevicePrimaryCtxRetain(void** context, int device) {
  FAKE_LOCK;
  if (!context) return k_invalid_value;
  if (!valid_device(s, device)) return k_invalid_device;
  Context* c = s.contexts[device].get();
  if (!c->alive) {
    c->alive = true;
    c->id = s.next_id++;
  }
  ++c->retains;
  s.events.push_back("retain device=" + std::to_string(device));
  *context = c;
  return k_success;
}

int cuDevicePrimaryCtxRelease_v2(int device) {
  FAKE_LOCK;
  if (!valid_device(s, device)) return k_invalid_device;
  Context* c = s.contexts[device].get();
  if (c->retains == 0) return k_invalid_context;
  if (--c->retains == 0) {
    tear_down(s, c);
    c->alive = false;
  }
  return k_success;
}

int cuDevicePrimaryCtxReset_v2(int device) {
  FAKE_LOCK;
  if (!valid_device(s, device)) return k_invalid_device;
  Context* c = s.contexts[device].get();
  tear_down(s, c);
  if (!s.config.reset_keeps_id) c->id = s.next_id++;
  return k_success;
}

int cuCtxCreate_v2(void** context, unsigned, int device) {
  FAKE_LOCK;
  if (!context) return k_invalid_value;
  if (!valid_device(s, device)) return k_invalid_device;
  Context* c = nullptr;
  for (auto& candidate : s.contexts) {  // a destroyed slot first: the same address again
    if (!candidate->primary && !candidate->alive) {
      c = candidate.get();
      break;
    }
  }
  if (!c) {
    s.contexts.push_back(std::make_unique<Context>());
    c = s.contexts.back().get();
  }
  c->device = device;
  c->alive = true;
  c->id = s.next_id++;
  t_stack.push_back(c);
  *context = c;
  return k_success;
}

int cuCtxDestroy_v2(void* context) {
  FAKE_LOCK;
  auto* c = static_cast<Context*>(context);
  if (!c || c->primary || !c->alive) return k_invalid_value;
  tear_down(s, c);
  c->alive = false;
  if (!t_stack.empty() && t_stack.back() == c) t_stack.pop_back();
  return k_success;
}

int cuCtxSetCurrent(void* context) {
  FAKE_LOCK;
  auto* c = static_cast<Context*>(context);
  if (!c) {
    if (!t_stack.empty()) t_stack.pop_back();
    return k_success;
  }
  if (!c->alive) return k_context_is_destroyed;
  if (t_stack.empty()) {
    t_stack.push_back(c);
  } else {
    t_stack.back() = c;
  }
  return k_success;
}

int cuCtxGetCurrent(void** context) {
  FAKE_LOCK;
  if (!context) return k_invalid_value;
  *context = current();
  return k_success;
}

int cuCtxPushCurrent_v2(void* context) {
  FAKE_LOCK;
  auto* c = static_cast<Context*>(context);
  if (!c) return k_invalid_value;
  if (!c->alive) return k_context_is_destroyed;
  t_stack.push_back(c);
  return k_success;
}

int cuCtxPopCurrent_v2(void** context) {
  FAKE_LOCK;
  if (t_stack.empty()) return k_invalid_context;
  if (context) *context = t_stack.back();
  t_stack.pop_back();
  return k_success;
}

int cuCtxGetId(void* context, unsigned long long* id) {
  FAKE_LOCK;
  if (!id) return k_invalid_value;
  auto* c = context ? static_cast<Context*>(context) : current();
  if (!c) return k_invalid_context;
  if (!c->alive) return k_context_is_destroyed;
  *id = c->id;
  return k_success;
}

int cuCtxGetDevice(int* device) {
  FAKE_LOCK;
  if (!device) return k_invalid_value;
  Context* c = current();
  if (!c) return k_invalid_context;
  if (!c->alive) return k_context_is_destroyed;
  *device = c->device;
  return k_success;
}

int cuCtxSynchronize() {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (int r = check_capture_safe(s)) return r;
  complete_frees(s, c, nullptr);
  s.events.push_back(tag("sync", c));
  return k_success;
}

}  // extern "C"
