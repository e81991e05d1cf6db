"""kiln's exceptions: each carries kiln's own message."""
from __future__ import annotations

import builtins
import re

_LOCATION = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): ")
_AFTER_FILE = re.compile(r"(?P<line>\d+):(?P<col>\d+): ")


class Error(Exception):
    """Every error kiln raises."""


class GraphError(Error):
    """A graph that does not parse or verify: `file`, `line` and `col` say where (None if unknown)."""

    def __init__(self, message: str, file: str | None = None):
        super().__init__(message)
        # With the file known, the location is what follows its name; else the first
        # "NAME:LINE:COL: " of the message.
        if file is not None:
            match = (_AFTER_FILE.match(message, len(file) + 1)
                     if message.startswith(file + ":") else None)
            found = file if match else None
        else:
            match = _LOCATION.match(message)
            found = match["file"] if match else None
        self.file: str | None = found
        self.line: int | None = int(match["line"]) if match else None
        self.col: int | None = int(match["col"]) if match else None


class CompileError(Error):
    """A graph that parsed but cannot be compiled for the runtime's target and precision."""


class CacheError(Error):
    """The cache or its remote tier is misconfigured (an unusable KILN_REMOTE_KEY, for one)."""


class RuntimeError(Error, builtins.RuntimeError):
    """A runtime that cannot be made, or a run that fails (wrong inputs, no device, a launch)."""
