"""scripts/torch_differential.py at fixed seeds: random PyTorch programs through kiln.torch on the
CPU target, by torch.export, by save and load, and by torch.compile, against eager PyTorch; and a
bug planted in the lowering, which the same seeds must find."""

from __future__ import annotations

import collections
import importlib.util
import json
import subprocess
import sys

import pytest
import torch

import kiln.torch._table as table
from conftest import ROOT, cache_entries, kiln_cli

pytestmark = pytest.mark.filterwarnings("ignore")

_spec = importlib.util.spec_from_file_location(
    "torch_differential", ROOT / "scripts" / "torch_differential.py"
)
differential = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = differential  # its dataclass looks its module up there
_spec.loader.exec_module(differential)

# Each way a program reaches kiln takes every third seed (mode_of).
SEEDS = range(1, 91)


def run(seeds, cache_dir, saved_dir):
    """The records of the seeds' programs, checked in `high` as the script checks them."""
    torch.set_num_threads(1)
    runs = {
        mode: differential.Run(mode, "high", "cpu", str(cache_dir), str(saved_dir))
        for mode in differential.MODES
    }
    return [
        differential.check_with_timeout(seed, runs[differential.mode_of(seed, "all")], 300)
        for seed in seeds
    ]


def test_random_programs_give_eagers_results(cache_dir, tmp_path):
    records = run(SEEDS, cache_dir, tmp_path)
    failures = [
        f"seed {r['seed']} ({r['mode']}): {r['status']}: {r.get('message')}\n"
        f"  steps {r.get('steps')}\n{r.get('traceback', '')}"
        for r in records
        if r["status"] in differential.FAILURES
    ]
    assert not failures, "\n".join(failures)
    counts = collections.Counter(r["status"] for r in records)
    # Programs eager or torch.export refuse are not checked; nearly all must be.
    assert counts["ok"] >= 0.9 * len(SEEDS), counts
    checked = collections.Counter(r["mode"] for r in records if r["status"] == "ok")
    assert min(checked[m] for m in differential.MODES) >= 25, checked
    # Fallbacks are allowed, but most programs must reach kiln, in each way: a lowering that
    # refused every op would leave them all in PyTorch, and eager's results.
    for mode in differential.MODES:
        ok = [r for r in records if r["status"] == "ok" and r["mode"] == mode]
        reached = sum(r["kiln_graphs"] > 0 for r in ok)
        assert reached >= 0.75 * len(ok), (mode, reached, len(ok))


def test_a_lowering_that_drops_alpha_is_found(cache_dir, tmp_path, monkeypatch):
    # add, sub and rsub lowered without their alpha (x - 2 * y as x - y): wrong wherever a
    # program scales the second operand, a handful of the seeds.
    def without_alpha(lower):
        def planted(cx, node):
            kwargs = node.kwargs
            node.kwargs = {k: v for k, v in kwargs.items() if k != "alpha"}
            try:
                return lower(cx, node)
            finally:
                node.kwargs = kwargs

        return planted

    aten = torch.ops.aten
    for overload in (aten.add.Tensor, aten.sub.Tensor, aten.rsub.Tensor, aten.rsub.Scalar):
        monkeypatch.setitem(table.TABLE, overload, without_alpha(table.TABLE[overload]))
    records = run(SEEDS, cache_dir, tmp_path)
    found = [r for r in records if r["status"] == "mismatch"]
    assert len(found) >= 5, collections.Counter(r["status"] for r in records)
    # Each one a program that scales an operand: the plant, not something else, is found.
    scaled = ("add_alpha", "sub_alpha", "rsub_t")
    for r in found:
        assert any(step in scaled for step in r["steps"]), r


@pytest.mark.parametrize("seed, step, moved", [(90003, "rem_s", "1.4"), (90646, "ceil", "0.98")])
def test_a_tf32_rounding_moved_past_a_step_that_jumps_is_refereed_as_rounding(
        seed, step, moved, cache_dir, tmp_path):
    # --wide seed 90003: a gram matrix in TF32, then a remainder; 90646: an attention in TF32,
    # then ceil. TF32's rounding moves an element across a multiple of the divisor (an integer),
    # 1.49 (0.99) apart where the tolerance is 0.02. It gives eager's results in highest:
    # `rounding`, not a mismatch.
    run = differential.Run("export", "high", "cpu", str(cache_dir), str(tmp_path), True)
    r = differential.check_with_timeout(seed, run, 300)
    assert r["status"] == "rounding" and step in r["steps"], r
    assert f"max abs difference {moved}" in r["message"], r


def test_a_remainder_keeps_its_operands_absolute_error():
    # remainder(3x, 2) of x near 1000: an ulp of 3x (2.4e-4 in f32) is past f32's relative
    # tolerance of a result below 2 (2e-4, and 2e-4 absolute); after it the absolute tolerance
    # grows by CANCEL_ULPS ulps of 3x's largest magnitude, and the steps after it keep that. The
    # relative tolerance stays f32's, and without a remainder on the way so does the absolute.
    gen = differential.Gen(1, 0)
    x = torch.tensor([999.5, -1000.25, 3.0, float("inf")])
    gen.pool.append(differential.Entry([x], "in0", torch.float32))
    assert gen.add(lambda v: v + 1, [0], "add", "add_s")
    assert gen.add(lambda v: torch.remainder(v * 3, 2.0), [0], "rem", "rem_s")
    assert gen.add(lambda v: v * 2, [2], "twice", "mul_s")
    base = differential.TOLERANCE[torch.float32]
    assert differential.tolerance(gen.pool[1], "highest") == differential.Tol(base, base)
    wider = base + differential.CANCEL_ULPS * torch.finfo(torch.float32).eps * 3 * 1000.25
    for entry in gen.pool[2:]:
        t = differential.tolerance(entry, "highest")
        assert t.rel == base and t.abs == pytest.approx(wider), t
    # 3 ulps of 3000 (7.3e-4, a sum in another order before it) pass; a whole unit does not.
    want = torch.tensor([0.5, 1.25])
    t = differential.tolerance(gen.pool[2], "highest")
    assert differential.compare(want + 7.3e-4, want, t) is None
    assert differential.compare(want + 1.0, want, t)[0] == "values"


