// `kiln emit` (CUDA source or PTX), `kiln compile` (through the cache, kernel reports),
// `kiln why` (why a compile would miss) and `kiln tune` (matmul and attention tiles timed on
// the GPU).
#include "tools/cli.h"

#include "cache/cache.h"
#include "compiler/compiler.h"
#include "compiler/cpu/compile.h"
#include "compiler/key.h"
#include "compiler/nvrtc.h"
#include "compiler/sizes.h"
#include "compiler/target.h"
#include "ir/parse.h"
#include "runtime/compile_service.h"
#include "runtime/driver.h"
#include "runtime/tuning.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <map>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>

namespace kiln::tools {

namespace {

struct CompileArgs {
  std::vector<std::string> files;
  std::string arch;  // empty: the GPU's, and an error where there is none
  std::string precision = "auto";
  FallbackFlags fallback;
  bool ptx = false;
  bool no_prelude = false;
  bool no_cache = false;
  bool json = false;
  std::string cache_dir;
  std::optional<std::string> remote;
  std::string dims;  // --dims, for symbolic graphs
  std::string target = "cuda";  // --target cuda|cpu|cpu:NAME
  bool llvm = false;            // emit --llvm: the CPU target's LLVM IR
  bool yes = false;             // compile --yes: start more than k_compiles_without_yes
  int repeats = 7;              // tune --repeats
};

// Above this many compiles (each file's --dims buckets, summed), `compile` wants --yes before it
// starts. One dim has at most 32 buckets (1..2^31-1), so NAME=all over one dim never needs it;
// 'all' multiplies across dims (two dims of 1..4096: 13 x 13 = 169; three of 1..2^31-1: 32,768,
// hours of NVRTC), and such a product is asked about first.
constexpr size_t k_compiles_without_yes = 64;
// The most compiles one `kiln compile` starts, --yes or not: its buckets are made before the
// first compile (65536 buckets of 16 dims take 16 MiB).
constexpr uint64_t k_max_compiles = 65536;

// Parses `file` once per process: `--dims` needs the graph before the compile does, and "-"
// (stdin) can be read only once.
Expected<ir::Graph> read_graph(const std::string& file) {
  static std::map<std::string, Expected<ir::Graph>> parsed;
  auto it = parsed.find(file);
  if (it == parsed.end()) it = parsed.emplace(file, ir::parse_graph_file(file)).first;
  return it->second;
}

void add_target_options(CLI::App* cmd, CompileArgs& args) {
  cmd->add_option("--arch", args.arch,
                  "target architecture, e.g. sm_90 or sm_90a (default: the GPU's, sm_90a on "
                  "compute capability 9.0; required without one)");
  cmd->add_option("--precision", args.precision, "highest, high, tf32x3, medium or auto")
      ->capture_default_str();
  add_fallback_options(cmd, args.fallback,
                       "compile combinations the arch cannot run on the best available path "
                       "(recorded)");
  cmd->add_option("--dims", args.dims,
                  "sizes of a symbolic graph's dims, e.g. B=37,S=100 (NAME=all: every bucket)");
  add_target_option(cmd, args.target);
}

// The values --dims gives `file`'s symbols (each nullopt: NAME=all); prints the error and
// returns nullopt on bad input.
std::optional<std::vector<std::optional<int64_t>>> dims_values(const CompileArgs& args,
                                                               const std::string& file) {
  auto graph = read_graph(file);
  if (!graph) {
    print_error(graph.error().message);
    return std::nullopt;
  }
  auto values = compiler::parse_dims(args.dims, *graph);
  if (!values) {
    print_error("kiln: " + file + ": " + values.error().message);
    return std::nullopt;
  }
  return *values;
}

// The buckets `--dims` asks for (one empty bucket without --dims: check_request then reports a
// symbolic graph); prints the error and returns nullopt on bad input.
std::optional<std::vector<std::vector<compiler::DimRange>>> buckets_from(
    const CompileArgs& args, const std::string& file) {
  if (args.dims.empty()) return std::vector<std::vector<compiler::DimRange>>{{}};
  auto values = dims_values(args, file);
  if (!values) return std::nullopt;
  return compiler::buckets_for(*read_graph(file), *values);
}

// How many buckets `--dims` asks for in `file` (1 without --dims), counted without making them:
// every NAME=all multiplies by that dim's bucket count, saturating at UINT64_MAX. Prints the
// error and returns nullopt on bad input.
std::optional<uint64_t> bucket_count(const CompileArgs& args, const std::string& file) {
  if (args.dims.empty()) return 1;
  auto values = dims_values(args, file);
  if (!values) return std::nullopt;
  const ir::Graph& graph = *read_graph(file);
  uint64_t count = 1;
  for (size_t i = 0; i < values->size() && i < graph.symbols().size(); ++i) {
    if ((*values)[i]) continue;
    uint64_t n = compiler::buckets(graph.symbols()[i]).size();
    count = n != 0 && count > UINT64_MAX / n ? UINT64_MAX : count * n;
  }
  return count;
}

// Sets options.bucket to the one bucket --dims names (`command` cannot take several); prints
// the error and returns false on bad input.
bool set_one_bucket(const CompileArgs& args, const char* command,
                    compiler::CompileOptions& options) {
  auto count = bucket_count(args, args.files[0]);  // counted first: 'all' may ask for billions
  if (!count) return false;
  if (*count != 1) {
    print_error(std::string("kiln: ") + command +
                " takes one bucket: give each dim a value, not 'all'");
    return false;
  }
  auto buckets = buckets_from(args, args.files[0]);
  if (!buckets) return false;
  options.bucket = buckets->front();
  return true;
}

// "FILE: MESSAGE", or MESSAGE where it names FILE already ("FILE:3:7: error: ...").
std::string about(const std::string& file, const std::string& message) {
  if (message.compare(0, file.size() + 1, file + ":") == 0) return message;
  return file + ": " + message;
}

// Builds CompileOptions from the arguments; prints the error and returns nullopt, with
// `exit_code` 2 on bad input, 1 when the CPU plugin cannot be loaded.
std::optional<compiler::CompileOptions> options_from(const CompileArgs& args, int& exit_code) {
  auto cpu = parse_cpu_target(args.target, "kiln", exit_code);
  if (!cpu) return std::nullopt;
  exit_code = k_exit_usage;
  compiler::Target cuda = compiler::Target::cuda(compiler::k_cpu_modes_as_on_sm);
  if (*cpu && !args.arch.empty()) {
    print_error("kiln: --arch names a CUDA arch; --target " + args.target + " compiles for the CPU");
    return std::nullopt;
  }
  if (*cpu) {
  } else if (args.arch.empty()) {
    // What `kiln run` and the runtime use (sm_90a on compute capability 9.0), so that entries
    // warmed here are the ones they hit.
    auto sm = runtime::device_sm(0);
    if (!sm) {
      print_error("kiln: no --arch given and no GPU to take it from (" + sm.error().message +
                  "); pass --arch, e.g. --arch sm_90");
      return std::nullopt;
    }
    cuda = compiler::device_target(*sm);
  } else {
    auto parsed = compiler::parse_arch(args.arch);
    if (!parsed) {
      print_error("kiln: " + parsed.error().message);
      return std::nullopt;
    }
    cuda = *parsed;
  }
  auto precision = ir::parse_precision(args.precision);
  if (!precision) {
    print_error("kiln: bad precision '" + args.precision +
                "': expected highest, high, tf32x3, medium or auto");
    return std::nullopt;
  }
  compiler::CompileOptions options;
  options.target = cuda;
  options.precision = *precision;
  if (*cpu) options.target = compiler::Target::for_cpu((*cpu)->cpu, (*cpu)->features);
  apply_fallback_flags(args.fallback, options);
  return options;
}

struct Prepared {
  ir::Graph graph;
  runtime::CacheRequest request;
};

// Parses `file`, validates the compile request (arch, precision) and computes its key; prints
// the error and sets `exit_code`: 2 for bad input, 1 when NVRTC cannot be found.
std::optional<Prepared> prepare(const std::string& file, const compiler::CompileOptions& options,
                                int& exit_code) {
  exit_code = k_exit_usage;
  auto graph = read_graph(file);
  if (!graph) {
    print_error(graph.error().message);
    return std::nullopt;
  }
  auto start = std::chrono::steady_clock::now();
  auto checked = compiler::check_request(*graph, options);
  double check_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (!checked) {
    const std::string& message = checked.error().message;
    // A located error ("FILE:LINE:COL: error: ...") is printed as the parser's are.
    print_error(message.rfind(file + ":", 0) == 0 ? message : "kiln: " + file + ": " + message);
    return std::nullopt;
  }
  exit_code = k_exit_failure;
  auto request = runtime::prepare_compile(*graph, std::move(*checked));
  if (!request) {
    print_error("kiln: " + file + ": " + request.error().message);
    return std::nullopt;
  }
  request->prepare_us += check_us;  // lookup_us counts the check, as for every caller
  exit_code = k_exit_ok;
  return Prepared{std::move(*graph), std::move(*request)};
}

int run_emit(const CompileArgs& args) {
  int exit_code = k_exit_usage;
  auto options = options_from(args, exit_code);
  if (!options) return exit_code;
  if (!set_one_bucket(args, "emit", *options)) return k_exit_usage;
  auto graph = read_graph(args.files[0]);
  if (!graph) {
    print_error(graph.error().message);
    return k_exit_usage;
  }
  if (args.llvm && !options->target.is_cpu()) {
    print_error("kiln: --llvm prints the CPU target's IR; add --target cpu");
    return k_exit_usage;
  }
  if (options->target.is_cpu()) {
    if (args.ptx) {
      print_error("kiln: --ptx is CUDA's; the CPU target prints LLVM IR (--llvm)");
      return k_exit_usage;
    }
    auto machine = compiler::cpu::cpu_machine(options->target.cpu, options->target.cpu_features);
    auto ir = machine ? compiler::cpu::cpu_ir(*graph, *options, *machine)
                      : Expected<std::string>(machine.error());
    if (!ir) {
      print_error("kiln: " + about(args.files[0], ir.error().message));
      return k_exit_usage;
    }
    std::fputs(ir->c_str(), stdout);
    return k_exit_ok;
  }
  auto program = compiler::lower(*graph, *options);
  if (!program) {
    print_error("kiln: " + about(args.files[0], program.error().message));
    return k_exit_usage;
  }
  if (!args.ptx) {
    auto prelude = args.no_prelude ? compiler::Prelude::omit : compiler::Prelude::include;
    std::fputs(compiler::program_source(*program, prelude).c_str(), stdout);
    return k_exit_ok;
  }
  auto artifact = compiler::compile_lowered(*program, *options);
  if (!artifact) {
    print_error("kiln: " + about(args.files[0], artifact.error().message));
    return k_exit_failure;
  }
  for (const auto& kernel : artifact->kernels) {
    if (!kernel.binary_of.empty()) {
      std::printf("// ---- %s: runs %s, above\n", kernel.name.c_str(), kernel.entry.c_str());
      continue;
    }
    std::printf("// ---- %s\n%s\n", kernel.entry.c_str(), kernel.ptx.c_str());
  }
  return k_exit_ok;
}

// `value` to `decimals` places, as JSON should show it (218.2, not 218.20800000000003).
double rounded(double value, int decimals) {
  double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

std::string format_millis(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 10 ? "%.1f ms" : "%.0f ms", ms);
  return buf;
}

std::string format_micros(double us) {
  char buf[32];
  if (us >= 1000) return format_millis(us / 1000);
  std::snprintf(buf, sizeof buf, "%.0f us", us);
  return buf;
}

// On a terminal, "compiling FILE: 12/40 kernels, 3.2 s" on stderr while NVRTC runs, redrawn at
// most ten times a second and erased when the compile ends.
class ProgressLine {
public:
  explicit ProgressLine(std::string file) : m_file(std::move(file)) {}
  ~ProgressLine() {
    if (m_drawn) std::fprintf(stderr, "\r\033[K");
  }
  void operator()(size_t done, size_t total) {
    auto now = std::chrono::steady_clock::now();
    if (m_drawn && done < total && now - m_last < std::chrono::milliseconds(100)) return;
    m_last = now;
    m_drawn = true;
    double seconds = std::chrono::duration<double>(now - m_start).count();
    std::fprintf(stderr, "\r\033[Kcompiling %s: %zu/%zu kernels, %.1f s", m_file.c_str(), done,
                 total, seconds);
    std::fflush(stderr);
  }

private:
  std::string m_file;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point m_last;
  bool m_drawn = false;
};

// One graph through the cache (or not); prints the text report or one JSON object.
int compile_one(const std::string& file, const compiler::CompileOptions& options, bool json,
                cache::Cache* cache) {
  int code = k_exit_ok;
  auto prepared = prepare(file, options, code);
  if (!prepared) return code;
  std::optional<ProgressLine> progress;
  if (!json && ::isatty(STDERR_FILENO)) {
    progress.emplace(file);
    prepared->request.checked.options.on_kernel_done = [&progress](size_t done, size_t total) {
      (*progress)(done, total);
    };
  }
  auto result = runtime::compile_prepared(prepared->graph, prepared->request, cache);
  progress.reset();
  if (!result) {
    print_error("kiln: " + file + ": " + result.error().message);
    return k_exit_failure;
  }
  const compiler::Artifact& artifact = result->artifact;
  for (const auto& f : artifact.fallbacks) print_warning("kiln: " + file + ": fallback: " + f);
  const char* cache_word = result->hit ? "hit" : "miss";
  const char* tier = result->remote_hit ? "remote" : "local";
  if (!json) {
    std::string how = result->hit ? std::string("cache hit (") + tier + ") in " +
                                        format_micros(result->lookup_us) + " (saves " +
                                        format_millis(result->cpu_ms) + " of CPU)"
                                  : "cache miss, compiled in " + format_millis(result->compile_ms);
    std::string dims;
    if (!options.bucket.empty()) dims = compiler::describe_bucket(prepared->graph, options.bucket) + ", ";
    std::printf("%s: %s, %s%s, %s, %zu kernel(s), %s\n", file.c_str(),
                result->graph_hash.c_str(), dims.c_str(), artifact.arch.c_str(),
                artifact.precision.c_str(), artifact.kernels.size(), how.c_str());
    for (const auto& k : artifact.kernels) {
      if (artifact.is_cpu()) {
        std::printf("  %s: %llu scratch floats per thread\n", k.name.c_str(),
                    static_cast<unsigned long long>(k.scratch_floats));
        continue;
      }
      std::string tile = k.tile.empty() ? "" : ", tile " + k.tile + " (" + k.schedule + ")";
      std::printf("  %s: %d registers, %d spill bytes, %d local bytes, %lld smem bytes%s%s\n",
                  k.name.c_str(), k.report.registers, k.report.spill_bytes(),
                  k.report.local_bytes, static_cast<long long>(k.smem_bytes()), tile.c_str(),
                  k.binary_of.empty() ? "" : (", the binary of " + k.binary_of).c_str());
    }
    for (const auto& f : artifact.fallbacks) std::printf("  fallback: %s\n", f.c_str());
    return k_exit_ok;
  }
  nlohmann::json out;
  out["graph"] = result->graph_hash;
  out["key"] = result->key;
  out["cache"] = cache_word;
  if (result->hit) out["tier"] = tier;
  if (!options.bucket.empty()) {
    nlohmann::json dims = nlohmann::json::object();
    for (size_t i = 0; i < options.bucket.size(); ++i)
      dims[prepared->graph.symbols()[i].name] = {options.bucket[i].lo, options.bucket[i].hi};
    out["dims"] = dims;
  }
  out["arch"] = artifact.arch;
  out["precision"] = artifact.precision;
  out["decision"] = artifact.decision;
  out["kernels"] = nlohmann::json::array();
  for (const auto& k : artifact.kernels) {
    out["kernels"].push_back({{"name", k.name},
                              {"registers", k.report.registers},
                              {"spill_bytes", k.report.spill_bytes()},
                              {"local_bytes", k.report.local_bytes},
                              {"smem_bytes", k.smem_bytes()}});
    if (!k.binary_of.empty()) out["kernels"].back()["binary_of"] = k.binary_of;
    if (!k.schedule.empty()) out["kernels"].back()["schedule"] = k.schedule;
    if (!k.tile.empty()) out["kernels"].back()["tile"] = k.tile;
  }
  out["fallbacks"] = artifact.fallbacks;
  // A miss reports what this compile took (wall time, and CPU time over its threads); a hit what
  // the original compile cost in CPU time, which the hit saved (lookup_us is this lookup).
  if (result->hit) {
    out["saved_ms"] = rounded(result->cpu_ms, 1);
  } else {
    out["compile_ms"] = rounded(result->compile_ms, 1);
    out["cpu_ms"] = rounded(result->cpu_ms, 1);
  }
  out["lookup_us"] = rounded(result->lookup_us, 1);
  std::printf("%s\n", out.dump().c_str());
  return k_exit_ok;
}

// As the runtime does (RuntimeOptions::autotune `cached`): where GPU 0 is of the target's arch,
// the tiles its tuning records in `cache` name, so that entries compiled here are the ones the
// runtime looks up. Without a GPU, or without records, `options` stay as they are.
void apply_tuning_records(const std::string& file, compiler::CompileOptions& options,
                          cache::Cache* cache) {
  if (!cache || !cache->enabled() || options.target.on_host()) return;
  static std::optional<runtime::TunedTiles> tiles;
  static bool read = false;
  if (!read) {
    read = true;
    // A cache without any tuning record costs one index probe, not the driver's start.
    tiles = runtime::device_tiles(*cache, 0, options.target, options.nvrtc_path, /*probe=*/true);
  }
  if (!tiles || tiles->arch != options.target.arch() || tiles->empty()) return;
  auto graph = read_graph(file);
  if (!graph) return;  // the compile reports it
  auto schedule = runtime::tuned_schedule(*graph, options, *cache, *tiles,
                                          [](const std::string& m) { print_warning("kiln: " + m); });
  if (schedule) options.schedule = *schedule;
}

int run_compile(const CompileArgs& args) {
  int exit_code = k_exit_usage;
  auto options = options_from(args, exit_code);
  if (!options) return exit_code;
  std::unique_ptr<cache::Cache> cache;
  int worst = k_exit_ok;
  // Every file's bucket count first (counted, not made): how many compiles --dims asks for is
  // said, and a count past the limits refused, before any bucket is made or compile starts.
  std::vector<std::pair<std::string, uint64_t>> counts;
  uint64_t total = 0;
  for (const std::string& file : args.files) {
    auto count = bucket_count(args, file);
    if (!count) {
      worst = k_exit_usage;
      continue;
    }
    total = total > UINT64_MAX - *count ? UINT64_MAX : total + *count;
    counts.emplace_back(file, *count);
  }
  if (total > counts.size()) {  // some NAME=all
    std::string each;
    for (const auto& [file, n] : counts)
      each += (each.empty() ? "" : ", ") + file + ": " +
              (n == UINT64_MAX ? "more than 2^64 - 1" : std::to_string(n)) +
              (n == 1 ? " bucket" : " buckets");
    std::string count = "--dims " + args.dims + " asks for " +
                        (total == UINT64_MAX ? "more than 2^64 - 1" : std::to_string(total)) +
                        " compiles (" + each + ")";
    if (total > k_max_compiles) {
      print_error("kiln: " + count + "; one command compiles at most " +
                  std::to_string(k_max_compiles) + " (fix more dims in --dims)");
      return k_exit_usage;
    }
    if (total > k_compiles_without_yes && !args.yes) {
      print_error("kiln: " + count + "; pass --yes to start more than " +
                  std::to_string(k_compiles_without_yes));
      return k_exit_usage;
    }
    print_warning("kiln: note: " + count);
  }
  std::vector<std::pair<std::string, std::vector<std::vector<compiler::DimRange>>>> work;
  for (const auto& [file, n] : counts) {
    auto buckets = buckets_from(args, file);
    if (!buckets) {
      worst = k_exit_usage;
      continue;
    }
    work.emplace_back(file, std::move(*buckets));
  }
  if (!args.no_cache) {
    cache = cache::Cache::open(runtime::cache_options(args.cache_dir, args.remote));
  }
  for (const auto& [file, buckets] : work) {
    for (const auto& bucket : buckets) {
      compiler::CompileOptions bucket_options = *options;
      bucket_options.bucket = bucket;
      apply_tuning_records(file, bucket_options, cache.get());
      int code = compile_one(file, bucket_options, args.json, cache.get());
      if (code == k_exit_usage || (code == k_exit_failure && worst == k_exit_ok)) worst = code;
    }
  }
  return worst;
}

// Keeps, of two "a=1;b=2" option lists, only the parts that differ (the text output of `why`).
void only_differing_parts(std::string& a, std::string& b) {
  auto split = [](const std::string& text) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t end; (end = text.find(';', start)) != std::string::npos; start = end + 1)
      parts.push_back(text.substr(start, end - start));
    parts.push_back(text.substr(start));
    return parts;
  };
  auto join_missing = [](const std::vector<std::string>& from, const std::vector<std::string>& in) {
    std::string out;
    for (const std::string& p : from)
      if (std::find(in.begin(), in.end(), p) == in.end()) out += (out.empty() ? "" : ";") + p;
    return out.empty() ? std::string("-") : out;
  };
  auto pa = split(a), pb = split(b);
  a = join_missing(pa, pb);
  b = join_missing(pb, pa);
}

