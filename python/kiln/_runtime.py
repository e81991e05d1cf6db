"""Graph, Runtime and Executable: the extension's classes with the array conventions around them
(NumPy in, NumPy out; torch in, torch out; DLPack, no copy unless an input must be made
contiguous or aligned, and then counted)."""
from __future__ import annotations

import os
import pathlib
import sys
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple, Sequence

import numpy as np

from . import _kiln
from ._errors import GraphError, RuntimeError

# kiln dtype name -> NumPy dtype (NumPy has no bfloat16: bf16 tensors come from torch).
_NUMPY = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "bool": np.bool_}
_NUMPY_NAMES = {np.dtype(v).name: k for k, v in _NUMPY.items()}
# kiln dtype name -> torch's dtype attribute, and torch's dtype as str() -> kiln's name.
_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32",
                 "i64": "int64", "bool": "bool"}
_TORCH_NAMES = {f"torch.{t}": k for k, t in _TORCH_DTYPES.items()}
# Graph files larger than this are refused rather than read (the CLI's and ir::parse_graph_file's
# limit, ir::k_max_source_bytes).
_MAX_GRAPH_BYTES = 64 << 20
# The kernels use 16-byte accesses: run() refuses a pointer that is not 16-byte aligned.
_ALIGN = 16


class TensorSpec(NamedTuple):
    """A graph input or output: `shape` holds a symbolic dim's upper bound, `dims` its name
    (None for a constant dim)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    dims: tuple[str | None, ...]


class Dim(NamedTuple):
    """A symbolic dim (`dim B: 1..4096`) and its inclusive range."""

    name: str
    lo: int
    hi: int


def _specs(raw) -> list[TensorSpec]:
    return [TensorSpec(n, d, tuple(s), tuple(m)) for n, d, s, m in raw]


def _is_torch(x: Any) -> bool:
    """A torch.Tensor, a subclass of one included (nn.Parameter, a user's own); False without
    torch imported (then nothing passed can be one)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


class Graph:
    """A parsed, verified graph. `Graph.parse(text)`, `Graph.load(path)`."""

    __slots__ = ("_g",)

    def __init__(self, native: _kiln._Graph):
        self._g = native

    @staticmethod
    def parse(text: str, file: str = "<graph>") -> Graph:
        """Parses `.kg` text; a bad graph raises kiln.GraphError ("file:line:col: error: ...")."""
        if not isinstance(text, str) or not isinstance(file, str):
            raise TypeError("Graph.parse takes the graph's text and a file name, both str")
        if "\0" in file:
            raise ValueError(f"Graph.parse(file={file!r}): a NUL character")
        for name, value in (("text", text), ("file", file)):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"Graph.parse({name}=...): not valid UTF-8 at character "
                                 f"{e.start} ({value[e.start]!r})") from None
        return Graph(_parse(text, file))

    @staticmethod
    def load(path: str | os.PathLike) -> Graph:
        """Reads and parses a `.kg` file."""
        path = pathlib.Path(path)
        try:
            with path.open("rb") as f:
                data = f.read(_MAX_GRAPH_BYTES + 1)  # at most: /dev/zero has no end
            if len(data) > _MAX_GRAPH_BYTES:
                raise GraphError(f"{path}: larger than {_MAX_GRAPH_BYTES >> 20} MiB; "
                                 "kiln graph files are small text")
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise GraphError(f"{path}: cannot read the graph: {e}") from None
        # A path that is not UTF-8 (bytes a Linux name may hold) is named with escapes.
        name = str(path).encode("utf-8", "backslashreplace").decode("utf-8")
        return Graph(_parse(text, name))

    @property
    def name(self) -> str:
        return self._g.name

    @property
    def text(self) -> str:
        """The canonical text: Graph.parse(g.text).text == g.text."""
        return self._g.text

    @property
    def hash(self) -> str:
        """The graph's identity in the cache: 32 hex digits (names and comments do not enter)."""
        return self._g.hash

    @property
    def inputs(self) -> list[TensorSpec]:
        return _specs(self._g.inputs)

    @property
    def outputs(self) -> list[TensorSpec]:
        return _specs(self._g.outputs)

    @property
    def dims(self) -> list[Dim]:
        return [Dim(*d) for d in self._g.dims]

    def __repr__(self) -> str:
        return f"<kiln.Graph {self.name} {self.hash}>"


def _parse(text: str, file: str) -> _kiln._Graph:
    """The native parse, its GraphError located with the file name known (a name that holds
    ":N:M: " itself is not read as the location)."""
    try:
        return _kiln._Graph.parse(text, file)
    except GraphError as e:
        raise GraphError(str(e), file=file) from None


