// The fake libcuda: modules read from cubins, functions, launches under the driver's rules, errors.
#include "fake_state.h"

#include <cstdlib>
#include <cstring>
#include <utility>

using namespace kiln::fake_cuda;
using namespace kiln::fake_cuda::detail;

extern "C" {

int cuModuleLoadData(void** module, const void* image) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!module || !image) return k_invalid_value;
  if (int r = check_capture_safe(s)) return r;
  auto cubin = read_cubin(image);
  if (!cubin) return k_invalid_image;
  int sm = s.config.device_sms[c->device];
  if (cubin->sm / 10 != sm / 10 || cubin->sm % 10 > sm % 10) return k_no_binary_for_gpu;
  if (cubin->arch_specific && cubin->sm != sm) return k_no_binary_for_gpu;
  if (cubin->api_version / 10 > s.config.driver_version / 1000) return k_invalid_image;
  auto m = std::make_unique<Module>();
  m->context = c;
  m->generation = c->generation;
  for (CubinKernel& kernel : cubin->kernels) {
    auto f = std::make_unique<Function>();
    f->module = m.get();
    f->max_dynamic_shared = kernel.static_shared >= k_default_dynamic_shared
                                ? 0
                                : k_default_dynamic_shared - kernel.static_shared;
    f->kernel = std::move(kernel);
    m->functions.push_back(std::move(f));
  }
  *module = m.get();
  s.modules.push_back(std::move(m));
  s.events.push_back(tag("module", c));
  return k_success;
}

int cuModuleUnload(void* module) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Module* m = find_module(s, module);
  if (!m || m->unloaded || m->generation != m->context->generation) return k_invalid_handle;
  if (m->context != c) return k_invalid_context;
  if (int r = check_capture_safe(s)) return r;
  m->unloaded = true;
  s.events.push_back(tag("unload", c));
  return k_success;
}

int cuModuleGetFunction(void** function, void* module, const char* name) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!function || !name) return k_invalid_value;
  Module* m = find_module(s, module);
  if (!m || m->unloaded || m->generation != m->context->generation || m->context != c) {
    return k_invalid_handle;
  }
  for (auto& f : m->functions) {
    if (f->kernel.name == name) {
      *function = f.get();
      return k_success;
    }
  }
  return k_not_found;
}

int cuFuncSetAttribute(void* function, int attribute, int value) {
  FAKE_LOCK;
  Function* f = find_function(s, function);
  if (int r = function_error(f, nullptr)) return r;
  if (attribute != 8 || value < 0) return k_invalid_value;  // MAX_DYNAMIC_SHARED_SIZE_BYTES
  int limit = shared_limit(s.config.device_sms[f->module->context->device]);
  if (static_cast<uint64_t>(value) + f->kernel.static_shared > static_cast<uint64_t>(limit)) {
    return k_invalid_value;
  }
  f->max_dynamic_shared = static_cast<uint64_t>(value);
  return k_success;
}

int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                   void** extra) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Function* f = find_function(s, function);
  if (int r = function_error(f, c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (gx == 0 || gy == 0 || gz == 0 || gx > 0x7fffffffu || gy > 65535 || gz > 65535) {
    return k_invalid_value;
  }
  uint64_t threads = uint64_t{bx} * by * bz;
  if (threads == 0 || threads > 1024 || bz > 64 ||
      (f->kernel.max_threads && threads > f->kernel.max_threads)) {
    return k_invalid_value;
  }
  if (shared > f->max_dynamic_shared) return k_invalid_value;
  const std::vector<uint32_t>& sizes = f->kernel.param_sizes;
  if (extra || (!sizes.empty() && !params)) return k_invalid_value;
  Launch launch;
  launch.context_id = c->id;
  launch.device = c->device;
  launch.function = f->kernel.name;
  launch.grid[0] = gx, launch.grid[1] = gy, launch.grid[2] = gz;
  launch.block[0] = bx, launch.block[1] = by, launch.block[2] = bz;
  launch.shared_bytes = shared;
  launch.max_dynamic_shared = static_cast<unsigned>(f->max_dynamic_shared);
  launch.cubin_params = sizes.size();
  launch.stream = stream;
  launch.captured = target && target->capture_mode >= 0;
  launch.thread = std::this_thread::get_id();
  int fault = k_success;
  for (size_t i = 0; i < sizes.size(); ++i) {
    uint64_t value = 0;
    if (!params[i]) return k_invalid_value;
    if (sizes[i] == 128) {  // a CUtensorMap by value: recorded as its base address
      int map_fault = tensor_map_fault(s, params[i], c, &value);
      if (!fault) fault = map_fault;
      launch.params.push_back(value);
      continue;
    }
    if (sizes[i] > sizeof value) return k_invalid_value;
    std::memcpy(&value, params[i], sizes[i]);
    launch.params.push_back(value);
    if (sizes[i] == 8 && !fault) fault = pointer_fault(s, value, c);
  }
  launch.fault = fault;
  s.launches.push_back(std::move(launch));
  // A fault is found while the kernel runs: the launch succeeds and the context is lost.
  if (fault) {
    c->sticky = fault;
    return k_success;
  }
  s.clock_ms[c->device] += kernel_time_ms(s.config, f->kernel.name, threads);
  for (const auto& [text, byte] : s.config.kernel_fill) {
    if (!kernel_matches(text, f->kernel.name, threads)) continue;
    const Launch& done = s.launches.back();
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] != 8) continue;
      // The first pointer: checked by pointer_fault, so inside an allocation of this device.
      const Allocation* a = find_allocation(s, done.params[i], 1);
      if (!a) break;
      uintptr_t from = static_cast<uintptr_t>(done.params[i]);
      uintptr_t end = reinterpret_cast<uintptr_t>(a->host) + a->bytes;
      std::memset(reinterpret_cast<void*>(from), byte, end - from);
      break;
    }
    break;
  }
  return k_success;
}

int cuGetErrorString(int code, const char** text) {
  static const std::map<int, const char*> k_names = {
      {k_success, "no error"},
      {k_invalid_value, "invalid argument"},
      {k_not_initialized, "initialization error"},
      {k_no_device, "no CUDA-capable device is detected"},
      {k_invalid_device, "invalid device ordinal"},
      {k_invalid_image, "device kernel image is invalid"},
      {k_invalid_context, "invalid device context"},
      {k_no_binary_for_gpu, "no kernel image is available for execution on the device"},
      {k_invalid_handle, "invalid resource handle"},
      {k_not_found, "named symbol not found"},
      {k_illegal_address, "an illegal memory access was encountered"},
      {k_context_is_destroyed, "context is destroyed"},
      {k_misaligned_address, "misaligned address"},
      {k_not_supported, "operation not supported"},
      {k_capture_unsupported, "operation not permitted when stream is capturing"},
      {k_capture_invalidated, "operation failed due to a previous error during capture"},
      {k_capture_implicit, "operation would make the legacy stream depend on a capturing "
                           "blocking stream"},
  };
  if (!text) return k_invalid_value;
  auto it = k_names.find(code);
  *text = it == k_names.end() ? nullptr : it->second;
  return it == k_names.end() ? k_invalid_value : k_success;
}

}  // extern "C"
