// KernelBuilder: a CPU kernel function's arguments, loads and stores by dtype, the rounding of
// the precision modes, the elementwise ops' arithmetic and counted loops, as LLVM IR.
#include "compiler/cpu/codegen_internal.h"
#include "ir/scalar.h"

#include <llvm/IR/Intrinsics.h>

#include <initializer_list>

namespace kiln::compiler::cpu::detail {

KernelBuilder::KernelBuilder(llvm::Module& module, const ir::Graph& graph, const ProgramPlan& plan,
                             const KernelPlan& kernel, const Sizes& sizes, const CpuFacts& facts)
    : m_module(module),
      m_graph(graph),
      m_plan(plan),
      m_kernel(kernel),
      m_sizes(sizes),
      m_facts(facts),
      m_b(module.getContext()) {
  llvm::Type* p = m_b.getPtrTy();
  llvm::Type* i = m_b.getInt64Ty();
  auto* type = llvm::FunctionType::get(m_b.getVoidTy(), {p, p, i, i, p}, false);
  m_function = llvm::Function::Create(type, llvm::Function::ExternalLinkage, "kiln_" + kernel.name,
                                      module);
  m_function->addFnAttr(llvm::Attribute::NoUnwind);
  m_function->addParamAttr(4, llvm::Attribute::NoAlias);
  auto arg = m_function->arg_begin();
  m_buffers = &*arg++;
  m_dims = &*arg++;
  m_begin = &*arg++;
  m_end = &*arg++;
  m_scratch = &*arg;
  m_entry = llvm::BasicBlock::Create(context(), "entry", m_function);
  m_b.SetInsertPoint(llvm::BasicBlock::Create(context(), "body", m_function));
  m_params.assign(kernel.params.size(), nullptr);
}

llvm::Value* KernelBuilder::f32c(double v) {
  return llvm::ConstantFP::get(m_b.getFloatTy(), static_cast<double>(static_cast<float>(v)));
}

llvm::Value* KernelBuilder::param(size_t p) {
  if (!m_params[p]) {
    llvm::IRBuilder<> entry(m_entry);
    llvm::Value* slot = entry.CreateConstGEP1_64(ptr(), m_buffers, p);
    m_params[p] = entry.CreateLoad(ptr(), slot, "p" + std::to_string(p));
  }
  return m_params[p];
}

llvm::Value* KernelBuilder::param_of(ir::NodeId id) {
  int p = m_kernel.param_of(m_plan.location, id);
  assert(p >= 0);
  return param(static_cast<size_t>(p));
}

llvm::Value* KernelBuilder::extent(const Extent& e) {
  if (e.fixed()) return i64c(e.coef);
  auto key = std::make_pair(e.coef, e.symbols);
  auto it = m_extents.find(key);
  if (it != m_extents.end()) return it->second;
  llvm::IRBuilder<> entry(m_entry);
  llvm::Value* v = entry.getInt64(static_cast<uint64_t>(e.coef));
  for (uint32_t s : e.symbols) {
    llvm::Value* slot = entry.CreateConstGEP1_64(i64(), m_dims, s);
    v = entry.CreateMul(v, entry.CreateLoad(i64(), slot));
  }
  m_extents.emplace(key, v);
  return v;
}

llvm::Value* KernelBuilder::load_float(ir::DType dtype, llvm::Value* base, llvm::Value* index) {
  return load_floats(dtype, base, index, 1);
}

namespace {

// `scalar`, or a vector of `lanes` of it.
llvm::Type* lanes_of(llvm::Type* scalar, unsigned lanes) {
  return lanes == 1 ? scalar : llvm::FixedVectorType::get(scalar, lanes);
}

// The type of v's lanes (or of v) with `scalar` elements: i32 for float, and so on.
llvm::Type* like(llvm::Value* v, llvm::Type* scalar) {
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType()))
    return llvm::FixedVectorType::get(scalar, vt->getNumElements());
  return scalar;
}

llvm::Value* constant(llvm::Type* type, uint64_t value) { return llvm::ConstantInt::get(type, value); }

}  // namespace

