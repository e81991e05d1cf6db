// Error metrics between a computed tensor and its reference.
#pragma once

#include "reference/tensor.h"

#include <vector>

namespace kiln::reference {

// ||actual - expected||_2 / ||expected||_2. When the reference is all zeros the absolute
// ||actual - expected||_2 is returned instead (0 when both are zero). Equal infinities and NaN
// on both sides match and weigh nothing; a NaN on one side only gives NaN. Sizes must match
// (asserted).
double relative_l2(const std::vector<double>& actual, const std::vector<double>& expected);

// max |actual - expected|; NaN on both sides of an element matches, on one side gives NaN.
double max_abs_error(const std::vector<double>& actual, const std::vector<double>& expected);

// The same of two tensors: of integer or bool ones (of one dtype), from their exact differences
// (two i64 values past 2^53 that one double holds differ by what they differ, not by 0).
double relative_l2(const Tensor& actual, const Tensor& expected);
double max_abs_error(const Tensor& actual, const Tensor& expected);

}  // namespace kiln::reference
