// read_cubin_report(): registers, frame, spills and shared memory read from the cubin agree with
// what ptxas's log says of the same compile on every arch, and a damaged cubin is an error.
#include "compiler/cubin_report.h"
#include "compiler/nvrtc.h"
#include "compiler/options.h"
#include "compiler/ptxas_report.h"
#include "compiler/target.h"

#include "test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>

namespace kiln::compiler {
namespace {

// `spills` keeps 64 values live under a 32-register cap; `shared` has 132 bytes of static
// shared memory; `local` indexes local arrays at run time (its traffic is no spill to ptxas).
constexpr const char* k_source = R"(
extern "C" __global__ void __maxnreg__(32) spills(float* out, const float* in, int n) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = in[i * n + threadIdx.x];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + j) & 63] + 1.0f;
  float s = 0;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i] * (i + 1);
  out[threadIdx.x] = s;
}
extern "C" __global__ void shared(float* out) {
  __shared__ float x[33];
  x[threadIdx.x % 33] = 1;
  __syncthreads();
  out[threadIdx.x] = x[(threadIdx.x + 1) % 33];
}
extern "C" __global__ void local(float4* out, const float4* in, int i, int j) {
  float4 a[64];
  for (int k = 0; k < 64; ++k) a[k] = in[k * i];
  a[i] = in[j];
  out[0] = a[j];
}
)";

const KernelReport* find(const std::vector<std::pair<std::string, KernelReport>>& reports,
                         const std::string& name) {
  for (const auto& [n, r] : reports)
    if (n == name) return &r;
  return nullptr;
}

std::string compiled(int sm, std::string* log = nullptr) {
  auto nvrtc = load_nvrtc("");
  if (!nvrtc) return {};
  auto out = (*nvrtc)->compile(k_source, "report_probe", arch_name(sm));
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().message);
  if (!out) return {};
  if (log) *log = out->log;
  return out->cubin;
}

TEST(CubinReport, AgreesWithPtxasLogOnEveryArch) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  for (const ArchFacts& arch : arch_table()) {
    SCOPED_TRACE("sm_" + std::to_string(arch.sm));
    std::string log;
    std::string cubin = compiled(arch.sm, &log);
    auto from_cubin = read_cubin_report(cubin);
    ASSERT_TRUE(from_cubin.ok()) << from_cubin.error().message;
    auto from_log = parse_ptxas_log(log);
    ASSERT_EQ(from_cubin->size(), 3u);
    for (const char* name : {"spills", "shared"}) {
      const KernelReport* c = find(*from_cubin, name);
      const KernelReport* l = find(from_log, name);
      ASSERT_TRUE(c && l) << name;
      EXPECT_EQ(*c, *l) << name << "\n" << log;
    }
    const KernelReport& spills = *find(*from_cubin, "spills");
    EXPECT_LE(spills.registers, 32);
    EXPECT_GT(spills.spill_store_bytes, 0);
    EXPECT_GT(spills.spill_load_bytes, 0);
    EXPECT_GT(spills.local_bytes, 0);
    EXPECT_EQ(find(*from_cubin, "shared")->static_smem_bytes, 132);
    EXPECT_EQ(find(*from_cubin, "shared")->spill_bytes(), 0);
    // A local array: ptxas counts its frame but no spill; the cubin's STL.128/LDL.128 count.
    const KernelReport& local = *find(*from_cubin, "local");
    EXPECT_EQ(local.local_bytes, find(from_log, "local")->local_bytes);
    EXPECT_EQ(find(from_log, "local")->spill_bytes(), 0);
    EXPECT_GT(local.spill_store_bytes, 0);
    EXPECT_EQ(local.spill_store_bytes % 16, 0);
  }
}