class Runtime:
    """Compiles graphs through kiln's cache for one target and precision.

    target: "cuda" (device `device`), "cuda:sm_90" or "cuda:sm_90a" (compile for that arch, no
    GPU needed to compile), "cpu", "cpu:NAME", "emulate:sm_XX", or "auto". precision: "highest", "high",
    "tf32x3", "medium" or "auto". cache_dir: None for $KILN_CACHE_DIR or ~/.cache/kiln. remote:
    None for $KILN_REMOTE_CACHE, "" for no remote tier, or "redis://host:port". fallbacks:
    "warn", "refuse" or "allow" (see docs/python.md)."""

    def __init__(
        self,
        target: str = "cuda",
        precision: str = "high",
        cache_dir: str | os.PathLike | None = None,
        remote: str | None = None,
        fallbacks: str = "warn",
        device: int = 0,
        *,
        allow_fallback: bool = False,
        check_indices: bool = False,
        use_cache: bool = True,
    ):
        words = {"target": target, "precision": precision, "fallbacks": fallbacks}
        if remote is not None:
            words["remote"] = remote
        if cache_dir is not None:
            cache_dir = os.fsdecode(os.fspath(cache_dir))
            words["cache_dir"] = cache_dir
        for name, value in words.items():
            if not isinstance(value, str):
                raise TypeError(f"Runtime({name}=...): expected a str, not {type(value).__name__}")
            if "\0" in value:
                raise ValueError(f"Runtime({name}={value!r}): a NUL character")
            if not value and name != "remote":  # remote="" is no remote tier
                default = "None" if name == "cache_dir" else "leave it out"
                raise ValueError(f"Runtime({name}=''): expected a value ({default} for the "
                                 "default)")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"Runtime({name}={value!r}): not valid UTF-8 (kiln takes "
                                 "UTF-8 text and paths)") from None
        if isinstance(device, bool) or not isinstance(device, (int, np.integer)):
            raise TypeError(f"Runtime(device=...): expected an int, not {type(device).__name__}")
        if not 0 <= device < 2**31:
            raise ValueError(f"Runtime(device={device}): expected a device number from 0")
        self.target = target
        self.precision = precision
        self._rt = _kiln._Runtime(target, precision, cache_dir, remote, fallbacks, int(device),
                                  bool(allow_fallback), bool(check_indices), bool(use_cache))

    @property
    def arch(self) -> str:
        """The settled target: "sm_90", "sm_90a", "cpu:znver4", "emulate:sm_90"."""
        return self._rt.arch

    def compile(self, graph: str | os.PathLike | Graph) -> Executable:
        """Compiles `.kg` text, a `.kg` file (a pathlib.Path) or a Graph through the cache (a hit
        costs microseconds). A symbolic graph compiles each bucket on first use."""
        if isinstance(graph, Graph):
            g = graph
        elif isinstance(graph, os.PathLike):
            g = Graph.load(graph)
        elif isinstance(graph, str):
            g = Graph.parse(graph)
        else:
            raise TypeError(f"compile() takes .kg text, a pathlib.Path or a kiln.Graph, "
                            f"not {type(graph).__name__}")
        return Executable(self._rt.compile(g._g), g.name)

    def __repr__(self) -> str:
        return f"<kiln.Runtime {self.arch} {self.precision}>"


