"""kiln against the compile caches users would pick instead, measured side by side in one run.

Usage: measure.py --kiln BIN --kiln-bench BIN --python PY --out DIR [--quick]
                  [--skip SYSTEM=REASON ...]
  --python  the interpreter of the peers' virtual environment (bench/peers/run.sh makes it)

For each system and graph (examples/graphs/mlp.kg and attention.kg; fp32, sm_90, TF32 where the
system has a mode):
  cold_ms                      first compile with an empty cache: the whole `kiln compile` or
                               `ccache nvcc` process; for the Python peers the compile (or first
                               call) inside a process that has already imported the peer
  warm_process_ms              a new process that hits the warm cache, start to exit (median)
  warm_process_minus_start_ms  the median of (that process - a bare start of the same program),
                               each pair run back to back, all systems interleaved
  warm_inprocess_us            a hit in a process that is already running (median); kiln's from
                               kiln-bench; none for ccache
Writes DIR/peers.json and DIR/peers.md (table.py's table) and prints the table.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import table  # noqa: E402

GRAPHS = ("mlp", "attention")
WORKER = os.path.join(HERE, "worker.py")


class RunFailed(Exception):
    pass


def timed(cmd, env=None):
    """Runs `cmd`; its wall time in ms and its stdout. Raises RunFailed with stderr's tail."""
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = (time.perf_counter() - start) * 1e3
    if done.returncode != 0:
        raise RunFailed(f"{' '.join(cmd[:4])} ...: exit {done.returncode}: {done.stderr[-400:]}")
    return elapsed, done.stdout


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


class Kiln:
    name = "kiln"

    def __init__(self, args, out):
        self.kiln, self.out = args.kiln, out
        self.version = timed([self.kiln, "--version"])[1].splitlines()[0].split()[-1]
        self.bench = args.kiln_bench

    def cache(self, graph):
        return os.path.join(self.out, "cache", f"kiln-{graph}")

    def compile_cmd(self, graph):
        return [self.kiln, "compile", os.path.join(ROOT, "examples", "graphs", graph + ".kg"),
                "--arch", "sm_90", "--precision", "high", "--cache-dir", self.cache(graph)]

    def cold(self, graph):
        fresh(self.cache(graph))
        return timed(self.compile_cmd(graph))[0]

    def warm_cmd(self, graph):
        return self.compile_cmd(graph), None

    def start_cmd(self):
        return [self.kiln, "--version"]

    def inprocess(self, graphs, quick):
        folder = fresh(os.path.join(self.out, "kiln-bench-graphs"))
        for g in graphs:
            os.symlink(os.path.join(ROOT, "examples", "graphs", g + ".kg"),
                       os.path.join(folder, g + ".kg"))
        cmd = [self.bench, "--graphs", folder, "--arch", "sm_90", "--precision", "high",
               "--herd", "0", "--json", "--kiln", self.kiln] + (["--quick"] if quick else [])
        report = json.loads(timed(cmd)[1])
        return {g["name"]: g["warm_us"] for g in report["graphs"]}


class PythonPeer:
    cache_variables = {"triton": "TRITON_CACHE_DIR", "torch": "TORCHINDUCTOR_CACHE_DIR",
                       "jax": "KILN_PEERS_JAX_CACHE"}

    def __init__(self, name, args, out):
        self.name, self.python, self.out = name, args.python, out
        self.version = None
        self.import_ms = {}
        self.hit_ms = {}

    def env(self, graph):
        env = dict(os.environ)
        env[self.cache_variables[self.name]] = os.path.join(self.out, "cache",
                                                            f"{self.name}-{graph}")
        env.setdefault("TRITON_CACHE_DIR", os.path.join(self.out, "cache", "triton-unused"))
        return env

    def run_worker(self, graph, *extra):
        return json.loads(timed([self.python, WORKER, self.name, graph, *extra],
                                self.env(graph))[1].strip().splitlines()[-1])

    def cold(self, graph):
        fresh(self.env(graph)[self.cache_variables[self.name]])
        result = self.run_worker(graph)
        self.version = result["version"]
        return result["compile_ms"]

    def warm_cmd(self, graph):
        return [self.python, WORKER, self.name, graph], self.env(graph)

    def note_warm_output(self, graph, stdout):
        result = json.loads(stdout.strip().splitlines()[-1])
        self.import_ms.setdefault(graph, []).append(result["import_ms"])
        self.hit_ms.setdefault(graph, []).append(result["compile_ms"])

    def start_cmd(self):
        return [self.python, "-c", "pass"]

    def inprocess(self, graphs, quick):
        n = 5 if quick else 20
        return {g: self.run_worker(g, "--inprocess", str(n))["inprocess_us"] for g in graphs}

    def profile(self, graph):
        return self.run_worker(graph, "--profile").get("profile", [])


