// gpu_gemm: kiln's generated matmul kernels against cuBLAS (default 4096^3); skips without a GPU.
//
// Usage: gpu_gemm [SIZE] [ITERATIONS]. For each case it compiles a one-matmul graph with kiln for
// the GPU's arch, loads the cubin through the CUDA driver (loaded at run time), times it with
// CUDA events, times the matching cuBLAS call on the same buffers, checks the two results agree,
// and prints TFLOP/s and the ratio. Without a GPU (or a driver) it says so and exits 0.
#include "compiler/compiler.h"
#include "ir/parse.h"

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Driver {
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void**, void**) = nullptr;
};

bool load_driver(Driver& d) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  d.module_load_data =
      reinterpret_cast<decltype(d.module_load_data)>(dlsym(lib, "cuModuleLoadData"));
  d.module_get_function =
      reinterpret_cast<decltype(d.module_get_function)>(dlsym(lib, "cuModuleGetFunction"));
  d.func_set_attribute =
      reinterpret_cast<decltype(d.func_set_attribute)>(dlsym(lib, "cuFuncSetAttribute"));
  d.launch = reinterpret_cast<decltype(d.launch)>(dlsym(lib, "cuLaunchKernel"));
  return d.module_load_data && d.module_get_function && d.func_set_attribute && d.launch;
}

struct Case {
  const char* label;
  const char* dtype;  // graph dtype
  kiln::ir::Precision precision;
  cudaDataType_t cublas_type;
  cublasComputeType_t cublas_compute;
  const char* cublas_label;
};