// What compile_lowered keeps: the cubin's registers, frame and shared memory, and ptxas's spills
// while the log has them; with an empty log (as NVRTC gave on a machine with a GPU visible) the
// cubin's STL/LDL bytes, which equal ptxas's for a kernel without a local array.
TEST(CubinReport, AnEmptyLogLeavesTheCubinsFigures) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  std::string log;
  std::string cubin = compiled(80, &log);
  ASSERT_FALSE(cubin.empty());
  std::string note;
  KernelReport with_log = kernel_report(cubin, "spills", log, note);
  EXPECT_TRUE(note.empty()) << note;
  KernelReport without = kernel_report(cubin, "spills", "", note);
  EXPECT_TRUE(note.empty()) << note;
  EXPECT_EQ(with_log, without);
  EXPECT_GT(without.spill_bytes(), 0);
  EXPECT_GT(without.registers, 0);
  // The local array: ptxas says no spill, the cubin alone counts its traffic.
  EXPECT_EQ(kernel_report(cubin, "local", log, note).spill_bytes(), 0);
  EXPECT_GT(kernel_report(cubin, "local", "", note).spill_bytes(), 0);
  // An unreadable cubin leaves the log's figures, and says so.
  KernelReport fallback = kernel_report("not a cubin", "spills", log, note);
  EXPECT_EQ(fallback.registers, with_log.registers);
  EXPECT_NE(note.find("cubin: not a 64-bit ELF"), std::string::npos) << note;
}

// Section header `name`'s offset in `cubin` (a 64-bit ELF), or 0.
uint64_t section_header(const std::string& cubin, const std::string& name) {
  auto u16 = [&](uint64_t at) {
    uint16_t v;
    std::memcpy(&v, cubin.data() + at, 2);
    return v;
  };
  auto u32 = [&](uint64_t at) {
    uint32_t v;
    std::memcpy(&v, cubin.data() + at, 4);
    return v;
  };
  auto u64 = [&](uint64_t at) {
    uint64_t v;
    std::memcpy(&v, cubin.data() + at, 8);
    return v;
  };
  uint64_t shoff = u64(40);
  uint16_t entsize = u16(58), count = u16(60), names = u16(62);
  uint64_t strings = u64(shoff + names * entsize + 24);
  for (uint16_t i = 0; i < count; ++i) {
    uint64_t h = shoff + uint64_t{i} * entsize;
    if (cubin.compare(strings + u32(h), name.size() + 1, name.c_str(), name.size() + 1) == 0)
      return h;
  }
  return 0;
}

TEST(CubinReport, CodeOfNoWholeInstructionsIsRefusedAndMissingRegistersComeFromTheLog) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  std::string log;
  std::string cubin = compiled(90, &log);
  ASSERT_FALSE(cubin.empty());
  // .text.spills one byte shorter.
  uint64_t text = section_header(cubin, ".text.spills");
  ASSERT_NE(text, 0u);
  std::string cut = cubin;
  uint64_t size;
  std::memcpy(&size, cut.data() + text + 32, 8);
  --size;
  std::memcpy(cut.data() + text + 32, &size, 8);
  auto refused = read_cubin_report(cut);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("not whole 16-byte instructions"), std::string::npos)
      << refused.error().message;
  // Every EIATTR_REGCOUNT (0x2f, format 4) of the global .nv.info renamed: the cubin has no
  // register count, and kernel_report takes the log's.
  uint64_t info = section_header(cubin, ".nv.info");
  ASSERT_NE(info, 0u);
  uint64_t at, end;
  std::memcpy(&at, cubin.data() + info + 24, 8);
  std::memcpy(&end, cubin.data() + info + 32, 8);
  end += at;
  std::string unnamed = cubin;
  int renamed = 0;
  while (at + 4 <= end) {
    unsigned char format = static_cast<unsigned char>(unnamed[at]);
    uint16_t length;
    std::memcpy(&length, unnamed.data() + at + 2, 2);
    if (format == 4 && unnamed[at + 1] == 0x2f) unnamed[at + 1] = 0x7e, ++renamed;
    at += 4 + (format == 4 ? length : 0);
  }
  ASSERT_GE(renamed, 3);
  auto without = read_cubin_report(unnamed);
  ASSERT_TRUE(without.ok()) << without.error().message;
  EXPECT_EQ(find(*without, "spills")->registers, -1);
  std::string note;
  KernelReport merged = kernel_report(unnamed, "spills", log, note);
  EXPECT_EQ(merged.registers, find(parse_ptxas_log(log), "spills")->registers);
  EXPECT_GT(merged.registers, 0);
}

TEST(CubinReport, NotACubinIsAnError) {
  for (std::string_view bytes : {std::string_view(), std::string_view("hello"),
                                 std::string_view("\x7f" "ELF\x02\x01\x01\x00", 8)}) {
    auto r = read_cubin_report(bytes);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("cubin: "), std::string::npos) << r.error().message;
  }
  std::string elf(64, '\0');
  elf.replace(0, 5, "\x7f" "ELF\x02");
  elf[18] = 62;  // EM_X86_64
  auto r = read_cubin_report(elf);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not a CUDA ELF"), std::string::npos) << r.error().message;
}