// Why two "arch" key values that name one compute capability (sm_90, sm_90a) do not share
// entries; "" for any other pair.
std::string arch_suffix_note(const std::string& requested, const std::string& cached) {
  auto here = compiler::parse_arch(requested), there = compiler::parse_arch(cached);
  if (!here || !there || here->sm != there->sm || here->suffix == there->suffix) return "";
  const compiler::Target& specific = here->arch_specific() ? *here : *there;
  const compiler::Target& plain = here->arch_specific() ? *there : *here;
  std::string cc = std::to_string(specific.sm / 10) + "." + std::to_string(specific.sm % 10);
  return specific.arch() + " and " + plain.arch() + " are separate targets: " + specific.arch() +
         " kernels may use that arch's own instructions and load only on compute capability " +
         cc + "; with no --arch (RuntimeOptions::arch empty) a " + cc + " device compiles for " +
         compiler::device_target(specific.sm).arch() + ". Give --arch " + cached +
         " to use the cached entry";
}

// `kiln why`: the entries cached for the same graph and which key fields set them apart.
int run_why(const CompileArgs& args) {
  int exit_code = k_exit_usage;
  auto options = options_from(args, exit_code);
  if (!options) return exit_code;
  if (!set_one_bucket(args, "why", *options)) return k_exit_usage;
  cache::Options cache_options = runtime::cache_options(args.cache_dir, args.remote);
  cache_options.create = false;  // asking about a cache never makes one
  auto cache = cache::Cache::open(std::move(cache_options));
  apply_tuning_records(args.files[0], *options, cache.get());
  int code = k_exit_ok;
  auto prepared = prepare(args.files[0], *options, code);
  if (!prepared) return code;
  const runtime::CacheRequest* request = &prepared->request;
  // Without a local cache, a compile still asks the remote tier: so does this, where there is one.
  std::string local_missing;
  if (!cache->enabled()) {
    std::string reason = cache->disabled_reason();
    local_missing = reason.rfind(cache::k_no_cache_reason, 0) == 0
                        ? reason
                        : "cache unavailable: " + reason;
    if (!cache->has_remote()) {
      print_error("kiln: " + local_missing);
      return k_exit_failure;
    }
  }
  auto nearest = local_missing.empty()
                     ? cache->nearest(request->fields, "graph_hash")
                     : Expected<std::vector<cache::Nearest>>(std::vector<cache::Nearest>{});
  if (!nearest) {
    print_error("kiln: " + nearest.error().message);
    return k_exit_failure;
  }
  bool hit = false;
  nlohmann::json entries = nlohmann::json::array();
  for (const cache::Nearest& n : *nearest) {
    hit = hit || n.info.key == request->key;
    nlohmann::json diffs = nlohmann::json::array();
    for (const cache::FieldDiff& d : n.diffs) {
      // The graph bytes are binary and differ only when graph_hash does; show the hash.
      if (d.name == "graph") continue;
      diffs.push_back({{"field", d.name}, {"requested", d.requested}, {"cached", d.stored}});
    }
    // The note's advice (give the cached entry's arch) holds only when nothing else differs.
    if (diffs.size() == 1 && diffs[0]["field"] == "arch")
      if (std::string note = arch_suffix_note(diffs[0]["requested"], diffs[0]["cached"]);
          !note.empty())
        diffs[0]["note"] = note;
    entries.push_back({{"key", n.info.key}, {"differs", diffs}});
  }
  // Whether the fleet's tier holds it, verified as a compile would verify it: a local miss that
  // the remote tier would serve.
  std::string remote_rejection;
  std::string remote = cache->has_remote()
                           ? cache->remote_verdict(request->key, request->fields, remote_rejection)
                           : "unavailable";
  // Exit 0 when a compile would hit (here, or in the fleet's tier), 1 when it would compile.
  bool would_hit = hit || remote == "present";
  if (args.json) {
    nlohmann::json out = {{"graph", request->graph_hash}, {"key", request->key},
                          {"cache", hit ? "hit" : "miss"}, {"nearest", entries}};
    if (!local_missing.empty()) out["local"] = local_missing;
    if (cache->has_remote()) out["remote"] = remote;
    if (remote == "rejected") out["remote_rejection"] = remote_rejection;
    std::printf("%s\n", out.dump().c_str());
    return would_hit ? k_exit_ok : k_exit_failure;
  }
  std::printf("%s: key %s would %s\n", args.files[0].c_str(), request->key.c_str(),
              hit ? "hit" : "miss");
  if (cache->has_remote()) {
    std::string why = remote == "present" && !hit ? " (this compile would hit remotely)"
                      : remote == "rejected"
                          ? " (" + remote_rejection + "; a compile here would compile it afresh)"
                          : "";
    std::printf("  remote %s: %s%s\n", cache->remote_description().c_str(), remote.c_str(),
                why.c_str());
  }
  if (!local_missing.empty()) {
    std::printf("  local: %s\n", local_missing.c_str());
  } else if (entries.empty()) {
    std::printf("  no cached entry for graph %s\n", request->graph_hash.c_str());
  }
  // A symbolic graph: whether any entry serves the requested bucket.
  std::string requested_dims = compiler::dims_key(options->bucket);
  bool bucket_cached = false;
  for (const cache::Nearest& n : *nearest)
    bucket_cached = bucket_cached || n.info.field("dims") == requested_dims;
  if (!options->bucket.empty() && !hit && !bucket_cached && !entries.empty()) {
    std::printf("  bucket %s not cached\n",
                compiler::describe_bucket(prepared->graph, options->bucket).c_str());
  }
  for (const auto& e : entries) {
    if (e["key"] == request->key) continue;
    std::printf("  %s differs in:", e["key"].get<std::string>().c_str());
    for (const auto& d : e["differs"]) {
      std::string requested = d["requested"], cached = d["cached"];
      if (d["field"] == "options") only_differing_parts(requested, cached);
      if (d["field"] == "dims") {  // with the graph's own names
        if (auto r = compiler::parse_dims_key(requested))
          requested = compiler::describe_bucket(prepared->graph, *r);
        if (auto c = compiler::parse_dims_key(cached))
          cached = compiler::describe_bucket(prepared->graph, *c);
      }
      // A field one side lacks (a CPU entry has no arch) is "none" there.
      std::printf(" %s (%s here, %s cached)", d["field"].get<std::string>().c_str(),
                  requested.empty() ? "none" : requested.c_str(),
                  cached.empty() ? "none" : cached.c_str());
    }
    std::printf("\n");
    for (const auto& d : e["differs"])
      if (d.contains("note")) std::printf("    %s\n", d["note"].get<std::string>().c_str());
  }
  return would_hit ? k_exit_ok : k_exit_failure;
}

}  // namespace

