// Tuning records and the tuner (runtime/tuning.h).
#include "runtime/tuning.h"

#include "cache/key.h"
#include "compiler/compiler.h"
#include "compiler/key.h"
#include "compiler/nvrtc.h"
#include "compiler/request.h"
#include "compiler/sizes.h"
#include "compiler/target.h"
#include "reference/metrics.h"
#include "reference/tensor.h"
#include "runtime/compile_service.h"
#include "runtime/context.h"
#include "runtime/executable_impl.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <new>
#include <set>
#include <thread>

namespace kiln::runtime {

namespace {

using nlohmann::json;

constexpr double k_max_candidate_rel_l2 = 1e-6;
// Inputs and outputs together, at the sizes tuned (drawn as doubles on the host first: 8 GiB).
constexpr uint64_t k_max_tuning_elements = uint64_t{1} << 30;
// A candidate replaces the model's tile only when its median is this much shorter: less is
// within the noise of a median of a few runs.
constexpr double k_min_gain = 0.01;

json tile_json(const compiler::KernelTile& t) { return compiler::to_string(t); }

Expected<compiler::KernelTile> tile_from(const json& j, const char* what) {
  if (!j.is_string()) return make_error("tuning record: ", what, " is not a tile");
  auto tile = compiler::parse_kernel_tile(j.get<std::string>());
  if (!tile) return make_error("tuning record: ", what, " '", j.get<std::string>(),
                               "' is not a tile");
  return *tile;
}

std::string today_utc() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
}

std::string format_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", ms);
  return text;
}

// Whether two tiles of `problem` sum in the same order. A matmul's: the same ranges of K, cut
// at the same tiles (the mmas' own order does not depend on the tile), and for tf32x3, whose
// per-tile partial sums are added to the accumulator tile by tile, the same K tiles. An
// attention's: the same key tile (the online softmax rescales its sums and rounds P against the
// running max once per key tile; warps and stages change neither) on the same design: sm_90a's
// wgmma kernel and the mma.sync kernel are not shown to agree bit for bit, and at head dims over
// 128 both take 64-key tiles.
bool same_order(const TuningProblem& problem, const compiler::KernelTile& x,
                const compiler::KernelTile& y) {
  if (const auto* shape = std::get_if<compiler::MatmulShape>(&problem.shape)) {
    const auto& a = std::get<compiler::MatmulTile>(x);
    const auto& b = std::get<compiler::MatmulTile>(y);
    if (a.split_k != b.split_k) return false;
    return (a.split_k == 1 && shape->path != compiler::MatmulPath::tf32x3) || a.bk == b.bk;
  }
  const auto& a = std::get<compiler::AttentionTile>(x);
  const auto& b = std::get<compiler::AttentionTile>(y);
  return a.bc == b.bc && a.wgmma == b.wgmma;
}

// The unit roundoff of a float dtype (2^-8 bf16, 2^-11 f16, 2^-24 f32); 1 for the others.
double unit_roundoff(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::bf16: return 0x1p-8;
    case ir::DType::f16: return 0x1p-11;
    case ir::DType::f32: return 0x1p-24;
    default: return 1.0;
  }
}

// The unit roundoff of what `problem`'s products round to: a matmul's own dtype (bf16, f16 or
// f32: a split's partial products are exact, their sums are not); an attention's P, rounded to
// the path's operand format against a running max that differs with the key tile (bf16 2^-8,
// f16 and tf32 2^-11; fp32 for tf32x3 and FFMA).
double product_unit(const TuningProblem& problem) {
  const auto* shape = std::get_if<compiler::AttentionShape>(&problem.shape);
  if (!shape) return unit_roundoff(problem.product);
  using compiler::MatmulPath;
  if (shape->path == MatmulPath::bf16 || shape->path == MatmulPath::bf16_of_f32) return 0x1p-8;
  if (shape->path == MatmulPath::f16 || shape->path == MatmulPath::tf32) return 0x1p-11;
  return unit_roundoff(ir::DType::f32);
}

