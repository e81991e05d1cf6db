// Versioned, bounds-checked binary form of an Artifact.
#include "compiler/artifact.h"

#include "support/byte_writer.h"
#include "support/sticky_reader.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace kiln::compiler {

namespace {

constexpr std::string_view k_magic{"KILNART\0", 8};

using Reader = StickyReader;

void write_strings(ByteWriter& w, const std::vector<std::string>& v) {
  w.u64(v.size());
  for (const auto& s : v) w.str(s);
}
void write_u64s(ByteWriter& w, const std::vector<uint64_t>& v) {
  w.u64(v.size());
  for (uint64_t x : v) w.u64(x);
}
std::vector<std::string> read_strings(Reader& r) {
  std::vector<std::string> v(r.count(8));
  for (auto& s : v) s = r.str();
  return v;
}
std::vector<uint64_t> read_u64s(Reader& r) {
  std::vector<uint64_t> v(r.count(8));
  for (auto& x : v) x = r.u64();
  return v;
}

void write_term(ByteWriter& w, const SizeTerm& t) {
  w.i64(t.coef);
  w.i64(t.divisor);
  w.u64(t.symbols.size());
  for (uint32_t s : t.symbols) w.u32(s);
}
void write_terms(ByteWriter& w, const std::vector<SizeTerm>& v) {
  w.u64(v.size());
  for (const SizeTerm& t : v) write_term(w, t);
}
bool read_terms(Reader& r, std::vector<SizeTerm>& v) {
  v.resize(r.count(24));  // coef, divisor and a count at least
  for (SizeTerm& t : v) {
    t.coef = r.i64();
    t.divisor = r.i64();
    t.symbols.resize(r.count(4));
    for (uint32_t& s : t.symbols) s = r.u32();
    if (t.coef < 0 || t.divisor < 1) return false;
  }
  return r.ok();
}

void write_kernel(ByteWriter& w, const KernelArtifact& k) {
  w.str(k.name);
  w.str(k.entry);
  w.str(k.cubin);
  w.str(k.ptx);
  for (uint32_t g : k.launch.grid) w.u32(g);
  for (uint32_t b : k.launch.block) w.u32(b);
  w.u32(k.launch.dynamic_smem_bytes);
  w.u64(k.params.size());
  for (const KernelParam& p : k.params) {
    w.u8(static_cast<uint8_t>(p.buffer.role));
    w.u32(p.buffer.index);
    w.u64(p.bytes);
    w.u8(p.written ? 1 : 0);
  }
  w.i32(k.report.registers);
  w.i32(k.report.spill_store_bytes);
  w.i32(k.report.spill_load_bytes);
  w.i32(k.report.static_smem_bytes);
}

bool read_kernel(Reader& r, KernelArtifact& k) {
  k.name = r.str();
  k.entry = r.str();
  k.cubin = r.str();
  k.ptx = r.str();
  for (uint32_t& g : k.launch.grid) g = r.u32();
  for (uint32_t& b : k.launch.block) b = r.u32();
  k.launch.dynamic_smem_bytes = r.u32();
  k.params.resize(r.count(14));
  for (KernelParam& p : k.params) {
    uint8_t role = r.u8();
    if (role > static_cast<uint8_t>(BufferRole::temporary)) return false;
    p.buffer.role = static_cast<BufferRole>(role);
    p.buffer.index = r.u32();
    p.bytes = r.u64();
    uint8_t written = r.u8();
    if (written > 1) return false;
    p.written = written == 1;
  }
  k.report.registers = r.i32();
  k.report.spill_store_bytes = r.i32();
  k.report.spill_load_bytes = r.i32();
  k.report.static_smem_bytes = r.i32();
  return r.ok();
}

}  // namespace

std::optional<uint64_t> SizeTerm::at(const std::vector<int64_t>& values) const {
  constexpr __int128 k_limit = __int128{1} << 62;
  if (coef < 0 || divisor < 1) return std::nullopt;
  __int128 v = coef;
  for (uint32_t s : symbols) {
    if (s >= values.size() || values[s] < 0) return std::nullopt;
    v *= values[s];
    if (v > k_limit) return std::nullopt;
  }
  if (v > k_limit) return std::nullopt;
  return static_cast<uint64_t>((v + divisor - 1) / divisor);
}

