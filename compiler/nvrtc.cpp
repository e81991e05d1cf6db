// dlopen-based NVRTC binding: only the dozen entry points kiln calls.
#include "compiler/nvrtc.h"

#include "ir/hash.h"
#include "support/private_dir.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>
#include <vector>

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

// NVRTC's flags besides -arch (in kernel_key: a change to them changes every key).
constexpr const char* k_flags[] = {"-std=c++17", "-Xptxas=-v"};

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
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  std::string memo_key = explicit_path + '\n' + env("KILN_NVRTC_PATH") + '\n' + env("CUDA_HOME");
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
  const char* opts[] = {flag.c_str(), k_flags[0], k_flags[1]};
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

// ---- KernelStore -------------------------------------------------------------------------

namespace {

namespace fs = std::filesystem;

// An entry: k_store_magic, the key and '\n', the cubin's, PTX's and log's sizes (u64 each,
// little-endian), their bytes, then XXH3-128 of everything before (high half, then low, each
// little-endian).
constexpr std::string_view k_store_magic = "kiln kernel 1\n";
constexpr size_t k_store_header = k_store_magic.size() + 33 + 3 * 8;
constexpr uint64_t k_max_entry_bytes = uint64_t{1} << 30;  // larger files are not read

bool is_key(const std::string& key) {
  return key.size() == 32 && key.find_first_not_of("0123456789abcdef") == std::string::npos;
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

std::string checksum(std::string_view bytes) {
  ir::Hash128 h = ir::hash_bytes(bytes.data(), bytes.size());
  std::string out;
  put_u64(out, h.high);
  put_u64(out, h.low);
  return out;
}

// The whole of the file at `path`, or nullopt: none, or not one save() makes (a regular file of
// the user's with one link, not a symbolic link; a pipe does not block the open), or over
// `limit` bytes. `st` is the file's status, as read from the file opened.
std::optional<std::string> read_entry_file(const std::string& path, uint64_t limit,
                                           struct stat& st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> bytes;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      st.st_nlink == 1 && st.st_size >= 0 && static_cast<uint64_t>(st.st_size) <= limit) {
    std::string data(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < data.size()) {
      ssize_t n = ::read(fd, data.data() + got, data.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got == data.size()) bytes = std::move(data);
  }
  ::close(fd);
  return bytes;
}

// Removes the least recently used entries of `dir` while they take more than `max_bytes` (down to
// three quarters of it), and files of saves that stopped more than a day ago.
void prune_store(const std::string& dir, uint64_t max_bytes) {
  std::error_code ec;
  std::vector<std::tuple<fs::file_time_type, uint64_t, fs::path>> entries;
  uint64_t total = 0;
  auto now = fs::file_time_type::clock::now();
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {  // other processes may add and remove meanwhile
    const fs::path& path = it->path();
    std::string name = path.filename().string();
    std::error_code stat_ec;
    if (!it->is_regular_file(stat_ec) || it->is_symlink(stat_ec)) continue;
    auto when = fs::last_write_time(path, stat_ec);
    uint64_t size = it->file_size(stat_ec);
    if (stat_ec) continue;
    if (name.rfind(".saving-", 0) == 0) {
      if (now - when > std::chrono::hours(24)) fs::remove(path, stat_ec);
    } else if (name.size() == 39 && name.compare(32, 7, ".kernel") == 0 &&
               is_key(name.substr(0, 32))) {
      entries.emplace_back(when, size, path);
      total += size;
    }
  }
  if (total <= max_bytes) return;
  std::sort(entries.begin(), entries.end());
  for (const auto& [when, size, path] : entries) {
    if (total <= max_bytes / 4 * 3) break;
    // Gone either way where another process pruning at once removed it first (remove() then
    // returns false without an error): counting only its own removals, each would remove all.
    std::error_code remove_ec;
    fs::remove(path, remove_ec);
    if (!remove_ec) total -= size;
  }
}

}  // namespace

std::string kernel_key(const std::string& nvrtc_identity, const std::string& arch,
                       const std::string& name, const std::string& source) {
  std::string text = "kiln kernel key 1\n" + nvrtc_identity + "\n" + arch + "\n";
  for (const char* flag : k_flags) text += std::string(flag) + "\n";
  text += name + "\n" + source;
  return ir::hash_bytes(text.data(), text.size()).hex();
}

Expected<std::shared_ptr<KernelStore>> KernelStore::open(const std::string& dir,
                                                         uint64_t max_bytes) {
  if (dir.empty()) return make_error("the kernel cache folder is empty");
  Expected<std::string> path = private_folder(dir);
  if (!path) return make_error("the kernel cache folder '", dir, "' ", path.error().message);
  prune_store(*path, max_bytes);
  return std::shared_ptr<KernelStore>(new KernelStore(*path, max_bytes));
}

std::shared_ptr<KernelStore> KernelStore::from_environment() {
  const char* env = std::getenv("KILN_KERNEL_CACHE_DIR");
  if (!env || !*env) return nullptr;
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<KernelStore>> opened;  // null: refused
  std::lock_guard lock(mutex);
  if (auto it = opened.find(env); it != opened.end()) return it->second;
  std::shared_ptr<KernelStore> store;
  if (auto s = open(env)) {
    store = *s;
  } else {
    std::fprintf(stderr, "kiln: %s (KILN_KERNEL_CACHE_DIR); kernels are compiled without it\n",
                 s.error().message.c_str());
  }
  opened.emplace(env, store);
  return store;
}

std::optional<NvrtcOutput> KernelStore::load(const std::string& key) const {
  if (!is_key(key)) return std::nullopt;
  std::string path = m_dir + "/" + key + ".kernel";
  struct stat seen {};
  std::optional<std::string> bytes = read_entry_file(path, k_max_entry_bytes, seen);
  if (!bytes) return std::nullopt;
  auto damaged = [&]() -> std::optional<NvrtcOutput> {
    // Only the file read: a good entry another process renamed into place meanwhile stays (a
    // rename between this check and the unlink, microseconds, still loses it: one recompile).
    struct stat now {};
    if (::lstat(path.c_str(), &now) == 0 && now.st_dev == seen.st_dev &&
        now.st_ino == seen.st_ino) {
      ::unlink(path.c_str());
    }
    ++m_damaged;
    return std::nullopt;
  };
  const std::string& b = *bytes;
  if (b.size() < k_store_header + 16 || b.compare(0, k_store_magic.size(), k_store_magic) != 0 ||
      b.compare(k_store_magic.size(), 33, key + "\n") != 0) {
    return damaged();
  }
  const char* sizes = b.data() + k_store_magic.size() + 33;
  uint64_t cubin = get_u64(sizes), ptx = get_u64(sizes + 8), log = get_u64(sizes + 16);
  uint64_t body = b.size() - k_store_header - 16;
  if (cubin == 0 || cubin > body || ptx > body - cubin || log != body - cubin - ptx)
    return damaged();
  std::string_view covered(b.data(), b.size() - 16);
  if (checksum(covered) != std::string_view(b).substr(b.size() - 16)) return damaged();
  NvrtcOutput out;
  size_t at = k_store_header;
  out.cubin = b.substr(at, cubin);
  out.ptx = b.substr(at + cubin, ptx);
  out.log = b.substr(at + cubin + ptx, log);
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);  // recently used
  ++m_hits;
  return out;
}

