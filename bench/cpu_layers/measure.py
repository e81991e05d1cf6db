#!/usr/bin/env python3
"""kiln's CPU target against PyTorch eager and torch.compile (Inductor, CPU) on the same layers.

For the example layers (llama_layer, bert_layer: hidden 256, 4 heads, MLP 512) at their own
B=2, S=64 and at (B, S) = (1, 512) and (8, 128) (the .kg with its sizes rewritten), and the whole
2-layer models (llama_model, bert_model at several (B, S)), this draws the inputs
scripts/check_numpy.py draws (realistic weights, the same seed), writes them as one .npz archive,
and times, in one run of this script on the same cores:

- kiln: `kiln run GRAPH --target cpu --precision MODE --inputs FILE.npz --repeat N --json` with
  KILN_CPU_THREADS=T, for each of --modes (default highest): the median steady-state run
  (`run_us`, buffers allocated once) and the share outside the kernels (`outside_share`); a run
  whose outputs miss the mode's tolerance stops the script;
- PyTorch eager, fp32, torch.set_num_threads(T), the same computation written with torch ops
  (F.linear, F.scaled_dot_product_attention, F.embedding, ...), checked against NumPy's fp64
  answer before it is timed; the median of N calls after warm-up;
- torch.compile of the same function (Inductor's CPU backend), compiled before timing.

T is 1 and 2. Torch's 2-thread runs set OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep, as
kiln's pool's do; the default spins and competes with the other thread on 2 cores). Each torch
measurement runs in a process of its own with its thread settings.

Writes OUT/cpu_layers.json (rows {graph, shape, threads, mode, kiln_us, kiln_outside_share,
torch_eager_us, torch_compile_us}, and kiln_vs_highest when highest is among the modes; torch's
figures are fp32 in every row) and OUT/cpu_layers.md (the tables: highest against torch, then
each other mode against highest), and prints them.
Run it through bench/cpu_layers/run.sh, which makes the virtual environment with torch.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_numpy as cn  # noqa: E402  (the inputs and the NumPy fp64 answers)

# (graph, (B, S) or None for a layer's fixed shape). A layer at another (B, S) is its .kg with
# the batch and sequence sizes rewritten (layer_text); a model takes (B, S) as --dims.
CASES = [("llama_layer", None), ("bert_layer", None),
         ("llama_layer", (1, 512)), ("llama_layer", (8, 128)),
         ("bert_layer", (1, 512)), ("bert_layer", (8, 128)),
         ("llama_model", (2, 16)), ("llama_model", (8, 64)),
         ("bert_model", (2, 16)), ("bert_model", (8, 64))]
LAYERS = ("llama_layer", "bert_layer")


class layer_size:
    """check_numpy's layer sizes (its module's B and S) set to `size` for a while."""

    def __init__(self, graph, size):
        self.size = size if graph in LAYERS else None

    def __enter__(self):
        self.saved = (cn.B, cn.S)
        if self.size:
            cn.B, cn.S = self.size

    def __exit__(self, *exc):
        cn.B, cn.S = self.saved


def layer_text(graph, size):
    """The example layer's .kg text at batch B and sequence S (the examples are B=2, S=64)."""
    b, s = size
    with open(os.path.join(ROOT, "examples", "graphs", graph + ".kg")) as f:
        text = f.read()
    swaps = [("[2, 64, ", f"[{b}, {s}, ")]
    if graph == "llama_layer":
        swaps += [("f32[64, 1, 64]", f"f32[{s}, 1, 64]"), ("mask: f32[64, 64]", f"mask: f32[{s}, {s}]")]
    else:
        swaps += [("f32[2, 1, 1, 64]", f"f32[{b}, 1, 1, {s}]")]
    for old, new in swaps:
        if old not in text:
            raise SystemExit(f"{graph}.kg no longer holds '{old}': update layer_text")
        text = text.replace(old, new)
    return text


def inputs_of(graph, size, seed):
    make_inputs = cn.LAYERS[graph][0]
    rng = np.random.default_rng(seed)
    if graph == "bert_layer" and size and size[0] < 2:
        # check_numpy pads the second sequence: draw two, keep the first B.
        raw = inputs_of(graph, (2, size[1]), seed)
        return {k: np.ascontiguousarray(v[:size[0]]) if k in ("x", "mask") else v for k, v in raw.items()}
    with layer_size(graph, size):
        return {name: np.ascontiguousarray(v if v.dtype.kind == "i" else v.astype(np.float32))
                for name, v in make_inputs(rng, size).items()}