// The most a candidate's output may differ from the model tile's: k_max_candidate_rel_l2 where
// they sum in the same order (same_order). A candidate that splits K otherwise (or, for tf32x3,
// cuts K into other tiles), or an attention's candidate with another key tile, adds its partial
// sums in another order, and a value may round differently wherever the product or the output
// is rounded: up to about a unit in the last place of the coarser of the products'
// (product_unit) and the output's dtype, with f32 taken as 1e-5 (a K of tens of thousands) and
// an integer or bool output as 1e-2 (a flip of one somewhere). A wrong kernel misses by far more.
double max_candidate_rel_l2(double product_unit, ir::DType output, bool same_order) {
  if (same_order) return k_max_candidate_rel_l2;
  double unit = std::max(product_unit, unit_roundoff(output));
  if (unit >= 1.0) return 1e-2;
  return std::max(unit, 1e-5);
}

// Relative L2 difference of two outputs in device layout.
double rel_l2(const ir::TensorType& type, const std::vector<unsigned char>& got,
              const std::vector<unsigned char>& want) {
  return reference::relative_l2(reference::load_device_bytes(type, got.data()),
                                reference::load_device_bytes(type, want.data()));
}

// CUDA events around runs on the legacy stream of the device's primary context.
class EventTimer {
public:
  static Expected<EventTimer> create(const DriverApi& api, int device) {
    auto scope = ScopedContext::for_device(api, device, nullptr);
    if (!scope) return scope.error();
    EventTimer t(api, device);
    if (auto r = api.event_create(&t.m_start, 0); r != 0) return driver_error(api, "cuEventCreate", r);
    if (auto r = api.event_create(&t.m_end, 0); r != 0) return driver_error(api, "cuEventCreate", r);
    return t;
  }
  EventTimer(EventTimer&& o) noexcept : m_api(o.m_api), m_device(o.m_device), m_start(o.m_start),
                                        m_end(o.m_end) {
    o.m_start = o.m_end = nullptr;
  }
  EventTimer& operator=(EventTimer&&) = delete;
  ~EventTimer() {
    if (!m_start && !m_end) return;
    auto scope = ScopedContext::for_device(*m_api, m_device, nullptr);
    if (!scope) return;
    if (m_start) m_api->event_destroy(m_start);
    if (m_end) m_api->event_destroy(m_end);
  }
  // Milliseconds `run` takes on the device.
  Expected<double> time(const std::function<Status()>& run) {
    {
      auto scope = ScopedContext::for_device(*m_api, m_device, nullptr);
      if (!scope) return scope.error();
      if (auto r = m_api->event_record(m_start, nullptr); r != 0)
        return driver_error(*m_api, "cuEventRecord", r);
    }
    if (Status s = run(); !s) return s.error();
    auto scope = ScopedContext::for_device(*m_api, m_device, nullptr);
    if (!scope) return scope.error();
    if (auto r = m_api->event_record(m_end, nullptr); r != 0)
      return driver_error(*m_api, "cuEventRecord", r);
    if (auto r = m_api->event_synchronize(m_end); r != 0)
      return driver_error(*m_api, "cuEventSynchronize", r);
    float ms = 0;
    if (auto r = m_api->event_elapsed_time(&ms, m_start, m_end); r != 0)
      return driver_error(*m_api, "cuEventElapsedTime", r);
    return static_cast<double>(ms);
  }

private:
  EventTimer(const DriverApi& api, int device) : m_api(&api), m_device(device) {}
  const DriverApi* m_api;
  int m_device;
  CuEvent m_start = nullptr, m_end = nullptr;
};

// The graph's inputs and outputs on the device, at the sizes `graph` (bound) has.
struct Buffers {
  std::vector<DeviceBuffer> memory;
  std::vector<TensorRef> inputs, outputs;
  std::vector<ir::TensorType> output_types;
};

