// The compiler's entry points: lower a graph to CUDA source, compile it with NVRTC.
//
// check_request(): check_arch, check_bucket -> resolve_precision -> plan_attention (once)
// lower():   fuse -> plan_kernels -> schedule_cuda -> emit_kernel (text only, no NVRTC)
// compile(): lower(), then NVRTC on a pool of threads, one program per kernel
#pragma once

#include "compiler/artifact.h"
#include "compiler/emit.h"
#include "compiler/key.h"
#include "compiler/options.h"
#include "compiler/plan.h"
#include "compiler/precision.h"
#include "compiler/request.h"
#include "compiler/schedule.h"
#include "compiler/sizes.h"
#include "ir/graph.h"

#include <string>
#include <vector>

namespace kiln::compiler {

// The target-independent passes' result: the graph bound at its bucket's upper bounds and its
// extents, the precision plan, the attentions run unfused, and the kernels' buffer plan.
struct PlannedProgram {
  ir::Graph bound;
  Sizes sizes;
  PrecisionPlan precision;
  Diagnostics diagnostics;  // the request's
  ProgramPlan plan;
};

// bind -> fuse -> plan_kernels on a checked request (its precision and attention plans): the
// target-free plan, shared by the CUDA target (lower(), which schedules it with schedule_cuda)
// and the CPU target (compiler/cpu). Errors are the caller's to fix, as lower()'s.
Expected<PlannedProgram> plan_program(const ir::Graph& graph, const CompileRequest& request);

// A graph lowered to kernel sources for one arch and mode.
struct LoweredProgram {
  Target target;  // the CUDA arch its kernels are for (also an emulate target's kernels)
  std::vector<DimRange> bucket;  // symbolic graphs: the bucket compiled (options.bucket)
  PrecisionPlan precision;
  Diagnostics diagnostics;  // the request's: fallbacks (precision, then unfused attentions)
  ProgramPlan plan;
  std::vector<std::string> kernel_sources;  // per kernel, without the prelude
};

// Runs every pass up to CUDA text for a checked request; loads no library. Errors are the
// caller's to fix (exit 2 in the CLI): a plan the arch cannot launch. A symbolic graph is planned
// at the bucket's upper bounds; its kernels take the symbols' values as parameters and serve
// every size of the bucket.
// `schedule`: where matmul kernels get their tiles (compile() and compile_emulated() pass
// request.options.schedule, else the heuristic; the key names a schedule that chooses tiles).
Expected<LoweredProgram> lower(const ir::Graph& graph, const CompileRequest& request,
                               const ScheduleProvider& schedule = heuristic_schedule());
// check_request() then lower(): its errors too (an arch kiln does not know, a precision the arch
// cannot run without an allowed fallback, an attention that cannot be fused under a refusing
// fusion_fallback policy, a symbolic graph without a bucket of its dims or a static one with one).
Expected<LoweredProgram> lower(const ir::Graph& graph, const CompileOptions& options);

// The whole program's text: kernels in launch order, after the prelude unless omitted.
std::string program_source(const LoweredProgram& program, Prelude prelude);

// For each kernel, the first kernel whose source is the same but for the kernel's name (itself
// when there is none).
std::vector<size_t> same_source_as(const LoweredProgram& program);

// Compiles a lowered program: each kernel is its own NVRTC program (prelude + kernel), compiled
// in parallel (options.threads / KILN_COMPILE_THREADS), except a kernel whose source another's
// repeats but for the name: that one compiles once and the other runs its binary
// (KernelArtifact::binary_of). Fails (exit 1 in the CLI) when NVRTC cannot be loaded or a kernel
// does not compile; the error carries NVRTC's log.
Expected<Artifact> compile_lowered(const LoweredProgram& program, const CompileOptions& options);

// The fields of an Artifact every CUDA-kernel target fills the same way from a lowered program:
// precision, decision, fallbacks, buffer sizes, bucket and size terms (no arch, no kernels).
Artifact program_artifact(const LoweredProgram& program);

// The emulate target's artifact (Target::Kind::emulate; a request for another target is refused):
// lower() without NVRTC. Its kernels carry entry names, parameters, launch shapes and grid terms
// and no binary; `source` is the kernel text without the prelude, which the emulator builds for
// the host when it loads the program.
Expected<Artifact> compile_emulated(const ir::Graph& graph, const CompileRequest& request);

// lower() then compile_lowered().
Expected<Artifact> compile(const ir::Graph& graph, const CompileRequest& request);
Expected<Artifact> compile(const ir::Graph& graph, const CompileOptions& options);

}  // namespace kiln::compiler
