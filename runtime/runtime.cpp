// Runtime: target arch, cache and auto-precision policy; compiles graphs into Executables.
#include "kiln/kiln.h"

#include "cache/cache.h"
#include "compiler/options.h"
#include "compiler/request.h"
#include "compiler/target.h"
#include "ir/parse.h"
#include "compiler/cpu/jit.h"
#include "runtime/compile_service.h"
#include "runtime/cpu_executable.h"
#include "runtime/cpu_program.h"
#include "runtime/emulated_executable.h"
#include "runtime/driver.h"
#include "compiler/sizes.h"
#include "ir/hash.h"
#include "runtime/executable_impl.h"
#include "runtime/symbolic_executable.h"
#include "runtime/tuning.h"

#include <cstdio>
#include <functional>
#include <mutex>
#include <set>

namespace kiln {

namespace {

compiler::FallbackPolicy to_compiler(FallbackPolicy policy) {
  switch (policy) {
    case FallbackPolicy::refuse: return compiler::FallbackPolicy::refuse;
    case FallbackPolicy::warn: return compiler::FallbackPolicy::warn;
    case FallbackPolicy::allow: return compiler::FallbackPolicy::allow;
  }
  return compiler::FallbackPolicy::refuse;
}

// The one dispatch from a compiled result to the backend of its target.
Expected<std::shared_ptr<Executable>> make_for_target(const ir::Graph& graph,
                                                      const compiler::Target& target,
                                                      runtime::CompileResult result, int device,
                                                      const emulation::Schedule& schedule) {
  switch (target.kind) {
    case compiler::Target::Kind::cuda:
      return runtime::make_executable(graph, std::move(result), device);
    case compiler::Target::Kind::cpu:
      return runtime::make_cpu_executable(graph, std::move(result));
    case compiler::Target::Kind::emulate:
      return runtime::make_emulated_executable(graph, std::move(result), schedule);
  }
  return make_error("unknown target");
}

// compile_graph, then the target's executable. A hit whose host code does not load (a CPU object
// the loader refuses, an emulator payload that does not decode: checksums and signature held, so
// a keyholder or a damaged build made it) is compiled again; once the fresh one loads, it replaces
// the bad entry (Cache::replace_bad), which would otherwise fail every run that hits it.
// `compiled` sees the artifact compile_graph returned, before it is loaded.
using OnCompiled = std::function<void(const compiler::Artifact&)>;
Expected<std::shared_ptr<Executable>> compile_for_target(const ir::Graph& graph,
                                                         const compiler::CompileOptions& options,
                                                         cache::Cache* cache, int device,
                                                         const emulation::Schedule& schedule,
                                                         const OnCompiled& compiled = {}) {
  auto result = runtime::compile_graph(graph, options, cache);
  if (!result) return result.error();
  if (compiled) compiled(result->artifact);
  bool hit = result->hit;
  auto exe = make_for_target(graph, options.target, std::move(*result), device, schedule);
  if (exe || !hit || !cache || !options.target.on_host()) return exe;
  auto request = runtime::prepare_compile(graph, options);
  if (!request) return exe;
  auto fresh = runtime::compile_prepared(graph, *request, nullptr);
  if (!fresh) return exe;
  cache::Contents contents =
      runtime::to_contents(fresh->artifact, request->graph_hash, fresh->cpu_ms);
  auto remade = make_for_target(graph, options.target, std::move(*fresh), device, schedule);
  if (!remade) return exe;  // the fresh one fails too: not the entry's fault
  (void)cache->replace_bad(request->key, request->fields, contents,
                           "it does not load (" + exe.error().message + "); compiled again");
  return remade;
}

// The tuning records a runtime compiles with (RuntimeOptions::autotune), shared with its symbolic
// graphs' executables: read from the cache once, on the first CUDA compile.
class TuningState {
public:
  TuningState(Autotune mode, int device, std::shared_ptr<cache::Cache> cache,
              std::function<void(LogLevel, std::string_view)> log)
      : m_mode(mode), m_device(device), m_cache(std::move(cache)), m_log(std::move(log)) {}

