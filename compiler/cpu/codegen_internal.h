// Pieces shared by the CPU kernel builders (not part of the compiler's interface).
#pragma once

#include "compiler/cpu/codegen.h"
#include "compiler/plan.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <cassert>
#include <functional>
#include <map>
#include <vector>

namespace kiln::compiler::cpu::detail {

// Builds one kernel function: void kiln_NAME(void* const* buffers, const int64_t* dims,
// int64_t begin, int64_t end, float* scratch), which computes work items [begin, end). Holds the
// IRBuilder, the function's arguments and the values hoisted to its entry block.
class KernelBuilder {
 public:
  KernelBuilder(llvm::Module& module, const ir::Graph& graph, const ProgramPlan& plan,
                const KernelPlan& kernel, const Sizes& sizes, const CpuFacts& facts);

  llvm::IRBuilder<>& b() { return m_b; }
  llvm::LLVMContext& context() { return m_module.getContext(); }
  llvm::Module& module() { return m_module; }
  llvm::Function* function() { return m_function; }
  const ir::Graph& graph() const { return m_graph; }
  const ProgramPlan& plan() const { return m_plan; }
  const KernelPlan& kernel() const { return m_kernel; }
  const Sizes& sizes() const { return m_sizes; }
  const CpuFacts& facts() const { return m_facts; }

  llvm::Value* begin() const { return m_begin; }
  llvm::Value* end() const { return m_end; }
  llvm::Value* scratch() const { return m_scratch; }

  llvm::Type* f32() { return m_b.getFloatTy(); }
  llvm::Type* i64() { return m_b.getInt64Ty(); }
  llvm::Type* ptr() { return m_b.getPtrTy(); }
  llvm::Value* i64c(int64_t v) { return m_b.getInt64(static_cast<uint64_t>(v)); }
  llvm::Value* f32c(double v);

  // The buffer of parameter p, or the parameter holding node `id`'s value (a read).
  llvm::Value* param(size_t p);
  llvm::Value* param_of(ir::NodeId id);
  // An extent's value: coef times the product of its symbols' values (hoisted).
  llvm::Value* extent(const Extent& e);

  // Element `index` of `base` (elements of dtype) as float, and v rounded and stored there.
  llvm::Value* load_float(ir::DType dtype, llvm::Value* base, llvm::Value* index);
  // Elements [index, index + lanes) as a vector of float (a float when lanes is 1).
  llvm::Value* load_floats(ir::DType dtype, llvm::Value* base, llvm::Value* index, unsigned lanes);
  void store_float(ir::DType dtype, llvm::Value* base, llvm::Value* index, llvm::Value* v);
  // v rounded to dtype and back to float (nothing for f32); these three take vectors too.
  llvm::Value* round_to(ir::DType dtype, llvm::Value* v);
  // The operand rounding a matmul's numerics promise (cvt.rna to tf32, bf16 of f32; nothing
  // otherwise; tf32x3's parts come from split_tf32x3).
  llvm::Value* round_operand(Numerics numerics, llvm::Value* v);
  // The tf32x3 split of v: {big, small}.
  std::pair<llvm::Value*, llvm::Value*> split_tf32x3(llvm::Value* v);
  // v as a packed matmul operand of `numerics` holds it: tf32x3's {big, small}, else
  // {round_operand(v), nullptr}.
  std::pair<llvm::Value*, llvm::Value*> operand_parts(Numerics numerics, llvm::Value* v);
  // v stored as floats at base[at] (a float), or lane i of a vector at base[at + i * stride].
  void store_strided(llvm::Value* v, llvm::Value* base, llvm::Value* at, int64_t stride);

  llvm::Value* unary(ir::OpKind kind, llvm::Value* x);
  llvm::Value* binary(ir::OpKind kind, llvm::Value* a, llvm::Value* c);

