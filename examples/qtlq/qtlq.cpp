// The qtlq demo's matrices (spectrum, orthogonal Q, L) and its runs in three precision modes.
#include "examples/qtlq/qtlq.h"

#include "compiler/cpu/compile.h"
#include "emulation/program.h"
#include "reference/check.h"
#include "runtime/cpu_program.h"
#include "reference/execute.h"
#include "reference/tensor.h"

#include <cassert>
#include <cmath>

namespace kiln::examples::qtlq {
namespace {

constexpr size_t k_n = k_size;

double& at(std::vector<double>& m, size_t r, size_t c) { return m[r * k_n + c]; }

// Standard normal numbers by Box-Muller from kiln's platform-independent uniform stream.
std::vector<double> gaussian_matrix(uint64_t seed) {
  reference::Rng rng(seed);
  std::vector<double> g(k_n * k_n);
  for (size_t i = 0; i < g.size(); i += 2) {
    double u1 = 1.0 - rng.next_unit();  // (0, 1]
    double u2 = rng.next_unit();
    double radius = std::sqrt(-2.0 * std::log(u1));
    g[i] = radius * std::cos(2.0 * M_PI * u2);
    if (i + 1 < g.size()) g[i + 1] = radius * std::sin(2.0 * M_PI * u2);
  }
  return g;
}

reference::Tensor f32_tensor(const std::vector<double>& values) {
  reference::Tensor t;
  t.dtype = ir::DType::f32;
  t.shape = *ir::Shape::make({k_size, k_size});
  t.values.reserve(values.size());
  for (double v : values) t.values.push_back(static_cast<float>(v));
  return t;
}

}  // namespace

std::vector<double> eigenvalues() {
  std::vector<double> lambda(k_n);
  const double top = 2.5e6;
  const double head[5] = {1.0, 0.98, 0.96, 0.94, 0.92};
  for (size_t i = 0; i < 5; ++i) lambda[i] = top * head[i];
  const double from = std::log10(0.9 * top), to = -1.0;
  const size_t tail = k_n - 5;
  for (size_t i = 0; i < tail; ++i)
    lambda[5 + i] = std::pow(10.0, from + (to - from) * static_cast<double>(i) / (tail - 1));
  return lambda;
}

std::vector<double> random_orthogonal(uint64_t seed) {
  std::vector<double> q = gaussian_matrix(seed);
  for (size_t j = 0; j < k_n; ++j) {
    for (int pass = 0; pass < 2; ++pass) {  // twice is enough for orthogonality to fp64 accuracy
      for (size_t i = 0; i < j; ++i) {
        double dot = 0.0;
        for (size_t r = 0; r < k_n; ++r) dot += at(q, r, i) * at(q, r, j);
        for (size_t r = 0; r < k_n; ++r) at(q, r, j) -= dot * at(q, r, i);
      }
    }
    double norm = 0.0;
    for (size_t r = 0; r < k_n; ++r) norm += at(q, r, j) * at(q, r, j);
    norm = std::sqrt(norm);
    for (size_t r = 0; r < k_n; ++r) at(q, r, j) /= norm;
  }
  return q;
}

ir::Graph make_graph() {
  ir::Builder b("qtlq");
  ir::TensorType type{ir::DType::f32, *ir::Shape::make({k_size, k_size})};
  ir::NodeId q = *b.add_input("q", type);
  ir::NodeId l = *b.add_input("l", type);
  ir::NodeId qt_l = *b.add_matmul(q, l, /*transpose_a=*/true, false, std::nullopt, "qt_l");
  ir::NodeId y = *b.add_matmul(qt_l, q, false, false, std::nullopt, "y");
  Status added = b.add_output(y);
  assert(added.ok());
  (void)added;
  return *std::move(b).finish();
}

Expected<std::vector<Row>> run_demo(uint64_t seed, int sm, Device device) {
  std::vector<double> lambda = eigenvalues();
  std::vector<double> q = random_orthogonal(seed);
  std::vector<double> l(k_n * k_n, 0.0);
  for (size_t r = 0; r < k_n; ++r)
    for (size_t c = 0; c < k_n; ++c)
      for (size_t j = 0; j < k_n; ++j) at(l, r, c) += at(q, r, j) * lambda[j] * at(q, c, j);
  for (size_t r = 0; r < k_n; ++r)
    for (size_t c = r + 1; c < k_n; ++c) at(l, r, c) = at(l, c, r) = (at(l, r, c) + at(l, c, r)) / 2;

  ir::Graph graph = make_graph();
  std::vector<reference::Tensor> inputs = {f32_tensor(q), f32_tensor(l)};
  std::vector<Row> rows(k_n);
  for (size_t i = 0; i < k_n; ++i) {
    rows[i].index = static_cast<int>(i);
    rows[i].truth = lambda[i];
  }
  auto exact = reference::run(graph, inputs, reference::RunMode::fp64());
  if (!exact) return make_error("reference: ", exact.error().message);
  for (size_t i = 0; i < k_n; ++i) rows[i].fp64 = (*exact)[0].values[i * k_n + i];
  const ir::Precision modes[3] = {ir::Precision::highest, ir::Precision::high,
                                  ir::Precision::tf32x3};
  for (ir::Precision mode : modes) {
    compiler::CompileOptions options;
    options.target.sm = sm;
    options.precision = mode;
    Expected<std::vector<reference::Tensor>> outputs = Error{""};
    if (device == Device::cpu) {
      auto machine = compiler::cpu::cpu_machine("native");
      if (!machine) return machine.error();
      auto artifact = compiler::cpu::compile_cpu(graph, options, *machine);
      if (!artifact) return artifact.error();
      auto program = runtime::CpuProgram::load(std::move(*artifact));
      if (!program) return program.error();
      reference::Runner run = reference::bytes_runner(
          graph, [&](const std::vector<reference::Bytes>& in) { return (*program)->run(in, {}); });
      outputs = run(inputs);
    } else {
      auto program = emulation::build_program(graph, options);
      if (!program) return program.error();
      outputs = program->run(inputs);
    }
    if (!outputs) return outputs.error();
    const std::vector<double>& y = (*outputs)[0].values;
    for (size_t i = 0; i < k_n; ++i) {
      double d = y[i * k_n + i];
      if (mode == ir::Precision::highest) rows[i].highest = d;
      if (mode == ir::Precision::high) rows[i].high = d;
      if (mode == ir::Precision::tf32x3) rows[i].tf32x3 = d;
    }
  }
  return rows;
}

}  // namespace kiln::examples::qtlq