Expected<Buffers> make_buffers(const ir::Graph& bound, int device) {
  Buffers b;
  std::vector<reference::Tensor> values = reference::random_inputs(bound, 20261126);
  auto add = [&](const ir::TensorType& type, const reference::Tensor* value,
                 std::vector<TensorRef>& refs) -> Status {
    size_t bytes = std::max<size_t>(type.bytes(), 1);
    auto buffer = DeviceBuffer::allocate(bytes, device);
    if (!buffer) return buffer.error();
    if (value) {
      std::vector<unsigned char> host(bytes);
      reference::store_device_bytes(*value, host.data());
      if (Status s = buffer->upload(host.data(), host.size()); !s) return s;
    }
    refs.push_back({buffer->data(), type.dtype, type.shape.dims()});
    b.memory.push_back(std::move(*buffer));
    return Status::success();
  };
  for (size_t i = 0; i < bound.inputs().size(); ++i)
    if (Status s = add(bound.node(bound.inputs()[i]).type, &values[i], b.inputs); !s)
      return s.error();
  for (ir::NodeId id : bound.outputs()) {
    const ir::TensorType& type = bound.node(id).type;
    if (Status s = add(type, nullptr, b.outputs); !s) return s.error();
    b.output_types.push_back(type);
  }
  return b;
}

Expected<std::vector<std::vector<unsigned char>>> download(const Buffers& b) {
  std::vector<std::vector<unsigned char>> out;
  for (size_t i = 0; i < b.outputs.size(); ++i) {
    std::vector<unsigned char> host(b.output_types[i].bytes());
    const DeviceBuffer& buffer = b.memory[b.inputs.size() + i];
    if (Status s = buffer.download(host.data(), host.size()); !s) return s.error();
    out.push_back(std::move(host));
  }
  return out;
}

}  // namespace

std::string encode_record(const TuningRecord& r) {
  json candidates = json::array();
  for (const CandidateTime& c : r.candidates) {
    json j = {{"tile", tile_json(c.tile)}, {"status", c.status}};
    if (c.median_ms >= 0) j["median_ms"] = c.median_ms;
    candidates.push_back(std::move(j));
  }
  json j = {{"signature", r.signature}, {"kernel", r.kernel},   {"arch", r.arch},
            {"device", r.device},       {"date", r.date},       {"repeats", r.repeats},
            {"winner", tile_json(r.winner)}, {"model", tile_json(r.model)},
            {"candidates", std::move(candidates)}};
  return j.dump();
}

Expected<TuningRecord> decode_record(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return make_error("tuning record: not a JSON object");
  TuningRecord r;
  for (auto [name, out] : {std::pair{"signature", &r.signature}, {"kernel", &r.kernel},
                           {"arch", &r.arch}, {"device", &r.device}, {"date", &r.date}}) {
    if (!j.contains(name) || !j[name].is_string())
      return make_error("tuning record: '", name, "' is missing or not a string");
    *out = j[name].get<std::string>();
  }
  if (!j.contains("repeats") || !j["repeats"].is_number_integer())
    return make_error("tuning record: 'repeats' is missing or not an integer");
  r.repeats = j["repeats"].get<int>();
  auto winner = tile_from(j.value("winner", json()), "winner");
  if (!winner) return winner.error();
  r.winner = *winner;
  auto model = tile_from(j.value("model", json()), "model");
  if (!model) return model.error();
  r.model = *model;
  if (!j.contains("candidates") || !j["candidates"].is_array())
    return make_error("tuning record: 'candidates' is missing or not a list");
  for (const json& c : j["candidates"]) {
    if (!c.is_object()) return make_error("tuning record: a candidate is not an object");
    auto tile = tile_from(c.value("tile", json()), "a candidate's tile");
    if (!tile) return tile.error();
    CandidateTime t;
    t.tile = *tile;
    if (!c.contains("status") || !c["status"].is_string())
      return make_error("tuning record: a candidate's status is missing");
    t.status = c["status"].get<std::string>();
    if (c.contains("median_ms")) {
      if (!c["median_ms"].is_number()) return make_error("tuning record: a median is not a number");
      t.median_ms = c["median_ms"].get<double>();
    }
    r.candidates.push_back(std::move(t));
  }
  return r;
}

std::vector<cache::KeyField> tuning_fields(const std::string& signature,
                                           const DeviceIdentity& device, const std::string& arch,
                                           const std::string& nvrtc_version) {
  std::vector<cache::KeyField> fields = {
      {"tuning", signature},
      {"arch", arch},
      {"device", device.text()},
      {"nvrtc_version", nvrtc_version},
      {"codegen_version", std::string(compiler::codegen_version())},
  };
  cache::sort_fields(fields);
  return fields;
}

