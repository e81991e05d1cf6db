// The fake libcuda's shared state and rules, and the controls tests read (fake_cuda.h). One mutex
// guards everything; objects are never deleted, so a stale handle is detected instead of being a
// use after free.
#include "fake_state.h"

#include <cstdlib>
#include <cstring>

namespace kiln::fake_cuda {
namespace detail {

thread_local std::vector<Context*> t_stack;
thread_local int t_capture_mode = k_capture_global;  // cuThreadExchangeStreamCaptureMode
thread_local std::map<Context*, Stream*> t_per_thread_streams;  // owned by State::streams

State& state() {
  static State s;
  return s;
}

Context* current() { return t_stack.empty() ? nullptr : t_stack.back(); }

std::string tag(const char* what, const Context* c) {
  return std::string(what) + " ctx=" + std::to_string(c->id);
}

int need_context(Context*& out) {
  Context* c = current();
  if (!c) return k_invalid_context;
  if (!c->alive) return k_context_is_destroyed;
  if (c->sticky) return c->sticky;
  out = c;
  return k_success;
}

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

void complete_frees(State& s, Context* c, Stream* stream) {
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    Stream* pending = it->second.pending_free;
    bool done = pending && (stream ? pending == stream : pending->context == c);
    auto next = std::next(it);
    if (done) release(s, it);
    it = next;
  }
}

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

Module* find_module(State& s, void* handle) {
  for (auto& m : s.modules) {
    if (m.get() == handle) return m.get();
  }
  return nullptr;
}

Pool* find_pool(State& s, void* handle) {
  for (auto& p : s.pools) {
    if (p.get() == handle) return p.get();
  }
  return nullptr;
}

bool valid_device(const State& s, int device) {
  return device >= 0 && static_cast<size_t>(device) < s.config.device_sms.size();
}

unsigned long long allocate(State& s, size_t bytes, Context* c, bool from_pool) {
  void* host = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  s.allocations[reinterpret_cast<uintptr_t>(host)] = Allocation{host, bytes, c, from_pool, nullptr};
  return reinterpret_cast<uintptr_t>(host);
}

Function* find_function(State& s, void* handle) {
  for (auto& module : s.modules) {
    for (auto& f : module->functions) {
      if (f.get() == handle) return f.get();
    }
  }
  return nullptr;
}

int function_error(Function* f, Context* c) {
  if (!f || f->module->unloaded) return k_invalid_handle;
  Module* m = f->module;
  if (!m->context->alive) return k_context_is_destroyed;
  if (m->generation != m->context->generation) return k_invalid_handle;
  if (c && m->context != c) return k_invalid_handle;
  return k_success;
}

const Allocation* find_allocation(State& s, uint64_t value, size_t bytes) {
  auto it = s.allocations.upper_bound(static_cast<uintptr_t>(value));
  if (it == s.allocations.begin()) return nullptr;
  --it;
  if (value + bytes > it->first + it->second.bytes || value + bytes < value) return nullptr;
  return &it->second;
}

int pointer_fault(State& s, uint64_t value, const Context* c) {
  const Allocation* a = find_allocation(s, value, 1);
  if (!a || a->context->device != c->device) return k_illegal_address;
  if (!a->from_pool && a->context != c) return k_illegal_address;
  return value % 16 ? k_misaligned_address : k_success;
}

bool kernel_matches(const std::string& text, const std::string& kernel, uint64_t threads) {
  // "TEXT@N": TEXT in the name, N threads a block.
  size_t at = text.rfind('@');
  std::string name = at == std::string::npos ? text : text.substr(0, at);
  if (at != std::string::npos && text.substr(at + 1) != std::to_string(threads)) return false;
  return kernel.find(name) != std::string::npos;
}

double kernel_time_ms(const Config& config, const std::string& kernel, uint64_t threads) {
  for (const auto& [text, ms] : config.kernel_ms)
    if (kernel_matches(text, kernel, threads)) return ms;
  return config.default_kernel_ms;
}

}  // namespace detail

using namespace detail;

bool parse_kernel_ms(const std::string& text, Config& config) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(at, end - at);
    size_t eq = item.rfind('=');
    if (eq == std::string::npos || eq == 0) return false;
    char* stop = nullptr;
    double ms = std::strtod(item.c_str() + eq + 1, &stop);
    if (stop == item.c_str() + eq + 1 || *stop || !(ms >= 0)) return false;
    std::string name = item.substr(0, eq);
    if (name == "*") config.default_kernel_ms = ms;
    else config.kernel_ms.emplace_back(name, ms);
    at = end + 1;
  }
  return true;
}

bool configure(const Config& config) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.initialised) {
    return s.config.device_sms == config.device_sms &&
           s.config.driver_version == config.driver_version &&
           s.config.memory_pools == config.memory_pools &&
           s.config.reset_keeps_id == config.reset_keeps_id &&
           s.config.device_name == config.device_name && s.config.sm_count == config.sm_count &&
           s.config.kernel_ms == config.kernel_ms &&
           s.config.default_kernel_ms == config.default_kernel_ms &&
           s.config.kernel_fill == config.kernel_fill;
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