class Ccache:
    name = "ccache"

    def __init__(self, args, out):
        self.out, self.kiln = out, args.kiln
        self.nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        self.version = timed(["ccache", "--version"])[1].splitlines()[0].split()[-1]
        os.makedirs(os.path.join(out, "src"), exist_ok=True)
        for g in GRAPHS:  # the same CUDA source kiln compiles with NVRTC
            source = timed([self.kiln, "emit", os.path.join(ROOT, "examples", "graphs", g + ".kg"),
                            "--arch", "sm_90", "--precision", "high"])[1]
            with open(os.path.join(out, "src", g + ".cu"), "w") as f:
                f.write(source)

    def env(self, graph):
        env = dict(os.environ)
        env["CCACHE_DIR"] = os.path.join(self.out, "cache", f"ccache-{graph}")
        return env

    def compile_cmd(self, graph):
        src = os.path.join(self.out, "src", graph + ".cu")
        return ["ccache", self.nvcc, "-c", "-arch=sm_90", "-o", src[:-3] + ".o", src]

    def cold(self, graph):
        fresh(self.env(graph)["CCACHE_DIR"])
        return timed(self.compile_cmd(graph), self.env(graph))[0]

    def warm_cmd(self, graph):
        return self.compile_cmd(graph), self.env(graph)

    def start_cmd(self):
        return ["ccache", "--version"]

    def inprocess(self, graphs, quick):
        return {g: None for g in graphs}


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    gpu = "no GPU" if not shutil.which("nvidia-smi") else "a GPU (unused: every peer here compiles)"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}, {platform.system()} {platform.release()}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--kiln-bench", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", action="append", default=[], help="SYSTEM=REASON")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    skipped = [dict(zip(("system", "reason"), s.split("=", 1))) for s in args.skip]
    skipped_names = {s["system"] for s in skipped}

    systems = [Kiln(args, out)]
    for name in ("triton", "torch", "jax"):
        if name in skipped_names:
            continue
        probe = subprocess.run([args.python, "-c", f"import {name}"], capture_output=True,
                               text=True)
        if probe.returncode != 0:
            skipped.append({"system": name,
                            "reason": "cannot import: " + probe.stderr.strip().splitlines()[-1]})
            continue
        systems.append(PythonPeer(name, args, out))
    if "ccache" not in skipped_names:
        if shutil.which("ccache"):
            systems.append(Ccache(args, out))
        else:
            skipped.append({"system": "ccache", "reason": "ccache is not installed"})

    colds = 1 if args.quick else 3
    pairs = 3 if args.quick else 9
    results = {}  # (system, graph) -> dict
    failed = {}
    for system in systems:
        for graph in GRAPHS:
            print(f"peers: {system.name} {graph}: cold", file=sys.stderr, flush=True)
            try:
                values = [system.cold(graph) for _ in range(colds)]
                results[(system.name, graph)] = {"cold": statistics.median(values),
                                                 "warm": [], "minus": []}
            except RunFailed as e:
                failed[system.name] = str(e)
    systems = [s for s in systems if s.name not in failed]
    skipped += [{"system": name, "reason": f"failed: {why}"} for name, why in failed.items()]

    # Warm processes, each paired with a bare start of the same program, all interleaved.
    for rep in range(pairs):
        print(f"peers: warm processes, round {rep + 1} of {pairs}", file=sys.stderr, flush=True)
        order = [(s, g) for s in systems for g in GRAPHS]
        order = order[rep % len(order):] + order[:rep % len(order)]
        for system, graph in order:
            cmd, env = system.warm_cmd(graph)
            warm, stdout = timed(cmd, env)
            start, _ = timed(system.start_cmd(), env)
            if isinstance(system, PythonPeer):
                system.note_warm_output(graph, stdout)
            results[(system.name, graph)]["warm"].append(warm)
            results[(system.name, graph)]["minus"].append(warm - start)

    rows = []
    notes = {}
    for system in systems:
        print(f"peers: {system.name}: in process", file=sys.stderr, flush=True)
        inprocess = system.inprocess(GRAPHS, args.quick)
        for graph in GRAPHS:
            r = results[(system.name, graph)]
            rows.append({"system": system.name, "graph": graph, "version": system.version,
                         "cold_ms": round(r["cold"], 1),
                         "warm_process_ms": round(statistics.median(r["warm"]), 1),
                         "warm_process_minus_start_ms": round(statistics.median(r["minus"]), 1),
                         "warm_inprocess_us": None if inprocess[graph] is None
                         else round(inprocess[graph], 1)})
        mlp = results[(system.name, "mlp")]
        warm = statistics.median(mlp["warm"])
        start = warm - statistics.median(mlp["minus"])
        if isinstance(system, PythonPeer):
            imp = statistics.median(system.import_ms["mlp"])
            hit = statistics.median(system.hit_ms["mlp"])
            top = ", ".join(f"`{p['function']}` {p['own_ms']} ms" for p in system.profile("mlp")[:3])
            notes[system.name] = (
                f"mlp, {warm:.0f} ms in all: interpreter start {start:.0f} ms, importing the "
                f"peer and making the inputs {imp:.0f} ms, the cache hit itself {hit:.0f} ms "
                f"(most own time in that first hit: {top}).")
        elif system.name == "kiln":
            notes["kiln"] = (
                f"mlp, {warm:.1f} ms in all: `kiln --version` alone takes {start:.1f} ms (loading "
                f"the binary and its libraries); the hit adds "
                f"{statistics.median(mlp['minus']):.1f} ms (opening the cache, argument parsing, "
                f"the lookup: {inprocess['mlp']:.0f} µs in process).")
        else:
            notes["ccache"] = (
                f"mlp, {warm:.1f} ms in all: `ccache --version` alone takes {start:.1f} ms; the "
                f"hit adds {statistics.median(mlp['minus']):.1f} ms (hashing the source and the "
                f"nvcc command line, reading the manifest, copying the object out); no in-process "
                f"API.")
    report = {
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "command": "bench/peers/run.sh" + (" --quick" if args.quick else ""),
        "repetitions": f"median of {colds} cold and {pairs} paired warm runs per row",
        "rows": rows,
        "skipped": skipped,
        "where_warm_time_goes": notes,
    }
    with open(os.path.join(out, "peers.json"), "w") as f:
        json.dump(report, f, indent=2)
    text = table.markdown(report)
    with open(os.path.join(out, "peers.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RunFailed as e:
        print(f"peers: {e}", file=sys.stderr)
        sys.exit(1)
