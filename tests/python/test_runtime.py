"""kiln's Python API over the runtime: graphs, runtimes, executables, arrays in and out, errors."""
from __future__ import annotations

import os
import pathlib
import subprocess
import threading
import time
import types

import numpy as np
import pytest
import torch

import kiln
from conftest import GRAPHS, kiln_cli

MLP = GRAPHS / "mlp.kg"


def mlp_inputs(rows=128, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(rows, 768), (768, 3072), (3072,), (3072, 768), (768,)]
    return [rng.standard_normal(s).astype(np.float32) * (0.05 if len(s) == 2 and s[0] != rows else 1)
            for s in shapes]


def mlp_reference(x, w1, b1, w2, b2):
    """examples/graphs/mlp.kg in float64: gelu(x w1 + b1) w2 + b2 + x."""
    from math import erf
    h = x.astype(np.float64) @ w1.astype(np.float64) + b1
    g = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    return g @ w2.astype(np.float64) + b2 + x


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def rt(cache_dir):
    return kiln.Runtime(target="cpu", precision="highest", cache_dir=cache_dir)


def test_graph_parse_reports_line_and_column():
    with pytest.raises(kiln.GraphError) as e:
        kiln.Graph.parse("graph g {\n  input a: f32[4]\n  output b\n}", "g.kg")
    assert isinstance(e.value, kiln.Error)
    assert (e.value.file, e.value.line, e.value.col) == ("g.kg", 3, 10)
    assert "undefined value 'b'" in str(e.value)


def test_a_file_name_holding_a_location_is_not_read_as_one(tmp_path):
    # The location was the message's first "NAME:N:M: ": a name holding ":1:2: " split there.
    text = "graph g {\n  input a: f32[4]\n  output b\n}"
    for name in ("a:1:2: b.kg", "x:7:9: "):
        with pytest.raises(kiln.GraphError) as e:
            kiln.Graph.parse(text, name)
        assert (e.value.file, e.value.line, e.value.col) == (name, 3, 10)
    odd = tmp_path / "a:1:2: b.kg"
    odd.write_text(text)
    with pytest.raises(kiln.GraphError) as e:
        kiln.Graph.load(odd)
    assert (e.value.file, e.value.line, e.value.col) == (str(odd), 3, 10)
    # An error with no location (a file that cannot be read) has none.
    with pytest.raises(kiln.GraphError) as e:
        kiln.Graph.load(tmp_path / "missing.kg")
    assert (e.value.file, e.value.line, e.value.col) == (None, None, None)


def test_a_graph_file_past_64_mib_is_refused_unread(tmp_path, rt):
    # /dev/zero has no end: reading it whole took all the memory there was.
    for load in (kiln.Graph.load, rt.compile):
        with pytest.raises(kiln.GraphError, match="larger than 64 MiB"):
            load(pathlib.Path("/dev/zero"))
    big = tmp_path / "big.kg"
    big.write_bytes(b"#" * ((64 << 20) + 1))
    with pytest.raises(kiln.GraphError, match="big.kg: larger than 64 MiB"):
        kiln.Graph.load(big)


def test_graph_describes_itself_and_hashes_as_the_cli_does():
    g = kiln.Graph.load(MLP)
    cli = subprocess.run([kiln_cli(), "hash", str(MLP)], capture_output=True, text=True, check=True)
    assert g.hash == cli.stdout.split()[0]
    assert g.name == "mlp"
    assert [i.name for i in g.inputs] == ["x", "w1", "b1", "w2", "b2"]
    assert g.outputs[0] == kiln.TensorSpec("y", "f32", (128, 768), (None, None))
    assert kiln.Graph.parse(g.text).hash == g.hash
    dynamic = kiln.Graph.load(GRAPHS / "mlp_dynamic.kg")
    assert dynamic.dims == [kiln.Dim("B", 1, 4096)]
    assert dynamic.inputs[0].dims == ("B", None)


def test_numpy_in_numpy_out_and_torch_in_torch_out(rt):
    exe = rt.compile(MLP)
    inputs = mlp_inputs()
    y = exe(*inputs)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (128, 768)
    assert rel_l2(y, mlp_reference(*inputs)) < 1e-5
    yt = exe(*[torch.from_numpy(a) for a in inputs])
    assert isinstance(yt, torch.Tensor) and yt.dtype == torch.float32
    assert np.array_equal(yt.numpy(), y)
    assert exe.stats["copied_inputs"] == 0


