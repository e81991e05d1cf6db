// Pieces the GPU benchmarks share: failures as exceptions inside a case, CUDA/cuBLAS/kiln status
// checks, host <-> device element encodings, seeded inputs, device memory and event pairs.
#pragma once

#include "kiln/kiln.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace kiln_bench {

struct Mode {
  const char* label;
  const char* dtype;  // the graph's dtype
  kiln::Precision precision;
  cudaDataType_t cublas_type;
  cublasComputeType_t cublas_compute;
  const char* cublas_label;
};

// The modes kiln runs and the cuBLAS call that computes the same product: sgemm for fp32
// (tf32x3 is near-fp32), the TF32 and bf16 fast paths, and 16-bit GEMMs with fp32 accumulation.
inline const Mode k_modes[] = {
    {"f32 highest", "f32", kiln::Precision::highest, CUDA_R_32F, CUBLAS_COMPUTE_32F, "sgemm"},
    {"f32 high (tf32)", "f32", kiln::Precision::high, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32,
     "tf32"},
    {"f32 tf32x3", "f32", kiln::Precision::tf32x3, CUDA_R_32F, CUBLAS_COMPUTE_32F, "sgemm"},
    {"f32 medium", "f32", kiln::Precision::medium, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF,
     "fast_16bf"},
    {"bf16", "bf16", kiln::Precision::automatic, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16"},
    {"f16", "f16", kiln::Precision::automatic, CUDA_R_16F, CUBLAS_COMPUTE_32F, "f16"},
};

// A failed step of one case: its message, kept for the report.
struct Failure {
  std::string message;
};

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(e)};
}

inline void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Failure{std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s))};
  }
}

inline void check_kiln(const kiln::Status& s, const char* what) {
  if (!s) throw Failure{std::string(what) + ": " + s.error().message};
}

inline size_t element_bytes(const std::string& dtype) { return dtype == "f32" ? 4 : 2; }

inline kiln::DType kiln_dtype(const std::string& dtype) {
  if (dtype == "f32") return kiln::DType::f32;
  return dtype == "bf16" ? kiln::DType::bf16 : kiln::DType::f16;
}

inline std::vector<unsigned char> encode(const std::vector<float>& values,
                                         const std::string& dtype) {
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

inline float decode(const unsigned char* at, const std::string& dtype) {
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
inline std::vector<float> inputs(size_t n, uint32_t seed) {
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

  // Milliseconds per call of `body` over `iterations` calls, after three untimed ones.
  template <typename Body>
  double time(int iterations, Body&& body) {
    for (int i = 0; i < 3; ++i) body();
    check_cuda(cudaDeviceSynchronize(), "warm-up");
    check_cuda(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < iterations; ++i) body();
    check_cuda(cudaEventRecord(stop), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "kernels");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return static_cast<double>(ms) / iterations;
  }
};

// Writes `report` to `path` (nothing when `path` is empty); false, said on stderr, when it
// cannot.
inline bool write_report(const char* bench, const nlohmann::json& report,
                         const std::string& path) {
  if (path.empty()) return true;
  std::ofstream file(path);
  file << report.dump(2) << "\n";
  if (!file) std::fprintf(stderr, "%s: cannot write %s\n", bench, path.c_str());
  return static_cast<bool>(file);
}

// The GPU a benchmark runs on: its name, compute capability (90 for sm_90) and driver version.
struct DeviceInfo {
  std::string name;
  int sm = 0;
  std::string driver;
};

// Finds the GPU and records it in `report` ("device", "sm", "driver"). Where there is none it
// says "BENCH: skipped: why", writes the report with "skipped", and returns the exit code (0);
// where CUDA fails it says why and returns 1. nullopt: go on with `device`.
inline std::optional<int> open_device(const char* bench, nlohmann::json& report,
                                      const std::string& json_path, DeviceInfo& device) {
  if (kiln::Status gpu = kiln::gpu_status(); !gpu) {
    std::printf("%s: skipped: %s\n", bench, gpu.error().message.c_str());
    report["skipped"] = gpu.error().message;
    return write_report(bench, report, json_path) ? 0 : 1;
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, 0); e != cudaSuccess) {
    std::fprintf(stderr, "%s: cudaGetDeviceProperties: %s\n", bench, cudaGetErrorString(e));
    return 1;
  }
  int driver = 0;
  if (cudaError_t e = cudaDriverGetVersion(&driver); e != cudaSuccess) {
    std::fprintf(stderr, "%s: cudaDriverGetVersion: %s\n", bench, cudaGetErrorString(e));
    return 1;
  }
  device.name = prop.name;
  device.sm = prop.major * 10 + prop.minor;
  device.driver = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  report["device"] = device.name;
  report["sm"] = device.sm;
  report["driver"] = device.driver;
  return std::nullopt;
}

// "4096,1000" -> {4096, 1000}, each in [lo, hi]; empty when the text is not such a list.
inline std::vector<size_t> parse_sizes(const std::string& text, size_t lo, size_t hi) {
  std::vector<size_t> sizes;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    unsigned long value = std::strtoul(part.c_str(), &end, 10);
    if (part.empty() || *end || value < lo || value > hi) return {};
    sizes.push_back(value);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return sizes;
}

}  // namespace kiln_bench