class Executable:
    """A compiled graph. `exe(*inputs)` returns its outputs (one array, or a tuple of several) in
    the inputs' framework; `exe.run(inputs, outputs)` writes into arrays the caller made."""

    def __init__(self, native: _kiln._Executable, name: str):
        self._x = native
        self.name = name
        self._on_host = native.on_host
        self._inputs = _specs(native.inputs)
        self._outputs = _specs(native.outputs)
        self._lock = threading.Lock()
        self._stats = {"calls": 0, "copied_inputs": 0, "copied_bytes": 0}
        self._last: tuple | None = None  # (input shapes, output specs) of the last call

    # What it is.
    @property
    def inputs(self) -> list[TensorSpec]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[TensorSpec]:
        return list(self._outputs)

    @property
    def dims(self) -> list[Dim]:
        return [Dim(*d) for d in self._x.dims]

    @property
    def key(self) -> str:
        """The cache key (32 hex digits); "" for a symbolic graph, whose buckets have their own."""
        return self._x.key

    @property
    def graph_hash(self) -> str:
        return self._x.graph_hash

    @property
    def cache(self) -> str | None:
        """"hit" or "miss"; None for a symbolic graph (each bucket is its own entry)."""
        if self._x.dims:
            return None
        return "hit" if self._x.cache_hit else "miss"

    @property
    def tier(self) -> str | None:
        """Where a hit came from: "local" or "remote"; None for a miss."""
        return self._x.cache_tier or None

    @property
    def compile_ms(self) -> float:
        return self._x.compile_ms

    @property
    def lookup_us(self) -> float:
        return self._x.lookup_us

    @property
    def arch(self) -> str:
        return self._x.arch

    @property
    def precision(self) -> str:
        return self._x.precision

    @property
    def fallbacks(self) -> list[str]:
        return list(self._x.fallbacks)

    @property
    def kernel_count(self) -> int:
        return self._x.kernel_count

    @property
    def stats(self) -> dict[str, int]:
        """Calls, and the inputs copied: not C-contiguous or 16-byte aligned, byte-swapped, or
        in an output's memory."""
        with self._lock:
            return dict(self._stats)

    # Running.
    def __call__(self, *inputs: Any, stream: int | Any | None = None):
        with _on_stream(inputs, stream):
            arrays, framework, device = self._take_inputs(inputs)
            specs = self._output_specs([a.shape for a in arrays])
            outputs = [_empty(framework, device, s.dtype, s.shape, s.name) for s in specs]
            self._x.run(arrays, outputs, self._stream(stream, framework, device))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def run(self, inputs: Sequence[Any], outputs: Sequence[Any], stream: int | Any | None = None) -> None:
        """Runs into `outputs`: C-contiguous, 16-byte aligned arrays of the outputs' dtypes and
        shapes (a wrong one raises kiln.RuntimeError, nothing is written). An output may be an
        input's memory (an update in place): that input is read from a copy. Two outputs may
        not share memory."""
        if not isinstance(inputs, (list, tuple)) or not isinstance(outputs, (list, tuple)):
            raise TypeError("run() takes a list of inputs and a list of outputs")
        with _on_stream(inputs, stream):
            self._run(inputs, outputs, stream)

    def _run(self, inputs, outputs, stream) -> None:
        arrays, framework, device = self._take_inputs(inputs)
        outs = []
        for spec, out in zip(self._outputs, outputs):
            out = out.detach() if _is_torch(out) else out
            if not _is_torch(out) and not isinstance(out, np.ndarray):
                raise TypeError(f"output '{spec.name}': expected a NumPy array or a torch tensor, "
                                f"not {type(out).__name__}")
            if _is_torch(out):
                if out.device.type not in ("cpu", "cuda"):
                    raise RuntimeError(f"output '{spec.name}' is on {out.device.type}: kiln "
                                       "writes host or CUDA tensors")
                _check_dense(out, f"output '{spec.name}'")
            if not _contiguous(out) or _address(out) % _ALIGN:
                raise RuntimeError(f"output '{spec.name}' must be C-contiguous and 16-byte aligned")
            if not _is_torch(out) and not out.dtype.isnative:
                raise RuntimeError(f"output '{spec.name}' is in non-native byte order "
                                   f"({out.dtype.str}): kiln writes {out.dtype.name} in the "
                                   "machine's own")
            if (out.is_neg() or out.is_conj()) if _is_torch(out) else not out.flags.writeable:
                raise RuntimeError(f"output '{spec.name}' is not writable (a read-only array, or "
                                   "a tensor view with its negative or conjugate bit set)")
            outs.append(out)
        if len(outs) != len(outputs) or len(outs) != len(self._outputs):
            raise RuntimeError(f"graph '{self.name}' has {len(self._outputs)} outputs, "
                               f"got {len(outputs)}")
        # Kernels read inputs while they write outputs: memory that is both (an update in place,
        # `run([x], [x])`) is read from a copy of the input, as NumPy's out= does; two outputs in
        # the same memory are refused.
        for i, out in enumerate(outs):
            for j in range(i):
                if _overlap(out, outs[j]):
                    raise RuntimeError(f"outputs '{self._outputs[j].name}' and "
                                       f"'{self._outputs[i].name}' share memory: kiln writes "
                                       "each whole")
        for k, x in enumerate(arrays):
            if any(_overlap(x, out) for out in outs):
                arrays[k] = x.clone() if _is_torch(x) else x.copy()
                with self._lock:
                    self._stats["copied_inputs"] += 1
                    self._stats["copied_bytes"] += _nbytes(x)
        self._x.run(arrays, outs, self._stream(stream, framework, device))

    def prepare(self, dims: dict[str, int] | None = None, stream: int | None = None) -> None:
        """Compiles (through the cache) and loads the bucket holding `dims` ahead of the first
        run; a static graph takes no dims."""
        names = [d.name for d in self.dims]
        if dims is not None and not isinstance(dims, Mapping):
            raise TypeError(f"prepare(dims=...): expected a dict of dim names to sizes, not "
                            f"{type(dims).__name__}")
        dims = dict(dims or {})
        for k in dims:
            if not isinstance(k, str):
                raise TypeError(f"prepare(dims=...): a dim is named by its str, not "
                                f"{type(k).__name__} {k!r}")
        unknown = set(dims) - set(names)
        if unknown or len(dims) != len(names):
            raise RuntimeError(f"graph '{self.name}' has dims {names}, got {sorted(dims)}")
        values = []
        for d in self.dims:
            v = dims[d.name]
            # A whole number (int or NumPy integer), never a float, string or bool made one.
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"dim {d.name}: expected an integer, not {type(v).__name__} {v!r}")
            if not d.lo <= v <= d.hi:
                raise RuntimeError(f"{d.name} = {v} is outside its range {d.lo}..{d.hi}")
            values.append(int(v))
        self._x.prepare(values, _stream_handle(getattr(stream, "cuda_stream", stream)))

    def _output_specs(self, shapes) -> list[TensorSpec]:
        shapes = [tuple(int(d) for d in s) for s in shapes]
        last = self._last
        if last is not None and last[0] == shapes:
            return last[1]
        specs = _specs(self._x.outputs_for(shapes))
        self._last = (shapes, specs)
        return specs

    def _take_inputs(self, inputs):
        if len(inputs) != len(self._inputs):
            names = ", ".join(s.name for s in self._inputs)
            raise RuntimeError(f"graph '{self.name}' takes {len(self._inputs)} inputs ({names}), "
                               f"got {len(inputs)}")
        framework, device = "numpy", None
        taken = []
        for spec, x in zip(self._inputs, inputs):
            if _is_torch(x):
                framework, device = "torch", x.device
                if x.device.type not in ("cpu", "cuda"):
                    raise RuntimeError(f"input '{spec.name}' is on {x.device.type}: kiln takes "
                                       "host or CUDA tensors")
                _check_dense(x, f"input '{spec.name}'")
                # A view whose negative or conjugate bit is set is read through that bit by
                # torch alone: make its values real first (no copy when neither is set).
                x = x.detach().resolve_neg().resolve_conj()
                got = _TORCH_NAMES.get(str(x.dtype), str(x.dtype).replace("torch.", ""))
            else:
                if x is None:
                    raise TypeError(f"input '{spec.name}': expected an array, a tensor or "
                                    "numbers, not None")
                if not isinstance(x, np.ndarray):
                    x = _from_python(x, spec)
                got = _NUMPY_NAMES.get(x.dtype.name, x.dtype.name)
            if got != spec.dtype:
                raise RuntimeError(f"input '{spec.name}' is {got}, expected {spec.dtype}")
            if len(x.shape) == len(spec.shape) and any(
                    n == 0 and not spec.dims[i] for i, n in enumerate(x.shape)):
                # (a symbolic dim at 0 is named with its range by the runtime)
                raise RuntimeError(f"input '{spec.name}' has shape {list(x.shape)}, expected "
                                   f"{list(spec.shape)}: kiln's tensors have no dim of size 0")
            if not self.dims and tuple(x.shape) != tuple(spec.shape):
                # (the runtime's words; a symbolic graph's shapes are its outputs_for's to check)
                raise RuntimeError(f"input '{spec.name}' has shape {list(x.shape)}, expected "
                                   f"{list(spec.shape)}")
            taken.append(x)
        # Shapes first (the runtime's check, which names what is wrong), then copies: an input
        # of a wrong shape, a broadcast view of millions of elements say, costs no copy.
        self._output_specs([x.shape for x in taken])
        arrays = []
        copies = copied = 0
        for x in taken:
            if not _is_torch(x) and not x.dtype.isnative:
                # A byte-swapped array ('>f4' here): its values in native order, one copy.
                x = x.astype(x.dtype.newbyteorder("="), order="C")
                copied += x.nbytes
                copies += 1
            if not _contiguous(x) or _address(x) % _ALIGN:
                if _is_torch(x):
                    x = x.clone(memory_format=_torch().contiguous_format)
                else:
                    x = np.array(x, order="C", copy=True)
                copied += _nbytes(x)
                copies += 1
            arrays.append(x)
        with self._lock:
            self._stats["calls"] += 1
            self._stats["copied_inputs"] += copies
            self._stats["copied_bytes"] += copied
        if framework == "torch" and device is not None and device.type == "cuda" and self._on_host:
            raise RuntimeError(f"graph '{self.name}' was compiled for {self.arch}: it takes host "
                               "tensors, not CUDA ones")
        return arrays, framework, device

    def _stream(self, stream, framework, device) -> int:
        if stream is not None:
            return _stream_handle(getattr(stream, "cuda_stream", stream))
        if framework == "torch" and device is not None and device.type == "cuda":
            return int(_torch().cuda.current_stream(device).cuda_stream)
        return 0

    def __repr__(self) -> str:
        return f"<kiln.Executable {self.name} {self.arch} {self.precision}>"


