// Builds kernel text against the host shim with the host C++ compiler and loads the result.
#include "emulation/module.h"

#include "compiler/target.h"
#include "ir/hash.h"
#include "reference/rounding.h"
#include "shim/kiln_emu_abi.h"
#include "support/private_dir.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

extern char** environ;

namespace kiln::emulation {
namespace {

namespace fs = std::filesystem;

// A private temporary directory, removed with everything in it when this goes away.
class TempDir {
public:
  static Expected<TempDir> make() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/kiln-emu-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!mkdtemp(buffer.data()))
      return make_error("emulation: cannot create a temporary directory from '", pattern,
                        "': ", std::strerror(errno));
    return TempDir(buffer.data());
  }
  TempDir(TempDir&& other) noexcept : m_path(std::move(other.m_path)) { other.m_path.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ignored;
    if (!m_path.empty()) fs::remove_all(m_path, ignored);
  }
  const std::string& path() const { return m_path; }

private:
  explicit TempDir(std::string path) : m_path(std::move(path)) {}
  std::string m_path;
};

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return make_error("emulation: cannot write '", path, "'");
  return Status::success();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs argv[0] (searched on PATH) with stdout and stderr going to `log`; returns its exit status.
Expected<int> run_process(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT)
    return make_error("emulation: the host C++ compiler '", argv[0],
                      "' was not found (install g++ or set KILN_EMU_CXX)");
  if (rc != 0)
    return make_error("emulation: cannot start the host C++ compiler '", argv[0], "': ",
                      std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return make_error("emulation: waiting for the host compiler failed");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

const KilnEmuApi& rounding_api() {
  static const KilnEmuApi k_api = {
      reference::tf32_rna_bits,   reference::tf32_truncate_bits, reference::bf16_from_float,
      reference::float_from_bf16, reference::f16_from_float,     reference::float_from_f16,
  };
  return k_api;
}

// The exported entries that do not depend on the kernels: the rounding functions' installer and
// the launch.
std::string shim_exports() {
  std::string text = "#include \"cuda_host.h\"\n#line 1 \"kiln_emu_exports\"\n";
  text += "extern \"C\" void kiln_emu_set_api(const KilnEmuApi* api) { ::kiln_emu::g_api = api; }\n";
  text += "extern \"C\" int kiln_emu_launch(const KilnEmuLaunch* l, char* error, size_t size) {\n"
          "  std::string e = ::kiln_emu::launch(*l);\n"
          "  if (e.empty()) return 0;\n"
          "  std::snprintf(error, size, \"%s\", e.c_str());\n"
          "  return 1;\n"
          "}\n";
  return text;
}

// The kernels, then one thunk per kernel; with `exports`, the shim's exported entries too (the
// whole program in one translation unit).
std::string module_source(const std::string& kernels, const std::vector<std::string>& entries,
                          bool exports) {
  std::string text = "#include \"cuda_host.h\"\n#line 1 \"kernels.cu\"\n";
  text += kernels;
  text += "\n";
  if (exports) text += shim_exports();
  text += "#line 1 \"kiln_emu_thunks\"\n";
  for (const std::string& entry : entries) {
    text += "extern \"C\" void kiln_emu_thunk_" + entry + "(void** args) { ::kiln_emu::call_kernel(&" +
            entry + ", args); }\n";
    text += "extern \"C\" int kiln_emu_arity_" + entry + "() { return ::kiln_emu::arity(&" + entry +
            "); }\n";
  }
  return text;
}

// ---- the shim cache (KILN_EMU_CACHE_DIR) ----------------------------------------------------
//
// Most of a module's build is the shim's: parsing its headers and the standard library's, and
// compiling the launch and the entry points the kernels call (KILN_EMU_ENTRY, kiln_emu_runtime.h).
// With KILN_EMU_CACHE_DIR set, that part is done once per compiler, flags and shim text: an entry
// (a folder named by their hash) holds the shim's headers, shim.o (the exported launch and the
// entry points, out of line) and, for GCC, cuda_host.h.gch (the headers precompiled as the kernels
// see them); a module then compiles only its kernels against the entry (KILN_EMU_KERNELS_ONLY:
// the entry points declared, not defined) and links them with shim.o. An entry is built in a
// private folder and renamed into place, so a reader sees it whole or not at all. The folder
// holds code that runs as the user, so it must be the user's alone (owned by them, writable by
// no one else), else it is not used. Shims with edits (the mutation check) are not cached.

constexpr size_t k_max_cached_shims = 24;  // entries kept; the least recently used go first

// The compiler's `--version` text ("" when it does not run), once per process and compiler.
std::string compiler_version(const std::string& compiler) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(compiler); it != known.end()) return it->second;
  std::string version;
  if (auto dir = TempDir::make()) {
    std::string log = dir->path() + "/version";
    auto rc = run_process({compiler, "--version"}, log);
    if (rc && *rc == 0) version = read_file(log);
  }
  return known.emplace(compiler, version).first->second;
}