llvm::Value* KernelBuilder::load_floats(ir::DType dtype, llvm::Value* base, llvm::Value* index,
                                        unsigned lanes) {
  llvm::Align align(ir::byte_size(dtype));
  switch (dtype) {
    case ir::DType::f32:
      return m_b.CreateAlignedLoad(lanes_of(f32(), lanes), m_b.CreateGEP(f32(), base, index), align);
    case ir::DType::bf16: {
      llvm::Value* bits = m_b.CreateAlignedLoad(lanes_of(m_b.getInt16Ty(), lanes),
                                                m_b.CreateGEP(m_b.getInt16Ty(), base, index), align);
      llvm::Type* i32 = lanes_of(m_b.getInt32Ty(), lanes);
      bits = m_b.CreateShl(m_b.CreateZExt(bits, i32), constant(i32, 16));
      return m_b.CreateBitCast(bits, lanes_of(f32(), lanes));
    }
    case ir::DType::f16: {
      llvm::Value* h = m_b.CreateAlignedLoad(lanes_of(m_b.getHalfTy(), lanes),
                                             m_b.CreateGEP(m_b.getHalfTy(), base, index), align);
      return m_b.CreateFPExt(h, lanes_of(f32(), lanes));
    }
    case ir::DType::i32:
    case ir::DType::i64:
    case ir::DType::boolean: {
      // An integer or bool read as a float (1.0 or 0.0 for bool): its value converted.
      llvm::Type* t = dtype == ir::DType::i32 ? m_b.getInt32Ty()
                      : dtype == ir::DType::i64 ? m_b.getInt64Ty() : m_b.getInt8Ty();
      llvm::Value* v = m_b.CreateLoad(lanes_of(t, lanes), m_b.CreateGEP(t, base, index));
      if (dtype == ir::DType::boolean) return m_b.CreateUIToFP(v, lanes_of(f32(), lanes));
      return m_b.CreateSIToFP(v, lanes_of(f32(), lanes));
    }
  }
  return nullptr;
}

namespace {

// bf16's bits of fp32 values, rounded to nearest even; NaN gives the canonical 0x7fff.
llvm::Value* bf16_bits(llvm::IRBuilder<>& b, llvm::Value* v) {
  llvm::Type* i32 = like(v, b.getInt32Ty());
  llvm::Value* u = b.CreateBitCast(v, i32);
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(u, constant(i32, 16)), constant(i32, 1));
  llvm::Value* r = b.CreateLShr(b.CreateAdd(b.CreateAdd(u, constant(i32, 0x7fff)), lsb),
                                constant(i32, 16));
  llvm::Value* nan = b.CreateFCmpUNO(v, v);
  return b.CreateTrunc(b.CreateSelect(nan, constant(i32, 0x7fff), r), like(v, b.getInt16Ty()));
}

}  // namespace

void KernelBuilder::store_float(ir::DType dtype, llvm::Value* base, llvm::Value* index,
                                llvm::Value* v) {
  switch (dtype) {
    case ir::DType::f32:
      m_b.CreateStore(v, m_b.CreateGEP(f32(), base, index));
      return;
    case ir::DType::bf16:
      m_b.CreateStore(bf16_bits(m_b, v), m_b.CreateGEP(m_b.getInt16Ty(), base, index));
      return;
    case ir::DType::f16:
      m_b.CreateStore(m_b.CreateFPTrunc(v, m_b.getHalfTy()),
                      m_b.CreateGEP(m_b.getHalfTy(), base, index));
      return;
    case ir::DType::i32:
    case ir::DType::i64:
    case ir::DType::boolean:
      // A float stored as an integer or bool: the cast's conversion.
      store_value(dtype, base, index, cast_value(ir::DType::f32, dtype, v));
      return;
  }
}

llvm::Value* KernelBuilder::round_to(ir::DType dtype, llvm::Value* v) {
  switch (dtype) {
    case ir::DType::f32:
      return v;
    case ir::DType::bf16: {
      llvm::Type* i32 = like(v, m_b.getInt32Ty());
      llvm::Value* bits = m_b.CreateZExt(bf16_bits(m_b, v), i32);
      return m_b.CreateBitCast(m_b.CreateShl(bits, constant(i32, 16)), v->getType());
    }
    case ir::DType::f16:
      return m_b.CreateFPExt(m_b.CreateFPTrunc(v, like(v, m_b.getHalfTy())), v->getType());
    case ir::DType::i32:
    case ir::DType::i64:
    case ir::DType::boolean:
      return v;
  }
  return v;
}

