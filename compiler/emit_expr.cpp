// Emission of the per-element part of a kernel: leaf loads, fused elementwise ops, stores.
#include "compiler/emit_internal.h"
#include "ir/scalar.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace kiln::compiler::detail {

std::string to_str(int64_t v) { return std::to_string(v); }

std::string storage_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32:
      return "float";
    case ir::DType::bf16:
      return "kiln_bf16";
    case ir::DType::f16:
      return "kiln_f16";
    case ir::DType::i32:
      return "int";
    case ir::DType::i64:
      return "long long";
    case ir::DType::boolean:
      return "unsigned char";
  }
  return "float";
}

std::string load_as_float(ir::DType dtype, const std::string& element) {
  switch (dtype) {
    case ir::DType::f32:
      return element;
    case ir::DType::bf16:
      return "kiln_bf16_to_float(" + element + ")";
    case ir::DType::f16:
      return "kiln_f16_to_float(" + element + ")";
    case ir::DType::i32:
    case ir::DType::i64:
      return "(float)(" + element + ")";
    case ir::DType::boolean:
      return "(" + element + " ? 1.0f : 0.0f)";
  }
  return element;
}

std::string KernelContext::param(ir::NodeId id) const {
  int p = kernel.param_of(plan.location, id);
  assert(p >= 0);
  return "p" + std::to_string(p);
}

namespace {

// The element type of each parameter's buffer: the root's for stores, the value's for reads
// (the anchor's operands and the leaves, the only values a kernel reads).
std::vector<ir::DType> param_dtypes(const KernelContext& ctx) {
  const KernelGroup& group = ctx.kernel.group;
  std::vector<ir::DType> dtypes(ctx.kernel.params.size(), ir::DType::f32);
  for (ir::NodeId id : kernel_reads(ctx.graph, group)) {
    int p = ctx.kernel.param_of(ctx.plan.location, id);
    if (p >= 0) dtypes[static_cast<size_t>(p)] = ctx.graph.node(id).type.dtype;
  }
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (ctx.kernel.params[i].written) dtypes[i] = ctx.graph.node(group.root).type.dtype;
  }
  // A split-K matmul's partial products are fp32.
  if (ctx.kernel.partial_param >= 0)
    dtypes[static_cast<size_t>(ctx.kernel.partial_param)] = ir::DType::f32;
  return dtypes;
}

}  // namespace

std::string literal(double value) {
  if (std::isinf(value)) return value > 0 ? "kiln_as_float(0x7f800000u)" : "kiln_as_float(0xff800000u)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(static_cast<float>(value)));
  return std::string("(") + buf + "f)";
}

std::string round_to(ir::DType dtype, const std::string& expr) {
  switch (dtype) {
    case ir::DType::f32:
      return expr;
    case ir::DType::bf16:
      return "kiln_round_bf16(" + expr + ")";
    case ir::DType::f16:
      return "kiln_round_f16(" + expr + ")";
    case ir::DType::i32:
    case ir::DType::i64:
    case ir::DType::boolean:
      return expr;
  }
  return expr;
}

std::string unary(ir::OpKind kind, const std::string& x) {
  CudaText m;
  return ir::unary_formula(m, kind, CudaText::Value{x}).text;
}

std::string binary(ir::OpKind kind, const std::string& a, const std::string& b) {
  CudaText m;
  return ir::binary_formula(m, kind, CudaText::Value{a}, CudaText::Value{b}).text;
}

std::string param_list(const KernelContext& ctx) {
  std::string list;
  std::vector<ir::DType> dtypes = param_dtypes(ctx);
  for (size_t i = 0; i < ctx.kernel.params.size(); ++i) {
    const KernelParam& p = ctx.kernel.params[i];
    if (i) list += ", ";
    switch (p.kind) {
      case ParamKind::pointer:
        list += (p.written ? "" : "const ") + storage_type(dtypes[i]) + "* __restrict__ p" +
                std::to_string(i);
        break;
      case ParamKind::dim:
        list += "int " + std::string(k_dim_param) + std::to_string(p.symbol);
        break;
      case ParamKind::tensor_map:
        list += "const __grid_constant__ CUtensorMap p" + std::to_string(i);
        break;
    }
  }
  return list;
}

std::string kernel_signature(const KernelContext& ctx, int threads, int min_blocks) {
  std::string bounds = std::to_string(threads);
  if (min_blocks > 0) bounds += ", " + std::to_string(min_blocks);
  return "extern \"C\" __global__ void __launch_bounds__(" + bounds + ") kiln_" + ctx.kernel.name +
         "(" + param_list(ctx) + ") {";
}

