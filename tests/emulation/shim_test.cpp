// The host shim keeps up with the device prelude: both define the same primitives by name; and
// the shim fails where hardware leaves the result undefined (.aligned instructions reached from
// two places, ldmatrix addresses of every lane on sm_75).
#include "compiler/prelude.h"
#include "emulation/module.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

namespace kiln::emulation {
namespace {

std::string shim_text() {
  std::string text;
  for (const ShimFile& f : shim_files()) text += f.text;
  return text;
}

// The primitives (KILN_DEVICE functions named kiln_*) that `text` defines.
std::set<std::string> primitives(const std::string& text) {
  std::regex primitive(R"(KILN_DEVICE[^(;{]*\b(kiln_[a-z0-9_]+)\()");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), primitive);
       it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  return names;
}

TEST(EmulationShim, DefinesEveryPrimitiveOfTheDevicePrelude) {
  std::set<std::string> device = primitives(std::string(compiler::prelude_source()));
  std::set<std::string> shim = primitives(shim_text());
  EXPECT_GE(device.size(), 20u);  // the pattern still matches the prelude's style
  for (const std::string& name : device) EXPECT_TRUE(shim.count(name)) << "the shim lacks " << name;
  for (const char* type : {"struct kiln_bf16", "struct kiln_f16"})
    EXPECT_NE(shim_text().find(type), std::string::npos) << type;
}

TEST(EmulationShim, DefinesNoPrimitiveTheDevicePreludeLacks) {
  // A kernel calling a primitive only the shim defines would pass emulation and fail NVRTC.
  std::set<std::string> device = primitives(std::string(compiler::prelude_source()));
  std::set<std::string> shim = primitives(shim_text());
  EXPECT_GE(shim.size(), 20u);
  for (const std::string& name : shim)
    EXPECT_TRUE(device.count(name)) << "the device prelude lacks " << name;
}

// Compiles `text` (one kernel, `entry`) for `sm` and launches it over one warp with a buffer of
// 32 floats; returns the launch's error, empty on success.
std::string launch_warp(const std::string& text, const std::string& entry, int sm) {
  ModuleOptions options;
  options.sm = sm;
  options.entries = {entry};
  auto module = compile_module(text, options);
  if (!module) return "compile: " + module.error().message;
  std::vector<float> buffer(32);
  compiler::LaunchShape shape;
  shape.block = {32, 1, 1};
  shape.dynamic_smem_bytes = 1024;
  Status status =
      (*module)->launch(entry, shape, {buffer.data()}, {{buffer.data(), buffer.size() * 4}});
  return status.ok() ? "" : status.error().message;
}

TEST(EmulationShim, AnAlignedInstructionReachedFromTwoPlacesIsAnError) {
  // Half the warp at one mma.sync, half at another: the same instruction written twice, which
  // .aligned forbids (each lane's return address differs).
  const std::string text =
      "extern \"C\" __global__ void kiln_split(float* out) {\n"
      "  unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};\n"
      "  float d[4] = {0, 0, 0, 0};\n"
      "  const int lane = threadIdx.x;\n"
      "  if (lane < 16) {\n"
      "    kiln_mma_m16n8k8_f16(d, a, b);\n"
      "    out[lane] = d[0] + 1.0f;\n"
      "  } else {\n"
      "    kiln_mma_m16n8k8_f16(d, a, b);\n"
      "    out[lane] = d[0] + 2.0f;\n"
      "  }\n"
      "}\n";
  std::string error = launch_warp(text, "kiln_split", 80);
  EXPECT_NE(error.find("at another place in the kernel"), std::string::npos) << error;
  // One place for every lane is fine.
  const std::string joined =
      "extern \"C\" __global__ void kiln_joined(float* out) {\n"
      "  unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};\n"
      "  float d[4] = {0, 0, 0, 0};\n"
      "  kiln_mma_m16n8k8_f16(d, a, b);\n"
      "  out[threadIdx.x] = d[0];\n"
      "}\n";
  EXPECT_EQ(launch_warp(joined, "kiln_joined", 80), "");
}

TEST(EmulationShim, LdmatrixX1NeedsEveryLanesAddressOnSm75) {
  // Lanes 8..31 pass a null address: x1 reads lanes 0..7 only, which sm_80 accepts; sm_75 wants
  // every lane's address valid.
  const std::string text =
      "extern \"C\" __global__ void kiln_x1(float* out) {\n"
      "  unsigned short* s = (unsigned short*)kiln_dynamic_smem();\n"
      "  const int lane = threadIdx.x;\n"
      "  for (int i = 0; i < 8; ++i) s[lane * 8 + i] = (unsigned short)lane;\n"
      "  __syncthreads();\n"
      "  unsigned r[1];\n"
      "  kiln_ldmatrix_x1(r, lane < 8 ? (const void*)(s + lane * 8) : (const void*)0);\n"
      "  out[lane] = (float)(r[0] & 0xffffu);\n"
      "}\n";
  EXPECT_EQ(launch_warp(text, "kiln_x1", 80), "");
  std::string error = launch_warp(text, "kiln_x1", 75);
  EXPECT_NE(error.find("sm_75 needs every lane's valid"), std::string::npos) << error;
}

TEST(EmulationShim, ShipsEveryHeaderItIncludes) {
  std::string shim = shim_text();
  std::regex include(R"(#include "([^"]+)\")");
  for (auto it = std::sregex_iterator(shim.begin(), shim.end(), include);
       it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1];
    bool shipped = false;
    for (const ShimFile& f : shim_files()) shipped = shipped || name == f.name;
    EXPECT_TRUE(shipped) << name;
  }
}

}  // namespace
}  // namespace kiln::emulation
