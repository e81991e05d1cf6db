// Artifact bytes: round trip, and rejection of truncated, corrupted or foreign bytes; typed
// parameters; the tagged format's rules for fields it does not know; format 4 migrating.
#include "compiler/artifact.h"

#include "support/byte_writer.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

Artifact sample() {
  Artifact a;
  a.target = Target::cuda(90);
  a.arch = "sm_90";
  a.precision = "high";
  a.decision = "auto -> high on sm_90";
  a.nvrtc_version = "13.0";
  a.source = "extern \"C\" __global__ void kiln_k0() {}";
  a.log = "ptxas info : Used 10 registers";
  a.fallbacks = {"one", "two"};
  a.input_bytes = {16, 32};
  a.output_bytes = {64};
  a.temporary_bytes = {128, 7};
  a.workspace_bytes = 512;
  KernelArtifact k;
  k.name = "k0_matmul_tf32_64x64";
  k.entry = "kiln_k0_matmul_tf32_64x64";
  k.cubin = std::string(
      "\x7f"
      "ELF\0\1\2",
      7);
  k.ptx = ".version 9.0";
  k.launch.grid = {4, 2, 16};
  k.launch.block = {128, 1, 1};
  k.launch.dynamic_smem_bytes = 40960;
  k.params = {{{BufferRole::output, 0}, 64, true},
              {{BufferRole::input, 1}, 32, false},
              {{BufferRole::temporary, 1}, 7, false}};
  k.report = {72, 0, 4, 1024, 16};
  k.tile = "64x64x16, 2x2 warps, 3 stages";
  k.schedule = "model";
  a.kernels = {k, k};
  a.kernels[1].name = "k1";
  return a;
}

TEST(Artifact, RoundTripsExactly) {
  Artifact a = sample();
  auto back = deserialize(serialize(a));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, a);
}

TEST(Artifact, AnArchSpecificTargetRoundTripsAndAForeignSuffixIsRefused) {
  Artifact a = sample();
  a.target = Target::cuda(90, "a");
  a.arch = "sm_90a";
  auto back = deserialize(serialize(a));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, a);
  EXPECT_TRUE(back->target.arch_specific());
  // A suffix decides where kernels load: one this kiln does not plan, or one its arch text does
  // not carry, is refused rather than trusted.
  Artifact foreign = a;
  foreign.target.suffix = "f";
  foreign.arch = "sm_90f";
  auto refused = deserialize(serialize(foreign));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("suffix 'f'"), std::string::npos)
      << refused.error().message;
  // A target whose name reads as sm_90a but is not it: sm 9 with suffix "0a".
  Artifact forged = a;
  forged.target.sm = 9;
  forged.target.suffix = "0a";
  auto forged_back = deserialize(serialize(forged));
  ASSERT_FALSE(forged_back);
  EXPECT_NE(forged_back.error().message.find("suffix '0a' of sm 9"), std::string::npos)
      << forged_back.error().message;
  Artifact mismatched = a;
  mismatched.arch = "sm_90";
  auto disagree = deserialize(serialize(mismatched));
  ASSERT_FALSE(disagree);
  EXPECT_NE(disagree.error().message.find("arch sm_90 is not its target's (sm_90a)"),
            std::string::npos)
      << disagree.error().message;
}

TEST(Artifact, AKernelRunningAnotherKernelsBinaryRoundTrips) {
  Artifact a = sample();
  a.kernels[1].binary_of = a.kernels[0].name;
  auto back = deserialize(serialize(a));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, a);
}