def test_compile_takes_text_paths_and_graphs_and_the_second_is_a_hit(tmp_path):
    rt = kiln.Runtime(target="cpu", precision="high", cache_dir=tmp_path)
    first = rt.compile(pathlib.Path(MLP))
    assert (first.cache, first.tier) == ("miss", None)
    again = rt.compile(MLP.read_text())
    assert (again.cache, again.tier) == ("hit", "local")
    assert again.key == first.key and len(again.key) == 32
    assert rt.compile(kiln.Graph.load(MLP)).cache == "hit"
    assert first.precision == "high" and first.arch.startswith("cpu")
    with pytest.raises(TypeError):
        rt.compile(42)


def test_a_hit_from_the_remote_tier_says_so(tmp_path, monkeypatch):
    """A private redis-server on a free loopback port: a second machine's empty cache is served
    by the first machine's compile."""
    import shutil
    import socket
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}"
        # Host code from a remote tier is taken only signed: this fleet has a secret.
        monkeypatch.setenv("KILN_REMOTE_KEY", "k" * 32)
        a = kiln.Runtime(target="cpu", precision="high", cache_dir=tmp_path / "a", remote=url)
        assert a.compile(MLP).cache == "miss"
        b = kiln.Runtime(target="cpu", precision="high", cache_dir=tmp_path / "b", remote=url)
        hit = b.compile(MLP)
        assert (hit.cache, hit.tier) == ("hit", "remote")
        again = b.compile(MLP)
        assert (again.cache, again.tier) == ("hit", "local")
    finally:
        server.terminate()
        server.wait()


def test_run_writes_into_the_callers_arrays_and_refuses_a_wrong_one(rt):
    exe = rt.compile(MLP)
    inputs = mlp_inputs(seed=1)
    out = np.full((128, 768), 7.0, np.float32)
    exe.run(inputs, [out])
    assert np.array_equal(out, exe(*inputs))
    wrong = np.full((128, 767), 7.0, np.float32)
    with pytest.raises(kiln.RuntimeError, match="output 'y'"):
        exe.run(inputs, [wrong])
    assert (wrong == 7.0).all()
    with pytest.raises(kiln.RuntimeError, match="C-contiguous"):
        exe.run(inputs, [np.zeros((768, 128), np.float32).T])


def test_an_output_in_an_inputs_memory_reads_a_copy_and_outputs_may_not_share(rt):
    """run([x, ...], [x, ...]) updates x in place as NumPy's out= does: the kernels read a copy
    (a matmul written over its own operand used to read its first results back). Two outputs
    in one buffer are refused, for NumPy arrays and torch tensors alike."""
    exe = rt.compile("graph mm {\n  input a: f32[256, 256]\n  input b: f32[256, 256]\n"
                     "  c = matmul(a, b)\n  output c\n}")
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    expected = exe(a, b)
    before = exe.stats
    x = a.copy()
    exe.run([x, b], [x])
    assert np.array_equal(x, expected)
    assert exe.stats["copied_inputs"] - before["copied_inputs"] == 1
    t = torch.from_numpy(a.copy())
    exe.run([t, torch.from_numpy(b)], [t])
    assert np.array_equal(t.numpy(), expected)
    two = rt.compile("graph two {\n  input x: f32[4, 8]\n  y = exp(x)\n  z = neg(x)\n"
                     "  output y, z\n}")
    out = np.full((6, 8), 7.0, np.float32)
    with pytest.raises(kiln.RuntimeError, match="outputs 'y' and 'z' share memory"):
        two.run([np.zeros((4, 8), np.float32)], [out[:4], out[:4]])
    with pytest.raises(kiln.RuntimeError, match="share memory"):  # two rows in common
        two.run([np.zeros((4, 8), np.float32)], [out[:4], out[2:]])
    assert (out == 7.0).all()
    two.run([np.zeros((4, 8), np.float32)], [out[:4], np.empty((4, 8), np.float32)])
    assert (out[:4] == 1.0).all() and (out[4:] == 7.0).all()