def _torch():
    return sys.modules["torch"]


def _check_dense(x, what: str) -> None:
    """A torch tensor kiln can read or write: dense (strided), not sparse or nested."""
    if x.is_nested or x.layout != _torch().strided:
        kind = "nested" if x.is_nested else str(x.layout).replace("torch.", "")
        raise RuntimeError(f"{what} is a {kind} tensor: kiln takes dense (strided) tensors; "
                           "convert it with .to_dense()")


def _stream_handle(stream) -> int:
    """A CUstream as the int kiln takes: 0 (the default stream) for None; else a whole number
    from 0 to 2^64 - 1, or an object int() makes one of (cuda-python's CUstream), never a
    float, string or bool made one."""
    if stream is None:
        return 0
    refused = isinstance(stream, (bool, np.bool_, float, np.floating, str, bytes))
    try:
        handle = None if refused else int(stream)
    except (TypeError, ValueError):
        handle = None
    if handle is None or not 0 <= handle < 2**64:
        raise ValueError(f"stream={stream!r}: expected a torch.cuda.Stream or a CUstream handle "
                         "(a whole number from 0 to 2^64 - 1)")
    return handle


class _on_stream:
    """With CUDA torch tensors and a stream= given, torch's work of a call (the copies of inputs
    that are not C-contiguous or that share an output's memory, new outputs) goes on that
    stream: queued before kiln's kernels, and their memory reused only by later work there."""

    def __init__(self, inputs, stream):
        self._context = None
        torch = sys.modules.get("torch")
        if torch is None or stream is None:
            return
        device = next((x.device for x in inputs
                       if _is_torch(x) and x.device.type == "cuda"), None)
        if device is None:
            return
        if isinstance(stream, torch.cuda.Stream):
            self._context = torch.cuda.stream(stream)
            return
        handle = _stream_handle(getattr(stream, "cuda_stream", stream))
        if handle:
            self._context = torch.cuda.stream(torch.cuda.ExternalStream(handle, device=device))

    def __enter__(self):
        if self._context is not None:
            self._context.__enter__()
        return self

    def __exit__(self, *exc):
        return self._context.__exit__(*exc) if self._context is not None else False


