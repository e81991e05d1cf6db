// kiln-bench: cold vs warm compile of every graph in a folder, and a herd of cold processes.
//
//   cold_ms          fresh cache: codegen + NVRTC + store (median of several runs, in process)
//   warm_us          hash + key + lookup + checksums + decompression + decode (median, in process)
//   warm_process_ms  a new `kiln compile` process that hits the cache (median)
#include "process.h"

#include "cache/cache.h"
#include "compiler/options.h"
#include "ir/parse.h"
#include "runtime/compile_service.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;
using nlohmann::json;

namespace kiln::bench {
namespace {

struct Settings {
  std::string graphs_dir;
  std::string arch = "sm_90";
  std::string precision = "high";
  std::string kiln = KILN_BIN;
  bool json_out = false;
  bool quick = false;
  int herd = 8;
  int cold_runs() const { return quick ? 3 : 5; }
  int warm_runs() const { return quick ? 200 : 2000; }
  int process_runs() const { return quick ? 5 : 15; }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// A fresh cache folder under the system temp dir, removed when it goes out of scope.
class TempDir {
public:
  TempDir() {
    char name[] = "/tmp/kiln-bench-XXXXXX";
    m_path = mkdtemp(name) ? name : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!m_path.empty()) fs::remove_all(m_path, ec);
  }
  const std::string& path() const { return m_path; }

private:
  std::string m_path;
};

std::unique_ptr<cache::Cache> open_cache(const std::string& dir) {
  cache::Options options;
  options.dir = dir;
  return cache::Cache::open(std::move(options));
}

json machine() {
  json m;
  utsname u{};
  if (uname(&u) == 0) m["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  m["cores"] = std::thread::hardware_concurrency();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      m["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  }
  m["gpu"] = "none (NVRTC compiles for the target arch without one)";
  return m;
}

std::vector<std::string> compile_command(const Settings& s, const std::string& graph,
                                         const std::string& cache_dir, bool use_cache) {
  std::vector<std::string> cmd = {s.kiln, "compile", graph, "--arch", s.arch, "--precision",
                                  s.precision, "--json"};
  if (use_cache) {
    cmd.insert(cmd.end(), {"--cache-dir", cache_dir});
  } else {
    cmd.push_back("--no-cache");
  }
  return cmd;
}

// How many of `results` compiled (reported a miss); -1 if any process failed.
int count_misses(const std::vector<ProcessResult>& results) {
  int misses = 0;
  for (const ProcessResult& r : results) {
    if (r.exit_code != 0) return -1;
    json parsed = json::parse(r.out, nullptr, false);
    if (parsed.is_discarded()) return -1;
    const json& first = parsed.is_array() ? parsed.at(0) : parsed;
    if (first.value("cache", "") != "hit") ++misses;
  }
  return misses;
}

Expected<json> bench_graph(const Settings& s, const std::string& path,
                           const compiler::CompileOptions& options) {
  auto graph = ir::parse_graph_file(path);
  if (!graph) return graph.error();
  json row;
  row["name"] = fs::path(path).stem().string();

  std::vector<double> cold;
  TempDir warm_dir;  // the last cold run's cache serves the warm runs
  for (int i = 0; i < s.cold_runs(); ++i) {
    TempDir fresh;
    const std::string& dir = i + 1 == s.cold_runs() ? warm_dir.path() : fresh.path();
    auto cache = open_cache(dir);
    auto start = std::chrono::steady_clock::now();
    auto result = runtime::compile_graph(*graph, options, cache.get());
    double elapsed = ms_since(start);
    if (!result) return result.error();
    if (result->hit) return make_error("cold run of ", path, " hit a fresh cache");
    cold.push_back(elapsed);
    row["kernels"] = result->artifact.kernels.size();
  }

  auto cache = open_cache(warm_dir.path());
  std::vector<double> warm;
  for (int i = 0; i < s.warm_runs(); ++i) {
    auto start = std::chrono::steady_clock::now();
    auto result = runtime::compile_graph(*graph, options, cache.get());
    double elapsed = ms_since(start) * 1000.0;
    if (!result) return result.error();
    if (!result->hit) return make_error("warm run of ", path, " missed");
    warm.push_back(elapsed);
  }
  cache.reset();  // writes batched bookkeeping before other processes read

  std::vector<double> process;
  for (int i = 0; i < s.process_runs(); ++i) {
    auto results = run_together({compile_command(s, path, warm_dir.path(), true)});
    if (count_misses(results) != 0) {
      return make_error("`kiln compile` of ", path, " did not hit the warm cache");
    }
    process.push_back(results[0].wall_ms);
  }

  row["cold_ms"] = median(cold);
  row["warm_us"] = median(warm);
  row["warm_process_ms"] = median(process);
  row["ratio"] = median(cold) * 1000.0 / median(warm);
  return row;
}

// N processes start cold on one graph at once, with the cache and without it.
Expected<json> bench_herd(const Settings& s, const std::string& path) {
  json herd;
  herd["graph"] = fs::path(path).stem().string();
  herd["processes"] = s.herd;
  for (bool use_cache : {true, false}) {
    TempDir dir;
    std::vector<std::vector<std::string>> commands(
        static_cast<size_t>(s.herd), compile_command(s, path, dir.path(), use_cache));
    auto start = std::chrono::steady_clock::now();
    auto results = run_together(commands);
    double wall = ms_since(start);
    int compiles = count_misses(results);
    if (compiles < 0) return make_error("a herd process failed on ", path);
    const char* label = use_cache ? "cached" : "uncached";
    herd[label] = {{"compiles", compiles}, {"wall_ms", wall}};
  }
  return herd;
}

void print_table(const json& report) {
  std::printf("%-16s %7s %10s %10s %14s %10s\n", "graph", "kernels", "cold_ms", "warm_us",
              "warm_process_ms", "cold/warm");
  for (const json& g : report["graphs"]) {
    std::printf("%-16s %7d %10.1f %10.1f %14.2f %9.0fx\n", g["name"].get<std::string>().c_str(),
                g["kernels"].get<int>(), g["cold_ms"].get<double>(), g["warm_us"].get<double>(),
                g["warm_process_ms"].get<double>(), g["ratio"].get<double>());
  }
  if (report.contains("herd")) {
    const json& h = report["herd"];
    std::printf("herd: %d processes cold on %s: %d compile(s) in %.0f ms with the cache; "
                "%d compiles in %.0f ms without\n",
                h["processes"].get<int>(), h["graph"].get<std::string>().c_str(),
                h["cached"]["compiles"].get<int>(), h["cached"]["wall_ms"].get<double>(),
                h["uncached"]["compiles"].get<int>(), h["uncached"]["wall_ms"].get<double>());
  }
}

int run(const Settings& s) {
  auto sm = compiler::parse_arch(s.arch);
  auto precision = ir::parse_precision(s.precision);
  if (!sm || !precision) {
    std::fprintf(stderr, "kiln-bench: bad --arch or --precision\n");
    return 2;
  }
  compiler::CompileOptions options;
  options.sm = *sm;
  options.precision = *precision;
  std::vector<std::string> graphs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(s.graphs_dir, ec)) {
    if (entry.path().extension() == ".kg") graphs.push_back(entry.path().string());
  }
  if (ec || graphs.empty()) {
    std::fprintf(stderr, "kiln-bench: no .kg graphs in %s\n", s.graphs_dir.c_str());
    return 2;
  }
  std::sort(graphs.begin(), graphs.end());
  json report;
  report["machine"] = machine();
  report["arch"] = s.arch;
  report["precision"] = s.precision;
  report["graphs"] = json::array();
  for (const std::string& path : graphs) {
    auto row = bench_graph(s, path, options);
    if (!row) {
      std::fprintf(stderr, "kiln-bench: %s\n", row.error().message.c_str());
      return 1;
    }
    report["graphs"].push_back(*row);
    if (!s.json_out) std::fprintf(stderr, "kiln-bench: %s done\n", path.c_str());
  }
  if (s.herd > 0) {
    auto herd = bench_herd(s, graphs.front());
    if (!herd) {
      std::fprintf(stderr, "kiln-bench: %s\n", herd.error().message.c_str());
      return 1;
    }
    report["herd"] = *herd;
  }
  if (s.json_out) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    print_table(report);
  }
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  kiln::bench::Settings s;
  CLI::App app{"kiln-bench: cold and warm compile times of kiln's cache"};
  app.add_option("--graphs", s.graphs_dir, "folder of .kg graphs")->required();
  app.add_option("--arch", s.arch, "target arch (default sm_90)");
  app.add_option("--precision", s.precision, "precision mode (default high)");
  app.add_option("--kiln", s.kiln, "the kiln binary used for the process runs");
  app.add_option("--herd", s.herd, "processes in the cold herd (0: skip; default 8)");
  app.add_flag("--json", s.json_out, "print JSON");
  app.add_flag("--quick", s.quick, "fewer repetitions");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return kiln::bench::run(s);
}