llvm::Value* KernelBuilder::round_operand(Numerics numerics, llvm::Value* v) {
  switch (numerics) {
    case Numerics::tf32: {
      // cvt.rna.tf32.f32: 10 mantissa bits, ties away from zero; infinities kept, NaN canonical.
      llvm::Type* i32 = like(v, m_b.getInt32Ty());
      llvm::Value* u = m_b.CreateBitCast(v, i32);
      llvm::Value* r = m_b.CreateAnd(m_b.CreateAdd(u, constant(i32, 0x1000)), constant(i32, 0xffffe000));
      llvm::Value* special = m_b.CreateICmpEQ(m_b.CreateAnd(u, constant(i32, 0x7f800000)),
                                              constant(i32, 0x7f800000));
      llvm::Value* nan = m_b.CreateFCmpUNO(v, v);
      llvm::Value* kept = m_b.CreateSelect(nan, constant(i32, 0x7fffffff), u);
      return m_b.CreateBitCast(m_b.CreateSelect(special, kept, r), v->getType());
    }
    case Numerics::bf16_of_f32:
      return round_to(ir::DType::bf16, v);
    case Numerics::fp32:
    case Numerics::tf32x3:  // split_tf32x3 rounds each part
    case Numerics::f16:
    case Numerics::bf16:
      return v;
  }
  return v;
}

std::pair<llvm::Value*, llvm::Value*> KernelBuilder::split_tf32x3(llvm::Value* v) {
  // An infinite or NaN v splits into ±1 and v, as the kernels' kiln_tf32x3_big: each cross
  // product holds a finite big part, so an infinity times a tf32-exact operand (small part 0) is
  // not inf * 0. (|v| >= inf, or unordered: not finite.)
  llvm::Value* one = m_b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign,
                                               llvm::ConstantFP::get(v->getType(), 1.0), v);
  llvm::Value* not_finite = m_b.CreateFCmpUGE(m_b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, v),
                                              llvm::ConstantFP::getInfinity(v->getType()));
  llvm::Value* big = m_b.CreateSelect(not_finite, one, round_operand(Numerics::tf32, v));
  llvm::Value* small = round_operand(Numerics::tf32, m_b.CreateFSub(v, big));
  return {big, small};
}

std::pair<llvm::Value*, llvm::Value*> KernelBuilder::operand_parts(Numerics numerics,
                                                                    llvm::Value* v) {
  if (numerics == Numerics::tf32x3) return split_tf32x3(v);
  return {round_operand(numerics, v), nullptr};
}

void KernelBuilder::store_strided(llvm::Value* v, llvm::Value* base, llvm::Value* at,
                                  int64_t stride) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType());
  unsigned lanes = vt ? vt->getNumElements() : 1;
  for (unsigned i = 0; i < lanes; ++i) {
    llvm::Value* lane = vt ? m_b.CreateExtractElement(v, uint64_t{i}) : v;
    llvm::Value* index = m_b.CreateAdd(at, i64c(static_cast<int64_t>(i) * stride));
    m_b.CreateAlignedStore(lane, m_b.CreateGEP(f32(), base, index), llvm::Align(4));
  }
}

llvm::Function* KernelBuilder::math_function(const char* name, int arity) {
  std::vector<llvm::Type*> args(static_cast<size_t>(arity), f32());
  auto callee = m_module.getOrInsertFunction(name, llvm::FunctionType::get(f32(), args, false));
  auto* f = llvm::cast<llvm::Function>(callee.getCallee());
  f->addFnAttr(llvm::Attribute::NoUnwind);
  return f;
}

llvm::Value* KernelBuilder::max(llvm::Value* a, llvm::Value* c) {
  return m_b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, a, c);
}

// (a > c || a != a) ? a : c, as the CUDA prelude's kiln_max: a NaN in either operand is the
// result (a NaN `a` by the second test, a NaN `c` since both tests fail).
llvm::Value* KernelBuilder::max_nan(llvm::Value* a, llvm::Value* c) {
  llvm::Value* take_a = m_b.CreateOr(m_b.CreateFCmpOGT(a, c), m_b.CreateFCmpUNO(a, a));
  return m_b.CreateSelect(take_a, a, c);
}

llvm::Value* KernelBuilder::min_nan(llvm::Value* a, llvm::Value* c) {
  llvm::Value* take_a = m_b.CreateOr(m_b.CreateFCmpOLT(a, c), m_b.CreateFCmpUNO(a, a));
  return m_b.CreateSelect(take_a, a, c);
}