// Only an earlier kernel that has a binary of its own can lend it.
TEST(Artifact, ABinaryOfNoEarlierKernelIsRejected) {
  for (std::string of : {"k1", "no_such_kernel"}) {
    Artifact a = sample();
    a.kernels[1].binary_of = of;  // itself, or nobody
    auto back = deserialize(serialize(a));
    ASSERT_FALSE(back.ok()) << of;
    EXPECT_NE(back.error().message.find("runs the binary of"), std::string::npos)
        << back.error().message;
  }
  Artifact a = sample();
  a.kernels.push_back(a.kernels[1]);
  a.kernels[2].name = "k2";
  a.kernels[1].binary_of = a.kernels[0].name;
  a.kernels[2].binary_of = "k1";  // k1 has no binary of its own
  EXPECT_FALSE(deserialize(serialize(a)).ok());
}

TEST(Artifact, EmptyArtifactRoundTrips) {
  auto back = deserialize(serialize(Artifact{}));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, Artifact{});
}

TEST(Artifact, EveryTruncationIsRejected) {
  std::string bytes = serialize(sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(deserialize(std::string_view(bytes).substr(0, n)).ok()) << n;
  }
}

TEST(Artifact, TrailingBytesAreRejected) {
  EXPECT_FALSE(deserialize(serialize(sample()) + "x").ok());
}

TEST(Artifact, WrongMagicOrVersionIsRejected) {
  std::string bytes = serialize(sample());
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_NE(deserialize(magic).error().message.find("magic"), std::string::npos);
  std::string version = bytes;
  version[8] = 99;
  EXPECT_NE(deserialize(version).error().message.find("version"), std::string::npos);
}

TEST(Artifact, CorruptedBytesNeverCrash) {
  std::string bytes = serialize(sample());
  uint32_t state = 12345;
  for (int round = 0; round < 2000; ++round) {
    std::string mutated = bytes;
    for (int flips = 0; flips < 4; ++flips) {
      state = state * 1664525u + 1013904223u;
      size_t at = 12 + state % (mutated.size() - 12);
      mutated[at] = static_cast<char>(state >> 24);
    }
    auto result = deserialize(mutated);  // ok or an error, never a crash or a huge allocation
    if (result.ok()) {
      // What it read is stable (a field it skipped or one at its default is not written back).
      auto again = deserialize(serialize(*result));
      ASSERT_TRUE(again.ok()) << again.error().message;
      EXPECT_EQ(*again, *result);
    }
  }
}

TEST(Artifact, HugeCountsAreRejectedWithoutAllocating) {
  std::string bytes = serialize(Artifact{});
  // The input sizes' count sits after the magic, the version, the (empty) arch field and the
  // input sizes' tag and length.
  size_t at = 8 + 4 + 12 + 12;
  for (int i = 0; i < 8; ++i) bytes[at + static_cast<size_t>(i)] = '\xff';
  EXPECT_FALSE(deserialize(bytes).ok());
}

TEST(Artifact, BindBuffersTakesEachParametersBufferAndRefusesAnIndexOutOfRange) {
  KernelArtifact k;
  k.name = "k0";
  k.params = {{{BufferRole::output, 0}, 4, true},
              {{BufferRole::input, 1}, 4, false},
              {{BufferRole::temporary, 0}, 4, false}};
  int a = 0, b = 0, c = 0, d = 0;
  auto bound = bind_buffers(k, {&a, &b}, {&c}, {&d});
  ASSERT_TRUE(bound) << bound.error().message;
  EXPECT_EQ(*bound, (std::vector<void*>{&c, &b, &d}));
  k.params[1].buffer.index = 2;  // what only a damaged artifact names
  auto refused = bind_buffers(k, {&a, &b}, {&c}, {&d});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("kernel 'k0' parameter 1 names input #2 of 2"),
            std::string::npos)
      << refused.error().message;
}

