"""One test's compile ledger, read from its metrics.json (written by the job: every field checked, bad ones dropped)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

MAX_REASONS = 50  # per list: a test that breaks its graph a thousand times is named by its first 50 reasons
MAX_REASON_CHARS = 500
MAX_COUNT = 10**9
MAX_SECONDS = 10.0**6
RERUN_OUTCOMES = ("failed", "error", "passed", "skipped")


@dataclass(frozen=True)
class Ledger:
    graph_breaks: int | None = None
    recompiles: int | None = None
    compile_time_s: float | None = None
    kernels_generated: int | None = None
    code_bytes: int | None = None
    graph_break_reasons: tuple[str, ...] = ()
    recompile_reasons: tuple[str, ...] = ()
    reruns: tuple[str, ...] = ()  # outcomes of the earlier in-job attempts, when the test was re-run
    dynamo_time_s: float | None = None  # dynamo's share of compile_time_s: the same with a warm cache or a cold one
    fx_graph_cache_hits: int | None = None
    fx_graph_cache_misses: int | None = None

    @property
    def cache(self) -> str | None:
        """How inductor's output came about: "cold" (every graph compiled: FX-graph cache misses only), "warm"
        (every graph loaded from the cache), "mixed", "none" (inductor compiled nothing); None: not recorded."""
        hits, misses = self.fx_graph_cache_hits, self.fx_graph_cache_misses
        if hits is None or misses is None:
            return None
        return {(False, False): "none", (False, True): "cold", (True, False): "warm"}.get((hits > 0, misses > 0),
                                                                                          "mixed")


COUNTS = ("graph_breaks", "recompiles", "kernels_generated", "code_bytes", "fx_graph_cache_hits",
          "fx_graph_cache_misses")
# A cold compile of the same graph takes many times a warm one (C++ or Triton builds against a cache load): compile
# times compare only between two runs whose graphs all came about the same way.
LIKE_FOR_LIKE = ("cold", "warm", "none")


def times_comparable(base: Ledger, head: Ledger) -> bool:
    """Whether the two compile times measure the same work: both cold, both warm, or neither compiled with inductor."""
    return base.cache == head.cache and base.cache in LIKE_FOR_LIKE


def ledger_of(metrics: Mapping[str, object] | None) -> Ledger:
    if not isinstance(metrics, Mapping):
        return Ledger()
    counts = {key: _count(metrics.get(key)) for key in COUNTS}
    return Ledger(
        **counts,  # type: ignore[arg-type]
        compile_time_s=_seconds(metrics.get("compile_time_s")),
        dynamo_time_s=_seconds(metrics.get("dynamo_time_s")),
        graph_break_reasons=_texts(metrics.get("graph_break_reasons")),
        recompile_reasons=_texts(metrics.get("recompile_reasons")),
        reruns=tuple(r for r in _texts(metrics.get("reruns")) if r in RERUN_OUTCOMES),
    )


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def _seconds(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= MAX_SECONDS:
        return float(value) if math.isfinite(value) else None
    return None


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v[:MAX_REASON_CHARS] for v in value[:MAX_REASONS] if isinstance(v, str))


def new_reasons(base: tuple[str, ...], head: tuple[str, ...]) -> list[str]:
    """Head's reasons the base does not have (as a multiset: a second break for the same reason is new too)."""
    left = list(base)
    new = []
    for reason in head:
        if reason in left:
            left.remove(reason)
        else:
            new.append(reason)
    return new
