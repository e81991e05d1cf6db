// DeviceBuffer, gpu_status and Executable::run_host: device memory through the run-time-loaded
// driver.
#include "kiln/kiln.h"

#include "runtime/context.h"
#include "runtime/executable_impl.h"
#include "runtime/driver.h"

#include <utility>

namespace kiln {

Status gpu_status() {
  auto api = runtime::load_driver();
  if (!api) return api.error();
  int count = 0;
  if (auto r = (*api)->device_get_count(&count); r != 0) {
    return runtime::driver_error(**api, "cuDeviceGetCount", r);
  }
  if (count == 0) return make_error("no CUDA device: the driver sees none");
  return Status::success();
}

namespace {

// Runs `body` with device `device`'s primary context current (the caller's is restored after).
template <typename Body>
Status in_primary_context(int device, Body&& body) {
  auto api = runtime::load_driver();
  if (!api) return api.error();
  auto context = runtime::primary_context(**api, device);
  if (!context) return context.error();
  auto scope = runtime::ScopedContext::enter(**api, *context);
  if (!scope) return scope.error();
  runtime::RelaxedCapture relaxed(**api);  // another thread's capture is not this call's business
  return body(**api);
}

}  // namespace

Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes, int device) {
  runtime::CuDevicePtr pointer = 0;
  Status s = in_primary_context(device, [&](const runtime::DriverApi& api) -> Status {
    if (auto r = api.mem_alloc(&pointer, bytes); r != 0) {
      return runtime::driver_error(
          api, ("cuMemAlloc of " + std::to_string(bytes) + " bytes").c_str(), r);
    }
    return Status::success();
  });
  if (!s) return s.error();
  DeviceBuffer buffer;
  buffer.m_pointer = static_cast<uintptr_t>(pointer);
  buffer.m_bytes = bytes;
  buffer.m_device = device;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : m_pointer(std::exchange(other.m_pointer, 0)),
      m_bytes(std::exchange(other.m_bytes, 0)),
      m_device(other.m_device) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    m_pointer = std::exchange(other.m_pointer, 0);
    m_bytes = std::exchange(other.m_bytes, 0);
    m_device = other.m_device;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (!m_pointer) return;
  // Nothing to report to: a context already torn down has freed the memory with it.
  (void)in_primary_context(m_device, [&](const runtime::DriverApi& api) {
    api.mem_free(m_pointer);
    return Status::success();
  });
}

Status DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > m_bytes) return make_error("upload of ", std::to_string(bytes), " bytes into a buffer of ", std::to_string(m_bytes));
  return in_primary_context(m_device, [&](const runtime::DriverApi& api) -> Status {
    if (auto r = api.memcpy_htod(m_pointer, host, bytes); r != 0) {
      return runtime::driver_error(api, "cuMemcpyHtoD", r);
    }
    return Status::success();
  });
}

Status DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > m_bytes) return make_error("download of ", std::to_string(bytes), " bytes from a buffer of ", std::to_string(m_bytes));
  return in_primary_context(m_device, [&](const runtime::DriverApi& api) -> Status {
    if (auto r = api.memcpy_dtoh(host, m_pointer, bytes); r != 0) {
      return runtime::driver_error(api, "cuMemcpyDtoH", r);
    }
    return Status::success();
  });
}

namespace {

size_t spec_bytes(const TensorSpec& spec) { return runtime::tensor_bytes(spec.dtype, spec.shape); }

}  // namespace

Expected<std::vector<std::vector<unsigned char>>> Executable::run_host(
    const std::vector<std::vector<unsigned char>>& inputs) {
  return run_host(inputs, {});
}

Expected<std::vector<std::vector<unsigned char>>> Executable::run_host(
    const std::vector<std::vector<unsigned char>>& inputs, const std::vector<int64_t>& values) {
  auto in_specs = inputs_at(values);
  if (!in_specs) return in_specs.error();
  auto out_specs = outputs_at(values);
  if (!out_specs) return out_specs.error();
  if (inputs.size() != in_specs->size()) {
    return make_error("expected ", std::to_string(in_specs->size()), " inputs, got ",
                      std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = (*in_specs)[i];
    if (inputs[i].size() != spec_bytes(spec)) {
      return make_error("input '", spec.name, "' has ", std::to_string(inputs[i].size()),
                        " bytes, expected ", std::to_string(spec_bytes(spec)));
    }
  }
  // RuntimeOptions::check_indices: run() below checks the ids, on either path.
  if (m_on_cpu) {  // host memory: the bytes themselves
    std::vector<TensorRef> in_refs, out_refs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorSpec& spec = (*in_specs)[i];
      in_refs.push_back({const_cast<unsigned char*>(inputs[i].data()), spec.dtype, spec.shape});
    }
    std::vector<std::vector<unsigned char>> outputs;
    for (const TensorSpec& spec : *out_specs) outputs.emplace_back(spec_bytes(spec));
    for (size_t o = 0; o < outputs.size(); ++o)
      out_refs.push_back({outputs[o].data(), (*out_specs)[o].dtype, (*out_specs)[o].shape});
    if (Status s = run(in_refs, out_refs); !s) return s.error();
    return outputs;
  }
  // The buffers and the kernels in one context, the device's primary one, whatever is current.
  auto api = runtime::load_driver();
  if (!api) return api.error();
  auto primary = runtime::primary_context(**api, m_device);
  if (!primary) return primary.error();
  auto scope = runtime::ScopedContext::enter(**api, *primary);
  if (!scope) return scope.error();
  std::vector<DeviceBuffer> buffers;
  std::vector<TensorRef> in_refs, out_refs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = (*in_specs)[i];
    auto buffer = DeviceBuffer::allocate(inputs[i].size(), m_device);
    if (!buffer) return buffer.error();
    if (Status s = buffer->upload(inputs[i].data(), inputs[i].size()); !s) return s.error();
    in_refs.push_back({buffer->data(), spec.dtype, spec.shape});
    buffers.push_back(std::move(*buffer));
  }
  for (const TensorSpec& spec : *out_specs) {
    auto buffer = DeviceBuffer::allocate(spec_bytes(spec), m_device);
    if (!buffer) return buffer.error();
    out_refs.push_back({buffer->data(), spec.dtype, spec.shape});
    buffers.push_back(std::move(*buffer));
  }
  if (Status s = run(in_refs, out_refs); !s) return s.error();
  std::vector<std::vector<unsigned char>> outputs;
  for (size_t o = 0; o < out_specs->size(); ++o) {
    const DeviceBuffer& buffer = buffers[inputs.size() + o];
    outputs.emplace_back(buffer.size());
    // A synchronous copy on the legacy default stream: it waits for the kernels.
    if (Status s = buffer.download(outputs.back().data(), buffer.size()); !s) return s.error();
  }
  return outputs;
}

}  // namespace kiln