// Every kind of parameter, a cluster, and a CPU kernel (only its own target's fields).
Artifact typed_sample() {
  Artifact a = sample();
  a.bucket = {{33, 64}};
  a.input_sizes = {SizeTerm{16, {0}, 1}, SizeTerm{32, {0}, 1}};
  a.output_sizes = {SizeTerm{64, {0}, 1}};
  a.temporary_sizes = {SizeTerm{128, {0}, 1}, SizeTerm{7, {}, 1}};
  KernelArtifact& k = a.kernels[0];
  k.params.push_back(dim_param(0));
  KernelParam map;
  map.kind = ParamKind::tensor_map;
  map.buffer = {BufferRole::input, 0};
  map.bytes = 16;
  map.map = "box 64x64 swizzle 128";
  map.map_terms = {SizeTerm{64, {}, 1}, SizeTerm{1, {0}, 1}, SizeTerm{256, {}, 1}};
  k.params.push_back(map);
  k.launch.cluster = {2, 1, 1};
  k.grid = {SizeTerm{1, {0}, 64}, SizeTerm{}, SizeTerm{}};
  return a;
}

TEST(Artifact, TypedParametersAndClustersRoundTrip) {
  Artifact a = typed_sample();
  auto back = deserialize(serialize(a));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, a);
  EXPECT_EQ(back->kernels[0].params[3].kind, ParamKind::dim);
  EXPECT_EQ(back->kernels[0].params[4].map, "box 64x64 swizzle 128");
  EXPECT_EQ(back->kernels[0].params[4].map_terms.size(), 3u);
  EXPECT_TRUE(back->kernels[0].launch.clustered());
  EXPECT_FALSE(back->kernels[1].launch.clustered());

  Artifact cpu;
  cpu.target = Target::for_cpu("x86-64-v3", "+avx2");
  cpu.arch = "cpu:x86-64-v3";
  cpu.object = std::string("\x7f" "ELF", 4);
  KernelArtifact c;
  c.name = "k0_matmul_tf32";
  c.params = {{{BufferRole::output, 0}, 64, true}, dim_param(0)};
  c.items = {SizeTerm{1, {0}, 8}};
  c.scratch_floats = 4096;
  cpu.kernels = {c};
  auto cpu_back = deserialize(serialize(cpu));
  ASSERT_TRUE(cpu_back.ok()) << cpu_back.error().message;
  EXPECT_EQ(*cpu_back, cpu);
  EXPECT_TRUE(cpu_back->is_cpu());
  EXPECT_EQ(cpu_back->target.cpu_features, "+avx2") << "the target travels whole";
  EXPECT_EQ(target_of_arch("cpu:znver4"), Target::for_cpu("znver4", ""));
  EXPECT_EQ(target_of_arch("emulate:sm_80").name(), "emulate:sm_80");
  EXPECT_EQ(target_of_arch("sm_86"), Target::cuda(86));
  // No CUDA field is written for a CPU kernel: its record is its name, parameters, work items
  // and scratch (4 fields of 12 bytes of framing each) and no more.
  ByteWriter params;
  params.u64(2);
  params.u8(0), params.u8(1), params.u32(0), params.u64(64), params.u8(1);
  params.u8(1), params.u32(0);
  size_t kernel_record = 4 * 12 + c.name.size() + params.take().size() + (8 + 24 + 4) + 8;
  size_t whole = serialize(cpu).size();
  Artifact no_kernels = cpu;
  no_kernels.kernels.clear();
  EXPECT_EQ(whole - serialize(no_kernels).size(), 12 + kernel_record);
}