namespace {

// The problem kernel `k` of a plan computes, and its signature; nullopt for a kernel whose
// launch configuration no schedule chooses.
std::optional<TuningProblem> problem_of(const compiler::KernelPlan& k, const ir::Graph& bound,
                                        bool symbolic, const compiler::Target& target) {
  TuningProblem p;
  p.kernel = k.name;
  p.symbolic = symbolic;
  if (k.group.kind == compiler::GroupKind::matmul) {
    p.shape = k.shape;
    p.signature = compiler::problem_signature(k.shape);
    p.wgmma = compiler::wgmma_plans(bound, k, target);
  } else if (k.group.kind == compiler::GroupKind::attention) {
    p.shape = k.attention_shape;
    p.signature = compiler::problem_signature(k.attention_shape);
    p.wgmma = compiler::wgmma_attention_plans(bound, k, target, symbolic);
  } else {
    return std::nullopt;
  }
  p.product = bound.node(k.group.anchor).type.dtype;
  return p;
}

// The candidates of `problem` on `sm`, the model's tile among them, and whether a tile is legal.
std::vector<compiler::KernelTile> candidates_of(const TuningProblem& problem, int sm) {
  std::vector<compiler::KernelTile> out;
  if (const auto* shape = std::get_if<compiler::MatmulShape>(&problem.shape)) {
    for (const compiler::MatmulTile& t : compiler::candidate_tiles(*shape, sm))
      // A symbolic graph's kernels run unsplit whatever the tile says: its split candidates
      // would time the unsplit kernel again under another name. A tile whose grid CUDA cannot
      // launch even folded (launch_fits) is none.
      if ((!problem.symbolic || t.split_k == 1) && compiler::launch_fits(t, *shape))
        out.push_back(t);
    if (problem.wgmma)
      for (const compiler::MatmulTile& t : compiler::wgmma_candidates(*shape)) out.push_back(t);
  } else {
    const auto& attention = std::get<compiler::AttentionShape>(problem.shape);
    for (const compiler::AttentionTile& t : compiler::attention_candidates(attention, sm))
      out.push_back(t);
    if (problem.wgmma) out.push_back(compiler::choose_wgmma_attention_tile(attention));
  }
  return out;
}

compiler::KernelTile model_of(const TuningProblem& problem, int sm) {
  if (const auto* shape = std::get_if<compiler::MatmulShape>(&problem.shape)) {
    if (problem.wgmma && compiler::wgmma_fills(*shape)) return compiler::choose_wgmma_tile(*shape);
    compiler::MatmulTile tile = compiler::choose_tile(*shape, sm);
    if (problem.symbolic) tile.split_k = 1;
    return tile;
  }
  const auto& attention = std::get<compiler::AttentionShape>(problem.shape);
  if (problem.wgmma && compiler::wgmma_attention_by_model(attention))
    return compiler::choose_wgmma_attention_tile(attention);
  return compiler::choose_attention_tile(attention, sm);
}

Status check_tile_of(const compiler::KernelTile& tile, const TuningProblem& problem, int sm) {
  if (const auto* shape = std::get_if<compiler::MatmulShape>(&problem.shape)) {
    const auto* t = std::get_if<compiler::MatmulTile>(&tile);
    if (!t) return make_error("its tile ", compiler::to_string(tile), " is not a matmul's");
    if (t->wgmma) {
      if (!problem.wgmma)
        return make_error("its tile ", compiler::to_string(tile), " is the wgmma kernel's, which "
                          "does not compute this problem here");
      return compiler::check_wgmma_tile(*t, *shape);
    }
    return compiler::check_tile(*t, *shape, sm);
  }
  const auto& shape = std::get<compiler::AttentionShape>(problem.shape);
  const auto* t = std::get_if<compiler::AttentionTile>(&tile);
  if (!t) return make_error("its tile ", compiler::to_string(tile), " is not an attention's");
  if (t->wgmma) {
    if (!problem.wgmma)
      return make_error("its tile ", compiler::to_string(tile), " is the wgmma attention "
                        "kernel's, which does not compute this problem here");
    return compiler::check_wgmma_attention_tile(compiler::complete_attention_tile(*t, shape), shape);
  }
  // The record holds the choice (queries, keys, warps, stages); the rest follows from the problem.
  return compiler::check_attention_tile(compiler::complete_attention_tile(*t, shape), shape, sm);
}

}  // namespace

