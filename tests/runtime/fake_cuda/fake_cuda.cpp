// The fake libcuda: contexts, devices, modules, memory, streams and launches under the driver's
// rules (see fake_cuda.h), with a record for tests. One mutex guards everything; objects are never
// deleted, so a stale handle is detected instead of being a use after free.
#include "fake_cuda.h"

#include "cubin.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace kiln::fake_cuda {
namespace {

enum : int {
  k_success = 0,
  k_invalid_value = 1,
  k_not_initialized = 3,
  k_no_device = 100,
  k_invalid_device = 101,
  k_invalid_image = 200,
  k_invalid_context = 201,
  k_no_binary_for_gpu = 209,
  k_invalid_handle = 400,
  k_not_found = 500,
  k_illegal_address = 700,
  k_context_is_destroyed = 709,
  k_misaligned_address = 716,
  k_not_supported = 801,
  k_capture_unsupported = 900,
  k_capture_invalidated = 901,
  k_capture_implicit = 906,
};

constexpr int k_capture_global = 0, k_capture_relaxed = 2;
constexpr uint64_t k_default_dynamic_shared = 48 * 1024;

struct Context {
  int device = 0;
  bool primary = false;
  bool alive = false;
  uint64_t id = 0;
  uint64_t generation = 0;  // changes on every destroy or reset, even when the id stays
  int retains = 0;
  int sticky = 0;
};

struct Module;

struct Function {
  Module* module = nullptr;
  CubinKernel kernel;
  uint64_t max_dynamic_shared = 0;
};

struct Module {
  Context* context = nullptr;
  uint64_t generation = 0;
  bool unloaded = false;
  std::vector<std::unique_ptr<Function>> functions;
};

struct Stream {
  Context* context = nullptr;
  uint64_t generation = 0;
  bool alive = true;
  bool per_thread = false;  // a thread's CU_STREAM_PER_THREAD in one context
  bool blocking = true;     // synchronises with the legacy stream (no CU_STREAM_NON_BLOCKING)
  int capture_mode = -1;  // -1: not capturing
  bool invalidated = false;
  std::thread::id capture_thread;
};

struct Pool {
  int device = 0;
  uint64_t release_threshold = 0;
};

struct Allocation {
  void* host = nullptr;
  size_t bytes = 0;
  Context* context = nullptr;
  bool from_pool = false;  // stream-ordered: belongs to the device, not to a context
  Stream* pending_free = nullptr;  // freed stream-ordered, not yet synchronised
};

struct State {
  std::mutex mutex;
  Config config;
  bool configured = false;
  bool initialised = false;
  uint64_t next_id = 1;
  std::vector<std::unique_ptr<Context>> contexts;  // primaries first, one per device
  std::vector<std::unique_ptr<Module>> modules;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Pool>> pools;
  std::map<uintptr_t, Allocation> allocations;
  std::vector<Launch> launches;
  std::vector<std::string> events;
};

State& state() {
  static State s;
  return s;
}

thread_local std::vector<Context*> t_stack;
thread_local int t_capture_mode = k_capture_global;  // cuThreadExchangeStreamCaptureMode
thread_local std::map<Context*, Stream*> t_per_thread_streams;  // owned by State::streams

Context* current() { return t_stack.empty() ? nullptr : t_stack.back(); }

std::string tag(const char* what, const Context* c) {
  return std::string(what) + " ctx=" + std::to_string(c->id);
}

// The calling thread's usable context, or the error a call that needs one returns.
int need_context(Context*& out) {
  Context* c = current();
  if (!c) return k_invalid_context;
  if (!c->alive) return k_context_is_destroyed;
  if (c->sticky) return c->sticky;
  out = c;
  return k_success;
}

// Potentially unsafe calls fail, and invalidate the capture that forbids them, as cuda.h describes
// for cuThreadExchangeStreamCaptureMode: a thread in relaxed mode may make them; otherwise its
// own captures (unless begun relaxed) forbid them, and in global mode so do other threads'
// global captures.
int check_capture_safe(State& s) {
  int result = k_success;
  if (t_capture_mode == k_capture_relaxed) return result;
  for (auto& stream : s.streams) {
    if (!stream->alive || stream->capture_mode < 0) continue;
    bool own = stream->capture_thread == std::this_thread::get_id();
    bool blocks = own ? stream->capture_mode != k_capture_relaxed
                      : t_capture_mode == k_capture_global &&
                            stream->capture_mode == k_capture_global;
    if (blocks) {
      stream->invalidated = true;
      result = k_capture_unsupported;
    }
  }
  return result;
}

// A stream handle as seen from context `c`: created streams must belong to it; the legacy and
// per-thread default streams are `c`'s own.
int resolve_stream(void* handle, Context* c, Stream*& out) {
  auto value = reinterpret_cast<uintptr_t>(handle);
  if (value == 0 || value == 1) {
    out = nullptr;
    return k_success;
  }
  if (value == 2) {
    Stream*& stream = t_per_thread_streams[c];
    if (!stream || stream->generation != c->generation) {
      auto created = std::make_unique<Stream>();
      created->context = c;
      created->generation = c->generation;
      created->per_thread = true;
      stream = created.get();
      state().streams.push_back(std::move(created));
    }
    out = stream;
    return k_success;
  }
  for (auto& stream : state().streams) {
    if (stream.get() != handle || stream->per_thread) continue;
    if (!stream->alive || stream->context != c || stream->generation != c->generation) {
      return k_invalid_handle;
    }
    out = stream.get();
    return k_success;
  }
  return k_invalid_handle;
}

void release(State& s, std::map<uintptr_t, Allocation>::iterator it) {
  std::free(it->second.host);
  s.allocations.erase(it);
}

// Completes the stream-ordered frees of `stream` (or, with nullptr, of every stream of `c`).
void complete_frees(State& s, Context* c, Stream* stream) {
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    Stream* pending = it->second.pending_free;
    bool done = pending && (stream ? pending == stream : pending->context == c);
    auto next = std::next(it);
    if (done) release(s, it);
    it = next;
  }
}