int run_tune(const CompileArgs& args) {
  if (args.target != "cuda") {
    print_error("kiln: tune times CUDA kernels; --target " + args.target + " has no tiles to tune");
    return k_exit_usage;
  }
  auto graph = read_graph(args.files[0]);
  if (!graph) {
    print_error(graph.error().message);
    return k_exit_usage;
  }
  // The bucket (--dims, or the largest of every dim), then the request (which the arch
  // decides): false once said why.
  auto bucketed = [&](compiler::CompileOptions& options) {
    if (!graph->symbolic() || !args.dims.empty()) return set_one_bucket(args, "tune", options);
    for (const ir::Symbol& symbol : graph->symbols())
      options.bucket.push_back(compiler::bucket_of(symbol.hi, symbol));
    return true;
  };
  auto planned = [&](compiler::CompileOptions& options) {
    if (!bucketed(options)) return false;
    if (auto checked = compiler::check_request(*graph, options); !checked) {
      print_error("kiln: " + about(args.files[0], checked.error().message));
      return false;
    }
    return true;
  };
  // Bad usage is exit 2 before the GPU is looked for (exit 3): the flags and the dims (an arch
  // of its own where none is given), and with --arch the request too.
  CompileArgs flags = args;
  if (flags.arch.empty()) flags.arch = "sm_90";
  int exit_code = k_exit_usage;
  auto early = options_from(flags, exit_code);
  if (!early) return exit_code;
  if (!(args.arch.empty() ? bucketed(*early) : planned(*early))) return k_exit_usage;
  // Tuning needs the GPU: said before anything else is asked of the machine.
  auto identity = runtime::device_identity(0);
  if (!identity) {
    print_error("kiln: tune times kernels on a GPU, and there is none here (" +
                identity.error().message + ")");
    return k_exit_no_gpu;
  }
  auto options = options_from(args, exit_code);
  if (!options) return exit_code;
  if (options->target.sm != identity->sm) {
    // The device's own target (sm_90a on 9.0), and the plain arch beside it.
    std::string own = compiler::device_target(identity->sm).arch();
    std::string plain = compiler::arch_name(identity->sm);
    print_error("kiln: tune times kernels on this machine's GPU, " + identity->text() + ", which is " +
                plain + ": give --arch " + own + (own != plain ? " or " + plain : "") +
                " (or none), not " + options->target.arch());
    return k_exit_usage;
  }
  if (!planned(*options)) return k_exit_usage;
  std::unique_ptr<cache::Cache> cache;
  if (!args.no_cache) {
    cache = cache::Cache::open(runtime::cache_options(args.cache_dir, args.remote));
  }
  runtime::TuneOptions tune;
  tune.repeats = args.repeats;
  if (!args.json) tune.progress = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  };
  auto records = runtime::tune_graph(*graph, *options, cache.get(), tune);
  if (!records) {
    print_error("kiln: tune " + about(args.files[0], records.error().message));
    return k_exit_failure;
  }
  bool stored = cache && cache->enabled();
  if (args.json) {
    nlohmann::json problems = nlohmann::json::array();
    for (const runtime::TuningRecord& r : *records) {
      nlohmann::json j = nlohmann::json::parse(runtime::encode_record(r));
      auto nvrtc = compiler::nvrtc_identity(options->nvrtc_path);  // tune_graph loaded it
      if (stored && nvrtc)
        j["key"] = cache::make_key(runtime::tuning_fields(r.signature, *identity, r.arch, *nvrtc));
      problems.push_back(std::move(j));
    }
    nlohmann::json out = {{"graph", args.files[0]},
                          {"arch", options->target.arch()},
                          {"device", identity->text()},
                          {"stored", stored},
                          {"problems", std::move(problems)}};
    std::printf("%s\n", out.dump().c_str());
    return k_exit_ok;
  }
  if (records->empty())
    std::printf("%s: no matmul or attention kernel to tune\n", args.files[0].c_str());
  for (const runtime::TuningRecord& r : *records) {
    double winner_ms = -1, model_ms = -1;
    size_t timed = 0;
    for (const runtime::CandidateTime& c : r.candidates) {
      if (c.status != "ok") continue;
      ++timed;
      if (compiler::same_tile(c.tile, r.winner)) winner_ms = c.median_ms;
      if (compiler::same_tile(c.tile, r.model)) model_ms = c.median_ms;
    }
    std::printf("%s: %zu of %zu candidates timed; tuned %s (%.4f ms), model %s (%.4f ms): "
                "%.2fx\n",
                r.kernel.c_str(), timed, r.candidates.size(),
                compiler::to_string(r.winner).c_str(), winner_ms,
                compiler::to_string(r.model).c_str(), model_ms,
                winner_ms > 0 ? model_ms / winner_ms : 0.0);
  }
  if (!records->empty())
    std::printf("%s %s, %s\n",
                stored ? "tuning records stored for" : "no cache: nothing stored for",
                identity->text().c_str(), options->target.arch().c_str());
  return k_exit_ok;
}