Expected<std::vector<TuningProblem>> tuning_problems(const ir::Graph& graph,
                                                     const compiler::CompileOptions& options) {
  auto request = compiler::check_request(graph, options);
  if (!request) return request.error();
  auto planned = compiler::plan_program(graph, *request);
  if (!planned) return planned.error();
  std::vector<TuningProblem> out;
  std::set<std::string> seen;
  for (const compiler::KernelPlan& k : planned->plan.kernels) {
    auto problem = problem_of(k, planned->bound, planned->sizes.symbolic(), options.target);
    if (!problem) continue;
    if (seen.insert(problem->signature).second) {
      out.push_back(std::move(*problem));
      continue;
    }
    // Kernels of one signature share a record: its wgmma tiles are timed where any computes them.
    for (TuningProblem& p : out)
      if (p.signature == problem->signature) p.wgmma = p.wgmma || problem->wgmma;
  }
  return out;
}

TunedTiles tuned_tiles(cache::Cache& cache, const DeviceIdentity& device, const std::string& arch,
                       const std::string& nvrtc_version) {
  TunedTiles tiles;
  tiles.device = device;
  tiles.arch = arch;
  tiles.nvrtc_version = nvrtc_version;
  auto entries = cache.list_where({"device", device.text()});
  if (!entries) return tiles;
  std::string codegen(compiler::codegen_version());
  for (const cache::EntryInfo& e : *entries) {
    if (e.field("arch") != arch || e.field("nvrtc_version") != nvrtc_version ||
        e.field("codegen_version") != codegen || e.field("tuning").empty())
      continue;
    tiles.keys[e.field("tuning")] = e.key;
  }
  return tiles;
}

std::optional<TunedTiles> device_tiles(cache::Cache& cache, int device,
                                       const compiler::Target& target,
                                       const std::string& nvrtc_path, bool probe) {
  if (probe) {
    auto any = cache.has_field("tuning");
    if (!any || !*any) return std::nullopt;
  }
  auto identity = device_identity(device);
  auto nvrtc = compiler::nvrtc_identity(nvrtc_path);
  if (!identity || !nvrtc || identity->sm != target.sm || target.on_host()) return std::nullopt;
  return tuned_tiles(cache, *identity, target.arch(), *nvrtc);
}

namespace {

bool is_date(const std::string& text) {
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') return false;
  for (size_t i = 0; i < text.size(); ++i)
    if (i != 4 && i != 7 && (text[i] < '0' || text[i] > '9')) return false;
  return true;
}

// The tile record `key` gives `problem` on `sm`, checked (tuned_schedule).
Expected<compiler::ChosenTile> read_record(cache::Cache& cache, const TunedTiles& tiles,
                                           const TuningProblem& problem, const std::string& key,
                                           int sm) {
  const std::string& signature = problem.signature;
  std::vector<cache::KeyField> fields =
      tuning_fields(signature, tiles.device, tiles.arch, tiles.nvrtc_version);
  if (cache::make_key(fields) != key) return make_error("its key is not this problem's");
  cache::Lookup found =
      cache.lookup(key, fields, cache::PayloadSelection::only({k_payload_tuning}));
  if (!found.hit()) return make_error(found.failure.empty() ? "not found" : found.failure);
  const cache::Payload* payload = found.entry.find_payload(k_payload_tuning);
  if (!payload) return make_error("it has no '", k_payload_tuning, "' payload");
  if (payload->bytes.size() > k_max_tuning_record_bytes)
    return make_error("its payload is ", std::to_string(payload->bytes.size()),
                      " bytes, over the ", std::to_string(k_max_tuning_record_bytes), " a record may be");
  auto record = decode_record(payload->bytes);
  if (!record) return record.error();
  if (record->signature != signature) return make_error("it names another problem");
  if (record->device != tiles.device.text() || record->arch != tiles.arch)
    return make_error("it names another device or arch (", record->device, ", ", record->arch, ")");
  if (!is_date(record->date)) return make_error("its date is not a date");
  bool timed = false;
  for (const CandidateTime& c : record->candidates)
    timed = timed || (c.status == "ok" && compiler::same_tile(c.tile, record->winner));
  if (!timed) return make_error("its winner is not one of its candidates that timed ok");
  if (Status legal = check_tile_of(record->winner, problem, sm); !legal) return legal.error();
  return compiler::ChosenTile{record->winner, record->source()};
}

}  // namespace

