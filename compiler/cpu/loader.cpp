// The CPU target's functions as kiln calls them: each opens the LLVM plugin on first use and
// forwards to it. $KILN_CPU_PLUGIN names the plugin; else the installed one, then the build
// tree's.
#include "compiler/cpu/plugin.h"

#include "compiler/key.h"
#include "compiler/target.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace kiln::compiler::cpu {

namespace {

Expected<const PluginApi*> open_plugin() {
  static std::once_flag once;
  static Expected<const PluginApi*> api = Error{""};
  std::call_once(once, [] {
    std::vector<std::string> paths;
    if (const char* env = std::getenv("KILN_CPU_PLUGIN"); env && *env) {
      paths.push_back(env);
    } else {
      paths = {KILN_CPU_PLUGIN_INSTALLED, KILN_CPU_PLUGIN_BUILT};
    }
    std::string tried;
    for (const std::string& path : paths) {
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        const char* why = ::dlerror();
        tried += "\n  " + path + ": " + (why ? why : "cannot be opened");
        continue;
      }
      auto entry = reinterpret_cast<const PluginApi* (*)()>(::dlsym(handle, "kiln_cpu_plugin_v1"));
      const PluginApi* table = entry ? entry() : nullptr;
      if (!table || table->abi != k_plugin_abi) {
        tried += "\n  " + path + ": not a kiln CPU plugin of this version";
        continue;
      }
      if (table->codegen_version() != cpu_codegen_version()) {
        tried += "\n  " + path + ": from another build of kiln (codegen " +
                 std::string(table->codegen_version()).substr(0, 12) + ", expected " +
                 std::string(cpu_codegen_version()).substr(0, 12) + ")";
        continue;
      }
      api = table;
      return;
    }
    api = make_error("the CPU target needs kiln's LLVM plugin (libkiln_cpu_llvm.so, LLVM 16); "
                     "set KILN_CPU_PLUGIN to its path. Tried:", tried);
  });
  return api;
}

}  // namespace

Expected<CpuMachine> cpu_machine(const std::string& cpu, const std::string& features) {
  auto api = open_plugin();
  if (!api) return api.error();
  return (*api)->cpu_machine(cpu, features);
}

Status runs_here(const std::string& cpu) {
  auto api = open_plugin();
  if (!api) return api.error();
  return (*api)->runs_here(cpu);
}

Expected<std::string> llvm_version() {
  auto api = open_plugin();
  if (!api) return api.error();
  return (*api)->llvm_version();
}

Expected<std::unique_ptr<LoadedObject>> LoadedObject::load(const std::string& object,
                                                           const std::vector<std::string>& entries) {
  auto api = open_plugin();
  if (!api) return api.error();
  return (*api)->load_object(object, entries);
}

Expected<Artifact> compile_cpu(const ir::Graph& graph, const CompileRequest& request,
                               const CpuMachine& machine) {
  auto api = open_plugin();
  if (!api) return api.error();
  return (*api)->compile_cpu(graph, request, machine);
}

namespace {

// The request of a CPU compile: modes resolve as on k_cpu_modes_as_on_sm whatever
// options.target.sm says.
Expected<CompileRequest> cpu_request(const ir::Graph& graph, CompileOptions options) {
  options.target.sm = k_cpu_modes_as_on_sm;
  return check_request(graph, options);
}

}  // namespace

Expected<Artifact> compile_cpu(const ir::Graph& graph, const CompileOptions& options,
                               const CpuMachine& machine) {
  auto request = cpu_request(graph, options);
  if (!request) return request.error();
  return compile_cpu(graph, *request, machine);
}

Expected<std::string> cpu_ir(const ir::Graph& graph, const CompileRequest& request,
                             const CpuMachine& machine) {
  auto api = open_plugin();
  if (!api) return api.error();
  return (*api)->cpu_ir(graph, request, machine);
}

Expected<std::string> cpu_ir(const ir::Graph& graph, const CompileOptions& options,
                             const CpuMachine& machine) {
  auto request = cpu_request(graph, options);
  if (!request) return request.error();
  return cpu_ir(graph, *request, machine);
}

}  // namespace kiln::compiler::cpu
