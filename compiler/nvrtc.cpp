// dlopen-based NVRTC binding: only the dozen entry points kiln calls.
#include "compiler/nvrtc.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

namespace kiln::compiler {

using nvrtcProgram = struct _nvrtcProgram*;
using Result = int;  // nvrtcResult; 0 is NVRTC_SUCCESS

struct Nvrtc::Api {
  Result (*version)(int*, int*);
  Result (*num_archs)(int*);
  Result (*archs)(int*);
  const char* (*error_string)(Result);
  Result (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                   const char* const*);
  Result (*destroy)(nvrtcProgram*);
  Result (*compile)(nvrtcProgram, int, const char* const*);
  Result (*log_size)(nvrtcProgram, size_t*);
  Result (*log)(nvrtcProgram, char*);
  Result (*ptx_size)(nvrtcProgram, size_t*);
  Result (*ptx)(nvrtcProgram, char*);
  Result (*cubin_size)(nvrtcProgram, size_t*);
  Result (*cubin)(nvrtcProgram, char*);
};

namespace {

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

Expected<std::unique_ptr<Nvrtc::Api>> open_api(const std::string& path, std::string& why) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    why = err ? err : "cannot open";
    return Error{why};
  }
  auto api = std::make_unique<Nvrtc::Api>();
  bool ok = bind(lib, "nvrtcVersion", api->version) &&
            bind(lib, "nvrtcGetNumSupportedArchs", api->num_archs) &&
            bind(lib, "nvrtcGetSupportedArchs", api->archs) &&
            bind(lib, "nvrtcGetErrorString", api->error_string) &&
            bind(lib, "nvrtcCreateProgram", api->create) &&
            bind(lib, "nvrtcDestroyProgram", api->destroy) &&
            bind(lib, "nvrtcCompileProgram", api->compile) &&
            bind(lib, "nvrtcGetProgramLogSize", api->log_size) &&
            bind(lib, "nvrtcGetProgramLog", api->log) &&
            bind(lib, "nvrtcGetPTXSize", api->ptx_size) && bind(lib, "nvrtcGetPTX", api->ptx) &&
            bind(lib, "nvrtcGetCUBINSize", api->cubin_size) &&
            bind(lib, "nvrtcGetCUBIN", api->cubin);
  if (!ok) {
    dlclose(lib);
    why = "missing NVRTC entry points";
    return Error{why};
  }
  return api;
}

std::vector<std::string> candidates(const std::string& explicit_path) {
  if (!explicit_path.empty()) return {explicit_path};
  if (const char* env = std::getenv("KILN_NVRTC_PATH"); env && *env) return {env};
  std::vector<std::string> list;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) {
    list.push_back(std::string(home) + "/lib64/libnvrtc.so.13");
    list.push_back(std::string(home) + "/lib64/libnvrtc.so");
  }
  list.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
  list.push_back("/usr/local/cuda/lib64/libnvrtc.so");
  list.push_back("libnvrtc.so.13");
  list.push_back("libnvrtc.so");
  return list;
}

// "13.0 libnvrtc.so.13.0.88 104938272": the file the loader actually opened, and its size.
// "<real file name> <size>" of a library file: names the exact NVRTC build without loading it,
// and stays the same on every machine with the same toolkit (no path, no time stamp).
std::string file_identity(const std::string& path) {
  std::string file = path;
  if (char* real = realpath(path.c_str(), nullptr)) {
    file = real;
    std::free(real);
  }
  struct stat st {};
  size_t slash = file.rfind('/');
  std::string id = slash == std::string::npos ? file : file.substr(slash + 1);
  if (stat(file.c_str(), &st) == 0) id += " " + std::to_string(static_cast<long long>(st.st_size));
  return id;
}

// The identity of a loaded library, found through one of its symbols.
std::string identity_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || !info.dli_fname) return "unknown";
  return file_identity(info.dli_fname);
}

// The first line of an NVRTC log that reports an error ("k.cu(12): error: ...", "k.cu(9): Error:
// ...", "ptxas error   : ..."), or empty. Warnings may come before it.
std::string_view first_error_line(std::string_view log) {
  constexpr std::string_view k_starts[] = {"error", "ptxas error", "ptxas fatal"};
  constexpr std::string_view k_contains[] = {": error", ": catastrophic error", ": fatal error"};
  while (!log.empty()) {
    size_t end = log.find('\n');
    std::string_view line = log.substr(0, end);
    std::string lower(line);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (std::string_view start : k_starts) {
      if (lower.rfind(start, 0) == 0) return line;
    }
    for (std::string_view part : k_contains) {
      if (lower.find(part) != std::string::npos) return line;
    }
    if (end == std::string_view::npos) break;
    log.remove_prefix(end + 1);
  }
  return {};
}

std::mutex g_mutex;
std::map<std::string, std::unique_ptr<Nvrtc>>& loaded() {
  static std::map<std::string, std::unique_ptr<Nvrtc>> libs;
  return libs;
}
std::vector<std::unique_ptr<Nvrtc::Api>>& apis() {
  static std::vector<std::unique_ptr<Nvrtc::Api>> list;
  return list;
}

}  // namespace

