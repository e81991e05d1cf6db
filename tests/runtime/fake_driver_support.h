// Helpers for the fake-driver tests: point kiln at the fake libcuda, compile an example for the
// fake device, and allocate device buffers for an executable's tensors.
#pragma once

#include "fake_cuda/fake_cuda.h"
#include "kiln/kiln.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace kiln::testing_support {

// Configures the fake and makes kiln load it; false when this process already used another
// configuration (run each test in its own process, as ctest does).
inline bool use_fake_driver(const fake_cuda::Config& config) {
  setenv("KILN_CUDA_DRIVER_PATH", KILN_FAKE_CUDA_PATH, 1);
  return fake_cuda::configure(config) && cuInit(0) == 0;
}

// examples/graphs/NAME compiled (no cache) for the arch of fake device `device`.
inline std::shared_ptr<Executable> compile_example(const std::string& name, int device) {
  RuntimeOptions options;
  options.device = device;
  options.use_cache = false;
  options.allow_fallback = true;
  auto runtime = Runtime::create(options);
  EXPECT_TRUE(runtime) << runtime.error().message;
  if (!runtime) return nullptr;
  auto exe = (*runtime)->compile_file(std::string(KILN_EXAMPLES_DIR) + "/" + name);
  EXPECT_TRUE(exe) << exe.error().message;
  return exe ? *exe : nullptr;
}

inline size_t spec_bytes(const TensorSpec& spec) {
  auto bytes = static_cast<size_t>(ir::byte_size(spec.dtype));
  for (int64_t d : spec.shape) bytes *= static_cast<size_t>(d);
  return bytes;
}

// One device buffer per input and output of an executable, `slack` bytes larger than needed.
struct Buffers {
  Buffers(const Executable& exe, int device, size_t slack = 0) {
    auto add = [&](const TensorSpec& spec, std::vector<TensorRef>& refs) {
      auto buffer = DeviceBuffer::allocate(spec_bytes(spec) + slack, device);
      if (!buffer) {
        error = buffer.error().message;
        return;
      }
      refs.push_back({buffer->data(), spec.dtype, spec.shape});
      owned.push_back(std::move(*buffer));
    };
    for (const TensorSpec& spec : exe.inputs()) add(spec, inputs);
    for (const TensorSpec& spec : exe.outputs()) add(spec, outputs);
    specs = exe.inputs();
  }
  bool ok() const { return error.empty(); }
  std::vector<std::vector<unsigned char>> host_inputs() const { return zeros_for(specs); }
  static std::vector<std::vector<unsigned char>> zeros(const Executable& exe) {
    return zeros_for(exe.inputs());
  }
  static std::vector<std::vector<unsigned char>> zeros_for(const std::vector<TensorSpec>& specs) {
    std::vector<std::vector<unsigned char>> host;
    for (const TensorSpec& spec : specs) host.emplace_back(spec_bytes(spec), 0);
    return host;
  }

  std::vector<DeviceBuffer> owned;
  std::vector<TensorRef> inputs, outputs;
  std::vector<TensorSpec> specs;
  std::string error;
};

// Runs `exe` once on zero-filled buffers of its own, freed before returning.
inline Status run_on_fresh_buffers(Executable& exe, int device, void* stream = nullptr) {
  Buffers buffers(exe, device);
  if (!buffers.ok()) return make_error(buffers.error);
  return exe.run(buffers.inputs, buffers.outputs, stream);
}

// Runs `exe` once on buffers allocated in the calling thread's current context (an application's
// own context: DeviceBuffer memory belongs to the primary context), freed before returning.
inline Status run_in_current_context(Executable& exe, void* stream = nullptr) {
  std::vector<unsigned long long> owned;
  auto refs = [&](const std::vector<TensorSpec>& specs) {
    std::vector<TensorRef> out;
    for (const TensorSpec& spec : specs) {
      unsigned long long pointer = 0;
      if (cuMemAlloc_v2(&pointer, spec_bytes(spec)) != 0) return out;
      owned.push_back(pointer);
      out.push_back({reinterpret_cast<void*>(pointer), spec.dtype, spec.shape});
    }
    return out;
  };
  std::vector<TensorRef> inputs = refs(exe.inputs()), outputs = refs(exe.outputs());
  Status s = owned.size() == inputs.size() + outputs.size() &&
                     inputs.size() == exe.inputs().size() && outputs.size() == exe.outputs().size()
                 ? exe.run(inputs, outputs, stream)
                 : make_error("cuMemAlloc in the current context failed");
  for (unsigned long long pointer : owned) cuMemFree_v2(pointer);
  return s;
}

}  // namespace kiln::testing_support
