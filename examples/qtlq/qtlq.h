// The TF32 Q^T L Q demo: recover a wide-dynamic-range spectrum as diag(Q^T L Q) with kiln's own
// kernels (under host emulation) in highest, high and tf32x3.
#pragma once

#include "ir/graph.h"
#include "support/expected.h"

#include <cstdint>
#include <vector>

namespace kiln::examples::qtlq {

inline constexpr int k_size = 128;

// The true spectrum: 2.5e6 x {1, .98, .96, .94, .92}, then 123 values log-uniform from
// 0.9 x 2.5e6 down to 0.1.
std::vector<double> eigenvalues();

// A random orthogonal matrix (row-major, k_size x k_size, fp64): modified Gram-Schmidt, applied
// twice, on the columns of a Gaussian matrix drawn from `seed`.
std::vector<double> random_orthogonal(uint64_t seed);

// diag(Q^T L Q) as a kiln graph: y = matmul(matmul(q, l, transpose_a=true), q).
ir::Graph make_graph();

struct Row {
  int index = 0;
  double truth = 0.0;
  double highest = 0.0;
  double high = 0.0;
  double tf32x3 = 0.0;
  // diag(Q^T L Q) in fp64 of the fp32-rounded Q and L: the floor any fp32 computation faces.
  double fp64 = 0.0;
};

// Where the kernels run: the CUDA kernels under host emulation, or the CPU target natively.
enum class Device { emulated, cpu };

// Builds L = Q diag(lambda) Q^T in fp64 (symmetrised, then rounded to fp32, as is Q), runs the
// graph's generated kernels under emulation for `sm` (or natively on the CPU target, whose modes
// round as the GPU's do) in each mode and returns all k_size rows.
// Errors: the emulation's (no host compiler, a kernel that fails) or the CPU target's.
Expected<std::vector<Row>> run_demo(uint64_t seed, int sm = 90, Device device = Device::emulated);

}  // namespace kiln::examples::qtlq