def test_a_stream_that_is_no_handle_is_named(rt):
    """stream= takes a torch.cuda.Stream or a CUstream handle: a negative, too large, fractional
    or textual one is a ValueError naming it (nanobind's "incompatible function arguments", or a
    fraction truncated, before)."""
    exe = rt.compile("graph s {\n  input x: f32[4, 8]\n  y = exp(x)\n  output y\n}")
    x = np.zeros((4, 8), np.float32)
    for bad in (-1, 2**70, "abc", 1.5, True):
        with pytest.raises(ValueError, match=r"^stream=.*: expected a torch\.cuda\.Stream"):
            exe(x, stream=bad)
    with pytest.raises(ValueError, match="^stream=-5"):
        exe.prepare(stream=-5)
    assert np.array_equal(exe(x, stream=0), np.ones((4, 8), np.float32))

    class Handle:  # as cuda-python's CUstream: an object int() makes a handle of
        def __int__(self):
            return 0
    assert np.array_equal(exe(x, stream=Handle()), np.ones((4, 8), np.float32))
    exe.prepare(stream=Handle())


def test_a_wrong_shape_is_refused_before_an_input_is_copied(rt):
    """A broadcast view of 256M elements is not copied (1 GiB) only to be refused."""
    static = rt.compile("graph s {\n  input x: f32[4, 8]\n  y = exp(x)\n  output y\n}")
    symbolic = rt.compile("graph d {\n  dim B: 1..8\n  input x: f32[B, 8]\n  y = exp(x)\n"
                          "  output y\n}")
    huge = np.broadcast_to(np.float32(0), (16384, 16384))
    for exe, message in [(static, r"input 'x' has shape \[16384, 16384\], expected \[4, 8\]"),
                         (symbolic, r"B = 16384 is outside its range 1\.\.8")]:
        with pytest.raises(kiln.RuntimeError, match=message):
            exe(huge)
        with pytest.raises(kiln.RuntimeError, match=message):
            exe(torch.zeros(1).expand(16384, 16384))
        assert exe.stats["copied_inputs"] == 0


def test_noncontiguous_and_misaligned_inputs_are_copied_and_counted(rt):
    exe = rt.compile(MLP)
    x, w1, b1, w2, b2 = mlp_inputs(seed=2)
    expected = exe(x, w1, b1, w2, b2)
    transposed = np.ascontiguousarray(x.T).T            # a strided view
    buffer = np.empty(x.size + 1, np.float32)[1:]       # 4 bytes past a 16-byte boundary
    misaligned = buffer.reshape(x.shape)
    misaligned[...] = x
    assert misaligned.ctypes.data % 16 != 0
    before = exe.stats
    assert np.array_equal(exe(transposed, w1, b1, w2, b2), expected)
    assert np.array_equal(exe(misaligned, w1, b1, w2, b2), expected)
    after = exe.stats
    assert after["copied_inputs"] - before["copied_inputs"] == 2
    assert after["copied_bytes"] - before["copied_bytes"] == 2 * x.nbytes
    assert after["calls"] - before["calls"] == 2


def test_byte_swapped_inputs_are_read_in_order_and_outputs_refused(rt):
    exe = rt.compile(MLP)
    inputs = mlp_inputs(seed=3)
    expected = exe(*inputs)
    swapped = inputs[0].astype(inputs[0].dtype.newbyteorder())
    assert not swapped.dtype.isnative and np.array_equal(swapped, inputs[0])
    before = exe.stats
    assert np.array_equal(exe(swapped, *inputs[1:]), expected)
    assert exe.stats["copied_inputs"] - before["copied_inputs"] == 1
    out = np.full((128, 768), 7.0, np.float32).astype(swapped.dtype)
    with pytest.raises(kiln.RuntimeError, match="output 'y' is in non-native byte order"):
        exe.run(inputs, [out])
    assert (out == 7.0).all()