// The cache folder, created if need be, as its real path (a link to it is followed once, here),
// or nullopt: unset, or not the user's alone (said once per folder and process).
std::optional<std::string> shim_cache_dir() {
  const char* env = std::getenv("KILN_EMU_CACHE_DIR");
  if (!env || !*env) return std::nullopt;
  std::string dir = env;
  Expected<std::string> path = private_folder(dir);
  if (path) return *path;
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard lock(mutex);
  if (said.insert(dir).second)
    std::fprintf(stderr,
                 "kiln: the emulator's cache folder '%s' (KILN_EMU_CACHE_DIR) %s; the emulator "
                 "builds without it\n",
                 dir.c_str(), path.error().message.c_str());
  return std::nullopt;
}

// Keeps the k_max_cached_shims most recently used entries of `dir` and no builder's folder older
// than a day.
void prune_shim_cache(const std::string& dir) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  auto now = fs::file_time_type::clock::now();
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {  // other processes may add and remove meanwhile
    const fs::path& path = it->path();
    std::string name = path.filename().string();
    std::error_code stat_ec;
    auto when = fs::last_write_time(path, stat_ec);
    if (stat_ec) continue;
    // Only folders this code made: named so, holding the shim's exports.
    if (!it->is_directory(stat_ec) || it->is_symlink(stat_ec) ||
        !fs::exists(path / "shim_exports.cpp", stat_ec))
      continue;
    if (name.rfind("building-", 0) == 0) {
      if (now - when > std::chrono::hours(24)) fs::remove_all(path, stat_ec);
    } else if (name.size() == 32 && name.find_first_not_of("0123456789abcdef") == std::string::npos) {
      entries.emplace_back(when, path);
    }
  }
  if (entries.size() <= k_max_cached_shims) return;
  std::sort(entries.begin(), entries.end());
  for (size_t i = 0; i + k_max_cached_shims < entries.size(); ++i) fs::remove_all(entries[i].second, ec);
}

