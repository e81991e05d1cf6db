// NVRTC, loaded at run time: finds libnvrtc, lists its archs, compiles one source to cubin + PTX.
#pragma once

#include "support/expected.h"

#include <cstddef>
#include <functional>
#include <future>
#include <map>
#include <mutex>
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

// Loads libnvrtc. `explicit_path` (if not empty), else $KILN_NVRTC_PATH (if set), is the only
// file tried; otherwise $CUDA_HOME/lib64, /usr/local/cuda/lib64, then the loader's search path
// (libnvrtc.so.13, libnvrtc.so). The error names NVRTC and every place tried.
Expected<const Nvrtc*> load_nvrtc(const std::string& explicit_path = {});

// The "nvrtc_version" key field: the real file name and size of the NVRTC library that
// load_nvrtc(explicit_path) would load, found without loading it where the candidate is a path
// (remembered per process). Errors as load_nvrtc when only the loader can find the library.
Expected<std::string> nvrtc_identity(const std::string& explicit_path = {});

}  // namespace kiln::compiler
