// Whether an artifact's cubins can load on a device through this driver, said before loading.
#pragma once

#include "compiler/artifact.h"
#include "runtime/driver.h"

namespace kiln::runtime {

// A cubin loads where the driver's CUDA major version is at least that of the NVRTC that built it
// (minor versions are compatible), and the device's compute capability has the cubin's major and
// at least its minor. Fails naming both sides and what to change.
Status check_loadable(const DriverApi& api, int device, const compiler::Artifact& artifact);

}  // namespace kiln::runtime
