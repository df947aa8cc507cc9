"""Where the ULP rule's k and c come from (issue 39): stock torch's compiled results against eager's and float64's,
element by element, over the op sweep and the suites, and the smallest c that keeps every judged tensor green for
each k, per device and dtype.

    python bench/ulp_calibration.py run --device cpu|cuda --what sweep|suites [--shards N] [--parts 1,2]
                                    [--select EXPR] [--targets REPO] [--timeout S] --out DIR
    python bench/ulp_calibration.py report DIR [DIR ...] [--k 2] [--c C] [--top 25] [--json FILE]

``run`` starts pytest processes at once (one per sweep shard ``COMPILE_CI_OPS_SHARD=k/N`` with
``COMPILE_CI_OPS_SCOPE=all``, or one per suite) with ``COMPILE_CI_ULP_RECORD=DIR/records``: every tensor the rule
judges and that is not bit for bit eager's leaves one JSON line with its worst elements (compiled's and eager's
distance to float64 and the measured rounding noise, all in ULPs of the output's dtype), first without noise, then
with it (suites/precision.py). A process stopped by ``--timeout`` keeps what it recorded. Needs only torch and
pytest besides this repository, so it runs on a GPU host too.

``report`` reads the records: per device and dtype, the number of tensors, the c each k needs over all of them with
and without the noise (the largest compiled − k × max(eager, noise)), its quantiles, the tensors that need the most
(test, sample, values) and those with NaN/inf or zero-sign disagreements; with ``--c``, which tensors that k and c
turn red ("false reds" on stock torch).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = ("correctness", "freezing", "layout", "passes", "autograd", "fusion")
KS = (2.0, 4.0)
ACCUMULATIONS = (8.0, 32.0, 128.0)


def _targets(repo: Path | None) -> dict[str, str]:
    if repo is None:
        return {}
    path = next(p for p in (repo / ".compile-ci.toml", repo / "compile-ci.toml") if p.exists())
    targets = tomllib.loads(path.read_text()).get("targets", {})
    return {"COMPILE_CI_TARGETS": json.dumps(targets), "COMPILE_CI_CHECKOUT": str(repo.resolve())}


def run(args: argparse.Namespace) -> None:
    out: Path = args.out.resolve()
    records = out / "records"
    records.mkdir(parents=True, exist_ok=True)
    cache = out / "cache"
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    base = {**os.environ, "COMPILE_CI_DEVICE": args.device, "COMPILE_CI_ULP_RECORD": str(records),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton"),
            "TMPDIR": str(cache / "tmp"), "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1",
            **_targets(args.targets)}
    jobs: list[tuple[str, list[str], dict[str, str]]] = []
    if args.what == "sweep":
        parts = [int(p) for p in args.parts.split(",")] if args.parts else range(1, args.shards + 1)
        for part in parts:
            env = {**base, "COMPILE_CI_OPS_SCOPE": "all", "COMPILE_CI_OPS_SHARD": f"{part}/{args.shards}"}
            jobs.append((f"sweep-{part}", [str(ROOT / "suites" / "ops")], env))
    else:
        for suite in args.suites.split(","):
            jobs.append((suite, [str(ROOT / "suites" / suite)], base))
    started = time.monotonic()
    processes = []
    for name, paths, env in jobs:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                   f"--junitxml={out / f'junit-{name}.xml'}", *paths, *(["-k", args.select] if args.select else [])]
        log = (out / f"{name}.log").open("w")
        processes.append((name, subprocess.Popen(command, cwd=out, env={**env, "COMPILE_CI_OUTPUT_DIR": str(
            out / "artifacts" / name)}, stdout=log, stderr=subprocess.STDOUT), log))
    for name, process, log in processes:
        left = args.timeout - (time.monotonic() - started)
        try:
            process.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            process.terminate()
            process.wait()
        log.close()
        print(f"{name}: exit {process.returncode} after {time.monotonic() - started:.0f} s", flush=True)


def _read(directories: list[Path]) -> list[dict[str, object]]:
    lines = []
    for directory in directories:
        for path in sorted(directory.rglob("ulps-*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a process stopped mid-line
    return lines


def _noise(element: list[float], accumulation: float | None) -> float:
    """The element's noise in ULPs: as judged (None), or rebuilt for another ACCUMULATION from its two parts."""
    if accumulation is None or len(element) < 5 or (element[3] == 0 and element[4] == 0):
        return element[2]
    return element[3] + accumulation * element[4]


def _need(elements: list[list[float]], k: float, accumulation: float | None = None, noise: bool = True) -> float:
    """The c this tensor needs: its largest compiled − k × max(eager, noise) (0 if none is positive)."""
    return max([0.0] + [e[0] - k * (max(e[1], _noise(e, accumulation)) if noise else e[1]) for e in elements])


def _tensors(lines: list[dict[str, object]]) -> list[dict[str, object]]:
    """One entry per judged tensor, in the order each process judged them: its strict record and, where the rule
    was applied again with the measurements, the last such record (the verdict)."""
    entries: list[dict[str, object]] = []
    open_entry: dict[tuple[object, ...], dict[str, object]] = {}
    for line in lines:
        key = _key(line)
        if not line["measured"]:
            open_entry[key] = {"strict": line}
            entries.append(open_entry[key])
        elif key in open_entry:
            open_entry[key]["final"] = line
    # A test may judge the same tensor twice (explain.judge_step: the plain rule first, then with the measurements):
    # an entry without measurements whose tensor was measured later in the same test is that first look.
    measured = {key for key, entry in open_entry.items() if "final" in entry}
    return [entry for entry in entries if "final" in entry or _key(entry["strict"]) not in measured]


