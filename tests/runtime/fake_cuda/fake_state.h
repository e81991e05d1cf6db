// The fake libcuda's state and the rules its entry points share (see fake_cuda.h); internal to
// tests/runtime/fake_cuda.
#pragma once

#include "cubin.h"
#include "fake_cuda.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::fake_cuda::detail {

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

struct Event {
  Context* context = nullptr;
  uint64_t generation = 0;
  bool alive = true;
  bool recorded = false;
  double at_ms = 0;  // the device clock when recorded
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
  std::vector<std::unique_ptr<Event>> timers;  // cuEvent objects
  std::map<int, double> clock_ms;              // per device: the launches' configured times
};

// Whether a Config entry's `text` ("TEXT" or "TEXT@N") matches a launch of `kernel` with
// `threads` a block.
bool kernel_matches(const std::string& text, const std::string& kernel, uint64_t threads);
// The configured time of a launch of `kernel` with `threads` a block (milliseconds).
double kernel_time_ms(const Config& config, const std::string& kernel, uint64_t threads);

extern thread_local std::vector<Context*> t_stack;
extern thread_local int t_capture_mode;  // cuThreadExchangeStreamCaptureMode
extern thread_local std::map<Context*, Stream*> t_per_thread_streams;  // owned by State::streams

State& state();

// The calling thread's current context (top of its stack), or nullptr.
Context* current();

// An event for the record: "WHAT ctx=ID".
std::string tag(const char* what, const Context* c);

// The calling thread's usable context, or the error a call that needs one returns.
int need_context(Context*& out);

// Potentially unsafe calls fail, and invalidate the capture that forbids them, as cuda.h describes
// for cuThreadExchangeStreamCaptureMode: a thread in relaxed mode may make them; otherwise its
// own captures (unless begun relaxed) forbid them, and in global mode so do other threads'
// global captures.
int check_capture_safe(State& s);

// A stream handle as seen from context `c`: created streams must belong to it; the legacy and
// per-thread default streams are `c`'s own.
int resolve_stream(void* handle, Context* c, Stream*& out);

// Frees an allocation's host memory and forgets it.
void release(State& s, std::map<uintptr_t, Allocation>::iterator it);

// Completes the stream-ordered frees of `stream` (or, with nullptr, of every stream of `c`).
void complete_frees(State& s, Context* c, Stream* stream);

// Drops a context's allocations (not pool allocations: those belong to the device) and
// invalidates its handles (destroy or reset).
void tear_down(State& s, Context* c);

// Shared memory a block may opt into on compute capability `sm` (bytes).
int shared_limit(int sm);

// The function behind a handle, or nullptr when it is no function of any module.
Function* find_function(State& s, void* handle);

// The module behind a handle, or nullptr when no module was ever loaded at it.
Module* find_module(State& s, void* handle);

// The pool behind a handle, or nullptr when no pool was created at it.
Pool* find_pool(State& s, void* handle);

// Whether `device` is an ordinal of the configured devices.
bool valid_device(const State& s, int device);

// A new allocation of `bytes` (host memory, 256-byte aligned) owned by `c`; its address.
unsigned long long allocate(State& s, size_t bytes, Context* c, bool from_pool);

// Why a function handle cannot be used from context `c` (0: it can).
int function_error(Function* f, Context* c);

// The live allocation holding [value, value + bytes), or nullptr.
const Allocation* find_allocation(State& s, uint64_t value, size_t bytes);

// A device pointer parameter's fault (0: none): it must lie in a live allocation of the launch's
// context (each context has its own address space; pool allocations belong to the device) and be
// 16-byte aligned.
int pointer_fault(State& s, uint64_t value, const Context* c);

// A 128-byte tensor-map parameter's fault (0: none): it must be one cuTensorMapEncodeTiled wrote,
// and every byte it describes must lie in one live allocation of the launch's device. `address`:
// the map's base address (0 when it is no map).
int tensor_map_fault(State& s, const void* bytes, const Context* c, uint64_t* address);

}  // namespace kiln::fake_cuda::detail

// Opens an entry point that reads or changes shared state: holds the lock as `s`, and fails with
// CUDA_ERROR_NOT_INITIALIZED before cuInit.
#define FAKE_LOCK                                                           \
  ::kiln::fake_cuda::detail::State& s = ::kiln::fake_cuda::detail::state(); \
  std::lock_guard lock(s.mutex);                                            \
  if (!s.initialised) return ::kiln::fake_cuda::detail::k_not_initialized