# ---- the torch twins (worker side) ----

def torch_forward(graph):
    import torch
    import torch.nn.functional as F

    def rms(x, w, eps):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def rotate_half(t, d):
        return torch.cat([-t[..., d // 2:], t[..., :d // 2]], dim=-1)

    def llama_layer(i):
        x = i["x"]
        b, s, h = x.shape
        heads, d = cn.HEADS, cn.D
        n = rms(x, i["attn_norm"], 1e-5)
        q, k, v = [(n @ i[w]).view(b, s, heads, d) for w in ("wq", "wk", "wv")]
        q = (q * i["rope_cos"] + rotate_half(q, d) * i["rope_sin"]).transpose(1, 2)
        k = (k * i["rope_cos"] + rotate_half(k, d) * i["rope_sin"]).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), attn_mask=i["mask"], scale=0.125)
        h1 = x + o.transpose(1, 2).reshape(b, s, h) @ i["wo"]
        m = rms(h1, i["mlp_norm"], 1e-5)
        return h1 + (F.silu(m @ i["w_gate"]) * (m @ i["w_up"])) @ i["w_down"]

    def bert_layer(i):
        x = i["x"]
        b, s, h = x.shape
        heads, d = cn.HEADS, cn.D

        def project(name):
            return (x @ i["w" + name] + i["b" + name]).view(b, s, heads, d).transpose(1, 2)

        o = F.scaled_dot_product_attention(project("q"), project("k"), project("v"),
                                           attn_mask=i["mask"], scale=0.125)
        o = o.transpose(1, 2).reshape(b, s, h) @ i["wo"] + i["bo"]
        n = F.layer_norm(x + o, (h,), i["ln1_w"], i["ln1_b"], 1e-12)
        f = F.gelu(n @ i["w1"] + i["b1"])
        return F.layer_norm(n + f @ i["w2"] + i["b2"], (h,), i["ln2_w"], i["ln2_b"], 1e-12)

    def llama_model(i):
        ids, mask = i["input_ids"], i["attention_mask"]
        b, s = ids.shape
        d, heads, kv, hidden = cn.M_D, cn.M_HEADS, cn.M_KV_HEADS, cn.M_HIDDEN
        x = F.embedding(ids, i["model.embed_tokens.weight"])
        inv_freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
        angles = torch.outer(torch.arange(s, dtype=x.dtype), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = torch.cos(angles)[:, None, :], torch.sin(angles)[:, None, :]
        causal = torch.arange(s)[None, :] <= torch.arange(s)[:, None]
        keep = causal[None, None] & (mask[:, None, None, :] == 1)
        for l in range(cn.M_LAYERS):
            p = f"model.layers.{l}."
            n = rms(x, i[p + "input_layernorm.weight"], 1e-6)
            q = F.linear(n, i[p + "self_attn.q_proj.weight"]).view(b, s, heads, d)
            k = F.linear(n, i[p + "self_attn.k_proj.weight"]).view(b, s, kv, d)
            v = F.linear(n, i[p + "self_attn.v_proj.weight"]).view(b, s, kv, d).transpose(1, 2)
            q = (q * cos + rotate_half(q, d) * sin).transpose(1, 2)
            k = (k * cos + rotate_half(k, d) * sin).transpose(1, 2)
            group = heads // kv
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            x = x + F.linear(o.transpose(1, 2).reshape(b, s, hidden), i[p + "self_attn.o_proj.weight"])
            m = rms(x, i[p + "post_attention_layernorm.weight"], 1e-6)
            act = F.silu(F.linear(m, i[p + "mlp.gate_proj.weight"])) * F.linear(m, i[p + "mlp.up_proj.weight"])
            x = x + F.linear(act, i[p + "mlp.down_proj.weight"])
        return F.linear(rms(x, i["model.norm.weight"], 1e-6), i["lm_head.weight"])

    def bert_model(i):
        ids, mask = i["input_ids"], i["attention_mask"]
        b, s = ids.shape
        d, heads, hidden = cn.M_D, cn.M_HEADS, cn.M_HIDDEN
        x = (F.embedding(ids, i["embeddings.word_embeddings.weight"]) +
             i["embeddings.position_embeddings.weight"][:s][None] +
             F.embedding(i["token_type_ids"], i["embeddings.token_type_embeddings.weight"]))
        x = F.layer_norm(x, (hidden,), i["embeddings.LayerNorm.weight"],
                         i["embeddings.LayerNorm.bias"], 1e-12)
        keep = (mask[:, None, None, :] == 1).expand(b, 1, s, s)
        for l in range(cn.M_LAYERS):
            p = f"encoder.layer.{l}."

            def project(name):
                t = F.linear(x, i[p + f"attention.self.{name}.weight"], i[p + f"attention.self.{name}.bias"])
                return t.view(b, s, heads, d).transpose(1, 2)

            o = F.scaled_dot_product_attention(project("query"), project("key"), project("value"),
                                               attn_mask=keep)
            o = F.linear(o.transpose(1, 2).reshape(b, s, hidden), i[p + "attention.output.dense.weight"],
                         i[p + "attention.output.dense.bias"])
            h = F.layer_norm(x + o, (hidden,), i[p + "attention.output.LayerNorm.weight"],
                             i[p + "attention.output.LayerNorm.bias"], 1e-12)
            f = F.gelu(F.linear(h, i[p + "intermediate.dense.weight"], i[p + "intermediate.dense.bias"]),
                       approximate="tanh")
            out = F.linear(f, i[p + "output.dense.weight"], i[p + "output.dense.bias"])
            x = F.layer_norm(h + out, (hidden,), i[p + "output.LayerNorm.weight"],
                             i[p + "output.LayerNorm.bias"], 1e-12)
        return x

    return {"llama_layer": llama_layer, "bert_layer": bert_layer,
            "llama_model": llama_model, "bert_model": bert_model}[graph]


def worker(args):
    """Times the torch twin of one case at one thread count; prints one JSON line."""
    import torch
    torch.set_num_threads(args.threads)
    data = np.load(args.npz)
    inputs = {k: torch.from_numpy(np.ascontiguousarray(data[k])) for k in data.files}
    size = None if args.size == "none" else tuple(int(v) for v in args.size.split(","))
    fn = torch_forward(args.graph)
    # The twin computes what NumPy's fp64 forward does (checked in fp64, then timed in fp32).
    with layer_size(args.graph, size):
        exact = cn.LAYERS[args.graph][1]({k: (v if v.dtype.kind == "i" else v.astype(np.float64))
                                          for k, v in ((k, data[k]) for k in data.files)})
    with torch.no_grad():
        twin = fn({k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()})
    error = float(np.linalg.norm(twin.numpy() - exact) / np.linalg.norm(exact))
    if not error < 1e-9:
        print(json.dumps({"error": f"the torch twin differs from NumPy: rel_l2 {error:.3e}"}))
        return 1

    def timed(f, runs):
        times = []
        with torch.no_grad():
            for _ in range(3):
                f(inputs)
            for _ in range(runs):
                start = time.perf_counter()
                f(inputs)
                times.append((time.perf_counter() - start) * 1e6)
        return statistics.median(times)

    eager = timed(fn, args.runs)
    compiled_us = None
    if not args.no_compile:
        compiled = torch.compile(fn, dynamic=False)
        with torch.no_grad():
            compiled(inputs)  # compiles
        compiled_us = timed(compiled, args.runs)
    print(json.dumps({"twin_rel_l2": error, "eager_us": eager, "compile_us": compiled_us,
                      "torch": torch.__version__, "size": size}))
    return 0


def run_kiln(kiln, graph, path, npz, size, threads, runs, mode):
    args = [kiln, "run", path, "--target", "cpu",
            "--precision", mode, "--inputs", npz, "--repeat", str(runs), "--json"]
    if size and graph not in LAYERS:
        args += ["--dims", f"B={size[0]},S={size[1]}"]
    env = dict(os.environ, KILN_CPU_THREADS=str(threads))
    run = subprocess.run(args, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise SystemExit(f"kiln run {graph} failed (exit {run.returncode}): {run.stderr.strip()[:400]}")
    report = json.loads(run.stdout)
    failed = [o["name"] for o in report.get("outputs", []) if not o.get("ok", True)]
    if failed:
        raise SystemExit(f"kiln run {graph} ({mode}): outputs {failed} miss the mode's tolerance")
    return report["run_us"], report["outside_share"]


def run_torch(python, graph, npz, size, threads, runs, no_compile):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if threads > 1:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    args = [python, os.path.abspath(__file__), "--worker", "--graph", graph, "--npz", npz,
            "--size", "none" if size is None else f"{size[0]},{size[1]}", "--threads", str(threads),
            "--runs", str(runs)] + (["--no-compile"] if no_compile else [])
    run = subprocess.run(args, capture_output=True, text=True, env=env)
    lines = [l for l in run.stdout.splitlines() if l.startswith("{")]
    if run.returncode != 0 or not lines:
        raise SystemExit(f"torch {graph} failed (exit {run.returncode}): "
                         f"{(run.stderr.strip() or run.stdout.strip())[-600:]}")
    result = json.loads(lines[-1])
    if "error" in result:
        raise SystemExit(f"torch {graph}: {result['error']}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", default=os.path.join(ROOT, "build", "tools", "kiln"))
    parser.add_argument("--python", default=sys.executable, help="the Python with torch")
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "cpu_layers"))
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="highest",
                        help="kiln's modes, e.g. highest,high,tf32x3,medium (torch runs fp32 once)")
    # worker mode
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    parser.add_argument("--npz", help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.threads = int(args.threads)
        return worker(args)

    os.makedirs(args.out, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for graph, size in CASES:
            npz = os.path.join(tmp, f"{graph}_{'fixed' if size is None else f'{size[0]}x{size[1]}'}.npz")
            np.savez(npz, **inputs_of(graph, size, args.seed))
            path = os.path.join(ROOT, "examples", "graphs", graph + ".kg")
            if graph in LAYERS and size:
                path = os.path.join(tmp, f"{graph}_{size[0]}x{size[1]}.kg")
                with open(path, "w") as f:
                    f.write(layer_text(graph, size))
            shape = "B=2, S=64" if size is None else f"B={size[0]}, S={size[1]}"
            modes = args.modes.split(",")
            for threads in [int(t) for t in args.threads.split(",")]:
                kiln = {m: run_kiln(args.kiln, graph, path, npz, size, threads, args.runs, m)
                        for m in modes}
                torch_result = run_torch(args.python, graph, npz, size, threads, args.runs,
                                         args.no_compile)
                for mode in modes:
                    kiln_us, outside = kiln[mode]
                    row = {"graph": graph, "shape": shape, "threads": threads, "mode": mode,
                           "kiln_us": round(kiln_us, 1), "kiln_outside_share": round(outside, 4),
                           "torch_eager_us": round(torch_result["eager_us"], 1),
                           "torch_compile_us": None if torch_result["compile_us"] is None
                           else round(torch_result["compile_us"], 1),
                           "torch": torch_result["torch"]}
                    if "highest" in kiln:
                        row["kiln_vs_highest"] = round(kiln_us / kiln["highest"][0], 3)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "cpu_layers.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = ["| graph | shape | threads | kiln highest (us) | outside kernels | torch eager fp32 (us) "
             "| kiln / eager | torch.compile (us) | kiln / compile |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r["mode"] != "highest":
            continue
        c = r["torch_compile_us"]
        compiled = "-" if c is None else f"{c:.0f}"
        ratio = "-" if c is None else f"{r['kiln_us'] / c:.2f}x"
        lines.append(f"| {r['graph']} | {r['shape']} | {r['threads']} | {r['kiln_us']:.0f} | "
                     f"{100 * r['kiln_outside_share']:.1f}% | {r['torch_eager_us']:.0f} | "
                     f"{r['kiln_us'] / r['torch_eager_us']:.2f}x | {compiled} | {ratio} |")
    others = [m for m in args.modes.split(",") if m != "highest"]
    if others and "highest" in args.modes.split(","):
        lines += ["", "| graph | shape | threads | " + " | ".join(f"{m} / highest" for m in others) + " |",
                  "| --- | --- | ---: | " + " | ".join("---:" for _ in others) + " |"]
        for r in rows:
            if r["mode"] != "highest":
                continue
            ratios = [next(x["kiln_vs_highest"] for x in rows if x["graph"] == r["graph"] and
                           x["shape"] == r["shape"] and x["threads"] == r["threads"] and x["mode"] == m)
                      for m in others]
            lines.append(f"| {r['graph']} | {r['shape']} | {r['threads']} | " +
                         " | ".join(f"{v:.2f}x" for v in ratios) + " |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "cpu_layers.md"), "w") as f:
        f.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
