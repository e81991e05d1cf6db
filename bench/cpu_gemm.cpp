// kiln's CPU target against OpenBLAS: the matmul kernel (LLVM, blocked GEMM) against
// cblas_sgemm per size and thread count, and the fused MLP graph against sgemm plus separate
// bias/GELU and bias/residual passes; with the CPU target's cold compile and object load times.
//
// Usage: cpu_gemm [--sizes 128x768x3072,1024x1024x1024,2048x2048x2048] [--threads 1,N]
//                 [--iterations 5] [--cpu native] [--json PATH]
// Every kiln result is checked against OpenBLAS's (relative L2 difference at most 1e-5); a
// mismatch fails the run (exit 1).
#include "compiler/cpu/compile.h"
#include "ir/parse.h"
#include "runtime/cpu_program.h"

#include <cblas.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The median of `iterations` timed calls after one warm-up, in ms.
template <typename F>
double median_ms(int iterations, F&& f) {
  f();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    auto t = Clock::now();
    f();
    times.push_back(ms_since(t));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

struct Compiled {
  std::unique_ptr<kiln::runtime::CpuProgram> program;
  double compile_ms = 0;
  double load_ms = 0;
};

Compiled compile(const std::string& text, const kiln::compiler::cpu::CpuMachine& machine) {
  auto graph = kiln::ir::parse_graph(text, "cpu_gemm");
  if (!graph) throw std::runtime_error(graph.error().message);
  kiln::compiler::CompileOptions options;
  options.precision = kiln::ir::Precision::highest;
  Compiled c;
  auto t = Clock::now();
  auto artifact = kiln::compiler::cpu::compile_cpu(*graph, options, machine);
  c.compile_ms = ms_since(t);
  if (!artifact) throw std::runtime_error(artifact.error().message);
  t = Clock::now();
  auto program = kiln::runtime::CpuProgram::load(std::move(*artifact));
  c.load_ms = ms_since(t);
  if (!program) throw std::runtime_error(program.error().message);
  c.program = std::move(*program);
  return c;
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln's CPU target against OpenBLAS sgemm"};
  std::string sizes_text = "128x768x3072,1024x1024x1024,2048x2048x2048";
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string threads_text = "1," + std::to_string(cores);
  int iterations = 5;
  std::string cpu = "native";
  std::string json_path;
  app.add_option("--sizes", sizes_text, "MxNxK,... (default 128x768x3072,1024^3,2048^3)");
  app.add_option("--threads", threads_text, "thread counts (default 1 and the core count)");
  app.add_option("--iterations", iterations, "timed runs per row; the median is reported");
  app.add_option("--cpu", cpu, "LLVM CPU (default native)");
  app.add_option("--json", json_path, "write the results as JSON");
  CLI11_PARSE(app, argc, argv);

  auto machine = kiln::compiler::cpu::cpu_machine(cpu);
  if (!machine) {
    std::fprintf(stderr, "cpu_gemm: %s\n", machine.error().message.c_str());
    return 2;
  }
  std::vector<int> threads = parse_list(threads_text);
  nlohmann::json out;
  out["cpu"] = machine->cpu;
  std::string llvm = *kiln::compiler::cpu::llvm_version();  // the plugin loaded for cpu_machine
  out["llvm"] = llvm;
  out["vector_width"] = machine->facts.vector_width;
  out["iterations"] = iterations;
  out["rows"] = nlohmann::json::array();
  bool failed = false;
  std::printf("cpu_gemm: cpu %s (vector width %d), LLVM %s, median of %d runs\n",
              machine->cpu.c_str(), machine->facts.vector_width,
              llvm.c_str(), iterations);
  std::printf("%6s %6s %6s %7s %12s %15s %7s %9s\n", "m", "n", "k", "threads", "kiln GFLOP/s",
              "OpenBLAS GFLOP/s", "ratio", "rel diff");

  std::stringstream sizes_in(sizes_text);
  std::string size;
  while (std::getline(sizes_in, size, ',')) {
    int64_t m = 0, n = 0, k = 0;
    if (std::sscanf(size.c_str(), "%ldx%ldx%ld", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 1) {
      std::fprintf(stderr, "cpu_gemm: bad size '%s' (expected MxNxK)\n", size.c_str());
      return 2;
    }
    std::string text = "graph g { input a: f32[" + std::to_string(m) + ", " + std::to_string(k) +
                       "]\n input b: f32[" + std::to_string(k) + ", " + std::to_string(n) +
                       "]\n y = matmul(a, b)\n output y }";
    Compiled c = compile(text, *machine);
    auto a = random_floats(static_cast<size_t>(m * k), 1);
    auto b = random_floats(static_cast<size_t>(k * n), 2);
    std::vector<float> y(static_cast<size_t>(m * n)), ref(y.size());
    double flops = 2.0 * double(m) * double(n) * double(k);
    for (int t : threads) {
      double kiln_ms = median_ms(iterations, [&] {
        auto s = c.program->run({a.data(), b.data()}, {y.data()}, {}, t);
        if (!s) throw std::runtime_error(s.error().message);
      });
      openblas_set_num_threads(t);
      double blas_ms = median_ms(iterations, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f,
                    a.data(), int(k), b.data(), int(n), 0.0f, ref.data(), int(n));
      });
      double diff = rel_l2(y, ref);
      if (!(diff <= 1e-5)) failed = true;
      double kg = flops / kiln_ms / 1e6, bg = flops / blas_ms / 1e6;
      std::printf("%6ld %6ld %6ld %7d %12.1f %15.1f %6.0f%% %9.1e%s\n", m, n, k, t, kg, bg,
                  100.0 * kg / bg, diff, diff <= 1e-5 ? "" : "  MISMATCH");
      out["rows"].push_back({{"m", m}, {"n", n}, {"k", k}, {"threads", t}, {"kiln_gflops", kg},
                             {"openblas_gflops", bg}, {"ratio", kg / bg}});
    }
  }

  // The example MLP (x[128, 768] -> 3072 -> 768, bias, GELU, residual) fused by kiln, against
  // OpenBLAS sgemm with the elementwise work in passes of its own.
  const int64_t M = 128, D = 768, H = 3072;
  std::string mlp =
      "graph mlp { input x: f32[128, 768]\n input w1: f32[768, 3072]\n input b1: f32[3072]\n"
      " input w2: f32[3072, 768]\n input b2: f32[768]\n"
      " h = gelu(add(matmul(x, w1), b1))\n y = add(add(matmul(h, w2), b2), x)\n output y }";
  Compiled c = compile(mlp, *machine);
  auto x = random_floats(M * D, 3), w1 = random_floats(D * H, 4), b1 = random_floats(H, 5);
  auto w2 = random_floats(H * D, 6), b2 = random_floats(D, 7);
  std::vector<float> y(M * D), ref(M * D), h(M * H);
  std::printf("\nfused MLP 128x768 -> 3072 -> 768 (bias, GELU, residual); cold compile %.1f ms, "
              "object load %.2f ms\n", c.compile_ms, c.load_ms);
  std::printf("%7s %10s %22s %9s %9s\n", "threads", "kiln ms", "OpenBLAS + passes ms", "speedup",
              "rel diff");
  out["mlp"] = nlohmann::json::array();
  for (int t : threads) {
    double kiln_ms = median_ms(iterations, [&] {
      auto s = c.program->run({x.data(), w1.data(), b1.data(), w2.data(), b2.data()}, {y.data()},
                              {}, t);
      if (!s) throw std::runtime_error(s.error().message);
    });
    openblas_set_num_threads(t);
    double blas_ms = median_ms(iterations, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, H, D, 1.0f, x.data(), D,
                  w1.data(), H, 0.0f, h.data(), H);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < H; ++j) {
          float v = h[i * H + j] + b1[j];
          h[i * H + j] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
        }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, D, H, 1.0f, h.data(), H,
                  w2.data(), D, 0.0f, ref.data(), D);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < D; ++j) ref[i * D + j] += b2[j] + x[i * D + j];
    });
    double diff = rel_l2(y, ref);
    if (!(diff <= 1e-5)) failed = true;
    std::printf("%7d %10.2f %22.2f %8.2fx %9.1e%s\n", t, kiln_ms, blas_ms, blas_ms / kiln_ms, diff,
                diff <= 1e-5 ? "" : "  MISMATCH");
    out["mlp"].push_back({{"threads", t}, {"kiln_ms", kiln_ms}, {"openblas_ms", blas_ms},
                          {"speedup", blas_ms / kiln_ms}});
  }
  out["mlp_compile_ms"] = c.compile_ms;
  out["mlp_object_load_ms"] = c.load_ms;
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return failed ? 1 : 0;
}