// Drops a context's allocations (not pool allocations: those belong to the device) and
// invalidates its handles (destroy or reset).
void tear_down(State& s, Context* c) {
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    auto next = std::next(it);
    if (it->second.context == c && !it->second.from_pool) release(s, it);
    it = next;
  }
  ++c->generation;
  c->sticky = 0;
}

int shared_limit(int sm) {
  switch (sm) {
    case 75: return 64 * 1024;
    case 80: case 87: return 163 * 1024;
    case 86: case 89: case 120: case 121: return 99 * 1024;
    default: return 227 * 1024;
  }
}

Function* find_function(State& s, void* handle) {
  for (auto& module : s.modules) {
    for (auto& f : module->functions) {
      if (f.get() == handle) return f.get();
    }
  }
  return nullptr;
}

// Why a function handle cannot be used from context `c` (0: it can).
int function_error(Function* f, Context* c) {
  if (!f || f->module->unloaded) return k_invalid_handle;
  Module* m = f->module;
  if (!m->context->alive) return k_context_is_destroyed;
  if (m->generation != m->context->generation) return k_invalid_handle;
  if (c && m->context != c) return k_invalid_handle;
  return k_success;
}

// The live allocation holding [value, value + bytes), or nullptr.
const Allocation* find_allocation(State& s, uint64_t value, size_t bytes) {
  auto it = s.allocations.upper_bound(static_cast<uintptr_t>(value));
  if (it == s.allocations.begin()) return nullptr;
  --it;
  if (value + bytes > it->first + it->second.bytes || value + bytes < value) return nullptr;
  return &it->second;
}

// A device pointer parameter's fault (0: none): it must lie in a live allocation of the launch's
// context (each context has its own address space; pool allocations belong to the device) and be
// 16-byte aligned.
int pointer_fault(State& s, uint64_t value, const Context* c) {
  const Allocation* a = find_allocation(s, value, 1);
  if (!a || a->context->device != c->device) return k_illegal_address;
  if (!a->from_pool && a->context != c) return k_illegal_address;
  return value % 16 ? k_misaligned_address : k_success;
}

}  // namespace

bool configure(const Config& config) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.initialised) {
    return s.config.device_sms == config.device_sms &&
           s.config.driver_version == config.driver_version &&
           s.config.memory_pools == config.memory_pools &&
           s.config.reset_keeps_id == config.reset_keeps_id;
  }
  s.config = config;
  s.configured = true;
  return true;
}

std::vector<Launch> launches() {
  std::lock_guard lock(state().mutex);
  return state().launches;
}

std::vector<std::string> events() {
  std::lock_guard lock(state().mutex);
  return state().events;
}

