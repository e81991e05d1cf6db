// gpu_attention: kiln's fused attention kernel, through the public Runtime and Executable,
// against the unfused form cuBLAS-based attention runs (PyTorch's math SDPA: a batched GEMM for
// the scores, a softmax, a batched GEMM for P V), per precision mode, head dim and sequence
// length; both checked against fp64 on sampled query rows; skips without a GPU.
//
// Usage: gpu_attention [--seqs 1024,4096] [--head-dims 64,128] [--heads 16] [--iterations 10]
//                      [--cache] [--json PATH]
//
// --cache compiles through the kernel cache ($KILN_CACHE_DIR), so that tuning records (`kiln
// tune`) apply; without it every kernel takes the analytic model's tile.
//
// The unfused form: cublasGemmStridedBatchedEx for S = Q K^T (at the graph's dtype, the mode's
// cuBLAS compute type, as gpu_gemm pairs them), kiln's own softmax kernel for
// P = softmax(S * scale), and cublasGemmStridedBatchedEx for O = P V; it writes and reads the
// H x S x S scores twice. Inputs are multiples of 1/16 in [-1, 1). A result whose relative L2
// error against fp64 (every 61st query row of the first and last head) exceeds the mode's
// tolerance (as `kiln run` uses) fails the case. Exit: 0 when every case passed or was skipped
// (or there is no GPU), 1 when one failed, 2 on bad usage.
#include "gpu_util.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace kiln_bench;
using nlohmann::json;

struct Case {
  size_t heads, seq, head_dim;
};

// The relative L2 tolerance of a mode's result, as the reference check's.
double tolerance(const Mode& mode) {
  if (std::string(mode.dtype) != "f32") return 1.5e-2;
  switch (mode.precision) {
    case kiln::Precision::highest:
      return 1e-5;
    case kiln::Precision::tf32x3:
      return 2e-5;
    case kiln::Precision::high:
      return 2e-3;
    default:
      return 1.5e-2;
  }
}

std::string dtype_shape(const Mode& mode, size_t a, size_t b, size_t c) {
  return std::string(mode.dtype) + "[" + std::to_string(a) + ", " + std::to_string(b) + ", " +
         std::to_string(c) + "]";
}

// `x` as the device holds it: each element rounded to `dtype`.
std::vector<double> as_stored(const std::vector<float>& x, const std::string& dtype) {
  std::vector<unsigned char> bytes = encode(x, dtype);
  std::vector<double> out(x.size());
  size_t eb = element_bytes(dtype);
  for (size_t i = 0; i < x.size(); ++i) out[i] = decode(&bytes[i * eb], dtype);
  return out;
}

