// kiln-bench: cold vs warm compile of every graph in a folder, and a herd of cold processes.
//
//   cold_ms          fresh cache: codegen + NVRTC + store (median of several runs, in process)
//   warm_us          hash + key + lookup + checksums + decompression + decode (median, in process)
//   key_us           the key alone: request check, graph hash, key fields (median, in process)
//   read_floor_us    SQLite's read of the entry's record plus its XXH3 checksum, nothing decoded or
//                    copied out: what any verified local hit of this entry costs at least
//   warm_process_ms  a new `kiln compile` process that hits the cache (median), interleaved with
//   version_ms       a bare `kiln --version` process (the floor a new process cannot beat)
//   remote_hit_us    empty local cache, warm Redis on loopback: fetch, verify (and check as the
//                    runtime and `kiln` check a remote value), store locally
//   stored_bytes     bytes the local store keeps for the entry, and stored_bytes_v1: what the
//                    first schema kept (every payload zstd level 3)
// and two herds of cold processes on one graph: sharing one cache directory, and as a fleet
// (separate directories, one Redis), each against no cache. A symbolic graph is measured at the
// bucket holding 128 (or its top) for every dim.
//
// --serving N: a serving sweep of N requests (batch sizes drawn from 1..512, seeded) against one
// symbolic MLP (`dim B: 1..512`) and against the static MLPs, one per batch size: compiles,
// their total time, and the first request of a new process against the warm cache.
#include "process.h"

#include "cache/cache.h"
#include "cache/codec.h"
#include "cache/entry_codec.h"
#include "cache/local/sqlite.h"
#include "tests/support/redis_server.h"
#include "compiler/cpu/jit.h"
#include "compiler/options.h"
#include "compiler/sizes.h"
#include "compiler/target.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "reference/audit.h"
#include "reference/tensor.h"
#include "runtime/compile_service.h"
#include "runtime/cpu_program.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace fs = std::filesystem;
using nlohmann::json;

