#!/usr/bin/env python3
"""Independent check of kiln's transformer layers and whole models against NumPy in fp64.

For each example layer (examples/graphs/llama_layer.kg, bert_layer.kg) this draws realistic
inputs (activations N(0, 1), weights N(0, 1/fan_in), norm weights near 1, real rotary tables,
a causal or padding mask), writes them as .npy files, runs

    kiln run GRAPH --emulate --arch ARCH --precision MODE --input NAME=FILE.npy ... \
        --save OUT --save-reference REF

(with --gpu: on the GPU, without --emulate and --arch; with --cpu: natively on the CPU through
LLVM, `--target cpu` in place of --emulate and --arch)

and for each whole model (examples/graphs/llama_model.kg, bert_model.kg: token ids and an
attention mask in, the embeddings, rotary tables and masks computed in the graph) draws a
state_dict and a batch at two (B, S) sizes, the later sequences right-padded, writes them as one
.npz archive and runs `kiln run ... --inputs FILE.npz`,

and computes the same layer here in NumPy fp64 from the same files. Two comparisons per run:
kiln's fp64 reference against NumPy (relative L2 at most 1e-9: both compute what the graph
means), and kiln's kernels against NumPy (relative L2 within the mode's tolerance, the one
`kiln run` applies: highest 1e-5, tf32x3 2e-5, high 2e-3, medium 1.5e-2).

Exit status: 0 when every comparison holds, 1 when one does not or kiln fails, 2 on bad usage.
Needs NumPy (Debian: python3-numpy, in /usr/bin/python3).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.stderr.write("check_numpy.py: NumPy is missing; install python3-numpy "
                     "(scripts/install_deps.sh) and run it with /usr/bin/python3\n")
    sys.exit(2)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = {"highest": 1e-5, "tf32x3": 2e-5, "high": 2e-3, "medium": 1.5e-2}
REFERENCE_TOLERANCE = 1e-9
B, S, H, HEADS, D, MLP = 2, 64, 256, 4, 64, 512


def weight(rng, fan_in, fan_out):
    return rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)


def rotary_tables():
    inv_freq = 10000.0 ** (-np.arange(0, D, 2) / D)
    angles = np.outer(np.arange(S), inv_freq)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).reshape(S, 1, D), np.sin(angles).reshape(S, 1, D)


def llama_inputs(rng):
    cos, sin = rotary_tables()
    causal = np.where(np.arange(S)[None, :] <= np.arange(S)[:, None], 0.0, -1e9)
    return {
        "x": rng.standard_normal((B, S, H)),
        "attn_norm": 1.0 + 0.1 * rng.standard_normal(H),
        "wq": weight(rng, H, H), "wk": weight(rng, H, H), "wv": weight(rng, H, H),
        "wo": weight(rng, H, H),
        "rope_cos": cos, "rope_sin": sin, "mask": causal,
        "mlp_norm": 1.0 + 0.1 * rng.standard_normal(H),
        "w_gate": weight(rng, H, MLP), "w_up": weight(rng, H, MLP), "w_down": weight(rng, MLP, H),
    }


def bert_inputs(rng):
    mask = np.zeros((B, 1, 1, S))
    mask[1, :, :, S - 16:] = -1e9  # the second sequence is 48 tokens and 16 of padding
    inputs = {"x": rng.standard_normal((B, S, H))}
    for name in ("q", "k", "v", "o"):
        inputs["w" + name] = weight(rng, H, H)
        inputs["b" + name] = 0.02 * rng.standard_normal(H)
    inputs["mask"] = mask
    inputs.update({
        "ln1_w": 1.0 + 0.1 * rng.standard_normal(H), "ln1_b": 0.02 * rng.standard_normal(H),
        "w1": weight(rng, H, MLP), "b1": 0.02 * rng.standard_normal(MLP),
        "w2": weight(rng, MLP, H), "b2": 0.02 * rng.standard_normal(H),
        "ln2_w": 1.0 + 0.1 * rng.standard_normal(H), "ln2_b": 0.02 * rng.standard_normal(H),
    })
    return inputs


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


VOCAB, POSITIONS, M_HIDDEN, M_HEADS, M_KV_HEADS, M_D, M_MLP, M_LAYERS = 128, 64, 64, 4, 2, 16, 128, 2


def batch(rng, b, s):
    """Token ids, token types and a right-padding attention mask: sequence k keeps s - 3k tokens."""
    mask = np.ones((b, s), dtype=np.int64)
    for k in range(b):
        mask[k, max(1, s - 3 * k):] = 0
    return {"input_ids": rng.integers(0, VOCAB, (b, s), dtype=np.int64),
            "token_type_ids": rng.integers(0, 2, (b, s), dtype=np.int64),
            "attention_mask": mask}


def llama_model_inputs(rng, b, s):
    i = batch(rng, b, s)
    del i["token_type_ids"]
    i["model.embed_tokens.weight"] = rng.standard_normal((VOCAB, M_HIDDEN))
    for l in range(M_LAYERS):
        p = f"model.layers.{l}."
        i[p + "input_layernorm.weight"] = 1.0 + 0.1 * rng.standard_normal(M_HIDDEN)
        for name, rows in (("q", M_HEADS), ("k", M_KV_HEADS), ("v", M_KV_HEADS)):
            i[p + f"self_attn.{name}_proj.weight"] = weight(rng, M_HIDDEN, rows * M_D).T
        i[p + "self_attn.o_proj.weight"] = weight(rng, M_HIDDEN, M_HIDDEN).T
        i[p + "post_attention_layernorm.weight"] = 1.0 + 0.1 * rng.standard_normal(M_HIDDEN)
        i[p + "mlp.gate_proj.weight"] = weight(rng, M_HIDDEN, M_MLP).T
        i[p + "mlp.up_proj.weight"] = weight(rng, M_HIDDEN, M_MLP).T
        i[p + "mlp.down_proj.weight"] = weight(rng, M_MLP, M_HIDDEN).T
    i["model.norm.weight"] = 1.0 + 0.1 * rng.standard_normal(M_HIDDEN)
    i["lm_head.weight"] = weight(rng, M_HIDDEN, VOCAB).T
    return i


def bert_model_inputs(rng, b, s):
    i = batch(rng, b, s)
    i["embeddings.word_embeddings.weight"] = rng.standard_normal((VOCAB, M_HIDDEN))
    i["embeddings.position_embeddings.weight"] = rng.standard_normal((POSITIONS, M_HIDDEN))
    i["embeddings.token_type_embeddings.weight"] = rng.standard_normal((2, M_HIDDEN))
    i["embeddings.LayerNorm.weight"] = 1.0 + 0.1 * rng.standard_normal(M_HIDDEN)
    i["embeddings.LayerNorm.bias"] = 0.02 * rng.standard_normal(M_HIDDEN)
    for l in range(M_LAYERS):
        p = f"encoder.layer.{l}."
        for name in ("query", "key", "value"):
            i[p + f"attention.self.{name}.weight"] = weight(rng, M_HIDDEN, M_HIDDEN).T
            i[p + f"attention.self.{name}.bias"] = 0.02 * rng.standard_normal(M_HIDDEN)
        i[p + "attention.output.dense.weight"] = weight(rng, M_HIDDEN, M_HIDDEN).T
        i[p + "attention.output.dense.bias"] = 0.02 * rng.standard_normal(M_HIDDEN)
        for norm in ("attention.output.LayerNorm.", "output.LayerNorm."):
            i[p + norm + "weight"] = 1.0 + 0.1 * rng.standard_normal(M_HIDDEN)
            i[p + norm + "bias"] = 0.02 * rng.standard_normal(M_HIDDEN)
        i[p + "intermediate.dense.weight"] = weight(rng, M_HIDDEN, M_MLP).T
        i[p + "intermediate.dense.bias"] = 0.02 * rng.standard_normal(M_MLP)
        i[p + "output.dense.weight"] = weight(rng, M_MLP, M_HIDDEN).T
        i[p + "output.dense.bias"] = 0.02 * rng.standard_normal(M_HIDDEN)
    return i


def masked_attention(q, k, v, keep):
    """q [B, Hq, S, D], k and v [B, Hkv, S, D] (each kv head repeated for its group, as
    transformers' repeat_kv), keep [B, Hq or 1, S, S] bool: softmax over the kept keys."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.where(keep, q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]), -np.inf)
    return softmax(scores) @ v


def llama_model(i):
    ids, mask = i["input_ids"], i["attention_mask"]
    b, s = ids.shape
    x = i["model.embed_tokens.weight"][ids]
    inv_freq = 10000.0 ** (-np.arange(0, M_D, 2) / M_D)
    angles = np.outer(np.arange(s), inv_freq)
    angles = np.concatenate([angles, angles], axis=-1)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    causal = np.arange(s)[None, :] <= np.arange(s)[:, None]
    keep = causal[None, None] & (mask[:, None, None, :] == 1)

    def rotate(t):
        rotated = np.concatenate([-t[..., M_D // 2:], t[..., :M_D // 2]], axis=-1)
        return (t * cos + rotated * sin).transpose(0, 2, 1, 3)

    for l in range(M_LAYERS):
        p = f"model.layers.{l}."
        h = rms_norm(x, i[p + "input_layernorm.weight"], 1e-6)
        q = (h @ i[p + "self_attn.q_proj.weight"].T).reshape(b, s, M_HEADS, M_D)
        k = (h @ i[p + "self_attn.k_proj.weight"].T).reshape(b, s, M_KV_HEADS, M_D)
        v = (h @ i[p + "self_attn.v_proj.weight"].T).reshape(b, s, M_KV_HEADS, M_D)
        o = masked_attention(rotate(q), rotate(k), v.transpose(0, 2, 1, 3), keep)
        x = x + o.transpose(0, 2, 1, 3).reshape(b, s, M_HIDDEN) @ i[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, i[p + "post_attention_layernorm.weight"], 1e-6)
        gate = m @ i[p + "mlp.gate_proj.weight"].T
        act = gate / (1.0 + np.exp(-gate)) * (m @ i[p + "mlp.up_proj.weight"].T)
        x = x + act @ i[p + "mlp.down_proj.weight"].T
    return rms_norm(x, i["model.norm.weight"], 1e-6) @ i["lm_head.weight"].T


def bert_model(i):
    ids, mask = i["input_ids"], i["attention_mask"]
    b, s = ids.shape
    x = (i["embeddings.word_embeddings.weight"][ids] +
         i["embeddings.position_embeddings.weight"][np.arange(s)][None] +
         i["embeddings.token_type_embeddings.weight"][i["token_type_ids"]])
    x = layer_norm(x, i["embeddings.LayerNorm.weight"], i["embeddings.LayerNorm.bias"], 1e-12)
    keep = np.broadcast_to(mask[:, None, None, :] == 1, (b, 1, s, s))
    for l in range(M_LAYERS):
        p = f"encoder.layer.{l}."

        def project(name):
            t = x @ i[p + f"attention.self.{name}.weight"].T + i[p + f"attention.self.{name}.bias"]
            return t.reshape(b, s, M_HEADS, M_D).transpose(0, 2, 1, 3)

        o = masked_attention(project("query"), project("key"), project("value"), keep)
        o = o.transpose(0, 2, 1, 3).reshape(b, s, M_HIDDEN) @ i[p + "attention.output.dense.weight"].T
        h = layer_norm(x + o + i[p + "attention.output.dense.bias"],
                       i[p + "attention.output.LayerNorm.weight"],
                       i[p + "attention.output.LayerNorm.bias"], 1e-12)
        f = gelu_tanh(h @ i[p + "intermediate.dense.weight"].T + i[p + "intermediate.dense.bias"])
        out = f @ i[p + "output.dense.weight"].T + i[p + "output.dense.bias"]
        x = layer_norm(h + out, i[p + "output.LayerNorm.weight"], i[p + "output.LayerNorm.bias"],
                       1e-12)
    return x


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


ERF = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)))


def heads(t):  # [B, S, H] -> [B, S, HEADS, D]
    return t.reshape(B, S, HEADS, D)


def attention(q, k, v, mask):  # q, k, v: [B, HEADS, S, D]
    scores = q @ k.transpose(0, 1, 3, 2) * 0.125 + mask
    merged = softmax(scores) @ v
    return merged.transpose(0, 2, 1, 3).reshape(B, S, H)


def llama(i):
    x = i["x"]
    h = rms_norm(x, i["attn_norm"], 1e-5)
    q, k, v = heads(h @ i["wq"]), heads(h @ i["wk"]), heads(h @ i["wv"])

    def rotate(t):
        rotated = np.concatenate([-t[..., D // 2:], t[..., :D // 2]], axis=-1)
        return (t * i["rope_cos"] + rotated * i["rope_sin"]).transpose(0, 2, 1, 3)

    h1 = x + attention(rotate(q), rotate(k), v.transpose(0, 2, 1, 3), i["mask"]) @ i["wo"]
    m = rms_norm(h1, i["mlp_norm"], 1e-5)
    gate = m @ i["w_gate"]
    act = gate / (1.0 + np.exp(-gate)) * (m @ i["w_up"])
    return h1 + act @ i["w_down"]


def bert(i):
    x = i["x"]

    def project(name):
        return heads(x @ i["w" + name] + i["b" + name]).transpose(0, 2, 1, 3)

    attn = attention(project("q"), project("k"), project("v"), i["mask"])
    h = layer_norm(x + (attn @ i["wo"] + i["bo"]), i["ln1_w"], i["ln1_b"], 1e-12)
    f = gelu(h @ i["w1"] + i["b1"])
    return layer_norm(h + (f @ i["w2"] + i["b2"]), i["ln2_w"], i["ln2_b"], 1e-12)


# name: (inputs(rng, size), forward, output name, sizes); a layer's size is fixed by its graph.
LAYERS = {
    "llama_layer": (lambda rng, size: llama_inputs(rng), llama, "out", [None]),
    "bert_layer": (lambda rng, size: bert_inputs(rng), bert, "out", [None]),
    "llama_model": (lambda rng, size: llama_model_inputs(rng, *size), llama_model, "logits",
                    [(2, 13), (3, 37)]),
    "bert_model": (lambda rng, size: bert_model_inputs(rng, *size), bert_model, "h2",
                   [(2, 13), (3, 37)]),
}


def rel_l2(actual, expected):
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def check(kiln, graphs, layer, mode, arch, seed, workdir, size=None):
    """One layer or model in one mode (a model at one (B, S) size); arch None runs on the GPU
    (its own arch) instead of emulating, "cpu" natively on the CPU target."""
    make_inputs, forward, output, _ = LAYERS[layer]
    rng = np.random.default_rng(seed)
    # The graph's float inputs are f32: round once, and compute NumPy's answer from the same
    # values; integer inputs (token ids, masks) go as they are.
    inputs = {name: np.ascontiguousarray(value if value.dtype.kind == "i" else value.astype(np.float32))
              for name, value in make_inputs(rng, size).items()}
    label = layer if size is None else f"{layer} B={size[0]} S={size[1]}"
    base = os.path.join(workdir, layer + "_" + mode + ("" if size is None else f"_{size[0]}_{size[1]}"))
    os.makedirs(base, exist_ok=True)
    where = ["--target", "cpu"] if arch == "cpu" else ["--emulate", "--arch", arch] if arch else []
    args = [kiln, "run", os.path.join(graphs, layer + ".kg"), *where, "--precision", mode, "--json",
            "--save", os.path.join(base, "out"), "--save-reference", os.path.join(base, "ref")]
    if size is None:
        for name, value in inputs.items():
            path = os.path.join(base, name + ".npy")
            np.save(path, value)
            args += ["--input", name + "=" + path]
    else:
        # A model's state_dict and batch as one archive, dotted names kept.
        path = os.path.join(base, "inputs.npz")
        np.savez(path, **inputs)
        args += ["--inputs", path]
    run = subprocess.run(args, capture_output=True, text=True)
    saved = [os.path.join(base, "out", output + ".npy"), os.path.join(base, "ref", output + ".npy")]
    layer = label
    # Exit 1 with the outputs saved is a tolerance miss, judged below; anything else failed.
    if run.returncode not in (0, 1) or not all(os.path.exists(p) for p in saved):
        said = (run.stderr.strip() or run.stdout.strip())[:400]
        print(f"{layer} {mode}: kiln run failed (exit {run.returncode}): {said}")
        return False
    expected = forward({name: value if value.dtype.kind == "i" else value.astype(np.float64)
                        for name, value in inputs.items()})
    kernels = np.load(saved[0]).astype(np.float64)
    reference = np.load(saved[1])
    if kernels.shape != expected.shape or reference.shape != expected.shape:
        print(f"{layer} {mode}: shapes differ: kernels {kernels.shape}, reference "
              f"{reference.shape}, numpy {expected.shape}")
        return False
    kernel_error = rel_l2(kernels, expected)
    reference_error = rel_l2(reference, expected)
    kiln_error = json.loads(run.stdout)["outputs"][0]["rel_l2"] if run.stdout else float("nan")
    ok = kernel_error <= TOLERANCE[mode] and reference_error <= REFERENCE_TOLERANCE
    print(f"{layer:<12} {arch.upper() if arch == 'cpu' else arch or 'GPU':<6} {mode:<8} kernels-vs-numpy {kernel_error:.3e} "
          f"(tolerance {TOLERANCE[mode]:.1e}, kiln's own check {kiln_error:.3e})  "
          f"reference-vs-numpy {reference_error:.3e}  {'ok' if ok else 'FAILED'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", default=os.path.join(ROOT, "build", "tools", "kiln"))
    parser.add_argument("--layer", default="all", choices=["all"] + sorted(LAYERS))
    parser.add_argument("--precision", default="all", choices=["all"] + sorted(TOLERANCE))
    parser.add_argument("--arch", default="sm_90", help="the emulated arch (default sm_90)")
    parser.add_argument("--gpu", action="store_true",
                        help="run the kernels on the GPU (its arch) instead of emulating them")
    parser.add_argument("--cpu", action="store_true",
                        help="run the kernels natively on the CPU (--target cpu) instead")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graphs", default=os.path.join(ROOT, "examples", "graphs"),
                        help="the directory holding the layers' and models' graphs")
    parser.add_argument("--workdir", help="where the .npy files go (default: a temporary dir)")
    args = parser.parse_args()
    if args.gpu and args.cpu:
        parser.error("--gpu and --cpu are two different targets: pick one")
    if not os.access(args.kiln, os.X_OK):
        parser.error(f"no kiln binary at {args.kiln}; build first or pass --kiln")
    layers = sorted(LAYERS) if args.layer == "all" else [args.layer]
    modes = ["highest", "high", "tf32x3", "medium"] if args.precision == "all" else [args.precision]
    with tempfile.TemporaryDirectory(prefix="kiln-numpy-") as tmp:
        workdir = args.workdir or tmp
        arch = None if args.gpu else "cpu" if args.cpu else args.arch
        results = [check(args.kiln, args.graphs, layer, mode, arch, args.seed, workdir, size)
                   for layer in layers for size in LAYERS[layer][3] for mode in modes]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