size_t live_allocations(int device) {
  std::lock_guard lock(state().mutex);
  size_t n = 0;
  for (auto& [address, a] : state().allocations) n += device < 0 || a.context->device == device;
  return n;
}

size_t live_modules() {
  std::lock_guard lock(state().mutex);
  size_t n = 0;
  for (auto& m : state().modules) {
    n += !m->unloaded && m->context->alive && m->generation == m->context->generation;
  }
  return n;
}

int primary_retains(int device) {
  std::lock_guard lock(state().mutex);
  auto& contexts = state().contexts;
  return device >= 0 && static_cast<size_t>(device) < contexts.size() &&
                 contexts[device]->primary
             ? contexts[device]->retains
             : 0;
}

int sticky_error(void* context) {
  std::lock_guard lock(state().mutex);
  return static_cast<Context*>(context)->sticky;
}

}  // namespace kiln::fake_cuda

using namespace kiln::fake_cuda;

#define FAKE_LOCK                      \
  State& s = state();                  \
  std::lock_guard lock(s.mutex);       \
  if (!s.initialised) return k_not_initialized

extern "C" {

int cuInit(unsigned flags) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (flags != 0) return k_invalid_value;
  if (!s.initialised) {
    s.initialised = true;
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
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= s.config.device_sms.size()) {
    return k_invalid_device;
  }
  *device = ordinal;
  return k_success;
}

int cuDeviceGetAttribute(int* value, int attribute, int device) {
  FAKE_LOCK;
  if (!value) return k_invalid_value;
  if (device < 0 || static_cast<size_t>(device) >= s.config.device_sms.size()) {
    return k_invalid_device;
  }
  int sm = s.config.device_sms[device];
  switch (attribute) {
    case 1: *value = 1024; return k_success;                          // max threads per block
    case 75: *value = sm / 10; return k_success;                      // compute capability major
    case 76: *value = sm % 10; return k_success;                      // minor
    case 97: *value = shared_limit(sm); return k_success;             // shared memory opt-in
    case 115: *value = s.config.memory_pools ? 1 : 0; return k_success;  // memory pools
    default: return k_invalid_value;
  }
}

int cuDevicePrimaryCtxRetain(void** context, int device) {
  FAKE_LOCK;
  if (!context) return k_invalid_value;
  if (device < 0 || static_cast<size_t>(device) >= s.config.device_sms.size()) {
    return k_invalid_device;
  }
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
  if (device < 0 || static_cast<size_t>(device) >= s.config.device_sms.size()) {
    return k_invalid_device;
  }
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
  if (device < 0 || static_cast<size_t>(device) >= s.config.device_sms.size()) {
    return k_invalid_device;
  }
  Context* c = s.contexts[device].get();
  tear_down(s, c);
  if (!s.config.reset_keeps_id) c->id = s.next_id++;
  return k_success;
}

int cuCtxCreate_v2(void** context, unsigned, int device) {
  FAKE_LOCK;
  if (!context) return k_invalid_value;
  if (device < 0 || static_cast<size_t>(device) >= s.config.device_sms.size()) {
    return k_invalid_device;
  }
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
  auto* m = static_cast<Module*>(module);
  bool known = false;
  for (auto& candidate : s.modules) known = known || candidate.get() == m;
  if (!known || m->unloaded || m->generation != m->context->generation) return k_invalid_handle;
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
  auto* m = static_cast<Module*>(module);
  bool known = false;
  for (auto& candidate : s.modules) known = known || candidate.get() == m;
  if (!known || m->unloaded || m->generation != m->context->generation || m->context != c) {
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
    if (sizes[i] > sizeof value || !params[i]) return k_invalid_value;
    std::memcpy(&value, params[i], sizes[i]);
    launch.params.push_back(value);
    if (sizes[i] == 8 && !fault) fault = pointer_fault(s, value, c);
  }
  launch.fault = fault;
  s.launches.push_back(std::move(launch));
  // A fault is found while the kernel runs: the launch succeeds and the context is lost.
  if (fault) c->sticky = fault;
  return k_success;
}