namespace kiln::bench {
namespace {

struct Settings {
  std::string graphs_dir;
  std::string arch = "sm_90";
  std::string target = "cuda";  // or cpu, cpu:NAME
  std::string precision = "high";
  std::string kiln = KILN_BIN;
  bool json_out = false;
  bool quick = false;
  int herd = 8;
  int serving = 0;  // requests in the serving sweep (0: none)
  bool run = false;  // --run: the CPU target's steady-state run time per graph and per kernel
  uint64_t seed = 1;
  int cold_runs() const { return quick ? 3 : 5; }
  int warm_runs() const { return quick ? 200 : 2000; }
  int process_runs() const { return quick ? 5 : 15; }
  int remote_runs() const { return quick ? 20 : 100; }
  int run_runs() const { return quick ? 20 : 100; }
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

// As the runtime and `kiln` open it: a remote value is checked before it is taken.
std::unique_ptr<cache::Cache> open_cache(const std::string& dir, const std::string& remote = "") {
  return cache::Cache::open(runtime::cache_options(dir, remote));
}

// What the first schema stored for `entry`: fields, summary, payload names, zstd-3 payloads.
uint64_t v1_stored_bytes(const cache::StoredEntry& entry) {
  uint64_t bytes = entry.info.summary.size();
  for (const cache::KeyField& f : entry.info.fields) bytes += f.name.size() + f.value.size();
  for (const cache::StoredPayload& p : entry.payloads) {
    auto raw = cache::decode(p.encoded);
    auto zstd = raw ? cache::encode(*raw, cache::Encoding::zstd) : raw.error();
    bytes += p.name.size() + (zstd ? zstd->data.size() : 0);
  }
  return bytes;
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
                                         const std::string& cache_dir, bool use_cache,
                                         const std::string& remote = "",
                                         const std::string& dims = "") {
  std::vector<std::string> cmd = {s.kiln, "compile", graph, "--precision", s.precision, "--json",
                                  "--remote", remote};
  if (s.target == "cuda") {
    cmd.insert(cmd.end(), {"--arch", s.arch});
  } else {
    cmd.insert(cmd.end(), {"--target", s.target});
  }
  if (!dims.empty()) cmd.insert(cmd.end(), {"--dims", dims});
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

// A symbolic graph's benchmark sizes: 128 (or the range's top) for every dim, as --dims text.
std::string bench_dims(const ir::Graph& graph, compiler::CompileOptions& options) {
  std::string dims;
  options.bucket.clear();
  for (const ir::Symbol& symbol : graph.symbols()) {
    int64_t value = std::clamp<int64_t>(128, symbol.lo, symbol.hi);
    options.bucket.push_back(compiler::bucket_of(value, symbol));
    dims += (dims.empty() ? "" : ",") + symbol.name + "=" + std::to_string(value);
  }
  return dims;
}

// Median time of reading `key`'s record with one SQLite statement (as a hit does) and checksumming
// it, over `runs` reads through a connection of its own.
Expected<double> read_floor_us(const std::string& db_path, const std::string& key, int runs) {
  auto db = cache::sql::Db::open(db_path);
  if (!db) return db.error();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    bool good = false;
    {
      auto st = (*db)->prepare("SELECT record FROM entries WHERE key = ?");
      if (!st) return st.error();
      st->bind_text(1, key);
      auto row = st->step();
      if (!row || !*row) return make_error("the record of ", key, " is not in ", db_path);
      good = cache::record_checksum_holds(st->column_blob_view(0));
    }  // the statement resets here, ending the read transaction as a hit's does
    times.push_back(ms_since(start) * 1000.0);
    if (!good) return make_error("the record of ", key, " fails its checksum");
  }
  return median(times);
}

// The CPU target's steady state (--run): `artifact` loaded once, run on seeded inputs at the
// benchmark sizes into buffers allocated once, 3 warm-up runs then s.run_runs() timed ones. The
// median run, each kernel's median, and the median time outside the kernels (temporaries,
// dispatch between kernels) with its share of the run.
Expected<json> bench_run(const Settings& s, const ir::Graph& graph,
                         const compiler::CompileOptions& options,
                         const compiler::Artifact& artifact) {
  std::vector<int64_t> dims;
  for (size_t i = 0; i < options.bucket.size(); ++i)
    dims.push_back(std::clamp<int64_t>(128, graph.symbols()[i].lo, graph.symbols()[i].hi));
  auto bound = graph.bind(dims);
  if (!bound) return bound.error();
  auto inputs = reference::make_inputs(*bound, reference::InputSource{s.seed, {}});
  if (!inputs) return inputs.error();
  std::vector<std::vector<unsigned char>> in_bytes;
  for (const reference::Tensor& t : *inputs) {
    in_bytes.emplace_back(static_cast<size_t>(t.type().bytes()));
    reference::store_device_bytes(t, in_bytes.back().data());
  }
  auto program = runtime::CpuProgram::load(artifact);
  if (!program) return program.error();
  auto out_sizes = (*program)->output_bytes(dims);
  if (!out_sizes) return out_sizes.error();
  std::vector<std::vector<unsigned char>> out_bytes;
  for (uint64_t bytes : *out_sizes) out_bytes.emplace_back(bytes);
  std::vector<const void*> in;
  std::vector<void*> out;
  for (const auto& b : in_bytes) in.push_back(b.data());
  for (auto& b : out_bytes) out.push_back(b.data());
  std::vector<double> total, outside;
  std::vector<std::vector<double>> per_kernel(artifact.kernels.size());
  for (int r = 0; r < 3 + s.run_runs(); ++r) {
    std::vector<double> kernel_us;
    auto start = std::chrono::steady_clock::now();
    Status st = (*program)->run(in, out, dims, 0, &kernel_us);
    double us = ms_since(start) * 1000.0;
    if (!st) return st.error();
    if (r < 3) continue;
    total.push_back(us);
    double sum = 0;
    for (size_t k = 0; k < kernel_us.size() && k < per_kernel.size(); ++k) {
      per_kernel[k].push_back(kernel_us[k]);
      sum += kernel_us[k];
    }
    outside.push_back(std::max(0.0, us - sum));
  }
  json run;
  run["runs"] = s.run_runs();
  run["run_us"] = median(total);
  run["outside_us"] = median(outside);
  run["outside_share"] = median(total) > 0 ? median(outside) / median(total) : 0.0;
  run["kernels"] = json::array();
  for (size_t k = 0; k < per_kernel.size(); ++k)
    run["kernels"].push_back({{"name", artifact.kernels[k].name}, {"run_us", median(per_kernel[k])}});
  return run;
}

Expected<json> bench_graph(const Settings& s, const std::string& path,
                           compiler::CompileOptions options,
                           const testing::RedisServer* redis) {
  auto graph = ir::parse_graph_file(path);
  if (!graph) return graph.error();
  json row;
  row["name"] = fs::path(path).stem().string();
  std::string dims = bench_dims(*graph, options);
  if (!dims.empty()) row["dims"] = dims;

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
  auto request = runtime::prepare_compile(*graph, options);
  if (!request) return request.error();
  std::vector<double> key;
  for (int i = 0; i < s.warm_runs(); ++i) {
    auto start = std::chrono::steady_clock::now();
    auto prepared = runtime::prepare_compile(*graph, options);
    key.push_back(ms_since(start) * 1000.0);
    if (!prepared || prepared->key != request->key) return make_error("the key of ", path, " moved");
  }
  auto floor = read_floor_us(cache->db_path(), request->key, s.warm_runs());
  if (!floor) return floor.error();
  auto stored = cache->export_entries();
  if (!stored || stored->size() != 1) return make_error("the warm cache of ", path, " is not one entry");
  row["stored_bytes"] = cache->stats()->bytes;
  if (options.target.is_cpu()) {
    // The CPU target's hit is ready to run once its object is linked into a fresh JITDylib.
    auto hit = runtime::compile_graph(*graph, options, cache.get());
    if (!hit) return hit.error();
    std::vector<double> load;
    for (int i = 0; i < s.warm_runs() / 10 + 5; ++i) {
      auto start = std::chrono::steady_clock::now();
      auto program = runtime::CpuProgram::load(hit->artifact);
      if (!program) return program.error();
      load.push_back(ms_since(start) * 1000.0);
    }
    row["object_load_us"] = median(load);
    if (s.run) {
      auto run = bench_run(s, *graph, options, hit->artifact);
      if (!run) return make_error(path, ": --run: ", run.error().message);
      row["run"] = *run;
    }
  }
  row["stored_bytes_v1"] = v1_stored_bytes(stored->front());
  cache.reset();

  // Paired and interleaved: a hit in a new process, then a bare `kiln --version`.
  std::vector<double> process, version;
  for (int i = 0; i < s.process_runs(); ++i) {
    auto results = run_together({compile_command(s, path, warm_dir.path(), true, "", dims)});
    if (count_misses(results) != 0) {
      return make_error("`kiln compile` of ", path, " did not hit the warm cache: ",
                        "exit ", std::to_string(results[0].exit_code), " ", results[0].out.substr(0, 300));
    }
    process.push_back(results[0].wall_ms);
    version.push_back(run_together({{s.kiln, "--version"}})[0].wall_ms);
  }

  // A CPU target's entry holds host machine code, which the remote tier takes only from a
  // machine holding the fleet's secret: no remote column for it here.
  if (redis && !options.target.is_cpu()) {
    // The fleet holds the entry; each run starts from an empty local cache.
    {
      auto filler = open_cache(warm_dir.path(), redis->url());
      auto pushed = filler->push();
      if (!pushed || pushed->pushed != 1) return make_error("pushing ", path, " to redis failed");
    }
    std::vector<double> remote;
    for (int i = 0; i < s.remote_runs(); ++i) {
      TempDir empty;
      auto fresh = open_cache(empty.path(), redis->url());
      auto start = std::chrono::steady_clock::now();
      auto result = runtime::compile_prepared(*graph, *request, fresh.get());
      double elapsed = ms_since(start) * 1000.0;
      if (!result || !result->remote_hit) return make_error("remote run of ", path, " missed");
      remote.push_back(elapsed + request->prepare_us);
    }
    row["remote_hit_us"] = median(remote);
  }

  row["cold_ms"] = median(cold);
  row["warm_us"] = median(warm);
  row["key_us"] = median(key);
  row["read_floor_us"] = *floor;
  row["warm_process_ms"] = median(process);
  row["version_ms"] = median(version);
  row["ratio"] = median(cold) * 1000.0 / median(warm);
  return row;
}

// The serving sweep: s.serving requests with batch sizes from 1..512 against one symbolic MLP
// and against static MLPs, one per size, each through a cache of its own; then the first
// request again from a new `kiln compile` process against each warm cache.
Expected<json> bench_serving(const Settings& s, const compiler::CompileOptions& options) {
  constexpr int64_t k_max_batch = 512;
  const std::string text =
      "graph serving_mlp {\n"
      "  dim B: 1.." + std::to_string(k_max_batch) + "\n"
      "  input x: f32[B, 256]\n  input w1: f32[256, 1024]\n  input b1: f32[1024]\n"
      "  input w2: f32[1024, 256]\n"
      "  h = gelu(add(matmul(x, w1), b1))\n  y = add(matmul(h, w2), x)\n  output y\n}\n";
  auto graph = ir::parse_graph(text, "serving_mlp.kg");
  if (!graph) return graph.error();
  std::mt19937_64 rng(s.seed);
  std::uniform_int_distribution<int64_t> batch(1, k_max_batch);
  std::vector<int64_t> sizes(static_cast<size_t>(s.serving));
  for (int64_t& size : sizes) size = batch(rng);
  std::vector<int64_t> distinct = sizes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());