def _from_python(x, spec: TensorSpec) -> np.ndarray:
    """A Python list or scalar as an array of the input's dtype, when its values are of that
    kind: ints for an integer input (never floats truncated), numbers for a float one."""
    array = np.asarray(x)
    want = _NUMPY.get(spec.dtype)
    if want is None:
        return array
    kinds = {"f": "fiub", "i": "iub", "b": "b"}[np.dtype(want).kind]
    if array.dtype.kind not in kinds:
        raise RuntimeError(f"input '{spec.name}' is {spec.dtype}; the values given are "
                           f"{array.dtype.name}")
    converted = array.astype(want)
    if array.dtype.kind in "iu" and not np.array_equal(converted, array):
        raise RuntimeError(f"input '{spec.name}' is {spec.dtype}; a value given does not fit it")
    return converted


def _contiguous(x) -> bool:
    return x.is_contiguous() if _is_torch(x) else x.flags.c_contiguous


def _address(x) -> int:
    return x.data_ptr() if _is_torch(x) else x.ctypes.data


def _nbytes(x) -> int:
    return x.numel() * x.element_size() if _is_torch(x) else x.nbytes


def _overlap(a, b) -> bool:
    """Whether C-contiguous `a` and `b` share bytes (on one device: host or one CUDA device)."""
    where = lambda x: str(x.device) if _is_torch(x) else "cpu"
    if where(a) != where(b):
        return False
    return _address(a) < _address(b) + _nbytes(b) and _address(b) < _address(a) + _nbytes(a)


def _empty(framework: str, device, dtype: str, shape, name: str):
    if framework == "torch":
        torch = _torch()
        return torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES[dtype]), device=device)
    if dtype not in _NUMPY:
        raise RuntimeError(f"output '{name}' is {dtype}, which NumPy cannot hold: pass torch tensors")
    return np.empty(shape, dtype=_NUMPY[dtype])



def gpu_status() -> str:
    """"" when CUDA kernels can run here, else why not ("no CUDA driver found: ...")."""
    return _kiln.gpu_status()
