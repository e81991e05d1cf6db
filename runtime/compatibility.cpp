// The driver-version and architecture checks made once before an artifact's modules load.
#include "runtime/compatibility.h"

#include "compiler/options.h"

#include <cstdio>

namespace kiln::runtime {

namespace {

// The CUDA version an artifact's NVRTC reported, from "13.0 (libnvrtc.so.13 ...)"; 0 when the
// field says nothing usable (then the driver's own check is all there is).
int nvrtc_version(const std::string& text) {
  int major = 0, minor = 0;
  if (std::sscanf(text.c_str(), "%d.%d", &major, &minor) != 2 || major <= 0) return 0;
  return major * 1000 + minor * 10;
}

}  // namespace

Status check_loadable(const DriverApi& api, int device, const compiler::Artifact& artifact) {
  if (int built = nvrtc_version(artifact.nvrtc_version); built && api.version / 1000 < built / 1000) {
    return make_error("CUDA driver ", version_text(api.version), " cannot load cubins from NVRTC ",
                      version_text(built), "; install a driver for CUDA ",
                      std::to_string(built / 1000), ".0 or newer, or compile with an NVRTC no "
                      "newer than the driver (KILN_NVRTC_PATH)");
  }
  if (artifact.target.kind != compiler::Target::Kind::cuda || artifact.target.sm <= 0)
    return make_error("kernels compiled for ", artifact.arch, " are not CUDA kernels for a device");
  int target = artifact.target.sm;
  auto sm = device_sm(device);
  if (!sm) return sm.error();
  // Arch-specific kernels (sm_90a: wgmma, setmaxnreg) run on their compute capability only;
  // others on any later minor version of their major one.
  if (artifact.target.arch_specific() && *sm != target) {
    return make_error("kernels compiled for ", artifact.arch, " cannot run here: ", artifact.arch,
                      " code runs only on compute capability ", std::to_string(target / 10), ".",
                      std::to_string(target % 10), " and CUDA device ", std::to_string(device),
                      " is ", compiler::arch_name(*sm), "; compile for ",
                      compiler::device_target(*sm).arch(),
                      " (RuntimeOptions::arch, or leave it empty to target the device)");
  }
  if (*sm / 10 != target / 10 || *sm % 10 < target % 10) {
    return make_error("kernels compiled for ", artifact.arch, " cannot run here: CUDA device ",
                      std::to_string(device), " is ", compiler::arch_name(*sm), "; compile for ",
                      compiler::device_target(*sm).arch(),
                      " (RuntimeOptions::arch, or leave it empty to target the device)");
  }
  return Status::success();
}

}  // namespace kiln::runtime