  json out;
  out["requests"] = s.serving;
  out["seed"] = s.seed;
  out["batch_sizes"] = "1.." + std::to_string(k_max_batch);
  out["distinct_sizes"] = distinct.size();
  for (bool symbolic : {true, false}) {
    TempDir dir;
    auto cache = open_cache(dir.path());
    int compiles = 0;
    double compile_ms = 0, total_ms = 0;
    for (int64_t size : sizes) {
      compiler::CompileOptions o = options;
      Expected<ir::Graph> request = *graph;
      if (symbolic) {
        o.bucket = {compiler::bucket_of(size, graph->symbols()[0])};
      } else {
        request = graph->bind({size});
        if (!request) return request.error();
      }
      auto start = std::chrono::steady_clock::now();
      auto result = runtime::compile_graph(*request, o, cache.get());
      double ms = ms_since(start);
      if (!result) return result.error();
      total_ms += ms;
      if (!result->hit) {
        ++compiles;
        compile_ms += ms;
      }
    }
    cache.reset();
    // The first request's graph as a file, for a new process.
    std::string file = dir.path() + "/request.kg";
    auto bound = graph->bind({sizes.front()});
    if (!bound) return bound.error();
    {
      std::ofstream f(file);
      f << (symbolic ? text : ir::print_graph(*bound));
    }
    std::vector<double> process;
    for (int i = 0; i < s.process_runs(); ++i) {
      auto results = run_together({compile_command(
          s, file, dir.path(), true, "", symbolic ? "B=" + std::to_string(sizes.front()) : "")});
      if (count_misses(results) != 0) return make_error("the serving sweep's warm process missed");
      process.push_back(results[0].wall_ms);
    }
    out[symbolic ? "symbolic" : "static"] = {{"compiles", compiles},
                                             {"compile_ms", compile_ms},
                                             {"total_ms", total_ms},
                                             {"first_request_process_ms", median(process)}};
  }
  return out;
}

// N machines (separate cache directories) start cold on one graph at once, sharing one Redis.
Expected<json> bench_fleet_herd(const Settings& s, const std::string& path,
                                const testing::RedisServer& redis) {
  json herd;
  herd["graph"] = fs::path(path).stem().string();
  herd["machines"] = s.herd;
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::vector<std::string>> commands;
  for (int i = 0; i < s.herd; ++i) {
    dirs.push_back(std::make_unique<TempDir>());
    commands.push_back(compile_command(s, path, dirs.back()->path(), true, redis.url()));
  }
  (void)redis.command({"FLUSHALL"});
  auto start = std::chrono::steady_clock::now();
  int compiles = count_misses(run_together(commands));
  herd["wall_ms"] = ms_since(start);
  if (compiles < 0) return make_error("a fleet herd process failed on ", path);
  herd["compiles"] = compiles;
  return herd;
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
  std::printf("%-16s %7s %9s %8s %6s %6s %9s %10s %10s %9s %14s\n", "graph", "kernels",
              "cold_ms", "warm_us", "key", "floor", "process", "version_ms", "remote_us",
              "cold/warm", "bytes (v1)");
  for (const json& g : report["graphs"]) {
    std::printf("%-16s %7d %9.1f %8.1f %6.1f %6.1f %9.2f %10.2f %10.1f %8.0fx %7llu (%llu)",
                g["name"].get<std::string>().c_str(), g["kernels"].get<int>(),
                g["cold_ms"].get<double>(), g["warm_us"].get<double>(),
                g["key_us"].get<double>(), g["read_floor_us"].get<double>(),
                g["warm_process_ms"].get<double>(), g["version_ms"].get<double>(),
                g.value("remote_hit_us", 0.0), g["ratio"].get<double>(),
                g["stored_bytes"].get<unsigned long long>(),
                g["stored_bytes_v1"].get<unsigned long long>());
    if (g.contains("object_load_us")) std::printf("  load %.0f us", g["object_load_us"].get<double>());
    if (g.contains("run")) {
      const json& r = g["run"];
      std::printf("  run %.1f us (outside the kernels %.1f%%)", r["run_us"].get<double>(),
                  100.0 * r["outside_share"].get<double>());
    }
    std::printf("\n");
  }
  if (report.contains("fleet_herd")) {
    const json& f = report["fleet_herd"];
    std::printf("fleet herd: %d machines (own cache dirs, one Redis) cold on %s: %d compile(s) "
                "in %.0f ms\n",
                f["machines"].get<int>(), f["graph"].get<std::string>().c_str(),
                f["compiles"].get<int>(), f["wall_ms"].get<double>());
  }
  if (report.contains("serving")) {
    const json& v = report["serving"];
    std::printf("serving sweep: %d requests, batch %s (%d distinct sizes, seed %llu)\n",
                v["requests"].get<int>(), v["batch_sizes"].get<std::string>().c_str(),
                v["distinct_sizes"].get<int>(), v["seed"].get<unsigned long long>());
    for (const char* kind : {"symbolic", "static"}) {
      const json& k = v[kind];
      std::printf("  %-8s %4d compiles, %9.0f ms compiling, %9.0f ms in all; first request in a "
                  "new process %.2f ms\n",
                  kind, k["compiles"].get<int>(), k["compile_ms"].get<double>(),
                  k["total_ms"].get<double>(), k["first_request_process_ms"].get<double>());
    }
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
  options.target = *sm;
  options.precision = *precision;
  if (s.run && s.target == "cuda") {
    std::fprintf(stderr, "kiln-bench: --run times the CPU target (--target cpu); the GPU's kernels "
                         "are timed by bench/gpu_gemm and bench/gpu_attention\n");
    return 2;
  }
  if (s.target != "cuda") {
    auto target = compiler::parse_target(s.target);
    auto machine = target && target->is_cpu()
                       ? compiler::cpu::cpu_machine(target->cpu)
                       : Expected<compiler::cpu::CpuMachine>(
                             make_error("not a CPU target (give a CUDA arch with --arch)"));
    if (!machine) {
      std::fprintf(stderr, "kiln-bench: --target %s: %s\n", s.target.c_str(),
                   machine.error().message.c_str());
      return 2;
    }
    options.target = compiler::Target::for_cpu(machine->cpu, machine->features);
  }
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
  report["arch"] = options.target.is_cpu() ? "cpu:" + options.target.cpu : s.arch;
  report["precision"] = s.precision;
  report["graphs"] = json::array();
  testing::RedisServer redis;
  if (!redis.started())
    std::fprintf(stderr, "kiln-bench: no remote columns: %s\n", redis.error().c_str());
  const testing::RedisServer* remote = redis.started() ? &redis : nullptr;
  for (const std::string& path : graphs) {
    auto row = bench_graph(s, path, options, remote);
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
    if (remote) {
      auto fleet = bench_fleet_herd(s, graphs.front(), redis);
      if (!fleet) {
        std::fprintf(stderr, "kiln-bench: %s\n", fleet.error().message.c_str());
        return 1;
      }
      report["fleet_herd"] = *fleet;
    }
  }
  if (s.serving > 0) {
    auto serving = bench_serving(s, options);
    if (!serving) {
      std::fprintf(stderr, "kiln-bench: serving sweep: %s\n", serving.error().message.c_str());
      return 1;
    }
    report["serving"] = *serving;
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
  app.add_option("--target", s.target, "cuda (default), cpu or cpu:NAME (the CPU target)");
  app.add_option("--precision", s.precision, "precision mode (default high)");
  app.add_option("--kiln", s.kiln, "the kiln binary used for the process runs");
  app.add_option("--herd", s.herd, "processes in the cold herd (0: skip; default 8)");
  app.add_flag("--json", s.json_out, "print JSON");
  app.add_flag("--quick", s.quick, "fewer repetitions");
  app.add_option("--serving", s.serving,
                 "serving sweep: this many requests, batch sizes 1..512 (0: skip; default 0)");
  app.add_option("--seed", s.seed, "seed of the serving sweep's batch sizes and of --run's inputs (default 1)");
  app.add_flag("--run", s.run,
               "with --target cpu: each graph's steady-state run time, per kernel, and the share "
               "outside the kernels (seeded inputs at the benchmark sizes)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return kiln::bench::run(s);
}