def _key(line: dict[str, object]) -> tuple[object, ...]:
    return (line["device"], line["test"], line["label"], line["dtype"], line["numel"])


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    pick = (lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))])  # noqa: E731
    return {"p99": pick(0.99), "p999": pick(0.999), "max": ordered[-1]}


def _kind(entry: dict[str, object]) -> tuple[str, str, str]:
    strict = entry["strict"]
    assert isinstance(strict, dict)
    where = "sweep" if "test_ops" in str(strict["test"]) else "suites"
    return str(strict["device"]), str(strict["dtype"]), where


def report(args: argparse.Namespace) -> None:
    by_kind: dict[tuple[str, str, str], list[dict[str, object]]] = defaultdict(list)
    for entry in _tensors(_read(args.directories)):
        by_kind[_kind(entry)].append(entry)
    summary: dict[str, object] = {}
    for kind, entries in sorted(by_kind.items()):
        final = [e.get("final", e["strict"]) for e in entries]
        figures: dict[str, object] = {"tensors": len(entries), "measured": sum("final" in e for e in entries),
                                      "strict": _quantiles([_need(e["strict"]["elements"], args.k, noise=False)
                                                            for e in entries])}
        for k in KS:
            for accumulation in ACCUMULATIONS:
                figures[f"k={k:g} A={accumulation:g}"] = _quantiles(
                    [_need(f["elements"], k, accumulation) for f in final])
        exact = [e for e in entries if e["strict"]["nonfinite"] or e["strict"]["zero_sign"]]
        figures["nan_inf_or_zero_sign"] = sorted({f"{e['strict']['test']} {e['strict']['label']}" for e in exact})
        ranked = sorted(zip(entries, final, strict=True),
                        key=lambda pair: -_need(pair[1]["elements"], args.k, args.accumulation))
        figures["worst"] = [{"test": f["test"], "label": f["label"], "need": _need(f["elements"], args.k,
                                                                                     args.accumulation),
                             "elements": f["elements"][:2]} for _, f in ranked[: args.top]]
        if args.c is not None:
            red = [f for e, f in zip(entries, final, strict=True) if e["strict"]["nonfinite"]
                   or e["strict"]["zero_sign"] or _need(f["elements"], args.k, args.accumulation) > args.c]
            before = [e for e in entries if _need(e["strict"]["elements"], args.k, noise=False) > args.c]
            figures["red"] = {"k": args.k, "c": args.c, "A": args.accumulation, "red": len(red),
                              "red_without_measurements": len(before),
                              "tests": sorted({f"{f['test']} {f['label']}" for f in red})}
        summary[" ".join(kind)] = figures
    _print(summary, args)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


def _print(summary: dict[str, object], args: argparse.Namespace) -> None:
    columns = [f"k={k:g} A={a:g}" for k in KS for a in ACCUMULATIONS]
    print("| device dtype where | tensors | measured | " + " | ".join(columns) + " | k=2 strict |")
    print("|---" * (len(columns) + 4) + "|")
    for kind, figures in summary.items():
        assert isinstance(figures, dict)
        cells = [f"{figures[c].get('p999', 0):.3g} / {figures[c].get('max', 0):.3g}" for c in columns]
        strict = figures["strict"]
        print(f"| {kind} | {figures['tensors']} | {figures['measured']} | {' | '.join(cells)} | "
              f"{strict.get('p999', 0):.3g} / {strict.get('max', 0):.3g} |")
    print("(each cell: the c that 99.9 % of tensors / every tensor needs; A: the noise's ACCUMULATION)")
    for kind, figures in summary.items():
        assert isinstance(figures, dict)
        print(f"\n{kind}: most c needed at k={args.k:g}, A={args.accumulation:g} "
              "[compiled, eager, noise, rounding part, sums part at A=1 (ULPs)]")
        for entry in figures["worst"]:
            print(f"  {entry['need']:>12.4g} {entry['test']} {entry['label']} "
                  f"{[[round(v, 3) for v in el] for el in entry['elements']]}")
        for test in figures["nan_inf_or_zero_sign"]:
            print(f"  NaN/inf or zero sign: {test}")
        if "red" in figures:
            red = figures["red"]
            print(f"  red at k={red['k']:g}, c={red['c']:g}, A={red['A']:g}: {red['red']} tensors "
                  f"({red['red_without_measurements']} before the noise and nearby measurements)")
            for test in red["tests"]:
                print(f"    {test}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("run")
    runs.add_argument("--device", default="cpu")
    runs.add_argument("--what", choices=("sweep", "suites"), default="sweep")
    runs.add_argument("--shards", type=int, default=16)
    runs.add_argument("--parts", default="", help="which shards of --shards to run (default: all, at once)")
    runs.add_argument("--suites", default=",".join(SUITES))
    runs.add_argument("--select", default="")
    runs.add_argument("--targets", type=Path, default=None)
    runs.add_argument("--timeout", type=float, default=3600.0)
    runs.add_argument("--out", type=Path, required=True)
    reports = commands.add_parser("report")
    reports.add_argument("directories", type=Path, nargs="+")
    reports.add_argument("--k", type=float, default=2.0)
    reports.add_argument("--c", type=float, default=None)
    reports.add_argument("--accumulation", type=float, default=32.0, help="ACCUMULATION to rebuild the noise at")
    reports.add_argument("--top", type=int, default=25)
    reports.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