// Size terms belong to tensor-map parameters: terms on another kind of parameter are refused.
// A map's terms replace its dims and strides at the symbols' values (from its text, or from its
// description read back); a count its rank does not take, or a map the terms make illegal, is an
// error naming the map.
TEST(Artifact, TensorMapSizeTermsFollowTheDimsAndBelongToMaps) {
  Artifact a = typed_sample();
  a.kernels[0].params[0].map_terms = {SizeTerm{}};  // a pointer
  auto refused = deserialize(serialize(a));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("corrupt tensor-map terms"), std::string::npos)
      << refused.error().message;

  KernelParam map;
  map.kind = ParamKind::tensor_map;
  map.map = "tiled bf16 dims=64,2048,4 strides=128,262144 box=64,128,1 elem=1,1,1 swizzle=128B l2=256B";
  map.map_terms = {SizeTerm{64, {}, 1}, SizeTerm{1, {0}, 1}, SizeTerm{4, {}, 1},
                   SizeTerm{128, {}, 1}, SizeTerm{128, {0}, 1}};
  auto at = tensor_map_at(map, {100});
  ASSERT_TRUE(at.ok()) << at.error().message;
  EXPECT_EQ(to_string(*at),
            "tiled bf16 dims=64,100,4 strides=128,12800 box=64,128,1 elem=1,1,1 swizzle=128B l2=256B");
  auto top = tensor_map_at(map, {2048});
  ASSERT_TRUE(top.ok()) << top.error().message;
  EXPECT_EQ(to_string(*top), map.map);
  // From the description already read back (as a launcher keeps it from load): the same map.
  auto described = tensor_map_at(*top, map.map_terms, {100});
  ASSERT_TRUE(described.ok()) << described.error().message;
  EXPECT_EQ(*described, *at);
  auto too_few = tensor_map_at(*top, {SizeTerm{64, {}, 1}}, {100});
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.error().message.find("has 1 size terms where its rank takes 5"),
            std::string::npos)
      << too_few.error().message;
  auto missing = tensor_map_at(map, {});  // no value for the symbol
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("a size term is out of range"), std::string::npos);
  map.map_terms[4] = SizeTerm{100, {0}, 1};  // a stride of no 16-byte multiple at S = 1
  auto odd = tensor_map_at(map, {1});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("16"), std::string::npos) << odd.error().message;
  map.map_terms.pop_back();
  auto short_terms = tensor_map_at(map, {100});
  ASSERT_FALSE(short_terms.ok());
  EXPECT_NE(short_terms.error().message.find("has 4 size terms where its rank takes 5"),
            std::string::npos)
      << short_terms.error().message;
}

TEST(Artifact, ParameterSpaceAlignsEachKind) {
  std::vector<KernelParam> params = {{{BufferRole::output, 0}, 4, true}, dim_param(0)};
  EXPECT_EQ(param_space_bytes(params), 12u);
  params.push_back({{BufferRole::input, 0}, 4, false});  // a pointer after an int: aligned to 8
  EXPECT_EQ(param_space_bytes(params), 24u);
  KernelParam map;
  map.kind = ParamKind::tensor_map;
  params.push_back(map);  // 128 bytes aligned to 64
  EXPECT_EQ(param_space_bytes(params), 64u + 128u);
  EXPECT_EQ(param_size(ParamKind::tensor_map), 128u);
  EXPECT_EQ(param_align(ParamKind::tensor_map), 64u);
}

TEST(Artifact, BindBuffersLeavesDimsUnbound) {
  KernelArtifact k;
  k.name = "k0";
  k.params = {{{BufferRole::output, 0}, 4, true}, dim_param(0)};
  int a = 0, c = 0;
  auto bound = bind_buffers(k, {&a}, {&c}, {});
  ASSERT_TRUE(bound) << bound.error().message;
  EXPECT_EQ(*bound, (std::vector<void*>{&c, nullptr}));
}

// The framing of format 5 by hand: magic, version, then tag, length, payload.
std::string field(uint32_t tag, std::string_view payload) {
  ByteWriter w;
  w.u32(tag);
  w.u64(payload.size());
  w.raw(payload);
  return w.take();
}

// `bytes` with `extra` fields before its end field (tag 0, empty: the last 12 bytes).
std::string with_fields(const std::string& bytes, const std::string& extra) {
  return bytes.substr(0, bytes.size() - 12) + extra + bytes.substr(bytes.size() - 12);
}