namespace {

// c[0] + c[1] t + c[2] t^2 + ... by Horner's rule with fused multiply-adds; t a float or a
// vector of floats.
llvm::Value* horner(KernelBuilder& kb, llvm::Value* t, std::initializer_list<float> c) {
  const float* p = c.end();
  llvm::Value* acc = llvm::ConstantFP::get(t->getType(), *--p);
  while (p != c.begin()) acc = kb.fma(acc, t, llvm::ConstantFP::get(t->getType(), *--p));
  return acc;
}

llvm::Value* fconst(llvm::Value* like_this, double v) {
  return llvm::ConstantFP::get(like_this->getType(), static_cast<double>(static_cast<float>(v)));
}

}  // namespace

// exp, tanh and erf are straight-line arithmetic (no libm call), so that a loop of them
// vectorizes and every lane of a vector computes what the scalar form does. Each is within one
// ulp of the exact result over all floats (tests/cpu/math_test.cpp sweeps them); their
// polynomials are least-squares fits with float coefficients.
llvm::Value* KernelBuilder::exp(llvm::Value* x) {
  llvm::Type* i32 = like(x, m_b.getInt32Ty());
  auto c = [&](double v) { return fconst(x, v); };
  // Clamped to [-104, 89]: below, e^x is under half the least subnormal, above it overflows
  // (a NaN is put back at the end).
  llvm::Value* xc = m_b.CreateBinaryIntrinsic(
      llvm::Intrinsic::minnum, m_b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, x, c(-104.0)),
      c(89.0));
  // n = rint(x / ln 2) by adding 1.5 * 2^23, whose low mantissa bits then hold n.
  llvm::Value* shifted = m_b.CreateFAdd(m_b.CreateFMul(xc, c(1.4426950408889634)), c(12582912.0));
  llvm::Value* n = m_b.CreateFSub(shifted, c(12582912.0));
  llvm::Value* ni = m_b.CreateSub(m_b.CreateBitCast(shifted, i32), constant(i32, 0x4b400000));
  // r = x - n ln 2 in two parts, in [-ln 2 / 2, ln 2 / 2]; e^r = 1 + r + r^2 P(r).
  llvm::Value* r = fma(n, c(-0.693359375), xc);
  r = fma(n, c(2.12194440e-4), r);
  llvm::Value* p = horner(*this, r, {0.5f, 0.166666672f, 0.0416665114f, 0.0083331801f,
                                     0.0013930503f, 0.000199696689f});
  llvm::Value* y = m_b.CreateFAdd(fma(p, m_b.CreateFMul(r, r), r), c(1.0));
  // Times 2^n as 2^(n/2) 2^(n - n/2): each factor a normal float for n in [-151, 129].
  auto pow2 = [&](llvm::Value* k) {
    return m_b.CreateBitCast(m_b.CreateShl(m_b.CreateAdd(k, constant(i32, 127)), constant(i32, 23)),
                             x->getType());
  };
  llvm::Value* n1 = m_b.CreateAShr(ni, constant(i32, 1));
  y = m_b.CreateFMul(m_b.CreateFMul(y, pow2(n1)), pow2(m_b.CreateSub(ni, n1)));
  return m_b.CreateSelect(m_b.CreateFCmpUNO(x, x), x, y);
}

llvm::Value* KernelBuilder::tanh(llvm::Value* x) {
  auto c = [&](double v) { return fconst(x, v); };
  llvm::Value* ax = m_b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  // |x| < 0.9: x + x z P(z), z = x^2.
  llvm::Value* z = m_b.CreateFMul(x, x);
  llvm::Value* p = horner(*this, z, {-0.333333343f, 0.133333236f, -0.0539602637f, 0.0217869431f,
                                     -0.00850811414f, 0.00281596626f, -0.000542010181f});
  llvm::Value* small = fma(x, m_b.CreateFMul(p, z), x);
  // Else 1 - 2 / (e^2|x| + 1), which is 1 once e^2|x| overflows (NaN stays NaN).
  llvm::Value* e = exp(m_b.CreateFMul(ax, c(2.0)));
  llvm::Value* large = m_b.CreateFSub(c(1.0), m_b.CreateFDiv(c(2.0), m_b.CreateFAdd(e, c(1.0))));
  llvm::Value* y = m_b.CreateSelect(m_b.CreateFCmpOLT(ax, c(0.9)), small, large);
  return m_b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, y, x);  // -0 stays -0
}