  // The typed layer (typed.cpp): values of every dtype, float for the float dtypes (rounded at
  // each value), i32, i64 and i1 (bool) for the others.
  llvm::Type* value_type(ir::DType dtype);
  // Element `index` of `base` as its value type, and a value stored there (bool as a byte 0/1).
  llvm::Value* load_value(ir::DType dtype, llvm::Value* base, llvm::Value* index);
  void store_value(ir::DType dtype, llvm::Value* base, llvm::Value* index, llvm::Value* v);
  // A literal in dtype: float (infinities included), integer or i1.
  llvm::Value* typed_literal(ir::DType dtype, double value);
  // Comparisons, logical ops and integer arithmetic (wrapping) on operands of `dtype`; casts
  // between every pair of dtypes (float -> integer toward zero, saturated, NaN -> 0, as
  // llvm.fptosi.sat; -> bool is != 0; i64 -> i32 keeps the low bits; float -> float is `v`).
  // The ops are those ir::is_exact_op names.
  llvm::Value* exact_binary(ir::OpKind kind, ir::DType dtype, llvm::Value* a, llvm::Value* c);
  llvm::Value* exact_unary(ir::OpKind kind, ir::DType dtype, llvm::Value* x);
  llvm::Value* cast_value(ir::DType from, ir::DType to, llvm::Value* v);
  llvm::Value* max(llvm::Value* a, llvm::Value* c);  // fmaxf (a NaN operand loses)
  // PyTorch's maximum and minimum: NaN when either operand is NaN; floats or vectors.
  llvm::Value* max_nan(llvm::Value* a, llvm::Value* c);
  llvm::Value* min_nan(llvm::Value* a, llvm::Value* c);
  // e^x, tanh and erf as arithmetic (vectorizable), within one ulp; floats or vectors.
  llvm::Value* exp(llvm::Value* x);
  llvm::Value* tanh(llvm::Value* x);
  llvm::Value* erf(llvm::Value* x);
  llvm::Value* fma(llvm::Value* a, llvm::Value* c, llvm::Value* acc);
  // The libm function `name` of `arity` float arguments, declared in the module once.
  llvm::Function* math_function(const char* name, int arity);

  // for (i = lo; i < hi; i += step) body(i): a counted loop; `carried` values are threaded
  // through it (body returns their next values) and their final values returned.
  std::vector<llvm::Value*> loop(llvm::Value* lo, llvm::Value* hi, int64_t step,
                                 std::vector<llvm::Value*> carried,
                                 const std::function<std::vector<llvm::Value*>(
                                     llvm::Value*, const std::vector<llvm::Value*>&)>& body);
  void loop(llvm::Value* lo, llvm::Value* hi, int64_t step,
            const std::function<void(llvm::Value*)>& body);
  // The same loop, kept as written: never vectorized, interleaved or unrolled. For loops whose
  // body is already vectors, and rare paths (a partial edge panel) whose vectorized forms would
  // be masked gathers: compile time spent on code that hardly runs.
  void plain_loop(llvm::Value* lo, llvm::Value* hi, int64_t step,
                  const std::function<void(llvm::Value*)>& body);
  std::vector<llvm::Value*> plain_loop(
      llvm::Value* lo, llvm::Value* hi, int64_t step, std::vector<llvm::Value*> carried,
      const std::function<std::vector<llvm::Value*>(llvm::Value*, const std::vector<llvm::Value*>&)>&
          body);
  // Builds `body` into f (a helper the kernel calls) from a new entry block; loops and
  // conditions made meanwhile go to f, and the builder then returns to its place in the kernel.
  void in_function(llvm::Function* f, const std::function<void()>& body);
  // if (cond) then(); as a block of its own.
  void when(llvm::Value* cond, const std::function<void()>& then);

  // Stores `value` to every written parameter at `linear` (rounded to the root's dtype).
  void store_outputs(llvm::Value* value, llvm::Value* linear);
  void finish();

