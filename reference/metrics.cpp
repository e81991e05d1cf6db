// Relative L2 and max-abs error, accumulated in double with NaN propagated, never hidden.
#include "reference/metrics.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace kiln::reference {

double relative_l2(const std::vector<double>& actual, const std::vector<double>& expected) {
  assert(actual.size() == expected.size());
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    // Equal infinities (a mask's -inf) match and weigh nothing; so does a NaN where the
    // reference has one (maximum(NaN, x) is NaN, as in PyTorch). A NaN on one side only is NaN.
    if (actual[i] == expected[i] && std::isinf(expected[i])) continue;
    if (std::isnan(actual[i]) && std::isnan(expected[i])) continue;
    double d = actual[i] - expected[i];
    diff += d * d;
    norm += expected[i] * expected[i];
  }
  if (std::isnan(diff) || std::isnan(norm)) return std::numeric_limits<double>::quiet_NaN();
  if (norm == 0.0) return std::sqrt(diff);
  return std::sqrt(diff) / std::sqrt(norm);
}

double max_abs_error(const std::vector<double>& actual, const std::vector<double>& expected) {
  assert(actual.size() == expected.size());
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    bool both_nan = std::isnan(actual[i]) && std::isnan(expected[i]);
    double d = actual[i] == expected[i] || both_nan ? 0.0 : std::fabs(actual[i] - expected[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    if (d > worst) worst = d;
  }
  return worst;
}

namespace {

// actual[i] - expected[i] of integer tensors, exactly, as a double.
double integer_difference(const Tensor& actual, const Tensor& expected, size_t i) {
  __int128 d = static_cast<__int128>(actual.integer(i)) - expected.integer(i);
  return static_cast<double>(d);
}

bool integers(const Tensor& actual, const Tensor& expected) {
  return !ir::is_float(actual.dtype) && !ir::is_float(expected.dtype);
}

}  // namespace

double relative_l2(const Tensor& actual, const Tensor& expected) {
  if (!integers(actual, expected)) return relative_l2(actual.values, expected.values);
  assert(actual.values.size() == expected.values.size());
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < actual.values.size(); ++i) {
    double d = integer_difference(actual, expected, i);
    auto e = static_cast<double>(expected.integer(i));
    diff += d * d;
    norm += e * e;
  }
  if (norm == 0.0) return std::sqrt(diff);
  return std::sqrt(diff) / std::sqrt(norm);
}

double max_abs_error(const Tensor& actual, const Tensor& expected) {
  if (!integers(actual, expected)) return max_abs_error(actual.values, expected.values);
  assert(actual.values.size() == expected.values.size());
  double worst = 0.0;
  for (size_t i = 0; i < actual.values.size(); ++i)
    worst = std::max(worst, std::fabs(integer_difference(actual, expected, i)));
  return worst;
}

}  // namespace kiln::reference