// Every truncation and thousands of corrupted copies of a real cubin are read or refused, never
// read past (an ASan build of these tests reports a read past; scripts/sanitize.sh does not
// build them).
TEST(CubinReport, DamagedCubinsAreRefusedOrReadWithinTheirBytes) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  std::string cubin = compiled(90);
  ASSERT_FALSE(cubin.empty());
  ASSERT_TRUE(read_cubin_report(cubin).ok());
  int refused = 0;
  for (size_t n = 0; n < cubin.size(); n += 7) {
    std::string cut(cubin.substr(0, n));  // its own allocation: an overread is caught
    if (!read_cubin_report(cut).ok()) ++refused;
  }
  EXPECT_GT(refused, 0);
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string bad = cubin;
    for (int j = 0; j < 4; ++j) {
      bad[rng() % bad.size()] = static_cast<char>(rng());
    }
    (void)read_cubin_report(bad);
  }
}

// check_cubin(): what the runtime checks before the driver is handed a cubin. `mapped` takes a
// pointer, a 128-byte tensor map by value (as kiln's TMA kernels do) and an int; `other`, loaded
// with it, a pointer.
constexpr const char* k_params_source = R"(
struct alignas(64) Map { unsigned long long opaque[16]; };
extern "C" __global__ void mapped(float* out, const __grid_constant__ Map map, int n) {
  if (threadIdx.x < n) out[threadIdx.x] = static_cast<float>(map.opaque[threadIdx.x % 16]);
}
extern "C" __global__ void other(int* out) { out[threadIdx.x] = threadIdx.x; }
)";

std::string compiled_params(const std::string& arch) {
  auto nvrtc = load_nvrtc("");
  if (!nvrtc) return {};
  auto out = (*nvrtc)->compile(k_params_source, "params_probe", arch);
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().message);
  return out ? out->cubin : std::string();
}

std::vector<KernelParam> params_of(std::initializer_list<ParamKind> kinds) {
  std::vector<KernelParam> params;
  for (ParamKind kind : kinds) {
    KernelParam p;
    p.kind = kind;
    params.push_back(p);
  }
  return params;
}

// The parameters `mapped` takes.
std::vector<KernelParam> mapped_params() {
  return params_of({ParamKind::pointer, ParamKind::tensor_map, ParamKind::dim});
}

// The error of check_cubin(...), or "ok".
std::string checked(std::string_view cubin, const std::string& entry,
                    const std::vector<KernelParam>& params, const Target& target) {
  Status s = check_cubin(cubin, entry, params, target);
  return s ? "ok" : s.error().message;
}