def test_bad_inputs_are_errors_naming_the_input(rt):
    exe = rt.compile(MLP)
    x, w1, b1, w2, b2 = mlp_inputs()
    with pytest.raises(kiln.RuntimeError, match="input 'x' is float64, expected f32"):
        exe(x.astype(np.float64), w1, b1, w2, b2)
    with pytest.raises(kiln.RuntimeError, match="takes 5 inputs"):
        exe(x, w1)
    with pytest.raises(kiln.RuntimeError, match="input 'w1'"):
        exe(x, w1[:100], b1, w2, b2)
    with pytest.raises(kiln.RuntimeError, match=r"input 'x' has shape \[0, 768\], expected "
                                                r"\[128, 768\]: kiln's tensors have no dim"):
        exe(x[:0], w1, b1, w2, b2)
    with pytest.raises(TypeError, match="input 'x': expected an array, a tensor or numbers, "
                                        "not None"):
        exe(None, w1, b1, w2, b2)
    # Sparse and nested tensors, and an output on no device kiln writes, are named (torch's own
    # internal errors before).
    t = [torch.from_numpy(a) for a in (x, w1, b1, w2, b2)]
    for bad, kind in [(t[0].to_sparse(), "sparse_coo"), (t[0].to_sparse_csr(), "sparse_csr"),
                      (torch.nested.nested_tensor(list(t[0][:4])), "nested")]:
        with pytest.raises(kiln.RuntimeError, match=f"input 'x' is a {kind} tensor"):
            exe(bad, *t[1:])
    with pytest.raises(kiln.RuntimeError, match="output 'y' is on meta"):
        exe.run(t, [torch.empty(128, 768, device="meta")])
    with pytest.raises(kiln.RuntimeError, match="output 'y' is a sparse_coo tensor"):
        exe.run(t, [torch.zeros(128, 768).to_sparse()])


def test_a_graph_file_name_with_a_nul_is_refused():
    with pytest.raises(ValueError, match="NUL"):
        kiln.Graph.parse(MLP.read_text(), "a\0b")


def test_text_or_names_that_are_not_utf8_are_named(tmp_path):
    """A lone surrogate (what Python makes of bytes that are not UTF-8) in a graph's text, its
    file name or a Runtime's argument is a ValueError naming it, not nanobind's "incompatible
    function arguments"; a graph file whose name is not UTF-8 loads, named with escapes."""
    with pytest.raises(ValueError, match=r"Graph.parse\(text=...\): not valid UTF-8 at "
                                         "character 7"):
        kiln.Graph.parse("graph g\udc80 {}")
    with pytest.raises(ValueError, match=r"Graph.parse\(file=...\)"):
        kiln.Graph.parse(MLP.read_text(), "f\udc80.kg")
    odd = os.fsdecode(bytes(tmp_path) + b"/\xff.kg")
    pathlib.Path(odd).write_text(MLP.read_text())
    assert kiln.Graph.load(odd).name == "mlp"
    for kwargs in ({"target": "cpu\udc80"}, {"cache_dir": bytes(tmp_path) + b"/\xff"}):
        with pytest.raises(ValueError, match="not valid UTF-8"):
            kiln.Runtime(**{"target": "cpu", **kwargs})


def test_runtime_arguments_of_the_wrong_kind_are_named(cache_dir):
    for kwargs, error in (({"target": None}, TypeError), ({"precision": "high\0x"}, ValueError),
                          ({"cache_dir": str(cache_dir) + "\0junk"}, ValueError),
                          ({"device": 2**40}, ValueError), ({"device": "0"}, TypeError),
                          ({"remote": 7}, TypeError), ({"target": ""}, ValueError),
                          ({"precision": ""}, ValueError), ({"cache_dir": ""}, ValueError)):
        name = next(iter(kwargs))
        with pytest.raises(error, match=f"Runtime\\({name}="):
            kiln.Runtime(**{"target": "cpu", "cache_dir": cache_dir, **kwargs})


def test_symbolic_graph_serves_every_size(rt):
    exe = rt.compile(GRAPHS / "mlp_dynamic.kg")
    assert exe.cache is None and exe.dims == [kiln.Dim("B", 1, 4096)]
    full = mlp_inputs(rows=37, seed=3)
    for rows in (1, 3, 37):
        inputs = [full[0][:rows].copy()] + full[1:]
        y = exe(*inputs)
        assert y.shape == (rows, 768)
        assert rel_l2(y, mlp_reference(*inputs)) < 1e-5


