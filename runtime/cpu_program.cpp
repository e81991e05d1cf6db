// CpuProgram: buffers bound by role, work items split over threads, kernels run in order.
#include "runtime/cpu_program.h"

#include "runtime/cpu_workers.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

namespace kiln::runtime {

namespace {

std::optional<int> threads_from_env() {
  const char* env = std::getenv("KILN_CPU_THREADS");
  if (!env || !*env) return std::nullopt;
  char* end = nullptr;
  long v = std::strtol(env, &end, 10);
  if (*end != '\0' || v < 1 || v > 1024) return std::nullopt;
  return static_cast<int>(v);
}

}  // namespace

// Not in the anonymous namespace: CpuProgram::Arena, a member of a class with linkage, holds them.
namespace cpu_program_detail {

// 64-byte aligned floats, for scratch and temporaries.
struct AlignedFloats {
  // Null when `floats` is absurd (past 2^56 bytes) or the memory is not there.
  static std::unique_ptr<AlignedFloats> allocate(uint64_t floats) {
    if (floats > (uint64_t{1} << 54)) return nullptr;
    void* data = std::aligned_alloc(64, (floats * 4 + 63) / 64 * 64 + 64);
    if (!data) return nullptr;
    return std::unique_ptr<AlignedFloats>(new AlignedFloats(static_cast<float*>(data)));
  }
  ~AlignedFloats() { std::free(data); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* data;

 private:
  explicit AlignedFloats(float* d) : data(d) {}
};

}  // namespace cpu_program_detail

using cpu_program_detail::AlignedFloats;

namespace {

Error no_memory(const char* what, uint64_t floats) {
  return make_error("cpu: cannot allocate ", what, " of ", std::to_string(floats * 4), " bytes");
}

}  // namespace

int cpu_threads() {
  if (auto v = threads_from_env()) return *v;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string cpu_threads_env_problem() {
  const char* env = std::getenv("KILN_CPU_THREADS");
  if (!env || !*env || threads_from_env()) return "";
  return "KILN_CPU_THREADS='" + std::string(env) +
         "': expected a whole number from 1 to 1024; using the core count";
}

Expected<std::unique_ptr<CpuProgram>> CpuProgram::load(compiler::Artifact artifact) {
  if (!artifact.is_cpu()) return make_error("not a CPU artifact (arch ", artifact.arch, ")");
  // Code for a CPU with instructions this one lacks would die of SIGILL: refuse it by name.
  if (Status s = compiler::cpu::runs_here(artifact.target.cpu); !s) return s.error();
  std::vector<std::string> entries;
  for (const compiler::KernelArtifact& k : artifact.kernels) entries.push_back(k.entry);
  auto object = compiler::cpu::LoadedObject::load(artifact.object, entries);
  if (!object) return object.error();
  std::unique_ptr<CpuProgram> program(new CpuProgram());
  program->m_artifact = std::move(artifact);
  program->m_object = std::move(*object);
  return program;
}

namespace {

Expected<std::vector<uint64_t>> bytes_at(const std::vector<uint64_t>& fixed,
                                         const std::vector<compiler::SizeTerm>& terms,
                                         const compiler::Artifact& a,
                                         const std::vector<int64_t>& dims) {
  if (a.bucket.empty()) {
    if (!dims.empty()) {
      return make_error("a static graph takes no dims (", std::to_string(dims.size()), " given)");
    }
    return fixed;
  }
  if (dims.size() != a.bucket.size()) {
    return make_error("the graph has ", std::to_string(a.bucket.size()), " dims; ",
                      std::to_string(dims.size()), " given");
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < a.bucket[i][0] || dims[i] > a.bucket[i][1]) {
      return make_error("dim ", std::to_string(i), " = ", std::to_string(dims[i]),
                        " is outside the compiled bucket ", std::to_string(a.bucket[i][0]), "..",
                        std::to_string(a.bucket[i][1]));
    }
  }
  auto sizes = compiler::sizes_at(terms, dims);
  if (!sizes) return make_error("corrupt size terms");
  return *sizes;
}

}  // namespace

Expected<std::vector<uint64_t>> CpuProgram::input_bytes(const std::vector<int64_t>& dims) const {
  return bytes_at(m_artifact.input_bytes, m_artifact.input_sizes, m_artifact, dims);
}

Expected<std::vector<uint64_t>> CpuProgram::output_bytes(const std::vector<int64_t>& dims) const {
  return bytes_at(m_artifact.output_bytes, m_artifact.output_sizes, m_artifact, dims);
}

// Buffers grown to each run's need and kept: temporaries by index, scratch by thread.
struct CpuProgram::Arena {
  std::vector<std::unique_ptr<AlignedFloats>> temporaries, scratch;
  std::vector<uint64_t> temporary_floats, scratch_floats;

