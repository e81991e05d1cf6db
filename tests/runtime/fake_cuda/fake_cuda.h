// A fake libcuda for tests: the driver entry points kiln resolves, with the driver's rules that a
// wrong caller breaks, and a record of what the caller did. It runs no kernel (the emulator does).
//
// What it enforces, as the real driver does:
// - a per-thread stack of current contexts; calls that need one fail with CUDA_ERROR_INVALID_CONTEXT
//   without it, and with CUDA_ERROR_CONTEXT_IS_DESTROYED when it has been destroyed;
// - device ordinals, and contexts with ids (cuCtxGetId) that change when a context is created again,
//   even at the same address (a destroyed context's slot is reused first);
// - modules that belong to one context incarnation: a handle that outlived its context (destroyed,
//   or a primary context reset) fails with CUDA_ERROR_INVALID_HANDLE or CONTEXT_IS_DESTROYED;
// - cubins read as the driver reads them: the ELF's SM (no image for another major, or an older
//   minor, CUDA_ERROR_NO_BINARY_FOR_GPU), the CUDA API version against the driver's (an image newer
//   than the driver: CUDA_ERROR_INVALID_IMAGE), each kernel's parameter sizes, maximum block and
//   static shared memory from its .nv.info and .nv.shared sections;
// - launches: block within the kernel's .maxntid, dynamic shared memory within the attribute
//   (default 48 KiB less static), the kernel's parameter count read from kernelParams; every 8-byte
//   parameter that is a device pointer must lie in a live allocation of the launch's device and be
//   16-byte aligned (kiln's kernels issue 16-byte accesses), else a sticky fault
//   (CUDA_ERROR_ILLEGAL_ADDRESS / MISALIGNED_ADDRESS) that every later call in the context returns;
// - stream capture: during a global-mode capture, unsafe calls (cuMemAlloc, cuMemFree, module
//   loads and unloads, synchronous copies and synchronisations) fail with
//   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture; cuMemAllocAsync and launches
//   are captured;
// - stream-ordered frees (cuMemFreeAsync) complete only when their stream or context is
//   synchronised or the stream destroyed, so memory still in use is never handed out again.
//
// Timing: each device has a clock that every launch moves on by its kernel's configured time
// (Config::kernel_ms, else KILN_FAKE_CUDA_KERNEL_MS when the process configured nothing), and an
// event records the clock of the moment it is recorded; cuEventElapsedTime fails on an event not
// recorded (CUDA_ERROR_INVALID_HANDLE), as the driver's does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

extern "C" {
// Driver entry points a test calls itself (kiln resolves the rest through dlsym). Handles are
// opaque pointers; results are CUresult codes.
int cuInit(unsigned flags);
int cuCtxCreate_v2(void** context, unsigned flags, int device);
int cuCtxDestroy_v2(void* context);
int cuCtxPushCurrent_v2(void* context);
int cuCtxPopCurrent_v2(void** context);
int cuCtxSetCurrent(void* context);
int cuCtxGetCurrent(void** context);
int cuCtxGetId(void* context, unsigned long long* id);
int cuCtxSynchronize();
int cuDevicePrimaryCtxRetain(void** context, int device);
int cuDevicePrimaryCtxReset_v2(int device);
int cuStreamCreate(void** stream, unsigned flags);
int cuStreamDestroy_v2(void* stream);
int cuStreamSynchronize(void* stream);
int cuStreamBeginCapture_v2(void* stream, int mode);
int cuStreamEndCapture(void* stream, void** graph);
int cuStreamIsCapturing(void* stream, int* status);
int cuModuleLoadData(void** module, const void* image);
int cuModuleUnload(void* module);
int cuModuleGetFunction(void** function, void* module, const char* name);
int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void* stream, void** params, void** extra);
int cuTensorMapEncodeTiled(void* tensor_map, int type, unsigned rank, void* address,
                           const unsigned long long* dims, const unsigned long long* strides,
                           const unsigned* box, const unsigned* element_strides, int interleave,
                           int swizzle, int l2, int oob_fill);
int cuMemAlloc_v2(unsigned long long* pointer, size_t bytes);
int cuMemFree_v2(unsigned long long pointer);
}

namespace kiln::fake_cuda {

inline void* const k_stream_per_thread = reinterpret_cast<void*>(0x2);  // CU_STREAM_PER_THREAD

struct Config {
  std::vector<int> device_sms{90};  // one entry per device: its compute capability (90 = sm_90)
  int driver_version = 13000;       // what cuDriverGetVersion says
  bool memory_pools = true;         // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
  bool reset_keeps_id = false;      // a primary context reset keeps its id (modules still die)
  std::string device_name = "Fake CUDA Device";  // cuDeviceGetName, every device
  int sm_count = 132;                              // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  // A launch's time in milliseconds: the first entry whose text the kernel's name contains, else
  // default_kernel_ms; an entry "TEXT@N" matches only launches of N threads a block (kernels whose
  // name does not tell their tiles apart: attention's).
  // KILN_FAKE_CUDA_KERNEL_MS="TEXT=MS,TEXT=MS,*=MS" sets both ("*": the default) in a process that
  // did not call configure().
  std::vector<std::pair<std::string, double>> kernel_ms;
  double default_kernel_ms = 0.01;
  // Launches that write something: a launch of a kernel an entry's text matches (as kernel_ms's)
  // fills the allocation its first pointer parameter (a kiln kernel's first store) points into,
  // from there to the allocation's end, with the entry's byte. Other launches write nothing.
  std::vector<std::pair<std::string, unsigned char>> kernel_fill;
};

// The configuration KILN_FAKE_CUDA_KERNEL_MS describes (only kernel_ms and default_kernel_ms set);
// nullopt-like: false when its text is malformed.
bool parse_kernel_ms(const std::string& text, Config& config);

// Sets the fake up; call before the first driver call. Returns false when the driver was already
// initialised with another configuration (a test that needs its own process).
bool configure(const Config& config);

struct Launch {
  unsigned long long context_id = 0;
  int device = 0;
  std::string function;
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned shared_bytes = 0;
  unsigned max_dynamic_shared = 0;  // the function's attribute at launch time
  size_t cubin_params = 0;          // the kernel's parameter count, from its cubin
  std::vector<uint64_t> params;     // each parameter's value (pointers as integers)
  void* stream = nullptr;
  bool captured = false;
  int fault = 0;  // the sticky fault this launch caused (0: none)
  std::thread::id thread;
};

std::vector<Launch> launches();
// Calls of interest in order: "retain device=D", "sync ctx=ID", "unload ctx=ID", "free ctx=ID",
// "alloc_async ctx=ID", "free_async ctx=ID", "module ctx=ID".
std::vector<std::string> events();
// Allocations not yet freed (stream-ordered frees still pending count as live), on `device` or all.
size_t live_allocations(int device = -1);
size_t live_modules();
int primary_retains(int device);
// The sticky fault of a context (0: none).
int sticky_error(void* context);

}  // namespace kiln::fake_cuda