TEST(Artifact, AnUnknownOptionalFieldIsSkippedAndAnUnknownRequiredOneRefused) {
  std::string bytes = serialize(sample());
  EXPECT_EQ(bytes.substr(bytes.size() - 12), std::string(12, '\0'));
  auto skipped = deserialize(with_fields(bytes, field(999, "something a newer kiln shows")));
  ASSERT_TRUE(skipped.ok()) << skipped.error().message;
  EXPECT_EQ(*skipped, sample());
  auto refused = deserialize(with_fields(bytes, field(999 | 0x80000000u, "something that changes a run")));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("field 999 is required"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("a newer kiln wrote it"), std::string::npos);
  // The same inside a kernel record: the kernel field (12, required) holding a kernel with an
  // unknown required field.
  std::string kernel = field(1 | 0x80000000u, "k9") + field(77 | 0x80000000u, "x");
  auto in_kernel = deserialize(with_fields(bytes, field(12 | 0x80000000u, kernel)));
  ASSERT_FALSE(in_kernel.ok());
  EXPECT_NE(in_kernel.error().message.find("kernel field 77 is required"), std::string::npos)
      << in_kernel.error().message;
  // A kernel record without a name, and a parameter kind this kiln does not know.
  auto unnamed = deserialize(
      with_fields(bytes, field(12 | 0x80000000u, field(11 | 0x80000000u, std::string(8, '\0')))));
  ASSERT_FALSE(unnamed.ok());
  EXPECT_NE(unnamed.error().message.find("without a name"), std::string::npos);
  ByteWriter kind;
  kind.u64(1);
  kind.u8(7);
  kind.u32(0);
  auto unknown_kind =
      deserialize(with_fields(bytes, field(12 | 0x80000000u, field(1 | 0x80000000u, "k9") +
                                                                 field(2 | 0x80000000u, kind.take()))));
  ASSERT_FALSE(unknown_kind.ok());
  EXPECT_NE(unknown_kind.error().message.find("parameter kind 7"), std::string::npos)
      << unknown_kind.error().message;
  // A newer format version is named as such.
  std::string newer = bytes;
  newer[8] = 6;
  EXPECT_NE(deserialize(newer).error().message.find("a newer kiln wrote it"), std::string::npos);
}

// Format 4 exactly as kiln wrote it before the tagged format (the writer of that release, kept
// here): fields in declaration order, pointers only, dims as a count.
void write_terms_v4(ByteWriter& w, const std::vector<SizeTerm>& v) {
  w.u64(v.size());
  for (const SizeTerm& t : v) {
    w.i64(t.coef);
    w.i64(t.divisor);
    w.u64(t.symbols.size());
    for (uint32_t s : t.symbols) w.u32(s);
  }
}

std::string serialize_v4(const Artifact& a, const std::vector<uint32_t>& dim_params) {
  ByteWriter w;
  w.raw(std::string_view("KILNART\0", 8));
  w.u32(4);
  for (const std::string* s : {&a.arch, &a.precision, &a.decision, &a.nvrtc_version, &a.source,
                               &a.log})
    w.str(*s);
  w.u64(a.fallbacks.size());
  for (const auto& s : a.fallbacks) w.str(s);
  for (const auto* v : {&a.input_bytes, &a.output_bytes, &a.temporary_bytes}) {
    w.u64(v->size());
    for (uint64_t x : *v) w.u64(x);
  }
  w.u64(a.workspace_bytes);
  w.u64(a.kernels.size());
  for (const KernelArtifact& k : a.kernels) {
    w.str(k.name);
    w.str(k.entry);
    w.str(k.cubin);
    w.str(k.ptx);
    for (uint32_t g : k.launch.grid) w.u32(g);
    for (uint32_t b : k.launch.block) w.u32(b);
    w.u32(k.launch.dynamic_smem_bytes);
    w.u64(k.params.size());
    for (const KernelParam& p : k.params) {
      w.u8(static_cast<uint8_t>(p.buffer.role));
      w.u32(p.buffer.index);
      w.u64(p.bytes);
      w.u8(p.written ? 1 : 0);
    }
    w.i32(k.report.registers);
    w.i32(k.report.spill_store_bytes);
    w.i32(k.report.spill_load_bytes);
    w.i32(k.report.static_smem_bytes);
  }
  w.u64(a.bucket.size());
  for (const auto& range : a.bucket) {
    w.i64(range[0]);
    w.i64(range[1]);
  }
  write_terms_v4(w, a.input_sizes);
  write_terms_v4(w, a.output_sizes);
  write_terms_v4(w, a.temporary_sizes);
  for (size_t i = 0; i < a.kernels.size(); ++i) {
    write_terms_v4(w, a.kernels[i].grid);
    w.u32(dim_params[i]);
  }
  w.str(a.object);
  for (const KernelArtifact& k : a.kernels) {
    write_terms_v4(w, k.items);
    w.u64(k.scratch_floats);
  }
  for (const KernelArtifact& k : a.kernels) w.str(k.binary_of);
  return w.take();
}