  // Slot i of `buffers` holding at least `floats`; false when the memory is not there.
  static bool fit(std::vector<std::unique_ptr<AlignedFloats>>& buffers, std::vector<uint64_t>& sizes,
                  size_t i, uint64_t floats) {
    if (buffers.size() <= i) {
      buffers.resize(i + 1);
      sizes.resize(i + 1, 0);
    }
    if (buffers[i] && sizes[i] >= floats) return true;
    buffers[i].reset();  // the old one goes before the larger one comes
    sizes[i] = 0;
    buffers[i] = AlignedFloats::allocate(floats);
    if (!buffers[i]) return false;
    sizes[i] = floats;
    return true;
  }
};

CpuProgram::~CpuProgram() = default;

Status CpuProgram::run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                       const std::vector<int64_t>& dims, int threads,
                       std::vector<double>* kernel_us) const {
  if (kernel_us) kernel_us->clear();
  const compiler::Artifact& a = m_artifact;
  if (inputs.size() != a.input_bytes.size() || outputs.size() != a.output_bytes.size()) {
    return make_error("the program takes ", std::to_string(a.input_bytes.size()), " inputs and ",
                      std::to_string(a.output_bytes.size()), " outputs");
  }
  auto temporary = bytes_at(a.temporary_bytes, a.temporary_sizes, a, dims);
  if (!temporary) return temporary.error();
  // The program's own arena, or this run's when another run holds it.
  std::unique_lock<std::mutex> held(m_arena_mutex, std::try_to_lock);
  Arena own;
  if (held.owns_lock() && !m_arena) m_arena = std::make_unique<Arena>();
  Arena& arena = held.owns_lock() ? *m_arena : own;
  std::vector<void*> temps;
  for (size_t i = 0; i < temporary->size(); ++i) {
    uint64_t floats = (*temporary)[i] / 4 + 1;
    if (!Arena::fit(arena.temporaries, arena.temporary_floats, i, floats))
      return no_memory("a temporary", floats);
    temps.push_back(arena.temporaries[i]->data);
  }
  std::vector<void*> in;
  for (const void* p : inputs) in.push_back(const_cast<void*>(p));
  int pool = threads > 0 ? threads : cpu_threads();
  // Each thread's scratch, grown to the largest kernel's need before that kernel starts.
  auto& scratch = arena.scratch;
  const auto& functions = m_object->functions();
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    const compiler::KernelArtifact& k = a.kernels[i];
    auto buffers = compiler::bind_buffers(k, in, outputs, temps);
    if (!buffers) return buffers.error();
    auto terms = compiler::sizes_at(k.items, dims);
    if (!terms) return make_error("kernel ", k.name, ": corrupt work items");
    // Each term is below 2^62 (SizeTerm::at); their product must stay there too.
    uint64_t items = 1;
    for (uint64_t t : *terms) {
      if (t != 0 && items > (uint64_t{1} << 62) / t)
        return make_error("kernel ", k.name, ": corrupt work items");
      items *= t;
    }
    if (items == 0) {
      if (kernel_us) kernel_us->push_back(0.0);
      continue;
    }
    auto started = std::chrono::steady_clock::now();
    auto parts = static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(pool), items));
    compiler::cpu::KernelFunction fn = functions[i];
    for (size_t part = 0; part < parts; ++part) {
      if (k.scratch_floats == 0 && part >= scratch.size()) continue;
      if (!Arena::fit(scratch, arena.scratch_floats, part, std::max<uint64_t>(k.scratch_floats, 1)))
        return no_memory("a thread's scratch", k.scratch_floats);
    }
    auto run_part = [&](size_t part) {
      auto begin = static_cast<int64_t>(static_cast<unsigned __int128>(items) * part / parts);
      auto end = static_cast<int64_t>(static_cast<unsigned __int128>(items) * (part + 1) / parts);
      fn(buffers->data(), dims.data(), begin, end,
         part < scratch.size() && scratch[part] ? scratch[part]->data : nullptr);
    };
    run_parts(parts, static_cast<int>(parts), run_part);
    if (kernel_us) {
      kernel_us->push_back(std::chrono::duration<double, std::micro>(
                               std::chrono::steady_clock::now() - started).count());
    }
  }
  return {};
}

Expected<std::vector<std::vector<unsigned char>>> CpuProgram::run(
    const std::vector<std::vector<unsigned char>>& inputs, const std::vector<int64_t>& dims,
    int threads) const {
  auto in_bytes = input_bytes(dims);
  if (!in_bytes) return in_bytes.error();
  auto out_bytes = output_bytes(dims);
  if (!out_bytes) return out_bytes.error();
  if (inputs.size() != in_bytes->size()) {
    return make_error("the program takes ", std::to_string(in_bytes->size()), " inputs; ",
                      std::to_string(inputs.size()), " given");
  }
  std::vector<const void*> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].size() != (*in_bytes)[i]) {
      return make_error("input ", std::to_string(i), " holds ", std::to_string(inputs[i].size()),
                        " bytes; the program expects ", std::to_string((*in_bytes)[i]));
    }
    in.push_back(inputs[i].data());
  }
  std::vector<std::vector<unsigned char>> outputs;
  std::vector<void*> out;
  for (uint64_t bytes : *out_bytes) outputs.emplace_back(bytes);
  for (auto& o : outputs) out.push_back(o.data());
  if (Status s = run(in, out, dims, threads); !s) return s.error();
  return outputs;
}

}  // namespace kiln::runtime