struct Timing {
  double kiln_ms = 0, cublas_ms = 0, rel_diff = 0;
  std::string kernel;
};

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_gemm: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Host floats to device elements of `dtype` and back (bf16/f16 via the toolkit's host converters).
std::vector<uint8_t> encode(const std::vector<float>& values, const std::string& dtype) {
  std::vector<uint8_t> bytes(values.size() * (dtype == "f32" ? 4 : 2));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == "f32") {
      std::memcpy(&bytes[i * 4], &values[i], 4);
    } else if (dtype == "bf16") {
      __nv_bfloat16 h = __float2bfloat16(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      __half h = __float2half(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

std::vector<float> fetch(const void* device, size_t n, const std::string& dtype) {
  std::vector<uint8_t> bytes(n * (dtype == "f32" ? 4 : 2));
  cudaMemcpy(bytes.data(), device, bytes.size(), cudaMemcpyDeviceToHost);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == "f32") {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else if (dtype == "bf16") {
      __nv_bfloat16 h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = __bfloat162float(h);
    } else {
      __half h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = __half2float(h);
    }
  }
  return out;
}

bool run_case(const Case& c, int sm, int64_t size, int iters, const Driver& drv,
              cublasHandle_t handle, Timing& t) {
  std::string n = std::to_string(size);
  std::string text = std::string("graph gemm {\n  input a: ") + c.dtype + "[" + n + ", " + n +
                     "]\n  input b: " + c.dtype + "[" + n + ", " + n +
                     "]\n  c = matmul(a, b)\n  output c\n}\n";
  auto graph = kiln::ir::parse_graph(text, "gemm.kg");
  if (!graph) return std::fprintf(stderr, "gpu_gemm: %s\n", graph.error().message.c_str()), false;
  kiln::compiler::CompileOptions options;
  options.sm = sm;
  options.precision = c.precision;
  auto artifact = kiln::compiler::compile(*graph, options);
  if (!artifact) {
    std::fprintf(stderr, "gpu_gemm: %s\n", artifact.error().message.c_str());
    return false;
  }
  const kiln::compiler::KernelArtifact& k = artifact->kernels.at(0);
  t.kernel = k.name;
  CUmodule module;
  CUfunction fn;
  if (drv.module_load_data(&module, k.cubin.data()) != CUDA_SUCCESS ||
      drv.module_get_function(&fn, module, k.entry.c_str()) != CUDA_SUCCESS) {
    std::fprintf(stderr, "gpu_gemm: cannot load %s\n", k.entry.c_str());
    return false;
  }
  drv.func_set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                         static_cast<int>(k.launch.dynamic_smem_bytes));
  int eb = std::string(c.dtype) == "f32" ? 4 : 2;
  size_t elems = static_cast<size_t>(size * size);
  void *a, *b, *out, *ref;
  if (!check(cudaMalloc(&a, elems * eb), "cudaMalloc") ||
      !check(cudaMalloc(&b, elems * eb), "cudaMalloc") ||
      !check(cudaMalloc(&out, elems * eb), "cudaMalloc") ||
      !check(cudaMalloc(&ref, elems * eb), "cudaMalloc")) {
    return false;
  }
  // Inputs: multiples of 1/16 in [-0.5, 0.5), exact in every dtype.
  std::vector<float> values(elems);
  for (size_t i = 0; i < elems; ++i) {
    values[i] = static_cast<float>(static_cast<int>((i * 2654435761u) >> 28 & 15) - 8) / 16.0f;
  }
  std::vector<uint8_t> host = encode(values, c.dtype);
  cudaMemcpy(a, host.data(), host.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(b, host.data(), host.size(), cudaMemcpyHostToDevice);

  void* args[] = {&out, &a, &b};
  auto launch = [&] {
    return drv.launch(fn, k.launch.grid[0], k.launch.grid[1], k.launch.grid[2], k.launch.block[0],
                      k.launch.block[1], k.launch.block[2], k.launch.dynamic_smem_bytes, nullptr,
                      args, nullptr);
  };
  const float one = 1.0f, zero = 0.0f;
  auto blas = [&] {  // row-major C = A B as column-major C^T = B^T A^T
    return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(size),
                        static_cast<int>(size), static_cast<int>(size), &one, b, c.cublas_type,
                        static_cast<int>(size), a, c.cublas_type, static_cast<int>(size), &zero,
                        ref, c.cublas_type, static_cast<int>(size), c.cublas_compute,
                        CUBLAS_GEMM_DEFAULT);
  };
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  auto time = [&](auto&& body) {
    for (int i = 0; i < 3; ++i) body();
    cudaEventRecord(start);
    for (int i = 0; i < iters; ++i) body();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return static_cast<double>(ms) / iters;
  };
  t.kiln_ms = time(launch);
  t.cublas_ms = time(blas);
  if (!check(cudaDeviceSynchronize(), "kernel run")) return false;
  std::vector<float> x = fetch(out, elems, c.dtype), y = fetch(ref, elems, c.dtype);
  double num = 0, den = 0;
  for (size_t i = 0; i < elems; i += 97) {
    num += (x[i] - y[i]) * double(x[i] - y[i]);
    den += double(y[i]) * y[i];
  }
  t.rel_diff = den > 0 ? std::sqrt(num / den) : 0;
  cudaFree(a);
  cudaFree(b);
  cudaFree(out);
  cudaFree(ref);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t size = argc > 1 ? std::atoll(argv[1]) : 4096;
  int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  if (size < 16 || size > 16384 || iters < 1) {
    std::fprintf(stderr, "usage: gpu_gemm [SIZE 16..16384] [ITERATIONS]\n");
    return 2;
  }
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("gpu_gemm: skipped: no CUDA GPU here (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
    return 0;
  }
  Driver drv;
  if (!load_driver(drv)) {
    std::printf("gpu_gemm: skipped: the CUDA driver (libcuda.so.1) cannot be loaded\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int sm = prop.major * 10 + prop.minor;
  cudaFree(nullptr);  // creates the primary context the driver calls use
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gpu_gemm: cublasCreate failed\n");
    return 1;
  }
  std::printf("gpu_gemm: %s (sm_%d), %lld^3, %d iterations\n", prop.name, sm,
              static_cast<long long>(size), iters);
  const Case cases[] = {
      {"f32 high (tf32)", "f32", kiln::ir::Precision::high, CUDA_R_32F,
       CUBLAS_COMPUTE_32F_FAST_TF32, "tf32"},
      {"bf16", "bf16", kiln::ir::Precision::automatic, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16"},
      {"f16", "f16", kiln::ir::Precision::automatic, CUDA_R_16F, CUBLAS_COMPUTE_32F, "f16"},
      {"f32 medium", "f32", kiln::ir::Precision::medium, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF,
       "fast_16bf"},
      {"f32 tf32x3", "f32", kiln::ir::Precision::tf32x3, CUDA_R_32F, CUBLAS_COMPUTE_32F, "sgemm"},
      {"f32 highest", "f32", kiln::ir::Precision::highest, CUDA_R_32F, CUBLAS_COMPUTE_32F, "sgemm"},
  };
  double flops = 2.0 * static_cast<double>(size) * size * size;
  std::printf("%-16s %-28s %10s %10s %8s %-10s %s\n", "case", "kiln kernel", "kiln TF/s",
              "cuBLAS TF/s", "ratio", "cuBLAS", "rel diff");
  int failures = 0;
  for (const Case& c : cases) {
    Timing t;
    if (!run_case(c, sm, size, iters, drv, handle, t)) {
      ++failures;
      continue;
    }
    double kt = flops / (t.kiln_ms * 1e9), ct = flops / (t.cublas_ms * 1e9);
    std::printf("%-16s %-28s %10.1f %10.1f %7.0f%% %-10s %.2e\n", c.label, t.kernel.c_str(), kt, ct,
                100.0 * kt / ct, c.cublas_label, t.rel_diff);
  }
  cublasDestroy(handle);
  return failures ? 1 : 0;
}
