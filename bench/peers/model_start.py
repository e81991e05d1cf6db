"""A whole model's warm start, kiln against torch.compile and AOTInductor, measured side by side.

Usage: model_start.py --python PY --out DIR [--runs N] [--device cpu|cuda]
  --python  an interpreter with torch, transformers and the kiln package (scripts/python_env.sh)

The model is transformers' LlamaForCausalLM built from a config (2 layers, hidden 256, 4 query and
2 key/value heads, vocabulary 1024; no download), one sequence of 64 tokens, fp32, precision
"high" where the system has the choice. Each system is prepared once (its cache warmed), then for
each of --runs rounds, every system runs in a new process, interleaved:

  kiln           kiln.torch.load(saved program) + the first call
  torch.compile  transformers' model from the config, its state_dict loaded, torch.compile
                 (Inductor, FX-graph cache warm) + the first call
  aoti           torch._inductor.aoti_load_package + the first call
  import torch   a bare `import torch`, which every one of them pays

Each figure is the time from before the process is started to its first logits (the child
prints the wall clock when it has them), the median over the rounds; "beyond import torch" is the
median of each round's figure less that round's bare import. Then, in one process per system,
the steady forward time (median of 50 calls after 5 warm-up calls) against torch eager.
Writes DIR/model_start.json and DIR/model_start.md and prints the table.
"""
import argparse
import json
import os
import statistics
import subprocess
import textwrap
import time

SETUP = textwrap.dedent(r"""
    import os, sys, time, torch
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import LlamaConfig, LlamaForCausalLM
    CONFIG = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6, use_cache=False)
    class Logits(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model
        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits
""")

PREPARE = SETUP + textwrap.dedent(r"""
    out, device = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = Logits(LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()).to(device)
    torch.save(model.state_dict(), f"{out}/state_dict.pt")
    ids = (torch.randint(0, 1024, (1, 64), device=device),
           torch.ones(1, 64, dtype=torch.int64, device=device))
    torch.save(ids, f"{out}/ids.pt")
    from torch.export import Dim
    seq = Dim("S", min=1, max=256)
    example = (torch.randint(0, 1024, (1, 8), device=device),
               torch.ones(1, 8, dtype=torch.int64, device=device))
    with torch.no_grad():
        ep = torch.export.export(model, example, dynamic_shapes=({1: seq}, {1: seq}), strict=False)
    import kiln.torch
    program = kiln.torch.compile_exported(ep, target=device, precision="high",
                                          cache_dir=f"{out}/kiln-cache")
    with torch.no_grad():
        program(*ids)
    program.save(f"{out}/llama.kiln")
    torch.set_float32_matmul_precision("high")
    import torch._inductor
    torch._inductor.aoti_compile_and_package(ep, package_path=f"{out}/llama.pt2")
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(*ids)
""")

RUN = {
    "kiln": textwrap.dedent(r"""
        import sys, time, torch
        import kiln.torch
        out = sys.argv[1]
        program = kiln.torch.load(f"{out}/llama.kiln", cache_dir=f"{out}/kiln-cache")
        ids = torch.load(f"{out}/ids.pt")
        with torch.no_grad():
            logits = program(*ids)
        print(time.time(), float(logits.float().sum()))
    """),
    "torch.compile": SETUP + textwrap.dedent(r"""
        out = sys.argv[1]
        torch.set_float32_matmul_precision("high")
        model = Logits(LlamaForCausalLM(LlamaConfig(**CONFIG)))
        model.load_state_dict(torch.load(f"{out}/state_dict.pt"))
        model.eval()
        compiled = torch.compile(model)
        ids = torch.load(f"{out}/ids.pt")
        with torch.no_grad():
            logits = compiled(*ids)
        print(time.time(), float(logits.float().sum()))
    """),
    "aoti": textwrap.dedent(r"""
        import sys, time, torch
        import torch._inductor
        out = sys.argv[1]
        model = torch._inductor.aoti_load_package(f"{out}/llama.pt2")
        ids = torch.load(f"{out}/ids.pt")
        with torch.no_grad():
            logits = model(*ids)
        print(time.time(), float(logits.float().sum()))
    """),
    "import torch": "import time, torch\nprint(time.time(), 0.0)\n",
}

