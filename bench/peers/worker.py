"""One peer compiling one example graph, in its own process, for bench/peers/measure.py.

Usage: worker.py SYSTEM GRAPH [--inprocess N] [--profile]
  SYSTEM  triton | torch | jax
  GRAPH   mlp | attention (examples/graphs/mlp.kg and attention.kg, same shapes, fp32)

The peer's cache directory comes from its own environment variable, set by the caller
(TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, KILN_PEERS_JAX_CACHE). Prints one JSON object:
  compile_ms     the first compile (or first call, for torch and jax) in this process
  inprocess_us   with --inprocess N: the median of N further compiles that hit the peer's cache in
                 this process (in-memory caches dropped first where the peer has them)
  import_ms      importing the peer and making the inputs
  version        the peer's version
  profile        with --profile: the five functions with the most own time in the first compile
                 (a hit when the cache is warm: what a new process pays)
"""
import cProfile
import json
import os
import pstats
import statistics
import sys
import time

t_import = time.perf_counter()


def triton_compile(graph):
    """Triton kernels like kiln's for the graph, compiled for sm_90 (no GPU needed)."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def matmul(a, b, c, bias, res, M, N, K, stride_ab, stride_bb, stride_cb,
               TRANS_B: tl.constexpr, EPILOGUE: tl.constexpr, SCALE: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        # C[b] = epilogue(A[b] @ B[b]^(T)); EPILOGUE 0: none, 1: +bias, GELU, 2: +bias, +residual,
        # 3: * SCALE. Row-major, contiguous.
        batch = tl.program_id(2)
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            a_tile = tl.load(a + batch * stride_ab + rm[:, None] * K + (k0 + rk)[None, :],
                             mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
            if TRANS_B:
                b_ptrs = b + batch * stride_bb + rn[None, :] * K + (k0 + rk)[:, None]
            else:
                b_ptrs = b + batch * stride_bb + (k0 + rk)[:, None] * N + rn[None, :]
            b_tile = tl.load(b_ptrs, mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a_tile, b_tile)  # fp32 inputs: TF32, as kiln's `high`
        if EPILOGUE == 1:
            acc += tl.load(bias + rn, mask=rn < N, other=0.0)[None, :]
            acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
        if EPILOGUE == 2:
            acc += tl.load(bias + rn, mask=rn < N, other=0.0)[None, :]
            acc += tl.load(res + rm[:, None] * N + rn[None, :],
                           mask=(rm[:, None] < M) & (rn[None, :] < N), other=0.0)
        if EPILOGUE == 3:
            acc = acc * SCALE
        tl.store(c + batch * stride_cb + rm[:, None] * N + rn[None, :], acc,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    @triton.jit
    def softmax(x, y, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        v = tl.load(x + row * N + cols, mask=cols < N, other=-float("inf"))
        e = tl.exp(v - tl.max(v, axis=0))
        tl.store(y + row * N + cols, e / tl.sum(e, axis=0), mask=cols < N)

    mm_sig = {"a": "*fp32", "b": "*fp32", "c": "*fp32", "bias": "*fp32", "res": "*fp32",
              "M": "i32", "N": "i32", "K": "i32", "stride_ab": "i32", "stride_bb": "i32",
              "stride_cb": "i32", "TRANS_B": "constexpr", "EPILOGUE": "constexpr",
              "SCALE": "constexpr", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
    tiles = {"BM": 64, "BN": 64, "BK": 32}
    if graph == "mlp":
        sources = [
            ASTSource(matmul, mm_sig, dict(TRANS_B=False, EPILOGUE=1, SCALE=1.0, **tiles)),
            ASTSource(matmul, mm_sig, dict(TRANS_B=False, EPILOGUE=2, SCALE=1.0, **tiles)),
        ]
    else:
        sources = [
            ASTSource(matmul, mm_sig, dict(TRANS_B=True, EPILOGUE=3, SCALE=0.125, **tiles)),
            ASTSource(softmax, {"x": "*fp32", "y": "*fp32", "N": "i32", "BLOCK": "constexpr"},
                      {"BLOCK": 128}),
            ASTSource(matmul, mm_sig, dict(TRANS_B=False, EPILOGUE=0, SCALE=1.0, **tiles)),
        ]
    target = GPUTarget("cuda", 90, 32)

    def run():
        return [triton.compile(s, target=target) for s in sources]

    return run, triton.__version__


def torch_compile(graph):
    """torch.compile (Inductor, CPU) of the graph's function; a call compiles on first use."""
    import torch

    torch.manual_seed(0)
    if graph == "mlp":
        args = [torch.randn(128, 768), torch.randn(768, 3072), torch.randn(3072),
                torch.randn(3072, 768), torch.randn(768)]

        def fn(x, w1, b1, w2, b2):
            h = torch.nn.functional.gelu(x @ w1 + b1)
            return h @ w2 + b2 + x
    else:
        args = [torch.randn(16, 128, 64) for _ in range(3)]

        def fn(q, k, v):
            return torch.softmax(q @ k.transpose(-1, -2) * 0.125, dim=-1) @ v

    def run():
        torch._dynamo.reset()  # drop the in-memory compile: the next call goes to the FX cache
        return torch.compile(fn)(*args)

    return run, torch.__version__


def jax_compile(graph):
    """jax.jit of the graph's function on the CPU, with the persistent compilation cache."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_compilation_cache_dir", os.environ["KILN_PEERS_JAX_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    key = jax.random.PRNGKey(0)
    if graph == "mlp":
        shapes = [(128, 768), (768, 3072), (3072,), (3072, 768), (768,)]

        def fn(x, w1, b1, w2, b2):
            h = jax.nn.gelu(x @ w1 + b1, approximate=False)
            return h @ w2 + b2 + x
    else:
        shapes = [(16, 128, 64)] * 3

        def fn(q, k, v):
            return jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) * 0.125, axis=-1) @ v
    args = [jax.random.normal(key, s, dtype=jnp.float32) for s in shapes]

    def run():
        jax.clear_caches()  # drop the in-memory executables: the next call reads the disk cache
        return jax.block_until_ready(jax.jit(fn)(*args))

    return run, jax.__version__


def main():
    system, graph = sys.argv[1], sys.argv[2]
    inprocess = int(sys.argv[sys.argv.index("--inprocess") + 1]) if "--inprocess" in sys.argv else 0
    profile = "--profile" in sys.argv
    build = {"triton": triton_compile, "torch": torch_compile, "jax": jax_compile}[system]
    run, version = build(graph)
    import_ms = (time.perf_counter() - t_import) * 1e3
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    run()
    if profiler:
        profiler.disable()
    out = {"compile_ms": (time.perf_counter() - start) * 1e3, "import_ms": import_ms,
           "version": version}
    if inprocess:
        times = []
        for _ in range(inprocess):
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1e6)
        out["inprocess_us"] = statistics.median(times)
    if profiler:
        stats = pstats.Stats(profiler)
        rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:5]
        out["profile"] = [
            {"function": f"{os.path.basename(f)}:{line}({name})", "own_ms": round(v[2] * 1e3, 2),
             "calls": v[1]} for (f, line, name), v in rows]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
