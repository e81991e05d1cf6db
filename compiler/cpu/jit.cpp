// The CPU target's LLVM: target machines, the O3 pipeline, object emission, and ORC LLJIT.
#include "compiler/cpu/impl.h"

#include <llvm/ADT/StringSet.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/MemoryMapper.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Target/TargetMachine.h>

#include <map>
#include <mutex>

namespace kiln::compiler::cpu::impl {

namespace {

void initialize_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::string error_text(llvm::Error error) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << error;
  return os.str();
}

Expected<std::unique_ptr<llvm::TargetMachine>> target_machine(const CpuMachine& machine) {
  initialize_llvm();
  std::string triple = llvm::sys::getProcessTriple();
  std::string problem;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, problem);
  if (!target) return make_error("llvm: no target for ", triple, ": ", problem);
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, machine.cpu, machine.features, options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOpt::Aggressive));
  if (!tm) return make_error("llvm: no target machine for cpu '", machine.cpu, "' on ", triple);
  return tm;
}

// Whether LLVM knows `cpu` on this host's architecture, asked of a generic subtarget: a target
// machine made for an unknown name prints LLVM's own warning about it to stderr (twice), before
// kiln's error could say the same.
Expected<bool> cpu_known(const std::string& cpu) {
  initialize_llvm();
  std::string triple = llvm::sys::getProcessTriple();
  std::string problem;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, problem);
  if (!target) return make_error("llvm: no target for ", triple, ": ", problem);
  std::unique_ptr<llvm::MCSubtargetInfo> generic(target->createMCSubtargetInfo(triple, "", ""));
  if (!generic) return make_error("llvm: no subtarget for ", triple);
  return generic->isCPUStringValid(cpu);
}

}  // namespace

Expected<CpuMachine> cpu_machine(const std::string& cpu, const std::string& features) {
  initialize_llvm();
  CpuMachine machine;
  machine.cpu = cpu == "native" ? llvm::sys::getHostCPUName().str() : cpu;
  machine.features = cpu == "native" ? "" : features;
  if (cpu == "native") {
    llvm::StringMap<bool> features;
    if (llvm::sys::getHostCPUFeatures(features)) {
      std::vector<std::string> names;
      for (const auto& f : features) names.push_back((f.second ? "+" : "-") + f.first().str());
      std::sort(names.begin(), names.end());  // deterministic: it enters the cache key
      for (const std::string& n : names) machine.features += (machine.features.empty() ? "" : ",") + n;
    }
  }
  auto known = cpu_known(machine.cpu);
  if (!known) return known.error();
  if (!*known) {
    return make_error("unknown cpu '", cpu, "' for ", llvm::sys::getProcessTriple(),
                      " (try native, x86-64-v3 or x86-64-v4)");
  }
  auto tm = target_machine(machine);
  if (!tm) return tm.error();
  const llvm::MCSubtargetInfo* info = (*tm)->getMCSubtargetInfo();
  // A 32-bit x86 CPU (i386, pentium4, ...) is a name LLVM knows, but it cannot run the host's
  // 64-bit code: LLVM aborts the process on the first compile for it.
  if (llvm::Triple(llvm::sys::getProcessTriple()).getArch() == llvm::Triple::x86_64 &&
      !info->checkFeatures("+64bit")) {
    return make_error("cpu '", cpu, "' cannot run 64-bit code, which kiln compiles for ",
                      llvm::sys::getProcessTriple(), " (try native, x86-64-v3 or x86-64-v4)");
  }
  CpuFacts& f = machine.facts;
  if (info->checkFeatures("+avx512f")) {
    f.vector_width = 16;
    f.kc = 128;  // a 32-column B panel of 128 rows is 16 KiB: half of L1 beside A's
  } else if (info->checkFeatures("+avx")) {
    f.vector_width = 8;
  } else {
    f.vector_width = 4;
  }
  f.nr = 2 * f.vector_width;
  f.mr = 6;
  return machine;
}

std::string llvm_version() { return LLVM_VERSION_STRING; }

namespace {

Status check_runs_here(const std::string& cpu) {
  auto known = cpu_known(cpu);
  if (!known) return known.error();
  if (!*known) return make_error("unknown cpu '", cpu, "'");
  CpuMachine target;
  target.cpu = cpu;
  auto tm = target_machine(target);
  if (!tm) return tm.error();
  const llvm::MCSubtargetInfo* info = (*tm)->getMCSubtargetInfo();
  llvm::StringMap<bool> host;
  if (!llvm::sys::getHostCPUFeatures(host)) return Status::success();  // nothing to compare
  // The instruction-set features the host reports absent that the target CPU has. Only those a
  // kernel's code can contain count: system instructions (pku, mwaitx, ...) that a virtual
  // machine hides never appear in it.
  auto isa = [](llvm::StringRef f) {
    for (const char* prefix : {"sse", "avx", "amx", "fma", "f16c", "bmi", "popcnt", "lzcnt",
                               "movbe", "vpclmulqdq", "vaes", "gfni", "adx", "sha"}) {
      if (f.startswith(prefix)) return true;
    }
    return false;
  };
  std::vector<std::string> absent;
  for (const auto& f : host)
    if (!f.second && isa(f.first())) absent.push_back(f.first().str());
  std::sort(absent.begin(), absent.end());
  std::string missing;
  for (const std::string& f : absent)
    if (info->checkFeatures("+" + f)) missing += " " + f;
  if (missing.empty()) return Status::success();
  return make_error("code for cpu '", cpu, "' cannot run here (", llvm::sys::getHostCPUName().str(),
                    " lacks:", missing, ")");
}

}  // namespace

