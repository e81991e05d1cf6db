// The host shim keeps up with the device prelude: every primitive compiler/prelude.cuh defines
// has a host definition of the same name.
#include "compiler/prelude.h"
#include "emulation/module.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace kiln::emulation {
namespace {

std::string shim_text() {
  std::string text;
  for (const ShimFile& f : shim_files()) text += f.text;
  return text;
}

TEST(EmulationShim, DefinesEveryPrimitiveOfTheDevicePrelude) {
  std::string prelude(compiler::prelude_source());
  std::string shim = shim_text();
  std::regex primitive(R"(KILN_DEVICE[^(;{]*\b(kiln_[a-z0-9_]+)\()");
  int found = 0;
  for (auto it = std::sregex_iterator(prelude.begin(), prelude.end(), primitive);
       it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1];
    ++found;
    EXPECT_TRUE(std::regex_search(shim, std::regex("KILN_DEVICE[^(;{]*\\b" + name + "\\(")))
        << "the shim lacks " << name;
  }
  EXPECT_GE(found, 20);  // the pattern still matches the prelude's style
  for (const char* type : {"struct kiln_bf16", "struct kiln_f16"})
    EXPECT_NE(shim.find(type), std::string::npos) << type;
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