llvm::Value* KernelBuilder::erf(llvm::Value* x) {
  auto c = [&](double v) { return fconst(x, v); };
  llvm::Value* ax = m_b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  // |x| < 0.921875: x + x R(x^2).
  llvm::Value* r0 = horner(*this, m_b.CreateFMul(x, x),
                           {0.128379166f, -0.376126319f, 0.112836786f, -0.026858734f,
                            0.00519976905f, -0.000813116087f, 8.32943915e-05f});
  llvm::Value* small = fma(x, r0, x);
  // Else 1 - erfc(|x|), erfc a polynomial on [0.921875, 2) and on [2, 3.9375); past that 1.
  llvm::Value* q1 = horner(*this, m_b.CreateFSub(ax, c(1.4609375)),
                           {0.0388211496f, -0.133513033f, 0.195054263f, -0.145470694f,
                            0.0412423834f, 0.0195469894f, -0.0205061343f, 0.00384905422f,
                            0.002949744f, -0.00150611077f, -3.27421658e-05f});
  llvm::Value* q2 = horner(*this, m_b.CreateFSub(ax, c(2.96875)),
                           {2.68756867e-05f, -0.000167805629f, 0.000498141919f, -0.00093009026f,
                            0.00121493684f, -0.00116276182f, 0.000824947783f, -0.000426148676f,
                            0.000143015292f, -5.97716326e-06f, -2.51796737e-05f, 1.00711386e-05f});
  llvm::Value* q = m_b.CreateSelect(m_b.CreateFCmpOLT(ax, c(2.0)), q1, q2);
  llvm::Value* large = m_b.CreateSelect(m_b.CreateFCmpOLT(ax, c(3.9375)),
                                        m_b.CreateFSub(c(1.0), q), c(1.0));
  large = m_b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, large, x);
  llvm::Value* y = m_b.CreateSelect(m_b.CreateFCmpOLT(ax, c(0.921875)), small, large);
  return m_b.CreateSelect(m_b.CreateFCmpUNO(x, x), x, y);
}

llvm::Value* KernelBuilder::fma(llvm::Value* a, llvm::Value* c, llvm::Value* acc) {
  return m_b.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()}, {a, c, acc});
}

llvm::Value* KernelBuilder::unary(ir::OpKind kind, llvm::Value* x) {
  LlvmMath m{*this, m_b};
  return ir::unary_formula(m, kind, x);
}

llvm::Value* KernelBuilder::binary(ir::OpKind kind, llvm::Value* a, llvm::Value* c) {
  LlvmMath m{*this, m_b};
  return ir::binary_formula(m, kind, a, c);
}

std::vector<llvm::Value*> KernelBuilder::loop(
    llvm::Value* lo, llvm::Value* hi, int64_t step, std::vector<llvm::Value*> carried,
    const std::function<std::vector<llvm::Value*>(llvm::Value*, const std::vector<llvm::Value*>&)>&
        body) {
  llvm::BasicBlock* pre = m_b.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(context(), "loop", m_function);
  auto* inside = llvm::BasicBlock::Create(context(), "loop.body", m_function);
  auto* exit = llvm::BasicBlock::Create(context(), "loop.end", m_function);
  m_b.CreateBr(header);
  m_b.SetInsertPoint(header);
  llvm::PHINode* iv = m_b.CreatePHI(i64(), 2, "i");
  iv->addIncoming(lo, pre);
  std::vector<llvm::PHINode*> phis;
  std::vector<llvm::Value*> values;
  for (llvm::Value* v : carried) {
    llvm::PHINode* phi = m_b.CreatePHI(v->getType(), 2);
    phi->addIncoming(v, pre);
    phis.push_back(phi);
    values.push_back(phi);
  }
  m_b.CreateCondBr(m_b.CreateICmpSLT(iv, hi), inside, exit);
  m_b.SetInsertPoint(inside);
  std::vector<llvm::Value*> next = body(iv, values);
  assert(next.size() == phis.size());
  llvm::BasicBlock* latch = m_b.GetInsertBlock();
  llvm::Value* step_v = m_b.CreateAdd(iv, i64c(step));
  m_back_edge = m_b.CreateBr(header);
  iv->addIncoming(step_v, latch);
  for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
  m_b.SetInsertPoint(exit);
  return values;
}

void KernelBuilder::loop(llvm::Value* lo, llvm::Value* hi, int64_t step,
                         const std::function<void(llvm::Value*)>& body) {
  loop(lo, hi, step, {}, [&](llvm::Value* i, const std::vector<llvm::Value*>&) {
    body(i);
    return std::vector<llvm::Value*>{};
  });
}

void KernelBuilder::plain_loop(llvm::Value* lo, llvm::Value* hi, int64_t step,
                               const std::function<void(llvm::Value*)>& body) {
  loop(lo, hi, step, body);
  keep_last_loop_plain();
}

