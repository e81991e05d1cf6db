// gpu_gemm: kiln's matmul kernels, through the public Runtime and Executable, against cuBLAS,
// per precision mode and square shape; checked against the exact product; skips without a GPU.
//
// Usage: gpu_gemm [--sizes 4096,1000] [--iterations 20] [--json PATH]
//
// For each mode and size it compiles a one-matmul graph with kiln::Runtime for the GPU's arch,
// prepares it, times Executable::run and the matching cuBLAS call with CUDA events on the same
// buffers, and compares both results with the exact product (sampled) and with each other
// (every element). A and B hold different multiples of
// 1/16 in [-0.5, 0.5): every input dtype and TF32 represent them exactly and the fp32 sums are
// exact, so each result must equal the exact product rounded once to the output dtype; a relative
// L2 error above 1e-6 fails the case. A mode the arch refuses (bf16 on sm_75) is reported as
// skipped. Exit: 0 when every case passed or was skipped (or there is no GPU), 1 when one failed,
// 2 on bad usage.
#include "gpu_util.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace kiln_bench;
using nlohmann::json;

constexpr double k_max_rel_error = 1e-6;

float round_to(double exact, const std::string& dtype) {
  if (dtype == "f32") return static_cast<float>(exact);
  if (dtype == "bf16") return __bfloat162float(__float2bfloat16_rn(static_cast<float>(exact)));
  return __half2float(__float2half_rn(static_cast<float>(exact)));
}

// The exact product at the sampled positions (every 61st row and every 13th column, and the last
// row and column, where the edge tiles are), each rounded once to the output dtype.
struct Reference {
  std::vector<size_t> at;
  std::vector<double> value;
};

Reference exact_product(const std::vector<float>& a, const std::vector<float>& b, size_t n,
                       const std::string& dtype) {
  Reference e;
  auto sampled = [n](size_t step) {
    std::vector<size_t> at;
    for (size_t x = 0; x < n; x += step) at.push_back(x);
    if (at.back() != n - 1) at.push_back(n - 1);
    return at;
  };
  for (size_t i : sampled(61)) {
    for (size_t j : sampled(13)) {
      double sum = 0;
      for (size_t k = 0; k < n; ++k) sum += double(a[i * n + k]) * b[k * n + j];
      e.at.push_back(i * n + j);
      e.value.push_back(round_to(sum, dtype));
    }
  }
  return e;
}

