// kiln-qtlq: prints the TF32 Q^T L Q table (true, highest, high, tf32x3 and relative errors).
//
// Exit codes: 0 on success, 1 when the run fails, 2 on bad usage.
#include "examples/qtlq/qtlq.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

namespace {

double relative(double value, double truth) { return std::fabs(value - truth) / std::fabs(truth); }

void print_table(const std::vector<kiln::examples::qtlq::Row>& rows, uint64_t seed, bool cpu) {
  std::printf("diag(Q^T L Q), m = %d, seed %llu, %s\n", kiln::examples::qtlq::k_size,
              static_cast<unsigned long long>(seed),
              cpu ? "kiln's CPU target (native, modes rounded as on the GPU)"
                  : "kiln's kernels under host emulation (sm_90)");
  std::printf("%4s  %14s  %16s  %18s  %14s  %11s  %11s  %11s  %11s\n", "idx", "true",
              "fp32 (highest)", "fp32 (high/TF32)", "tf32x3", "err highest", "err high",
              "err tf32x3", "err floor");
  std::printf("%s\n", std::string(127, '-').c_str());
  for (int i : {0, 1, 4, 20, 50, 80, 100, 115, 120, 124, 125, 126, 127}) {
    const auto& r = rows[static_cast<size_t>(i)];
    std::printf("%4d  %14.5g  %16.5g  %18.5g  %14.5g  %10.2f%%  %10.2f%%  %10.2f%%  %10.2f%%\n",
                r.index, r.truth, r.highest, r.high, r.tf32x3, 100 * relative(r.highest, r.truth),
                100 * relative(r.high, r.truth), 100 * relative(r.tf32x3, r.truth),
                100 * relative(r.fp64, r.truth));
  }
  std::printf("err floor: exact (fp64) arithmetic on the same fp32-rounded Q and L, the error input rounding alone causes\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-qtlq: what TF32 does to diag(Q^T L Q) of a wide-dynamic-range spectrum"};
  bool json = false;
  uint64_t seed = 0;
  app.add_flag("--json", json, "print every row as JSON");
  app.add_option("--seed", seed, "seed of the Gaussian matrix behind Q (default 0)");
  bool cpu = false;
  app.add_flag("--cpu", cpu, "run natively on the CPU target instead of the emulated CUDA kernels");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  using kiln::examples::qtlq::Device;
  auto rows = kiln::examples::qtlq::run_demo(seed, 90, cpu ? Device::cpu : Device::emulated);
  if (!rows) {
    std::fprintf(stderr, "kiln-qtlq: %s\n", rows.error().message.c_str());
    return 1;
  }
  if (!json) {
    print_table(*rows, seed, cpu);
    return 0;
  }
  nlohmann::json out;
  out["rows"] = nlohmann::json::array();
  for (const auto& r : *rows)
    out["rows"].push_back({{"index", r.index}, {"true", r.truth}, {"highest", r.highest},
                           {"high", r.high}, {"tf32x3", r.tf32x3},
                           {"fp64_of_fp32_inputs", r.fp64}});
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
