// Pass: turns kernel groups into kernel plans (buffers, parameters, tile, launch shape).
#pragma once

#include "compiler/artifact.h"
#include "compiler/fusion.h"
#include "compiler/precision.h"
#include "compiler/tile.h"

#include <string>
#include <vector>

namespace kiln::compiler {

struct KernelPlan {
  KernelGroup group;
  std::string name;   // "k0_matmul_tf32", also the entry point with "kiln_" before it
  MatmulShape shape;  // matmul kernels
  MatmulTile tile;    // matmul kernels
  LaunchShape launch;
  std::vector<KernelParam> params;  // stores first, then reads, each buffer once
  int sm = 0;
  // The parameter index holding node `id`'s value (a read), or -1.
  int param_of(const std::vector<BufferRef>& location, ir::NodeId id) const;
};

struct ProgramPlan {
  std::vector<KernelPlan> kernels;
  std::vector<BufferRef> location;  // per node id: where its value lives (roots and inputs)
  std::vector<uint64_t> input_bytes, output_bytes, temporary_bytes;
  uint64_t workspace_bytes = 0;
};

// Assigns every group's value a buffer (graph output, else a temporary), orders parameters,
// picks matmul tiles and launch shapes. Fails only for launches beyond the grid limits.
Expected<ProgramPlan> plan_kernels(const ir::Graph& graph, const std::vector<KernelGroup>& groups,
                                   const PrecisionPlan& precision, int sm);

}  // namespace kiln::compiler
