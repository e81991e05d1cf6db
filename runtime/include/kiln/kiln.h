// kiln's embedding API: compile tensor graphs through the kernel cache and run them on a GPU.
//
//   kiln::RuntimeOptions options;            // cache dir, precision, arch, fallbacks, log
//   auto runtime = kiln::Runtime::create(options);
//   auto exe = (*runtime)->compile_file("mlp.kg");   // a hit costs microseconds
//   Status s = (*exe)->run({x, w1, b1}, {y}, stream);
//
// Nothing here throws: failures come back as kiln::Expected / kiln::Status with a message.
// Every object may be used from many threads at once.
#pragma once

#include "ir/graph.h"
#include "ir/types.h"
#include "support/expected.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

namespace runtime {
class Backend;
struct ExecutableAccess;
}

using ir::DType;
using ir::Precision;

enum class LogLevel { info, warning };

// What happens where kiln cannot compile a graph as asked: refuse (the compile fails and names
// the reason), warn (the fallback is taken, recorded in Executable::fallbacks() and logged as a
// warning), or allow (taken and recorded, not logged).
enum class FallbackPolicy { refuse, warn, allow };

// Whether CUDA compiles take matmul tiles from tuning records (`kiln tune`; docs/cache.md,
// "Tuning records").
enum class Autotune { off, cached, on };

struct RuntimeOptions {
  // Cache directory; empty: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
  std::string cache_dir;
  bool use_cache = true;
  // The fleet's remote cache tier, "redis://[:password@]host:port[/db][?prefix=P]"; unset:
  // $KILN_REMOTE_CACHE; empty: none. Entries are signed and checked with $KILN_REMOTE_KEY when set.
  std::optional<std::string> remote_cache;
  // The graph-wide matmul precision; `automatic` picks high (TF32) on compute capability >= 8.0
  // and highest below, decided per arch and logged once.
  Precision precision = Precision::automatic;
  // Target arch ("sm_90", "sm_90a"); empty: the compute capability of CUDA device `device`, as
  // sm_90a on compute capability 9.0 (code that loads there only). Set it to compile ahead of
  // time on a machine without a GPU (warming a cache for a fleet).
  std::string arch;
  // Where kernels run: "cuda" (the default; also ""; "cuda:sm_90" also sets `arch` where it is
  // empty), "cpu" (this machine's CPU: kernels compiled
  // through LLVM and run on host memory, the modes keeping their numerics), "cpu:NAME" (an LLVM
  // CPU name such as "x86-64-v3", to compile for other machines), or "auto" (CUDA when `arch` is
  // set or device `device` answers, else this CPU). On the CPU, TensorRef pointers are host
  // pointers and the stream arguments are ignored; work is split over $KILN_CPU_THREADS threads
  // (default: the core count). "emulate:sm_XX" ("emulate": sm_90) runs the CUDA kernels of that
  // arch on this CPU under kiln's host emulation of CUDA (built with the host C++ compiler,
  // $KILN_EMU_CXX or g++, when an executable loads; host pointers, as on the CPU): for tests,
  // not for speed.
  std::string target;
  // The emulate target only: how the emulator orders each block's threads and lands cp.async
  // copies: "kind" (the default; also ""), "adversarial", or a seed (decimal digits).
  std::string emulate_schedule;
  // The emulate target only: the multiprocessors of the emulated device, for which a persistent
  // kernel (sm_90a's wgmma matmul) is launched with min(its work tiles, this) blocks, each
  // looping over the rest: 1 to 1024, 0 for an H100 SXM's 132.
  int emulate_sm_count = 0;
  int device = 0;
  // Fallbacks of any kind. The one kind taken by default is an attention kiln cannot fuse (a
  // head dim over 256, a symbolic head dim, an explicit chain whose matmuls differ): it runs as
  // unfused kernels that write and read its S_q x S_k scores, warned about once per compile with
  // the reason and the bytes. `refuse` fails such compiles instead (`kiln --no-fallback`), and
  // refuses precision fallbacks even where allow_fallback is set.
  FallbackPolicy fallbacks = FallbackPolicy::warn;
  // Precision fallbacks: compile a combination the arch cannot run (bf16 or tf32 mma on sm_75)
  // on the best available path instead of refusing it. They change the arithmetic, so they are
  // refused unless allowed here (and `fallbacks` is not `refuse`).
  bool allow_fallback = false;
  // Checks, before each run, that every id an embedding reads straight from an input is a row
  // of its table ([0, V)); a run that holds one fails naming the input, the id's position, the
  // id and V, and runs nothing. Off, such an id reads a row of zeros (never outside the table).
  // run() on the CPU and emulate targets reads the ids in place; run() on the GPU (run_host's
  // too, after its upload) copies the id inputs to the host first, after synchronising the
  // stream (so a checked run waits for the work queued before it), and is refused on a stream
  // being captured.
  bool check_indices = false;
  // Matmul and attention tiles from tuning records (CUDA, on device `device` of the target's arch):
  // `cached` (the default) compiles with the tiles this device's records in the local cache name
  // (read once per runtime, when it first compiles), else the analytic model's; `on` also tunes a
  // matmul or attention problem without a record on its first compile, timing every candidate tile
  // on the device (seconds per problem) and storing the record; `off` takes the model's tiles only.
  // With no device (an `arch` given for compiling ahead of time) every mode takes the model's
  // tiles.
  Autotune autotune = Autotune::cached;
  // NVRTC threads per graph; 0: $KILN_COMPILE_THREADS, else the core count.
  int compile_threads = 0;
  // Receives info and warnings; default: warnings to stderr, prefixed "kiln: ".
  std::function<void(LogLevel, std::string_view)> log;
};