std::optional<std::vector<uint64_t>> sizes_at(const std::vector<SizeTerm>& terms,
                                              const std::vector<int64_t>& values) {
  std::vector<uint64_t> out;
  for (const SizeTerm& term : terms) {
    auto v = term.at(values);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

std::optional<LaunchShape> launch_at(const LaunchShape& launch, const std::vector<SizeTerm>& grid,
                                     const std::vector<int64_t>& values) {
  LaunchShape out = launch;
  for (size_t d = 0; d < grid.size() && d < 3; ++d) {
    auto v = grid[d].at(values);
    if (!v || *v == 0 || *v > launch.grid[d]) return std::nullopt;
    out.grid[d] = static_cast<uint32_t>(*v);
  }
  return out;
}

Expected<std::vector<void*>> bind_buffers(const KernelArtifact& kernel,
                                          const std::vector<void*>& inputs,
                                          const std::vector<void*>& outputs,
                                          const std::vector<void*>& temporaries) {
  std::vector<void*> pointers;
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const BufferRef& b = kernel.params[i].buffer;
    const std::vector<void*>& list = b.role == BufferRole::input    ? inputs
                                     : b.role == BufferRole::output ? outputs
                                                                    : temporaries;
    if (b.index >= list.size()) {
      const char* role = b.role == BufferRole::input    ? "input"
                         : b.role == BufferRole::output ? "output"
                                                        : "temporary";
      return make_error("kernel '", kernel.name, "' parameter ", std::to_string(i), " names ",
                        role, " #", std::to_string(b.index), " of ",
                        std::to_string(list.size()));
    }
    pointers.push_back(list[b.index]);
  }
  return pointers;
}

std::vector<size_t> binary_owners(const std::vector<KernelArtifact>& kernels) {
  std::vector<size_t> owners(kernels.size());
  // Kernels with a binary of their own, by name; built only when some kernel shares one.
  std::unordered_map<std::string_view, size_t> own;
  bool shared = std::any_of(kernels.begin(), kernels.end(),
                            [](const KernelArtifact& k) { return !k.binary_of.empty(); });
  for (size_t i = 0; i < kernels.size(); ++i) {
    owners[i] = i;
    if (!shared) continue;
    if (kernels[i].binary_of.empty()) {
      own.emplace(kernels[i].name, i);
    } else if (auto it = own.find(kernels[i].binary_of); it != own.end()) {
      owners[i] = it->second;
    }
  }
  return owners;
}

std::string serialize(const Artifact& a) {
  ByteWriter w;
  w.raw(k_magic);
  w.u32(k_artifact_format_version);
  w.str(a.arch);
  w.str(a.precision);
  w.str(a.decision);
  w.str(a.nvrtc_version);
  w.str(a.source);
  w.str(a.log);
  write_strings(w, a.fallbacks);
  write_u64s(w, a.input_bytes);
  write_u64s(w, a.output_bytes);
  write_u64s(w, a.temporary_bytes);
  w.u64(a.workspace_bytes);
  w.u64(a.kernels.size());
  for (const KernelArtifact& k : a.kernels) write_kernel(w, k);
  w.u64(a.bucket.size());
  for (const auto& range : a.bucket) {
    w.i64(range[0]);
    w.i64(range[1]);
  }
  write_terms(w, a.input_sizes);
  write_terms(w, a.output_sizes);
  write_terms(w, a.temporary_sizes);
  for (const KernelArtifact& k : a.kernels) {
    write_terms(w, k.grid);
    w.u32(k.dim_params);
  }
  w.str(a.object);
  for (const KernelArtifact& k : a.kernels) {
    write_terms(w, k.items);
    w.u64(k.scratch_floats);
  }
  for (const KernelArtifact& k : a.kernels) w.str(k.binary_of);
  return w.take();
}

Expected<Artifact> deserialize(std::string_view bytes) {
  Reader r(bytes);
  if (r.raw(k_magic.size()) != k_magic) return make_error("artifact: bad magic");
  uint32_t version = r.u32();
  if (!r.ok()) return make_error("artifact: truncated header");
  if (version != k_artifact_format_version && version != 2 && version != 3) {
    return make_error("artifact: format version ", std::to_string(version), ", expected ",
                      std::to_string(k_artifact_format_version));
  }
  Artifact a;
  a.arch = r.str();
  a.precision = r.str();
  a.decision = r.str();
  a.nvrtc_version = r.str();
  a.source = r.str();
  a.log = r.str();
  a.fallbacks = read_strings(r);
  a.input_bytes = read_u64s(r);
  a.output_bytes = read_u64s(r);
  a.temporary_bytes = read_u64s(r);
  a.workspace_bytes = r.u64();
  // A kernel takes at least 4 strings, 7 u32, a count and 4 i32: 92 bytes.
  a.kernels.resize(r.count(92));
  for (KernelArtifact& k : a.kernels) {
    if (!read_kernel(r, k)) return make_error("artifact: truncated or corrupt kernel record");
  }
  a.bucket.resize(r.count(16));
  for (auto& range : a.bucket) {
    range[0] = r.i64();
    range[1] = r.i64();
    if (range[0] < 1 || range[0] > range[1]) return make_error("artifact: corrupt bucket");
  }
  if (!read_terms(r, a.input_sizes) || !read_terms(r, a.output_sizes) ||
      !read_terms(r, a.temporary_sizes))
    return make_error("artifact: truncated or corrupt size terms");
  for (KernelArtifact& k : a.kernels) {
    if (!read_terms(r, k.grid)) return make_error("artifact: truncated or corrupt kernel grid");
    k.dim_params = r.u32();
  }
  if (version >= 3) {
    a.object = r.str();
    for (KernelArtifact& k : a.kernels) {
      if (!read_terms(r, k.items)) return make_error("artifact: truncated or corrupt work items");
      k.scratch_floats = r.u64();
      // A thread's scratch is allocated before a kernel runs: bound it (256 MiB).
      if (k.scratch_floats > (uint64_t{1} << 26)) return make_error("artifact: corrupt scratch size");
    }
  }
  if (version >= 4) {
    for (KernelArtifact& k : a.kernels) k.binary_of = r.str();
    std::vector<size_t> owners = binary_owners(a.kernels);
    for (size_t i = 0; i < a.kernels.size(); ++i) {
      const KernelArtifact& k = a.kernels[i];
      if (!k.binary_of.empty() && owners[i] == i) {
        return make_error("artifact: kernel ", k.name, " runs the binary of '", k.binary_of,
                          "', not of an earlier kernel with one");
      }
    }
  }
  if (!r.ok()) return make_error("artifact: truncated");
  if (!r.done()) return make_error("artifact: ", std::to_string(r.left()), " trailing bytes");
  return a;
}

}  // namespace kiln::compiler
