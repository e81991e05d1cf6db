#!/usr/bin/env python3
"""The end of scripts/demo.sh: the benchmark table and what the figures say, in three lines.

Usage: demo_summary.py BENCH_JSON QTLQ_OUTPUT (kiln-bench --json, and kiln-qtlq's table).
"""
import json, math, sys

bench = json.load(open(sys.argv[1]))
rows = bench["graphs"]
print("graph            kernels   cold_ms   warm_us  process_ms  version_ms   cold/warm")
for g in rows:
    print(f"{g['name']:<16} {g['kernels']:>7} {g['cold_ms']:>9.0f} {g['warm_us']:>9.1f}"
          f" {g['warm_process_ms']:>11.2f} {g['version_ms']:>11.2f} {g['ratio']:>10,.0f}x")

# The largest error of each mode over the table's rows (columns: idx, true, three values, errors).
errors = {"highest": 0.0, "high": 0.0, "tf32x3": 0.0, "floor": 0.0}
true_values = []
for line in open(sys.argv[2]):
    cells = line.split()
    if len(cells) == 9 and cells[0].isdigit():
        true_values.append(abs(float(cells[1])))
        for mode, cell in zip(("highest", "high", "tf32x3", "floor"), cells[5:9]):
            errors[mode] = max(errors[mode], float(cell.rstrip("%")))
span = math.log10(max(true_values) / min(true_values)) if true_values and min(true_values) > 0 else 0

cold = [g["cold_ms"] for g in rows]
warm = [g["warm_us"] for g in rows]
proc = [g["warm_process_ms"] / g["version_ms"] for g in rows]
ratio = [g["ratio"] for g in rows]
print()
print("What this says:")
print(f"- Cold vs warm: NVRTC took {min(cold):.0f}-{max(cold):.0f} ms per graph; a cache hit took "
      f"{min(warm):.0f}-{max(warm):.0f} us in process ({min(ratio):,.0f}x-{max(ratio):,.0f}x faster), "
      f"and a new `kiln compile` process that hits costs {min(proc):.2f}-{max(proc):.2f}x a bare "
      f"`kiln --version`.")
herd = bench.get("herd")
if herd:
    print(f"- Herd: {herd['processes']} processes starting cold on {herd['graph']} made "
          f"{herd['cached']['compiles']} NVRTC compile ({herd['cached']['wall_ms']:.0f} ms), against "
          f"{herd['uncached']['compiles']} ({herd['uncached']['wall_ms']:.0f} ms) without the cache.")
print(f"- QtLQ: on a diagonal spanning {span:.0f} orders of magnitude, TF32 (high) is off by up to "
      f"{errors['high']:,.0f}% on the small entries, while tf32x3 and fp32 (highest) stay within "
      f"{errors['tf32x3']:.1f}% and {errors['highest']:.1f}%, near the {errors['floor']:.1f}% that "
      f"rounding the inputs to fp32 alone causes: use tf32x3 or highest for such data.")