def test_a_dynamo_record_counts_only_its_own_kiln_graphs(cache_dir, tmp_path, monkeypatch):
    # The referee compiles the program again in highest (torch.compile and dynamo's reset
    # included); those graphs are not the record's. Every output planted as different, and a
    # referee that re-checks in highest and lets the difference pass: the count stays the plain
    # run's.
    run = differential.Run("dynamo", "high", "cpu", str(cache_dir), str(tmp_path))
    plain = differential.check_with_timeout(3, run, 300)
    assert plain["status"] == "ok" and plain["kiln_graphs"] > 0, plain

    def referee(prog, model, xs, k, got, want, kind, tol, run):
        if run.precision != "highest":
            differential._passes_in_highest(prog, run)
        return "rounding"

    monkeypatch.setattr(differential, "compare", lambda got, want, tol: ("values", "planted"))
    monkeypatch.setattr(differential, "_referee", referee)
    refereed = differential.check_with_timeout(3, run, 300)
    assert refereed["status"] == "rounding", refereed
    assert refereed["kiln_graphs"] == plain["kiln_graphs"], (refereed, plain)
    assert refereed["fallbacks"] == plain["fallbacks"], (refereed, plain)


def test_the_script_writes_each_record_and_orders_them_by_seed(tmp_path):
    # Four seeds, one in each way and two workers: results.jsonl holds one record a seed, in
    # seed order (the workers finish in any), each checked one with its kiln graphs.
    out = tmp_path / "out"
    script = str(ROOT / "scripts" / "torch_differential.py")
    options = ["--count", "4", "--seed", "5", "--jobs", "2", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, script, *options], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in records] == [5, 6, 7, 8], records
    checked = [r for r in records if r["status"] in differential.CHECKED]
    assert checked and all("kiln_graphs" in r for r in checked), records
    assert "torch_differential: 4 programs in" in done.stdout, done.stdout


def test_a_worker_that_dies_is_the_crash_record_of_its_seed_alone(monkeypatch):
    # Seed 2 kills its worker. The pool breaks; the seeds left without a record run again one
    # at a time, so seed 2 alone is a crash, every seed has one record in order, and on_record
    # saw each once. (The workers import the script by name for its initializer.)
    import crash_worker

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))

    seeds = range(1, 6)
    runs = {s: crash_worker.Run("export") for s in seeds}
    seen = []
    records = differential._run_all(seeds, runs, 2, 60, seen.append, check=crash_worker.check)
    assert [r["seed"] for r in records] == list(seeds), records
    assert [r["status"] for r in records] == ["ok", "crash", "ok", "ok", "ok"], records
    assert records[1]["mode"] == "export" and "worker died" in records[1]["message"], records
    assert sorted(r["seed"] for r in seen) == list(seeds), seen


def test_a_seed_makes_the_same_program_each_time():
    # A failure is reported by its seed: the seed must make the program again, parameters too.
    with_parameters = 0
    for seed in (3, 40, 77, 89):
        a, b = differential.generate(seed), differential.generate(seed)
        with_parameters += bool(a.gen.params)
        assert [s[2] for s in a.gen.steps] == [s[2] for s in b.gen.steps]
        assert a.gen.params.keys() == b.gen.params.keys()
        for name, p in a.gen.params.items():
            assert torch.equal(p, b.gen.params[name]), (seed, name)
        for x, y in zip(a.inputs(None, seed), b.inputs(None, seed)):
            assert torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num())
    assert with_parameters >= 2


# Seeds whose --wide program has an f16 or bf16 attention that sm_90a's analytic model puts on
# the wgmma kernel (causal or not, one through save and load).
WGMMA_SEEDS = (21, 28, 43, 46, 49, 54, 67)


def test_programs_on_the_emulated_wgmma_attention_kernel_give_eagers_results(tmp_path):
    cache = tmp_path / "cache"
    runs = {
        mode: differential.Run(mode, "high", "emulate:sm_90a", str(cache), str(tmp_path), True)
        for mode in differential.MODES
    }
    torch.set_num_threads(1)
    for seed in WGMMA_SEEDS:
        r = differential.check_with_timeout(seed, runs[differential.mode_of(seed, "all")], 600)
        assert r["status"] == "ok", r
    kernels = [
        k["name"]
        for e in cache_entries(cache)
        for k in json.loads(
            subprocess.run(
                [kiln_cli(), "show", e["key"], "--json", "--cache-dir", str(cache)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )["summary"]["kernels"]
    ]
    wgmma = [name for name in kernels if "attention" in name and "_wg" in name]
    assert len(wgmma) >= len(WGMMA_SEEDS), kernels