// The relative L2 error of `device` (H x S x D of `dtype`) against fp64 attention of the stored
// inputs at every 61st query row and the last one, of the first and the last head.
double rel_error(const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, const std::vector<unsigned char>& device,
                 const Case& c, const std::string& dtype) {
  size_t s = c.seq, d = c.head_dim, eb = element_bytes(dtype);
  double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<size_t> rows;
  for (size_t i = 0; i < s; i += 61) rows.push_back(i);
  if (rows.back() != s - 1) rows.push_back(s - 1);
  double num = 0, den = 0;
  std::vector<double> p(s), o(d);
  for (size_t h : {size_t{0}, c.heads - 1}) {
    size_t base = h * s * d;
    for (size_t i : rows) {
      double mx = -INFINITY;
      for (size_t j = 0; j < s; ++j) {
        double dot = 0;
        for (size_t e = 0; e < d; ++e) dot += q[base + i * d + e] * k[base + j * d + e];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (size_t j = 0; j < s; ++j) sum += p[j] = std::exp(p[j] - mx);
      std::fill(o.begin(), o.end(), 0.0);
      for (size_t j = 0; j < s; ++j)
        for (size_t e = 0; e < d; ++e) o[e] += p[j] / sum * v[base + j * d + e];
      for (size_t e = 0; e < d; ++e) {
        double got = decode(&device[(base + i * d + e) * eb], dtype);
        num += (got - o[e]) * (got - o[e]);
        den += o[e] * o[e];
      }
    }
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

json run_case(const Mode& mode, const Case& c, int iterations, bool use_cache,
              cublasHandle_t blas) {
  json row = {{"mode", mode.label},  {"dtype", mode.dtype}, {"heads", c.heads},
              {"seq", c.seq},        {"head_dim", c.head_dim}, {"cublas", mode.cublas_label}};
  kiln::RuntimeOptions options;
  options.precision = mode.precision;
  options.use_cache = use_cache;
  options.fallbacks = kiln::FallbackPolicy::refuse;  // fused, or the case fails
  auto runtime = kiln::Runtime::create(options);
  if (!runtime) throw Failure{"runtime: " + runtime.error().message};
  size_t h = c.heads, s = c.seq, d = c.head_dim;
  std::string qkv = dtype_shape(mode, h, s, d);
  auto fused = (*runtime)->compile_text("graph att {\n  input q: " + qkv + "\n  input k: " + qkv +
                                            "\n  input v: " + qkv +
                                            "\n  o = attention(q, k, v)\n  output o\n}\n",
                                        "att.kg");
  if (!fused) {
    if (fused.error().message.find("allow fallbacks") != std::string::npos) {
      row["status"] = "skipped";
      row["reason"] = fused.error().message;
      return row;
    }
    throw Failure{"compile: " + fused.error().message};
  }
  char scale[32];
  std::snprintf(scale, sizeof scale, "%.17g", 1.0 / std::sqrt(static_cast<double>(d)));
  auto softmax = (*runtime)->compile_text("graph sm {\n  input s: " + dtype_shape(mode, h, s, s) +
                                              "\n  p = softmax(mul(s, " + scale +
                                              "), axis=-1)\n  output p\n}\n",
                                          "softmax.kg");
  if (!softmax) throw Failure{"compile softmax: " + softmax.error().message};
  row["kiln_kernels"] = (*fused)->kernel_count();

  size_t eb = element_bytes(mode.dtype), elements = h * s * d, scores = h * s * s;
  std::vector<float> q = inputs(elements, 1), k = inputs(elements, 2), v = inputs(elements, 3);
  for (std::vector<float>* x : {&q, &k}) {
    for (float& e : *x) e *= 2;  // [-1, 1): scores spread wider than uniform
  }
  DeviceMemory dq(elements * eb), dk(elements * eb), dv(elements * eb);
  DeviceMemory dout(elements * eb), dref(elements * eb);
  DeviceMemory ds(scores * eb), dp(scores * eb);
  auto upload = [&](const DeviceMemory& to, const std::vector<float>& x) {
    auto bytes = encode(x, mode.dtype);
    check_cuda(cudaMemcpy(to.pointer, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
               "upload");
  };
  upload(dq, q), upload(dk, k), upload(dv, v);
  kiln::DType dtype = kiln_dtype(mode.dtype);
  auto shape = [](size_t a, size_t b, size_t x) {
    return std::vector<int64_t>{static_cast<int64_t>(a), static_cast<int64_t>(b),
                                static_cast<int64_t>(x)};
  };
  std::vector<kiln::TensorRef> in = {{dq.pointer, dtype, shape(h, s, d)},
                                     {dk.pointer, dtype, shape(h, s, d)},
                                     {dv.pointer, dtype, shape(h, s, d)}};
  std::vector<kiln::TensorRef> out = {{dout.pointer, dtype, shape(h, s, d)}};
  std::vector<kiln::TensorRef> sm_in = {{ds.pointer, dtype, shape(h, s, s)}};
  std::vector<kiln::TensorRef> sm_out = {{dp.pointer, dtype, shape(h, s, s)}};
  check_kiln((*fused)->prepare(), "prepare");
  check_kiln((*softmax)->prepare(), "prepare softmax");

  const float one = 1.0f, zero = 0.0f;
  int n = static_cast<int>(s), hd = static_cast<int>(d), batch = static_cast<int>(h);
  long long qkv_stride = static_cast<long long>(s * d), s_stride = static_cast<long long>(s * s);
  auto unfused_run = [&] {
    // Row-major S = Q K^T is column-major S^T = K Q^T: K's buffer transposed, Q's as is.
    check_cublas(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, n, hd, &one,
                                            dk.pointer, mode.cublas_type, hd, qkv_stride,
                                            dq.pointer, mode.cublas_type, hd, qkv_stride, &zero,
                                            ds.pointer, mode.cublas_type, n, s_stride, batch,
                                            mode.cublas_compute, CUBLAS_GEMM_DEFAULT),
                 "scores");
    check_kiln((*softmax)->run(sm_in, sm_out), "softmax");
    // Row-major O = P V is column-major O^T = V^T P^T.
    check_cublas(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, n, n, &one,
                                            dv.pointer, mode.cublas_type, hd, qkv_stride,
                                            dp.pointer, mode.cublas_type, n, s_stride, &zero,
                                            dref.pointer, mode.cublas_type, hd, qkv_stride, batch,
                                            mode.cublas_compute, CUBLAS_GEMM_DEFAULT),
                 "p v");
  };
  auto fused_run = [&] { check_kiln((*fused)->run(in, out), "run"); };
  Events events;
  double kiln_ms = events.time(iterations, fused_run);
  double unfused_ms = events.time(iterations, unfused_run);

  std::vector<unsigned char> hout(elements * eb), href(elements * eb);
  check_cuda(cudaMemcpy(hout.data(), dout.pointer, hout.size(), cudaMemcpyDeviceToHost),
             "download");
  check_cuda(cudaMemcpy(href.data(), dref.pointer, href.size(), cudaMemcpyDeviceToHost),
             "download");
  double flops = 4.0 * double(h) * double(s) * double(s) * double(d);
  std::vector<double> sq = as_stored(q, mode.dtype), sk = as_stored(k, mode.dtype),
                      sv = as_stored(v, mode.dtype);
  double kiln_err = rel_error(sq, sk, sv, hout, c, mode.dtype);
  double unfused_err = rel_error(sq, sk, sv, href, c, mode.dtype);
  double tol = tolerance(mode);
  row["kiln_ms"] = kiln_ms;
  row["unfused_ms"] = unfused_ms;
  row["kiln_tflops"] = flops / (kiln_ms * 1e9);
  row["unfused_tflops"] = flops / (unfused_ms * 1e9);
  row["speedup"] = unfused_ms / kiln_ms;
  row["unfused_scores_bytes"] = 2 * scores * eb;
  row["kiln_rel_error"] = kiln_err;
  row["unfused_rel_error"] = unfused_err;
  row["tolerance"] = tol;
  if (!(kiln_err <= tol)) {
    row["status"] = "failed";
    row["reason"] = "kiln's result is off fp64: relative L2 error " + std::to_string(kiln_err) +
                    " > " + std::to_string(tol);
  } else {
    row["status"] = "ok";
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpu_attention: kiln's fused attention against cuBLAS + softmax + cuBLAS"};
  std::string seqs_text = "1024,4096", dims_text = "64,128";
  int heads = 16, iterations = 10;
  bool use_cache = false;
  std::string json_path;
  app.add_option("--seqs", seqs_text, "sequence lengths S_q = S_k, comma-separated, 16..16384");
  app.add_option("--head-dims", dims_text, "head dims, comma-separated, 16..256");
  app.add_option("--heads", heads, "batch x heads")->check(CLI::Range(1, 1024));
  app.add_option("--iterations", iterations, "timed runs per case")->check(CLI::Range(1, 10000));
  app.add_flag("--cache", use_cache, "compile through the kernel cache, so tuning records apply");
  app.add_option("--json", json_path, "also write the results as JSON to PATH");
  CLI11_PARSE(app, argc, argv);
  std::vector<size_t> seqs = parse_sizes(seqs_text, 16, 16384);
  std::vector<size_t> dims = parse_sizes(dims_text, 16, 256);
  if (seqs.empty() || dims.empty()) {
    std::fprintf(stderr,
                 "gpu_attention: expected --seqs 16..16384 and --head-dims 16..256, separated by "
                 "commas, got '%s' and '%s'\n",
                 seqs_text.c_str(), dims_text.c_str());
    return 2;
  }
  json report = {{"rows", json::array()}};
  DeviceInfo device;
  if (auto exit_code = open_device("gpu_attention", report, json_path, device)) return *exit_code;
  report["iterations"] = iterations;
  report["cache"] = use_cache;
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gpu_attention: cublasCreate failed\n");
    return 1;
  }
  std::printf("gpu_attention: %s (sm_%d), driver %s, %d heads, %d iterations%s\n",
              device.name.c_str(), device.sm, device.driver.c_str(), heads, iterations,
              use_cache ? ", through the cache (tuning records apply)" : "");
  std::printf("%-16s %6s %4s %10s %13s %8s %10s %10s %s\n", "mode", "S", "D", "kiln TF/s",
              "unfused TF/s", "speedup", "kiln err", "unf. err", "status");
  int failures = 0;
  for (const Mode& mode : k_modes) {
    for (size_t d : dims) {
      for (size_t s : seqs) {
        Case c{static_cast<size_t>(heads), s, d};
        json row;
        try {
          row = run_case(mode, c, iterations, use_cache, blas);
        } catch (const Failure& f) {
          row = {{"mode", mode.label}, {"seq", s}, {"head_dim", d}, {"status", "failed"},
                 {"reason", f.message}};
        }
        std::string status = row["status"];
        failures += status == "failed";
        if (status == "ok") {
          std::printf("%-16s %6zu %4zu %10.1f %13.1f %7.2fx %10.1e %10.1e ok\n", mode.label, s, d,
                      row["kiln_tflops"].get<double>(), row["unfused_tflops"].get<double>(),
                      row["speedup"].get<double>(), row["kiln_rel_error"].get<double>(),
                      row["unfused_rel_error"].get<double>());
        } else {
          std::printf("%-16s %6zu %4zu %s: %s\n", mode.label, s, d, status.c_str(),
                      row["reason"].get<std::string>().c_str());
        }
        report["rows"].push_back(row);
      }
    }
  }
  cublasDestroy(blas);
  if (!write_report("gpu_attention", report, json_path)) return 1;
  return failures ? 1 : 0;
}
