"""The peer benchmark's JSON (bench/peers/measure.py) as the Markdown table the README includes.

Usage: table.py PEERS.json  (prints Markdown; exit 2 when the file is not such a report)
"""
import json
import sys

SYSTEM_NAMES = {
    "kiln": "kiln {version}",
    "triton": "Triton {version} (same kernels, sm_90)",
    "torch": "torch.compile {version}, Inductor CPU",
    "jax": "JAX {version} CPU",
    "ccache": "ccache {version} + nvcc, kiln's source",
}
ROW_KEYS = ("system", "graph", "cold_ms", "warm_process_ms", "warm_process_minus_start_ms",
            "warm_inprocess_us")


class ReportError(Exception):
    pass


def load(path):
    """The report at `path`, checked: machine, date, and rows with every key the table needs."""
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        raise ReportError(f"{path}: {e}")
    if not isinstance(report, dict):
        raise ReportError(f"{path}: expected a JSON object")
    for key in ("machine", "date", "rows"):
        if key not in report:
            raise ReportError(f"{path}: missing '{key}'")
    if not isinstance(report["rows"], list):
        raise ReportError(f"{path}: 'rows' is not a list")
    for i, row in enumerate(report["rows"]):
        if not isinstance(row, dict):
            raise ReportError(f"{path}: rows[{i}] is not an object")
        for key in ROW_KEYS:
            if key not in row:
                raise ReportError(f"{path}: rows[{i}] lacks '{key}'")
    return report


def ms(value):
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value >= 10:
        return f"{value:.0f} ms"
    return f"{value:.1f} ms"


def us(value):
    if value is None:
        return "—"
    if value >= 1000:
        return ms(value / 1000)
    return f"{value:.0f} µs"


def name(row):
    template = SYSTEM_NAMES.get(row["system"], row["system"])
    return template.format(version=row.get("version", "?"))


def markdown(report):
    lines = [
        f"Measured {report['date']} on {report['machine']} with `{report.get('command', 'bench/peers/run.sh')}`"
        f"{' (' + report['repetitions'] + ')' if report.get('repetitions') else ''}:",
        "",
        "| system | graph | cold | warm, new process | minus process start | warm, in process |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in report["rows"]:
        lines.append(f"| {name(row)} | {row['graph']} | {ms(row['cold_ms'])} | "
                     f"{ms(row['warm_process_ms'])} | {ms(row['warm_process_minus_start_ms'])} | "
                     f"{us(row['warm_inprocess_us'])} |")
    for skipped in report.get("skipped", []):
        lines.append(f"| {skipped['system']} | — | skipped: {skipped['reason']} | | | |")
    notes = report.get("where_warm_time_goes", {})
    if notes:
        lines += ["", "Where a warm hit in a new process goes (measured in the same run):"]
        for system, text in notes.items():
            lines.append(f"- {system}: {text}")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 2:
        print("usage: table.py PEERS.json", file=sys.stderr)
        return 2
    try:
        report = load(sys.argv[1])
    except ReportError as e:
        print(f"table.py: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