  // `options` with the schedule this device's records give `graph` (unchanged without records).
  void apply(const ir::Graph& graph, compiler::CompileOptions& options) {
    if (m_mode == Autotune::off || !m_cache || options.target.on_host()) return;
    std::lock_guard lock(m_mutex);
    if (!m_read) {
      m_read = true;
      // `cached` with no tuning record in the cache costs one index probe, not the driver's start.
      m_tiles = runtime::device_tiles(*m_cache, m_device, options.target, options.nvrtc_path,
                                      m_mode == Autotune::cached);
    }
    if (!m_tiles || m_tiles->arch != options.target.arch()) return;
    auto warn = [this](const std::string& message) { m_log(LogLevel::warning, message); };
    if (m_mode == Autotune::on) tune_missing(graph, options, warn);
    // A graph that does not plan fails its compile with the same error: nothing to add here.
    auto schedule = runtime::tuned_schedule(graph, options, *m_cache, *m_tiles, warn);
    if (schedule) options.schedule = *schedule;
  }

private:
  // Autotune::on: tunes the problems of `graph` that have no record, then reads the records again.
  void tune_missing(const ir::Graph& graph, const compiler::CompileOptions& options,
                    const std::function<void(const std::string&)>& warn) {
    auto problems = runtime::tuning_problems(graph, options);
    if (!problems) return;  // the compile reports it
    runtime::TuneOptions tune;
    tune.device = m_device;
    // Each problem is tuned at most once per runtime, whether it succeeds or not (without a
    // cache its record is not kept, and a failure would fail again).
    for (const runtime::TuningProblem& p : *problems) {
      if (!m_tiles->keys.count(p.signature) && m_tried.insert(p.signature).second)
        tune.only.push_back(p.signature);
    }
    if (tune.only.empty()) return;
    m_log(LogLevel::info, "autotune: timing the tiles of " + std::to_string(tune.only.size()) +
                              " matmul or attention problem(s) on " + m_tiles->device.text());
    if (auto tuned = runtime::tune_graph(graph, options, m_cache.get(), tune); !tuned) {
      warn("autotune: " + tuned.error().message + "; compiling with the model's tiles");
      return;
    }
    m_tiles = runtime::tuned_tiles(*m_cache, m_tiles->device, m_tiles->arch, m_tiles->nvrtc_version);
  }

  Autotune m_mode;
  int m_device;
  std::shared_ptr<cache::Cache> m_cache;
  std::function<void(LogLevel, std::string_view)> m_log;
  std::mutex m_mutex;
  bool m_read = false;
  std::optional<runtime::TunedTiles> m_tiles;  // this device's, once read
  std::set<std::string> m_tried;  // Autotune::on: the problems tuned (or tried) here
};

class RuntimeImpl final : public Runtime {
public:
  // `target`: resolved (a CUDA arch, or the CPU target with its LLVM CPU and features).
  RuntimeImpl(RuntimeOptions options, compiler::Target target, emulation::Schedule schedule = {})
      : m_options(std::move(options)), m_target(std::move(target)), m_schedule(schedule) {
    m_arch = m_target.is_cpu()        ? "cpu:" + m_target.cpu
             : m_target.is_emulated() ? m_target.name()
                                      : m_target.arch();
    if (!m_options.log) {
      m_options.log = [](LogLevel level, std::string_view message) {
        if (level == LogLevel::warning) {
          std::fprintf(stderr, "kiln: %.*s\n", static_cast<int>(message.size()), message.data());
        }
      };
    }
    if (m_target.is_cpu()) {
      std::string problem = runtime::cpu_threads_env_problem();
      if (!problem.empty()) m_options.log(LogLevel::warning, problem);
    }
    if (m_options.use_cache) {
      cache::Options for_cache =
          runtime::cache_options(m_options.cache_dir, m_options.remote_cache);
      auto log = m_options.log;
      for_cache.warn = [log](const std::string& message) {
        log(LogLevel::warning, "cache: " + message);
      };
      m_cache = cache::Cache::open(std::move(for_cache));
    }
    m_tuning = std::make_shared<TuningState>(m_options.autotune, m_options.device, m_cache,
                                             m_options.log);
  }

  const std::string& arch() const override { return m_arch; }

  Expected<std::shared_ptr<Executable>> compile(const ir::Graph& graph) override {
    compiler::CompileOptions options;
    options.target = m_target;
    options.precision = m_options.precision;
    compiler::set_fallback_policy(options, to_compiler(m_options.fallbacks),
                                  m_options.allow_fallback);
    options.threads = m_options.compile_threads;
    auto exe = graph.symbolic() ? compile_symbolic(graph, options) : compile_bucket(graph, options);
    if (exe) runtime::ExecutableAccess::set_check_indices(**exe, m_options.check_indices);
    return exe;
  }

  Expected<std::shared_ptr<Executable>> compile_file(const std::string& path) override {
    auto graph = ir::parse_graph_file(path);
    if (!graph) return graph.error();
    return compile(*graph);
  }

  Expected<std::shared_ptr<Executable>> compile_text(std::string_view text,
                                                     std::string_view name) override {
    auto graph = ir::parse_graph(text, name);
    if (!graph) return graph.error();
    return compile(*graph);
  }

private:
  Expected<std::shared_ptr<Executable>> compile_bucket(const ir::Graph& graph,
                                                       compiler::CompileOptions options) {
    m_tuning->apply(graph, options);
    return compile_for_target(graph, options, m_cache.get(), m_options.device, m_schedule,
                              [this](const compiler::Artifact& artifact) {
                                log_precision_once(artifact);
                                warn_fallbacks(artifact.fallbacks);
                              });
  }

