// embed: compile a graph through kiln's cache, report hit or miss, then try to run it.
#include <kiln/kiln.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* k_graph = R"(graph mlp_block {
  input x: f32[64, 256]
  input w: f32[256, 512]
  input b: f32[512]
  y = gelu(add(matmul(x, w), b))
  output y
})";

int usage() {
  std::fprintf(stderr, "usage: embed --arch ARCH --cache-dir DIR [--precision MODE]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::RuntimeOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) return usage();
    if (arg == "--arch") {
      options.arch = argv[++i];
    } else if (arg == "--cache-dir") {
      options.cache_dir = argv[++i];
    } else if (arg == "--precision") {
      auto mode = kiln::ir::parse_precision(argv[++i]);
      if (!mode) return usage();
      options.precision = *mode;
    } else {
      return usage();
    }
  }
  options.log = [](kiln::LogLevel, std::string_view message) {
    std::fprintf(stderr, "kiln: %.*s\n", static_cast<int>(message.size()), message.data());
  };

  auto runtime = kiln::Runtime::create(options);
  if (!runtime) {
    std::fprintf(stderr, "embed: %s\n", runtime.error().message.c_str());
    return 2;
  }
  auto exe = (*runtime)->compile_text(k_graph, "mlp_block.kg");
  if (!exe) {
    std::fprintf(stderr, "embed: %s\n", exe.error().message.c_str());
    return 1;
  }
  const kiln::Executable& e = **exe;
  if (e.cache_hit()) {
    std::printf("hit %.3f ms (%s, %s, key %s)\n", e.lookup_us() / 1000.0, e.arch().c_str(),
                e.precision().c_str(), e.key().c_str());
  } else {
    std::printf("miss %.1f ms (%s, %s, key %s)\n", e.compile_ms(), e.arch().c_str(),
                e.precision().c_str(), e.key().c_str());
  }

  if (kiln::Status gpu = kiln::gpu_status(); !gpu) {
    std::printf("run: skipped: %s\n", gpu.error().message.c_str());
    return 0;
  }
  std::vector<kiln::DeviceBuffer> buffers;
  std::vector<kiln::TensorRef> inputs, outputs;
  auto bind = [&](const kiln::TensorSpec& spec, std::vector<kiln::TensorRef>& into) -> bool {
    size_t elements = 1;
    for (int64_t d : spec.shape) elements *= static_cast<size_t>(d);
    auto buffer = kiln::DeviceBuffer::allocate(elements * 4);
    if (!buffer) {
      std::fprintf(stderr, "embed: %s\n", buffer.error().message.c_str());
      return false;
    }
    std::vector<float> ones(elements, 0.01f);
    if (kiln::Status s = buffer->upload(ones.data(), elements * 4); !s) return false;
    into.push_back({buffer->data(), spec.dtype, spec.shape});
    buffers.push_back(std::move(*buffer));
    return true;
  };
  for (const auto& spec : e.inputs()) {
    if (!bind(spec, inputs)) return 1;
  }
  for (const auto& spec : e.outputs()) {
    if (!bind(spec, outputs)) return 1;
  }
  if (kiln::Status s = (*exe)->run(inputs, outputs); !s) {
    std::fprintf(stderr, "embed: run: %s\n", s.error().message.c_str());
    return 1;
  }
  float first = 0;
  if (kiln::Status s = buffers.back().download(&first, sizeof first); !s) {
    std::fprintf(stderr, "embed: %s\n", s.error().message.c_str());
    return 1;
  }
  // y = gelu(256 * 0.01 * 0.01 + 0.01) for inputs of 0.01 everywhere.
  std::printf("run: ok, y[0] = %.6f\n", first);
  return 0;
}