// Relative L2 error of `device` (row-major n x n of `dtype`) at the sampled positions.
// (Every element is compared with cuBLAS's result, which must be exact too: see `mismatches`.)
double rel_error(const std::vector<unsigned char>& device, const Reference& expected,
                 const std::string& dtype) {
  double num = 0, den = 0;
  size_t eb = element_bytes(dtype);
  for (size_t s = 0; s < expected.at.size(); ++s) {
    double got = decode(&device[expected.at[s] * eb], dtype), want = expected.value[s];
    num += (got - want) * (got - want);
    den += want * want;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Elements where kiln and cuBLAS differ: both must be the exact product rounded once.
size_t mismatches(const std::vector<unsigned char>& x, const std::vector<unsigned char>& y,
                  size_t eb) {
  size_t count = 0;
  for (size_t i = 0; i + eb <= x.size(); i += eb) count += std::memcmp(&x[i], &y[i], eb) != 0;
  return count;
}

json run_case(kiln::Runtime& runtime, const Mode& mode, size_t n, int iterations,
              cublasHandle_t blas) {
  json row = {{"mode", mode.label}, {"dtype", mode.dtype}, {"m", n}, {"n", n}, {"k", n},
              {"cublas", mode.cublas_label}};
  std::string dim = std::to_string(n);
  std::string text = std::string("graph gemm {\n  input a: ") + mode.dtype + "[" + dim + ", " +
                     dim + "]\n  input b: " + mode.dtype + "[" + dim + ", " + dim +
                     "]\n  c = matmul(a, b)\n  output c\n}\n";
  auto exe = runtime.compile_text(text, "gemm.kg");
  if (!exe) {
    if (exe.error().message.find("allow fallbacks") != std::string::npos) {
      row["status"] = "skipped";
      row["reason"] = exe.error().message;
      return row;
    }
    throw Failure{"compile: " + exe.error().message};
  }
  row["kiln_precision"] = (*exe)->precision();
  size_t eb = element_bytes(mode.dtype), elements = n * n;
  std::vector<float> a = inputs(elements, 1), b = inputs(elements, 2);
  DeviceMemory da(elements * eb), db(elements * eb), dc(elements * eb), dref(elements * eb);
  auto ha = encode(a, mode.dtype), hb = encode(b, mode.dtype);
  check_cuda(cudaMemcpy(da.pointer, ha.data(), ha.size(), cudaMemcpyHostToDevice), "upload a");
  check_cuda(cudaMemcpy(db.pointer, hb.data(), hb.size(), cudaMemcpyHostToDevice), "upload b");
  kiln::DType dtype = kiln_dtype(mode.dtype);
  std::vector<int64_t> shape = {static_cast<int64_t>(n), static_cast<int64_t>(n)};
  std::vector<kiln::TensorRef> in = {{da.pointer, dtype, shape}, {db.pointer, dtype, shape}};
  std::vector<kiln::TensorRef> out = {{dc.pointer, dtype, shape}};
  check_kiln((*exe)->prepare(), "prepare");
  auto kiln_run = [&] { check_kiln((*exe)->run(in, out), "run"); };
  const float one = 1.0f, zero = 0.0f;
  int dn = static_cast<int>(n);
  auto blas_run = [&] {  // row-major C = A B as column-major C^T = B^T A^T
    check_cublas(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, dn, dn, dn, &one, db.pointer,
                              mode.cublas_type, dn, da.pointer, mode.cublas_type, dn, &zero,
                              dref.pointer, mode.cublas_type, dn, mode.cublas_compute,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  };
  Events events;
  double kiln_ms = events.time(iterations, kiln_run);
  double cublas_ms = events.time(iterations, blas_run);
  std::vector<unsigned char> hc(elements * eb), href(elements * eb);
  check_cuda(cudaMemcpy(hc.data(), dc.pointer, hc.size(), cudaMemcpyDeviceToHost), "download");
  check_cuda(cudaMemcpy(href.data(), dref.pointer, href.size(), cudaMemcpyDeviceToHost),
             "download");
  double flops = 2.0 * double(n) * n * n;
  Reference expected = exact_product(a, b, n, mode.dtype);
  double kiln_err = rel_error(hc, expected, mode.dtype);
  double cublas_err = rel_error(href, expected, mode.dtype);
  row["kiln_ms"] = kiln_ms;
  row["cublas_ms"] = cublas_ms;
  row["kiln_tflops"] = flops / (kiln_ms * 1e9);
  row["cublas_tflops"] = flops / (cublas_ms * 1e9);
  row["kiln_vs_cublas"] = cublas_ms / kiln_ms;
  row["kiln_rel_error"] = kiln_err;
  row["cublas_rel_error"] = cublas_err;
  size_t differ = cublas_err <= k_max_rel_error ? mismatches(hc, href, eb) : 0;
  row["elements_differing_from_cublas"] = differ;
  if (!(kiln_err <= k_max_rel_error)) {
    row["status"] = "failed";
    row["reason"] = "kiln's result is off the exact product: relative L2 error " +
                    std::to_string(kiln_err);
  } else if (differ) {
    row["status"] = "failed";
    row["reason"] = std::to_string(differ) + " elements differ from cuBLAS's exact result";
  } else {
    row["status"] = "ok";
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpu_gemm: kiln's matmul kernels against cuBLAS on the GPU"};
  std::string sizes_text = "4096,1000";
  int iterations = 20;
  std::string json_path;
  app.add_option("--sizes", sizes_text, "square sizes M=N=K, comma-separated, 16..16384");
  app.add_option("--iterations", iterations, "timed runs per case")->check(CLI::Range(1, 10000));
  app.add_option("--json", json_path, "also write the results as JSON to PATH");
  CLI11_PARSE(app, argc, argv);
  std::vector<size_t> sizes = parse_sizes(sizes_text, 16, 16384);
  if (sizes.empty()) {
    std::fprintf(stderr, "gpu_gemm: --sizes: expected sizes 16..16384 separated by commas, got '%s'\n",
                 sizes_text.c_str());
    return 2;
  }
  json report = {{"rows", json::array()}};
  DeviceInfo device;
  if (auto exit_code = open_device("gpu_gemm", report, json_path, device)) return *exit_code;
  report["iterations"] = iterations;
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gpu_gemm: cublasCreate failed\n");
    return 1;
  }
  std::printf("gpu_gemm: %s (sm_%d), driver %s, %d iterations\n", device.name.c_str(), device.sm,
              device.driver.c_str(), iterations);
  std::printf("%-16s %6s %10s %11s %8s %-10s %10s %10s %s\n", "mode", "size", "kiln TF/s",
              "cuBLAS TF/s", "kiln/cuBLAS", "cuBLAS", "kiln err", "cuBLAS err", "status");
  int failures = 0;
  for (const Mode& mode : k_modes) {
    kiln::RuntimeOptions options;
    options.precision = mode.precision;
    options.use_cache = false;
    auto runtime = kiln::Runtime::create(options);
    for (size_t n : sizes) {
      json row;
      try {
        if (!runtime) throw Failure{"runtime: " + runtime.error().message};
        row = run_case(**runtime, mode, n, iterations, blas);
      } catch (const Failure& f) {
        row = {{"mode", mode.label}, {"m", n}, {"n", n}, {"k", n}, {"status", "failed"},
               {"reason", f.message}};
      }
      std::string status = row["status"];
      failures += status == "failed";
      if (status == "ok") {
        std::printf("%-16s %6zu %10.1f %11.1f %7.0f%% %-10s %10.1e %10.1e ok\n", mode.label, n,
                    row["kiln_tflops"].get<double>(), row["cublas_tflops"].get<double>(),
                    100.0 * row["kiln_vs_cublas"].get<double>(), mode.cublas_label,
                    row["kiln_rel_error"].get<double>(), row["cublas_rel_error"].get<double>());
      } else {
        std::printf("%-16s %6zu %s: %s\n", mode.label, n, status.c_str(),
                    row["reason"].get<std::string>().c_str());
      }
      report["rows"].push_back(row);
    }
  }
  cublasDestroy(blas);
  if (!write_report("gpu_gemm", report, json_path)) return 1;
  return failures ? 1 : 0;
}