void emit_coords(Code& code, const std::vector<Extent>& dims, const std::string& linear,
                 ElementIndex& index) {
  // An expression is parenthesised: it meets % and / below.
  bool name = std::all_of(linear.begin(), linear.end(),
                          [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  std::string rest = name ? linear : "(" + linear + ")";
  auto rank = static_cast<int>(dims.size());
  index.coords.assign(dims.size(), "");
  for (int d = rank - 1; d >= 0; --d) {
    std::string c = "c" + to_str(d);
    std::string dim = dims[static_cast<size_t>(d)].expr();
    if (d == 0) {
      code.line("const int " + c + " = " + rest + ";");
    } else {
      code.line("const int " + c + " = " + rest + " % " + dim + ";");
      code.line("const int r" + to_str(d) + " = " + rest + " / " + dim + ";");
      rest = "r" + to_str(d);
    }
    index.coords[static_cast<size_t>(d)] = c;
  }
}

std::vector<Extent> dims_of(const KernelContext& ctx, ir::NodeId id) {
  std::vector<Extent> dims;
  for (int d = 0; d < ctx.graph.node(id).type.shape.rank(); ++d) dims.push_back(ctx.sizes.dim(id, d));
  return dims;
}

std::string batch_coord(const MatmulExtents& e, int d) {
  int last = static_cast<int>(e.batch_dims.size()) - 1;
  std::string q = d == last ? "bz" : "(bz / " + batch_dims_after(e, d).expr() + ")";
  return d == 0 ? q : "(" + q + " % " + e.batch_dims[static_cast<size_t>(d)].expr() + ")";
}

std::string batch_offset(const MatmulExtents& e, const std::vector<Extent>& strides,
                         int64_t group) {
  std::string text;
  for (size_t d = 0; d < strides.size(); ++d) {
    if (!strides[d].coef) continue;
    std::string c = batch_coord(e, static_cast<int>(d));
    if (group > 1 && d + 1 == strides.size()) c = "(" + c + " / " + to_str(group) + ")";
    text += " + " + c + " * " + strides[d].expr();
  }
  return text;
}

void emit_batch_operands(Code& code, const KernelContext& ctx, const std::string& gtype) {
  const MatmulExtents& s = ctx.kernel.extents;
  const ir::Node& mm = ctx.graph.node(ctx.kernel.group.anchor);
  int rank = mm.type.shape.rank();
  // Only batched kernels name the batch: an unused variable is an NVRTC warning. A split-K
  // partials kernel's z is batch * splits + split.
  int splits = ctx.kernel.split == SplitRole::partials ? ctx.kernel.tile.split_k : 1;
  // z, or past the grid's limit the index emit_block_origin folds out of y and z
  std::string z = ctx.kernel.folded_rows > 0 ? "bzs" : "(int)blockIdx.z";
  if (splits > 1) code.line("const int split = " + z + " % " + to_str(splits) + ";");
  if (rank >= 3)
    code.line("const int bz = " + (splits > 1 ? z + " / " + to_str(splits) : z) + ";");
  // A 4-D result's batch index is (bz / inner, bz % inner); a 3-D one's is bz.
  auto offset = [&](const Extent& outer, const Extent& inner) {
    std::string text;
    std::string b = rank == 4 ? "(bz % " + s.inner_batch.expr() + ")" : "bz";
    if (inner.coef) text += " + " + b + " * " + inner.expr();
    if (outer.coef) text += " + (bz / " + s.inner_batch.expr() + ") * " + outer.expr();
    return text;
  };
  if (s.per_dim()) {
    code.line("const " + gtype + "* A = " + ctx.param(mm.operands[0]) +
              batch_offset(s, s.a_dim_strides) + ";");
    code.line("const " + gtype + "* B = " + ctx.param(mm.operands[1]) +
              batch_offset(s, s.b_dim_strides) + ";");
    return;
  }
  code.line("const " + gtype + "* A = " + ctx.param(mm.operands[0]) +
            offset(s.a_outer_stride, s.a_batch_stride) + ";");
  code.line("const " + gtype + "* B = " + ctx.param(mm.operands[1]) +
            offset(s.b_outer_stride, s.b_batch_stride) + ";");
}

ElementIndex matmul_output_index(const KernelContext& ctx) {
  const KernelPlan& k = ctx.kernel;
  const MatmulExtents& s = k.extents;
  ElementIndex index;
  int rank = ctx.graph.node(k.group.root).type.shape.rank();
  if (s.per_dim()) {
    for (int d = 0; d < rank - 2; ++d) index.coords.push_back(batch_coord(s, d));
    index.coords.push_back("m");
    index.coords.push_back("n");
    index.linear = "(bz * " + s.m.expr() + " + m) * " + s.n.expr() + " + n";
  } else if (rank == 4) {
    index.coords = {"(bz / " + s.inner_batch.expr() + ")", "(bz % " + s.inner_batch.expr() + ")",
                    "m", "n"};
    index.linear = "(bz * " + s.m.expr() + " + m) * " + s.n.expr() + " + n";
  } else if (rank == 3) {
    index.coords = {"bz", "m", "n"};
    index.linear = "(bz * " + s.m.expr() + " + m) * " + s.n.expr() + " + n";
  } else {
    index.coords = {"m", "n"};
    index.linear = "m * " + s.n.expr() + " + n";
  }
  return index;
}

void emit_store(Code& code, const KernelContext& ctx, const std::string& value,
                const std::string& linear) {
  std::string stored = store_value(ctx.graph.node(ctx.kernel.group.root).type.dtype, value);
  for (size_t i = 0; i < ctx.kernel.params.size(); ++i) {
    if (ctx.kernel.params[i].written)
      code.line("p" + to_str(static_cast<int64_t>(i)) + "[" + linear + "] = " + stored + ";");
  }
}

}  // namespace kiln::compiler::detail