void register_compile_commands(CLI::App& app, int& exit_code) {
  auto emit_args = std::make_shared<CompileArgs>();
  CLI::App* emit = app.add_subcommand("emit", "print the CUDA source (or PTX) of a graph");
  emit->add_option("FILE", emit_args->files, "graph file (.kg) or -")->required()->expected(1);
  add_target_options(emit, *emit_args);
  emit->add_flag("--ptx", emit_args->ptx, "compile with NVRTC and print the PTX instead");
  emit->add_flag("--llvm", emit_args->llvm,
                 "with --target cpu: print the LLVM IR (what the CPU target emits)");
  emit->add_flag("--no-prelude", emit_args->no_prelude,
                 "print the kernels without the device prelude");
  emit->callback([emit_args, &exit_code] { exit_code = run_emit(*emit_args); });

  auto args = std::make_shared<CompileArgs>();
  CLI::App* compile =
      app.add_subcommand("compile", "compile graphs through the cache (NVRTC on a miss)");
  compile->add_option("FILE", args->files, "graph files (.kg)")->required();
  add_target_options(compile, *args);
  compile->add_flag("--no-cache", args->no_cache, "do not use the kernel cache");
  compile->add_flag("--yes", args->yes,
                    "start even when --dims asks for more than " +
                        std::to_string(k_compiles_without_yes) + " compiles");
  compile->add_flag("--json", args->json, "print one JSON object per graph");
  add_cache_dir_option(compile, args->cache_dir, "cache directory");
  add_remote_option(compile, args->remote);
  compile->callback([args, &exit_code] { exit_code = run_compile(*args); });

  auto why_args = std::make_shared<CompileArgs>();
  CLI::App* why = app.add_subcommand(
      "why", "explain a cache miss: the cached entries of the same graph and how their keys differ");
  why->add_option("FILE", why_args->files, "graph file (.kg) or -")->required()->expected(1);
  add_target_options(why, *why_args);
  add_cache_dir_option(why, why_args->cache_dir, "cache directory");
  add_remote_option(why, why_args->remote);
  why->add_flag("--json", why_args->json, "print JSON");
  why->callback([why_args, &exit_code] { exit_code = run_why(*why_args); });

  auto tune_args = std::make_shared<CompileArgs>();
  CLI::App* tune = app.add_subcommand(
      "tune", "time every legal tile of a graph's matmul and attention kernels on the GPU and "
              "store the "
              "fastest as tuning records (exit 3 without a GPU)");
  tune->add_option("FILE", tune_args->files, "graph file (.kg) or -")->required()->expected(1);
  add_target_options(tune, *tune_args);
  tune->add_option("--repeats", tune_args->repeats,
                   "timed runs per candidate, 5 to 1000 (the median counts)")
      ->check(whole_number_in(5, 1000))
      ->capture_default_str();
  tune->add_flag("--no-cache", tune_args->no_cache, "time and print only: store no record");
  tune->add_flag("--json", tune_args->json, "print one JSON object");
  add_cache_dir_option(tune, tune_args->cache_dir, "cache directory");
  add_remote_option(tune, tune_args->remote);
  tune->callback([tune_args, &exit_code] { exit_code = run_tune(*tune_args); });
}

}  // namespace kiln::tools
