// Test helpers: example graphs, options, NVRTC availability.
#include "test_support.h"

#include "compiler/nvrtc.h"
#include "compiler/sizes.h"
#include "ir/parse.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace kiln::compiler::test {

ir::Graph parse(const std::string& text) {
  auto graph = ir::parse_graph(text, "test.kg");
  if (!graph) {
    throw std::runtime_error(graph.error().message);
  }
  return *graph;
}

ir::Graph example(const std::string& name) {
  std::string path = std::string(KILN_SOURCE_DIR) + "/examples/graphs/" + name + ".kg";
  auto graph = ir::parse_graph_file(path);
  if (!graph) {
    throw std::runtime_error(graph.error().message);
  }
  return *graph;
}

std::vector<GroupKind> kinds(const std::vector<KernelGroup>& groups) {
  std::vector<GroupKind> k;
  for (const auto& g : groups) k.push_back(g.kind);
  return k;
}

std::vector<std::string> example_names() {
  std::vector<std::string> names;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(KILN_SOURCE_DIR) + "/examples/graphs")) {
    if (entry.path().extension() == ".kg") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string wide_sum(int inputs, const std::string& type) {
  std::string text = "graph wide {\n";
  for (int i = 0; i < inputs; ++i) text += "  input x" + std::to_string(i) + ": " + type + "\n";
  std::string sum = "x0";
  for (int i = 1; i < inputs; ++i) {
    text += "  s" + std::to_string(i) + " = add(" + sum + ", x" + std::to_string(i) + ")\n";
    sum = "s" + std::to_string(i);
  }
  return text + "  output " + sum + "\n}\n";
}

CompileOptions options(int sm, ir::Precision precision, FallbackPolicy fallback) {
  CompileOptions o;
  o.target.sm = sm;
  o.precision = precision;
  o.fallback = fallback;
  return o;
}

CompileOptions with_bucket(const ir::Graph& graph, CompileOptions o) {
  o.bucket.clear();
  for (const ir::Symbol& s : graph.symbols())
    o.bucket.push_back(bucket_of(std::min<int64_t>(37, s.hi), s));
  return o;
}

bool have_nvrtc() { return load_nvrtc().ok(); }

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

}  // namespace kiln::compiler::test
