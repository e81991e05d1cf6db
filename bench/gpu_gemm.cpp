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
#include "kiln/kiln.h"

#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

constexpr double k_max_rel_error = 1e-6;

struct Mode {
  const char* label;
  const char* dtype;  // the graph's dtype
  kiln::Precision precision;
  cudaDataType_t cublas_type;
  cublasComputeType_t cublas_compute;
  const char* cublas_label;
};

const Mode k_modes[] = {
    {"f32 highest", "f32", kiln::Precision::highest, CUDA_R_32F, CUBLAS_COMPUTE_32F, "sgemm"},
    {"f32 high (tf32)", "f32", kiln::Precision::high, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32,
     "tf32"},
    {"f32 tf32x3", "f32", kiln::Precision::tf32x3, CUDA_R_32F, CUBLAS_COMPUTE_32F, "sgemm"},
    {"f32 medium", "f32", kiln::Precision::medium, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF,
     "fast_16bf"},
    {"bf16", "bf16", kiln::Precision::automatic, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16"},
    {"f16", "f16", kiln::Precision::automatic, CUDA_R_16F, CUBLAS_COMPUTE_32F, "f16"},
};

// A failed step: its message, kept for the report.
struct Failure {
  std::string message;
};

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(e)};
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Failure{std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s))};
  }
}

void check_kiln(const kiln::Status& s, const char* what) {
  if (!s) throw Failure{std::string(what) + ": " + s.error().message};
}

size_t element_bytes(const std::string& dtype) { return dtype == "f32" ? 4 : 2; }

std::vector<unsigned char> encode(const std::vector<float>& values, const std::string& dtype) {
  std::vector<unsigned char> bytes(values.size() * element_bytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == "f32") {
      std::memcpy(&bytes[i * 4], &values[i], 4);
    } else if (dtype == "bf16") {
      __nv_bfloat16 h = __float2bfloat16_rn(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      __half h = __float2half_rn(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

float decode(const unsigned char* at, const std::string& dtype) {
  if (dtype == "f32") {
    float f;
    std::memcpy(&f, at, 4);
    return f;
  }
  if (dtype == "bf16") {
    __nv_bfloat16 h;
    std::memcpy(&h, at, 2);
    return __bfloat162float(h);
  }
  __half h;
  std::memcpy(&h, at, 2);
  return __half2float(h);
}

// Multiples of 1/16 in [-0.5, 0.5), different for each seed.
std::vector<float> inputs(size_t n, uint32_t seed) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed * 0x9e3779b9u;
    h ^= h >> 15;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    values[i] = static_cast<float>(static_cast<int>(h >> 28) - 8) / 16.0f;
  }
  return values;
}

struct DeviceMemory {
  void* pointer = nullptr;
  explicit DeviceMemory(size_t bytes) { check_cuda(cudaMalloc(&pointer, bytes), "cudaMalloc"); }
  ~DeviceMemory() { cudaFree(pointer); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

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

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~Events() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

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
  kiln::DType dtype = mode.dtype == std::string("f32")    ? kiln::DType::f32
                      : mode.dtype == std::string("bf16") ? kiln::DType::bf16
                                                          : kiln::DType::f16;
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
  cudaEvent_t start = events.start, stop = events.stop;
  auto time = [&](auto&& body) {
    for (int i = 0; i < 3; ++i) body();
    check_cuda(cudaDeviceSynchronize(), "warm-up");
    check_cuda(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < iterations; ++i) body();
    check_cuda(cudaEventRecord(stop), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "kernels");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return static_cast<double>(ms) / iterations;
  };
  double kiln_ms = time(kiln_run), cublas_ms = time(blas_run);
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

std::vector<size_t> parse_sizes(const std::string& text) {
  std::vector<size_t> sizes;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    unsigned long value = std::strtoul(part.c_str(), &end, 10);
    if (part.empty() || *end || value < 16 || value > 16384) return {};
    sizes.push_back(value);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return sizes;
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
  std::vector<size_t> sizes = parse_sizes(sizes_text);
  if (sizes.empty()) {
    std::fprintf(stderr, "gpu_gemm: --sizes: expected sizes 16..16384 separated by commas, got '%s'\n",
                 sizes_text.c_str());
    return 2;
  }
  json report = {{"rows", json::array()}};
  auto write_json = [&] {
    if (json_path.empty()) return true;
    std::ofstream file(json_path);
    file << report.dump(2) << "\n";
    if (!file) std::fprintf(stderr, "gpu_gemm: cannot write %s\n", json_path.c_str());
    return static_cast<bool>(file);
  };
  if (kiln::Status gpu = kiln::gpu_status(); !gpu) {
    std::printf("gpu_gemm: skipped: %s\n", gpu.error().message.c_str());
    report["skipped"] = gpu.error().message;
    return write_json() ? 0 : 1;
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, 0); e != cudaSuccess) {
    std::fprintf(stderr, "gpu_gemm: cudaGetDeviceProperties: %s\n", cudaGetErrorString(e));
    return 1;
  }
  int driver = 0;
  if (cudaError_t e = cudaDriverGetVersion(&driver); e != cudaSuccess) {
    std::fprintf(stderr, "gpu_gemm: cudaDriverGetVersion: %s\n", cudaGetErrorString(e));
    return 1;
  }
  report["device"] = prop.name;
  report["sm"] = prop.major * 10 + prop.minor;
  report["driver"] = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  report["iterations"] = iterations;
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gpu_gemm: cublasCreate failed\n");
    return 1;
  }
  std::printf("gpu_gemm: %s (sm_%d%d), driver %s, %d iterations\n", prop.name, prop.major,
              prop.minor, report["driver"].get<std::string>().c_str(), iterations);
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
  if (!write_json()) return 1;
  return failures ? 1 : 0;
}