// A device buffer handed to Executable::run, described so that it can be checked.
struct TensorRef {
  void* data = nullptr;  // a CUDA device pointer (a host pointer for the CPU target)
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
};

// A graph input or output as the executable expects it.
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  // For a symbolic graph's spec (Executable::inputs()), a symbolic dim holds its upper bound;
  // inputs_at()/outputs_at() give the shapes at given sizes.
  std::vector<int64_t> shape;
  // Symbolic graphs: per dim, the name of its symbolic dim ("" for a constant); else empty.
  std::vector<std::string> dims;
};

// A symbolic dimension of a graph (`dim B: 1..4096`): its name and inclusive range.
struct DimSpec {
  std::string name;
  int64_t lo = 1;
  int64_t hi = 1;
};

// Whether kernels can run here: ok, or "no CUDA driver found: ..." / "no CUDA device: ...".
Status gpu_status();

// Device memory on CUDA device `device` (its primary context), freed on destruction. A small
// convenience for examples and tests; applications usually bring their own allocations. Usable
// from any thread: each call makes the buffer's context current for itself and restores the
// caller's. Each context has its own address space: pass these buffers to run() with the primary
// context current, a stream of it, or no context current, not with a context you created.
class DeviceBuffer {
public:
  static Expected<DeviceBuffer> allocate(size_t bytes, int device = 0);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return reinterpret_cast<void*>(m_pointer); }
  size_t size() const { return m_bytes; }
  int device() const { return m_device; }
  // Copies host bytes in or out (synchronously); `bytes` must not exceed size().
  Status upload(const void* host, size_t bytes);
  Status download(void* host, size_t bytes) const;

private:
  uintptr_t m_pointer = 0;
  size_t m_bytes = 0;
  int m_device = 0;
};

// A compiled graph, ready to run: what it is (specs, arch, precision, cache outcome) and the
// One kernel of a run timed by Executable::run_timed.
struct KernelTime {
  std::string name;  // the artifact's name for it ("k3_matmul_tf32_64x64")
  double us = 0;     // wall time from its dispatch to its last work item's end (the thread pool's
                     // wake-up and join included)
};