 private:
  llvm::Module& m_module;
  const ir::Graph& m_graph;
  const ProgramPlan& m_plan;
  const KernelPlan& m_kernel;
  const Sizes& m_sizes;
  const CpuFacts& m_facts;
  llvm::IRBuilder<> m_b;
  llvm::Function* m_function = nullptr;
  llvm::BasicBlock* m_entry = nullptr;  // hoisted loads; branches to the body at finish()
  llvm::Value* m_buffers = nullptr;
  llvm::Value* m_dims = nullptr;
  llvm::Value* m_begin = nullptr;
  llvm::Value* m_end = nullptr;
  llvm::Value* m_scratch = nullptr;
  llvm::Instruction* m_back_edge = nullptr;  // of the loop built last
  void keep_last_loop_plain();  // marks it: no vectorizing, interleaving or unrolling
  std::vector<llvm::Value*> m_params;
  std::map<std::pair<int64_t, std::vector<uint32_t>>, llvm::Value*> m_extents;
};

// A point of some value's index space: per-dim coordinates and/or the row-major index.
struct Point {
  ir::NodeId node = -1;
  std::vector<llvm::Value*> coords;
  llvm::Value* linear = nullptr;
};

// The group's members at the points their consumers read them (compiler/emit_values.cpp's
// ValueEmitter, building IR): layout members move their operands' points, operands broadcast
// by dropping coordinates, leaves are loaded once per point. Returns top's value, with the
// anchor's value `anchor_value`.
llvm::Value* group_value(KernelBuilder& kb, ir::NodeId top, Point point, llvm::Value* anchor_value);

// Node `id`'s dims as extents.
std::vector<Extent> dims_of(const KernelBuilder& kb, ir::NodeId id);
// Coordinates of the element at `linear` of a row-major tensor of `dims`.
std::vector<llvm::Value*> coords_of(KernelBuilder& kb, const std::vector<Extent>& dims,
                                    llvm::Value* linear);
// A 5-D or 6-D result's operand offset (MatmulExtents::per_dim): the sum of each batch
// coordinate times its stride, the last coordinate (the head) divided by `group` when grouped.
llvm::Value* batch_offset(KernelBuilder& kb, const std::vector<llvm::Value*>& coords,
                          const std::vector<Extent>& strides, int64_t group = 1);

// The GEMM's register tile (gemm.cpp): MR rows for the path (fewer for tf32x3, which holds B's
// small halves too), and its micro-kernel, declared in the module once per path:
// void micro(const float* a, const float* b, float* c, i64 ldc, i64 kc, i1 first,
//            const float* a_small, const float* b_small, i64 a_row, i64 a_col, i64 a_rows):
// c[MR][NR] = (first ? 0 : c) + sum_k a(i, k) * b[k][j] for k = 0, 1, ... in turn, one fused
// multiply-add each, with A's element (i, k) at a[min(i, a_rows - 1) * a_row + k * a_col] (a
// packed panel: 1, MR, MR; A itself: lda, 1 and the rows left) and B a packed panel (b[k * NR +
// j]); tf32x3 adds the small-half products first.
int mr_for(MatmulPath path, const CpuFacts& facts);
llvm::Function* micro_kernel(llvm::Module& module, MatmulPath path, const CpuFacts& facts);

// What a kernel body needs to be run: its work items (the product of these terms at the dims)
// and its scratch floats per thread.
struct WorkShape {
  std::vector<SizeTerm> items;
  uint64_t scratch_floats = 0;
};

// Kernel bodies by group kind.
WorkShape build_elementwise(KernelBuilder& kb);
WorkShape build_rows(KernelBuilder& kb);
WorkShape build_matmul(KernelBuilder& kb);
WorkShape build_attention(KernelBuilder& kb);
WorkShape build_gather(KernelBuilder& kb);
// cumsum: one item per row, the running sum carried along it (integers wrap, floats in fp32).
WorkShape build_scan(KernelBuilder& kb);

// ir/scalar.h's Math as LLVM IR, built in call order at the builder's insertion point.
struct LlvmMath {
  using Value = llvm::Value*;
  KernelBuilder& kb;
  llvm::IRBuilder<>& b;

  Value constant(double value, const char*) { return kb.f32c(value); }
  Value add(Value x, Value y) { return b.CreateFAdd(x, y); }
  Value sub(Value x, Value y) { return b.CreateFSub(x, y); }
  Value mul(Value x, Value y) { return b.CreateFMul(x, y); }
  Value div(Value x, Value y) { return b.CreateFDiv(x, y); }
  Value max(Value x, Value y) { return kb.max_nan(x, y); }
  Value min(Value x, Value y) { return kb.min_nan(x, y); }
  Value pow(Value x, Value y) { return b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y); }
  Value neg(Value x) { return b.CreateFNeg(x); }
  Value exp(Value x) { return kb.exp(x); }
  Value erf(Value x) { return kb.erf(x); }
  Value tanh(Value x) { return kb.tanh(x); }
  Value sqrt(Value x) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x); }
  Value abs(Value x) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }
  Value cos(Value x) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::cos, x); }
  Value sin(Value x) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::sin, x); }
  Value log(Value x) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::log, x); }
  Value group(Value x) { return x; }
};

}  // namespace kiln::compiler::cpu::detail