bool KernelStore::save(const std::string& key, const NvrtcOutput& out) const {
  if (!is_key(key) || out.cubin.empty()) return false;
  std::string bytes(k_store_magic);
  bytes += key + "\n";
  put_u64(bytes, out.cubin.size());
  put_u64(bytes, out.ptx.size());
  put_u64(bytes, out.log.size());
  bytes += out.cubin;
  bytes += out.ptx;
  bytes += out.log;
  bytes += checksum(bytes);
  std::string pattern = m_dir + "/.saving-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  int fd = ::mkostemp(name.data(), O_CLOEXEC);  // mode 0600
  if (fd < 0) return false;
  size_t put = 0;
  while (put < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    put += static_cast<size_t>(n);
  }
  bool ok = ::close(fd) == 0 && put == bytes.size();
  std::string path = m_dir + "/" + key + ".kernel";
  if (!ok || ::rename(name.data(), path.c_str()) != 0) {
    ::unlink(name.data());
    return false;
  }
  // A quarter of the limit saved since the last prune: prune again (one thread; the others go
  // on, their bytes counted towards the next).
  uint64_t quarter = std::max<uint64_t>(m_max_bytes / 4, 1);
  if (m_saved_since_prune.fetch_add(bytes.size()) + bytes.size() >= quarter) {
    std::unique_lock lock(m_prune, std::try_to_lock);
    if (lock.owns_lock()) {
      uint64_t saved = m_saved_since_prune.exchange(0);
      if (saved >= quarter) {
        prune_store(m_dir, m_max_bytes);
      } else {
        m_saved_since_prune += saved;  // another thread pruned meanwhile: counted towards the next
      }
    }
  }
  return true;
}

}  // namespace kiln::compiler
