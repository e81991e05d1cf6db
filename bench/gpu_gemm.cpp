// gpu_gemm: kiln's matmul kernels, through the public Runtime and Executable, against cuBLAS,
// per precision mode and square shape; checked against the exact product; skips without a GPU.
//
// Usage: gpu_gemm [--sizes 4096,1000] [--shapes MxNxK,...] [--layers] [--modes bf16,high,...]
//                 [--layouts nn,tn,nt,tt] [--batch B1[xB2]] [--cache] [--iterations 20]
//                 [--json PATH]
//
// --shapes adds products of M x K by K x N; --layers adds the projections of real layers (M = 1,
// 16, 128 or 2048 tokens by K = 4096, N = 4096, 11008 or 14336: LLaMA-2 7B and Mistral 7B widths).
// --modes keeps only the named modes (highest, high, tf32x3, medium, bf16, f16). --cache compiles
// through the kernel cache ($KILN_CACHE_DIR), so that tuning records (`kiln tune`) apply; without
// it nothing is cached and every kernel takes the analytic model's tile. --layouts says how the
// operands lie (default nn): the first letter A's, the second B's; n as written (A [M, K], B
// [K, N]), t transposed (A [K, M] read through transpose_a, B [N, K] through transpose_b), and
// cuBLAS is given the same layouts. --batch runs every product as a batch of them over one or two
// batch dims (A, B and C each [B1, B2, ...], contiguous: a 4-D matmul such as attention's
// unfused Q K^T), against cuBLAS's strided batched GEMM.
//
// For each mode and shape it compiles a one-matmul graph with kiln::Runtime for the GPU's arch,
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

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
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

// One product: C[m, n] = A[m, k] B[k, n], A stored [k, m] where ta and B [n, k] where tb; over
// the batch dims `batch` (none, one or two), each operand and the result [batch..., rows, cols].
struct Shape {
  size_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  std::vector<size_t> batch;
  size_t count() const {
    size_t c = 1;
    for (size_t b : batch) c *= b;
    return c;
  }
};

// "nn", "tn", "nt" or "tt": how `s`'s operands lie.
std::string layout_of(const Shape& s) {
  return std::string(s.ta ? "t" : "n") + (s.tb ? "t" : "n");
}

// The exact product at the sampled positions (every 61st row and every 13th column, and the last
// row and column, where the edge tiles are; of the first and the last product of a batch), each
// rounded once to the output dtype.
struct Reference {
  std::vector<size_t> at;
  std::vector<double> value;
};

