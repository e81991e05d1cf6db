// Helpers shared by the reference tests: graphs from text, tensors from literal values.
#pragma once

#include "ir/parse.h"
#include "reference/execute.h"
#include "reference/tensor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln::reference::testing {

inline ir::Graph parse_or_die(const std::string& text) {
  auto graph = ir::parse_graph(text, "test.kg");
  EXPECT_TRUE(graph.ok()) << (graph.ok() ? "" : graph.error().message);
  return std::move(graph).value();
}

inline Tensor make_tensor(ir::DType dtype, std::vector<int64_t> dims, std::vector<double> values) {
  auto shape = ir::Shape::make(std::move(dims));
  EXPECT_TRUE(shape.ok());
  Tensor tensor;
  tensor.dtype = dtype;
  tensor.shape = *shape;
  tensor.values = std::move(values);
  return tensor;
}

inline Tensor f32(std::vector<int64_t> dims, std::vector<double> values) {
  return make_tensor(ir::DType::f32, std::move(dims), std::move(values));
}

// Runs and expects success; returns the outputs.
inline std::vector<Tensor> run_ok(const ir::Graph& graph, const std::vector<Tensor>& inputs,
                                  RunMode mode) {
  auto outputs = run(graph, inputs, mode);
  EXPECT_TRUE(outputs.ok()) << (outputs.ok() ? "" : outputs.error().message);
  if (!outputs.ok()) return {};
  return std::move(outputs).value();
}

// The single output of a one-output graph.
inline std::vector<double> run_values(const ir::Graph& graph, const std::vector<Tensor>& inputs,
                                      RunMode mode = RunMode::fp64()) {
  std::vector<Tensor> outputs = run_ok(graph, inputs, mode);
  if (outputs.size() != 1) {
    ADD_FAILURE() << "expected one output, got " << outputs.size();
    return {};
  }
  return outputs[0].values;
}

}  // namespace kiln::reference::testing