  // Nothing compiles yet: the arch and precision are checked now (on the smallest bucket), each
  // bucket compiles on first use. The executable shares this runtime's cache.
  Expected<std::shared_ptr<Executable>> compile_symbolic(const ir::Graph& graph,
                                                         const compiler::CompileOptions& options) {
    compiler::CompileOptions first = options;
    for (const ir::Symbol& s : graph.symbols())
      first.bucket.push_back(compiler::bucket_of(s.lo, s));
    auto checked = compiler::check_request(graph, first);
    if (!checked) return checked.error();
    auto cache = m_cache;
    auto tuning = m_tuning;
    int device = m_options.device;
    emulation::Schedule schedule = m_schedule;
    runtime::CompileBucket compile = [graph, options, cache, tuning, device, schedule](
                                         const std::vector<compiler::DimRange>& bucket)
        -> Expected<std::shared_ptr<Executable>> {
      compiler::CompileOptions o = options;
      o.bucket = bucket;
      tuning->apply(graph, o);
      return compile_for_target(graph, o, cache.get(), device, schedule);
    };
    warn_fallbacks(checked->fallbacks());
    return runtime::make_symbolic_executable(graph, std::move(compile), m_options.device, m_arch,
                                             m_target.on_host(),
                                             *checked, ir::graph_hash(graph).hex());
  }

  // One warning per fallback of this compile, unless the policy allows them quietly.
  void warn_fallbacks(const std::vector<std::string>& fallbacks) {
    if (m_options.fallbacks != FallbackPolicy::warn) return;
    for (const std::string& fallback : fallbacks)
      m_options.log(LogLevel::warning, "fallback: " + fallback);
  }

  // TorchServe's rule, said once per runtime so a user can see what `auto` chose.
  void log_precision_once(const compiler::Artifact& artifact) {
    if (m_options.precision != Precision::automatic || artifact.is_cpu()) return;
    std::call_once(m_logged, [&] {
      bool tf32 = artifact.precision == "high";
      m_options.log(LogLevel::info, std::string("tensor cores: TF32 ") + (tf32 ? "on" : "off") +
                                        " (" + artifact.decision + ")");
    });
  }

  RuntimeOptions m_options;
  compiler::Target m_target;
  emulation::Schedule m_schedule;  // the emulate target's
  std::string m_arch;
  std::shared_ptr<cache::Cache> m_cache;  // shared with symbolic graphs' executables
  std::shared_ptr<TuningState> m_tuning;  // likewise
  std::once_flag m_logged;
};


}  // namespace

Expected<std::unique_ptr<Runtime>> Runtime::create(RuntimeOptions options) {
  // A secret that is set but unusable is an error, not a remote tier that silently goes unsigned.
  if (options.use_cache)
    if (auto secret = cache::remote_secret(std::nullopt); !secret) return secret.error();
  // "auto": this CPU where no arch is given and no CUDA device answers.
  bool no_gpu = options.target == "auto" && options.arch.empty() &&
                !runtime::device_sm(options.device);
  auto target = options.target == "auto" ? compiler::parse_target(no_gpu ? "cpu" : "cuda")
                                          : compiler::parse_target(options.target);
  if (!target) return make_error(target.error().message, " (or auto)");
  if (target->is_cpu()) {
    auto machine = compiler::cpu::cpu_machine(target->cpu);
    if (!machine) return make_error("target ", target->name(), ": ", machine.error().message);
    return std::unique_ptr<Runtime>(new RuntimeImpl(
        std::move(options), compiler::Target::for_cpu(machine->cpu, machine->features)));
  }
  if (target->is_emulated()) {
    if (Status s = compiler::check_arch(target->sm, compiler::known_archs()); !s)
      return make_error("target ", target->name(), ": ", s.error().message);
    auto schedule = emulation::parse_schedule(
        options.emulate_schedule.empty() ? "kind" : options.emulate_schedule);
    if (!schedule) return make_error("RuntimeOptions::emulate_schedule: ", schedule.error().message);
    if (options.emulate_sm_count < 0 ||
        options.emulate_sm_count > static_cast<int>(emulation::k_max_sm_count))
      return make_error("RuntimeOptions::emulate_sm_count: ",
                        std::to_string(options.emulate_sm_count),
                        " is not a multiprocessor count from 1 to ",
                        std::to_string(emulation::k_max_sm_count), " (or 0: 132)");
    if (options.emulate_sm_count > 0)
      schedule->sm_count = static_cast<uint32_t>(options.emulate_sm_count);
    compiler::Target emulated = *target;
    return std::unique_ptr<Runtime>(
        new RuntimeImpl(std::move(options), std::move(emulated), *schedule));
  }
  if (target->sm && options.arch.empty()) options.arch = target->arch();
  compiler::Target cuda;
  if (!options.arch.empty()) {
    auto parsed = compiler::parse_arch(options.arch);
    if (!parsed) return parsed.error();
    if (Status s = compiler::check_arch(parsed->sm, compiler::known_archs()); !s) return s.error();
    cuda = *parsed;
  } else {
    auto detected = runtime::device_sm(options.device);
    if (!detected) {
      return make_error(detected.error().message,
                        "; set RuntimeOptions::arch (e.g. \"sm_90\") to compile without a GPU");
    }
    // The device's own target: sm_90a on compute capability 9.0.
    cuda = compiler::device_target(*detected);
  }
  return std::unique_ptr<Runtime>(new RuntimeImpl(std::move(options), std::move(cuda)));
}

}  // namespace kiln