TEST(CheckCubin, AKernelPassesWithItsParametersAndArchAndNothingElse) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  const std::vector<KernelParam> right = mapped_params();
  // Every arch family, and sm_90a (marked in .nv.compat).
  for (const char* arch : {"sm_75", "sm_80", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120"}) {
    std::string cubin = compiled_params(arch);
    ASSERT_FALSE(cubin.empty()) << arch;
    auto target = parse_arch(arch);
    ASSERT_TRUE(target) << arch;
    EXPECT_EQ(checked(cubin, "mapped", right, *target), "ok") << arch;
  }
  std::string cubin = compiled_params("sm_90");
  Target sm90 = Target::cuda(90);
  EXPECT_EQ(checked(cubin, "mapped", params_of({ParamKind::pointer, ParamKind::tensor_map}), sm90),
            "cubin: kernel 'mapped': it takes 3 parameters, where kiln passes 2");
  EXPECT_EQ(checked(cubin, "mapped",
                    params_of({ParamKind::pointer, ParamKind::tensor_map, ParamKind::dim,
                               ParamKind::dim}),
                    sm90),
            "cubin: kernel 'mapped': it takes 3 parameters, where kiln passes 4");
  EXPECT_EQ(checked(cubin, "mapped",
                    params_of({ParamKind::pointer, ParamKind::pointer, ParamKind::dim}), sm90),
            "cubin: kernel 'mapped': parameter 1 is 128 bytes, where kiln passes 8");
  EXPECT_EQ(checked(cubin, "mapped",
                    params_of({ParamKind::pointer, ParamKind::tensor_map, ParamKind::pointer}),
                    sm90),
            "cubin: kernel 'mapped': parameter 2 is 4 bytes, where kiln passes 8");
  EXPECT_EQ(checked(cubin, "another", right, sm90), "cubin: no code for kernel 'another'");
  EXPECT_EQ(checked(cubin, "other", params_of({ParamKind::pointer}), sm90), "ok");
  EXPECT_EQ(checked(cubin, "mapped", right, Target::cuda(80)),
            "cubin: built for sm_90, not for sm_80");
  EXPECT_EQ(checked(cubin, "mapped", right, Target::cuda(90, "a")),
            "cubin: built for sm_90, not for sm_90a");
  EXPECT_EQ(checked(compiled_params("sm_90a"), "mapped", right, sm90),
            "cubin: built for sm_90a, not for sm_90");
  std::string big_endian = cubin;
  big_endian[5] = 2;
  EXPECT_EQ(checked(big_endian, "mapped", right, sm90), "cubin: not a little-endian ELF file");
  EXPECT_EQ(checked("", "mapped", right, sm90), "cubin: not a 64-bit ELF file");
  // The global .nv.info renamed as the kernel's: a reader taking the first and a check taking
  // the last would differ.
  uint64_t kernel_info = section_header(cubin, ".nv.info.mapped");
  uint64_t global_info = section_header(cubin, ".nv.info");
  ASSERT_NE(kernel_info, 0u);
  ASSERT_NE(global_info, 0u);
  std::string twice = cubin;
  std::memcpy(twice.data() + global_info, cubin.data() + kernel_info, 4);
  EXPECT_EQ(checked(twice, "mapped", right, sm90), "cubin: two sections named '.nv.info.mapped'");
  // The kernel's attributes said to have no bytes in the file (SHT_NOBITS).
  std::string no_bytes = cubin;
  const uint32_t nobits = 8;
  std::memcpy(no_bytes.data() + kernel_info + 4, &nobits, 4);
  EXPECT_EQ(checked(no_bytes, "mapped", right, sm90),
            "cubin: section '.nv.info.mapped' has no bytes in the file");
}

// Where the value of the first record `attribute` of section `name` starts in `cubin` (.nv.info
// layout: format, attribute, then a 16-bit value, or a 16-bit size and that many bytes), or 0.
uint64_t record_value(const std::string& cubin, const std::string& name, uint8_t attribute) {
  uint64_t header = section_header(cubin, name), at, size;
  if (header == 0) return 0;
  std::memcpy(&at, cubin.data() + header + 24, 8);
  std::memcpy(&size, cubin.data() + header + 32, 8);
  for (uint64_t end = at + size; at + 4 <= end;) {
    auto format = static_cast<uint8_t>(cubin[at]);
    if (static_cast<uint8_t>(cubin[at + 1]) == attribute) return at + (format == 4 ? 4 : 2);
    uint16_t length;
    std::memcpy(&length, cubin.data() + at + 2, 2);
    at += 4 + (format == 4 ? length : 0);
  }
  return 0;
}

template <class T>
void put(std::string& bytes, uint64_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
}

// NVRTC 12 writes ELF ABI 7 below sm_100: the SM in e_flags' low byte, 0x800 for sm_XXa (the
// values NVRTC 12.9 wrote for sm_90 and sm_90a); an ABI kiln does not know is not read for an arch.
TEST(CheckCubin, TheArchIsReadAsEachElfAbiWritesIt) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  std::string cubin = compiled_params("sm_90");
  ASSERT_FALSE(cubin.empty());
  const auto right = mapped_params();
  std::string abi7 = cubin;
  abi7[8] = 7;
  put<uint32_t>(abi7, 48, 0x5a055a);
  EXPECT_EQ(checked(abi7, "mapped", right, Target::cuda(90)), "ok");
  EXPECT_EQ(checked(abi7, "mapped", right, Target::cuda(80)),
            "cubin: built for sm_90, not for sm_80");
  put<uint32_t>(abi7, 48, 0x5a0d5a);
  EXPECT_EQ(checked(abi7, "mapped", right, Target::cuda(90, "a")), "ok");
  EXPECT_EQ(checked(abi7, "mapped", right, Target::cuda(90)),
            "cubin: built for sm_90a, not for sm_90");
  std::string abi9 = cubin;
  abi9[8] = 9;
  EXPECT_EQ(checked(abi9, "mapped", right, Target::cuda(80)), "ok");
}