Reference exact_product(const std::vector<float>& a, const std::vector<float>& b, Shape s,
                       const std::string& dtype) {
  Reference e;
  auto sampled = [](size_t extent, size_t step) {
    std::vector<size_t> at;
    for (size_t x = 0; x < extent; x += step) at.push_back(x);
    if (at.back() != extent - 1) at.push_back(extent - 1);
    return at;
  };
  std::vector<size_t> products = {0};
  if (s.count() > 1) products.push_back(s.count() - 1);
  for (size_t p : products) {
    const float* pa = &a[p * s.m * s.k];
    const float* pb = &b[p * s.k * s.n];
    for (size_t i : sampled(s.m, 61)) {
      for (size_t j : sampled(s.n, 13)) {
        double sum = 0;
        for (size_t k = 0; k < s.k; ++k)
          sum += double(pa[s.ta ? k * s.m + i : i * s.k + k]) * pb[s.tb ? j * s.k + k : k * s.n + j];
        e.at.push_back((p * s.m + i) * s.n + j);
        e.value.push_back(round_to(sum, dtype));
      }
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

json run_case(kiln::Runtime& runtime, const Mode& mode, Shape shape, int iterations,
              cublasHandle_t blas) {
  size_t m = shape.m, n = shape.n, k = shape.k;
  size_t count = shape.count();
  json row = {{"mode", mode.label}, {"dtype", mode.dtype}, {"m", m}, {"n", n}, {"k", k},
              {"layout", layout_of(shape)}, {"batch", shape.batch}, {"cublas", mode.cublas_label}};
  auto text_of = [](size_t x) { return std::to_string(x); };
  // A [M, K] or [K, M], B [K, N] or [N, K], as stored, after the batch dims
  size_t a0 = shape.ta ? k : m, a1 = shape.ta ? m : k, b0 = shape.tb ? n : k, b1 = shape.tb ? k : n;
  std::string batch_text;
  for (size_t b : shape.batch) batch_text += text_of(b) + ", ";
  std::string text = std::string("graph gemm {\n  input a: ") + mode.dtype + "[" + batch_text +
                     text_of(a0) + ", " + text_of(a1) + "]\n  input b: " + mode.dtype + "[" +
                     batch_text + text_of(b0) + ", " + text_of(b1) + "]\n  c = matmul(a, b" +
                     (shape.ta ? ", transpose_a=true" : "") + (shape.tb ? ", transpose_b=true" : "") +
                     ")\n  output c\n}\n";
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
  row["kiln_cache"] = (*exe)->cache_hit() ? "hit" : "miss";
  size_t eb = element_bytes(mode.dtype);
  std::vector<float> a = inputs(count * m * k, 1), b = inputs(count * k * n, 2);
  DeviceMemory da(count * m * k * eb), db(count * k * n * eb), dc(count * m * n * eb),
      dref(count * m * n * eb);
  auto ha = encode(a, mode.dtype), hb = encode(b, mode.dtype);
  check_cuda(cudaMemcpy(da.pointer, ha.data(), ha.size(), cudaMemcpyHostToDevice), "upload a");
  check_cuda(cudaMemcpy(db.pointer, hb.data(), hb.size(), cudaMemcpyHostToDevice), "upload b");
  kiln::DType dtype = kiln_dtype(mode.dtype);
  auto dims = [&](size_t r, size_t c) {
    std::vector<int64_t> d;
    for (size_t b : shape.batch) d.push_back(static_cast<int64_t>(b));
    d.push_back(static_cast<int64_t>(r));
    d.push_back(static_cast<int64_t>(c));
    return d;
  };
  std::vector<kiln::TensorRef> in = {{da.pointer, dtype, dims(a0, a1)},
                                     {db.pointer, dtype, dims(b0, b1)}};
  std::vector<kiln::TensorRef> out = {{dc.pointer, dtype, dims(m, n)}};
  check_kiln((*exe)->prepare(), "prepare");
  auto kiln_run = [&] { check_kiln((*exe)->run(in, out), "run"); };
  const float one = 1.0f, zero = 0.0f;
  int im = static_cast<int>(m), in_ = static_cast<int>(n), ik = static_cast<int>(k);
  // row-major C = A B as column-major C^T = B^T A^T: a row-major [r, c] operand is column-major
  // [c, r] with leading dimension c, so A [M, K] and B [K, N] are A^T and B^T as they lie, and A
  // [K, M] and B [N, K] are transposed by cuBLAS; a batch is its strided batched GEMM (each
  // product's operands and result one after another)
  cublasOperation_t op_a = shape.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = shape.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = static_cast<int>(a1), ldb = static_cast<int>(b1);
  auto blas_run = [&] {
    if (shape.batch.empty()) {
      check_cublas(cublasGemmEx(blas, op_b, op_a, in_, im, ik, &one, db.pointer,
                                mode.cublas_type, ldb, da.pointer, mode.cublas_type, lda, &zero,
                                dref.pointer, mode.cublas_type, in_, mode.cublas_compute,
                                CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
      return;
    }
    check_cublas(cublasGemmStridedBatchedEx(
                     blas, op_b, op_a, in_, im, ik, &one, db.pointer, mode.cublas_type, ldb,
                     static_cast<long long>(k * n), da.pointer, mode.cublas_type, lda,
                     static_cast<long long>(m * k), &zero, dref.pointer, mode.cublas_type, in_,
                     static_cast<long long>(m * n), static_cast<int>(count), mode.cublas_compute,
                     CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  };
  size_t elements = count * m * n;
  Events events;
  double kiln_ms = events.time(iterations, kiln_run);
  double cublas_ms = events.time(iterations, blas_run);
  std::vector<unsigned char> hc(elements * eb), href(elements * eb);
  check_cuda(cudaMemcpy(hc.data(), dc.pointer, hc.size(), cudaMemcpyDeviceToHost), "download");
  check_cuda(cudaMemcpy(href.data(), dref.pointer, href.size(), cudaMemcpyDeviceToHost),
             "download");
  double flops = 2.0 * double(count) * m * n * k;
  Reference expected = exact_product(a, b, shape, mode.dtype);
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


// "4096x4096x4096,16x11008x4096" as shapes M x N x K; empty on bad text.
std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> shapes;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    unsigned long v[3];
    char tail = 0;
    if (std::sscanf(part.c_str(), "%lux%lux%lu%c", &v[0], &v[1], &v[2], &tail) != 3) return {};
    for (unsigned long x : v)
      if (x < 1 || x > 65536) return {};
    shapes.push_back({v[0], v[1], v[2], false, false, {}});
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return shapes;
}

// The short name --modes takes: "f32 high (tf32)" -> "high", "bf16" -> "bf16".
std::string short_name(const Mode& mode) {
  std::string label = mode.label;
  if (label.rfind("f32 ", 0) == 0) label = label.substr(4);
  return label.substr(0, label.find(' '));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpu_gemm: kiln's matmul kernels against cuBLAS on the GPU"};
  std::string sizes_text = "4096,1000", shapes_text, modes_text, layouts_text = "nn", batch_text;
  bool layers = false, use_cache = false;
  int iterations = 20;
  std::string json_path;
  app.add_option("--sizes", sizes_text, "square sizes M=N=K, comma-separated, 16..16384 "
                                        "(\"\" for none)");
  app.add_option("--shapes", shapes_text, "products MxNxK, comma-separated, each 1..65536");
  app.add_flag("--layers", layers, "add real layers' projections: M = 1, 16, 128, 2048 by "
                                   "K = 4096, N = 4096, 11008, 14336");
  app.add_option("--modes", modes_text, "only these modes: highest,high,tf32x3,medium,bf16,f16");
  app.add_option("--layouts", layouts_text, "operand layouts, comma-separated: nn, tn (A [K, M]), "
                                            "nt (B [N, K]), tt");
  app.add_option("--batch", batch_text, "run each product as a batch over one or two batch dims, "
                                        "B1 or B1xB2 (each 1..1048576, 1048576 products at most)");
  app.add_flag("--cache", use_cache, "compile through the kernel cache, so tuning records apply");
  app.add_option("--iterations", iterations, "timed runs per case")->check(CLI::Range(1, 10000));
  app.add_option("--json", json_path, "also write the results as JSON to PATH");
  CLI11_PARSE(app, argc, argv);
  std::vector<Shape> shapes;
  if (!sizes_text.empty()) {
    std::vector<size_t> sizes = parse_sizes(sizes_text, 16, 16384);
    if (sizes.empty()) {
      std::fprintf(stderr,
                   "gpu_gemm: --sizes: expected sizes 16..16384 separated by commas, got '%s'\n",
                   sizes_text.c_str());
      return 2;
    }
    for (size_t n : sizes) shapes.push_back({n, n, n, false, false, {}});
  }
  if (!shapes_text.empty()) {
    std::vector<Shape> more = parse_shapes(shapes_text);
    if (more.empty()) {
      std::fprintf(stderr, "gpu_gemm: --shapes: expected MxNxK (each 1..65536) separated by "
                           "commas, got '%s'\n", shapes_text.c_str());
      return 2;
    }
    shapes.insert(shapes.end(), more.begin(), more.end());
  }
  if (layers)
    for (size_t n : {4096, 11008, 14336})
      for (size_t tokens : {1, 16, 128, 2048}) shapes.push_back({tokens, n, 4096, false, false, {}});
  // Every shape in every layout asked for, in the order given.
  std::vector<std::pair<bool, bool>> layouts;
  for (size_t at = 0; at <= layouts_text.size();) {
    size_t comma = std::min(layouts_text.find(',', at), layouts_text.size());
    std::string part = layouts_text.substr(at, comma - at);
    if (part.size() != 2 || (part[0] != 'n' && part[0] != 't') || (part[1] != 'n' && part[1] != 't')) {
      std::fprintf(stderr, "gpu_gemm: --layouts: expected nn, tn, nt or tt separated by commas, "
                           "got '%s'\n", layouts_text.c_str());
      return 2;
    }
    layouts.emplace_back(part[0] == 't', part[1] == 't');
    at = comma + 1;
  }
  // --batch: "32" or "2x16".
  std::vector<size_t> batch;
  if (!batch_text.empty()) {
    unsigned long v[2] = {0, 0};
    char tail = 0;
    int read = std::sscanf(batch_text.c_str(), "%lux%lu%c", &v[0], &v[1], &tail);
    bool two = read == 2, ok = (read == 1 && batch_text.find('x') == std::string::npos) || two;
    // past 65535 products kiln's matmul grids fold (cuBLAS's batch count is an int)
    for (int i = 0; i < (two ? 2 : 1) && ok; ++i) ok = v[i] >= 1 && v[i] <= (1ul << 20);
    ok = ok && v[0] * (two ? v[1] : 1) <= (1ul << 20) &&
         batch_text.find_first_not_of("0123456789x") == std::string::npos;
    if (!ok) {
      std::fprintf(stderr, "gpu_gemm: --batch: expected B1 or B1xB2 (each 1..1048576, "
                           "1048576 products at most), got '%s'\n", batch_text.c_str());
      return 2;
    }
    batch.push_back(v[0]);
    if (two) batch.push_back(v[1]);
  }
  std::vector<Shape> laid;
  for (auto [ta, tb] : layouts)
    for (Shape shape : shapes) {
      shape.ta = ta;
      shape.tb = tb;
      shape.batch = batch;
      laid.push_back(shape);
    }
  shapes = std::move(laid);
  std::vector<const Mode*> modes;
  for (const Mode& mode : k_modes) {
    std::string list = "," + modes_text + ",";
    if (modes_text.empty() || list.find("," + short_name(mode) + ",") != std::string::npos)
      modes.push_back(&mode);
  }
  if (modes.empty() || shapes.empty()) {
    std::fprintf(stderr, "gpu_gemm: %s\n", modes.empty()
                                                ? "--modes names none of highest, high, tf32x3, "
                                                  "medium, bf16, f16"
                                                : "no shapes to run");
    return 2;
  }
  json report = {{"rows", json::array()}};
  DeviceInfo device;
  if (auto exit_code = open_device("gpu_gemm", report, json_path, device)) return *exit_code;
  report["iterations"] = iterations;
  report["cache"] = use_cache;
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gpu_gemm: cublasCreate failed\n");
    return 1;
  }
  std::printf("gpu_gemm: %s (sm_%d), driver %s, %d iterations%s\n", device.name.c_str(),
              device.sm, device.driver.c_str(), iterations,
              use_cache ? ", through the cache (tuning records apply)" : "");
  std::printf("%-16s %16s %10s %11s %8s %-10s %10s %10s %s\n", "mode", "MxNxK", "kiln TF/s",
              "cuBLAS TF/s", "kiln/cuBLAS", "cuBLAS", "kiln err", "cuBLAS err", "status");
  int failures = 0;
  for (const Mode* mode : modes) {
    kiln::RuntimeOptions options;
    options.precision = mode->precision;
    options.use_cache = use_cache;
    auto runtime = kiln::Runtime::create(options);
    for (Shape shape : shapes) {
      json row;
      std::string name = shape.m == shape.n && shape.n == shape.k
                             ? std::to_string(shape.m)
                             : std::to_string(shape.m) + "x" + std::to_string(shape.n) + "x" +
                                   std::to_string(shape.k);
      if (shape.ta || shape.tb) name += " " + layout_of(shape);
      if (!shape.batch.empty()) {  // "2x16 x 1024x1024x128"
        std::string prefix;
        for (size_t b : shape.batch) prefix += (prefix.empty() ? "" : "x") + std::to_string(b);
        name = prefix + " x " + name;
      }
      try {
        if (!runtime) throw Failure{"runtime: " + runtime.error().message};
        row = run_case(**runtime, *mode, shape, iterations, blas);
      } catch (const Failure& f) {
        row = {{"mode", mode->label}, {"m", shape.m}, {"n", shape.n}, {"k", shape.k},
               {"layout", layout_of(shape)}, {"batch", shape.batch}, {"status", "failed"},
               {"reason", f.message}};
      }
      std::string status = row["status"];
      failures += status == "failed";
      if (status == "ok") {
        std::printf("%-16s %16s %10.1f %11.1f %7.0f%% %-10s %10.1e %10.1e ok\n", mode->label,
                    name.c_str(), row["kiln_tflops"].get<double>(),
                    row["cublas_tflops"].get<double>(),
                    100.0 * row["kiln_vs_cublas"].get<double>(), mode->cublas_label,
                    row["kiln_rel_error"].get<double>(), row["cublas_rel_error"].get<double>());
      } else {
        std::printf("%-16s %16s %s: %s\n", mode->label, name.c_str(), status.c_str(),
                    row["reason"].get<std::string>().c_str());
      }
      std::fflush(stdout);
      report["rows"].push_back(row);
    }
  }
  cublasDestroy(blas);
  if (!write_report("gpu_gemm", report, json_path)) return 1;
  return failures ? 1 : 0;
}
