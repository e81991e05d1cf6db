// Host buffers with poisoned guards, tensor conversion and the launch sequence of a program.
#include "emulation/program.h"

#include "compiler/tensor_map.h"
#include "emulation/shim/kiln_emu_abi.h"
#include "reference/rounding.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace kiln::emulation {
namespace {

constexpr size_t k_guard = 256;       // poisoned bytes before and after every buffer
constexpr unsigned char k_poison = 0xff;  // 0xffffffff is a NaN in f32, 0xffff in f16 and bf16

// One device buffer on the host: [guard | data | guard], data 256-byte aligned like cudaMalloc.
class HostBuffer {
public:
  explicit HostBuffer(size_t bytes) : m_bytes(bytes), m_storage(bytes + 2 * k_guard + 256, k_poison) {
    uintptr_t raw = reinterpret_cast<uintptr_t>(m_storage.data()) + k_guard;
    m_offset = static_cast<size_t>(((raw + 255) & ~uintptr_t{255}) -
                                   reinterpret_cast<uintptr_t>(m_storage.data()));
  }
  unsigned char* data() { return m_storage.data() + m_offset; }
  const unsigned char* data() const { return m_storage.data() + m_offset; }
  size_t bytes() const { return m_bytes; }
  // True when nothing outside the data was written.
  bool guards_intact() const {
    for (size_t i = 0; i < m_storage.size(); ++i) {
      if (i >= m_offset && i < m_offset + m_bytes) continue;
      if (m_storage[i] != k_poison) return false;
    }
    return true;
  }

private:
  size_t m_bytes;
  std::vector<unsigned char> m_storage;
  size_t m_offset = 0;
};

std::string role_name(compiler::BufferRef ref) {
  const char* role = ref.role == compiler::BufferRole::input    ? "input"
                     : ref.role == compiler::BufferRole::output ? "output"
                                                                : "temporary";
  return std::string(role) + " #" + std::to_string(ref.index);
}

}  // namespace

std::vector<std::string> LaunchPlan::entries() const {
  std::vector<std::string> out;
  for (const Kernel& k : kernels) out.push_back(k.entry);
  return out;
}

LaunchPlan launch_plan(const compiler::LoweredProgram& program) {
  LaunchPlan plan;
  for (const compiler::KernelPlan& k : program.plan.kernels)
    plan.kernels.push_back({k.name, compiler::entry_name(k), k.params, k.launch, k.grid});
  plan.output_bytes = program.plan.output_bytes;
  plan.temporary_bytes = program.plan.temporary_bytes;
  plan.output_sizes = program.plan.output_sizes;
  plan.temporary_sizes = program.plan.temporary_sizes;
  return plan;
}

namespace {

// A CUtensorMap parameter's 128 bytes as the emulator's shim reads them (KilnEmuTensorMap).
struct alignas(64) EmulatedTensorMap {
  unsigned char bytes[128];
};
static_assert(sizeof(KilnEmuTensorMap) <= sizeof(EmulatedTensorMap));

// Parameter `p`'s map at the symbols' `values` (a static graph's: none).
Expected<EmulatedTensorMap> encode_tensor_map(const compiler::KernelParam& p,
                                              const std::vector<int64_t>& values, const void* base,
                                              size_t buffer_bytes) {
  const std::string& text = p.map;
  auto spec = compiler::tensor_map_at(p, values);
  if (!spec) return spec.error();
  if (!base) return make_error("tensor map '", text, "' binds no buffer");
  if (compiler::tensor_map_extent(*spec) > buffer_bytes)
    return make_error("tensor map '", text, "' reaches past its buffer's ",
                      std::to_string(buffer_bytes), " bytes");
  if (spec->swizzle != compiler::TensorMapSwizzle::none &&
      spec->swizzle != compiler::TensorMapSwizzle::b128)
    return make_error("tensor map '", text, "': the emulator models 128-byte swizzle or none");
  KilnEmuTensorMap m{};
  m.magic = KILN_EMU_TENSOR_MAP_MAGIC;
  m.base = base;
  m.rank = spec->rank;
  m.elem_bytes = compiler::element_bytes(spec->type);
  m.swizzle = spec->swizzle == compiler::TensorMapSwizzle::b128 ? 128 : 0;
  for (uint32_t d = 0; d < spec->rank; ++d) {
    m.dims[d] = spec->dims[d];
    m.box[d] = spec->box[d];
    if (spec->element_strides[d] != 1)
      return make_error("tensor map '", text, "': the emulator models element strides of 1");
    if (d + 1 < spec->rank) m.strides[d] = spec->strides[d];
  }
  EmulatedTensorMap out{};
  std::memcpy(out.bytes, &m, sizeof m);
  return out;
}

}  // namespace