// backend that runs it (the CUDA driver, per-bucket dispatch of a symbolic graph, or the CPU
// target). Made by Runtime::compile*.
class Executable {
public:
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  bool cache_hit() const { return m_cache_hit; }
  // Where a hit came from: "local" (this machine's store) or "remote" (the fleet's tier, now also
  // stored locally); "" for a miss.
  const std::string& cache_tier() const { return m_cache_tier; }
  double compile_ms() const { return m_compile_ms; }  // of the compile that made it
  double lookup_us() const { return m_lookup_us; }
  const std::string& key() const { return m_key; }
  const std::string& graph_hash() const { return m_graph_hash; }
  const std::string& arch() const { return m_arch; }
  const std::string& precision() const { return m_precision; }  // resolved
  const std::vector<std::string>& fallbacks() const { return m_fallbacks; }
  const std::vector<TensorSpec>& inputs() const { return m_inputs; }
  const std::vector<TensorSpec>& outputs() const { return m_outputs; }
  size_t kernel_count() const { return m_kernel_count; }
  int device() const { return m_device; }  // RuntimeOptions::device
  bool on_cpu() const { return m_on_cpu; }  // compiled for the CPU target: host pointers

  // Symbolic graphs (`dim B: 1..4096`): the dims, numbered by first use; empty for a static
  // graph. Such an executable serves every size in the ranges: run() reads the dims' values from
  // the input shapes and runs the kernels of the bucket holding them ([1,1] [2,2] [3,4] [5,8]
  // ... [2^(k-1)+1, 2^k] per dim), compiling that bucket through the cache on first use (one
  // bucket at a time per executable). Each bucket is its own cache entry, so key(),
  // cache_hit(), compile_ms(), lookup_us() and kernel_count() stay empty and zero here.
  const std::vector<DimSpec>& dims() const { return m_dims; }
  // The inputs' and outputs' specs at the dims' `values` (one per dims(), in its order); for a
  // static graph `values` is empty and these are inputs() and outputs(). Fails naming a value
  // outside its range.
  Expected<std::vector<TensorSpec>> inputs_at(const std::vector<int64_t>& values) const;
  Expected<std::vector<TensorSpec>> outputs_at(const std::vector<int64_t>& values) const;
  // The dims' values (in dims()' order) that inputs of `input_shapes` give, as run() reads
  // them; empty for a static graph. Fails as run() would, naming the input and dim: a wrong
  // count or rank, a constant dim that differs, a dim given two values, a value out of range.
  Expected<std::vector<int64_t>> dims_of(const std::vector<std::vector<int64_t>>& input_shapes) const;
  // Symbolic graphs: compiles (through the cache) and prepares the bucket holding `values`
  // ahead of time, as prepare(stream) does for a static graph; call it for every bucket a
  // captured run may use. A static graph takes no values.
  Status prepare(const std::vector<int64_t>& values, void* stream = nullptr);

  // Loads the kernels in the context that run(..., stream) will use and checks that the driver
  // and device can run them ("CUDA driver 12.2 cannot load cubins from NVRTC 13.0 ...", "kernels
  // compiled for sm_90 cannot run here: CUDA device 1 is sm_80 ..."). After it, run() on that
  // context makes no call that stream capture forbids: call it before capturing run() into a
  // CUDA graph, and keep the Executable alive while that graph may be launched (the graph uses
  // its kernels; memory nodes for the temporaries make it a graph instantiated once at a time).
  // Optional otherwise: the first run() in a context prepares it. Safe while another thread
  // captures: kiln's own loads and allocations run in relaxed capture mode.
  // Destroying an Executable waits for its kernels and unloads them in every context it ran in:
  // destroy it before destroying a context you created and ran it in.
  Status prepare(void* stream = nullptr);

