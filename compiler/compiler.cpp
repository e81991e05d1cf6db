// The lowering pipeline, read top to bottom, and the parallel NVRTC step.
#include "compiler/compiler.h"

#include "compiler/cubin_report.h"
#include "compiler/fusion.h"
#include "compiler/nvrtc.h"
#include "compiler/pool.h"
#include "compiler/prelude.h"
#include "compiler/sizes.h"
#include "compiler/target.h"

#include <mutex>
#include <unordered_map>

namespace kiln::compiler {

Expected<PlannedProgram> plan_program(const ir::Graph& graph, const CompileRequest& request) {
  std::vector<int64_t> upper;
  for (const DimRange& range : request.options.bucket) upper.push_back(range.hi);
  auto bound = graph.bind(upper);
  if (!bound) return bound.error();
  std::vector<KernelGroup> groups = fuse(*bound, k_max_kernel_reads, request.attention.fused);
  Sizes sizes(graph, request.options.bucket);
  auto plan = plan_kernels(*bound, groups, request.precision, sizes);
  if (!plan) return plan.error();
  return PlannedProgram{std::move(*bound), std::move(sizes), request.precision,
                        request.diagnostics, std::move(*plan)};
}

Expected<LoweredProgram> lower(const ir::Graph& graph, const CompileRequest& request,
                               const ScheduleProvider& schedule) {
  auto planned = plan_program(graph, request);
  if (!planned) return planned.error();
  // The CUDA arch the kernels are for, its suffix with it (an emulate target's kernels too).
  Target cuda = Target::cuda(request.sm);
  cuda.suffix = request.options.target.suffix;
  if (Status s = schedule_cuda(planned->bound, planned->plan, cuda, planned->sizes, schedule); !s)
    return s.error();
  LoweredProgram program;
  program.target = cuda;
  program.bucket = request.options.bucket;
  program.precision = std::move(planned->precision);
  program.diagnostics = std::move(planned->diagnostics);
  program.plan = std::move(planned->plan);
  for (const KernelPlan& kernel : program.plan.kernels) {
    program.kernel_sources.push_back(
        emit_kernel(planned->bound, program.plan, kernel, planned->sizes));
  }
  return program;
}

Expected<LoweredProgram> lower(const ir::Graph& graph, const CompileOptions& options) {
  auto request = check_request(graph, options);
  if (!request) return request.error();
  return lower(graph, *request);
}

std::string program_source(const LoweredProgram& program, Prelude prelude) {
  std::string text;
  if (prelude == Prelude::include) text += prelude_source();
  for (const std::string& kernel : program.kernel_sources) text += "\n" + kernel;
  return text;
}

std::vector<size_t> same_source_as(const LoweredProgram& program) {
  const auto& kernels = program.plan.kernels;
  std::unordered_map<std::string, size_t> first;
  std::vector<size_t> out;
  for (size_t i = 0; i < kernels.size(); ++i) {
    // The name appears in the entry point and the kernel's comment; a byte that no kernel text
    // holds stands in for it.
    std::string text = program.kernel_sources[i];
    const std::string& name = kernels[i].name;
    for (size_t at = text.find(name); !name.empty() && at != std::string::npos;
         at = text.find(name, at + 1))
      text.replace(at, name.size(), "\x01");
    out.push_back(first.emplace(std::move(text), i).first->second);
  }
  return out;
}

Artifact program_artifact(const LoweredProgram& program) {
  Artifact artifact;
  artifact.precision = std::string(ir::to_string(program.precision.graph_mode));
  artifact.decision = program.precision.decision;
  artifact.fallbacks = program.diagnostics.fallbacks;
  artifact.input_bytes = program.plan.input_bytes;
  artifact.output_bytes = program.plan.output_bytes;
  artifact.temporary_bytes = program.plan.temporary_bytes;
  artifact.workspace_bytes = program.plan.workspace_bytes;
  for (const DimRange& range : program.bucket) artifact.bucket.push_back({range.lo, range.hi});
  artifact.input_sizes = program.plan.input_sizes;
  artifact.output_sizes = program.plan.output_sizes;
  artifact.temporary_sizes = program.plan.temporary_sizes;
  return artifact;
}

namespace {

// Where `plan`'s launch configuration came from: a matmul's or an attention's tile and its
// schedule provider, else the analytic model.
void set_schedule(KernelArtifact& k, const KernelPlan& plan) {
  bool matmul = plan.group.kind == GroupKind::matmul;
  bool attention = plan.group.kind == GroupKind::attention;
  k.schedule = matmul || attention ? plan.tile_source : "model";
  if (matmul) k.tile = to_string(plan.tile);
  if (attention) k.tile = to_string(plan.attention_tile);
}

}  // namespace

namespace {

// The schedule a request names, else the heuristic.
const ScheduleProvider& schedule_of(const CompileRequest& request) {
  return request.options.schedule ? *request.options.schedule : heuristic_schedule();
}

}  // namespace

Expected<Artifact> compile_emulated(const ir::Graph& graph, const CompileRequest& request) {
  // Its artifact names the emulate target, which its bytes must agree with (deserialize checks).
  if (!request.options.target.is_emulated())
    return make_error("compile_emulated: the request is for ", request.options.target.name(),
                      ", not an emulate target");
  auto program = lower(graph, request, schedule_of(request));
  if (!program) return program.error();
  Artifact artifact = program_artifact(*program);
  artifact.target = request.options.target;
  artifact.arch = artifact.target.name();
  artifact.nvrtc_version = "host emulation of CUDA (built when loaded)";
  artifact.source = program_source(*program, Prelude::omit);
  for (const KernelPlan& plan : program->plan.kernels) {
    KernelArtifact k;
    k.name = plan.name;
    k.entry = entry_name(plan);
    k.params = plan.params;
    k.launch = plan.launch;
    k.grid = plan.grid;
    set_schedule(k, plan);
    artifact.kernels.push_back(std::move(k));
  }
  return artifact;
}

Expected<Artifact> compile_lowered(const LoweredProgram& program, const CompileOptions& options) {
  auto nvrtc = load_nvrtc(options.nvrtc_path);
  if (!nvrtc) return nvrtc.error();
  if (Status s = check_arch(program.target.sm, (*nvrtc)->archs()); !s) {
    return make_error("nvrtc ", (*nvrtc)->version(), ": ", s.error().message);
  }
  const auto& kernels = program.plan.kernels;
  // A kernel whose source is another's but for the name (a layer's Q, K and V projections, its
  // two norms) is not compiled again: it runs that kernel's binary.
  std::vector<size_t> binary_of = same_source_as(program);
  std::vector<size_t> compiled;
  for (size_t i = 0; i < kernels.size(); ++i)
    if (binary_of[i] == i) compiled.push_back(i);
  std::vector<Expected<NvrtcOutput>> outputs(kernels.size(), Error{"not compiled"});
  std::string prelude(prelude_source());
  // Kernels an earlier compile kept on disk (KILN_KERNEL_CACHE_DIR) are not compiled again.
  std::shared_ptr<KernelStore> store = KernelStore::from_environment();
  std::mutex progress;
  size_t done = 0;
  parallel_for(compiled.size(), compile_threads(options.threads), [&](size_t c) {
    size_t i = compiled[c];
    std::string source = prelude + "\n" + program.kernel_sources[i];
    const std::string& arch = program.target.arch();
    std::string key = kernel_key((*nvrtc)->identity(), arch, kernels[i].name, source);
    auto run = [&]() -> Expected<NvrtcOutput> {
      if (store) {
        if (std::optional<NvrtcOutput> kept = store->load(key)) return std::move(*kept);
      }
      Expected<NvrtcOutput> out = (*nvrtc)->compile(source, kernels[i].name, arch);
      if (out && store) store->save(key, *out);
      return out;
    };
    outputs[i] = options.kernel_memo ? options.kernel_memo->get(key, run) : run();
    if (!options.on_kernel_done) return;
    std::lock_guard lock(progress);
    options.on_kernel_done(++done, compiled.size());
  });

  Artifact artifact = program_artifact(program);
  artifact.target = program.target;
  artifact.arch = program.target.arch();
  artifact.nvrtc_version = (*nvrtc)->version() + " (" + (*nvrtc)->identity() + ")";
  artifact.source = program_source(program, Prelude::include);
  for (size_t i = 0; i < kernels.size(); ++i) {
    KernelArtifact k;
    k.name = kernels[i].name;
    k.launch = kernels[i].launch;
    set_schedule(k, kernels[i]);
    k.params = kernels[i].params;
    k.grid = kernels[i].grid;
    if (size_t of = binary_of[i]; of != i) {
      const KernelArtifact& original = artifact.kernels[of];
      k.binary_of = original.name;
      k.entry = original.entry;
      k.cubin = original.cubin;
      k.ptx = original.ptx;
      k.report = original.report;
      artifact.log += "== " + k.name + "\n(the binary of " + original.name + ")\n";
      artifact.kernels.push_back(std::move(k));
      continue;
    }
    if (!outputs[i]) return outputs[i].error();
    NvrtcOutput& out = *outputs[i];
    k.entry = entry_name(kernels[i]);
    k.cubin = std::move(out.cubin);
    k.ptx = std::move(out.ptx);
    std::string note;
    k.report = kernel_report(k.cubin, k.entry, out.log, note);
    if (!note.empty()) {
      out.log += std::string(out.log.empty() || out.log.back() == '\n' ? "" : "\n") + note + "\n";
    }
    artifact.log +=
        "== " + k.name + "\n" + out.log + (out.log.empty() || out.log.back() == '\n' ? "" : "\n");
    artifact.kernels.push_back(std::move(k));
  }
  return artifact;
}

Expected<Artifact> compile(const ir::Graph& graph, const CompileRequest& request) {
  auto program = lower(graph, request, schedule_of(request));
  if (!program) return program.error();
  return compile_lowered(*program, request.options);
}

Expected<Artifact> compile(const ir::Graph& graph, const CompileOptions& options) {
  auto request = check_request(graph, options);
  if (!request) return request.error();
  return compile(graph, *request);
}


}  // namespace kiln::compiler
