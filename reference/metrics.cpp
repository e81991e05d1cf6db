// Relative L2 and max-abs error, accumulated in double with NaN propagated, never hidden.
#include "reference/metrics.h"

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

}  // namespace kiln::reference