Expected<const Nvrtc*> load_nvrtc(const std::string& explicit_path) {
  std::lock_guard lock(g_mutex);
  std::string tried;
  for (const std::string& path : candidates(explicit_path)) {
    if (auto it = loaded().find(path); it != loaded().end()) return it->second.get();
    std::string why;
    auto api = open_api(path, why);
    if (!api) {
      tried += "\n  " + path + ": " + why;
      continue;
    }
    auto lib = std::make_unique<Nvrtc>();
    lib->m_path = path;
    int major = 0, minor = 0;
    (*api)->version(&major, &minor);
    lib->m_version = std::to_string(major) + "." + std::to_string(minor);
    lib->m_identity = identity_of(reinterpret_cast<const void*>((*api)->version));
    int n = 0;
    if ((*api)->num_archs(&n) == 0 && n > 0 && n < 1000) {
      lib->m_archs.resize(static_cast<size_t>(n));
      if ((*api)->archs(lib->m_archs.data()) != 0) lib->m_archs.clear();
    }
    lib->m_api = api->get();
    apis().push_back(std::move(*api));
    const Nvrtc* result = lib.get();
    loaded()[path] = std::move(lib);
    return result;
  }
  return make_error("nvrtc: cannot load the NVRTC library (libnvrtc); tried:", tried,
                    "\n  set KILN_NVRTC_PATH or CUDA_HOME to a CUDA toolkit's NVRTC");
}

Expected<std::string> nvrtc_identity(const std::string& explicit_path) {
  // A cache lookup needs this before any compile: stat the first candidate file rather than
  // load a 100 MB library (milliseconds warm, over 100 ms cold). Bare sonames are found only by
  // the loader, so for those the library is loaded.
  static std::mutex mutex;
  static std::map<std::string, std::string> known;  // lookup only
  std::string memo_key = explicit_path + '\n' + (std::getenv("KILN_NVRTC_PATH") ? std::getenv("KILN_NVRTC_PATH") : "") +
                         '\n' + (std::getenv("CUDA_HOME") ? std::getenv("CUDA_HOME") : "");
  {
    std::lock_guard lock(mutex);
    if (auto it = known.find(memo_key); it != known.end()) return it->second;
  }
  std::string identity;
  for (const std::string& path : candidates(explicit_path)) {
    struct stat st {};
    if (path.find('/') == std::string::npos) break;
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      identity = file_identity(path);
      break;
    }
  }
  if (identity.empty()) {
    auto lib = load_nvrtc(explicit_path);
    if (!lib) return lib.error();
    identity = (*lib)->identity();
  }
  std::lock_guard lock(mutex);
  known.emplace(std::move(memo_key), identity);
  return identity;
}

Expected<NvrtcOutput> Nvrtc::compile(const std::string& source, const std::string& name,
                                     const std::string& arch) const {
  const Api& api = *m_api;
  nvrtcProgram prog = nullptr;
  std::string file = name + ".cu";
  Result r = api.create(&prog, source.c_str(), file.c_str(), 0, nullptr, nullptr);
  if (r != 0) {
    return make_error("nvrtc: creating program '", name, "' failed: ", api.error_string(r));
  }
  std::string flag = "-arch=" + arch;
  const char* opts[] = {flag.c_str(), "-std=c++17", "-Xptxas=-v"};
  Result cr = api.compile(prog, 3, opts);
  NvrtcOutput out;
  size_t size = 0;
  if (api.log_size(prog, &size) == 0 && size > 1) {
    out.log.resize(size);
    api.log(prog, out.log.data());
    out.log.resize(size - 1);
  }
  if (cr != 0) {
    api.destroy(&prog);
    // The first error leads: the log after it may be long.
    std::string_view first = first_error_line(out.log);
    return make_error("nvrtc: compiling '", name, "' for ", arch, " failed: ",
                      first.empty() ? std::string(api.error_string(cr)) : std::string(first),
                      "\n", out.log);
  }
  if (api.ptx_size(prog, &size) == 0 && size > 0) {
    out.ptx.resize(size);
    api.ptx(prog, out.ptx.data());
    if (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  if (api.cubin_size(prog, &size) == 0 && size > 0) {
    out.cubin.resize(size);
    api.cubin(prog, out.cubin.data());
  }
  api.destroy(&prog);
  if (out.cubin.empty()) {
    return make_error("nvrtc: compiling '", name, "' for ", arch, " produced no cubin\n", out.log);
  }
  return out;
}

Expected<NvrtcOutput> KernelMemo::get(const std::string& key,
                                      const std::function<Expected<NvrtcOutput>()>& compile) {
  std::promise<Expected<NvrtcOutput>> promise;
  std::shared_future<Expected<NvrtcOutput>> kept;
  {
    std::lock_guard lock(m_mutex);
    if (auto it = m_outputs.find(key); it != m_outputs.end()) {
      ++m_reused;
      kept = it->second;
    } else {
      ++m_compiled;
      m_outputs.emplace(key, promise.get_future().share());
    }
  }
  if (kept.valid()) {
    try {
      return kept.get();  // waits where another call is compiling it
    } catch (const std::exception& e) {  // that call could not hand its output over
      return make_error("nvrtc: ", e.what());
    }
  }
  Expected<NvrtcOutput> out = Error{"nvrtc: the compile did not finish"};
  try {
    out = compile();
  } catch (const std::exception& e) {
    out = make_error("nvrtc: ", e.what());
  } catch (...) {
    out = make_error("nvrtc: the compile failed with an unknown exception");
  }
  bool handed = false;
  try {
    promise.set_value(out);
    handed = true;
  } catch (const std::exception&) {  // calls waiting meanwhile get an error, not a crash
  }
  // Only outputs are kept: a failed compile (out of memory, say) is tried again by the next
  // call that asks, rather than failing every candidate after it.
  if (!out || !handed) {
    std::lock_guard lock(m_mutex);
    m_outputs.erase(key);
  }
  return out;
}

size_t KernelMemo::compiled() const {
  std::lock_guard lock(m_mutex);
  return m_compiled;
}

size_t KernelMemo::reused() const {
  std::lock_guard lock(m_mutex);
  return m_reused;
}

}  // namespace kiln::compiler