TEST(Artifact, FormatFourMigratesItsDimsToTypedParameters) {
  Artifact a = sample();
  for (KernelArtifact& k : a.kernels) {  // format 4 had no such fields
    k.report.local_bytes = 0;
    k.tile.clear();
    k.schedule.clear();
  }
  a.bucket = {{33, 64}, {1, 8}};
  a.input_sizes = {SizeTerm{16, {0}, 1}, SizeTerm{32, {0, 1}, 1}};
  a.output_sizes = {SizeTerm{64, {0}, 1}};
  a.temporary_sizes = {SizeTerm{128, {0}, 1}, SizeTerm{7, {}, 1}};
  a.kernels[0].grid = {SizeTerm{1, {0}, 64}, SizeTerm{}, SizeTerm{}};
  a.kernels[1].grid = a.kernels[0].grid;
  a.kernels[1].binary_of = a.kernels[0].name;
  auto migrated = deserialize(serialize_v4(a, {2, 2}));
  ASSERT_TRUE(migrated.ok()) << migrated.error().message;
  Artifact expected = a;
  for (KernelArtifact& k : expected.kernels) {
    k.params.push_back(dim_param(0));
    k.params.push_back(dim_param(1));
  }
  EXPECT_EQ(*migrated, expected);
  EXPECT_EQ(migrated->target, Target::cuda(90)) << "derived from the arch";
  // Written again, it is format 5 and reads back the same.
  std::string again = serialize(*migrated);
  EXPECT_EQ(static_cast<uint8_t>(again[8]), k_artifact_format_version);
  auto back = deserialize(again);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, expected);
  // Every truncation of the old bytes is refused too.
  std::string old = serialize_v4(a, {2, 2});
  for (size_t n = 0; n < old.size(); n += 7)
    EXPECT_FALSE(deserialize(std::string_view(old).substr(0, n)).ok()) << n;
}

// What format 5 refuses, format 4 refuses too (an artifact read from it is written as format 5,
// which would not read back): a kernel without a name, an arch that names no CUDA arch.
TEST(Artifact, FormatFourRefusesWhatFormatFiveRefuses) {
  Artifact nameless = sample();
  nameless.kernels[1].name.clear();
  auto old = deserialize(serialize_v4(nameless, {0, 0}));
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.error().message, "artifact: a kernel record without a name");
  EXPECT_FALSE(deserialize(serialize(nameless)).ok());
  for (const char* arch : {"sm_9x", "compute_90", "sm_90b"}) {
    Artifact a = sample();
    a.arch = arch;
    auto read = deserialize(serialize_v4(a, {0, 0}));
    ASSERT_FALSE(read.ok()) << arch;
    EXPECT_EQ(read.error().message, "artifact: arch " + std::string(arch) + " names no CUDA arch");
  }
  Artifact cpu = sample();
  cpu.arch = "cpu:znver4";
  EXPECT_TRUE(deserialize(serialize_v4(cpu, {0, 0})).ok()) << "a CPU target's arch reads";
}

}  // namespace
}  // namespace kiln::compiler
