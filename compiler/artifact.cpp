// Versioned, bounds-checked binary form of an Artifact.
#include "compiler/artifact.h"

#include "compiler/options.h"
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

// Formats 2 to 4: a kernel's fields in declaration order, pointers only.
bool read_kernel_v4(Reader& r, KernelArtifact& k) {
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

Expected<TensorMapSpec> tensor_map_at(const KernelParam& p, const std::vector<int64_t>& values) {
  auto spec = parse_tensor_map(p.map);
  if (!spec) return spec.error();
  return tensor_map_at(std::move(*spec), p.map_terms, values);
}

Expected<TensorMapSpec> tensor_map_at(TensorMapSpec description, const std::vector<SizeTerm>& terms,
                                      const std::vector<int64_t>& values) {
  if (!terms.empty()) {
    uint32_t rank = description.rank;
    if (rank < 1 || rank > 5 || terms.size() != 2 * size_t{rank} - 1)
      return make_error("tensor map '", to_string(description), "' has ",
                        std::to_string(terms.size()), " size terms where its rank takes ",
                        std::to_string(2 * size_t{rank} - 1));
    auto at = sizes_at(terms, values);
    if (!at) return make_error("tensor map '", to_string(description), "': a size term is out of range");
    for (uint32_t d = 0; d < rank; ++d) description.dims[d] = (*at)[d];
    for (uint32_t d = 0; d + 1 < rank; ++d) description.strides[d] = (*at)[rank + d];
  }
  if (Status legal = check_tensor_map(description); !legal) return legal.error();
  return description;
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

uint32_t param_size(ParamKind kind) {
  switch (kind) {
    case ParamKind::pointer: return 8;
    case ParamKind::dim: return 4;
    case ParamKind::tensor_map: return 128;
  }
  return 8;
}

uint32_t param_align(ParamKind kind) {
  switch (kind) {
    case ParamKind::pointer: return 8;
    case ParamKind::dim: return 4;
    case ParamKind::tensor_map: return 64;
  }
  return 8;
}

uint64_t param_space_bytes(const std::vector<KernelParam>& params) {
  uint64_t bytes = 0;
  for (const KernelParam& p : params) {
    uint64_t align = param_align(p.kind);
    bytes = (bytes + align - 1) / align * align + param_size(p.kind);
  }
  return bytes;
}

KernelParam dim_param(uint32_t symbol) {
  KernelParam p;
  p.kind = ParamKind::dim;
  p.symbol = symbol;
  return p;
}

Expected<std::vector<void*>> bind_buffers(const KernelArtifact& kernel,
                                          const std::vector<void*>& inputs,
                                          const std::vector<void*>& outputs,
                                          const std::vector<void*>& temporaries) {
  std::vector<void*> pointers;
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    if (kernel.params[i].kind == ParamKind::dim) {
      pointers.push_back(nullptr);
      continue;
    }
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

namespace {

// Field numbers of format 5 (append only; never reuse one). k_required marks a field a reader
// must know.
constexpr uint32_t k_required = 0x80000000u;
constexpr uint32_t k_end = 0;  // the last field of an artifact, empty
enum ArtifactField : uint32_t {
  f_arch = 1 | k_required,
  f_precision = 2,
  f_decision = 3,
  f_toolchain = 4,
  f_source = 5,
  f_log = 6,
  f_fallbacks = 7,
  f_input_bytes = 8 | k_required,
  f_output_bytes = 9 | k_required,
  f_temporary_bytes = 10 | k_required,
  f_workspace_bytes = 11 | k_required,
  f_kernel = 12 | k_required,  // one per kernel, in launch order
  f_bucket = 13 | k_required,
  f_input_sizes = 14 | k_required,
  f_output_sizes = 15 | k_required,
  f_temporary_sizes = 16 | k_required,
  f_object = 17 | k_required,
  f_target = 18 | k_required,  // kind u8, sm u32, suffix, cpu, cpu features (strings)
};
enum KernelField : uint32_t {
  k_name = 1 | k_required,
  k_params = 2 | k_required,
  k_entry = 3 | k_required,
  k_cubin = 4 | k_required,
  k_ptx = 5,
  k_launch = 6 | k_required,
  k_report = 7,
  k_binary_of = 8 | k_required,
  k_grid = 9 | k_required,
  k_items = 10 | k_required,
  k_scratch = 11 | k_required,
  k_local_bytes = 12,
  k_tile = 13,
  k_schedule = 14,
  // LaunchShape::persistent. Optional: a reader that skips it launches one block per work tile,
  // which a persistent kernel computes correctly.
  k_persistent = 15,
  // KernelParam::map_terms of a symbolic graph's tensor maps: u64 count, then per map its
  // parameter's index (u32) and its terms. Required: without them a map keeps the bucket's
  // upper bounds at every size.
  k_map_terms = 16 | k_required,
};

class FieldWriter {
public:
  explicit FieldWriter(ByteWriter& w) : m_w(w) {}
  void bytes(uint32_t tag, std::string_view payload) {
    m_w.u32(tag);
    m_w.u64(payload.size());
    m_w.raw(payload);
  }
  // A string field is its bytes; left out when empty (it reads as empty).
  void str(uint32_t tag, std::string_view s) {
    if (!s.empty()) bytes(tag, s);
  }
  template <typename Fill>
  void nested(uint32_t tag, Fill fill) {
    ByteWriter inner;
    fill(inner);
    std::string payload = inner.take();
    bytes(tag, payload);
  }

private:
  ByteWriter& m_w;
};

void write_params(ByteWriter& w, const std::vector<KernelParam>& params) {
  w.u64(params.size());
  for (const KernelParam& p : params) {
    w.u8(static_cast<uint8_t>(p.kind));
    switch (p.kind) {
      case ParamKind::pointer:
      case ParamKind::tensor_map:
        w.u8(static_cast<uint8_t>(p.buffer.role));
        w.u32(p.buffer.index);
        w.u64(p.bytes);
        w.u8(p.written ? 1 : 0);
        if (p.kind == ParamKind::tensor_map) w.str(p.map);
        break;
      case ParamKind::dim:
        w.u32(p.symbol);
        break;
    }
  }
}

Status read_params(Reader& r, std::vector<KernelParam>& params) {
  params.clear();  // a second parameters field replaces the first, terms included
  params.resize(r.count(5));  // a kind and a symbol at least
  for (KernelParam& p : params) {
    uint8_t kind = r.u8();
    if (kind > static_cast<uint8_t>(ParamKind::tensor_map)) {
      return make_error("artifact: parameter kind ", std::to_string(kind),
                        " is not one this kiln knows (a newer kiln wrote it)");
    }
    p.kind = static_cast<ParamKind>(kind);
    if (p.kind == ParamKind::dim) {
      p.symbol = r.u32();
      continue;
    }
    uint8_t role = r.u8();
    if (role > static_cast<uint8_t>(BufferRole::temporary))
      return make_error("artifact: corrupt parameter");
    p.buffer.role = static_cast<BufferRole>(role);
    p.buffer.index = r.u32();
    p.bytes = r.u64();
    uint8_t written = r.u8();
    if (written > 1) return make_error("artifact: corrupt parameter");
    p.written = written == 1;
    if (p.kind == ParamKind::tensor_map) p.map = r.str();
  }
  return Status::success();
}

void write_kernel(ByteWriter& out, const KernelArtifact& k) {
  FieldWriter f(out);
  f.str(k_name, k.name);
  f.nested(k_params, [&](ByteWriter& w) { write_params(w, k.params); });
  f.str(k_entry, k.entry);
  f.str(k_binary_of, k.binary_of);
  f.str(k_cubin, k.binary_of.empty() ? std::string_view(k.cubin) : std::string_view());
  f.str(k_ptx, k.binary_of.empty() ? std::string_view(k.ptx) : std::string_view());
  if (k.launch != LaunchShape{}) {
    f.nested(k_launch, [&](ByteWriter& w) {
      for (uint32_t g : k.launch.grid) w.u32(g);
      for (uint32_t b : k.launch.block) w.u32(b);
      w.u32(k.launch.dynamic_smem_bytes);
      for (uint32_t c : k.launch.cluster) w.u32(c);
    });
  }
  if (k.report != KernelReport{}) {
    f.nested(k_report, [&](ByteWriter& w) {
      w.i32(k.report.registers);
      w.i32(k.report.spill_store_bytes);
      w.i32(k.report.spill_load_bytes);
      w.i32(k.report.static_smem_bytes);
    });
  }
  f.str(k_tile, k.tile);
  f.str(k_schedule, k.schedule);
  if (k.launch.persistent) f.nested(k_persistent, [&](ByteWriter& w) { w.u32(1); });
  if (k.report.local_bytes != 0) {
    f.nested(k_local_bytes, [&](ByteWriter& w) { w.i32(k.report.local_bytes); });
  }
  if (!k.grid.empty()) f.nested(k_grid, [&](ByteWriter& w) { write_terms(w, k.grid); });
  if (!k.items.empty()) f.nested(k_items, [&](ByteWriter& w) { write_terms(w, k.items); });
  if (k.scratch_floats) f.nested(k_scratch, [&](ByteWriter& w) { w.u64(k.scratch_floats); });
  size_t maps = std::count_if(k.params.begin(), k.params.end(),
                              [](const KernelParam& p) { return !p.map_terms.empty(); });
  if (maps) {
    f.nested(k_map_terms, [&](ByteWriter& w) {
      w.u64(maps);
      for (size_t i = 0; i < k.params.size(); ++i) {
        if (k.params[i].map_terms.empty()) continue;
        w.u32(static_cast<uint32_t>(i));
        write_terms(w, k.params[i].map_terms);
      }
    });
  }
}

// Calls `field(tag, payload reader)` for each field of `bytes`; the payload must be consumed
// exactly. An unknown tag is skipped unless it is required. With `terminated`, the fields end with
// an empty field of tag 0 and nothing follows it (so a cut at a field's end is not mistaken for
// an artifact without the later fields); kernel records are framed by their field instead.
template <typename OnField>
Status read_fields(std::string_view bytes, const char* what, bool terminated, OnField on_field) {
  Reader r(bytes);
  while (r.ok() && !r.done()) {
    uint32_t tag = r.u32();
    uint64_t length = r.u64();
    if (!r.ok() || length > r.left()) return make_error("artifact: truncated ", what);
    if (terminated && tag == k_end) {
      if (length != 0) return make_error("artifact: corrupt end of ", what);
      if (!r.done()) return make_error("artifact: ", std::to_string(r.left()), " trailing bytes");
      return Status::success();
    }
    Reader payload(r.raw(static_cast<size_t>(length)));
    Error error;
    int known = on_field(tag, payload, error);  // 1 read, 0 not known here, -1 failed
    if (known < 0) return error;
    if (known == 0) {
      if (tag & k_required) {
        return make_error("artifact: ", what, " field ", std::to_string(tag & ~k_required),
                          " is required but not one this kiln knows (a newer kiln wrote it)");
      }
      continue;
    }
    if (!payload.ok())
      return make_error("artifact: truncated or corrupt ", what, " field ",
                        std::to_string(tag & ~k_required));
    if (!payload.done())
      return make_error("artifact: ", what, " field ", std::to_string(tag & ~k_required), " has ",
                        std::to_string(payload.left()), " trailing bytes");
  }
  if (!r.ok() || terminated) return make_error("artifact: truncated ", what);
  return Status::success();
}

std::string rest(Reader& r) { return std::string(r.raw(r.left())); }
// A field callback's failure: `error` set, -1 returned (read_fields' protocol).
int failed(Error& error, Error e) {
  error = std::move(e);
  return -1;
}
std::string_view rest_view(Reader& r) { return r.raw(r.left()); }

// Reads one kernel record into `k` (a new element of the artifact's kernels).
Status read_kernel(std::string_view bytes, KernelArtifact& k) {
  bool named = false;
  Status s = read_fields(bytes, "kernel", false, [&](uint32_t tag, Reader& r, Error& error) -> int {
    switch (tag) {
      case k_name: k.name = rest(r); named = true; return 1;
      case k_params:
        if (Status p = read_params(r, k.params); !p) return failed(error, p.error());
        return 1;
      case k_entry: k.entry = rest(r); return 1;
      case k_cubin: k.cubin = rest(r); return 1;
      case k_ptx: k.ptx = rest(r); return 1;
      case k_launch:
        for (uint32_t& g : k.launch.grid) g = r.u32();
        for (uint32_t& b : k.launch.block) b = r.u32();
        k.launch.dynamic_smem_bytes = r.u32();
        for (uint32_t& c : k.launch.cluster) c = r.u32();
        return 1;
      case k_report:
        k.report.registers = r.i32();
        k.report.spill_store_bytes = r.i32();
        k.report.spill_load_bytes = r.i32();
        k.report.static_smem_bytes = r.i32();
        return 1;
      case k_local_bytes: k.report.local_bytes = r.i32(); return 1;
      case k_tile: k.tile = rest(r); return 1;
      case k_schedule: k.schedule = rest(r); return 1;
      case k_persistent: k.launch.persistent = r.u32() == 1; return 1;
      case k_binary_of: k.binary_of = rest(r); return 1;
      case k_grid:
        if (!read_terms(r, k.grid))
          return failed(error, make_error("artifact: corrupt kernel grid"));
        return 1;
      case k_items:
        if (!read_terms(r, k.items))
          return failed(error, make_error("artifact: corrupt work items"));
        return 1;
      case k_map_terms: {
        // After k_params (write_kernel's order): each entry names a tensor-map parameter.
        size_t maps = r.count(12);  // an index and a term count at least
        for (size_t m = 0; m < maps && r.ok(); ++m) {
          uint32_t i = r.u32();
          if (!r.ok() || i >= k.params.size() || k.params[i].kind != ParamKind::tensor_map ||
              !k.params[i].map_terms.empty() || !read_terms(r, k.params[i].map_terms) ||
              k.params[i].map_terms.empty())
            return failed(error, make_error("artifact: corrupt tensor-map terms"));
        }
        return 1;
      }
      case k_scratch:
        k.scratch_floats = r.u64();
        // A thread's scratch is allocated before a kernel runs: bound it (256 MiB).
        if (k.scratch_floats > (uint64_t{1} << 26))
          return failed(error, make_error("artifact: corrupt scratch size"));
        return 1;
    }
    return 0;
  });
  if (!s) return s;
  if (!named || k.name.empty()) return make_error("artifact: a kernel record without a name");
  return Status::success();
}

// How many fields of tag `tag` the fields of `bytes` hold (a bound for reserving; a damaged
// frame just ends the count).
size_t count_fields(std::string_view bytes, uint32_t tag) {
  Reader r(bytes);
  size_t n = 0;
  while (r.ok() && !r.done()) {
    uint32_t t = r.u32();
    uint64_t length = r.u64();
    if (!r.ok() || length > r.left()) break;
    r.raw(static_cast<size_t>(length));
    n += t == tag;
  }
  return n;
}

// binary_owners(), refusing a binary_of that names no earlier kernel with a binary of its own.
Expected<std::vector<size_t>> checked_owners(const std::vector<KernelArtifact>& kernels) {
  std::vector<size_t> owners = binary_owners(kernels);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelArtifact& k = kernels[i];
    if (!k.binary_of.empty() && owners[i] == i) {
      return make_error("artifact: kernel ", k.name, " runs the binary of '", k.binary_of,
                        "', not of an earlier kernel with one");
    }
  }
  return owners;
}

// The suffix decides where the kernels may load (Target::arch_specific): only one this kiln
// plans, and on a CUDA artifact the same as its arch's (every format: one derived from the arch,
// as formats 2 to 4 have it, must name the arch back).
Status check_target(const Artifact& a) {
  if (Status s = check_suffix(a.target); !s) return make_error("artifact: ", s.error().message);
  if (a.target.kind == Target::Kind::cuda && a.arch != a.target.arch()) {
    if (a.target.arch().empty())  // formats 2 to 4: an arch that names no CUDA arch
      return make_error("artifact: arch ", a.arch.substr(0, 32), " names no CUDA arch");
    return make_error("artifact: arch ", a.arch.substr(0, 32), " is not its target's (",
                      a.target.arch(), ")");
  }
  return Status::success();
}

// Formats 2 to 4, fields in declaration order; their `dim_params` count becomes dim parameters.
Expected<Artifact> deserialize_v4(Reader& r, uint32_t version) {
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
    if (!read_kernel_v4(r, k)) return make_error("artifact: truncated or corrupt kernel record");
    if (k.name.empty()) return make_error("artifact: a kernel record without a name");
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
    uint32_t dims = r.u32();
    if (dims > 4096) return make_error("artifact: corrupt dims count");
    for (uint32_t d = 0; d < dims; ++d) k.params.push_back(dim_param(d));
  }
  if (version >= 3) {
    a.object = r.str();
    for (KernelArtifact& k : a.kernels) {
      if (!read_terms(r, k.items)) return make_error("artifact: truncated or corrupt work items");
      k.scratch_floats = r.u64();
      // A thread's scratch is allocated before a kernel runs: bound it (256 MiB).
      if (k.scratch_floats > (uint64_t{1} << 26))
        return make_error("artifact: corrupt scratch size");
    }
  }
  if (version >= 4) {
    for (KernelArtifact& k : a.kernels) k.binary_of = r.str();
    if (auto owners = checked_owners(a.kernels); !owners) return owners.error();
  }
  if (!r.ok()) return make_error("artifact: truncated");
  if (!r.done()) return make_error("artifact: ", std::to_string(r.left()), " trailing bytes");
  a.target = target_of_arch(a.arch);
  if (Status s = check_target(a); !s) return s.error();
  return a;
}

}  // namespace

Target target_of_arch(std::string_view arch) {
  if (arch.substr(0, 4) == "cpu:") return Target::for_cpu(std::string(arch.substr(4)), "");
  if (arch.substr(0, 8) == "emulate:")
    if (auto t = parse_target(arch); t) return *t;
  auto target = parse_arch(arch);
  return target ? *target : Target::cuda(0);
}

std::string serialize(const Artifact& a) {
  ByteWriter w;
  w.raw(k_magic);
  w.u32(k_artifact_format_version);
  FieldWriter f(w);
  f.bytes(f_arch, a.arch);
  f.str(f_precision, a.precision);
  f.str(f_decision, a.decision);
  f.str(f_toolchain, a.nvrtc_version);
  f.str(f_source, a.source);
  f.str(f_log, a.log);
  if (!a.fallbacks.empty())
    f.nested(f_fallbacks, [&](ByteWriter& b) { write_strings(b, a.fallbacks); });
  f.nested(f_input_bytes, [&](ByteWriter& b) { write_u64s(b, a.input_bytes); });
  f.nested(f_output_bytes, [&](ByteWriter& b) { write_u64s(b, a.output_bytes); });
  f.nested(f_temporary_bytes, [&](ByteWriter& b) { write_u64s(b, a.temporary_bytes); });
  f.nested(f_workspace_bytes, [&](ByteWriter& b) { b.u64(a.workspace_bytes); });
  for (const KernelArtifact& k : a.kernels)
    f.nested(f_kernel, [&](ByteWriter& b) { write_kernel(b, k); });
  if (!a.bucket.empty()) {
    f.nested(f_bucket, [&](ByteWriter& b) {
      b.u64(a.bucket.size());
      for (const auto& range : a.bucket) {
        b.i64(range[0]);
        b.i64(range[1]);
      }
    });
  }
  if (!a.input_sizes.empty())
    f.nested(f_input_sizes, [&](ByteWriter& b) { write_terms(b, a.input_sizes); });
  if (!a.output_sizes.empty())
    f.nested(f_output_sizes, [&](ByteWriter& b) { write_terms(b, a.output_sizes); });
  if (!a.temporary_sizes.empty())
    f.nested(f_temporary_sizes, [&](ByteWriter& b) { write_terms(b, a.temporary_sizes); });
  f.str(f_object, a.object);
  f.nested(f_target, [&](ByteWriter& b) {
    b.u8(static_cast<uint8_t>(a.target.kind));
    b.u32(static_cast<uint32_t>(a.target.sm));
    b.str(a.target.suffix);
    b.str(a.target.cpu);
    b.str(a.target.cpu_features);
  });
  f.bytes(k_end, {});
  return w.take();
}

Expected<Artifact> deserialize(std::string_view bytes) {
  Reader r(bytes);
  if (r.raw(k_magic.size()) != k_magic) return make_error("artifact: bad magic");
  uint32_t version = r.u32();
  if (!r.ok()) return make_error("artifact: truncated header");
  if (version >= 2 && version <= 4) return deserialize_v4(r, version);
  if (version != k_artifact_format_version) {
    return make_error("artifact: format version ", std::to_string(version), ", expected ",
                      std::to_string(k_artifact_format_version),
                      version > k_artifact_format_version ? " (a newer kiln wrote it)" : "");
  }
  Artifact a;
  bool has_arch = false, has_target = false;
  std::string_view fields = r.raw(r.left());
  a.kernels.reserve(count_fields(fields, f_kernel));
  auto on_field = [&](uint32_t tag, Reader& f, Error& error) -> int {
    switch (tag) {
      case f_arch: a.arch = rest(f); has_arch = true; return 1;
      case f_precision: a.precision = rest(f); return 1;
      case f_decision: a.decision = rest(f); return 1;
      case f_toolchain: a.nvrtc_version = rest(f); return 1;
      case f_source: a.source = rest(f); return 1;
      case f_log: a.log = rest(f); return 1;
      case f_fallbacks: a.fallbacks = read_strings(f); return 1;
      case f_input_bytes: a.input_bytes = read_u64s(f); return 1;
      case f_output_bytes: a.output_bytes = read_u64s(f); return 1;
      case f_temporary_bytes: a.temporary_bytes = read_u64s(f); return 1;
      case f_workspace_bytes: a.workspace_bytes = f.u64(); return 1;
      case f_kernel:
        if (Status k = read_kernel(rest_view(f), a.kernels.emplace_back()); !k)
          return failed(error, k.error());
        return 1;
      case f_bucket:
        a.bucket.resize(f.count(16));
        for (auto& range : a.bucket) {
          range[0] = f.i64();
          range[1] = f.i64();
          if (f.ok() && (range[0] < 1 || range[0] > range[1]))
            return failed(error, make_error("artifact: corrupt bucket"));
        }
        return 1;
      case f_input_sizes:
        if (!read_terms(f, a.input_sizes))
          return failed(error, make_error("artifact: corrupt size terms"));
        return 1;
      case f_output_sizes:
        if (!read_terms(f, a.output_sizes))
          return failed(error, make_error("artifact: corrupt size terms"));
        return 1;
      case f_temporary_sizes:
        if (!read_terms(f, a.temporary_sizes))
          return failed(error, make_error("artifact: corrupt size terms"));
        return 1;
      case f_object: a.object = rest(f); return 1;
      case f_target: {
        uint8_t kind = f.u8();
        if (kind > static_cast<uint8_t>(Target::Kind::emulate))
          return failed(error, make_error("artifact: target kind ", std::to_string(kind),
                            " is not one this kiln knows (a newer kiln wrote it)"));
        a.target.kind = static_cast<Target::Kind>(kind);
        uint32_t sm = f.u32();
        if (sm > 10000) return failed(error, make_error("artifact: corrupt target"));
        a.target.sm = static_cast<int>(sm);
        a.target.suffix = f.str();
        a.target.cpu = f.str();
        a.target.cpu_features = f.str();
        has_target = true;
        return 1;
      }
    }
    return 0;
  };
  if (Status s = read_fields(fields, "artifact", true, on_field); !s) return s.error();
  if (!has_arch) return make_error("artifact: no arch");
  if (!has_target) a.target = target_of_arch(a.arch);
  if (Status s = check_target(a); !s) return s.error();
  // A kernel running another's binary holds copies of it (the record stores it once).
  auto owners = checked_owners(a.kernels);
  if (!owners) return owners.error();
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    size_t of = (*owners)[i];
    if (of == i) continue;
    a.kernels[i].cubin = a.kernels[of].cubin;
    a.kernels[i].ptx = a.kernels[of].ptx;
  }
  return a;
}

}  // namespace kiln::compiler
