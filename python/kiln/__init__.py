"""kiln: tensor graphs compiled into fused kernels by precision mode and target, cached under the
graph's hash, run on NumPy arrays or torch tensors.

    import kiln, numpy as np
    rt = kiln.Runtime(target="cpu", precision="highest")
    exe = rt.compile(pathlib.Path("examples/graphs/mlp.kg"))
    y = exe(x, w1, b1, w2, b2)            # NumPy in, NumPy out; torch in, torch out
"""
from __future__ import annotations

import os as _os
import pathlib as _pathlib

# The CPU target's LLVM plugin ships inside the package; KILN_CPU_PLUGIN, when set, still wins.
_PLUGIN = _pathlib.Path(__file__).with_name("libkiln_cpu_llvm.so")
if _PLUGIN.exists() and not _os.environ.get("KILN_CPU_PLUGIN"):
    _os.environ["KILN_CPU_PLUGIN"] = str(_PLUGIN)

from ._errors import CacheError, CompileError, Error, GraphError, RuntimeError  # noqa: E402
from ._runtime import Dim, Executable, Graph, Runtime, TensorSpec, gpu_status  # noqa: E402

__all__ = [
    "CacheError",
    "CompileError",
    "Dim",
    "Error",
    "Executable",
    "Graph",
    "GraphError",
    "Runtime",
    "RuntimeError",
    "TensorSpec",
    "gpu_status",
]
__version__ = "0.1.0"
