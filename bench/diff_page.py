"""Server time of a test's base → head diff page, through the Flask app: real inductor code, and the worst a pull
request can leave (every graph file at the 256 KiB read cap, most lines changed).

    python bench/diff_page.py [--requests 10] [--graphs 8]

Seeds a push run (the base) and a PR run naming it in a temporary store (tests/browser/seed.py), writes the code
files, then times GET /jobs/<id>/tests/<name>/diff with Flask's test client (no network): p50 and max per case.
Prints a table and a JSON line. The real case compiles two functions with torch.compile first (tests/inductor_pair.py).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.config import Settings  # noqa: E402
from service.devkit.sandbox.stack import app_keypair  # noqa: E402
from service.store import Store  # noqa: E402
from service.web.app import create_app  # noqa: E402
from suites.naming import sanitise_nodeid  # noqa: E402
from tests.browser.seed import SeededTest, seed_job, seed_run  # noqa: E402
from tests.inductor_pair import compiled_codes, write_codes  # noqa: E402
from tests.rows import force_run  # noqa: E402

NODEID = "correctness/test_correctness.py::test_model[mlp]"


def hostile(seed: int, size: int = 256 * 1024) -> str:
    """Lines of random tokens: few lines in common between two of them, the costly case for a line diff."""
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = " ".join(f"t{rng.randrange(10**6)}" for _ in range(rng.randrange(1, 12)))
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--graphs", type=int, default=8)
    args = parser.parse_args()
    real = compiled_codes()
    cases = {"real inductor code, 1 graph changed": (real["f"], real["g"]),
             f"real inductor code, {args.graphs} graphs, all changed": (real["f"] * args.graphs,
                                                                        real["g"] * args.graphs),
             f"hostile: {args.graphs} graphs of 256 KiB random lines": (
                 [hostile(i) for i in range(args.graphs)], [hostile(100 + i) for i in range(args.graphs)])}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_env({
            "COMPILE_CI_WEBHOOK_SECRET": "bench", "COMPILE_CI_GITHUB_APP_ID": "1",
            "COMPILE_CI_GITHUB_PRIVATE_KEY": app_keypair()[0], "COMPILE_CI_DATA_DIR": tmp,
        })
        store = Store(settings.database_url)
        client = create_app(settings).test_client()
        name = sanitise_nodeid(NODEID)
        for number, (case, (base_codes, head_codes)) in enumerate(cases.items()):
            base_run = seed_run(store, pr=None, branch="main", sha=f"{number}b".ljust(40, "0"))
            base_job = seed_job(settings, store, base_run, [SeededTest(NODEID)])
            run = seed_run(store, pr=number + 1, sha=f"{number}c".ljust(40, "0"))
            force_run(store, run.id, base_sha=base_run.head_sha, base_run_id=base_run.id)
            job = seed_job(settings, store, run, [SeededTest(NODEID)])
            for one, codes in ((base_job, base_codes), (job, head_codes)):
                write_codes(settings.artifacts_dir / one.run_id / one.id / "1" / "tests" / name, codes)
            times, size = [], 0
            for _ in range(args.requests):
                start = time.perf_counter()
                response = client.get(f"/jobs/{job.id}/tests/{name}/diff")
                body = response.get_data()
                times.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, response.status_code
                size = len(body)
            results[case] = {"p50_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1),
                             "page_kib": round(size / 1024)}
    width = max(map(len, results))
    print(f"{'case':<{width}}  p50 ms  max ms  page KiB")
    for case, figures in results.items():
        print(f"{case:<{width}}  {figures['p50_ms']:>6}  {figures['max_ms']:>6}  {figures['page_kib']:>8}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