// What ties the kernel's name to its code, its parameters and its bank, and what the driver
// follows elsewhere in the file, forged one field at a time.
TEST(CheckCubin, ForgedBindingsBanksAndCrossReferencesAreRefused) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  std::string cubin = compiled_params("sm_90");
  ASSERT_FALSE(cubin.empty());
  const auto right = mapped_params();
  Target sm90 = Target::cuda(90);
  ASSERT_EQ(checked(cubin, "mapped", right, sm90), "ok");
  auto forged = [&](auto edit) {
    std::string bytes = cubin;
    edit(bytes);
    return checked(bytes, "mapped", right, sm90);
  };
  uint64_t info = section_header(cubin, ".nv.info.mapped");
  uint64_t global_info = section_header(cubin, ".nv.info");
  uint64_t symtab = section_header(cubin, ".symtab");
  uint64_t note = section_header(cubin, ".note.nv.cuinfo");
  ASSERT_TRUE(info && global_info && symtab && note);
  // The kernel's symbol made an object (STT_OBJECT), not a function.
  uint64_t symbols, symbols_size;
  std::memcpy(&symbols, cubin.data() + symtab + 24, 8);
  std::memcpy(&symbols_size, cubin.data() + symtab + 32, 8);
  uint64_t strings = 0;
  {
    uint32_t link;
    std::memcpy(&link, cubin.data() + symtab + 40, 4);
    uint64_t shoff;
    std::memcpy(&shoff, cubin.data() + 40, 8);
    std::memcpy(&strings, cubin.data() + shoff + uint64_t{link} * 64 + 24, 8);
  }
  uint64_t symbol = 0;
  for (uint64_t at = symbols; at < symbols + symbols_size; at += 24) {
    uint32_t name;
    std::memcpy(&name, cubin.data() + at, 4);
    if (std::strcmp(cubin.c_str() + strings + name, "mapped") == 0) symbol = at;
  }
  ASSERT_NE(symbol, 0u);
  auto object = [&](std::string& b) {
    b[symbol + 4] = static_cast<char>((b[symbol + 4] & 0xf0) | 1);
  };
  EXPECT_EQ(forged(object), "cubin: kernel 'mapped': its symbol is not a function within its code");
  // The kernel's attributes said to describe no code; the global ones said to describe it.
  uint32_t text;
  std::memcpy(&text, cubin.data() + info + 44, 4);
  EXPECT_EQ(forged([&](std::string& b) { put<uint32_t>(b, info + 44, 0); }),
            "cubin: kernel 'mapped': its attributes describe other code");
  EXPECT_EQ(forged([&](std::string& b) { put<uint32_t>(b, global_info + 44, text); }),
            "cubin: kernel 'mapped': section '.nv.info' describes its code");
  // A parameter moved to the end of the bank; the bank larger than its section.
  uint64_t param = record_value(cubin, ".nv.info.mapped", 0x17);
  uint64_t bank = record_value(cubin, ".nv.info.mapped", 0x0a);
  uint64_t bytes = record_value(cubin, ".nv.info.mapped", 0x19);
  ASSERT_TRUE(param && bank && bytes);
  uint16_t total;
  std::memcpy(&total, cubin.data() + bytes, 2);
  EXPECT_EQ(forged([&](std::string& b) { put<uint16_t>(b, param + 6, total - 2); }),
            "cubin: section '.nv.info.mapped': its parameters overlap, or pass their bytes");
  EXPECT_EQ(forged([&](std::string& b) { put<uint16_t>(b, bank + 4, 0xff00); }),
            "cubin: section '.nv.info.mapped': its parameters' bank runs past its constant "
            "section");
  // An instruction the driver may patch (EIATTR_EXIT_INSTR_OFFSETS) past the code.
  uint64_t exits = record_value(cubin, ".nv.info.mapped", 0x1c);
  ASSERT_NE(exits, 0u);
  EXPECT_EQ(forged([&](std::string& b) { put<uint32_t>(b, exits, 0x7ffffff0); }),
            "cubin: section '.nv.info.mapped': an instruction offset past its code");
  // The same in the other kernel of the file: the driver loads every kernel of it.
  uint64_t other_exits = record_value(cubin, ".nv.info.other", 0x1c);
  ASSERT_NE(other_exits, 0u);
  EXPECT_EQ(forged([&](std::string& b) { put<uint32_t>(b, other_exits, 0x7ffffff0); }),
            "cubin: section '.nv.info.other': an instruction offset past its code");
  // A register count (EIATTR_REGCOUNT) naming no symbol; a parameter record kiln does not read
  // (EIATTR_KPARAM_INFO_V2) in place of one it does.
  uint64_t registers = record_value(cubin, ".nv.info", 0x2f);
  ASSERT_NE(registers, 0u);
  EXPECT_EQ(forged([&](std::string& b) { put<uint32_t>(b, registers, 0x7fffffff); }),
            "cubin: section '.nv.info': a function attribute that names no symbol");
  EXPECT_EQ(forged([&](std::string& b) { b[param - 3] = 0x45; }),
            "cubin: section '.nv.info.mapped': a parameter record kiln does not read "
            "(attribute 69)");
  // A 4-byte record renamed MAX_THREADS, which a reader takes as 12 bytes (x, y, z).
  uint64_t version = record_value(cubin, ".nv.info.mapped", 0x37);
  ASSERT_NE(version, 0u);
  EXPECT_EQ(forged([&](std::string& b) { b[version - 3] = 0x05; }),
            "cubin: section '.nv.info.mapped': attribute 5 of another length");
  // Section headers of another size than Elf64_Shdr's.
  EXPECT_EQ(forged([&](std::string& b) { put<uint16_t>(b, 58, 128); }),
            "cubin: section headers of another size or count");
  // A note that says it runs past its section; a symbol table of 1-byte symbols.
  uint64_t notes;
  std::memcpy(&notes, cubin.data() + note + 24, 8);
  EXPECT_EQ(forged([&](std::string& b) { put<uint32_t>(b, notes + 4, 0xfffffff0); }),
            "cubin: section '.note.nv.cuinfo': a note runs past it");
  EXPECT_EQ(forged([&](std::string& b) { put<uint64_t>(b, symtab + 56, 1); }),
            "cubin: a symbol table not of 24-byte symbols named in a string table");
}