int cuMemAlloc_v2(unsigned long long* pointer, size_t bytes) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!pointer || bytes == 0) return k_invalid_value;
  if (int r = check_capture_safe(s)) return r;
  void* host = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  s.allocations[reinterpret_cast<uintptr_t>(host)] = Allocation{host, bytes, c, false, nullptr};
  *pointer = reinterpret_cast<uintptr_t>(host);
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
  if (device < 0 || static_cast<size_t>(device) >= s.config.device_sms.size()) {
    return k_invalid_value;
  }
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
  Pool* p = nullptr;
  for (auto& candidate : s.pools) p = candidate.get() == pool ? candidate.get() : p;
  if (!p || !value) return k_invalid_value;
  if (attribute != 4) return k_invalid_value;  // only CU_MEMPOOL_ATTR_RELEASE_THRESHOLD modelled
  std::memcpy(&p->release_threshold, value, sizeof p->release_threshold);
  return k_success;
}

int cuMemAllocFromPoolAsync(unsigned long long* pointer, size_t bytes, void* pool, void* stream) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Pool* p = nullptr;
  for (auto& candidate : s.pools) p = candidate.get() == pool ? candidate.get() : p;
  if (!pointer || bytes == 0 || !p) return k_invalid_value;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (p->device != c->device) return k_invalid_value;
  void* host = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  s.allocations[reinterpret_cast<uintptr_t>(host)] = Allocation{host, bytes, c, true, nullptr};
  *pointer = reinterpret_cast<uintptr_t>(host);
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

int cuStreamCreate(void** stream, unsigned flags) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!stream) return k_invalid_value;
  auto created = std::make_unique<Stream>();
  created->context = c;
  created->generation = c->generation;
  created->blocking = (flags & 1) == 0;
  *stream = created.get();
  s.streams.push_back(std::move(created));
  return k_success;
}

int cuStreamDestroy_v2(void* stream) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (!target || reinterpret_cast<uintptr_t>(stream) == 2) return k_invalid_handle;
  complete_frees(s, c, target);  // the driver frees them once the stream's work is done
  target->alive = false;
  return k_success;
}

int cuStreamSynchronize(void* stream) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (target && target->capture_mode >= 0) {
    target->invalidated = true;
    return k_capture_unsupported;
  }
  if (!target) {
    if (int r = check_capture_safe(s)) return r;
  }
  complete_frees(s, c, target);
  s.events.push_back(tag("sync", c));
  return k_success;
}

int cuStreamGetCtx(void* stream, void** context) {
  FAKE_LOCK;
  if (!context) return k_invalid_value;
  auto value = reinterpret_cast<uintptr_t>(stream);
  if (value <= 2) {
    Context* c = current();
    if (!c) return k_invalid_context;
    *context = c;
    return k_success;
  }
  for (auto& candidate : s.streams) {
    if (candidate.get() != stream || candidate->per_thread) continue;
    if (!candidate->alive || !candidate->context->alive ||
        candidate->generation != candidate->context->generation) {
      return k_invalid_handle;
    }
    *context = candidate->context;
    return k_success;
  }
  return k_invalid_handle;
}

int cuStreamBeginCapture_v2(void* stream, int mode) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (!target || mode < 0 || mode > 2) return k_capture_unsupported;
  if (target->capture_mode >= 0) return k_invalid_value;
  target->capture_mode = mode;
  target->invalidated = false;
  target->capture_thread = std::this_thread::get_id();
  return k_success;
}

int cuStreamEndCapture(void* stream, void** graph) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (!target || target->capture_mode < 0 || !graph) return k_invalid_value;
  target->capture_mode = -1;
  if (target->invalidated) {
    *graph = nullptr;
    return k_capture_invalidated;
  }
  *graph = target;  // any non-null handle: the fake builds no graph
  return k_success;
}

int cuStreamIsCapturing(void* stream, int* status) {
  FAKE_LOCK;
  Context* c = nullptr;
  if (int r = need_context(c)) return r;
  if (!status) return k_invalid_value;
  Stream* target = nullptr;
  if (int r = resolve_stream(stream, c, target)) return r;
  if (!target) {  // the legacy stream, while a blocking stream of its context is capturing
    for (auto& other : s.streams) {
      if (other->alive && other->context == c && other->blocking && other->capture_mode >= 0 &&
          !other->per_thread) {
        return k_capture_implicit;
      }
    }
  }
  *status = !target || target->capture_mode < 0 ? 0 : target->invalidated ? 2 : 1;
  return k_success;
}

int cuThreadExchangeStreamCaptureMode(int* mode) {
  if (!mode || *mode < 0 || *mode > 2) return k_invalid_value;
  std::swap(*mode, t_capture_mode);
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