LaunchPlan launch_plan(const compiler::Artifact& artifact) {
  LaunchPlan plan;
  for (const compiler::KernelArtifact& k : artifact.kernels)
    plan.kernels.push_back({k.name, k.entry, k.params, k.launch, k.grid});
  plan.output_bytes = artifact.output_bytes;
  plan.temporary_bytes = artifact.temporary_bytes;
  plan.output_sizes = artifact.output_sizes;
  plan.temporary_sizes = artifact.temporary_sizes;
  return plan;
}

Expected<std::vector<std::vector<unsigned char>>> run_launch_plan(
    const Module& module, const LaunchPlan& plan,
    const std::vector<std::span<const unsigned char>>& inputs, const std::vector<int64_t>& values,
    const Schedule& schedule) {
  bool symbolic = !values.empty();
  // Bytes of each buffer: a symbolic plan's size terms at the values, else the plan's bytes.
  auto out_bytes = symbolic ? compiler::sizes_at(plan.output_sizes, values) : plan.output_bytes;
  auto tmp_bytes = symbolic ? compiler::sizes_at(plan.temporary_sizes, values) : plan.temporary_bytes;
  if (!out_bytes || !tmp_bytes || out_bytes->size() != plan.output_bytes.size() ||
      tmp_bytes->size() != plan.temporary_bytes.size())
    return make_error("emulation: a size term of the plan is out of range");
  std::vector<HostBuffer> in, out, tmp;
  for (std::span<const unsigned char> bytes : inputs) {
    in.emplace_back(bytes.size());
    if (!bytes.empty()) std::memcpy(in.back().data(), bytes.data(), bytes.size());
  }
  for (uint64_t bytes : *out_bytes) out.emplace_back(static_cast<size_t>(bytes));
  for (uint64_t bytes : *tmp_bytes) tmp.emplace_back(static_cast<size_t>(bytes));
  auto buffer = [&](compiler::BufferRef ref) -> HostBuffer* {
    auto& list = ref.role == compiler::BufferRole::input    ? in
                 : ref.role == compiler::BufferRole::output ? out
                                                            : tmp;
    return ref.index < list.size() ? &list[ref.index] : nullptr;
  };
  std::vector<int> dim_values(values.begin(), values.end());

  std::vector<std::unique_ptr<EmulatedTensorMap>> maps;  // alive until the launches are done
  for (const LaunchPlan::Kernel& kernel : plan.kernels) {
    std::vector<void*> args;
    std::vector<GlobalRange> ranges;
    for (const compiler::KernelParam& p : kernel.params) {
      if (p.kind == compiler::ParamKind::dim) {
        if (p.symbol >= dim_values.size())
          return make_error("emulation: kernel '", kernel.name, "' takes dim #",
                            std::to_string(p.symbol), " of ", std::to_string(dim_values.size()));
        args.push_back(&dim_values[p.symbol]);
        continue;
      }
      HostBuffer* b = buffer(p.buffer);
      if (p.kind == compiler::ParamKind::tensor_map) {
        // Encoded as the launcher does (checked, its reach within the buffer), in the
        // emulator's own form of the 128 opaque bytes.
        auto map = encode_tensor_map(p, values, b ? b->data() : nullptr, b ? b->bytes() : 0);
        if (!map)
          return make_error("emulation: kernel '", kernel.name, "': ", map.error().message);
        maps.push_back(std::make_unique<EmulatedTensorMap>(*map));
        args.push_back(maps.back().get());
        ranges.push_back({b->data(), b->bytes()});  // what its copies may read
        continue;
      }
      // A symbolic plan's bytes are at the bucket's upper bounds; its buffers are sized above.
      if (!b || (!symbolic && b->bytes() < p.bytes))
        return make_error("emulation: kernel '", kernel.name, "' names ", role_name(p.buffer),
                          ", which the plan does not hold at that size");
      args.push_back(b->data());
      ranges.push_back({b->data(), b->bytes()});
    }
    auto launch = compiler::launch_at(kernel.launch, kernel.grid, values);
    if (!launch)
      return make_error("emulation: kernel '", kernel.name, "' has a grid term out of range");
    if (launch->persistent)
      launch->grid[0] = std::max<uint32_t>(1, std::min(launch->grid[0], schedule.sm_count));
    Status launched = module.launch(kernel.entry, *launch, args, ranges, schedule);
    if (!launched) return launched.error();
    for (const compiler::KernelParam& p : kernel.params) {
      if (p.kind == compiler::ParamKind::pointer && !buffer(p.buffer)->guards_intact())
        return make_error("emulation: kernel '", kernel.name, "' wrote outside ",
                          role_name(p.buffer));
    }
  }
  std::vector<std::vector<unsigned char>> results;
  for (const HostBuffer& b : out) results.emplace_back(b.data(), b.data() + b.bytes());
  return results;
}

