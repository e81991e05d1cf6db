// parse_ptxas_log(): registers, spills and shared memory per entry function.
#include "compiler/ptxas_report.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

constexpr const char* k_log =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'kiln_k0_matmul' for 'sm_90'\n"
    "ptxas info    : Function properties for kiln_k0_matmul\n"
    "ptxas         .     8 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads\n"
    "ptxas info    : Used 72 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]\n"
    "ptxas info    : Compile time = 10.0 ms\n"
    "ptxas info    : Compiling entry function 'kiln_k1_softmax' for 'sm_90'\n"
    "ptxas info    : Function properties for kiln_k1_softmax\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 18 registers\n";

TEST(PtxasReport, ReadsEachEntryFunction) {
  auto reports = parse_ptxas_log(k_log);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].first, "kiln_k0_matmul");
  EXPECT_EQ(reports[0].second.registers, 72);
  EXPECT_EQ(reports[0].second.spill_store_bytes, 12);
  EXPECT_EQ(reports[0].second.spill_load_bytes, 20);
  EXPECT_EQ(reports[0].second.spill_bytes(), 32);
  EXPECT_EQ(reports[0].second.static_smem_bytes, 1024);
  EXPECT_EQ(reports[0].second.local_bytes, 8);
  EXPECT_EQ(reports[1].first, "kiln_k1_softmax");
  EXPECT_EQ(reports[1].second.registers, 18);
  EXPECT_EQ(reports[1].second.spill_bytes(), 0);
  EXPECT_EQ(reports[1].second.static_smem_bytes, 0);
}

TEST(PtxasReport, UnknownTextGivesNothing) {
  EXPECT_TRUE(parse_ptxas_log("").empty());
  EXPECT_TRUE(parse_ptxas_log("Used 5 registers\nrandom text 'x'\n").empty());
}

TEST(PtxasReport, MissingRegisterLineLeavesMinusOne) {
  auto reports = parse_ptxas_log("Compiling entry function 'k' for 'sm_80'\n");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].second.registers, -1);
}

}  // namespace
}  // namespace kiln::compiler