Expected<std::shared_ptr<const compiler::ScheduleProvider>> tuned_schedule(
    const ir::Graph& graph, const compiler::CompileOptions& options, cache::Cache& cache,
    TunedTiles& tiles, const std::function<void(const std::string&)>& warn) {
  std::shared_ptr<const compiler::ScheduleProvider> none;
  if (tiles.empty() || options.target.on_host()) return none;
  auto request = compiler::check_request(graph, options);
  if (!request) return request.error();
  auto planned = compiler::plan_program(graph, *request);
  if (!planned) return planned.error();
  std::map<std::string, compiler::ChosenTile> chosen;
  std::map<std::string, std::string> names;  // every kernel of a problem with a record
  for (const compiler::KernelPlan& k : planned->plan.kernels) {
    auto problem = problem_of(k, planned->bound, planned->sizes.symbolic(), options.target);
    if (!problem) continue;
    const std::string& signature = problem->signature;
    auto it = tiles.keys.find(signature);
    if (it == tiles.keys.end()) continue;
    // A record's tile holds for a problem or not by its signature and whether the wgmma kernel
    // computes it (which the signature does not say: a result's rank, a symbolic graph).
    std::string verdict = signature + (problem->wgmma ? " wgmma" : "");
    auto checked = tiles.checked.find(verdict);
    if (checked == tiles.checked.end()) {
      checked = tiles.checked
                    .emplace(verdict,
                             read_record(cache, tiles, *problem, it->second, options.target.sm))
                    .first;
      if (!checked->second && warn)
        warn("tuning record " + it->second + " (" + signature + ") not used: " +
             checked->second.error().message);
    }
    if (!checked->second) continue;
    chosen[signature] = *checked->second;
    const auto* matmul = std::get_if<compiler::MatmulTile>(&checked->second->tile);
    if (!matmul) {
      const auto& attention = std::get<compiler::AttentionTile>(checked->second->tile);
      names[compiler::cuda_kernel_name(k.name, attention)] = checked->second->source;
      continue;
    }
    // A symbolic graph runs the record's tile unsplit (schedule_cuda), under that name.
    compiler::MatmulTile runs = *matmul;
    if (planned->sizes.symbolic()) runs.split_k = 1;
    std::string name = compiler::cuda_kernel_name(k.name, runs);
    names[name] = checked->second->source;
    if (runs.split_k > 1) names[name + "_sum"] = checked->second->source;
  }
  if (chosen.empty()) return none;
  auto schedule = std::make_shared<compiler::ChosenSchedule>(std::move(chosen));
  schedule->kernel_sources = std::move(names);
  return std::shared_ptr<const compiler::ScheduleProvider>(std::move(schedule));
}

