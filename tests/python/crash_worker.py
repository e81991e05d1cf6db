"""A stand-in for torch_differential's check, for the test of its pool: seed 2 kills its worker
(as a crash in native code would), every other seed gives an `ok` record (the workers still
import the script, and torch, for its initializer)."""

from __future__ import annotations

import os
import signal
from typing import NamedTuple


class Run(NamedTuple):
    mode: str


def check(seed, run, timeout):
    if seed == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"seed": seed, "mode": run.mode, "status": "ok"}
