"""Which of inductor's op families each case goes through, and so whether inductor compiles it at all.

A case's *route* is its first input traced to ATen with fake tensors under the decomposition table stock torch's
inductor compiles with: the decompositions that fired on the way (``decomposed``) and the ops left in the graph,
which inductor lowers (``lowered``). Routes are stock torch's, taken from copies of the tables made before the
repository's code runs, so they depend only on torch and the device: they are kept in inductor's cache directory
(read as untrusted data, recomputed when anything does not check) and a job routes about 2,800 cases only once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..op_families import family_of
from . import catalog, internals


@dataclass(frozen=True)
class Route:
    lowered: frozenset[str] = frozenset()
    decomposed: frozenset[str] = frozenset()
    problem: str = ""  # why the route is unknown (the trace failed); such a case is kept, never dropped on a guess
    data_dependent: bool = False  # its output shape depends on values: dynamo breaks the graph and eager runs it
    eager_fails: bool = False  # eager itself rejects the input on this device (a CUDA-only kernel on CPU)

    @property
    def families(self) -> frozenset[str]:
        return self.lowered | self.decomposed


@dataclass(frozen=True)
class Tables:
    """Inductor's tables by family, read once per session."""

    lowered: frozenset[str]  # families with a real lowering (not only a fallback to the eager kernel)
    recording: dict[Any, Any]  # inductor's decomposition table, each entry adding its family to `fired` when it runs
    fired: set[str]


@functools.cache
def tables() -> Tables:
    """Stock torch's tables: the first call (plan.take_baseline, before the repository's code) keeps copies."""
    lowerings, fallbacks, decompositions = internals.inductor_tables()
    lowered = {family_of(key) for key in lowerings if key not in fallbacks}
    fired: set[str] = set()
    recording = {op: _recording(op, fn, fired) for op, fn in decompositions.items()}
    return Tables(frozenset(f for f in lowered if f), recording, fired)


def route(case: catalog.OpCase, device: str) -> Route:
    """The families the case's first input goes through; an unknown route when it cannot be traced."""
    try:
        first = next(iter(case.op.reference_inputs(device, case.dtype, requires_grad=False)), None)
    except Exception as exc:  # noqa: BLE001 - an OpInfo whose inputs cannot be made is the test's to report
        return Route(problem=f"its inputs could not be made: {type(exc).__name__}: {exc}")
    if first is None:
        return Route(problem="it has no inputs for this dtype")
    fired = tables().fired
    fired.clear()
    op = case.op.op

    def run(sample_input: Any, args: Any, kwargs: Any) -> Any:
        return op(sample_input, *args, **kwargs)

    try:
        graph = internals.trace_with_decompositions(run, tables().recording, first.input, first.args, first.kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure to trace leaves the route unknown
        if internals.is_fake_tracing_refusal(exc):
            return Route(decomposed=frozenset(fired), data_dependent=True)
        if not _eager_runs(op, first):
            return Route(eager_fails=True)
        return Route(decomposed=frozenset(fired), problem=f"tracing failed: {type(exc).__name__}: {str(exc)[:200]}")
    nodes = {family_of(node.target) for node in graph.graph.nodes if node.op == "call_function"}
    return Route(lowered=frozenset(f for f in nodes if f), decomposed=frozenset(fired))


def _eager_runs(op: Any, sample: Any) -> bool:
    try:
        op(sample.input, *sample.args, **sample.kwargs)
    except Exception:  # noqa: BLE001 - whatever eager raises, there is nothing to compile
        return False
    return True


def routes_for(cases: Iterable[catalog.OpCase], device: str) -> dict[catalog.OpCase, Route]:
    """Every case's route, from the cache where it holds them all for this torch and device."""
    cases = list(cases)
    path = _cache_path(device)
    known = _load(path) if path is not None else {}
    found = {case: known.get(case.test_id) or route(case, device) for case in cases}
    if path is not None and any(case.test_id not in known for case in cases):
        _save(path, {**known, **{case.test_id: r for case, r in found.items()}})
    return found


def _cache_path(device: str) -> Path | None:
    cache_dir = internals.optional("torch._inductor.runtime.cache_dir_utils", "cache_dir")
    if cache_dir is None:
        return None
    sources = b"".join(Path(__file__).with_name(n).read_bytes() for n in ("routes.py", "catalog.py", "internals.py"))
    key = hashlib.sha256(f"{torch.__version__} {device}".encode() + sources).hexdigest()[:20]
    return Path(cache_dir()) / "compile-ci-ops" / f"routes-{key}.json"


def _load(path: Path) -> dict[str, Route]:
    try:
        raw = json.loads(path.read_text()) if path.is_file() and path.stat().st_size < 8 << 20 else {}
        return {test_id: Route(frozenset(lowered), frozenset(decomposed), problem, data_dependent, eager_fails)
                for test_id, (lowered, decomposed, problem, data_dependent, eager_fails) in raw.items()
                if isinstance(test_id, str) and all(isinstance(f, str) for f in (*lowered, *decomposed))
                and isinstance(problem, str) and isinstance(data_dependent, bool) and isinstance(eager_fails, bool)}
    except (OSError, ValueError, TypeError, AttributeError):  # anything unexpected: route again
        return {}


def _save(path: Path, found: dict[str, Route]) -> None:
    raw = {test_id: [sorted(r.lowered), sorted(r.decomposed), r.problem, r.data_dependent, r.eager_fails]
           for test_id, r in found.items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(raw))
        temporary.replace(path)
    except OSError:  # a read-only cache: route again next time
        pass


def compiled_by_inductor(route: Route) -> bool:
    """Whether inductor lowers or decomposes anything of the case (not only hands it to eager's kernel). An unknown
    route counts as compiled: the sweep then runs it and the comparison decides."""
    if route.data_dependent or route.eager_fails:
        return False
    return bool(route.problem) or bool(route.decomposed) or bool(route.lowered & tables().lowered)


def _recording(op: Any, fn: Any, fired: set[str]) -> Any:
    def decomposed(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if result is not NotImplemented:
            family = family_of(op)
            if family:
                fired.add(family)
        return result

    return decomposed
