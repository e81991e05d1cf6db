// Builds kernel text against the host shim with the host C++ compiler and loads the result.
#include "emulation/module.h"

#include "compiler/target.h"
#include "reference/rounding.h"
#include "shim/kiln_emu_abi.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
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

// The program: the shim, the kernels, then the exported launch entry and one thunk per kernel.
std::string module_source(const std::string& kernels, const std::vector<std::string>& entries) {
  std::string text = "#include \"cuda_host.h\"\n#line 1 \"kernels.cu\"\n";
  text += kernels;
  text += "\n#line 1 \"kiln_emu_exports\"\n";
  text += "extern \"C\" void kiln_emu_set_api(const KilnEmuApi* api) { ::kiln_emu::g_api = api; }\n";
  text += "extern \"C\" int kiln_emu_launch(const KilnEmuLaunch* l, char* error, size_t size) {\n"
          "  std::string e = ::kiln_emu::launch(*l);\n"
          "  if (e.empty()) return 0;\n"
          "  std::snprintf(error, size, \"%s\", e.c_str());\n"
          "  return 1;\n"
          "}\n";
  for (const std::string& entry : entries) {
    text += "extern \"C\" void kiln_emu_thunk_" + entry + "(void** args) { ::kiln_emu::call_kernel(&" +
            entry + ", args); }\n";
    text += "extern \"C\" int kiln_emu_arity_" + entry + "() { return ::kiln_emu::arity(&" + entry +
            "); }\n";
  }
  return text;
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
  auto dir = TempDir::make();
  if (!dir) return dir.error();
  for (const ShimFile& f : shim_files()) {
    std::string text = f.text;
    for (const ShimEdit& e : options.shim.edits) {
      if (e.file != f.name) continue;
      size_t at = text.find(e.from);
      if (at == std::string::npos)
        return make_error("emulation: the shim file ", e.file, " has no '", e.from, "' to change");
      text.replace(at, e.from.size(), e.to);
    }
    Status written = write_file(dir->path() + "/" + f.name, text);
    if (!written) return written.error();
  }
  for (const ShimEdit& e : options.shim.edits) {
    bool known = false;
    for (const ShimFile& f : shim_files()) known = known || e.file == f.name;
    if (!known) return make_error("emulation: no shim file is named '", e.file, "'");
  }
  std::string source = dir->path() + "/program.cpp";
  std::string library = dir->path() + "/program.so";
  std::string log = dir->path() + "/compile.log";
  Status written = write_file(source, module_source(kernels, options.entries));
  if (!written) return written.error();

  std::string compiler = options.compiler;
  if (compiler.empty()) {
    const char* env = std::getenv("KILN_EMU_CXX");
    compiler = env && *env ? env : "g++";
  }
  std::vector<std::string> argv = {compiler, "-std=c++17", "-O1", "-fPIC", "-shared", "-w",
                                   "-fno-strict-aliasing", "-ffp-contract=fast",
                                   "-DKILN_EMU_SM=" + std::to_string(options.sm),
                                   "-DKILN_EMU_ARCH_SPECIFIC=" +
                                       std::string(options.arch_specific ? "1" : "0"),
                                   "-I", dir->path(), "-o", library, source};
  if (host_has_fma()) argv.insert(argv.begin() + 1, "-mfma");
  if (options.shim.layout == Layout::broken)
    argv.insert(argv.begin() + 1, "-DKILN_EMU_BREAK_LAYOUT");
  if (options.shim.mma_sum == MmaSum::nearest)
    argv.insert(argv.begin() + 1, "-DKILN_EMU_MMA_NEAREST");
  if (options.shim.mma_sum == MmaSum::hopper ||
      (options.shim.mma_sum == MmaSum::arch && options.sm == 90))
    argv.insert(argv.begin() + 1, "-DKILN_EMU_MMA_HOPPER");
  auto rc = run_process(argv, log);
  if (!rc) return rc.error();
  if (*rc != 0)
    return make_error("emulation: compiling the kernels with '", compiler, "' failed (exit ",
                      std::to_string(*rc), "):\n", read_file(log));

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