def test_options_are_checked():
    with pytest.raises(ValueError, match="precision='fast'"):
        kiln.Runtime(target="cpu", precision="fast")
    with pytest.raises(ValueError, match="fallbacks='sometimes'"):
        kiln.Runtime(target="cpu", fallbacks="sometimes")
    with pytest.raises(kiln.RuntimeError, match="target"):
        kiln.Runtime(target="tpu")
    assert issubclass(kiln.RuntimeError, kiln.Error) and issubclass(kiln.CompileError, kiln.Error)
    assert issubclass(kiln.CacheError, kiln.Error) and issubclass(kiln.GraphError, kiln.Error)


def test_a_compile_the_target_cannot_run_is_a_compile_error(tmp_path):
    # bf16 tensor-core MMAs do not exist on sm_75: refused before any compiler runs.
    rt = kiln.Runtime(target="cuda:sm_75", precision="high", cache_dir=tmp_path)
    with pytest.raises(kiln.CompileError, match="sm_75"):
        rt.compile(GRAPHS / "gated_mlp.kg")


def test_an_unusable_remote_key_is_a_cache_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_REMOTE_KEY", "short")
    with pytest.raises(kiln.CacheError, match="KILN_REMOTE_KEY"):
        kiln.Runtime(target="cpu", cache_dir=tmp_path)


def test_the_gil_is_released_while_kiln_runs(rt, monkeypatch):
    """Python code in another thread keeps running while a kiln call is in flight: a counter in
    this thread advances inside each call's span, where a call holding the GIL stops it dead."""
    # kiln computes on one thread (read at each run), so on a machine of two cores or more the
    # counter competes with the GIL only, not with kiln's workers for the cores.
    monkeypatch.setenv("KILN_CPU_THREADS", "1")
    # 2048^3: about 0.1 s a call on one core, so that each call's interior (20 ms off each end)
    # is most of it (1536^3 took 45 ms on a fast core: too few interior ms in the second).
    g = kiln.Graph.parse("graph big {\n  input a: f32[2048, 2048]\n  input b: f32[2048, 2048]\n"
                         "  c = matmul(a, b)\n  output c\n}")
    exe = rt.compile(g)
    a = np.ones((2048, 2048), np.float32)
    exe(a, a)

    origin = time.perf_counter()
    ms = [0] * 4000  # counter steps per millisecond since origin

    def spin(seconds):
        now = time.perf_counter()
        end = now + seconds
        while now < end:
            ms[int((now - origin) * 1000.0)] += 1
            now = time.perf_counter()

    spin(0.3)
    alone = sum(ms) / 0.3  # steps per second with no kiln call running
    done = threading.Event()
    spans = []

    def work():
        while not done.is_set():
            t0 = time.perf_counter()
            exe(a, a)
            spans.append((t0, time.perf_counter()))

    thread = threading.Thread(target=work)
    thread.start()
    begin = time.perf_counter()
    try:
        spin(1.0)
    finally:
        done.set()
        thread.join()
    # Only each span's interior, within the counter's second, counts: the worker may be switched
    # out (5 ms switch interval) between reading the clock and entering or leaving the call. A
    # call holding the GIL leaves no step at all in its interior (measured: 0.0 of the rate alone,
    # with a builtin `sum` in the call's place). Releasing it leaves 0.94-1.07 of that rate on an
    # idle 2-core machine, 0.40-0.88 with two busy processes on both cores.
    steps, seconds = 0, 0.0
    for t0, t1 in spans:
        first = max(int((t0 - origin) * 1000.0) + 20, int((begin - origin) * 1000.0) + 1)
        last = min(int((t1 - origin) * 1000.0) - 20, int((begin - origin) * 1000.0) + 999)
        if last > first:
            steps += sum(ms[first:last])
            seconds += (last - first) / 1000.0
    assert seconds >= 0.1, spans
    assert steps > 0.2 * alone * seconds, (steps, alone, seconds)


def test_the_emulated_cuda_kernels_take_host_arrays(tmp_path):
    rt = kiln.Runtime(target="emulate:sm_90", precision="highest", cache_dir=tmp_path)
    assert rt.arch == "emulate:sm_90"
    exe = rt.compile("graph t {\n  input a: f32[4, 8]\n  b = relu(a)\n  output b\n}")
    a = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)
    assert np.array_equal(exe(a), np.maximum(a, 0))
    assert np.array_equal(exe(torch.from_numpy(a)).numpy(), np.maximum(a, 0))