// The entry for `compiler` and `flags` over the shim `files`, built if missing; nullopt where
// there is no cache or the entry cannot be built (the module is then built whole).
std::optional<std::string> cached_shim(const std::string& compiler, const std::vector<std::string>& flags,
                                       const std::vector<std::pair<std::string, std::string>>& files) {
  std::optional<std::string> dir = shim_cache_dir();
  if (!dir) return std::nullopt;
  std::string version = compiler_version(compiler);
  if (version.empty()) return std::nullopt;
  std::string identity = "kiln emulator shim 2\n" + compiler + "\n" + version + "\n" + shim_exports();
  for (const std::string& f : flags) identity += f + "\n";
  for (const auto& [name, text] : files)
    identity += name + "\n" + std::to_string(text.size()) + "\n" + text;
  std::string entry = *dir + "/" + ir::hash_bytes(identity.data(), identity.size()).hex();
  struct stat st {};
  if (::lstat(entry.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return std::nullopt;
    ::utimensat(AT_FDCWD, entry.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);  // recently used
    return entry;
  }
  std::string pattern = *dir + "/building-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!mkdtemp(buffer.data())) return std::nullopt;
  std::string building = buffer.data();
  std::error_code ec;
  auto give_up = [&]() -> std::optional<std::string> {
    fs::remove_all(building, ec);
    return std::nullopt;
  };
  for (const auto& [name, text] : files)
    if (!write_file(building + "/" + name, text)) return give_up();
  if (!write_file(building + "/shim_exports.cpp", shim_exports())) return give_up();
  std::string log = building + "/build.log";
  std::vector<std::string> argv = {compiler};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::vector<std::string> object = argv;
  object.insert(object.end(), {"-DKILN_EMU_SHIM_OBJECT", "-c", "-I", building, "-o",
                               building + "/shim.o", building + "/shim_exports.cpp"});
  auto rc = run_process(object, log);
  if (!rc || *rc != 0) return give_up();
  if (version.find("clang") == std::string::npos) {  // GCC finds cuda_host.h.gch by itself
    std::vector<std::string> header = argv;
    header.insert(header.end(), {"-DKILN_EMU_KERNELS_ONLY", "-x", "c++-header",
                                 building + "/cuda_host.h", "-o", building + "/cuda_host.h.gch"});
    rc = run_process(header, log);
    if (!rc || *rc != 0) return give_up();
  }
  if (::rename(building.c_str(), entry.c_str()) != 0) {
    give_up();  // another process built it first; theirs serves
    return ::lstat(entry.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? std::optional(entry)
                                                                    : std::nullopt;
  }
  prune_shim_cache(*dir);
  return entry;
}

// The most dynamic shared memory one block may use on `sm` (with the opt-in attribute); 48 KiB,
// the limit without it, for an arch kiln does not know.
size_t max_dynamic_smem(int sm) {
  const compiler::ArchFacts* facts = compiler::arch_facts(sm);
  return facts ? facts->max_dynamic_smem : 48 * 1024;
}

bool host_has_fma() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace

Module::~Module() {
  if (m_handle) dlclose(m_handle);
}

Status Module::launch(const std::string& entry, const compiler::LaunchShape& shape,
                      const std::vector<void*>& args, const std::vector<GlobalRange>& ranges,
                      const Schedule& schedule) const {
  const Kernel* kernel = nullptr;
  for (const Kernel& k : m_kernels)
    if (k.entry == entry) kernel = &k;
  if (!kernel) return make_error("emulation: no kernel '", entry, "' in the compiled program");
  if (static_cast<size_t>(kernel->arity) != args.size())
    return make_error("emulation: kernel '", entry, "' takes ", std::to_string(kernel->arity),
                      " parameters, the launch passes ", std::to_string(args.size()));
  if (shape.dynamic_smem_bytes > max_dynamic_smem(m_sm))
    return make_error("emulation: kernel '", entry, "' asks for ",
                      std::to_string(shape.dynamic_smem_bytes),
                      " bytes of dynamic shared memory; sm_", std::to_string(m_sm),
                      " allows at most ", std::to_string(max_dynamic_smem(m_sm)), " per block");
  std::vector<KilnEmuRange> spans;
  for (const GlobalRange& r : ranges)
    spans.push_back({r.data, static_cast<const unsigned char*>(r.data) + r.bytes});
  KilnEmuLaunch l{};
  l.thunk = reinterpret_cast<void (*)(void**)>(kernel->thunk);
  l.args = const_cast<void**>(args.data());
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = shape.grid[static_cast<size_t>(i)];
    l.block[i] = shape.block[static_cast<size_t>(i)];
  }
  l.dynamic_smem_bytes = shape.dynamic_smem_bytes;
  l.ranges = spans.data();
  l.range_count = spans.size();
  switch (schedule.mode) {
    case Schedule::Mode::kind:
      l.schedule = KILN_EMU_KIND;
      break;
    case Schedule::Mode::seeded:
      l.schedule = KILN_EMU_SEEDED;
      break;
    case Schedule::Mode::adversarial:
      l.schedule = KILN_EMU_ADVERSARIAL;
      break;
  }
  l.schedule_seed = schedule.seed;
  char error[1024] = {};
  auto fn = reinterpret_cast<KilnEmuLaunchFn>(m_launch);
  if (fn(&l, error, sizeof error) != 0)
    return make_error("emulation: kernel '", entry, "': ", error);
  return Status::success();
}

Expected<std::unique_ptr<Module>> compile_module(const std::string& kernels,
                                                 const ModuleOptions& options) {
  std::vector<std::pair<std::string, std::string>> files;  // the shim, edited
  for (const ShimFile& f : shim_files()) {
    std::string text = f.text;
    for (const ShimEdit& e : options.shim.edits) {
      if (e.file != f.name) continue;
      size_t at = text.find(e.from);
      if (at == std::string::npos)
        return make_error("emulation: the shim file ", e.file, " has no '", e.from, "' to change");
      text.replace(at, e.from.size(), e.to);
    }
    files.emplace_back(f.name, std::move(text));
  }
  for (const ShimEdit& e : options.shim.edits) {
    bool known = false;
    for (const ShimFile& f : shim_files()) known = known || e.file == f.name;
    if (!known) return make_error("emulation: no shim file is named '", e.file, "'");
  }

  std::string compiler = options.compiler;
  if (compiler.empty()) {
    const char* env = std::getenv("KILN_EMU_CXX");
    compiler = env && *env ? env : "g++";
  }
  std::vector<std::string> flags = {"-std=c++17", "-O1", "-fPIC", "-w", "-fno-strict-aliasing",
                                    "-ffp-contract=fast",
                                    "-DKILN_EMU_SM=" + std::to_string(options.sm),
                                    "-DKILN_EMU_ARCH_SPECIFIC=" +
                                        std::string(options.arch_specific ? "1" : "0")};
  if (host_has_fma()) flags.push_back("-mfma");
  // No jump threading (a GCC flag; clang does not take it): it copies a call for the threads of
  // one path (`if (tid == 0)` on through a __syncthreads to the setmaxnreg every thread reaches),
  // and the copy's return address names another place in the kernel to the .aligned checks
  // (KILN_EMU_SITE).
  if (compiler_version(compiler).find("clang") == std::string::npos)
    flags.push_back("-fno-thread-jumps");
  if (options.shim.layout == Layout::broken) flags.push_back("-DKILN_EMU_BREAK_LAYOUT");
  if (options.shim.mma_sum == MmaSum::nearest) flags.push_back("-DKILN_EMU_MMA_NEAREST");
  if (options.shim.mma_sum == MmaSum::hopper ||
      (options.shim.mma_sum == MmaSum::arch && options.sm == 90))
    flags.push_back("-DKILN_EMU_MMA_HOPPER");

  auto dir = TempDir::make();
  if (!dir) return dir.error();
  std::string source = dir->path() + "/program.cpp";
  std::string library = dir->path() + "/program.so";
  std::string log = dir->path() + "/compile.log";
  std::vector<std::string> argv = {compiler};
  argv.insert(argv.end(), flags.begin(), flags.end());

  // The kernels alone against a cached shim, where there is one. Should that fail, the whole
  // program is built below and its errors told; where the whole build succeeds, the kernels were
  // fine and the entry is bad (damaged, or pruned meanwhile), so it goes, to be built anew.
  bool built = false;
  std::optional<std::string> shim =
      options.shim.edits.empty() ? cached_shim(compiler, flags, files) : std::nullopt;
  if (shim) {
    std::string object = dir->path() + "/kernels.o";
    std::vector<std::string> compile = argv, link = {compiler, "-shared", "-o", library};
    compile.insert(compile.end(),
                   {"-DKILN_EMU_KERNELS_ONLY", "-c", "-I", *shim, "-o", object, source});
    link.insert(link.end(), {*shim + "/shim.o", object});
    auto rc = write_file(source, module_source(kernels, options.entries, false))
                  ? run_process(compile, log)
                  : Expected<int>(1);
    if (rc && *rc == 0) rc = run_process(link, log);
    built = rc && *rc == 0;
  }
  if (!built) {
    for (const auto& [name, text] : files) {
      Status written = write_file(dir->path() + "/" + name, text);
      if (!written) return written.error();
    }
    Status written = write_file(source, module_source(kernels, options.entries, true));
    if (!written) return written.error();
    argv.insert(argv.end(), {"-shared", "-I", dir->path(), "-o", library, source});
    auto rc = run_process(argv, log);
    if (!rc) return rc.error();
    if (*rc != 0)
      return make_error("emulation: compiling the kernels with '", compiler, "' failed (exit ",
                        std::to_string(*rc), "):\n", read_file(log));
    std::error_code ec;
    if (shim) fs::remove_all(*shim, ec);
  }

  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return make_error("emulation: cannot load the compiled kernels: ", dlerror());
  std::unique_ptr<Module> module(new Module());
  module->m_handle = handle;
  module->m_sm = options.sm;
  auto set_api = reinterpret_cast<KilnEmuSetApiFn>(dlsym(handle, "kiln_emu_set_api"));
  module->m_launch = dlsym(handle, "kiln_emu_launch");
  if (!set_api || !module->m_launch)
    return make_error("emulation: the compiled kernels lack the emulator's entry points");
  set_api(&rounding_api());
  for (const std::string& entry : options.entries) {
    void* thunk = dlsym(handle, ("kiln_emu_thunk_" + entry).c_str());
    auto arity = reinterpret_cast<int (*)()>(dlsym(handle, ("kiln_emu_arity_" + entry).c_str()));
    if (!thunk || !arity) return make_error("emulation: the compiled kernels lack '", entry, "'");
    module->m_kernels.push_back({entry, thunk, arity()});
  }
  return module;
}

}  // namespace kiln::emulation