Status runs_here(const std::string& cpu) {
  // The answer cannot change within a process, and asking costs a target machine (about
  // 140 us): more than the rest of a cache hit's load.
  static std::mutex mutex;
  // Never destroyed, as the JIT: a program may be loaded while the process exits.
  static auto* answers = new std::map<std::string, Status>();
  std::lock_guard lock(mutex);
  auto it = answers->find(cpu);
  if (it == answers->end()) it = answers->emplace(cpu, check_runs_here(cpu)).first;
  return it->second;
}

std::string module_text(const llvm::Module& module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os, nullptr);
  return os.str();
}

Expected<std::string> compile_object(llvm::Module& module, const CpuMachine& machine) {
  auto tm = target_machine(machine);
  if (!tm) return tm.error();
  module.setTargetTriple((*tm)->getTargetTriple().str());
  module.setDataLayout((*tm)->createDataLayout());

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  // No interleaving: the hot loops (micro-kernel, packing) are written as vectors already, and
  // interleaving the rest made code generation a sixth slower for no measured gain.
  llvm::PipelineTuningOptions tuning;
  tuning.LoopInterleaving = false;
  llvm::PassBuilder pb(tm->get(), tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);

  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager codegen;
  if ((*tm)->addPassesToEmitFile(codegen, os, nullptr, llvm::CGFT_ObjectFile)) {
    return make_error("llvm: cpu '", machine.cpu, "' cannot emit object code");
  }
  codegen.run(module);
  return std::string(buffer.begin(), buffer.end());
}

namespace {

// The only symbols a loaded object may take from the process: the C math library and the
// memory and conversion helpers LLVM's code generation calls on its own. kiln's objects import
// nothing else, so an object that does (system, dlopen, write, ...) was not made by kiln and is
// refused before it is linked. This is not a sandbox (machine code can make system calls without
// importing anything); the trust rests on where objects come from (FORMAT.md, "Remote tier").
bool allowed_import(llvm::StringRef name) {
  static const llvm::StringSet<> k_allowed = {
      // libm, float and double
      "expf", "exp2f", "expm1f", "logf", "log2f", "log1pf", "powf", "sqrtf", "erff", "erfcf",
      "tanhf", "sinf", "cosf", "tanf", "fmaf", "fabsf", "floorf", "ceilf", "roundf", "truncf",
      "fmodf", "exp", "exp2", "log", "log2", "pow", "sqrt", "erf", "tanh", "sin", "cos", "fma",
      "fmod", "floor", "ceil", "round", "trunc", "sincosf",
      // memory intrinsics LLVM lowers to calls
      "memcpy", "memmove", "memset",
      // half and bfloat conversions without hardware support (compiler-rt/libgcc)
      "__extendhfsf2", "__truncsfhf2", "__truncdfhf2", "__truncsfbf2", "__truncdfbf2",
      "__gnu_h2f_ieee", "__gnu_f2h_ieee"};
  return k_allowed.contains(name);
}

// Fails naming the first symbol `object` imports that allowed_import refuses, or when it is not
// an object file.
Status check_imports(const std::string& object) {
  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(object, "kiln-object"));
  if (!file) return make_error("cpu object: not an object file: ", error_text(file.takeError()));
  for (const llvm::object::SymbolRef& symbol : (*file)->symbols()) {
    auto flags = symbol.getFlags();
    if (!flags) return make_error("cpu object: bad symbol table: ", error_text(flags.takeError()));
    if (!(*flags & llvm::object::SymbolRef::SF_Undefined)) continue;
    auto name = symbol.getName();
    if (!name) return make_error("cpu object: bad symbol table: ", error_text(name.takeError()));
    if (name->empty() || allowed_import(*name)) continue;
    return make_error("cpu object: refused: it imports '", name->str(),
                      "', which kiln's code never calls (only the math library and memory "
                      "helpers may be linked)");
  }
  return Status::success();
}

// Address space the JIT reserves at a time for loaded objects' code and data.
constexpr size_t k_slab_bytes = size_t{1} << 20;

// The process's one LLJIT, and a JITDylib of the process's own symbols (libm's erff, ...)
// that every loaded object's JITDylib links against: each loaded object gets a JITDylib of its
// own in it.
struct ProcessJit {
  llvm::orc::LLJIT* jit = nullptr;
  llvm::orc::JITDylib* process_symbols = nullptr;
};