// The driver reads a cubin's size from its headers: every cut of one is refused (the headers
// come last), and so is a segment said to reach past the end; thousands of corrupted copies are
// checked or refused, never read past (an ASan build of these tests reports a read past, and
// fuzz_records runs check_cubin under ASan on any bytes; scripts/sanitize.sh does not build
// these tests).
TEST(CheckCubin, EveryCutIsRefusedAndDamageIsNeverReadPast) {
  if (!test::have_nvrtc()) GTEST_SKIP() << "no NVRTC here";
  std::string cubin = compiled_params("sm_90");
  ASSERT_FALSE(cubin.empty());
  const auto params = mapped_params();
  Target sm90 = Target::cuda(90);
  ASSERT_TRUE(check_cubin(cubin, "mapped", params, sm90));
  for (size_t n = 0; n < cubin.size(); ++n) {
    // An allocation of exactly n bytes: a read past them is caught (a std::string's NUL is not).
    auto cut = std::make_unique<char[]>(n);
    std::memcpy(cut.get(), cubin.data(), n);
    ASSERT_FALSE(check_cubin(std::string_view(cut.get(), n), "mapped", params, sm90)) << n;
  }
  // Program header 0's file size (Elf64_Phdr.p_filesz, at 32) one past the end of the file.
  uint64_t phoff;
  std::memcpy(&phoff, cubin.data() + 32, 8);
  ASSERT_LT(phoff + 40, cubin.size());
  std::string long_segment = cubin;
  uint64_t offset;
  std::memcpy(&offset, cubin.data() + phoff + 8, 8);
  uint64_t past = cubin.size() - offset + 1;
  std::memcpy(long_segment.data() + phoff + 32, &past, 8);
  EXPECT_EQ(checked(long_segment, "mapped", params, sm90),
            "cubin: segment 0 past the end of the file");
  std::mt19937 rng(11);
  int passed = 0;
  auto bad = std::make_unique<char[]>(cubin.size());
  for (int i = 0; i < 3000; ++i) {
    std::memcpy(bad.get(), cubin.data(), cubin.size());
    for (int j = 0; j < 4; ++j) bad[rng() % cubin.size()] = static_cast<char>(rng());
    if (check_cubin(std::string_view(bad.get(), cubin.size()), "mapped", params, sm90)) ++passed;
  }
  EXPECT_GT(passed, 0);  // most bytes are code or data that no header depends on
}

}  // namespace
}  // namespace kiln::compiler