  // Launches the graph's kernels on `stream` (a CUstream; nullptr: the legacy default stream;
  // CU_STREAM_PER_THREAD works too) with device pointers in declaration order, on device
  // device(): in `stream`'s context, which must be on that device, or for a default stream in
  // the current context when it is on that device, else in the device's primary context (made
  // current for the call only). Checks counts, dtypes, shapes and 16-byte alignment of every
  // pointer first (the kernels use 16-byte accesses). Temporaries come from kiln's stream-ordered
  // memory pool for the device (allocated and freed on `stream` per run, kept reserved in the
  // pool between runs), so concurrent runs never share them. Fails with "no CUDA driver found" or "no CUDA device"
  // where there is none, as prepare() does, and with the driver's message when a launch fails.
  // Does not synchronise the stream (except on a device without memory pools, where the
  // temporaries are freed after the stream is synchronised).
  Status run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
             void* stream = nullptr);

  // run() on the CPU target, timing each kernel: `kernels` is set to one entry per kernel, in
  // the order they ran (a symbolic graph's: its bucket's kernels). What the run spends outside
  // them (temporaries, dispatch between kernels) is the caller's wall time of the call less
  // their sum. Checks its arguments as run() does; fails on any other target (the GPU and the
  // emulator are not timed per kernel here).
  Status run_timed(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs,
                   std::vector<KernelTime>& kernels);

  // Host convenience for tools and tests: copies each input's bytes (device layout, in
  // declaration order) to fresh device buffers on device(), runs, waits, and returns each
  // output's bytes.
  // Fails as run() does, or when an input's size is not its spec's.
  Expected<std::vector<std::vector<unsigned char>>> run_host(
      const std::vector<std::vector<unsigned char>>& inputs);
  // The same at the dims' `values` (a symbolic graph's inputs carry no shapes of their own).
  Expected<std::vector<std::vector<unsigned char>>> run_host(
      const std::vector<std::vector<unsigned char>>& inputs, const std::vector<int64_t>& values);

private:
  Executable();
  // run()'s argument checks: counts, dtypes and shapes against the specs (at the symbols'
  // values the input shapes give, returned; empty for a static graph), and the ids
  // check_indices asks for.
  Expected<std::vector<int64_t>> check_run(const std::vector<TensorRef>& inputs,
                                           const std::vector<TensorRef>& outputs, void* stream);
  // RuntimeOptions::check_indices: the ids in `ids` (i32 or i64, `count` of them, shaped
  // `shape`) of every embedding read straight from an input.
  Status check_indices(size_t input, const void* ids, const std::vector<int64_t>& shape) const;

  // An embedding whose ids are input `input`: its table has `rows` rows and is named `table`.
  struct IndexCheck {
    size_t input = 0;
    int64_t rows = 0;
    std::string table;
  };
  std::vector<IndexCheck> m_index_checks;
  bool m_check_indices = false;

  bool m_cache_hit = false;
  double m_compile_ms = 0;
  double m_lookup_us = 0;
  std::string m_key, m_graph_hash, m_arch, m_precision, m_cache_tier;
  std::vector<std::string> m_fallbacks;
  std::vector<TensorSpec> m_inputs, m_outputs;
  size_t m_kernel_count = 0;
  int m_device = 0;
  bool m_on_cpu = false;
  std::vector<DimSpec> m_dims;
  std::optional<ir::Graph> m_graph;  // symbolic graphs: for the specs at given sizes
  // A symbolic graph's specs at the symbols' values of the last run, reused while they repeat.
  struct BoundSpecs {
    std::vector<int64_t> values;
    std::vector<TensorSpec> inputs, outputs;
  };
  std::mutex m_bound_mutex;
  std::optional<BoundSpecs> m_bound;
  std::string m_graph_name;
  std::unique_ptr<runtime::Backend> m_backend;

  friend struct runtime::ExecutableAccess;
};

class Runtime {
public:
  // Opens the cache (a cache that cannot be opened is reported once and bypassed) and settles
  // the target arch: options.arch, else the device's compute capability. Fails on a bad arch,
  // or when no arch is given and no CUDA device can be queried.
  static Expected<std::unique_ptr<Runtime>> create(RuntimeOptions options = {});
  virtual ~Runtime() = default;

  // The target, e.g. "sm_90", or "cpu:znver4" for the CPU target.
  virtual const std::string& arch() const = 0;

  // Compiles through the cache. Fails on a precision the arch cannot run (unless fallbacks are
  // allowed), when NVRTC is missing, or when a kernel does not compile (with NVRTC's log). A
  // symbolic graph compiles nothing yet: each bucket compiles on first use (or prepare(values))
  // through this runtime's cache, which the executable keeps alive.
  virtual Expected<std::shared_ptr<Executable>> compile(const ir::Graph& graph) = 0;
  // Parses a .kg file first; a bad graph fails with "file:line:col: error: ...".
  virtual Expected<std::shared_ptr<Executable>> compile_file(const std::string& path) = 0;
  virtual Expected<std::shared_ptr<Executable>> compile_text(std::string_view text,
                                                             std::string_view name) = 0;
};

}  // namespace kiln