Expected<ProcessJit> process_jit() {
  static std::mutex mutex;
  // Never destroyed: loaded objects may be released during static destruction.
  static ProcessJit process;
  static std::string failure;
  std::lock_guard lock(mutex);
  if (process.jit) return process;
  if (!failure.empty()) return make_error(failure);
  initialize_llvm();
  // JITLink over one slab allocator instead of LLJIT's default for ELF x86-64 in LLVM 16
  // (RuntimeDyld, mapping every object's sections afresh): a cache hit's object links in about
  // half the time, and an unloaded object's memory is reused (JITLink's default per-object
  // allocator grew by 12 KiB per load in a load/unload loop; the slab stays flat).
  llvm::orc::LLJITBuilder builder;
  builder.setObjectLinkingLayerCreator(
      [](llvm::orc::ExecutionSession& es,
         const llvm::Triple&) -> llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> {
        auto memory = llvm::orc::MapperJITLinkMemoryManager::CreateWithMapper<
            llvm::orc::InProcessMemoryMapper>(k_slab_bytes);
        if (!memory) return memory.takeError();
        return std::make_unique<llvm::orc::ObjectLinkingLayer>(es, std::move(*memory));
      });
  auto created = builder.create();
  if (!created) {
    failure = "llvm: cannot start the JIT: " + error_text(created.takeError());
    return make_error(failure);
  }
  llvm::orc::LLJIT* jit = created->release();
  // The process's symbols, only those on the allow-list (check_imports refuses the rest first,
  // with a clearer message).
  auto generator = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      jit->getDataLayout().getGlobalPrefix(),
      [](const llvm::orc::SymbolStringPtr& name) { return allowed_import(*name); });
  if (!generator) {
    failure = "llvm: " + error_text(generator.takeError());
    return make_error(failure);
  }
  auto symbols = jit->createJITDylib("kiln-process");
  if (!symbols) {
    failure = "llvm: " + error_text(symbols.takeError());
    return make_error(failure);
  }
  symbols->addGenerator(std::move(*generator));
  process.jit = jit;
  process.process_symbols = &*symbols;
  return process;
}

}  // namespace

namespace {

class JitObject final : public LoadedObject {
 public:
  ~JitObject() override;
  const std::vector<KernelFunction>& functions() const override { return m_functions; }

  llvm::orc::JITDylib* m_dylib = nullptr;
  std::vector<KernelFunction> m_functions;
};

}  // namespace

Expected<std::unique_ptr<LoadedObject>> load_object(const std::string& object,
                                                    const std::vector<std::string>& entries) {
  if (Status s = check_imports(object); !s) return s.error();
  auto process = process_jit();
  if (!process) return process.error();
  llvm::orc::LLJIT& jit = *process->jit;
  static std::mutex mutex;  // JITDylib names are unique per session
  static uint64_t serial = 0;
  auto loaded = std::make_unique<JitObject>();
  llvm::orc::JITDylib* dylib = nullptr;
  {
    std::lock_guard lock(mutex);
    auto created = jit.createJITDylib("kiln" + std::to_string(serial++));
    if (!created) return make_error("llvm: ", error_text(created.takeError()));
    dylib = &*created;
  }
  loaded->m_dylib = dylib;
  dylib->addToLinkOrder(*process->process_symbols);
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, "kiln-object");
  if (llvm::Error e = jit.addObjectFile(*dylib, std::move(buffer))) {
    return make_error("cpu object: cannot be loaded: ", error_text(std::move(e)));
  }
  // Every entry in one lookup: one link of the object, one round through the session.
  std::vector<llvm::orc::SymbolStringPtr> names;
  llvm::orc::SymbolLookupSet wanted;
  for (const std::string& entry : entries) {
    names.push_back(jit.mangleAndIntern(entry));
    wanted.add(names.back());
  }
  llvm::orc::ExecutionSession& session = jit.getExecutionSession();
  auto found = session.lookup(llvm::orc::makeJITDylibSearchOrder(dylib), std::move(wanted));
  if (!found) return make_error("cpu object: ", error_text(found.takeError()));
  for (size_t i = 0; i < entries.size(); ++i) {
    auto it = found->find(names[i]);
    if (it == found->end()) return make_error("cpu object: entry '", entries[i], "' is missing");
    loaded->m_functions.push_back(
        llvm::jitTargetAddressToPointer<KernelFunction>(it->second.getAddress()));
  }
  return std::unique_ptr<LoadedObject>(std::move(loaded));
}

JitObject::~JitObject() {
  if (!m_dylib) return;
  auto process = process_jit();
  if (!process) return;
  llvm::consumeError(process->jit->getExecutionSession().removeJITDylib(*m_dylib));
}

}  // namespace kiln::compiler::cpu::impl