def test_unwritable_outputs_views_with_bits_and_lossy_lists_are_refused(rt):
    exe = rt.compile("graph n {\n  input a: f32[4]\n  input i: i32[3]\n  b = neg(a)\n"
                     "  j = add(i, 1)\n  output b, j\n}")
    a = torch.arange(1.0, 5.0)._neg_view()  # reads as -1..-4 through its negative bit
    b, j = exe(a, [1, 2, 3])
    assert b.tolist() == [1.0, 2.0, 3.0, 4.0] and j.tolist() == [2, 3, 4]
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(kiln.RuntimeError, match="output 'b' is not writable"):
        exe.run([np.ones(4, np.float32), np.ones(3, np.int32)], [frozen, np.zeros(3, np.int32)])
    assert (frozen == 0).all()
    with pytest.raises(kiln.RuntimeError, match="input 'i' is i32; the values given are float64"):
        exe(np.ones(4, np.float32), [1.9, 2.9, -0.5])
    with pytest.raises(kiln.RuntimeError, match="does not fit"):
        exe(np.ones(4, np.float32), [1, 2, 2**40])
    with pytest.raises(TypeError, match="list of outputs"):
        exe.run([np.ones(4, np.float32), np.ones(3, np.int32)], np.zeros(4, np.float32))


def test_a_size_of_zero_is_named_as_out_of_range(rt):
    exe = rt.compile(GRAPHS / "mlp_dynamic.kg")
    x, w1, b1, w2, b2 = mlp_inputs(rows=1)
    with pytest.raises(kiln.RuntimeError, match="B = 0"):
        exe(np.zeros((0, 768), np.float32), w1, b1, w2, b2)


def test_prepare_takes_whole_dims_only(rt):
    # int() once made '7' a 7, 3.7 a 3 and True a 1; 2**70 reached the binding's signature dump.
    exe = rt.compile(GRAPHS / "mlp_dynamic.kg")
    for bad in ("7", 3.7, True, np.bool_(True), None):
        with pytest.raises(TypeError, match=f"dim B: expected an integer, not {type(bad).__name__}"):
            exe.prepare(dims={"B": bad})
    for far in (0, 4097, 2**70, -(2**70)):
        with pytest.raises(kiln.RuntimeError, match=f"B = {far} is outside its range 1..4096"):
            exe.prepare(dims={"B": far})
    exe.prepare(dims={"B": np.int64(37)})
    exe.prepare(dims={"B": 4096})
    # Sorting {1: 4, 'B': 4}'s keys for the message raised a TypeError of its own.
    with pytest.raises(TypeError, match="a dim is named by its str, not int 1"):
        exe.prepare(dims={1: 4, "B": 4})
    with pytest.raises(TypeError, match="expected a dict of dim names to sizes, not list"):
        exe.prepare(dims=[("B", 4)])
    exe.prepare(dims=types.MappingProxyType({"B": 5}))  # any mapping


def test_a_torch_tensor_subclass_is_a_tensor(rt):
    # A subclass defined outside torch was taken for an array-like (its module's name decided).
    class Tagged(torch.Tensor):
        pass

    exe = rt.compile("graph t {\n  input a: f32[4]\n  b = neg(a)\n  output b\n}")
    a = torch.arange(4.0).as_subclass(Tagged)
    assert type(a).__module__ == __name__
    b = exe(a)
    assert isinstance(b, torch.Tensor) and b.tolist() == [-0.0, -1.0, -2.0, -3.0]
    out = torch.zeros(4).as_subclass(Tagged)
    exe.run([a], [out])
    assert out.tolist() == [-0.0, -1.0, -2.0, -3.0]
    p = torch.nn.Parameter(torch.ones(4))
    assert exe(p).tolist() == [-1.0] * 4


def test_the_extension_refuses_a_read_only_output(rt):
    # The extension's run took outputs read-only and wrote into a frozen array.
    exe = rt.compile("graph t {\n  input a: f32[4]\n  b = neg(a)\n  output b\n}")
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(TypeError):
        exe._x.run([np.ones(4, np.float32)], [frozen], 0)
    assert (frozen == 0).all()
    out = np.zeros(4, np.float32)
    exe._x.run([np.ones(4, np.float32)], [out], 0)
    assert (out == -1).all()
