// NVRTC, loaded at run time: finds libnvrtc, lists its archs, compiles one source to cubin + PTX.
#pragma once

#include "support/expected.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler {

struct NvrtcOutput {
  std::string cubin;
  std::string ptx;
  std::string log;  // NVRTC's program log, ptxas -v report included
};

// A loaded libnvrtc. Loaded libraries stay loaded for the life of the process.
class Nvrtc {
 public:
  const std::string& path() const { return m_path; }
  // "13.0".
  const std::string& version() const { return m_version; }
  // What distinguishes this NVRTC in cache keys: version, the library's real file name and its
  // size, e.g. "13.0 libnvrtc.so.13.0.88 104938272".
  const std::string& identity() const { return m_identity; }
  // Real architectures it can compile for, e.g. {75, 80, ..., 121}.
  const std::vector<int>& archs() const { return m_archs; }

  // Compiles `source` (program `name`) for `arch` ("sm_90", "sm_90a") with ptxas -v; keeps cubin
  // and PTX. A failed compile is an error carrying the program log.
  Expected<NvrtcOutput> compile(const std::string& source, const std::string& name,
                                const std::string& arch) const;

  struct Api;  // the resolved entry points

 private:
  friend Expected<const Nvrtc*> load_nvrtc(const std::string& explicit_path);
  std::string m_path;
  std::string m_version;
  std::string m_identity;
  std::vector<int> m_archs;
  const Api* m_api = nullptr;
};

// NVRTC's outputs kept for compiles that share them (CompileOptions::kernel_memo): kiln tune
// compiles its graph once per candidate tile of one kernel, and every other kernel's source is the
// same each time. A kernel is compiled once per source, name, arch and NVRTC; a compile that asks
// for one another is running waits for it. A failed compile is not kept (the next call tries
// again). Thread-safe; holds every output until destroyed.
class KernelMemo {
 public:
  // The output kept for `key`, else compile()'s, kept.
  Expected<NvrtcOutput> get(const std::string& key,
                            const std::function<Expected<NvrtcOutput>()>& compile);
  // NVRTC compiles run through it, and calls answered from what it kept.
  size_t compiled() const;
  size_t reused() const;

 private:
  mutable std::mutex m_mutex;
  std::map<std::string, std::shared_future<Expected<NvrtcOutput>>> m_outputs;
  size_t m_compiled = 0, m_reused = 0;
};

// NVRTC's outputs kept on disk across processes and runs, in the folder $KILN_KERNEL_CACHE_DIR
// names (unset, the default: nothing kept). A graph's compile finds there each kernel any earlier
// compile made (same source, name, arch, flags and NVRTC, whatever the graph), so graphs that
// share kernels (a model's layers, kiln tune's candidates, a test suite's) compile each once. An
// entry is one file, "<32 hex digits>.kernel": a header, the cubin, PTX and log, and an XXH3-128
// checksum; it is written to a private file and renamed into place, so a reader sees it whole or
// not at all, and one that does not check out is removed and compiled again. Cubins run as the
// user, so the folder must be theirs alone (support/private_dir.h), else it is not used (said once
// on stderr). Past its limit (k_max_bytes unless open() is given another), the least recently
// used entries are removed, down to three quarters of it: when a process opens the folder, and
// again each time this object has saved a quarter of the limit since (so a long-lived process
// keeps the folder within 1.25 times the limit, other processes' saves aside). Thread-safe.
class KernelStore {
 public:
  static constexpr uint64_t k_max_bytes = uint64_t{2} << 30;
  // The store in `dir`, created if missing, its entries pruned to `max_bytes`; the error says
  // why the folder cannot be used.
  static Expected<std::shared_ptr<KernelStore>> open(const std::string& dir,
                                                      uint64_t max_bytes = k_max_bytes);
  // The store $KILN_KERNEL_CACHE_DIR names (one per folder and process), or null: unset, or the
  // folder refused (said once per folder and process).
  static std::shared_ptr<KernelStore> from_environment();

  // The outputs kept under `key` (32 lower-case hex digits), or nullopt: none, or an entry that
  // does not check out (removed).
  std::optional<NvrtcOutput> load(const std::string& key) const;
  // Keeps `out` under `key`; false where it could not be written (nothing is left half written).
  bool save(const std::string& key, const NvrtcOutput& out) const;
  // Calls of load() answered with an entry, and entries removed as damaged, by this object.
  size_t hits() const { return m_hits; }
  size_t damaged() const { return m_damaged; }

 private:
  KernelStore(std::string dir, uint64_t max_bytes)
      : m_dir(std::move(dir)), m_max_bytes(max_bytes) {}
  std::string m_dir;
  uint64_t m_max_bytes;
  mutable std::atomic<size_t> m_hits{0}, m_damaged{0};
  mutable std::atomic<uint64_t> m_saved_since_prune{0};  // bytes
  mutable std::mutex m_prune;                             // one prune at a time
};

// The key under which a kernel's NVRTC outputs are kept (KernelMemo, KernelStore): a hash of the
// NVRTC identity, arch, NVRTC's flags, program name and source.
std::string kernel_key(const std::string& nvrtc_identity, const std::string& arch,
                       const std::string& name, const std::string& source);

// Loads libnvrtc. `explicit_path` (if not empty), else $KILN_NVRTC_PATH (if set), is the only
// file tried; otherwise $CUDA_HOME/lib64, /usr/local/cuda/lib64, then the loader's search path
// (libnvrtc.so.13, libnvrtc.so). The error names NVRTC and every place tried.
Expected<const Nvrtc*> load_nvrtc(const std::string& explicit_path = {});

// The "nvrtc_version" key field: the real file name and size of the NVRTC library that
// load_nvrtc(explicit_path) would load, found without loading it where the candidate is a path
// (remembered per process). Errors as load_nvrtc when only the loader can find the library.
Expected<std::string> nvrtc_identity(const std::string& explicit_path = {});

}  // namespace kiln::compiler
