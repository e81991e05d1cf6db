// Artifact bytes: round trip, and rejection of truncated, corrupted or foreign bytes.
#include "compiler/artifact.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

Artifact sample() {
  Artifact a;
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
  k.report = {72, 0, 4, 1024};
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
      EXPECT_EQ(serialize(*result).size(), mutated.size());
    }
  }
}

TEST(Artifact, HugeCountsAreRejectedWithoutAllocating) {
  std::string bytes = serialize(Artifact{});
  // The fallbacks count sits after the magic, version and six empty strings.
  size_t at = 8 + 4 + 6 * 8;
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

}  // namespace
}  // namespace kiln::compiler