std::vector<llvm::Value*> KernelBuilder::plain_loop(
    llvm::Value* lo, llvm::Value* hi, int64_t step, std::vector<llvm::Value*> carried,
    const std::function<std::vector<llvm::Value*>(llvm::Value*, const std::vector<llvm::Value*>&)>&
        body) {
  std::vector<llvm::Value*> out = loop(lo, hi, step, std::move(carried), body);
  keep_last_loop_plain();
  return out;
}

void KernelBuilder::keep_last_loop_plain() {
  llvm::LLVMContext& ctx = context();
  auto flag = [&](const char* name, llvm::Metadata* value) -> llvm::Metadata* {
    if (!value) return llvm::MDNode::get(ctx, llvm::MDString::get(ctx, name));
    return llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, name), value});
  };
  llvm::Metadata* no = llvm::ConstantAsMetadata::get(m_b.getFalse());
  llvm::TempMDTuple self = llvm::MDNode::getTemporary(ctx, {});
  llvm::MDNode* id = llvm::MDNode::getDistinct(
      ctx, {self.get(), flag("llvm.loop.vectorize.enable", no), flag("llvm.loop.unroll.disable", nullptr),
            flag("llvm.loop.interleave.count", llvm::ConstantAsMetadata::get(m_b.getInt32(1)))});
  id->replaceOperandWith(0, id);
  m_back_edge->setMetadata(llvm::LLVMContext::MD_loop, id);
}

void KernelBuilder::in_function(llvm::Function* f, const std::function<void()>& body) {
  llvm::Function* kernel = m_function;
  llvm::IRBuilderBase::InsertPoint place = m_b.saveIP();
  m_function = f;
  m_b.SetInsertPoint(llvm::BasicBlock::Create(context(), "entry", f));
  body();
  m_function = kernel;
  m_b.restoreIP(place);
}

void KernelBuilder::when(llvm::Value* cond, const std::function<void()>& then) {
  auto* yes = llvm::BasicBlock::Create(context(), "then", m_function);
  auto* after = llvm::BasicBlock::Create(context(), "endif", m_function);
  m_b.CreateCondBr(cond, yes, after);
  m_b.SetInsertPoint(yes);
  then();
  m_b.CreateBr(after);
  m_b.SetInsertPoint(after);
}

void KernelBuilder::store_outputs(llvm::Value* value, llvm::Value* linear) {
  ir::DType dtype = m_graph.node(m_kernel.group.root).type.dtype;
  for (size_t i = 0; i < m_kernel.params.size(); ++i) {
    if (m_kernel.params[i].written) store_value(dtype, param(i), linear, value);
  }
}

void KernelBuilder::finish() {
  m_b.CreateRetVoid();
  llvm::IRBuilder<> entry(m_entry);
  entry.CreateBr(&*std::next(m_function->begin()));
}

std::vector<Extent> dims_of(const KernelBuilder& kb, ir::NodeId id) {
  std::vector<Extent> dims;
  for (int d = 0; d < kb.graph().node(id).type.shape.rank(); ++d)
    dims.push_back(kb.sizes().dim(id, d));
  return dims;
}

std::vector<llvm::Value*> coords_of(KernelBuilder& kb, const std::vector<Extent>& dims,
                                    llvm::Value* linear) {
  std::vector<llvm::Value*> coords(dims.size(), nullptr);
  llvm::Value* rest = linear;
  for (size_t d = dims.size(); d-- > 0;) {
    if (d == 0) {
      coords[d] = rest;
      break;
    }
    llvm::Value* dim = kb.extent(dims[d]);
    coords[d] = kb.b().CreateURem(rest, dim);
    rest = kb.b().CreateUDiv(rest, dim);
  }
  return coords;
}

llvm::Value* batch_offset(KernelBuilder& kb, const std::vector<llvm::Value*>& coords,
                          const std::vector<Extent>& strides, int64_t group) {
  llvm::IRBuilder<>& b = kb.b();
  llvm::Value* offset = kb.i64c(0);
  for (size_t d = 0; d < strides.size(); ++d) {
    if (!strides[d].coef) continue;
    llvm::Value* c = coords[d];
    if (group > 1 && d + 1 == strides.size()) c = b.CreateUDiv(c, kb.i64c(group));  // grouped
    offset = b.CreateAdd(offset, b.CreateMul(c, kb.extent(strides[d])));
  }
  return offset;
}

}  // namespace kiln::compiler::cpu::detail