STEADY = SETUP + textwrap.dedent(r"""
    import statistics
    out, system = sys.argv[1], sys.argv[2]
    ids = torch.load(f"{out}/ids.pt")
    torch.set_float32_matmul_precision("high")
    if system == "kiln":
        import kiln.torch
        fn = kiln.torch.load(f"{out}/llama.kiln", cache_dir=f"{out}/kiln-cache")
    elif system == "aoti":
        import torch._inductor
        fn = torch._inductor.aoti_load_package(f"{out}/llama.pt2")
    else:
        model = Logits(LlamaForCausalLM(LlamaConfig(**CONFIG)))
        model.load_state_dict(torch.load(f"{out}/state_dict.pt"))
        model.eval()
        fn = torch.compile(model) if system == "torch.compile" else model
    times = []
    with torch.no_grad():
        for i in range(55):
            start = time.perf_counter()
            fn(*ids)
            if ids[0].is_cuda:
                torch.cuda.synchronize()
            if i >= 5:
                times.append((time.perf_counter() - start) * 1e3)
    print(statistics.median(times))
""")


def run(python, script, *args, env=None):
    done = subprocess.run([python, "-c", script, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"model_start: {script.splitlines()[1][:60]}...: exit "
                         f"{done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    work = os.path.join(out, "model_start")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "inductor"))
    start = time.perf_counter()
    run(args.python, PREPARE, work, args.device, env=env)
    prepare_s = time.perf_counter() - start

    starts = {name: [] for name in RUN}
    for _ in range(args.runs):
        for name, script in RUN.items():
            before = time.time()
            printed = run(args.python, script, work, env=env).split()
            starts[name].append((float(printed[0]) - before) * 1e3)
    bare = starts["import torch"]
    rows = []
    for name in ("kiln", "torch.compile", "aoti", "import torch"):
        beyond = [s - b for s, b in zip(starts[name], bare)]
        rows.append({"system": name, "start_to_logits_ms": statistics.median(starts[name]),
                     "beyond_import_torch_ms": statistics.median(beyond) if name != "import torch" else None,
                     "runs_ms": starts[name]})
    steady = {}
    for name in ("eager", "kiln", "torch.compile", "aoti"):
        steady[name] = float(run(args.python, STEADY, work, name, env=env).split()[-1])
    for row in rows:
        if row["system"] in steady:
            row["forward_ms"] = steady[row["system"]]
    result = {"model": "LlamaForCausalLM, 2 layers, hidden 256, 1 x 64 tokens, fp32",
              "device": args.device, "runs": args.runs, "prepare_s": prepare_s,
              "eager_forward_ms": steady["eager"], "rows": rows,
              "torch": run(args.python, "import torch; print(torch.__version__)").strip()}
    by = {r["system"]: r for r in rows}
    k = by["kiln"]["beyond_import_torch_ms"]
    lines = [f"{result['model']}, {args.device}, torch {result['torch']}, median of {args.runs} "
             "interleaved rounds", "",
             "| system | process start to first logits, ms | beyond `import torch`, ms | "
             "kiln faster by | forward, ms | / torch eager |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        b = r["beyond_import_torch_ms"]
        ratio = f"{b / k:.1f}x" if b is not None and r["system"] != "kiln" and k > 0 else ""
        fwd = r.get("forward_ms")
        beyond = "" if b is None else f"{b:.0f}"
        forward = "" if fwd is None else f"{fwd:.2f}"
        against = "" if fwd is None else f"{fwd / steady['eager']:.2f}x"
        lines.append(f"| {r['system']} | {r['start_to_logits_ms']:.0f} | {beyond} | {ratio} | "
                     f"{forward} | {against} |")
    lines.append(f"| torch eager | | | | {steady['eager']:.2f} | 1.00x |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out, "model_start.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, "model_start.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
