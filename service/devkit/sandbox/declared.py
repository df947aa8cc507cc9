"""The declared-targets sample as a third repository of the sandbox: all six suites on one device, one PR.

Its models, passes and fused functions are `tests/suites/declared_repo` (the worked example of `[targets]`); the
sandbox makes a git repository of them with a `.compile-ci.toml` that runs every built-in suite on `device`. On a
GPU host (`--devices cpu,cuda --declared`) that is the whole CUDA path: six check runs, Triton kernels on the job
pages. It needs a checkout of compile-ci (the example lives under `tests/`), which is how the sandbox is run.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.devkit.sandbox.deliveries import pull_request_event
from service.devkit.sandbox.sample_repo import _git

EXAMPLE = Path(__file__).resolve().parents[3] / "tests" / "suites" / "declared_repo"
FULL_NAME = "sandbox/declared-zoo"
REPO_ID = 700002
PR_NUMBER = 3
SUITES = ("correctness", "freezing", "layout", "passes", "autograd", "fusion")


@dataclass(frozen=True)
class DeclaredRepo:
    path: Path
    base_sha: str
    head_sha: str
    device: str


def create_declared_repo(path: Path, device: str) -> DeclaredRepo:
    if not (EXAMPLE / "compile-ci.toml").is_file():
        raise FileNotFoundError(f"the declared-targets example is not at {EXAMPLE}: run the sandbox from a checkout")
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    (path / "README.md").write_text("Models, passes and fused functions declared to compile-ci.\n")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "Empty repository")
    base = _git(path, "rev-parse", "HEAD")
    _git(path, "checkout", "-q", "-b", "declare-targets")
    shutil.copytree(EXAMPLE / "zoo", path / "zoo", ignore=shutil.ignore_patterns("__pycache__"))
    targets = (EXAMPLE / "compile-ci.toml").read_text()
    suites = ", ".join(f'"{s}"' for s in SUITES)
    (path / ".compile-ci.toml").write_text(
        f'{targets}\n[suites]\nrun = [{suites}]\ndevices = ["{device}"]\ntimeout_minutes = 20\n')
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "Declare models, passes and fused functions")
    head = _git(path, "rev-parse", "HEAD")
    _git(path, "checkout", "-q", "main")
    return DeclaredRepo(path, base, head, device)


def open_declared_pull_request(stack: Any, device: str, post: Any) -> DeclaredRepo:
    """Create the repository on the emulated GitHub and open its pull request (``post(stack, event, payload)``)."""
    from service.devkit.sandbox.stack import INSTALLATION_ID

    repo = create_declared_repo(stack.root / "repos" / FULL_NAME, device)
    stack.emulator.add_repo(FULL_NAME)
    stack.emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    stack.emulator.add_pull(FULL_NAME, PR_NUMBER, repo.head_sha, "declare-targets", "main", "octocat", "OWNER")
    payload = pull_request_event(
        "opened", full_name=FULL_NAME, repo_id=REPO_ID, clone_url=f"https://github.com/{FULL_NAME}.git",
        installation_id=INSTALLATION_ID, number=PR_NUMBER, head_sha=repo.head_sha, head_ref="declare-targets",
        base_sha=repo.base_sha,
    )
    status, answer = post(stack, "pull_request", payload)
    print(f"  POST /webhook pull_request.opened {FULL_NAME} PR #{PR_NUMBER} -> {status} {answer.get('messages')}",
          flush=True)
    return repo


def generated_code_summary(artifacts: Path, device: str) -> dict[str, int]:
    """Per job (`<run> <suite>`): how many generated-code files its last attempt kept, and how many hold Triton
    kernels (cuda) or C++ kernels (cpu): the job pages list exactly these files."""
    marker = "@triton.jit" if device == "cuda" else "cpp_fused"
    summary: dict[str, int] = {}
    for job_dir in sorted(p for p in artifacts.glob("*/*") if p.name.endswith(f"-{device}") and p.is_dir()):
        attempts = sorted((p for p in job_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        if not attempts:
            continue
        files = list(attempts[-1].glob("tests/*/output_code_*.py"))
        with_kernels = sum(1 for f in files if marker in f.read_text(errors="replace"))
        job = f"{job_dir.parent.name[:6]} {job_dir.name.rsplit('-', 1)[0].split('-', 1)[-1]}"
        summary[f"{job}: files"] = len(files)
        summary[f"{job}: with kernels"] = with_kernels
    return summary


def save_pages(web_url: str, check_runs: list[dict[str, Any]], device: str, dest: Path) -> list[str]:
    """Save each `device` check run's job page, and the test page of its first test with generated code, under
    `dest`; return one line per job: what its pages show (kernels counted in the test page's highlighted code)."""
    import re
    import urllib.request

    def get(url: str) -> str:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read().decode("utf-8", "replace")

    dest.mkdir(parents=True, exist_ok=True)
    marker = "triton.jit" if device == "cuda" else "cpp_fused"
    lines = []
    for run in sorted((r for r in check_runs if r["name"].endswith(f"({device})")), key=lambda r: r["id"]):
        if run["conclusion"] == "neutral":
            continue
        page = get(run["details_url"])
        stem = re.sub(r"[^a-z0-9]+", "-", f"{run['head_sha'][:8]} {run['name']}".lower()).strip("-")
        (dest / f"{stem}.html").write_text(page)
        links = re.findall(r'href="([^"]+/tests/[^"]+)"', page)
        kernels = 0
        for link in links:
            test_page = get(web_url + link if link.startswith("/") else link)
            text = re.sub(r"<[^>]+>", "", test_page)
            kernels = text.count(marker)
            if kernels:
                (dest / f"{stem}-test.html").write_text(test_page)
                break
        lines.append(f"{run['name']:<20} {run['conclusion']:<8} job page lists {len(links)} tests with artifacts; "
                     f"first test page with code shows {kernels} × {marker}")
    return lines