Expected<std::vector<reference::Tensor>> Program::run(const std::vector<reference::Tensor>& inputs,
                                                     const Schedule& schedule) const {
  const auto& graph_inputs = m_graph.inputs();
  if (inputs.size() != graph_inputs.size())
    return make_error("emulation: the graph takes ", std::to_string(graph_inputs.size()),
                      " inputs, got ", std::to_string(inputs.size()));
  // A symbolic graph runs at the sizes its inputs give, which must lie in the compiled bucket.
  std::vector<int64_t> values;
  if (m_graph.symbolic()) {
    std::vector<std::vector<int64_t>> shapes;
    for (const reference::Tensor& t : inputs) shapes.push_back(t.type().shape.dims());
    auto given = m_graph.symbol_values(shapes);
    if (!given) return make_error("emulation: ", given.error().message);
    values = std::move(*given);
    const auto& bucket = m_lowered.bucket;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i >= bucket.size() || values[i] < bucket[i].lo || values[i] > bucket[i].hi)
        return make_error("emulation: ", m_graph.symbols()[i].name, " = ",
                          std::to_string(values[i]), " is outside the compiled bucket");
    }
  }
  auto bound = m_graph.bind(values);
  if (!bound) return make_error("emulation: ", bound.error().message);
  std::vector<std::vector<unsigned char>> in_bytes;
  std::vector<std::span<const unsigned char>> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::TensorType& type = bound->node(graph_inputs[i]).type;
    if (!(inputs[i].type() == type))
      return make_error("emulation: input #", std::to_string(i), " must be ", ir::to_string(type),
                        ", got ", ir::to_string(inputs[i].type()));
    in_bytes.emplace_back(static_cast<size_t>(type.bytes()));
    reference::store_device_bytes(inputs[i], in_bytes.back().data());
  }
  for (const auto& bytes : in_bytes) in.emplace_back(bytes);
  auto out = run_launch_plan(*m_module, m_plan, in, values, schedule);
  if (!out) return out.error();

  std::vector<reference::Tensor> results;
  for (size_t i = 0; i < bound->outputs().size(); ++i) {
    const ir::TensorType& type = bound->node(bound->outputs()[i]).type;
    if (i >= out->size() || (*out)[i].size() < static_cast<size_t>(type.bytes()))
      return make_error("emulation: the plan holds no buffer for output #", std::to_string(i));
    results.push_back(reference::load_device_bytes(type, (*out)[i].data()));
  }
  return results;
}

Expected<Program> build_program(const ir::Graph& graph, compiler::LoweredProgram lowered,
                                ShimOptions shim) {
  std::string source = compiler::program_source(lowered, compiler::Prelude::omit);
  return build_program_from_source(graph, std::move(lowered), std::move(source), std::move(shim));
}

Expected<Program> build_program_from_source(const ir::Graph& graph, compiler::LoweredProgram lowered,
                                            std::string source, ShimOptions shim) {
  Program program(graph, std::move(lowered));
  program.m_source = std::move(source);
  program.m_plan = launch_plan(program.m_lowered);
  ModuleOptions options;
  options.sm = program.m_lowered.target.sm;
  options.arch_specific = program.m_lowered.target.arch_specific();
  options.shim = std::move(shim);
  options.entries = program.m_plan.entries();
  auto module = compile_module(program.m_source, options);
  if (!module) return module.error();
  program.m_module = std::move(*module);
  return program;
}

Expected<Program> build_program(const ir::Graph& graph, const compiler::CompileOptions& options,
                                ShimOptions shim) {
  auto lowered = compiler::lower(graph, options);
  if (!lowered) return lowered.error();
  return build_program(graph, std::move(*lowered), std::move(shim));
}

}  // namespace kiln::emulation