Expected<std::vector<TuningRecord>> tune_graph(const ir::Graph& graph,
                                               const compiler::CompileOptions& options,
                                               cache::Cache* cache, const TuneOptions& tune) {
  if (!!options.target.on_host())
    return make_error("tuning needs a CUDA target, not ", options.target.name());
  if (tune.repeats < 5) return make_error("tuning needs at least 5 timed runs per candidate");
  auto identity = device_identity(tune.device);
  if (!identity) return identity.error();
  if (identity->sm != options.target.sm) {
    return make_error("CUDA device ", std::to_string(tune.device), " (", identity->name, ") is ",
                      compiler::arch_name(identity->sm), ": tuning for ",
                      options.target.arch(), " needs a device of that arch (or give --arch ",
                      compiler::device_target(identity->sm).arch(), ")");
  }
  auto nvrtc = compiler::nvrtc_identity(options.nvrtc_path);
  if (!nvrtc) return nvrtc.error();
  auto driver = load_driver();  // loaded by device_identity
  if (!driver) return driver.error();
  const DriverApi& api = **driver;
  auto timer = EventTimer::create(api, tune.device);
  if (!timer) return timer.error();

  auto problems = tuning_problems(graph, options);
  if (!problems) return problems.error();
  // The sizes the tiles are timed at: a symbolic graph's bucket at its upper bounds.
  std::vector<int64_t> upper;
  for (const compiler::DimRange& range : options.bucket) upper.push_back(range.hi);
  auto bound = graph.bind(upper);
  if (!bound) return bound.error();
  // The inputs are drawn on the host as doubles first: a bound on what that may take.
  uint64_t elements = 0;
  for (ir::NodeId id : bound->inputs()) elements += bound->node(id).type.shape.elements();
  for (ir::NodeId id : bound->outputs()) elements += bound->node(id).type.shape.elements();
  if (elements > k_max_tuning_elements)
    return make_error("the graph's inputs and outputs hold ", std::to_string(elements),
                      " elements at the sizes tuned, over the ",
                      std::to_string(k_max_tuning_elements), " the tuner takes; give smaller --dims");
  Expected<Buffers> buffers = Error{""};
  try {
    buffers = make_buffers(*bound, tune.device);
  } catch (const std::bad_alloc&) {
    return make_error("out of host memory drawing the graph's inputs (", std::to_string(elements),
                      " elements)");
  }
  if (!buffers) return buffers.error();
  auto say = [&](const std::string& line) {
    if (tune.progress) tune.progress(line);
  };

  // Compiles `graph` with `chosen` (nothing: the model's tiles) and times it: its outputs and
  // median milliseconds.
  struct Timed {
    double median_ms = -1;
    std::vector<std::vector<unsigned char>> outputs;
  };
  // Every candidate compiles the whole graph; the kernels it leaves as they are (the other
  // problems', the other ops') are compiled once for all of them.
  auto memo = std::make_shared<compiler::KernelMemo>();
  auto compile_with = [&](std::map<std::string, compiler::ChosenTile> chosen)
      -> Expected<CompileResult> {
    compiler::CompileOptions o = options;
    o.kernel_memo = memo;
    if (!chosen.empty()) o.schedule = std::make_shared<compiler::ChosenSchedule>(std::move(chosen));
    o.threads = 1;  // candidates compile in parallel instead
    return compile_graph(graph, o, cache);
  };
  auto time_result = [&](CompileResult result) -> Expected<Timed> {
    auto exe = make_executable(graph, std::move(result), tune.device);
    if (!exe) return exe.error();
    Executable& e = **exe;
    // Outputs start at zero for every candidate: one that leaves an element unwritten differs
    // from the model tile's there.
    for (size_t o = 0; o < buffers->outputs.size(); ++o) {
      std::vector<unsigned char> zeros(buffers->output_types[o].bytes(), 0);
      if (Status s = buffers->memory[buffers->inputs.size() + o].upload(zeros.data(), zeros.size());
          !s)
        return s.error();
    }
    auto run = [&]() -> Status { return e.run(buffers->inputs, buffers->outputs, nullptr); };
    for (int i = 0; i < tune.warmup; ++i)
      if (Status s = run(); !s) return s.error();
    std::vector<double> times;
    for (int i = 0; i < tune.repeats; ++i) {
      auto ms = timer->time(run);
      if (!ms) return ms.error();
      times.push_back(*ms);
    }
    std::sort(times.begin(), times.end());
    Timed t;
    t.median_ms = times[times.size() / 2];
    auto out = download(*buffers);
    if (!out) return out.error();
    t.outputs = std::move(*out);
    return t;
  };

  std::vector<TuningRecord> records;
  for (const TuningProblem& problem : *problems) {
    const std::string& signature = problem.signature;
    if (!tune.only.empty() &&
        std::find(tune.only.begin(), tune.only.end(), signature) == tune.only.end())
      continue;
    TuningRecord record;
    record.signature = signature;
    record.kernel = problem.kernel;
    record.arch = options.target.arch();
    record.device = identity->text();
    record.date = today_utc();
    record.repeats = tune.repeats;
    record.model = model_of(problem, options.target.sm);
    std::vector<compiler::KernelTile> tiles = candidates_of(problem, options.target.sm);
    say("tuning " + problem.kernel + " (" + signature + "): " + std::to_string(tiles.size()) +
        " candidates");
    // Every candidate compiles first, in parallel (NVRTC is the slow part), through the cache.
    std::vector<Expected<CompileResult>> compiled(tiles.size(), Error{"not compiled"});
    {
      size_t workers = std::max(1u, std::thread::hardware_concurrency());
      if (options.threads > 0) workers = static_cast<size_t>(options.threads);
      workers = std::min(workers, tiles.size());
      std::atomic<size_t> next{0};
      std::vector<std::thread> pool;
      for (size_t w = 0; w < workers; ++w) {
        pool.emplace_back([&] {
          for (size_t i = next++; i < tiles.size(); i = next++)
            compiled[i] = compile_with({{signature, {tiles[i], "tuning candidate"}}});
        });
      }
      for (std::thread& t : pool) t.join();
    }
    // The model's tile is the reference every candidate's outputs must equal.
    size_t model_index = tiles.size();
    for (size_t i = 0; i < tiles.size(); ++i)
      if (compiler::same_tile(tiles[i], record.model)) model_index = i;
    if (model_index == tiles.size())
      return make_error(problem.kernel, ": the model's tile ", compiler::to_string(record.model),
                        " is not among the candidates");
    if (!compiled[model_index])
      return make_error(problem.kernel, ": the model's tile does not compile: ",
                        compiled[model_index].error().message);
    auto reference = time_result(*compiled[model_index]);
    if (!reference)
      return make_error(problem.kernel, ": the model's tile does not run: ",
                        reference.error().message);
    // The fastest candidate, unless it is within k_min_gain of the model's tile.
    double best = reference->median_ms;
    record.winner = record.model;
    for (size_t i = 0; i < tiles.size(); ++i) {
      CandidateTime c;
      c.tile = tiles[i];
      if (i == model_index) {
        c.median_ms = reference->median_ms;
        c.status = "ok";
      } else if (!compiled[i]) {
        c.status = "compile: " + compiled[i].error().message;
      } else if (auto timed = time_result(std::move(*compiled[i])); !timed) {
        c.status = "run: " + timed.error().message;
      } else {
        c.median_ms = timed->median_ms;
        c.status = "ok";
        for (size_t o = 0; o < timed->outputs.size(); ++o) {
          double d = rel_l2(buffers->output_types[o], timed->outputs[o], reference->outputs[o]);
          double most = max_candidate_rel_l2(product_unit(problem), buffers->output_types[o].dtype,
                                             same_order(problem, tiles[i], record.model));
          if (!(d <= most)) {
            char text[96];
            std::snprintf(text, sizeof text, "output %zu differs from the model tile's: rel_l2 %.3g",
                          o, d);
            c.status = text;
            break;
          }
        }
      }
      say("  " + compiler::to_string(c.tile) + ": " +
          (c.status == "ok" ? format_ms(c.median_ms) + " ms" : c.status) +
          (i == model_index ? " (model)" : ""));
      if (c.status == "ok" && c.median_ms < best) {
        best = c.median_ms;
        record.winner = c.tile;
      }
      record.candidates.push_back(std::move(c));
    }
    if (best > reference->median_ms * (1 - k_min_gain)) record.winner = record.model;
    if (cache && cache->enabled()) {
      std::vector<cache::KeyField> fields = tuning_fields(signature, *identity, record.arch, *nvrtc);
      cache::Contents contents;
      json summary = {{"tuning", signature},
                      {"device", record.device},
                      {"winner", compiler::to_string(record.winner)},
                      {"model", compiler::to_string(record.model)},
                      {"date", record.date}};
      contents.summary = summary.dump();
      contents.payloads.push_back({k_payload_tuning, encode_record(record)});
      if (Status s = cache->store(cache::make_key(fields), fields, contents); !s)
        return make_error("storing the tuning record: ", s.error().message);
    }
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace kiln::runtime
